package router_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"

	"github.com/sfnlimit/sfnlimit/internal/lambda/batch"
	"github.com/sfnlimit/sfnlimit/internal/lambda/batchend"
	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/lambda/router"
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
	g := newBatchRig()
	ledger, b, sender, dlq, r := g.ledger, g.bus, g.sender, g.dlq, g.r

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

// A job without an id is named by its general-queue message id, in its batch as everywhere. The
// router's dead letter keeps the body byte for byte, so a redrive of a refused id-less job is a new
// message with a new id: the same job is counted a second time, and its batch (two jobs here: the
// refused one and q-1, which has not ended) closes while q-1 still runs.
func TestRedrivenRefusalWithoutIDIsCountedOnce(t *testing.T) {
	ctx := context.Background()
	g := newBatchRig()
	ledger, b, dlq, r := g.ledger, g.bus, g.dlq, g.r
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
	g := newBatchRig()
	ledger, b, dlq, r := g.ledger, g.bus, g.dlq, g.r
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

// downBus is EventBridge refusing every PutEvents while down, as in an outage.
type downBus struct {
	bus
	down bool
}

func (d *downBus) PutEvents(ctx context.Context, in *eventbridge.PutEventsInput, o ...func(*eventbridge.Options)) (*eventbridge.PutEventsOutput, error) {
	if d.down {
		return nil, errors.New("InternalException: injected outage")
	}
	return d.bus.PutEvents(ctx, in, o...)
}

// Issue 22, defect 4: a refused job closes its batch while EventBridge refuses the completion
// event. The router reported the message failed so that its next delivery would send the event;
// with EventBridge down through the general queue's maxReceiveCount deliveries (seed 109 of the
// simulation's events profile), SQS moved the message to the dead-letter queue without a reason,
// and the batch stayed closed and never announced. The refusal takes effect now (its dead letter,
// with its reason, and the message acknowledged) and the event is left to the sweep: the batch is
// on the ledger's pending list, written with the close.
func TestRefusalClosingABatchWhileEventBridgeIsDown(t *testing.T) {
	ctx := context.Background()
	ledger := batch.New(fakes.NewDynamoDB("t"), "t")
	eb := &downBus{down: true}
	tracker := batchend.New(ledger, eb, "s", slog.New(slog.DiscardHandler))
	dlq := &fakeDLQ{}
	r := newRouter(&fakeConfig{limits: limits}, &fakeSender{}, nil, nil)
	r.DLQ = batchend.DeadLetters{Next: dlq, Tracker: tracker}
	r.Batches = tracker
	m := events.SQSMessage{MessageId: "c0000000-0000-4000-8000-000000000021", Body: `{"type":"nosuch","id":"z-1","batch":"last","batchSize":1,"input":{}}`,
		Attributes: map[string]string{"ApproximateReceiveCount": "4", "SentTimestamp": "1709978500000"}}
	resp, err := r.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{m}})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.BatchItemFailures) != 0 {
		t.Errorf("batch item failures %v, want none: a failed message comes back until SQS moves it to the dead-letter queue without a reason", resp.BatchItemFailures)
	}
	if len(dlq.sent) != 1 || dlq.sent[0].Reason != string(job.ReasonUnknownType) {
		t.Errorf("dead letters %+v, want z-1's, reason %s", dlq.sent, job.ReasonUnknownType)
	}
	sum, _, err := ledger.Show(ctx, "last", false)
	if err != nil {
		t.Fatal(err)
	}
	if !sum.Closed || sum.Announced || sum.Counts[batch.Refused] != 1 || len(eb.events) != 0 {
		t.Errorf("batch last: closed %v, announced %v, refused %d, %d events; want closed by z-1, its event not sent yet",
			sum.Closed, sum.Announced, sum.Counts[batch.Refused], len(eb.events))
	}
}

