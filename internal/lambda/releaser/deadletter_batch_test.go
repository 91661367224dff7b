package releaser_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/eventbridge"

	"github.com/sfnlimit/sfnlimit/internal/lambda/batch"
	"github.com/sfnlimit/sfnlimit/internal/lambda/batchend"
	"github.com/sfnlimit/sfnlimit/internal/lambda/deadletter"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
	"github.com/sfnlimit/sfnlimit/internal/lambda/releaser"
	"github.com/sfnlimit/sfnlimit/internal/tools/fakes"
)

// flakyEvents fails the first fail PutEvents calls, and counts the rest.
type flakyEvents struct {
	mu         sync.Mutex
	fail, sent int
}

func (f *flakyEvents) PutEvents(context.Context, *eventbridge.PutEventsInput, ...func(*eventbridge.Options)) (*eventbridge.PutEventsOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail > 0 {
		f.fail--
		return nil, errors.New("InternalException: injected")
	}
	f.sent++
	return &eventbridge.PutEventsOutput{}, nil
}

// The last attempt of a batch's last job fails, and the completion event its dead letter sends
// fails once (EventBridge, or the ledger, failing like any call). The release fails and is
// retried; the retry must dead-letter the job and close the batch at once, not find a dead-lettering
// lease left by the failed try and leave the lane held, and the batch open, until
// DeadLetterTakeover (TestBatchUnderFaults met a 2-minute wait): the batch is recorded before the
// lease's status changes, like the input read (TestDeadLetterAfterAFailedInputRead).
func TestDeadLetterAfterAFailedBatchRecord(t *testing.T) {
	r := newRig(t)
	ev := &flakyEvents{fail: 1}
	ledger := batch.New(fakes.NewDynamoDB("t"), "t")
	ctx := context.Background()
	if err := ledger.Open(ctx, "b", 1, t0); err != nil {
		t.Fatal(err)
	}
	tracker := batchend.New(ledger, ev, "stack", fakes.Logger(t))
	r.svc.Now = r.clock.Now // the lease store stamps leases with the clock
	r.svc.Batches = tracker
	r.svc.DLQ = batchend.DeadLetters{Next: deadletter.New(r.sqs, dlqURL), Tracker: tracker}
	l := held("reports", 1, "r-1001", 3, lease.Starting)
	l.Batch = "b"
	r.leases.Set(l)
	r.sfn.Put(execution("reports", 1, "r-1001", 3, `{"seconds":3}`, "FAILED", "JobFailed", ""))

	give := req("reports", 1, "r-1001", 3, releaser.Failed, "JobFailed", "")
	if _, err := r.svc.Release(ctx, give); err == nil {
		t.Fatalf("Release() with the completion event failing = nil error, want one (to be retried)")
	}
	got, err := r.svc.Release(ctx, give) // the workflow's Release step retries at once
	if err != nil || got != releaser.DeadLettered {
		t.Fatalf("retried Release() = %q, %v; want dead-lettered at once", got, err)
	}
	if dead := r.sqs.Sent(dlqURL); len(dead) != 1 {
		t.Errorf("dead letters = %+v, want one", dead)
	}
	if l, ok := r.leases.Lease(lease.Key{Type: "reports", Lane: 1}); ok {
		t.Errorf("lane keeps lease %+v, want it free", l)
	}
	sum, _, err := ledger.Show(ctx, "b", false)
	if err != nil {
		t.Fatal(err)
	}
	if !sum.Closed || !sum.Announced || sum.Counts[batch.DeadLettered] != 1 || ev.sent != 1 {
		t.Errorf("batch closed %v, announced %v, counts %v, %d events; want closed and announced once with 1 dead-lettered", sum.Closed, sum.Announced, sum.Counts, ev.sent)
	}
}
