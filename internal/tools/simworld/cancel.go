package simworld

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"time"

	"github.com/sfnlimit/sfnlimit/internal/lambda/batch"
	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/lambda/metrics"
)

// The overflow rule cancel (Faults.Cancels; config.OverflowCancel). With it on, the deployment has
// a fourth type, delta, with the rule (TYPE_OVERFLOW delta=cancel), first-free, a limit of 2-4,
// every key capped at 1 (TYPE_KEY_LIMITS) and key k2 at 2 (its own cap, in the live override),
// released by its Release step or, one seed in two, by status events on the bare machine. Its jobs
// come in bursts: Faults.Cancels times a key gets 2-5 jobs 1-30 s apart, long enough (20 s to 4
// minutes) that a newer job finds the older ones running; one job in four is sent by another
// sender (the interloper's tenant, InterloperSenderID), and half of those reuse the id of an
// earlier job of the producer's in the burst; two bursts in five are sent as a batch (the
// producer's jobs of the burst). A job at its key's cap stops the oldest running job of its key,
// sender and type submitted before it (starter.cancelOlder), which ends "cancelled".
//
// Everything is drawn from a stream of its own, and delta is not one of the types the operator's
// limit changes and actions draw from, so that a seed's other types, jobs, faults and actions are
// those of the same seed without it. The operator's StopExecution and dead-letter redrive reach
// delta's jobs too.
//
// Invariants (checked here and in check.go):
//
//   - a job whose execution was stopped with job.ErrorCancelled while its work ran ends that
//     generation "cancelled", once: not dead-lettered, no later attempt of it starts, counted once in
//     its batch (batch.Cancelled), and JobsCancelled counts no more jobs than were cancelled
//     (exactly as many in a run without kills or lost DynamoDB answers);
//   - each such stop is made by the starter of a job of the same type, key and sender, whose
//     generation was submitted strictly after the stopped one's, and named in the stop's cause
//     (job.CancelCause): never another sender's job, another key's, the job itself or a newer one;
//   - a stop that lands after the stopped execution's work ended (in its Release step: the lease the
//     starter read was about to go) may end the job as its work did or "cancelled", whichever
//     release acts first; either way once.
//
// Every other invariant holds for delta as for the other types.

const (
	cancelStream = 0xca9ce1
	cancelType   = "delta"
)

// Invariant kinds of the overflow rule cancel.
const (
	// KindCancelledRan: an attempt of a cancelled job's generation started after its cancel.
	KindCancelledRan = "cancelled job ran again"
	// KindCancelNotEnded: a generation stopped by a newer job did not end "cancelled".
	KindCancelNotEnded = "cancelled job not ended cancelled"
	// KindCancelWrongJob: a stop named a job that is not of the stopped job's type, key and sender,
	// or not submitted after it, or not one its starter was delivered.
	KindCancelWrongJob = "cancelled by a job not entitled to"
)

// cancelWorkload draws delta and its bursts (none unless Faults.Cancels is set) and returns delta.
func (w *World) cancelWorkload() []typeSpec {
	return w.burstWorkload(bursts{n: w.cfg.Faults.Cancels, stream: cancelStream, typ: cancelType, ids: "d", batches: "dbat", rule: "cancel"})
}

// bursts is a type with an overflow rule and its bursts of jobs per key (burstWorkload).
type bursts struct {
	n      int    // how many bursts
	stream uint64 // the random stream they are drawn from
	typ    string // the type's name
	ids    string // prefix of the jobs' ids ({ids}000)
	// batches prefixes the batches' ids ({batches}00); rule names the rule in traces.
	batches, rule string
}

