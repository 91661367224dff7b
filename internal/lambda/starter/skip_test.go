package starter_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/sfnlimit/sfnlimit/internal/lambda/admission"
	"github.com/sfnlimit/sfnlimit/internal/lambda/batch"
	"github.com/sfnlimit/sfnlimit/internal/lambda/batchend"
	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
	"github.com/sfnlimit/sfnlimit/internal/lambda/metrics"
	"github.com/sfnlimit/sfnlimit/internal/tools/fakes"
)

// skipRig is a cancel rig with rule skip and a batch ledger, with batch "b" open for 1 job.
func skipRig(t *testing.T, keyCap int, rule string) (*rig, *batch.Ledger) {
	t.Helper()
	r := newKeyRigRule(t, keyCap, rule)
	ledger := batch.New(fakes.NewDynamoDB("t"), "t")
	r.rel.Batches = batchend.New(ledger, nopBus{}, "s", fakes.Logger(t))
	if err := ledger.Open(context.Background(), "b", 1, t0); err != nil {
		t.Fatal(err)
	}
	return r, ledger
}

// newestIn is newest in batch "b".
func newestIn(t *testing.T, sender string, receive int) events.SQSMessage {
	t.Helper()
	b, _ := json.Marshal(job.Job{Type: "llm", ID: "newest", Key: "acme", Sender: sender, Batch: "b", Input: json.RawMessage(`{}`), SubmittedAt: submitted})
	return message(t, "llm#acme", "newest", string(b), receive)
}

func newestSubmission(sender string) admission.Job {
	return admission.Job{Type: "llm", Sender: sender, Key: "acme", ID: "newest", SubmittedAt: submitted}
}

// skippedCount is how many jobs batch "b" counted skipped.
func skippedCount(t *testing.T, l *batch.Ledger) int {
	t.Helper()
	sum, _, err := l.Show(context.Background(), "b", false)
	if err != nil {
		t.Fatal(err)
	}
	return sum.Counts[batch.Skipped]
}

