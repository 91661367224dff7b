package batchend_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/eventbridge"

	"github.com/sfnlimit/sfnlimit/internal/lambda/batch"
	"github.com/sfnlimit/sfnlimit/internal/lambda/batchend"
	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/tools/fakes"
)

// hookBus counts events; during its first PutEvents it runs during (another caller's work done
// while the first sender is between its record and its announcement).
type hookBus struct {
	mu     sync.Mutex
	n      int
	during func()
}

func (b *hookBus) PutEvents(context.Context, *eventbridge.PutEventsInput, ...func(*eventbridge.Options)) (*eventbridge.PutEventsOutput, error) {
	b.mu.Lock()
	b.n++
	first := b.n == 1
	b.mu.Unlock()
	if first && b.during != nil {
		b.during()
	}
	return &eventbridge.PutEventsOutput{}, nil
}

// Two releases of the batch's last job at once (the workflow's Release step and the sweep, or a
// SUCCEEDED status event in events mode): nothing crashed, so the batch must be announced once
// (docs/design.md, "Batches": "at least once in that case [a crash], exactly once otherwise"). The
// second release meets the closer's record while the first sends the event, and the ledger answers
// it Closed (closed by this job, not announced yet): it sends the event a second time.
func TestConcurrentEndsOfTheClosingJobAnnounceOnce(t *testing.T) {
	ctx := context.Background()
	ledger := batch.New(fakes.NewDynamoDB("t"), "t")
	b := &hookBus{}
	tr := batchend.New(ledger, b, "stack-1", slog.New(slog.DiscardHandler))
	tr.AnnounceWait = 100 * time.Millisecond
	if err := tr.Admit(ctx, job.Job{Type: "docs", ID: "a", Batch: "up", BatchSize: 1}); err != nil {
		t.Fatal(err)
	}
	end := batchend.End{Batch: "up", Type: "docs", ID: "a", Outcome: batch.Succeeded}
	var second error
	b.during = func() { second = tr.Ended(ctx, end) }
	if err := tr.Ended(ctx, end); err != nil {
		t.Fatal(err)
	}
	// The second end finds the first sending: it may fail, to be retried (its lane held that long),
	// but it sends nothing; its retry, once the batch is announced, is a plain duplicate.
	if second != nil {
		t.Logf("second release, concurrent with the sender: %v (retried below)", second)
		if err := tr.Ended(ctx, end); err != nil {
			t.Fatalf("second release retried after the announcement: %v", err)
		}
	}
	if b.n != 1 {
		t.Errorf("%d completion events for two concurrent releases of the closing job, want 1", b.n)
	}
}

// docs/design.md, "Batches": a job without batchSize has its batch checked "(one consistent read per
// batch per router process)". Admit reads the batch's whole summary instead: every shard, and the
// dead and late jobs' queries, some 260 reads for a large batch, in the router's handler, on every
// router process's first job of every batch.
func TestAdmitChecksABatchWithOneRead(t *testing.T) {
	ctx := context.Background()
	db := fakes.NewDynamoDB("t")
	ledger := batch.New(db, "t")
	if err := ledger.Open(ctx, "big", 100_000, time.Now()); err != nil {
		t.Fatal(err)
	}
	calls := 0
	db.OnCall = func(string) error { calls++; return nil }
	tr := batchend.New(batch.New(db, "t"), &hookBus{}, "s", slog.New(slog.DiscardHandler)) // a new router process
	if err := tr.Admit(ctx, job.Job{Type: "docs", ID: "a", Batch: "big"}); err != nil {
		t.Fatal(err)
	}
	if calls != 1 {
		t.Errorf("Admit of a job of an open batch made %d DynamoDB calls, want 1", calls)
	}
}
