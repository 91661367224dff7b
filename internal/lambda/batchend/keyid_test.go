package batchend_test

import (
	"context"
	"testing"

	"github.com/sfnlimit/sfnlimit/internal/lambda/batch"
	"github.com/sfnlimit/sfnlimit/internal/lambda/batchend"
	"github.com/sfnlimit/sfnlimit/internal/lambda/deadletter"
)

// A job is its type, key and id: two keys' jobs with one id are two of their batch's jobs, and
// each is counted once however often its end is recorded; a dead letter counts under its key too.
func TestTwoKeysOfOneIDAreTwoJobsOfTheBatch(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	r.open(t, "b", 3)
	for _, e := range []batchend.End{
		{Batch: "b", Type: "docs", Key: "acme", ID: "d-1", Outcome: batch.Succeeded},
		{Batch: "b", Type: "docs", Key: "acme", ID: "d-1", Outcome: batch.Succeeded}, // a duplicate
		{Batch: "b", Type: "docs", Key: "beta", ID: "d-1", Outcome: batch.Succeeded},
	} {
		if err := r.tracker.Ended(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	if sum, _, err := r.ledger.Show(ctx, "b", false); err != nil || sum.Closed || sum.Recorded != 2 {
		t.Fatalf("batch = %+v, %v; want 2 of 3 recorded (acme's and beta's d-1), open", sum, err)
	}
	dl := batchend.DeadLetters{Next: &dlq{}, Tracker: r.tracker}
	if err := dl.Send(ctx, deadletter.Entry{Reason: "attempts_exhausted", Type: "docs", JobID: "d-1", Batch: "b"}); err != nil {
		t.Fatal(err)
	}
	if sum, _, err := r.ledger.Show(ctx, "b", false); err != nil || !sum.Closed || sum.Recorded != 3 {
		t.Errorf("batch = %+v, %v; want closed with 3 recorded (the default key's d-1 is a third job)", sum, err)
	}
}
