package batchend_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"

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
	if err := tr.Admit(ctx, job.Job{Type: "docs", ID: "a", Batch: "up", BatchSize: 1}); err != nil {
		t.Fatal(err)
	}
	end := batchend.End{Batch: "up", Type: "docs", ID: "a", Outcome: batch.Succeeded}
	var second error
	b.during = func() { second = tr.Ended(ctx, end) }
	if err := tr.Ended(ctx, end); err != nil {
		t.Fatal(err)
	}
	if second != nil {
		t.Fatalf("second release: %v", second)
	}
	if b.n != 1 {
		t.Errorf("%d completion events for two concurrent releases of the closing job, want 1", b.n)
	}
}