// burstWorkload draws b's type and its bursts from a stream of their own (none when b.n is 0):
// first-free, a limit of 2-4, every key capped at 1 and k2 at 2, released by its Release step or
// by status events; b.n times a key gets 2-5 jobs 1-30 s apart, each working 20 s to 4 minutes,
// one in four from another sender (InterloperSenderID), half of those with the id of an earlier
// producer's job of the burst, and two bursts in five a batch of the producer's jobs.
func (w *World) burstWorkload(b bursts) []typeSpec {
	if b.n <= 0 {
		return nil
	}
	r := rand.New(rand.NewPCG(w.seed, b.stream))
	t := typeSpec{name: b.typ, limit: 2 + r.IntN(3), keyLimit: 1, keys: []string{"k1", "k2", "k3"},
		keyCaps: map[string]int{"k2": 2}, release: []string{"step", "events"}[r.IntN(2)], strategy: "first-free"}
	tenant := job.Sender(batch.Principal(InterloperSenderID), "")
	seq := 0
	for n := range b.n {
		key := t.keys[r.IntN(len(t.keys))]
		at := time.Duration(r.Int64N(int64(22 * time.Minute)))
		from := at
		var burst, own []*jobSpec
		for range 2 + r.IntN(4) {
			j := &jobSpec{typ: t.name, key: key, id: fmt.Sprintf("%s%03d", b.ids, seq), submitAt: at}
			seq++
			secs := math.Exp(math.Log(20) + r.Float64()*math.Log(12)) // 20 s to 4 minutes
			j.duration = time.Duration(secs * float64(time.Second))
			switch x := r.Float64(); {
			case x < 0.03:
				j.fail = true
			case x < 0.13:
				j.failAttempts = 1
			}
			if r.IntN(4) == 0 {
				j.senderID = InterloperSenderID
				if len(own) > 0 && r.IntN(2) == 0 {
					j.id = own[r.IntN(len(own))].id // another sender's job of the same key and id
				}
				j.k = jobKeyOf(j.typ, tenant, j.key, j.id)
				if w.jobs[j.k] != nil { // its own job of that id already: one job
					j.id = fmt.Sprintf("%s%03d", b.ids, seq-1)
					j.k = jobKeyOf(j.typ, tenant, j.key, j.id)
				}
			} else {
				j.k = jobKey(j.typ, j.key, j.id)
				own = append(own, j)
			}
			w.jobs[j.k] = j
			w.order = append(w.order, j)
			burst = append(burst, j)
			at += time.Second + time.Duration(r.Int64N(int64(29*time.Second)))
		}
		if len(own) > 0 && w.cfg.BatchShare > 0 && r.IntN(5) < 2 {
			bs := &batchSpec{id: fmt.Sprintf("%s%02d", b.batches, n), members: own}
			for _, j := range own {
				w.batches.of[j.k] = bs
			}
			w.batches.batches = append(w.batches.batches, bs)
		}
		w.trace(b.typ, "%s: burst %d of %d jobs of key %s from %s", b.rule, n, len(burst), key, from)
	}
	w.trace(b.typ, "%s: type %s limit %d, key limit 1, k2 capped at 2, release %s", b.rule, t.name, t.limit, t.release)
	return []typeSpec{t}
}

// cancelMade checks a StopExecution a starter made (p: its invocation) on the execution arn: one of
// the overflow rule cancel, by a job its invocation was delivered, of the stopped job's type, key
// and sender, submitted after it, named in the cause.
func (c *checker) cancelMade(p *proc, arn, errName, cause string) {
	e, ok := c.w.sfn.execs[arn]
	if !ok {
		return // ExecutionDoesNotExist: nothing stopped
	}
	victim := genKey(e.jk, e.meta.Redrive)
	if errName != job.ErrorCancelled {
		c.violate(KindCancelWrongJob, e.jk, "%s stopped by a function with error %q, want %q", e.name, errName, job.ErrorCancelled)
		return
	}
	id, ok := strings.CutPrefix(cause, "superseded by job ")
	if id, _, ok = strings.Cut(id, " "); !ok || cause != job.CancelCause(id) {
		c.violate(KindCancelWrongJob, e.jk, "%s stopped with cause %q, which names no job", e.name, cause)
		return
	}
	var named []string // the invocation's jobs with that id
	by := ""
	if p != nil {
		for _, g := range p.jobs {
			k := g[:strings.LastIndex(g, "~g")]
			if c.w.jobs[k] == nil || c.w.jobs[k].id != id {
				continue
			}
			named = append(named, g)
			if j := c.w.jobs[k]; j.typ == e.meta.Type && j.key == e.meta.Key && jobKeyOf(j.typ, e.meta.Sender, j.key, j.id) == k {
				by = g
			}
		}
	}
	switch {
	case len(named) == 0:
		c.violate(KindCancelWrongJob, e.jk, "%s stopped for job %s, which the stopping invocation was not delivered (it carried %v)", e.name, id, jobsOf(p))
		return
	case by == "":
		c.violate(KindCancelWrongJob, e.jk, "%s (sender %q, key %q) stopped by %v: not a job of its type, key and sender", e.name, e.meta.Sender, e.meta.Key, named)
		return
	case by == victim:
		c.violate(KindCancelWrongJob, e.jk, "%s stopped by its own job (%s)", e.name, by)
		return
	}
	old, ok1 := c.ops.submitted[victim]
	newer, ok2 := c.ops.submitted[by]
	if !ok1 || !ok2 || !old.Before(newer) {
		c.violate(KindCancelWrongJob, e.jk, "%s (%s, submitted at %s) stopped by %s, submitted at %s: not a newer job", e.name, victim,
			old.Sub(c.start), by, newer.Sub(c.start))
		return
	}
	c.ops.cancelledBy[victim] = by
	c.w.trace(e.jk, "cancel: %s (%s) stopped by newer job %s", e.name, victim, by)
}