// A waiting job at its key's cap under the overflow rule skip ends at once, skipped, when an older job
// of its key from its sender holds a lane; it never goes to a lane. It waits (parks) when the key is at
// its cap with another sender's jobs only (the general queue is a boundary between tenants), with
// newer jobs only, or under the rule queue; and it binds when its key has room.
func TestKeyAtItsCapSkipsBehindAnOlderJobOfItsSender(t *testing.T) {
	tests := []struct {
		name    string
		rule    string
		keyCap  int
		sender  string // the waiting job's
		holders []holder
		want    string // "skipped", "parked" or "bound"
		behind  string // the job a skipped one is skipped behind
	}{
		{name: "older running job of its sender", rule: config.OverflowSkip, keyCap: 1,
			holders: []holder{{id: "old", key: "acme", lane: 1, status: lease.Starting, submitted: time.Minute}},
			want:    "skipped", behind: "old"},
		{name: "older job bound, about to start", rule: config.OverflowSkip, keyCap: 1,
			holders: []holder{{id: "old", key: "acme", lane: 1, status: lease.Bound, submitted: time.Minute}},
			want:    "skipped", behind: "old"},
		{name: "older job waiting to retry in its lane", rule: config.OverflowSkip, keyCap: 1,
			holders: []holder{{id: "old", key: "acme", lane: 1, status: lease.Retrying, submitted: time.Minute}},
			want:    "skipped", behind: "old"},
		{name: "the oldest of two named", rule: config.OverflowSkip, keyCap: 2,
			holders: []holder{
				{id: "older", key: "acme", lane: 1, status: lease.Starting, submitted: time.Minute},
				{id: "oldest", key: "acme", lane: 2, status: lease.Starting, submitted: 2 * time.Minute},
			},
			want: "skipped", behind: "oldest"},
		{name: "key at its cap with another sender's job and an older one of its own", rule: config.OverflowSkip, keyCap: 2, sender: "tenant-a",
			holders: []holder{
				{id: "theirs", key: "acme", sender: "tenant-b", lane: 1, status: lease.Starting, submitted: 2 * time.Minute},
				{id: "mine", key: "acme", sender: "tenant-a", lane: 2, status: lease.Starting, submitted: time.Minute},
			},
			want: "skipped", behind: "mine"},
		{name: "another sender's job only: waits", rule: config.OverflowSkip, keyCap: 1, sender: "tenant-b",
			holders: []holder{{id: "old", key: "acme", sender: "tenant-a", lane: 1, status: lease.Starting, submitted: time.Minute}},
			want:    "parked"},
		{name: "a newer job of its sender: waits", rule: config.OverflowSkip, keyCap: 1,
			holders: []holder{{id: "new", key: "acme", lane: 1, status: lease.Starting, submitted: -time.Minute}},
			want:    "parked"},
		{name: "a job submitted at the same time: waits", rule: config.OverflowSkip, keyCap: 1,
			holders: []holder{{id: "twin", key: "acme", lane: 1, status: lease.Starting}},
			want:    "parked"},
		{name: "key under its cap: binds", rule: config.OverflowSkip, keyCap: 2,
			holders: []holder{{id: "old", key: "acme", lane: 1, status: lease.Starting, submitted: time.Minute}},
			want:    "bound"},
		{name: "the rule queue: waits", rule: config.OverflowQueue, keyCap: 1,
			holders: []holder{{id: "old", key: "acme", lane: 1, status: lease.Starting, submitted: time.Minute}},
			want:    "parked"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			r, ledger := skipRig(t, tt.keyCap, tt.rule)
			for _, h := range tt.holders {
				h.put(t, r)
			}
			resp, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{newestIn(t, tt.sender, 1)}})
			if err != nil {
				t.Fatal(err)
			}
			ws, err := r.room.List(ctx, "llm")
			if err != nil {
				t.Fatal(err)
			}
			fates, err := r.fates.Find(ctx, "llm", tt.sender, "acme", "newest")
			if err != nil {
				t.Fatal(err)
			}
			sent := r.sqs.Sent(lanesURL)
			got := "parked"
			switch {
			case len(failures(resp)) == 0 && len(sent) == 1:
				got = "bound"
			case len(failures(resp)) == 0 && len(sent) == 0 && len(ws) == 0:
				got = "skipped"
			case len(failures(resp)) == 1 && len(ws) == 1 && ws[0].AtKeyCap:
			default:
				t.Fatalf("failures %v, lane sends %d, parked %+v: neither skipped, parked nor bound", failures(resp), len(sent), ws)
			}
			if got != tt.want {
				t.Fatalf("the waiting job was %s, want %s (fates %+v)", got, tt.want, fates)
			}
			n := skippedCount(t, ledger)
			if tt.want != "skipped" {
				if n != 0 || (len(fates) == 1 && fates[0].Outcome == admission.Skipped) {
					t.Errorf("batch counted %d skipped, fates %+v; want nothing skipped", n, fates)
				}
				return
			}
			if len(fates) != 1 || fates[0].Outcome != admission.Skipped || fates[0].Behind != tt.behind {
				t.Errorf("fates = %+v, want skipped behind %s", fates, tt.behind)
			}
			if n != 1 {
				t.Errorf("batch counted %d skipped, want 1", n)
			}
		})
	}
}

// A job skipped before (by another copy of its message, or by a delivery that failed after its skip
// was written) never runs: a later delivery that finds its key with room binds a lane, then gives it
// back and ends the job skipped, without sending it to the lane.
func TestSkippedJobIsNeverSentToALane(t *testing.T) {
	ctx := context.Background()
	r, ledger := skipRig(t, 1, config.OverflowSkip)
	if ok, _, err := r.fates.Skip(ctx, newestSubmission(""), "old", t0); err != nil || !ok {
		t.Fatalf("Skip = %v, %v", ok, err)
	}
	resp, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{newestIn(t, "", 2)}})
	if err != nil {
		t.Fatal(err)
	}
	if got := failures(resp); len(got) != 0 {
		t.Errorf("batch item failures = %v, want the skipped job's message acknowledged", got)
	}
	if sent := r.sqs.Sent(lanesURL); len(sent) != 0 {
		t.Errorf("lane sends = %d, want none: the job was skipped", len(sent))
	}
	if ls, _ := r.leases.ListType(ctx, "llm"); len(ls) != 0 {
		t.Errorf("leases = %+v, want the lane bound for the skipped job given back", ls)
	}
	if n := skippedCount(t, ledger); n != 1 {
		t.Errorf("batch counted %d skipped, want 1", n)
	}
}

