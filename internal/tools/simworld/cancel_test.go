package simworld

import (
	"slices"
	"strings"
	"testing"
	"time"

	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"

	"github.com/sfnlimit/sfnlimit/internal/lambda/batch"
	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
)

// CancelProfile is the profile the overflow rule cancel's seeds run: every class of the gate, and
// the type with the rule (cancel.go).
const CancelProfile = "all+cancel"

// tenantSender is the job.Job.Sender of InterloperSenderID's jobs.
var tenantSender = job.Sender(batch.Principal(InterloperSenderID), "")

// cancelWorld is a checker's world with jobs of delta's key k1: the producer's d001 (submitted at
// 1 s) and d002 (at 2 s), another sender's d002 (at 3 s) and the producer's d003 (at 4 s), and
// running executions of the producer's d001, the tenant's d002 and the producer's d003.
func cancelWorld(t *testing.T) (*World, []*execution) {
	t.Helper()
	w := New(1, DefaultConfig())
	w.check.setLimit(cancelType, 3, 1)
	tenant := tenantSender
	for i, j := range []*jobSpec{
		{typ: cancelType, key: "k1", id: "d001"},
		{typ: cancelType, key: "k1", id: "d002"},
		{typ: cancelType, key: "k1", id: "d002", senderID: InterloperSenderID},
		{typ: cancelType, key: "k1", id: "d003"},
	} {
		j.k = jobKey(j.typ, j.key, j.id)
		if j.senderID != "" {
			j.k = jobKeyOf(j.typ, tenant, j.key, j.id)
		}
		w.jobs[j.k] = j
		w.order = append(w.order, j)
		w.check.ops.submitted[genKey(j.k, 0)] = w.check.start.Add(time.Duration(i+1) * time.Second)
	}
	exec := func(id, sender string) *execution {
		m := job.Meta{Type: cancelType, ID: id, Key: "k1", Sender: sender, Attempt: 1}
		e := &execution{arn: "arn:" + id + sender, name: cancelType + "-" + id + "-1", status: sfntypes.ExecutionStatusRunning, meta: m, jk: jobKeyOf(cancelType, sender, "k1", id)}
		w.sfn.execs[e.arn] = e
		return e
	}
	return w, []*execution{exec("d001", ""), exec("d002", tenant), exec("d003", "")}
}

// A stop is checked against the job that made it: the starter's job named in the cause must be
// of the stopped job's type, key and sender, and submitted after it.
func TestCancelMadeByAJobNotEntitledToIsAViolation(t *testing.T) {
	tenant := tenantSender
	for _, tc := range []struct {
		name    string
		victim  int // 0: the producer's d001, 1: the tenant's d002, 2: the producer's d003
		carries []string
		by      string
		errName string
		want    bool
	}{
		{"a newer job of its sender", 0, []string{genKey("delta/d003/k1", 0)}, "d003", job.ErrorCancelled, false},
		{"both senders' d002 delivered, the producer's entitled", 0, []string{genKey("delta/d002/k1@"+tenant, 0), genKey("delta/d002/k1", 0)}, "d002", job.ErrorCancelled, false},
		{"another sender's job", 0, []string{genKey("delta/d002/k1@"+tenant, 0)}, "d002", job.ErrorCancelled, true},
		{"an older job of its sender", 2, []string{genKey("delta/d002/k1", 0)}, "d002", job.ErrorCancelled, true},
		{"an older job of another sender", 1, []string{genKey("delta/d001/k1", 0)}, "d001", job.ErrorCancelled, true},
		{"the job itself", 0, []string{genKey("delta/d001/k1", 0)}, "d001", job.ErrorCancelled, true},
		{"a job its starter was not delivered", 0, []string{genKey("delta/d002/k1", 0)}, "d003", job.ErrorCancelled, true},
		{"another error", 0, []string{genKey("delta/d003/k1", 0)}, "d003", "States.Stopped", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, es := cancelWorld(t)
			victim := es[tc.victim]
			w.check.cancelMade(&proc{jobs: tc.carries}, victim.arn, tc.errName, job.CancelCause(tc.by))
			got := slices.Contains(kinds(w.check.violations), KindCancelWrongJob)
			if got != tc.want || len(w.check.violations) > 1 {
				t.Errorf("violations %v, want %q: %v", w.check.violations, KindCancelWrongJob, tc.want)
			}
		})
	}
}

// A job stopped by a newer one ends cancelled, once: dead-lettered after, or an attempt started
// after, is a violation; a stop that lands after the work ended lets the job end as its work did.
func TestACancelledJobEndsCancelledOnce(t *testing.T) {
	w, es := cancelWorld(t)
	d1, c := es[0], w.check
	d1.status, d1.errName = sfntypes.ExecutionStatusAborted, job.ErrorCancelled
	c.closed(d1)
	if c.ended["delta/d001/k1"] != "cancelled" || len(c.violations) > 0 {
		t.Fatalf("ended %q, violations %v; want cancelled and none", c.ended["delta/d001/k1"], c.violations)
	}
	again := &execution{name: "delta-d001-2", status: sfntypes.ExecutionStatusRunning, start: w.now(), jk: d1.jk,
		meta: job.Meta{Type: cancelType, ID: "d001", Key: "k1", Attempt: 2}}
	c.started(again)
	c.end(d1.jk, 0, "dead-lettered (aborted)")
	c.checkCancelled()
	if got := kinds(c.violations); !slices.Equal(got, []string{KindCancelledRan, KindEndedTwice}) {
		t.Errorf("violations %v, want %q then %q", c.violations, KindCancelledRan, KindEndedTwice)
	}

	w, es = cancelWorld(t)
	d2 := es[1]
	d2.released, d2.status, d2.errName = true, sfntypes.ExecutionStatusAborted, job.ErrorCancelled
	w.check.closed(d2)
	w.check.checkCancelled()
	if how := w.check.ended[d2.jk]; how != "succeeded" || len(w.check.violations) > 0 {
		t.Errorf("stopped after its work: ended %q, violations %v; want succeeded and none", how, w.check.violations)
	}
}

