package tests

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sfnlimit/sfnlimit/internal/lambda/admission"
	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	sfnjob "github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/lambda/metrics"
	"github.com/sfnlimit/sfnlimit/internal/lambda/router"
	"github.com/sfnlimit/sfnlimit/internal/tools/local/observe"
)

// Scenario 24: the overflow rule cancel (issue 25). Type oc runs at most 4 jobs at once and at most 1
// of any one key (TypeKeyLimits); its rule is cancel, set in the live config item before any job.
// On fauxqs (one message of a FIFO group in flight at once, as SQS):
//  1. key doc-1: job a works 120 s; once it runs, job b of the same key (short work) comes. a is
//     stopped (ABORTED, error sfnlimit.Cancelled, a cause naming b) and ends cancelled; b succeeds,
//     started only after a stopped;
//  2. key doc-2: four jobs a second apart, the first three with 120 s of work: each stops the one
//     before it once that one runs (the key's group hands them out in order), so the first three end
//     cancelled, each by the next, and the last succeeds;
//  3. key doc-3 from two senders: t1 (the suite's one producer) runs, then t2 of the same key comes
//     from another producer. A rule acts only within one sender, so t2 does not stop t1; the key's
//     cap counts both senders' jobs (one group per type and key), so t2 waits for t1 to end. Both
//     succeed.
//
// Checked from Step Functions' records: every invariant of the suite (a cancelled job ends exactly
// so, and JobsCancelled counts them); no key ever worked two jobs at once; each cancelled job was
// stopped by the job its cause names and started before it; and the stops were sent (CancelsSent,
// the starter's log). job show's cancelled state is held by its own tests (internal/tools/ops).
func TestOverflowCancel(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	const (
		typ      = "oc"
		longWork = 120
		short    = 3
		t1Work   = 15
		other    = "AROAOTHERPRODUCER" // the second producer's principal
	)
	r := newRig(t, rigOptions{backend: fauxqs, noRuntime: true, params: map[string]string{
		"TypeLimits": typ + "=4", "TypeKeyLimits": typ + "=1", "ConfigCacheSeconds": "1",
	}})
	store := config.NewDynamoStore(r.c.DDB, r.table)
	if err := store.SetOverride(ctx, config.Override{Type: typ, Overflow: config.OverflowCancel}); err != nil {
		t.Fatalf("SetOverride(overflow cancel) = %v", err)
	}
	if got := r.overflowOf(ctx, store, typ); got != config.OverflowCancel {
		t.Fatalf("the config store gives type %s overflow rule %q after it was set to %q: the functions would never apply it", typ, got, config.OverflowCancel)
	}
	r.startRuntime()
	running := func(id string) func() (bool, string) {
		return func() (bool, string) {
			return r.runningJob(ctx, typ, id) != "", fmt.Sprintf("job %s not running", id)
		}
	}

	// 1. doc-1: a runs, then b stops it.
	r.submit(ctx, job{Type: typ, ID: "a", Key: "doc-1", Input: work{Seconds: longWork}, Want: wantCancelled})
	// 3. doc-3: t1 runs (15 s), alongside doc-1.
	r.submit(ctx, job{Type: typ, ID: "t1", Key: "doc-3", Input: work{Seconds: t1Work}})
	r.waitFor(ctx, progressWithin, "job a to run", running("a"))
	r.submit(ctx, job{Type: typ, ID: "b", Key: "doc-1", Input: work{Seconds: short}})
	r.waitFor(ctx, progressWithin, "job t1 to run", running("t1"))
	r.submitAs(ctx, other, job{Type: typ, ID: "t2", Key: "doc-3", Input: work{Seconds: short}})

	// 2. doc-2: a burst, a second apart.
	burst := []string{"d1", "d2", "d3", "d4"}
	for i, id := range burst {
		if i > 0 {
			time.Sleep(time.Second)
		}
		j := job{Type: typ, ID: id, Key: "doc-2", Input: work{Seconds: longWork}, Want: wantCancelled}
		if i == len(burst)-1 {
			j.Input, j.Want = work{Seconds: short}, wantSucceeded
		}
		r.submit(ctx, j)
	}

	out := r.settle(ctx, settleWithin)
	r.checkInvariants(ctx, out, nil)

	// No key worked two jobs at once (doc-3 counts both senders' jobs).
	keysUnderOne(t, out)
	only := func(id string) observe.Execution { return out.run(t, typ, id, -1) }
	first := func(id string) observe.Execution { return out.run(t, typ, id, 0) }
	// Each cancelled job was stopped by the newer job its cause names, which started only after it
	// stopped; the stopped job is the first sender's own.
	for _, c := range []struct{ victim, by string }{{"a", "b"}, {"d1", "d2"}, {"d2", "d3"}, {"d3", "d4"}} {
		v, by := only(c.victim), first(c.by)
		if v.Cause != sfnjob.CancelCause(c.by) {
			t.Errorf("job %s was stopped with cause %q, want %q", c.victim, v.Cause, sfnjob.CancelCause(c.by))
		}
		if by.Start.Before(v.WorkEnd) {
			t.Errorf("job %s started at %s, before the job it cancelled, %s, stopped at %s", c.by, stamp(by.Start), c.victim, stamp(v.WorkEnd))
		}
		if v.Job.Sender != r.sender() || by.Job.Sender != r.sender() {
			t.Errorf("jobs %s and %s have senders %q and %q, want both %q", c.victim, c.by, v.Job.Sender, by.Job.Sender, r.sender())
		}
	}
	// The other producer's job waited for the first's to end and stopped nothing.
	t1, t2 := only("t1"), first("t2")
	if t2.Job.Sender != other || t1.Job.Sender != r.sender() {
		t.Errorf("doc-3's jobs have senders t1 %q, t2 %q, want %q and %q: the scenario did not send as two producers", t1.Job.Sender, t2.Job.Sender, r.sender(), other)
	}
	if t2.Start.Before(t1.WorkEnd) {
		t.Errorf("t2 started at %s, before t1 ended at %s: the key cap counts both senders' jobs", stamp(t2.Start), stamp(t1.WorkEnd))
	}

	// Evidence that the rule acted: one stop per cancelled job at least (a stop repeated on an
	// execution already stopped changes nothing).
	if sent := r.s.Metrics().Sum("", metrics.CancelsSent); sent < 4 {
		t.Errorf("metric %s = %v, want at least 4 (a, d1, d2, d3): the scenario tested nothing", metrics.CancelsSent, sent)
	}
	if n := r.logs.count("stopped its oldest running job"); n < 4 {
		t.Errorf("the starter logged %d stops, want at least 4: the scenario tested nothing", n)
	}
	if n := r.logs.count("job cancelled by a newer job of its key"); n < 4 {
		t.Errorf("the releaser logged %d jobs ended cancelled, want 4 (a, d1, d2, d3); JobsCancelled, checked with the invariants, counts them exactly", n)
	}
}