// A job admitted before (a delivery bound it, then gave its lane back) is never skipped: at its key's
// cap it waits, like any job under the rule queue.
func TestAdmittedJobIsNotSkipped(t *testing.T) {
	ctx := context.Background()
	r, ledger := skipRig(t, 1, config.OverflowSkip)
	if err := r.fates.Admit(ctx, newestSubmission(""), t0); err != nil {
		t.Fatal(err)
	}
	holder{id: "old", key: "acme", lane: 1, status: lease.Starting, submitted: time.Minute}.put(t, r)
	resp, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{newestIn(t, "", 2)}})
	if err != nil {
		t.Fatal(err)
	}
	if got := failures(resp); !equal(got, sorted("msg-newest")) {
		t.Errorf("batch item failures = %v, want the admitted job held at its key's cap", got)
	}
	if n := skippedCount(t, ledger); n != 0 {
		t.Errorf("batch counted %d skipped, want none", n)
	}
}

// A skip whose write fails ends nothing: the message is held for its next delivery, which skips it.
// Its key's older job is left alone either way.
func TestFailedSkipIsMadeOnTheNextDelivery(t *testing.T) {
	ctx := context.Background()
	r, ledger := skipRig(t, 1, config.OverflowSkip)
	holder{id: "old", key: "acme", lane: 1, status: lease.Starting, submitted: time.Minute}.put(t, r)
	db := fakes.NewDynamoDB("table")
	failing := true
	db.OnCall = func(op string) error {
		if failing && op == "PutItem" {
			return errors.New("InternalServerError: try again")
		}
		return nil
	}
	r.st.Fates = admission.NewStore(db, "table")
	resp, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{newestIn(t, "", 1)}})
	if err != nil {
		t.Fatal(err)
	}
	if got := failures(resp); !equal(got, sorted("msg-newest")) {
		t.Errorf("batch item failures = %v, want the message held", got)
	}
	if n := skippedCount(t, ledger); n != 0 {
		t.Errorf("batch counted %d skipped after a failed skip, want none", n)
	}
	failing = false
	resp, err = r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{newestIn(t, "", 2)}})
	if err != nil {
		t.Fatal(err)
	}
	if got := failures(resp); len(got) != 0 {
		t.Errorf("batch item failures = %v, want the job skipped on its next delivery", got)
	}
	if n := skippedCount(t, ledger); n != 1 {
		t.Errorf("batch counted %d skipped, want 1", n)
	}
	noStops(t, r, "skip stops nothing")
}

// Two jobs of a key delivered in one batch, its cap 1: the first binds, and the second, newer, finds
// its key at its cap with an older job of its sender bound to a lane. It ends skipped, as it would
// had the older one been bound by an earlier batch: it never goes to a lane, now or after the older
// job ends.
func TestNewerJobOfOneBatchIsSkippedBehindTheOneBoundBeforeIt(t *testing.T) {
	ctx := context.Background()
	r, ledger := skipRig(t, 1, config.OverflowSkip)
	if err := ledger.Open(ctx, "b2", 2, t0); err != nil {
		t.Fatal(err)
	}
	older, _ := json.Marshal(job.Job{Type: "llm", ID: "older", Key: "acme", Batch: "b2", Input: json.RawMessage(`{}`), SubmittedAt: submitted.Add(-time.Minute)})
	newer, _ := json.Marshal(job.Job{Type: "llm", ID: "newer", Key: "acme", Batch: "b2", Input: json.RawMessage(`{}`), SubmittedAt: submitted})
	resp, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{
		message(t, "llm#acme", "older", string(older), 1), message(t, "llm#acme", "newer", string(newer), 1),
	}})
	if err != nil {
		t.Fatal(err)
	}
	if got := failures(resp); len(got) != 0 {
		t.Errorf("batch item failures = %v, want the older job bound and the newer skipped", got)
	}
	if sent := r.sqs.Sent(lanesURL); len(sent) != 1 {
		t.Errorf("lane sends = %d, want 1 (the older job)", len(sent))
	}
	fates, err := r.fates.Find(ctx, "llm", "", "acme", "newer")
	if err != nil {
		t.Fatal(err)
	}
	if len(fates) != 1 || fates[0].Outcome != admission.Skipped || fates[0].Behind != "older" {
		t.Errorf("fates of the newer job = %+v, want skipped behind older", fates)
	}
	if ws, err := r.room.List(ctx, "llm"); err != nil || len(ws) != 0 {
		t.Errorf("parked records = %+v, %v; want none", ws, err)
	}
}

