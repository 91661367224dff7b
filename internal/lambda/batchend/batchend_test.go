package batchend_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"

	"github.com/sfnlimit/sfnlimit/internal/lambda/batch"
	"github.com/sfnlimit/sfnlimit/internal/lambda/batchend"
	"github.com/sfnlimit/sfnlimit/internal/lambda/deadletter"
	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/tools/fakes"
)

// bus records PutEvents calls; fail makes the next n calls fail, refuse the next n answer with a
// failed entry (as EventBridge does for a throttled entry).
type bus struct {
	mu           sync.Mutex
	events       []ebtypes.PutEventsRequestEntry
	fail, refuse int
}

func (b *bus) PutEvents(_ context.Context, in *eventbridge.PutEventsInput, _ ...func(*eventbridge.Options)) (*eventbridge.PutEventsOutput, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.fail > 0 {
		b.fail--
		return nil, errors.New("connection reset")
	}
	if b.refuse > 0 {
		b.refuse--
		return &eventbridge.PutEventsOutput{FailedEntryCount: 1, Entries: []ebtypes.PutEventsResultEntry{{ErrorCode: aws.String("ThrottlingException"), ErrorMessage: aws.String("slow down")}}}, nil
	}
	b.events = append(b.events, in.Entries...)
	return &eventbridge.PutEventsOutput{Entries: []ebtypes.PutEventsResultEntry{{EventId: aws.String("e")}}}, nil
}

func (b *bus) details(t *testing.T) []batchend.Detail {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []batchend.Detail
	for _, e := range b.events {
		if aws.ToString(e.Source) != batchend.Source || aws.ToString(e.DetailType) != batchend.DetailType {
			t.Errorf("event source %q detail type %q, want %q %q", aws.ToString(e.Source), aws.ToString(e.DetailType), batchend.Source, batchend.DetailType)
		}
		var d batchend.Detail
		if err := json.Unmarshal([]byte(aws.ToString(e.Detail)), &d); err != nil {
			t.Fatalf("event detail %s: %v", aws.ToString(e.Detail), err)
		}
		out = append(out, d)
	}
	return out
}

// dlq records dead letters; fail makes the next n sends fail.
type dlq struct {
	sent []deadletter.Entry
	fail int
}

func (q *dlq) Send(_ context.Context, e deadletter.Entry) error {
	if q.fail > 0 {
		q.fail--
		return errors.New("sqs unavailable")
	}
	q.sent = append(q.sent, e)
	return nil
}

type rig struct {
	ledger  *batch.Ledger
	bus     *bus
	tracker *batchend.Tracker
	logs    *bytes.Buffer
}

func newRig(t *testing.T) *rig {
	t.Helper()
	db := fakes.NewDynamoDB("t")
	r := &rig{ledger: batch.New(db, "t"), bus: &bus{}, logs: &bytes.Buffer{}}
	r.tracker = batchend.New(r.ledger, r.bus, "stack-1", slog.New(slog.NewJSONHandler(r.logs, nil)))
	return r
}

func (r *rig) open(t *testing.T, id string, n int) {
	t.Helper()
	if err := r.tracker.Admit(context.Background(), job.Job{Type: "docs", ID: "opener", Batch: id, BatchSize: n}, ""); err != nil {
		t.Fatal(err)
	}
}

