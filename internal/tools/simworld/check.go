package simworld

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/lambda/deadletter"
	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/lambda/metrics"
)

// Violation is an invariant found broken.
type Violation struct {
	At      time.Duration // virtual time since the run's start
	Kind    string
	Subject string // the job (type/id) or type the report's trace is about
	Detail  string
}

func (v Violation) String() string {
	return fmt.Sprintf("%s at %s: %s: %s", v.Kind, v.At.Truncate(time.Millisecond), v.Subject, v.Detail)
}

// Invariant kinds.
const (
	KindLimit        = "limit exceeded"
	KindKeyCap       = "key cap exceeded"
	KindStartedTwice = "attempt started twice"
	KindRunningTwice = "job running twice"
	KindNotEnded     = "job not ended"
	KindEndedTwice   = "job ended twice"
	KindNoReason     = "dead letter without a reason"
	KindLeftover     = "left at quiescence"
	KindIdle         = "lane idle while a job waits"
	KindNotSettled   = "run did not settle"
	KindMetric       = "metric miscounted"
)

type limitAt struct {
	from          time.Time
	limit, keyCap int
	flow          // per-key caps, pause and rate (opcheck.go)
}

// checker checks the invariants from the simulated services' own state: Step Functions'
// executions, the queues' messages, the table's items. It never reads the limiter's bookkeeping.
type checker struct {
	w          *World
	every      time.Duration
	start      time.Time
	history    map[string][]limitAt
	overrides  map[string]config.Override
	violations []Violation
	attempts   map[string]int
	in         map[string]bool
	ended      map[string]string // job -> "succeeded" / "dead-lettered"
	sources    map[string]string // generation key -> the function that sent its first dead letter
	letters    map[string]string // job -> its dead letter's body
	idleSince  map[string]time.Time
	// kills are when an invocation carrying a type's work was killed (checker.killed).
	kills      map[string][]time.Time
	settleFrom time.Time
	done       bool
	ops        opChecks // generations, stopped executions (opcheck.go)
	// poolsOn says the world has pools, pools their history (pools.go).
	poolsOn bool
	pools   []poolsAt
	// skips are the overflow rule skip's skipped jobs (skip.go).
	skips skipChecks
}

func newChecker(w *World) *checker {
	return &checker{w: w, every: 5 * time.Second, start: w.now(), history: map[string][]limitAt{}, overrides: map[string]config.Override{},
		attempts: map[string]int{}, in: map[string]bool{}, ended: map[string]string{}, letters: map[string]string{}, sources: map[string]string{}, idleSince: map[string]time.Time{}, kills: map[string][]time.Time{},
		ops: newOpChecks(), skips: newSkipChecks()}
}

func (c *checker) violate(kind, subject, format string, args ...any) {
	v := Violation{At: c.w.now().Sub(c.start), Kind: kind, Subject: subject, Detail: fmt.Sprintf(format, args...)}
	c.violations = append(c.violations, v)
	c.w.trace(subject, "VIOLATION %s", v)
}

func (c *checker) setLimit(typ string, limit, keyCap int) {
	c.history[typ] = append(c.history[typ], limitAt{from: c.w.now(), limit: limit, keyCap: keyCap})
}

func (c *checker) current(typ string) limitAt {
	h := c.history[typ]
	return h[len(h)-1]
}

// bound is the most executions of typ (and of one key) that may run now: the highest limit in
// force since the configuration cache's age before the oldest running execution started (since,
// at the latest now): a starter may act on a limit it read that long ago, and an execution started
// under a limit keeps it in force while it runs.
func (c *checker) bound(typ, key string, since time.Time) (int, int) {
	cache := 10*time.Second + time.Second
	from := c.w.now().Add(-cache)
	if since.Add(-cache).Before(from) {
		from = since.Add(-cache)
	}
	h := c.history[typ]
	lim, keyCap := 0, 0
	for i, l := range h {
		end := time.Time{}
		if i+1 < len(h) {
			end = h[i+1].from
		}
		if !end.IsZero() && end.Before(from) {
			continue
		}
		lim, keyCap = max(lim, l.limit), max(keyCap, l.capOf(key))
	}
	return lim, keyCap
}