// The rule's seeds keep every invariant, and the type with the rule draws nothing from the world's
// other streams: a seed's other jobs are the same with it.
func TestCancelKeepsItsInvariants(t *testing.T) {
	off, on := ruleKeepsItsInvariants(t, CancelProfile, cancelType)
	if off.env["TYPE_OVERFLOW"] != "" || on.env["TYPE_OVERFLOW"] != "delta=cancel" {
		t.Errorf("TYPE_OVERFLOW %q without the rule, %q with; want none and delta=cancel", off.env["TYPE_OVERFLOW"], on.env["TYPE_OVERFLOW"])
	}
}

// ruleKeepsItsInvariants runs seeds 1-8 of an overflow rule's profile, failing t on any violation,
// and checks that the rule's type typ draws nothing from the world's other streams: seed 1's other
// jobs are those of "all". It returns seed 1's worlds without and with the rule.
func ruleKeepsItsInvariants(t *testing.T, profile, typ string) (off, on *World) {
	t.Helper()
	f, err := Profile(profile)
	if err != nil {
		t.Fatal(err)
	}
	for s, vs := range forSeeds(t, 1, 8, f) {
		t.Errorf("seed %d of %s: %s\nreplay: SEED=%d go test ./internal/tools/simworld -run TestOneSeed -v -args -profile %s", s, profile, vs[0], s, profile)
	}
	off, on = runWorld(t, 1, "all"), runWorld(t, 1, profile)
	var others []*jobSpec
	for _, j := range on.order {
		if j.typ != typ {
			others = append(others, j)
		}
	}
	if len(others) != len(off.order) || len(others) == len(on.order) {
		t.Fatalf("%d jobs without the rule, %d with (%d of other types)", len(off.order), len(on.order), len(others))
	}
	for i, j := range off.order {
		if k := others[i]; k.k != j.k || k.submitAt != j.submitAt || k.duration != j.duration {
			t.Errorf("job %d is %s at %s without the rule, %s at %s with", i, j.k, j.submitAt, k.k, k.submitAt)
			break
		}
	}
	return off, on
}

// The overflow rule cancel end to end: a job of delta at its key's cap stops the oldest running
// job of its key and sender (StopExecution with sfnlimit.Cancelled), whose release ends it
// cancelled, counted so in its batch, while every invariant holds. The first seed of the profile
// that runs it, with a cancelled job of a batch and another sender's job in the run.
func TestCancelEndToEndSeedHolds(t *testing.T) {
	holdsOnPath(t, CancelProfile, 40, func(w *World) bool {
		inBatch, tenant := false, false
		for gk := range w.check.ops.cancelled {
			k := gk[:strings.LastIndex(gk, "~g")]
			inBatch = inBatch || w.batches.of[k] != nil
		}
		for _, j := range w.order {
			tenant = tenant || (j.typ == cancelType && j.senderID != "")
		}
		return inBatch && tenant && traced(w, "job cancelled by a newer job of its key (overflow rule cancel)")
	})
}

// A batch that counted a job dead-lettered keeps it so when a newer job's stop comes after. At seed
// 372 of all+cancel, d008's last attempt failed its work; its Release step counted it dead_lettered
// in batch dbat02, closing the batch, and failed on the completion event (an EventBridge outage), so
// the step was retried with the lease still starting and no dead letter sent. d015, at k3's cap,
// stopped the execution in that step (sfnlimit.Cancelled). The ABORTED release ended the job
// cancelled, its batch count a duplicate: the batch and its event said dead_lettered, and the
// dead-letter queue had nothing. A release now ends the job as its batch first counted it
// (releaser TestReleaseEndsTheJobAsItsBatchCountedIt): d008 is dead-lettered.
//
//	SEED=372 TRACE=d008 go test ./internal/tools/simworld -run TestOneSeed -v -args -profile all+cancel
func TestBatchCountStandsOverALaterCancelSeedHolds(t *testing.T) {
	w, vs := findAt(t, 372, CancelProfile)
	if len(vs) > 0 {
		t.Errorf("seed 372 of %s: %s", CancelProfile, w.Report(vs, 40))
	}
	deadLettered := false
	for _, l := range w.traceLog {
		deadLettered = deadLettered || l.subject == "delta/d008/k3" && strings.HasPrefix(l.text, "job ended: dead-lettered")
	}
	if !traced(w, "jobId=d008", "outcome=cancelled", "batch closed") || !deadLettered {
		t.Errorf("seed 372 of %s no longer has d008's cancel meet its batch's dead_lettered count: re-pin it", CancelProfile)
	}
}