func TestEndedCountsOnceAndAnnouncesOnce(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	r.open(t, "up", 3)
	q := &dlq{}
	dl := batchend.DeadLetters{Next: q, Tracker: r.tracker}
	ends := []func() error{
		func() error {
			return r.tracker.Ended(ctx, batchend.End{Batch: "up", Type: "docs", ID: "a", Outcome: batch.Succeeded})
		},
		// a duplicate release of a
		func() error {
			return r.tracker.Ended(ctx, batchend.End{Batch: "up", Type: "docs", ID: "a", Outcome: batch.Succeeded})
		},
		func() error {
			return dl.Send(ctx, deadletter.Entry{Reason: "attempts_exhausted", Type: "docs", JobID: "b", Batch: "up"})
		},
		// the same id in another type is another job
		func() error {
			return dl.Send(ctx, deadletter.Entry{Reason: "invalid_key", Source: "router", Type: "mail", JobID: "a", Batch: "up", Refused: true})
		},
		// redeliveries after the close
		func() error {
			return r.tracker.Ended(ctx, batchend.End{Batch: "up", Type: "docs", ID: "a", Outcome: batch.Succeeded})
		},
		func() error {
			return dl.Send(ctx, deadletter.Entry{Reason: "invalid_key", Source: "router", Type: "mail", JobID: "a", Batch: "up", Refused: true})
		},
	}
	for i, end := range ends {
		if err := end(); err != nil {
			t.Fatalf("end %d: %v", i, err)
		}
	}
	ds := r.bus.details(t)
	if len(ds) != 1 {
		t.Fatalf("%d completion events, want 1: %+v", len(ds), ds)
	}
	d := ds[0]
	if d.Batch != "up" || d.Stack != "stack-1" || d.Expected != 3 {
		t.Errorf("event batch %q stack %q expected %d, want up stack-1 3", d.Batch, d.Stack, d.Expected)
	}
	if want := map[string]int{"succeeded": 1, "dead_lettered": 1, "refused": 1, "cancelled": 0, "skipped": 0}; !sameCounts(d.Counts, want) {
		t.Errorf("event counts %v, want %v", d.Counts, want)
	}
	if strings.Join(d.DeadLettered, ",") != "docs/b,mail/a" {
		t.Errorf("event dead-lettered %v, want [docs/b mail/a]", d.DeadLettered)
	}
	if d.FirstEndedAt.IsZero() || d.LastEndedAt.Before(d.FirstEndedAt) || d.ClosedAt.IsZero() {
		t.Errorf("event times first %v last %v closed %v", d.FirstEndedAt, d.LastEndedAt, d.ClosedAt)
	}
	if len(q.sent) != 3 {
		t.Errorf("%d dead letters sent, want 3 (the decorator sends every one)", len(q.sent))
	}
	sum, _, err := r.ledger.Show(ctx, "up", false)
	if err != nil {
		t.Fatal(err)
	}
	if !sum.Closed || !sum.Announced {
		t.Errorf("batch closed %v announced %v, want both", sum.Closed, sum.Announced)
	}
}

// Jobs cancelled (overflow rule cancel) or skipped (overflow rule skip) close their batch and are
// counted in its completion event under their outcome; neither is listed as dead-lettered.
func TestCancelledAndSkippedCountedNotFailed(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	r.open(t, "sk", 3)
	for id, o := range map[string]batch.Outcome{"a": batch.Succeeded, "b": batch.Cancelled, "c": batch.Skipped} {
		if err := r.tracker.Ended(ctx, batchend.End{Batch: "sk", Type: "docs", ID: id, Outcome: o}); err != nil {
			t.Fatalf("end %s: %v", id, err)
		}
	}
	ds := r.bus.details(t)
	if len(ds) != 1 {
		t.Fatalf("%d completion events, want 1: %+v", len(ds), ds)
	}
	if want := map[string]int{"succeeded": 1, "dead_lettered": 0, "refused": 0, "cancelled": 1, "skipped": 1}; !sameCounts(ds[0].Counts, want) {
		t.Errorf("event counts %v, want %v", ds[0].Counts, want)
	}
	if len(ds[0].DeadLettered) != 0 {
		t.Errorf("event dead-lettered %v, want none", ds[0].DeadLettered)
	}
}

func sameCounts(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range b {
		if a[k] != v {
			return false
		}
	}
	return true
}