func (c *checker) submitted(j *jobSpec) {
	c.in[j.k] = true
	if _, ok := c.ops.submitted[genKey(j.k, 0)]; !ok {
		c.ops.submitted[genKey(j.k, 0)] = c.w.now()
	}
}

// started checks a new execution against the limits and the executions already started.
func (c *checker) started(e *execution) {
	m := e.meta
	job := jobKeyOf(m.Type, m.Sender, m.Key, m.ID)
	a := fmt.Sprintf("%s~g%d#%d", job, m.Redrive, m.Attempt)
	c.attempts[a]++
	if c.attempts[a] > 1 {
		c.violate(KindStartedTwice, job, "attempt %d (generation %d) has %d executions; this one %s", m.Attempt, m.Redrive, c.attempts[a], e.name)
	}
	oldest := e.start
	run, runKey := 0, 0
	var names []string
	for _, x := range c.w.sfn.open {
		if !x.running() || x.meta.Type != m.Type {
			continue
		}
		run++
		names = append(names, fmt.Sprintf("%s(lane %d, key %q, since %s)", x.name, x.meta.Lane, x.meta.Key, x.start.Sub(c.start).Truncate(time.Millisecond)))
		if x.start.Before(oldest) {
			oldest = x.start
		}
		if x.meta.Key == m.Key {
			runKey++
		}
		if x != e && x.jk == e.jk && x.meta.Redrive == m.Redrive {
			c.violate(KindRunningTwice, job, "%s started while %s runs", e.name, x.name)
		}
	}
	if gk := genKey(job, m.Redrive); c.ops.provisional[gk] {
		// A late cancel of a failed work (cancelClosed): its failed release acted first and retries it.
		delete(c.ops.provisional, gk)
		delete(c.ops.ended, gk)
		delete(c.ended, job)
		c.w.trace(job, "cancel: %s retried: its failed release acted before its late cancel's", e.name)
	}
	if by, ok := c.ops.cancelled[genKey(job, m.Redrive)]; ok {
		c.violate(KindCancelledRan, job, "%s (attempt %d) started after %s%s was stopped by a newer job of its key (%s)", e.name, m.Attempt, genText(m.Redrive), by, c.ops.cancelledBy[genKey(job, m.Redrive)])
	}
	if behind, ok := c.skips.skipped[genKey(job, m.Redrive)]; ok {
		c.violate(KindSkippedRan, job, "%s (attempt %d) started after its job's %sskip behind %s (overflow rule skip)", e.name, m.Attempt, genText(m.Redrive), behind)
	}
	c.checkPaused(e)
	c.checkPools(e)
	c.ops.keyStarts[[2]string{m.Type, m.Key}] = append(c.ops.keyStarts[[2]string{m.Type, m.Key}], e.start)
	lim, keyCap := c.bound(m.Type, m.Key, oldest)
	if now, _ := c.bound(m.Type, m.Key, e.start); run > now && run <= lim {
		// Allowed only by the limit an execution still running may have started under.
		recent := ""
		if e.start.Sub(oldest) <= 10*time.Second+time.Second {
			recent = " (started within the cache's age)"
		}
		c.w.trace(m.Type+"-"+m.ID, "%d executions of %s run over its limit %d, allowed %d: the limit the oldest of them may have started under%s",
			run, m.Type, now, lim, recent)
	}
	if run > lim {
		c.violate(KindLimit, m.Type+"-"+m.ID, "%d executions of %s run, limit %d (start of %s in lane %d): %s", run, m.Type, lim, e.name, m.Lane, strings.Join(names, " "))
	}
	if keyCap > 0 && runKey > keyCap {
		c.violate(KindKeyCap, m.Type+"-"+m.ID, "%d executions of %s key %q run, cap %d (start of %s): %s", runKey, m.Type, m.Key, keyCap, e.name, strings.Join(names, " "))
	}
}

func (c *checker) closed(e *execution) {
	switch {
	case e.status == sfntypes.ExecutionStatusSucceeded:
		c.end(e.jk, e.meta.Redrive, "succeeded")
	case e.status == sfntypes.ExecutionStatusAborted && e.errName == job.ErrorCancelled:
		c.cancelClosed(e)
	}
}

