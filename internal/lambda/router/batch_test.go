package router_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"

	"github.com/sfnlimit/sfnlimit/internal/lambda/batch"
	"github.com/sfnlimit/sfnlimit/internal/lambda/batchend"
	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/tools/fakes"
)

type bus struct {
	events []ebtypes.PutEventsRequestEntry
}

func (b *bus) PutEvents(_ context.Context, in *eventbridge.PutEventsInput, _ ...func(*eventbridge.Options)) (*eventbridge.PutEventsOutput, error) {
	b.events = append(b.events, in.Entries...)
	return &eventbridge.PutEventsOutput{}, nil
}

// The router opens a job's batch from its batchSize, waits a few deliveries for a batch nobody has
// opened yet, then refuses the job; it refuses a job giving another size than the open batch's, and
// counts refused jobs in their batches, opening a batch for a refused job that carries its size.
func TestRouterBatches(t *testing.T) {
	ctx := context.Background()
	ev := loadEvent(t, "sqs-batches.json")
	ledger := batch.New(fakes.NewDynamoDB("t"), "t")
	b := &bus{}
	tracker := batchend.New(ledger, b, "s", slog.New(slog.DiscardHandler))
	sender, dlq := &fakeSender{}, &fakeDLQ{}
	r := newRouter(&fakeConfig{limits: limits}, sender, nil, nil)
	r.DLQ = batchend.DeadLetters{Next: dlq, Tracker: tracker}
	r.Batches = tracker

	resp, err := r.Handle(ctx, ev)
	if err != nil {
		t.Fatal(err)
	}
	var failed []string
	for _, f := range resp.BatchItemFailures {
		failed = append(failed, f.ItemIdentifier)
	}
	// p-2's batch is not open yet (first delivery): it comes back later.
	if want := []string{"b0000000-0000-4000-8000-000000000002"}; !slices.Equal(failed, want) {
		t.Errorf("batch item failures %v, want %v", failed, want)
	}
	var routed []string
	for _, e := range sender.entries() {
		var j job.Job
		if err := json.Unmarshal([]byte(aws.ToString(e.MessageBody)), &j); err != nil {
			t.Fatal(err)
		}
		routed = append(routed, j.ID+"@"+j.Batch)
	}
	if want := []string{"p-1@upload-1"}; !slices.Equal(routed, want) {
		t.Errorf("routed %v, want %v (with its batch in the lanes body)", routed, want)
	}
	reasons := map[string]string{}
	for _, e := range dlq.sent {
		reasons[e.JobID] = e.Reason
		if e.Batch == "" {
			t.Errorf("dead letter of %s has no batch", e.JobID)
		}
	}
	want := map[string]string{
		"p-3": string(job.ReasonBatchNotOpen), "p-4": string(job.ReasonInvalidBatch),
		"n-1": string(job.ReasonUnknownType), "k-1": string(job.ReasonInvalidKey),
	}
	if len(reasons) != len(want) {
		t.Errorf("dead letters %v, want %v", reasons, want)
	}
	for id, r := range want {
		if reasons[id] != r {
			t.Errorf("dead letter of %s: reason %q, want %q", id, reasons[id], r)
		}
	}
	up, _, err := ledger.Show(ctx, "upload-1", false)
	if err != nil {
		t.Fatal(err)
	}
	// p-4 (another size) and n-1 (unknown type) are refused jobs of upload-1.
	if up.Expected != 3 || up.Counts[batch.Refused] != 2 || up.Closed {
		t.Errorf("upload-1: expected %d, refused %d, closed %v; want 3, 2, open", up.Expected, up.Counts[batch.Refused], up.Closed)
	}
	solo, _, err := ledger.Show(ctx, "solo", false)
	if err != nil {
		t.Fatal(err)
	}
	if !solo.Closed || solo.Counts[batch.Refused] != 1 || len(b.events) != 1 {
		t.Errorf("solo: closed %v refused %d, %d events; want closed by its refused job, 1 event", solo.Closed, solo.Counts[batch.Refused], len(b.events))
	}
	if _, _, err := ledger.Show(ctx, "never-opened", false); err == nil {
		t.Error("never-opened was opened")
	}
}