// A closing record whose event could not be sent fails the end: its caller retries, and the retry
// sends the event (once).
func TestClosingEndRetriedUntilTheEventIsSent(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct {
		name         string
		fail, refuse int
	}{
		{name: "PutEvents fails", fail: 2},
		{name: "entry refused", refuse: 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t)
			r.open(t, "b1", 1)
			r.bus.fail, r.bus.refuse = tt.fail, tt.refuse
			end := batchend.End{Batch: "b1", Type: "docs", ID: "x", Outcome: batch.Succeeded}
			tries := 0
			for {
				tries++
				err := r.tracker.Ended(ctx, end)
				if err == nil {
					break
				}
				if tries > 5 {
					t.Fatalf("still failing after %d tries: %v", tries, err)
				}
			}
			if want := tt.fail + tt.refuse + 1; tries != want {
				t.Errorf("ended after %d tries, want %d", tries, want)
			}
			if n := len(r.bus.details(t)); n != 1 {
				t.Errorf("%d events, want 1", n)
			}
			// A later duplicate sends nothing more.
			if err := r.tracker.Ended(ctx, end); err != nil {
				t.Fatal(err)
			}
			if n := len(r.bus.details(t)); n != 1 {
				t.Errorf("%d events after a duplicate, want 1", n)
			}
		})
	}
}

// A dead letter whose send fails is retried by its caller; the job is counted once.
func TestDeadLetterSendFailureCountsOnce(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	r.open(t, "b", 2)
	q := &dlq{fail: 1}
	dl := batchend.DeadLetters{Next: q, Tracker: r.tracker}
	e := deadletter.Entry{Reason: "attempts_exhausted", Type: "docs", JobID: "x", Batch: "b"}
	if err := dl.Send(ctx, e); err == nil {
		t.Fatal("Send with the queue failing = nil, want the error")
	}
	if err := dl.Send(ctx, e); err != nil {
		t.Fatal(err)
	}
	sum, _, err := r.ledger.Show(ctx, "b", false)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Recorded != 1 || sum.Counts[batch.DeadLettered] != 1 || len(q.sent) != 1 {
		t.Errorf("recorded %d (dead-lettered %d), dead letters %d; want 1, 1, 1", sum.Recorded, sum.Counts[batch.DeadLettered], len(q.sent))
	}
}

func TestAdmit(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	tests := []struct {
		name       string
		give       job.Job
		wantReason job.Reason
		wantErr    error
	}{
		{name: "no batch", give: job.Job{Type: "docs", ID: "1"}},
		{name: "not open yet", give: job.Job{Type: "docs", ID: "1", Batch: "b"}, wantErr: batchend.ErrNotOpen},
		{name: "opens", give: job.Job{Type: "docs", ID: "2", Batch: "b", BatchSize: 4}},
		{name: "open now", give: job.Job{Type: "docs", ID: "1", Batch: "b"}},
		{name: "same size again", give: job.Job{Type: "docs", ID: "3", Batch: "b", BatchSize: 4}},
		{name: "another size", give: job.Job{Type: "docs", ID: "4", Batch: "b", BatchSize: 5}, wantReason: job.ReasonInvalidBatch},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := r.tracker.Admit(ctx, tt.give, "")
			switch {
			case tt.wantReason != "":
				if job.ReasonOf(err) != tt.wantReason {
					t.Errorf("Admit = %v, want reason %s", err, tt.wantReason)
				}
			case tt.wantErr != nil:
				if !errors.Is(err, tt.wantErr) || job.ReasonOf(err) != "" {
					t.Errorf("Admit = %v, want %v (not a refusal)", err, tt.wantErr)
				}
			case err != nil:
				t.Errorf("Admit = %v, want nil", err)
			}
		})
	}
	// Another process (a second router) sees the size of the batch opened by the first.
	other := batchend.New(r.ledger, r.bus, "", slog.New(slog.DiscardHandler))
	if err := other.Admit(ctx, job.Job{Type: "docs", ID: "9", Batch: "b", BatchSize: 6}, ""); job.ReasonOf(err) != job.ReasonInvalidBatch {
		t.Errorf("second process Admit with another size = %v, want reason %s", err, job.ReasonInvalidBatch)
	}
}