// A job skipped under the rule skip, whose message outlives its skip (the invocation stopped after
// the skip was counted, before Lambda deleted the message), never runs, whatever the type's rule is
// when the message comes back: an operator may switch skip to queue or cancel meanwhile, or another
// starter may still cache the old rule (a twin delivery). The batch counted it skipped, so a run
// would go uncounted (a dead-lettered one missing from the completion event).
func TestSkippedJobDoesNotRunAfterTheRuleChanged(t *testing.T) {
	for _, rule := range []string{config.OverflowSkip, config.OverflowQueue, config.OverflowCancel} {
		t.Run(rule, func(t *testing.T) {
			ctx := context.Background()
			r, ledger := skipRig(t, 1, rule)
			if ok, _, err := r.fates.Skip(ctx, newestSubmission(""), "old", t0); err != nil || !ok {
				t.Fatalf("Skip = %v, %v", ok, err)
			}
			if err := r.rel.BatchEnded(ctx, lease.Lease{Type: "llm", JobID: "newest", JobKey: "acme", Batch: "b"}, batch.Skipped); err != nil {
				t.Fatal(err)
			}
			resp, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{newestIn(t, "", 2)}})
			if err != nil {
				t.Fatal(err)
			}
			if sent := r.sqs.Sent(lanesURL); len(sent) != 0 {
				t.Errorf("lane sends = %d, want none: the job was skipped and its batch counted it so", len(sent))
			}
			if got := failures(resp); len(got) != 0 {
				t.Errorf("batch item failures = %v, want the skipped job's message acknowledged", got)
			}
			if ls, _ := r.leases.ListType(ctx, "llm"); len(ls) != 0 {
				t.Errorf("leases = %+v, want none", ls)
			}
			if n := skippedCount(t, ledger); n != 1 {
				t.Errorf("batch counted %d skipped, want 1", n)
			}
		})
	}
}

// A key whose job ended after the batch read the leases is no longer at its cap: a waiting job that
// found it so in that read, with an older job of its sender still in a lane, is not skipped. It binds
// the freed room (here the look after parking, which reads the leases afresh, binds it).
func TestSkipLeavesAJobWhoseKeyHasRoomSinceTheRead(t *testing.T) {
	ctx := context.Background()
	r, ledger := skipRig(t, 2, config.OverflowSkip)
	holder{id: "oldest", key: "acme", lane: 1, status: lease.Starting, submitted: 2 * time.Minute}.put(t, r)
	holder{id: "older", key: "acme", lane: 2, status: lease.Starting, submitted: time.Minute}.put(t, r)
	r.st.Leases = &releasedAfterRead{LeaseStore: r.leases, lane: 2} // older's release frees lane 2
	resp, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{newestIn(t, "", 1)}})
	if err != nil {
		t.Fatal(err)
	}
	fates, err := r.fates.Find(ctx, "llm", "", "acme", "newest")
	if err != nil {
		t.Fatal(err)
	}
	if n := skippedCount(t, ledger); n != 0 || (len(fates) == 1 && fates[0].Outcome == admission.Skipped) {
		t.Fatalf("batch counted %d skipped, fates %+v: the key ran 1 job of its cap of 2 when the job was skipped", n, fates)
	}
	if got, sent := failures(resp), r.sqs.Sent(lanesURL); len(got) != 0 || len(sent) != 1 {
		t.Errorf("batch item failures = %v, lane sends %d; want the job bound to the room its key has", got, len(sent))
	}
}