// submitAs sends jobs to the general queue as another producer, the principal sender. Locally every
// message's SenderId is the router role's (stack.Info.SenderID), so the router takes the sender
// named in the message's sfnlimitSender attribute (router.SenderAttribute) as the job's sender, as it
// does for the copies it holds back itself: that is how a second producer sends here. The job's
// executions then carry that sender (observe.Execution.Job.Sender).
func (r *rig) submitAs(ctx context.Context, sender string, jobs ...job) {
	r.t.Helper()
	if strings.ContainsAny(sender, ">") {
		r.t.Fatalf("sender %q must be a bare principal", sender)
	}
	for _, j := range jobs {
		body := r.body(j)
		r.record(j.Type, j.ID, "", j.Want)
		_, err := r.c.SQS.SendMessage(ctx, &sqs.SendMessageInput{
			QueueUrl: &r.general, MessageBody: aws.String(body),
			MessageAttributes: map[string]sqstypes.MessageAttributeValue{
				router.SenderAttribute: {DataType: aws.String("String"), StringValue: aws.String(sender)},
			},
		})
		if err != nil {
			r.t.Fatalf("SendMessage(general queue, as %s) = %v", sender, err)
		}
	}
}

// overflowOf is the overflow rule of typ's live override as the config store reads it back.
func (r *rig) overflowOf(ctx context.Context, store *config.DynamoStore, typ string) string {
	r.t.Helper()
	os, err := store.ListOverrides(ctx)
	if err != nil {
		r.t.Fatalf("ListOverrides() = %v", err)
	}
	for _, o := range os {
		if o.Type == typ {
			return o.Overflow
		}
	}
	return ""
}