// A batch belongs to the sender whose job opened it: another sender's jobs naming it are refused
// (job.ReasonBatchNotOwned), whether they give its size, another size or none, in this process and
// in another one; the owner's own jobs go on being admitted.
func TestAdmitRefusesOtherSenders(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	const owner, other = "AIDAOWNER", "AROATENANT"
	if err := r.tracker.Admit(ctx, job.Job{Type: "docs", ID: "1", Batch: "b", BatchSize: 3}, owner); err != nil {
		t.Fatal(err)
	}
	second := batchend.New(r.ledger, r.bus, "", slog.New(slog.DiscardHandler))
	for _, tr := range []*batchend.Tracker{r.tracker, second} {
		for _, j := range []job.Job{
			{Type: "docs", ID: "x1", Batch: "b"},
			{Type: "docs", ID: "x2", Batch: "b", BatchSize: 3},
			{Type: "docs", ID: "x3", Batch: "b", BatchSize: 1},
		} {
			if err := tr.Admit(ctx, j, other); job.ReasonOf(err) != job.ReasonBatchNotOwned {
				t.Errorf("Admit(%+v) by %s = %v, want reason %s", j, other, err, job.ReasonBatchNotOwned)
			}
		}
		if err := tr.Admit(ctx, job.Job{Type: "docs", ID: "2", Batch: "b"}, owner); err != nil {
			t.Errorf("Admit of the owner's job = %v, want nil", err)
		}
	}
	// A predictable id opened first by another sender refuses the owner's jobs as not theirs,
	// rather than as of the wrong size.
	if err := r.tracker.Admit(ctx, job.Job{Type: "docs", ID: "y", Batch: "guess", BatchSize: 1}, other); err != nil {
		t.Fatal(err)
	}
	if err := second.Admit(ctx, job.Job{Type: "docs", ID: "1", Batch: "guess", BatchSize: 3}, owner); job.ReasonOf(err) != job.ReasonBatchNotOwned {
		t.Errorf("Admit into a batch another sender opened = %v, want reason %s", err, job.ReasonBatchNotOwned)
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
	tr := batchend.New(batch.New(db, "t"), &bus{}, "s", slog.New(slog.DiscardHandler)) // a new router process
	if err := tr.Admit(ctx, job.Job{Type: "docs", ID: "a", Batch: "big"}, ""); err != nil {
		t.Fatal(err)
	}
	if calls != 1 {
		t.Errorf("Admit of a job of an open batch made %d DynamoDB calls, want 1", calls)
	}
}

// Ends that cannot be counted never block the job's end: no batch, a batch never opened (a message
// that bypassed the router), an id out of the contract. A refusal for its type is counted under
// the type "-".
func TestEndsOutsideTheLedger(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	for _, e := range []batchend.End{
		{Type: "docs", ID: "x", Outcome: batch.Succeeded},
		{Batch: "never", Type: "docs", ID: "x", Outcome: batch.Succeeded},
		{Batch: "bad#batch", Type: "docs", ID: "x", Outcome: batch.Refused},
		{Batch: "b", Type: "docs", ID: "bad id", Outcome: batch.Refused},
	} {
		if err := r.tracker.Ended(ctx, e); err != nil {
			t.Errorf("Ended(%+v) = %v, want nil", e, err)
		}
	}
	r.open(t, "typo", 1)
	if err := r.tracker.Ended(ctx, batchend.End{Batch: "typo", Type: "pay/ments", ID: "m-1", Outcome: batch.Refused}); err != nil {
		t.Fatal(err)
	}
	ds := r.bus.details(t)
	if len(ds) != 1 || strings.Join(ds[0].DeadLettered, ",") != "-/m-1" {
		t.Errorf("events %+v, want one listing -/m-1", ds)
	}
	if !strings.Contains(r.logs.String(), "never opened") {
		t.Errorf("no log line for the batch never opened: %s", r.logs.String())
	}
}

// A nil tracker (batches not tracked) does nothing.
func TestNilTracker(t *testing.T) {
	var tr *batchend.Tracker
	if err := tr.Ended(context.Background(), batchend.End{Batch: "b", Type: "docs", ID: "x", Outcome: batch.Succeeded}); err != nil {
		t.Fatal(err)
	}
	if err := tr.Admit(context.Background(), job.Job{Batch: "b", BatchSize: 2}, ""); err != nil {
		t.Fatal(err)
	}
}