func (c *checker) deadLettered(m *msg) {
	k := jobKeyOf(attr(m, deadletter.AttrType), attr(m, deadletter.AttrSender), keyOfBody(m.body), attr(m, deadletter.AttrJobID))
	if attr(m, deadletter.AttrReason) == "" {
		c.violate(KindNoReason, k, "dead letter %s has no reason", m.id)
	}
	how := "dead-lettered (" + attr(m, deadletter.AttrReason) + ")"
	gen := letterGeneration(m)
	gk := genKey(k, gen)
	// Dead letters are at least once (docs/design.md, Redrive): a release that sent one and failed
	// before its last write is taken over and sends it again. A copy with the same body (the same
	// next generation, so its redrive deduplicates) is not a second end.
	if prev, ok := c.letters[gk]; ok && prev == m.body && c.ops.ended[gk] == how {
		c.w.Stats.DuplicateDeadLetters++
		c.w.trace(k, "duplicate dead letter (same body and reason)")
		return
	}
	c.letters[gk] = m.body
	if _, ok := c.sources[gk]; !ok {
		c.sources[gk] = attr(m, deadletter.AttrSource)
	}
	c.end(k, gen, how)
}

func attr(m *msg, k string) string {
	if v, ok := m.attrs[k]; ok {
		return aws.ToString(v.StringValue)
	}
	return ""
}

// end records that generation gen of job ended (how).
func (c *checker) end(job string, gen int, how string) {
	gk := genKey(job, gen)
	if c.ops.provisional[gk] && strings.HasPrefix(how, "dead-lettered (") {
		// A late cancel of a failed work (cancelClosed): its failed release acted first.
		delete(c.ops.provisional, gk)
		delete(c.ops.ended, gk)
	}
	if prev, ok := c.ops.ended[gk]; ok {
		c.violate(KindEndedTwice, job, "%s%s, then %s", genText(gen), prev, how)
		return
	}
	c.ops.ended[gk] = how
	if gen == c.ops.gen[job] {
		c.ended[job] = how
	}
	c.w.trace(job, "job ended: %s%s", genText(gen), how)
}

// tick checks work conservation and whether the run has settled.
func (c *checker) tick() {
	w := c.w
	now := w.now()
	types := make([]string, 0, len(c.history))
	for t := range c.history {
		types = append(types, t)
	}
	sort.Strings(types)
	for _, t := range types {
		cur := c.current(t)
		if c.flowHeld(t) || c.poolHeld(t) || c.quotaHeld() {
			c.holdIdle(t, cur.limit)
			continue
		}
		run, byKey := 0, map[string]int{}
		busy := map[string]bool{}
		lanes := map[int]bool{}
		for _, x := range w.sfn.open {
			if x.meta.Type == t {
				busy[x.jk] = true
				if x.running() {
					run++
					byKey[x.meta.Key]++
					lanes[x.meta.Lane] = true
				}
			}
		}
		if c.overrides[t].Strategy == "random" && len(c.poolsOf(t)) == 0 { // a pooled type binds first-free
			// A random type's job waits in its lane: only that lane must not stay idle (the
			// strategy leaves other lanes idle by design, failure-modes.md #8). The lane's
			// group in the lanes queue says which jobs wait there.
			for l := 1; l <= cur.limit; l++ {
				g := fmt.Sprintf("%s-%d", t, l)
				waiting := ""
				if !lanes[l] {
					for _, m := range w.lanes.live() {
						if k := subjectOfBody(m); m.group == g && c.ended[k] == "" && !busy[k] {
							waiting = k
							break
						}
					}
				}
				c.idle(t, g, waiting, fmt.Sprintf("lane %s has no running execution", g))
			}
			continue
		}
		waiting := ""
		for _, j := range w.order {
			k := j.k
			if j.typ != t || !c.in[k] || c.ended[k] != "" || busy[k] {
				continue
			}
			if n := cur.capOf(j.key); n > 0 && byKey[j.key] >= n {
				continue
			}
			waiting = k
			break
		}
		if run >= cur.limit {
			waiting = ""
		}
		c.idle(t, t, waiting, fmt.Sprintf("type %s runs %d of %d lanes", t, run, cur.limit))
	}
	if len(c.ended) >= len(w.order) {
		if c.settleFrom.IsZero() {
			c.settleFrom = now
		}
		if now.Sub(c.settleFrom) >= c.settle() {
			c.quiescence()
			c.finish()
			return
		}
	}
	if now.Sub(c.start) >= w.cfg.MaxTime {
		var left []string
		for _, j := range w.order {
			if k := j.k; c.ended[k] == "" {
				left = append(left, k)
			}
		}
		if len(left) > 0 {
			c.violate(KindNotSettled, left[0], "%d jobs not ended after %s: %s", len(left), w.cfg.MaxTime, strings.Join(left[:min(len(left), 10)], " "))
		}
		c.quiescence()
		c.finish()
		return
	}
	w.sched.after(c.every, c.tick)
}