// A batch belongs to the sender of the job that opened it (its SenderId's principal): another
// sender's jobs naming it, well-formed or junk, are refused as batch_not_owned, dead-lettered
// outside the batch, and never counted in it, so they can neither close it (no false Batch
// Completed) nor fill it. A predictable id opened first by another sender refuses the owner's jobs
// the same way. A job the router held keeps its first sender, trusted on the router's own copy
// only: a producer naming the owner in that attribute is still itself.
func TestRouterBatchBelongsToItsOpener(t *testing.T) {
	ctx := context.Background()
	g := newBatchRig()
	ledger, b, sender, dlq, r := g.ledger, g.bus, g.sender, g.dlq, g.r
	r.Self = "AROAROUTER"
	const owner, mallory = "AIDAOWNER", "AROAMALLORY:tenant-b"
	n := 0
	msg := func(from, body string, attrs map[string]string) events.SQSMessage {
		n++
		m := events.SQSMessage{MessageId: fmt.Sprintf("d0000000-0000-4000-8000-%012d", n), Body: body, Attributes: map[string]string{
			"ApproximateReceiveCount": "1", "SentTimestamp": "1709978500000", "SenderId": from,
		}}
		for k, v := range attrs {
			m.MessageAttributes = map[string]events.SQSMessageAttribute{k: {DataType: "String", StringValue: aws.String(v)}}
		}
		return m
	}
	recs := []events.SQSMessage{
		msg(owner, `{"type":"payments","id":"o-1","batch":"up","batchSize":2,"input":{}}`, nil),
		msg(mallory, `{"type":"nosuch","id":"m-1","batch":"up","input":{}}`, nil),
		msg(mallory, `{"type":"payments","id":"m-2","batch":"up","batchSize":2,"input":{}}`, nil),
		msg(mallory, `{"type":"payments","id":"m-3","batch":"up","input":{}}`, map[string]string{router.SenderAttribute: owner}),
		msg(mallory, `{"type":"payments","id":"m-4","batch":"guess","batchSize":9,"input":{}}`, nil),
		msg(owner, `{"type":"payments","id":"o-9","batch":"guess","batchSize":2,"input":{}}`, nil),
		// The router's own copy of the owner's held job.
		msg("AROAROUTER:sfnlimit-RouterFunction", `{"type":"payments","id":"o-2","batch":"up","input":{}}`, map[string]string{router.SenderAttribute: owner}),
		// An operator's redrive of a job of the batch, and another sender's claim to one: both run
		// outside the batch, which counted the job's first end already and never counts theirs.
		msg("AROAOPERATOR:alice", `{"type":"payments","id":"o-3","batch":"up","redrive":1,"input":{}}`, nil),
		msg(mallory, `{"type":"payments","id":"m-5","batch":"up","redrive":1,"input":{}}`, nil),
	}
	resp, err := r.Handle(ctx, events.SQSEvent{Records: recs})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.BatchItemFailures) != 0 {
		t.Errorf("batch item failures %+v, want none", resp.BatchItemFailures)
	}
	var routed []string
	for _, e := range sender.entries() {
		var j job.Job
		if err := json.Unmarshal([]byte(aws.ToString(e.MessageBody)), &j); err != nil {
			t.Fatal(err)
		}
		routed = append(routed, j.ID)
		if j.Redrive > 0 && j.Batch != "" {
			t.Errorf("redriven %s routed in batch %q, want outside it (its sender does not own it)", j.ID, j.Batch)
		}
	}
	slices.Sort(routed)
	if want := []string{"m-4", "m-5", "o-1", "o-2", "o-3"}; !slices.Equal(routed, want) {
		t.Errorf("routed %v, want %v", routed, want)
	}
	refused := map[string]string{}
	for _, e := range dlq.sent {
		refused[e.JobID] = e.Reason
		if e.Batch != "" {
			t.Errorf("dead letter of %s names batch %q, want none (not counted there)", e.JobID, e.Batch)
		}
	}
	notOwned := string(job.ReasonBatchNotOwned)
	if want := map[string]string{"m-1": notOwned, "m-2": notOwned, "m-3": notOwned, "o-9": notOwned}; !maps.Equal(refused, want) {
		t.Errorf("refused %v, want %v", refused, want)
	}
	up, _, err := ledger.Show(ctx, "up", false)
	if err != nil {
		t.Fatal(err)
	}
	if up.Owner != owner || up.Expected != 2 || up.Recorded != 0 || up.Closed || len(b.events) != 0 {
		t.Errorf("up: owner %q, expected %d, recorded %d, closed %v, %d events; want %s's, 2, 0, open, none",
			up.Owner, up.Expected, up.Recorded, up.Closed, len(b.events), owner)
	}
}

// openAfterCheck is a batch admitter whose batch is opened by its owner right after the check
// that found it not open: the owner's first job (or `batch open`) landing between another
// sender's check and its refusal's record.
type openAfterCheck struct {
	*batchend.Tracker
	ledger *batch.Ledger
	owner  string
}

func (o openAfterCheck) Admit(ctx context.Context, j job.Job, sender string) error {
	err := o.Tracker.Admit(ctx, j, sender)
	if errors.Is(err, batch.ErrNotOpen) {
		if oerr := o.ledger.OpenBy(ctx, j.Batch, 1, o.owner, time.Now()); oerr != nil {
			panic(oerr)
		}
	}
	return err
}

