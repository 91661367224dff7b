package router_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/sfnlimit/sfnlimit/internal/lambda/batch"
	"github.com/sfnlimit/sfnlimit/internal/lambda/batchend"
	"github.com/sfnlimit/sfnlimit/internal/tools/fakes"
)

// A job without an id is named by its general-queue message id, in its batch as everywhere. The
// router's dead letter keeps the body byte for byte, so a redrive of a refused id-less job is a new
// message with a new id: the same job is counted a second time, and its batch (two jobs here: the
// refused one and q-1, which has not ended) closes while q-1 still runs.
func TestRedrivenRefusalWithoutIDIsCountedOnce(t *testing.T) {
	ctx := context.Background()
	ledger := batch.New(fakes.NewDynamoDB("t"), "t")
	b := &bus{}
	tracker := batchend.New(ledger, b, "s", slog.New(slog.DiscardHandler))
	dlq := &fakeDLQ{}
	r := newRouter(&fakeConfig{limits: limits}, &fakeSender{}, nil, nil)
	r.DLQ = batchend.DeadLetters{Next: dlq, Tracker: tracker}
	r.Batches = tracker
	msg := func(id, body string) events.SQSMessage {
		return events.SQSMessage{MessageId: id, Body: body, Attributes: map[string]string{"ApproximateReceiveCount": "1", "SentTimestamp": "1709978500000"}}
	}
	first := []events.SQSMessage{
		msg("c0000000-0000-4000-8000-000000000001", `{"type":"payments","id":"q-1","batch":"up","batchSize":2,"input":{}}`),
		msg("c0000000-0000-4000-8000-000000000002", `{"type":"nosuch","batch":"up","batchSize":2,"input":{}}`),
	}
	if _, err := r.Handle(ctx, events.SQSEvent{Records: first}); err != nil {
		t.Fatal(err)
	}
	if len(dlq.sent) != 1 {
		t.Fatalf("%d dead letters, want the unknown type's", len(dlq.sent))
	}
	// `sfnlimit dlq redrive`: the dead letter's body, unchanged, in a new general-queue message.
	redriven := msg("c0000000-0000-4000-8000-000000000003", dlq.sent[0].Body)
	if _, err := r.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{redriven}}); err != nil {
		t.Fatal(err)
	}
	sum, _, err := ledger.Show(ctx, "up", false)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Recorded != 1 || sum.Closed || len(b.events) != 0 {
		t.Errorf("batch up: %d recorded, closed %v, %d events; want the one refused job counted once, open while q-1 runs",
			sum.Recorded, sum.Closed, len(b.events))
	}
}

// docs/design.md, "Batches": "A refused job that carries batchSize opens its batch first, so a batch
// whose first job is bad still closes." A job refused for its type loses its batchSize on the way
// (job.Parse keeps only its id, batch and redrive): the router waits for someone else to open the
// batch, here nobody, and refuses it batch_not_open at its third delivery, uncounted.
func TestRefusedForItsTypeOpensItsBatch(t *testing.T) {
	ctx := context.Background()
	ledger := batch.New(fakes.NewDynamoDB("t"), "t")
	b := &bus{}
	tracker := batchend.New(ledger, b, "s", slog.New(slog.DiscardHandler))
	dlq := &fakeDLQ{}
	r := newRouter(&fakeConfig{limits: limits}, &fakeSender{}, nil, nil)
	r.DLQ = batchend.DeadLetters{Next: dlq, Tracker: tracker}
	r.Batches = tracker
	m := events.SQSMessage{MessageId: "c0000000-0000-4000-8000-000000000009", Body: `{"type":"bad-type","id":"t-1","batch":"one","batchSize":1,"input":{}}`,
		Attributes: map[string]string{"ApproximateReceiveCount": "1", "SentTimestamp": "1709978500000"}}
	resp, err := r.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{m}})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.BatchItemFailures) != 0 || len(dlq.sent) != 1 {
		t.Errorf("failures %v, %d dead letters; want the job refused at once", resp.BatchItemFailures, len(dlq.sent))
	}
	sum, _, err := ledger.Show(ctx, "one", false)
	if err != nil {
		t.Fatalf("batch one: %v; want it opened by its refused job", err)
	}
	if !sum.Closed || sum.Counts[batch.Refused] != 1 || len(b.events) != 1 {
		t.Errorf("batch one: closed %v, refused %d, %d events; want closed by its refused job, 1 event", sum.Closed, sum.Counts[batch.Refused], len(b.events))
	}
}