// JobsSkipped counts each skipped job once, however it ends skipped: a delivery whose skip was
// written (and counted in JobsSkipped) and whose batch count failed leaves the job to its next
// delivery, which ends it skipped from a lane its key has room for by then, and counts it again in
// nothing.
func TestSkippedJobEndedByItsNextDeliveryIsCountedOnce(t *testing.T) {
	ctx := context.Background()
	r := newKeyRigRule(t, 1, config.OverflowSkip)
	db := fakes.NewDynamoDB("t")
	ledger := batch.New(db, "t")
	r.rel.Batches = batchend.New(ledger, nopBus{}, "s", fakes.Logger(t))
	if err := ledger.Open(ctx, "b", 1, t0); err != nil {
		t.Fatal(err)
	}
	published := metrics.NewCollector()
	r.st.Metrics = metrics.New(published, "test")
	holder{id: "old", key: "acme", lane: 1, status: lease.Starting, submitted: time.Minute}.put(t, r)
	db.OnCall = func(op string) error {
		if op == "TransactWriteItems" {
			return errors.New("InternalServerError: try again")
		}
		return nil
	}
	resp, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{newestIn(t, "", 1)}})
	if err != nil {
		t.Fatal(err)
	}
	if got := failures(resp); len(got) != 1 {
		t.Fatalf("batch item failures = %v, want the message held: its batch count failed", got)
	}
	db.OnCall = nil
	old, _ := r.leases.Lease(lease.Key{Type: "llm", Lane: 1})
	if err := r.leases.Delete(ctx, old); err != nil { // old ended: its key has room
		t.Fatal(err)
	}
	resp, err = r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{newestIn(t, "", 2)}})
	if err != nil {
		t.Fatal(err)
	}
	if got := failures(resp); len(got) != 0 || skippedCount(t, ledger) != 1 || len(r.sqs.Sent(lanesURL)) != 0 {
		t.Fatalf("batch item failures = %v, skipped count %d, lane sends %d; want the job ended skipped, never sent", got, skippedCount(t, ledger), len(r.sqs.Sent(lanesURL)))
	}
	if err := r.st.Metrics.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := published.Sum("", metrics.JobsSkipped); got != 1 {
		t.Errorf("JobsSkipped = %v, want 1", got)
	}
}

// A job that has run (an attempt made, then back in its key's group to wait for its retry under a
// lowered cap) is never skipped, even with no admitted fate found: one written under the rule queue
// is none (a type switched to skip since), and one written more than admission.Retention ago has
// expired while its attempt ran (a Standard workflow runs up to a year). Skipped, the job would end
// "skipped" after running, counted neither as succeeded nor dead-lettered.
func TestJobThatRanIsNotSkipped(t *testing.T) {
	ctx := context.Background()
	r, ledger := skipRig(t, 1, config.OverflowSkip)
	holder{id: "old", key: "acme", lane: 1, status: lease.Starting, submitted: time.Minute}.put(t, r)
	b, _ := json.Marshal(job.Job{Type: "llm", ID: "newest", Key: "acme", Batch: "b", Attempts: 1, Input: json.RawMessage(`{}`), SubmittedAt: submitted})
	resp, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{message(t, "llm#acme", "newest", string(b), 1)}})
	if err != nil {
		t.Fatal(err)
	}
	fates, err := r.fates.Find(ctx, "llm", "", "acme", "newest")
	if err != nil {
		t.Fatal(err)
	}
	if n := skippedCount(t, ledger); n != 0 || len(fates) != 0 {
		t.Errorf("batch counted %d skipped, fates %+v; want the job that ran waiting for its retry", n, fates)
	}
	if got := failures(resp); !equal(got, sorted("msg-newest")) {
		t.Errorf("batch item failures = %v, want the job held at its key's cap", got)
	}
}

