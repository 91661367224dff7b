package starter_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"

	"github.com/sfnlimit/sfnlimit/internal/lambda/batch"
	"github.com/sfnlimit/sfnlimit/internal/lambda/batchend"
	"github.com/sfnlimit/sfnlimit/internal/lambda/deadletter"
	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lane"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
	"github.com/sfnlimit/sfnlimit/internal/tools/fakes"
)

type nopBus struct{}

func (nopBus) PutEvents(context.Context, *eventbridge.PutEventsInput, ...func(*eventbridge.Options)) (*eventbridge.PutEventsOutput, error) {
	return &eventbridge.PutEventsOutput{}, nil
}

// The starter's claim carries the job's batch into the lease (so every release can record it), and
// a lanes-queue message the starter refuses is counted in its batch as refused, once however often
// it is delivered.
func TestStarterCarriesTheBatch(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, nil)
	ledger := batch.New(fakes.NewDynamoDB("t"), "t")
	tracker := batchend.New(ledger, nopBus{}, "s", fakes.Logger(t))
	r.st.DLQ = batchend.DeadLetters{Next: deadletter.New(r.sqs, dlqURL), Tracker: tracker}
	if err := ledger.Open(ctx, "up", 2, t0); err != nil {
		t.Fatal(err)
	}
	good := message(t, "reports-1", "r-1", `{"type":"reports","id":"r-1","batch":"up","input":{}}`, 1)
	bad := message(t, "reports-2", "r-2", `{"type":"reports","id":"r-2","batch":"up","priority":12,"input":{}}`, 1)
	for range 2 { // the bad message delivered twice
		if _, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{good, bad}}); err != nil {
			t.Fatal(err)
		}
	}
	l, ok := r.leases.Lease(lease.Key{Type: "reports", Lane: 1})
	if !ok || l.Batch != "up" {
		t.Errorf("lease of r-1 = %+v (found %v), want batch up", l, ok)
	}
	sum, _, err := ledger.Show(ctx, "up", false)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Recorded != 1 || sum.Counts[batch.Refused] != 1 || sum.Closed {
		t.Errorf("batch recorded %d (refused %d), closed %v; want r-2 refused once, open", sum.Recorded, sum.Counts[batch.Refused], sum.Closed)
	}
}

// A job's lease was deleted by hand while its attempt ran (docs/design.md: "Deleting a lease by hand
// therefore loses no attempt"); the attempt then succeeded, and its release found no lease to act on
// (nothing recorded). Meanwhile the free lane was bound to another job. The job's message comes back
// to that lane: the starter finds that this message's last attempt succeeded and acknowledges it:
// the job has ended, so it must be counted in its batch, or the batch never closes.
func TestJobEndedAtALaneBoundToAnotherIsCounted(t *testing.T) {
	ctx := context.Background()
	r := newRigStrategy(t, nil, lane.FirstFree)
	ledger := batch.New(fakes.NewDynamoDB("t"), "t")
	tracker := batchend.New(ledger, nopBus{}, "s", fakes.Logger(t))
	r.rel.Batches = tracker
	r.st.DLQ = batchend.DeadLetters{Next: deadletter.New(r.sqs, dlqURL), Tracker: tracker}
	r.rel.DLQ = r.st.DLQ
	if err := ledger.Open(ctx, "up", 1, t0); err != nil {
		t.Fatal(err)
	}
	r.leases.Set(boundLease("reports", 2, "other"))
	j := job.Job{Type: "reports", ID: "r-1", Batch: "up", Input: json.RawMessage(`{}`), SubmittedAt: submitted}
	in := j.ExecutionInput(2, 1)
	in.Job.MessageID = "msg-r-1" // started by this very message, in lane 2
	r.sfn.Put(fakes.Execution{StateMachineArn: smArn, Name: execName("reports", "r-1", 1), Status: sfntypes.ExecutionStatusSucceeded, Input: string(in.MustJSON())})
	body, _ := json.Marshal(j)
	resp, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{message(t, "reports-2", "r-1", string(body), 2)}})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.BatchItemFailures) != 0 {
		t.Fatalf("failures %v, want r-1's message acknowledged (its last attempt succeeded)", failures(resp))
	}
	sum, _, err := ledger.Show(ctx, "up", false)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Recorded != 1 || !sum.Closed {
		t.Errorf("batch up: %d recorded, closed %v; want r-1's success counted and the batch closed", sum.Recorded, sum.Closed)
	}
}