// idle tracks how long what (typ, or one of a random typ's lanes) has had room while waiting (a
// job) waits, and reports it past the bound.
func (c *checker) idle(typ, what, waiting, why string) {
	now := c.w.now()
	if waiting == "" {
		c.idleSince[what] = time.Time{}
		return
	}
	if c.idleSince[what].IsZero() {
		c.idleSince[what] = now
		return
	}
	since := c.idleSince[what]
	if d, b := now.Sub(since), c.idleBound(typ, since, now); d > b {
		c.violate(KindIdle, waiting, "%s for %s while %s waits (bound %s, %d kills of its work)", why, d.Truncate(time.Second), waiting, b, c.killsIn(typ, since, now))
		c.idleSince[what] = now
	}
}

// killed records a killed invocation (a crash, or its function's timeout) against the types of
// the work it carried: the messages of its batch, or the execution it was releasing.
func (c *checker) killed(types []string) {
	for _, t := range types {
		c.kills[t] = append(c.kills[t], c.w.now())
	}
}

// killsIn is how many invocations carrying typ's work were killed in the idle interval from since
// to now, or within a visibility timeout before it (that kill's batch may still be held at since).
func (c *checker) killsIn(typ string, since, now time.Time) int {
	n := 0
	for _, k := range c.kills[typ] {
		if k.After(since.Add(-c.w.cfg.Visibility)) && !k.After(now) {
			n++
		}
	}
	return n
}

// idleBound is the work-conservation bound for typ over an idle interval from since to now.
// Without crashes a lane waits at most for a parked group's park (waitroom.ParkPeriod: 60 s to 4
// minutes; the sweep wakes parked groups while lanes are free), a dead-letter back-off
// (120 s) or a lost status event (the sweep: its minimum age and period), plus a margin: 5
// minutes. A crash may leave a lane to its message's visibility timeout and then to the sweep's
// stale check (1.5 times the visibility timeout) and period; the bound allows two such crashes in
// a row in any run with kills (a loose floor: seeds 130 and 364 of the gate profile idle a type
// for just over one crash's worth). Past that floor it follows the kills that hit the type's own
// work (a delivery of its messages, a release of its execution) in the interval: a killed
// delivery leaves its whole batch in flight, so its FIFO groups blocked, for the visibility
// timeout, and the bound is the 5 minutes plus the time those holds cover, each from its kill for
// a visibility timeout, overlapping ones counted once. Seeds 980 and 1101 of `races` kill the
// delivery of gamma's waiting group six or seven times in a row, each as the group came back,
// while gamma has free lanes: the group was in flight for 31 of the 32 minutes it idled. A lost
// wake-up stays found in such a run: its group's deliveries that live park, and the minutes they
// cover count for nothing (seed 21106 of `all+pools`, with its fix reverted, killed five of the
// waiting group's deliveries in its 32 minutes and is still caught).
func (c *checker) idleBound(typ string, since, now time.Time) time.Duration {
	if c.w.cfg.IdleBound > 0 {
		return c.w.cfg.IdleBound
	}
	b := 5 * time.Minute
	if c.w.cfg.Faults.Kill > 0 {
		b += max(2*(c.w.cfg.Visibility*5/2+c.w.cfg.SweepEvery), c.heldByKills(typ, since, now))
	}
	return b
}

// heldByKills is how much of the interval from since to now the kills of typ's work hold it: each
// from its kill for a visibility timeout (its batch in flight), overlapping ones counted once.
func (c *checker) heldByKills(typ string, since, now time.Time) time.Duration {
	var held time.Duration
	end := since                     // held up to here
	for _, k := range c.kills[typ] { // in time order
		from, to := k, k.Add(c.w.cfg.Visibility)
		if from.Before(end) {
			from = end
		}
		if to.After(now) {
			to = now
		}
		if to.After(from) {
			held += to.Sub(from)
			end = to
		}
	}
	return held
}