// A job skipped by one copy of its message takes no lane through another (Lambda may hand a batch
// over twice; the twin read the leases after the key's older job ended): a job of a skip type is
// admitted before its lease is written, and the twin's admission finds the job skipped. So no lease
// of a skipped job is ever seen by a newer job of its key, which would be skipped behind a job that
// never runs, and neither would run. The newer job then binds the key's room.
func TestTwinOfASkippedJobTakesNoLane(t *testing.T) {
	ctx := context.Background()
	r, ledger := skipRig(t, 1, config.OverflowSkip)
	old := admission.Job{Type: "llm", Key: "acme", ID: "old", SubmittedAt: submitted.Add(-time.Minute)}
	if ok, _, err := r.fates.Skip(ctx, old, "older", t0); err != nil || !ok {
		t.Fatalf("Skip(old) = %v, %v", ok, err)
	}
	b, _ := json.Marshal(job.Job{Type: "llm", ID: "old", Key: "acme", Batch: "b", Input: json.RawMessage(`{}`), SubmittedAt: old.SubmittedAt})
	twin := message(t, "llm#acme", "old", string(b), 1)
	puts := &leasePuts{LeaseStore: r.leases}
	r.st.Leases = puts
	resp, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{twin}})
	if err != nil {
		t.Fatal(err)
	}
	if len(puts.jobs) != 0 {
		t.Errorf("leases written for %v: a skipped job's lease, even given back, is one a newer job may be skipped behind", puts.jobs)
	}
	if got := failures(resp); len(got) != 0 {
		t.Errorf("batch item failures = %v, want the skipped job's message acknowledged", got)
	}
	if ls, _ := r.leases.ListType(ctx, "llm"); len(ls) != 0 || len(r.sqs.Sent(lanesURL)) != 0 {
		t.Fatalf("leases %+v, lane sends %d: want no lane taken by a skipped job", ls, len(r.sqs.Sent(lanesURL)))
	}
	if _, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{newestIn(t, "", 1)}}); err != nil {
		t.Fatal(err)
	}
	fates, err := r.fates.Find(ctx, "llm", "", "acme", "newest")
	if err != nil {
		t.Fatal(err)
	}
	if len(fates) != 1 || fates[0].Outcome != admission.Admitted || len(r.sqs.Sent(lanesURL)) != 1 {
		t.Errorf("newest's fates %+v, lane sends %d; want newest admitted and sent to the key's free lane", fates, len(r.sqs.Sent(lanesURL)))
	}
	if n := skippedCount(t, ledger); n != 1 {
		t.Errorf("batch counted %d skipped, want old once", n)
	}
}

// keyCapsOnly is llm's configuration with caps for listed keys only (KeyLimits), no key limit: the
// default key, and keys not listed, have no cap of their own.
type keyCapsOnly struct {
	inner interface {
		Get(ctx context.Context, typ string) (config.TypeConfig, error)
	}
	caps map[string]int
}

func (c keyCapsOnly) Get(ctx context.Context, typ string) (config.TypeConfig, error) {
	cfg, err := c.inner.Get(ctx, typ)
	cfg.KeyLimit, cfg.KeyLimits = 0, c.caps
	return cfg, err
}

// leasePuts records the jobs whose leases are written.
type leasePuts struct {
	*fakes.LeaseStore
	jobs []string
}

func (p *leasePuts) Put(ctx context.Context, l lease.Lease, prev *lease.Lease) (lease.Lease, error) {
	p.jobs = append(p.jobs, l.JobID)
	return p.LeaseStore.Put(ctx, l, prev)
}

// Two copies of one delivery (Lambda may hand a batch over twice) both skip the job: JobsSkipped
// counts it once, by the copy that wrote the skip; the batch counts it once.
func TestTwinDeliveriesCountASkipOnce(t *testing.T) {
	ctx := context.Background()
	r, ledger := skipRig(t, 1, config.OverflowSkip)
	published := metrics.NewCollector()
	r.st.Metrics = metrics.New(published, "test")
	holder{id: "old", key: "acme", lane: 1, status: lease.Starting, submitted: time.Minute}.put(t, r)
	for range 2 {
		if _, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{newestIn(t, "", 1)}}); err != nil {
			t.Fatal(err)
		}
	}
	if n := skippedCount(t, ledger); n != 1 {
		t.Errorf("batch counted %d skipped, want 1", n)
	}
	if err := r.st.Metrics.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := published.Sum("llm", metrics.JobsSkipped); got != 1 {
		t.Errorf("JobsSkipped = %v, want 1: one job skipped", got)
	}
}