func jobsOf(p *proc) []string {
	if p == nil {
		return nil
	}
	return p.jobs
}

// cancelClosed records an execution that closed ABORTED with job.ErrorCancelled. Stopped while its
// work ran, its generation ends "cancelled" now. Stopped after its work ended (in its Release step:
// sampleSM's e.released), its Release step's release and the ABORTED one race: the job ends as its
// work did or cancelled, whichever acts first, and the checker takes the limiter's word for which
// (checker.lateCancelled, and for a failed work checker.ops.provisional).
func (c *checker) cancelClosed(e *execution) {
	gk := genKey(e.jk, e.meta.Redrive)
	if e.released {
		c.ops.lateCancels[gk] = e.name
		c.w.trace(e.jk, "cancel: %s stopped after its work ended; it ends as its work did or cancelled", e.name)
		if e.spec == nil || !(e.spec.fail || e.meta.Attempt <= e.spec.failAttempts) {
			c.end(e.jk, e.meta.Redrive, "succeeded")
			return
		}
		// Its work failed: the failed release retries it or dead-letters it, unless the ABORTED
		// one acts first and ends it cancelled. Cancelled until a later attempt of it starts
		// (started) or its dead letter comes (end).
		c.end(e.jk, e.meta.Redrive, "cancelled")
		c.ops.provisional[gk] = true
		return
	}
	c.ops.cancelled[gk] = e.name
	c.end(e.jk, e.meta.Redrive, "cancelled")
}

// checkCancelled: every generation stopped by a newer job while its work ran ended "cancelled".
func (c *checker) checkCancelled() {
	keys := make([]string, 0, len(c.ops.cancelled))
	for k := range c.ops.cancelled {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, gk := range keys {
		if how := c.ops.ended[gk]; how != "cancelled" {
			c.violate(KindCancelNotEnded, gk[:strings.LastIndex(gk, "~g")], "%s was stopped by a newer job (%s); its generation ended %q, want cancelled", c.ops.cancelled[gk], c.ops.cancelledBy[gk], how)
		}
	}
	f := c.w.cfg.Faults
	exact := c.w.Stats.Kills == 0 && f.DDBAmbiguous == 0 && f.DDBLost == 0 && len(c.ops.lateCancels) == 0
	got := int(c.w.metrics.Sum("", metrics.JobsCancelled))
	if n := len(c.ops.cancelled); got > n+len(c.ops.lateCancels) || (got < n && exact) {
		c.violate(KindMetric, metrics.JobsCancelled, "%d published, %d jobs cancelled (%d stopped after their work; %d invocations killed)", got, n, len(c.ops.lateCancels), c.w.Stats.Kills)
	}
}

// lateCancelled is how many of bs's jobs were stopped by a newer job after their work succeeded:
// its ledger may count each succeeded or cancelled.
func (c *checker) lateCancelled(bs *batchSpec) int {
	n := 0
	for _, j := range bs.members {
		if how, _, ok := c.firstEnd(j.k); ok && how == "succeeded" {
			for gk := range c.ops.lateCancels {
				if strings.HasPrefix(gk, j.k+"~g") {
					n++
					break
				}
			}
		}
	}
	return n
}