// settle is how long the world runs on after the last job ended before its leftovers are checked.
func (c *checker) settle() time.Duration {
	return c.w.cfg.Visibility*3 + 3*c.w.cfg.SweepEvery
}

// quiescence checks that nothing is left: no message in flight or waiting, no lease, no park
// record, no running execution, and every job ended.
func (c *checker) quiescence() {
	w := c.w
	for _, q := range []*queue{w.general, w.lanes} {
		for _, m := range q.live() {
			c.violate(KindLeftover, subjectOfBody(m), "message %s of group %q in %s (%d receives)", m.id, m.group, q.name, m.receives)
		}
	}
	out, err := w.table.Scan(context.Background(), &dynamodb.ScanInput{TableName: aws.String("sim")})
	if err != nil {
		c.violate(KindLeftover, "table", "scan: %v", err)
	}
	if out != nil {
		for _, it := range out.Items {
			k := keyString(it)
			if strings.HasPrefix(k, "LEASE#") || strings.HasPrefix(k, "WAIT#") {
				job := ""
				if s, ok := it["jobId"].(*ddbtypes.AttributeValueMemberS); ok {
					job = s.Value
				}
				status := ""
				if s, ok := it["status"].(*ddbtypes.AttributeValueMemberS); ok {
					status = s.Value
				}
				c.violate(KindLeftover, strings.TrimPrefix(strings.SplitN(k, "|", 2)[0], "LEASE#")+"/"+job, "item %s (status %q, job %s)", k, status, job)
			}
		}
	}
	for _, e := range w.sfn.order {
		if e.status == sfntypes.ExecutionStatusRunning {
			c.violate(KindLeftover, jobKeyOf(e.meta.Type, e.meta.Sender, e.meta.Key, e.meta.ID), "execution %s still running", e.name)
		}
	}
	for _, j := range w.order {
		if k := j.k; c.ended[k] == "" {
			c.violate(KindNotEnded, k, "%ssubmitted at %s, never succeeded, dead-lettered, cancelled nor skipped", genText(c.ops.gen[k]), j.submitAt)
		}
	}
	c.checkStopped()
	c.checkCancelled()
	c.checkSkipped()
	c.checkMetrics()
	c.checkKeyRates()
	c.checkBatches()
	c.checkInterlopers()
}

func subjectOfBody(m *msg) string {
	var b struct {
		ID     string `json:"id"`
		Key    string `json:"key"`
		Sender string `json:"sender"`
	}
	if json.Unmarshal([]byte(m.body), &b) == nil && b.ID != "" {
		return jobKeyOf(typeOfGroup(m.group), b.Sender, b.Key, b.ID)
	}
	return m.group
}

// finish stops the world: no more polls, sweeps or submissions; the invocations in flight run to
// their end so that every goroutine of the bubble returns.
func (c *checker) finish() {
	c.done = true
	c.w.stopped = true
}

// checkMetrics compares the published JobsSucceeded with the jobs Step Functions ran to success
// (each generation of a redriven job is one). Users alarm and bill on it: a job counted twice is
// never right. A release counts a success once its lease delete is answered, so it may count fewer
// when a killed invocation loses what it had not flushed (as in Lambda), or when that delete's
// answer is lost (the release cannot tell its own delete from another's).
func (c *checker) checkMetrics() {
	f := c.w.cfg.Faults
	// A job stopped by a newer one after its work ended may be counted cancelled (cancelClosed).
	exact := c.w.Stats.Kills == 0 && f.DDBAmbiguous == 0 && f.DDBLost == 0 && len(c.ops.lateCancels) == 0
	succeeded := 0
	for _, how := range c.ops.ended {
		if how == "succeeded" {
			succeeded++
		}
	}
	got := int(c.w.metrics.Sum("", metrics.JobsSucceeded))
	if got > succeeded || (got < succeeded && exact) {
		c.violate(KindMetric, metrics.JobsSucceeded, "%d published, %d jobs succeeded (%d invocations killed)", got, succeeded, c.w.Stats.Kills)
	}
}