// A job skipped by a twin of its delivery (Lambda may hand a batch over twice) while this copy
// parked, on its first receive, ends skipped on the look after parking, when a lane turns out
// free and its admission finds the skip: the park record this copy wrote goes with it. Left, it
// would name a message that is gone: a release would spend its wake-up on it, and the key's next
// head could not park (waitroom.ErrGroupParked) until the record's park period ran out.
func TestJobSkippedAfterItParkedLeavesNoParkRecord(t *testing.T) {
	ctx := context.Background()
	r, ledger := skipRig(t, 2, config.OverflowSkip)
	for ln := 1; ln <= 4; ln++ {
		holder{id: fmt.Sprintf("other-%d", ln), key: fmt.Sprintf("k%d", ln), lane: ln, status: lease.Starting, submitted: time.Minute}.put(t, r)
	}
	if ok, _, err := r.fates.Skip(ctx, newestSubmission(""), "old", t0); err != nil || !ok {
		t.Fatalf("Skip = %v, %v", ok, err)
	}
	r.st.Leases = &releasedAfterRead{LeaseStore: r.leases, lane: 1} // lane 1 frees after the batch's read
	resp, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{newestIn(t, "", 1)}})
	if err != nil {
		t.Fatal(err)
	}
	if got := failures(resp); len(got) != 0 {
		t.Fatalf("batch item failures = %v, want the skipped job's message acknowledged", got)
	}
	if n := skippedCount(t, ledger); n != 1 {
		t.Errorf("batch counted %d skipped, want 1", n)
	}
	if ws, err := r.room.List(ctx, "llm"); err != nil || len(ws) != 0 {
		t.Errorf("parked records = %+v, %v; want none: the job ended skipped and its message goes", ws, err)
	}
}

// Twin deliveries (Lambda may hand a batch over twice) in two starters that cache the type's rule
// on either side of a switch from skip to queue: the twin that still reads skip skips the job (its
// key at its cap behind an older job of its sender) and its batch counts it; the twin that reads
// queue, on the same first receive, finds the key with room (the older job ended between the two
// reads). It must not send the skipped job to a lane: the job would run after its batch counted it
// skipped: it is admitted first whatever its rule, and the admission finds the skip.
func TestTwinUnderTheRuleQueueDoesNotRunAJobItsTwinSkipped(t *testing.T) {
	ctx := context.Background()
	r, ledger := skipRig(t, 1, config.OverflowQueue)
	if ok, _, err := r.fates.Skip(ctx, newestSubmission(""), "old", t0); err != nil || !ok {
		t.Fatalf("Skip = %v, %v", ok, err)
	}
	if err := r.rel.BatchEnded(ctx, lease.Lease{Type: "llm", JobID: "newest", JobKey: "acme", Batch: "b"}, batch.Skipped); err != nil {
		t.Fatal(err)
	}
	if _, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{newestIn(t, "", 1)}}); err != nil {
		t.Fatal(err)
	}
	if sent := r.sqs.Sent(lanesURL); len(sent) != 0 {
		t.Errorf("lane sends = %d, want none: the job was skipped and its batch counted it so", len(sent))
	}
	if n := skippedCount(t, ledger); n != 1 {
		t.Errorf("batch counted %d skipped, want 1", n)
	}
}

// A job skipped under the rule skip whose message outlives its skip (the delivery stopped after the
// skip was written, before its message went) never runs, so it takes no older job's place: when an
// operator switches the type to the rule cancel meanwhile, its next delivery, at its key's cap
// behind an older running job of its sender, must not stop that job. Stopped, the older job would
// end "cancelled" for a job that then ends skipped: neither runs.
func TestSkippedJobCancelsNothingAfterTheRuleChangedToCancel(t *testing.T) {
	ctx := context.Background()
	r, ledger := skipRig(t, 1, config.OverflowCancel)
	holder{id: "old", key: "acme", lane: 1, status: lease.Starting, submitted: time.Minute}.put(t, r)
	if ok, _, err := r.fates.Skip(ctx, newestSubmission(""), "old", t0); err != nil || !ok {
		t.Fatalf("Skip = %v, %v", ok, err)
	}
	if _, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{newestIn(t, "", 2)}}); err != nil {
		t.Fatal(err)
	}
	noStops(t, r, "the waiting job was skipped: it never runs, so it takes no older job's place")
	if n := skippedCount(t, ledger); n != 1 {
		t.Errorf("batch counted %d skipped, want 1: the job was skipped", n)
	}
}