// A job naming a batch nobody has opened is refused at its third delivery (batch_not_open), and
// its refusal is counted in the batch if it is open by the time the refusal is recorded. The
// check found no owner, so whoever opened the batch in between owns a count it never sent:
// another sender's junk job is counted in it as refused, and here closes it (a false Batch
// Completed) before the owner's one job ran. A refusal is counted only in its sender's batch.
func TestRouterBatchNotOpenRefusalIsNotCountedInAnotherSendersBatch(t *testing.T) {
	ctx := context.Background()
	g := newBatchRig()
	ledger, b, tracker, r := g.ledger, g.bus, g.tracker, g.r
	const owner, mallory = "AIDAOWNER", "AROAMALLORY:tenant-b"
	r.Batches = openAfterCheck{Tracker: tracker, ledger: ledger, owner: owner}
	m := events.SQSMessage{MessageId: "e0000000-0000-4000-8000-000000000001", Body: `{"type":"payments","id":"m-1","batch":"up","input":{}}`,
		Attributes: map[string]string{"ApproximateReceiveCount": "3", "SentTimestamp": "1709978500000", "SenderId": mallory}}
	if _, err := r.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{m}}); err != nil {
		t.Fatal(err)
	}
	up, _, err := ledger.Show(ctx, "up", false)
	if err != nil {
		t.Fatal(err)
	}
	if up.Recorded != 0 || up.Closed || len(b.events) != 0 {
		t.Errorf("%s's batch up after %s's refused job: recorded %d, closed %v, %d events; want 0, open, none",
			owner, mallory, up.Recorded, up.Closed, len(b.events))
	}
}

// A job naming another sender's batch with a batchSize out of the contract (below 0, above
// job.MaxBatchSize) is refused invalid_batch. The router skipped the batch's owner check for it (a
// size out of the contract opens nothing), yet its dead letter named the batch and was counted
// there as refused: any producer could fill another's batch with junk and close it early (a false
// Batch Completed while the owner's jobs still run). Its batch id is valid, so the owner is
// checked as for any other refusal: another sender's is batch_not_owned, never counted.
func TestRouterBadBatchSizeIsNotCountedInAnotherSendersBatch(t *testing.T) {
	ctx := context.Background()
	g := newBatchRig()
	ledger, b, dlq, r := g.ledger, g.bus, g.dlq, g.r
	const owner, mallory = "AIDAOWNER", "AROAMALLORY:tenant-b"
	if err := ledger.OpenBy(ctx, "up", 2, owner, time.Now()); err != nil {
		t.Fatal(err)
	}
	msg := func(n int, body string) events.SQSMessage {
		return events.SQSMessage{MessageId: fmt.Sprintf("f0000000-0000-4000-8000-%012d", n), Body: body, Attributes: map[string]string{
			"ApproximateReceiveCount": "1", "SentTimestamp": "1709978500000", "SenderId": mallory}}
	}
	recs := []events.SQSMessage{
		msg(1, `{"type":"payments","id":"m-1","batch":"up","batchSize":-1,"input":{}}`),
		msg(2, fmt.Sprintf(`{"type":"payments","id":"m-2","batch":"up","batchSize":%d,"input":{}}`, job.MaxBatchSize+1)),
	}
	if _, err := r.Handle(ctx, events.SQSEvent{Records: recs}); err != nil {
		t.Fatal(err)
	}
	for _, e := range dlq.sent {
		if e.Reason != string(job.ReasonBatchNotOwned) || e.Batch != "" {
			t.Errorf("dead letter of %s: reason %q, batch %q; want %s, no batch", e.JobID, e.Reason, e.Batch, job.ReasonBatchNotOwned)
		}
	}
	// Nor does a size out of the contract open a batch, even at the delivery that looks again.
	late := msg(3, fmt.Sprintf(`{"type":"payments","id":"m-3","batch":"fresh","batchSize":%d,"input":{}}`, job.MaxBatchSize+1))
	late.Attributes["ApproximateReceiveCount"] = strconv.Itoa(router.BatchWaitReceives)
	if _, err := r.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{late}}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ledger.Show(ctx, "fresh", false); err == nil {
		t.Errorf("batch fresh was opened by a job whose batchSize is out of the contract")
	}
	up, _, err := ledger.Show(ctx, "up", false)
	if err != nil {
		t.Fatal(err)
	}
	if up.Recorded != 0 || up.Closed || len(b.events) != 0 {
		t.Errorf("%s's batch up after %s's jobs with bad sizes: recorded %d, closed %v, %d events; want 0, open, none",
			owner, mallory, up.Recorded, up.Closed, len(b.events))
	}
}

// batchRig is a router whose jobs' batches are tracked in a ledger on a fake table, with the
// completion events on bus, its lanes copies in sender and its dead letters in dlq.
type batchRig struct {
	r       *router.Router
	ledger  *batch.Ledger
	bus     *bus
	tracker *batchend.Tracker
	sender  *fakeSender
	dlq     *fakeDLQ
}

func newBatchRig() batchRig {
	g := batchRig{ledger: batch.New(fakes.NewDynamoDB("t"), "t"), bus: &bus{}, sender: &fakeSender{}, dlq: &fakeDLQ{}}
	g.tracker = batchend.New(g.ledger, g.bus, "s", slog.New(slog.DiscardHandler))
	g.r = newRouter(&fakeConfig{limits: limits}, g.sender, nil, nil)
	g.r.DLQ = batchend.DeadLetters{Next: g.dlq, Tracker: g.tracker}
	g.r.Batches = g.tracker
	return g
}