// Scenario 25: the overflow rule skip (issue 25). Type os runs at most 4 jobs at once and at most 1
// of any one key; its rule is skip, from the template (TypeOverflow). On fauxqs:
//  1. key k-1: job a works 40 s; once it runs, jobs b and c of the same key come. Both end skipped
//     behind a, at once, without running; a succeeds;
//  2. key k-2 from two senders: t1 runs, then t2 of the same key comes from another producer. A rule
//     acts only within one sender, so t2 is not skipped: it waits for t1 to end (the key's cap
//     counts both senders' jobs) and succeeds;
//  3. key k-3: e1 runs and ends; e2, sent after, runs too: a key whose job ended skips nothing;
//  4. key k-4: a burst of three into an idle key: the first runs, the other two end skipped behind it.
//
// Checked from Step Functions' records and the table: every invariant of the suite (a skipped job
// has no execution, no dead letter, one skipped fate, and JobsSkipped counts them); no key worked two
// jobs at once; each skipped job was skipped behind its key's running job, before that one ended.
func TestOverflowSkip(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	const (
		typ      = "os"
		longWork = 40
		short    = 3
		other    = "AROAOTHERPRODUCER"
	)
	r := newRig(t, rigOptions{backend: fauxqs, params: map[string]string{
		"TypeLimits": typ + "=4", "TypeKeyLimits": typ + "=1", "TypeOverflow": typ + "=skip",
	}})
	running := func(id string) func() (bool, string) {
		return func() (bool, string) {
			return r.runningJob(ctx, typ, id) != "", fmt.Sprintf("job %s not running", id)
		}
	}
	r.submit(ctx, job{Type: typ, ID: "a", Key: "k-1", Input: work{Seconds: longWork}})
	r.submit(ctx, job{Type: typ, ID: "t1", Key: "k-2", Input: work{Seconds: 15}})
	r.submit(ctx, job{Type: typ, ID: "e1", Key: "k-3", Input: work{Seconds: short}})
	// 4. k-4: a burst into an idle key, sent milliseconds apart (often one starter batch).
	for i, id := range []string{"f1", "f2", "f3"} {
		j := job{Type: typ, ID: id, Key: "k-4", Input: work{Seconds: 20}, Want: wantSkipped}
		if i == 0 {
			j.Want = wantSucceeded
		}
		r.submit(ctx, j)
		time.Sleep(20 * time.Millisecond) // strictly later: jobs sent in one millisecond are not ordered
	}
	r.waitFor(ctx, progressWithin, "job a to run", running("a"))
	r.submit(ctx, job{Type: typ, ID: "b", Key: "k-1", Input: work{Seconds: short}, Want: wantSkipped},
		job{Type: typ, ID: "c", Key: "k-1", Input: work{Seconds: short}, Want: wantSkipped})
	r.waitFor(ctx, progressWithin, "job t1 to run", running("t1"))
	r.submitAs(ctx, other, job{Type: typ, ID: "t2", Key: "k-2", Input: work{Seconds: short}})
	r.waitFor(ctx, progressWithin, "job e1 to end", func() (bool, string) {
		return succeeded(r.outcome(ctx).byJob[typ+"/e1"]), "job e1 not succeeded"
	})
	r.submit(ctx, job{Type: typ, ID: "e2", Key: "k-3", Input: work{Seconds: short}})

	out := r.settle(ctx, settleWithin)
	r.checkInvariants(ctx, out, nil)

	keysUnderOne(t, out)
	only := func(id string) observe.Execution { return out.run(t, typ, id, -1) }
	// b and c were skipped behind a, while a ran.
	a := only("a")
	for _, it := range r.scan(ctx, "ADMIT#"+typ) {
		parts := strings.Split(it["sk"], "/")
		if len(parts) != 5 || it["outcome"] != admission.Skipped {
			continue
		}
		at, _ := strconv.ParseInt(it["at"], 10, 64)
		by := map[string]observe.Execution{"b": a, "c": a, "f2": only("f1"), "f3": only("f1")}
		id := parts[2]
		if want, ok := by[id]; !ok || it["behind"] != want.Job.ID || time.UnixMilli(at).After(want.WorkEnd) {
			t.Errorf("job %s skipped behind %q at %s, want behind %s, before it ended at %s", id, it["behind"], stamp(time.UnixMilli(at)), want.Job.ID, stamp(want.WorkEnd))
		}
	}
	t1, t2 := only("t1"), only("t2")
	if t2.Job.Sender != other || t2.Start.Before(t1.WorkEnd) {
		t.Errorf("t2 (sender %q) started at %s, t1 ended at %s: want another sender's job waiting for t1, not skipped", t2.Job.Sender, stamp(t2.Start), stamp(t1.WorkEnd))
	}
	if e1, e2 := only("e1"), only("e2"); e2.Start.Before(e1.WorkEnd) {
		t.Errorf("e2 started at %s, before e1 ended at %s", stamp(e2.Start), stamp(e1.WorkEnd))
	}
	if n := r.logs.count("job skipped (overflow rule skip)"); n != 4 {
		t.Errorf("the starter logged %d skips, want 4 (b, c, f2, f3)", n)
	}
}

// keysUnderOne fails t when any key worked two jobs at once (both scenarios cap every key at 1).
func keysUnderOne(t *testing.T, out *settled) {
	t.Helper()
	for k, p := range observe.PeaksBy(out.xs, out.end, observe.TypeKey) {
		if p.Max > 1 {
			t.Errorf("key %s: %d jobs worked at once at %s, over its cap 1", k, p.Max, stamp(p.At))
		}
	}
}

// run is job typ/id's i-th execution (-1: its last); it fails t when the job has none.
func (out *settled) run(t *testing.T, typ, id string, i int) observe.Execution {
	t.Helper()
	xs := out.byJob[typ+"/"+id]
	if len(xs) == 0 {
		t.Fatalf("job %s has no execution", id)
	}
	if i < 0 {
		i = len(xs) - 1
	}
	return xs[i]
}