// With caps for some keys only, the default key (jobs without a key) and a key not listed have no
// cap: the rule skip never acts for them (docs/flow-control.md). When their type's lanes are all
// taken by older jobs of their key and sender, a job waits for a lane (a full type is not a key at
// its cap), as under the rule queue; it is not skipped.
func TestSkipNeverActsForAKeyWithoutACap(t *testing.T) {
	for _, key := range []string{"", "zeta"} {
		t.Run("key "+key, func(t *testing.T) {
			ctx := context.Background()
			r, ledger := skipRig(t, 1, config.OverflowSkip)
			caps := keyCapsOnly{inner: r.st.Config, caps: map[string]int{"acme": 2}}
			r.st.Config = caps
			cfg, err := caps.Get(ctx, "llm")
			if err != nil || !cfg.Skips() {
				t.Fatalf("config %+v, %v: want the rule skip in force", cfg, err)
			}
			for ln := 1; ln <= 4; ln++ {
				holder{id: fmt.Sprintf("old-%d", ln), key: key, lane: ln, status: lease.Starting, submitted: time.Minute}.put(t, r)
			}
			j := job.Job{Type: "llm", ID: "newest", Key: key, Batch: "b", Input: json.RawMessage(`{}`), SubmittedAt: submitted}
			b, _ := json.Marshal(j)
			resp, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{message(t, cfg.WaitingGroup(j), "newest", string(b), 1)}})
			if err != nil {
				t.Fatal(err)
			}
			fates, err := r.fates.Find(ctx, "llm", "", key, "newest")
			if err != nil {
				t.Fatal(err)
			}
			if n := skippedCount(t, ledger); n != 0 || len(fates) != 0 {
				t.Errorf("batch counted %d skipped, fates %+v; want the job of a key without a cap waiting for a lane", n, fates)
			}
			if got := failures(resp); !equal(got, sorted("msg-newest")) {
				t.Errorf("batch item failures = %v, want the job held", got)
			}
		})
	}
}

// readBefore is a lease store whose first ListType answers first: the leases as they were a moment
// before (another starter changed them just after that read).
type readBefore struct {
	*fakes.LeaseStore
	first []lease.Lease
	done  bool
}

func (s *readBefore) ListType(ctx context.Context, typ string) ([]lease.Lease, error) {
	if !s.done {
		s.done = true
		return s.first, nil
	}
	return s.LeaseStore.ListType(ctx, typ)
}

// A job bound to a lane by a twin of its delivery that still caches the rule queue (no admission
// written: the type was switched to skip a moment ago) holds that lane: the twin that reads skip
// finds its key at its cap only by counting the job's own lease, and must not skip it. Skipped,
// the job would run from the lane its twin sent it to after its batch counted it skipped.
func TestJobHoldingALaneIsNotSkipped(t *testing.T) {
	ctx := context.Background()
	r, ledger := skipRig(t, 2, config.OverflowSkip)
	holder{id: "old", key: "acme", lane: 1, status: lease.Starting, submitted: time.Minute}.put(t, r)
	holder{id: "other", key: "k2", lane: 3, status: lease.Starting, submitted: time.Minute}.put(t, r)
	holder{id: "other2", key: "k3", lane: 4, status: lease.Starting, submitted: time.Minute}.put(t, r)
	// This copy's batch read the leases when old and another job of acme held two lanes.
	first, err := r.leases.ListType(ctx, "llm")
	if err != nil {
		t.Fatal(err)
	}
	first = append(first, lease.Lease{Type: "llm", Lane: 2, JobID: "gone", JobKey: "acme", Status: lease.Starting, StartedAt: t0, SubmittedAt: submitted.Add(-2 * time.Minute)})
	// Since, that job ended and the twin bound newest to its lane, its bound lease naming this message.
	if _, err := r.leases.Put(ctx, lease.Lease{Type: "llm", Lane: 2, JobID: "newest", JobKey: "acme", Batch: "b", MessageID: "msg-newest",
		Status: lease.Bound, StartedAt: t0, SubmittedAt: submitted}, nil); err != nil {
		t.Fatal(err)
	}
	r.st.Leases = &readBefore{LeaseStore: r.leases, first: first}
	if _, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{newestIn(t, "", 1)}}); err != nil {
		t.Fatal(err)
	}
	fates, err := r.fates.Find(ctx, "llm", "", "acme", "newest")
	if err != nil {
		t.Fatal(err)
	}
	if n := skippedCount(t, ledger); n != 0 || (len(fates) == 1 && fates[0].Outcome == admission.Skipped) {
		t.Errorf("batch counted %d skipped, fates %+v; want the job that holds lane 2 not skipped", n, fates)
	}
}
