package tests

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/sfnlimit/sfnlimit/internal/lambda/app"
	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	sfnjob "github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
	"github.com/sfnlimit/sfnlimit/internal/lambda/metrics"
	"github.com/sfnlimit/sfnlimit/internal/lambda/releaser"
	"github.com/sfnlimit/sfnlimit/internal/lambda/starter"
	"github.com/sfnlimit/sfnlimit/internal/lambda/waitroom"
	"github.com/sfnlimit/sfnlimit/internal/tools/local/observe"
)

// Flow control (issue 14): a pause, a start rate and priorities, each checked from Step Functions'
// own records with every invariant of the suite.

// flowCacheSecs is ConfigCacheSeconds in these scenarios: a live change reaches every function
// within it.
const flowCacheSecs = 1

// Scenario 17: types paused, held paused, then resumed. Type p (limit 2) gets 12 jobs of 3 s,
// submitted one at a time (each routed before the next is sent, so the order they wait in is the
// order they were submitted); once four have started, p and q (limit 2, nothing submitted yet) are
// paused through their live config items, as `sfnlimit pause` writes them. Type u (limit 2, never
// paused) runs 4 jobs meanwhile. Once p's running jobs have ended, q gets 8 jobs of 3 s, which
// arrive paused. The pause is held 25 s, then cleared and the parked jobs woken
// (releaser.Service.WakeResumed), as `sfnlimit resume` does.
//
// Checked from Step Functions' records: every invariant of the suite; no job of p or q started once
// the pause had reached every function (the pause, the cache age, and the longest a start that read
// the config just before could take, measured on this run); p's executions running at the pause
// worked to their end while it held, and u ran; after the resume each paused type started again
// within a bound far below waitroom.ParkFor, and every job started once (attempt 1: a pause uses
// none), in the order it was submitted. The SQS calls of the paused jobs are counted while the pause
// holds (logged per paused job per hour), and the cost of one look of a paused waiting group (q's
// head, received while paused); both must stay within a few calls per waiting group and park.
func TestPauseAndResume(t *testing.T) {
	forBackends(t, sqsFacing, func(t *testing.T, b backend) { pauseScenario(t, b) })
}

// Scenario 18: a start rate. Type rt (limit 10) may start 2 jobs a second with bursts of 2
// (TypeRates "rt=2:2"); 30 jobs of 1 s are submitted at once. From Step Functions' start dates: no
// window of one second holds more than R+B starts, plus R times the longest a start can trail its
// token (the token is taken before the claim and StartExecution; measured on this run); while the
// backlog lasts the starts come at close to R (logged; asserted only above R/2); every job started
// once, as attempt 1 (waiting for a token uses no attempt); every invariant of the suite.
func TestStartRate(t *testing.T) {
	forBackends(t, sqsFacing, func(t *testing.T, b backend) { rateScenario(t, b) })
}

// Scenario 19: priorities. Type pr (limit 2) gets a burst of 16 low-priority jobs of 2 s; once both
// lanes run and the low jobs' waiting group is parked, 6 high-priority jobs. PriorityAgingSeconds is
// 600, so aging plays no part. From Step Functions' records: every high job started before every low
// job still waiting when the high jobs' group first parked (save those that may already have had a
// lane then: one per lane not working at that instant); every invariant of the suite. The wait of
// the high jobs is logged beside that of the low jobs still waiting and of a semaphore that serves
// the high jobs first (replayed on the run's own work intervals).
func TestPriorities(t *testing.T) {
	forBackends(t, sqsFacing, func(t *testing.T, b backend) { priorityScenario(t, b) })
}

const (
	pauseJobSeconds = 3
	pauseHold       = 25 * time.Second
	// resumeWithin bounds the wait from the resume to a paused type's first start: the wake-up, a
	// receive and a bind. A parked job nobody wakes looks again only after waitroom.ParkFor (60 s).
	resumeWithin = 20 * time.Second
	// lookCalls bounds the SQS calls of one look of a paused waiting group: the receive of its
	// batch, the head's visibility change and the return of the rest of the batch, and a spare.
	lookCalls = 4
)

// pausedType is one type of scenario 17: its jobs in submission order, and whether it was paused
// while its jobs ran.
type pausedType struct {
	typ    string
	jobs   []job
	midRun bool
}

func pauseScenario(t *testing.T, b backend) {
	ctx := t.Context()
	timer := &callTimer{}
	r := newRig(t, rigOptions{backend: b, functionAWS: timer.on("starter"), params: map[string]string{
		"TypeLimits": "p=2,q=2,u=2", "ConfigCacheSeconds": fmt.Sprint(flowCacheSecs),
	}})
	since := func(at time.Time) time.Duration { return at.Sub(r.began).Round(100 * time.Millisecond) }
	batch := func(typ string, n int) []job {
		var js []job
		for i := range n {
			js = append(js, job{Type: typ, ID: fmt.Sprintf("%s-%02d", typ, i), Input: work{Seconds: pauseJobSeconds}})
		}
		return js
	}
	p := pausedType{typ: "p", jobs: batch("p", 12), midRun: true}
	q := pausedType{typ: "q", jobs: batch("q", 8)}
	us := batch("u", 4)

	r.submitInOrder(ctx, p.jobs)
	r.waitFor(ctx, progressWithin, "four jobs of p to start", func() (bool, string) {
		n := len(r.startedOf(ctx, p.jobs))
		return n >= 4, fmt.Sprintf("%d started", n)
	})
	store := config.NewDynamoStore(r.c.DDB, r.table)
	for _, typ := range []string{p.typ, q.typ} {
		if err := store.SetOverride(ctx, config.Override{Type: typ, Pause: &config.Pause{Reason: "e2e: partner incident", Since: time.Now()}}); err != nil {
			t.Fatalf("pause %s: %v", typ, err)
		}
	}
	paused := time.Now() // both items are written: every read from now on sees the pause
	r.submit(ctx, us...)
	r.waitFor(ctx, progressWithin, "p's running jobs and u's jobs to end", func() (bool, string) {
		st := r.executionStatuses(ctx)
		var pending []string
		for _, j := range append(append([]job(nil), p.jobs...), us...) {
			s, ok := st[r.runName(j, 0, 1)]
			if (ok && s == string(sfntypes.ExecutionStatusRunning)) || (!ok && j.Type == "u") {
				pending = append(pending, j.ID)
			}
		}
		return len(pending) == 0, strings.Join(pending, ", ")
	})

	// q's jobs arrive paused: its waiting group's head is received once and parks for the pause.
	beforeLook := r.sqsTally()
	r.submitInOrder(ctx, q.jobs)
	r.waitFor(ctx, progressWithin, "q's waiting group to park for the pause", func() (bool, string) {
		return r.parkedForPause(ctx, q.typ), "no park record of q marked paused"
	})
	look := r.sqsTally().minus(beforeLook)

	// While the pause holds with nothing of either type running: the SQS calls their waiting jobs cost.
	waiting := len(p.jobs) - len(r.startedOf(ctx, p.jobs)) + len(q.jobs)
	from, before := time.Now(), r.sqsTally()
	hold := max(time.Until(paused.Add(pauseHold)), 10*time.Second)
	select {
	case <-ctx.Done():
		t.Fatalf("cancelled while paused: %v", ctx.Err())
	case <-time.After(hold):
	}
	window, spent := time.Since(from), r.sqsTally().minus(before)
	startedPaused := len(r.startedOf(ctx, p.jobs)) + len(r.startedOf(ctx, q.jobs))

	woken := map[string]int{}
	resumed := map[string]time.Time{}
	for _, pt := range []pausedType{p, q} {
		// From the write that clears the pause, a start may come (a function that reads the
		// config then, the sweep's wake-up), before the resume's own wake-up is done.
		resumed[pt.typ] = time.Now()
		woken[pt.typ] = r.resume(ctx, store, pt.typ)
	}
	out := r.settle(ctx, settleWithin)
	t.Logf("paused at %v, resumed at %v (parked groups woken: %v); %d jobs waited paused", since(paused), since(resumed[p.typ]), woken, waiting)
	r.checkInvariants(ctx, out, nil)

	// The SQS calls of the paused jobs: over the window, and of the one look q's group took (the
	// router's sends of q's jobs and the general queue's deletes are their submission's, not the
	// pause's).
	calls, lookCost := spent.jobCalls(), look.functions-look.router+look.receives
	perJobHour := float64(calls) / float64(max(waiting, 1)) / window.Hours()
	steady := float64(lookCost) * (time.Hour.Seconds() / starter.PausedParkFor.Seconds()) / float64(len(q.jobs))
	t.Logf("%s: SQS calls while %d jobs were paused, over %v: %d (functions %d, lanes-queue receives with messages %d, event-source deletes %d); "+
		"%.1f SQS calls per paused job per hour; idle long polls of both queues (the event sources', whatever waits) %d",
		b.name, waiting, window.Round(100*time.Millisecond), calls, spent.functions, spent.receives, spent.pollerOther, perJobHour, spent.emptyReceives)
	t.Logf("%s: one look of a paused waiting group (q's head received while paused, %d jobs behind it): %d SQS calls (%d receives with messages); "+
		"at one look per starter.PausedParkFor (%v): %.2f SQS calls per paused job per hour; metric JobsPaused %v",
		b.name, len(q.jobs)-1, lookCost, look.receives, starter.PausedParkFor, steady, r.s.Metrics().Sum("", metrics.JobsPaused))
	if lookCost > lookCalls {
		t.Errorf("one look of q's paused waiting group cost %d SQS calls, want at most %d", lookCost, lookCalls)
	}
	// Each paused waiting group (p's and q's) takes at most one look when the window began and
	// one per waitroom.ParkFor after it (a head parked for a lane before the pause looks again
	// then, and parks for the pause).
	looks := 2 * (2 + int(window/waitroom.ParkFor))
	if bound := int64(lookCalls * looks); calls > bound {
		t.Errorf("the paused jobs cost %d SQS calls in %v, want at most %d (%d per look, %d looks): the lanes queue hands them out over and over",
			calls, window.Round(time.Second), bound, lookCalls, looks)
	}
	if startedPaused != len(p.jobs)+len(q.jobs)-waiting {
		t.Errorf("%d jobs started while the pause held with nothing of p or q running, want none", startedPaused-(len(p.jobs)+len(q.jobs)-waiting))
	}
	if r.s.Metrics().Sum(q.typ, metrics.JobsPaused) == 0 {
		t.Errorf("metric JobsPaused of q is 0, want its waiting group's park for the pause counted")
	}
	for _, u := range us {
		for _, x := range out.byJob[u.Type+"/"+u.ID] {
			if !x.Start.Before(resumed[p.typ]) {
				t.Errorf("job %s of type u (never paused) started at %s, only after the resume (%s)", u.ID, stamp(x.Start), stamp(resumed[p.typ]))
			}
		}
	}
	for _, pt := range []pausedType{p, q} {
		checkPause(t, r, out, timer, pt, paused, resumed[pt.typ])
	}
}

// checkPause checks a type of scenario 17 against its pause, from Step Functions' records.
func checkPause(t *testing.T, r *rig, out *settled, timer *callTimer, pt pausedType, paused, resumed time.Time) {
	t.Helper()
	// A function may serve the config it read just before the pause for the cache age, after a read
	// that took up to the longest DynamoDB call; a start that passed its check then takes at most
	// its claim and StartExecution.
	reads, path := timer.maxDuration("DynamoDB"), timer.maxStartPath()
	effective := paused.Add(flowCacheSecs*time.Second + reads + path)
	var inFlight, running int
	var firstAfter time.Time
	for _, x := range out.xs {
		if x.Job.Type != pt.typ {
			continue
		}
		switch {
		case x.Start.After(paused) && !x.Start.After(effective):
			inFlight++
		case x.Start.After(effective) && x.Start.Before(resumed):
			t.Errorf("execution %s started at %s, after the pause took effect (%s) and before the resume (%s)", x.Name, stamp(x.Start), stamp(effective), stamp(resumed))
		}
		if !x.Start.After(paused) && (x.WorkEnd.IsZero() || x.WorkEnd.After(paused)) {
			running++
		}
		// Started before the resume: it must have worked to its end while the pause held.
		if x.Start.Before(resumed) && (x.WorkEnd.IsZero() || x.WorkEnd.After(resumed)) {
			t.Errorf("execution %s started at %s, before the resume (%s), and worked until %s: a pause must let running work finish", x.Name, stamp(x.Start), stamp(resumed), stamp(x.WorkEnd))
		}
		if !x.Start.Before(resumed) && (firstAfter.IsZero() || x.Start.Before(firstAfter)) {
			firstAfter = x.Start
		}
	}
	t.Logf("type %s: pause effective by %s (paused %s + cache %d s + longest DynamoDB call %v + longest claim-to-start %v); %d running at the pause, %d starts while it was reaching the functions; first start %v after the resume",
		pt.typ, stamp(effective), stamp(paused), flowCacheSecs, reads.Round(time.Millisecond), path.Round(time.Millisecond), running, inFlight, firstAfter.Sub(resumed).Round(100*time.Millisecond))
	if inFlight > r.limits[pt.typ] {
		t.Errorf("type %s: %d executions started while the pause was reaching the functions, want at most one per lane (%d)", pt.typ, inFlight, r.limits[pt.typ])
	}
	if pt.midRun && running == 0 {
		t.Errorf("type %s: nothing ran when it was paused: the scenario did not pause it mid-run", pt.typ)
	}
	lag := overrun(out.xs, func(x observe.Execution) (int, bool) { return pauseJobSeconds, x.Job.Type == pt.typ })
	if firstAfter.IsZero() {
		t.Errorf("type %s: no job started after the resume", pt.typ)
	} else if bound := resumeWithin + lag; firstAfter.Sub(resumed) > bound {
		t.Errorf("type %s: first start after the resume came %v after it, want within %v (overrun %v): the resume left the parked jobs to their own timeout (waitroom.ParkFor %v)",
			pt.typ, firstAfter.Sub(resumed).Round(100*time.Millisecond), bound.Round(time.Second), lag.Round(10*time.Millisecond), waitroom.ParkFor)
	}

	// Once each, as attempt 1, and in submission order: a job that started before one submitted
	// earlier did so by more than any bind-to-start latency of this run (two binds a moment apart
	// start in either order) only if it overtook it while waiting.
	tol := bindToStart(r.logs, pt.typ)
	starts := make([]time.Time, len(pt.jobs))
	for i, j := range pt.jobs {
		xs := out.byJob[j.Type+"/"+j.ID]
		if len(xs) != 1 || xs[0].Job.Attempt != 1 {
			t.Errorf("job %s: executions %s, want exactly one, attempt 1 (a pause uses no attempt)", j.ID, names(xs))
		}
		if len(xs) > 0 {
			starts[i] = xs[0].Start
		}
	}
	moved := r.logs.count("type paused; job back to wait until it is resumed")
	inverted := 0
	for i := range pt.jobs {
		for k := i + 1; k < len(pt.jobs); k++ {
			if !starts[i].IsZero() && !starts[k].IsZero() && starts[i].Sub(starts[k]) > tol {
				inverted++
				t.Errorf("job %s (submitted after %s) started at %s, %v before it (%s): the pause changed their order (jobs sent back to wait: %d)",
					pt.jobs[k].ID, pt.jobs[i].ID, stamp(starts[k]), starts[i].Sub(starts[k]).Round(time.Millisecond), stamp(starts[i]), moved)
			}
		}
	}
	t.Logf("type %s: %d jobs, %d pairs out of submission order (tolerance %v, the longest bind-to-start)", pt.typ, len(pt.jobs), inverted, tol.Round(time.Millisecond))
}

const (
	rateType  = "rt"
	rateLimit = 10
	rateR     = 2
	rateB     = 2
	rateJobs  = 30
)

func rateScenario(t *testing.T, b backend) {
	ctx := t.Context()
	timer := &callTimer{}
	r := newRig(t, rigOptions{backend: b, functionAWS: timer.on("starter"), params: map[string]string{
		"TypeLimits": fmt.Sprintf("%s=%d", rateType, rateLimit), "TypeRates": fmt.Sprintf("%s=%d:%d", rateType, rateR, rateB),
	}})
	var js []job
	for i := range rateJobs {
		js = append(js, job{Type: rateType, ID: fmt.Sprintf("rt-%02d", i), Input: work{Seconds: 1}})
	}
	sent := time.Now()
	r.submit(ctx, js...)
	out := r.settle(ctx, settleWithin)
	r.checkInvariants(ctx, out, nil)

	var starts []time.Time
	for _, j := range js {
		xs := out.byJob[j.Type+"/"+j.ID]
		if len(xs) != 1 || xs[0].Job.Attempt != 1 {
			t.Errorf("job %s: executions %s, want exactly one, attempt 1 (waiting for a start token uses no attempt)", j.ID, names(xs))
		}
		for _, x := range xs {
			starts = append(starts, x.Start)
		}
	}
	sort.Slice(starts, func(i, j int) bool { return starts[i].Before(starts[j]) })
	if len(starts) <= rateB+1 {
		t.Fatalf("%d starts, too few to measure a rate", len(starts))
	}

	// The token is taken before the claim and StartExecution: a start date trails its token by at
	// most the claim-to-start path, so starts of a one-second window spent tokens from a window that
	// much longer.
	lag := timer.maxStartPath()
	allowed := float64(rateR+rateB) + rateR*lag.Seconds()
	// For comparison, the part of it the logs show: from a start date to the starter's "started".
	var logged time.Duration
	for _, e := range r.logs.eventsOf("started") {
		for _, x := range out.byJob[rateType+"/"+e.JobID] {
			logged = max(logged, e.At.Sub(x.Start))
		}
	}
	most, at := 0, time.Time{}
	for i, s := range starts {
		n := 0
		for _, u := range starts[i:] {
			if u.Sub(s) < time.Second {
				n++
			}
		}
		if n > most {
			most, at = n, s
		}
	}
	span := starts[len(starts)-1].Sub(starts[rateB-1])
	achieved := float64(len(starts)-rateB) / span.Seconds()
	waited, limited := r.logs.count("waited for a start token"), r.s.Metrics().Sum(rateType, metrics.JobsRateLimited)
	t.Logf("%s: %d starts from %v after submission to %v; at most %d in one second (from %s); R+B = %d, allowed %.2f with the longest claim-to-start %v "+
		"(start date to the \"started\" log line: at most %v); rate while backlogged %.2f/s (R = %d/s); starts that waited in the invocation %d, put back %v",
		b.name, len(starts), starts[0].Sub(sent).Round(10*time.Millisecond), starts[len(starts)-1].Sub(sent).Round(10*time.Millisecond),
		most, stamp(at), rateR+rateB, allowed, lag.Round(time.Millisecond), logged.Round(time.Millisecond), achieved, rateR, waited, limited)
	if float64(most) > allowed {
		t.Errorf("%d starts within one second from %s, want at most %.2f (R %d + B %d + R x %v)", most, stamp(at), allowed, rateR, rateB, lag.Round(time.Millisecond))
	}
	if achieved < rateR/2.0 {
		t.Errorf("starts came at %.2f/s while jobs waited, want close to the rate %d/s (at least half of it)", achieved, rateR)
	}
	if waited == 0 && limited == 0 {
		t.Errorf("no start waited for a token: the scenario tested nothing")
	}
}

const (
	prType       = "pr"
	prLimit      = 2
	prLows       = 16
	prHighs      = 6
	prJobSeconds = 2
)

func priorityScenario(t *testing.T, b backend) {
	ctx := t.Context()
	r := newRig(t, rigOptions{backend: b, params: map[string]string{
		"TypeLimits": fmt.Sprintf("%s=%d", prType, prLimit), "PriorityAgingSeconds": "600",
	}})
	lowGroup := sfnjob.PriorityGroupID(sfnjob.WaitingGroupID(prType, 0), sfnjob.LowPriority)
	highGroup := sfnjob.PriorityGroupID(sfnjob.WaitingGroupID(prType, 0), sfnjob.HighPriority)
	var lows, highs []job
	for i := range prLows {
		lows = append(lows, job{Type: prType, ID: fmt.Sprintf("low-%02d", i), Priority: "low", Input: work{Seconds: prJobSeconds}})
	}
	for i := range prHighs {
		highs = append(highs, job{Type: prType, ID: fmt.Sprintf("high-%d", i), Priority: "high", Input: work{Seconds: prJobSeconds}})
	}
	r.submit(ctx, lows...)
	r.waitFor(ctx, progressWithin, "both lanes to run low jobs with the rest parked", func() (bool, string) {
		n, parked := r.running(ctx), r.parkedGroup(ctx, prType, lowGroup)
		return n >= prLimit && parked, fmt.Sprintf("%d running, low group parked %v", n, parked)
	})
	highSent := time.Now()
	r.submit(ctx, highs...)
	// The instant the high jobs could first be served before the low ones: their group parked (a
	// release wakes it first from then on), or one of them took a lane.
	var highSeen time.Time
	for deadline := time.Now().Add(progressWithin); highSeen.IsZero(); {
		if r.parkedGroup(ctx, prType, highGroup) || r.holdsLease(ctx, prType, "high-") {
			highSeen = time.Now()
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("the high jobs neither parked nor took a lane within %v", progressWithin)
		}
		time.Sleep(100 * time.Millisecond)
	}
	out := r.settle(ctx, settleWithin)
	t.Logf("high jobs sent %v after the stack started, first parked or bound %v after they were sent",
		highSent.Sub(r.began).Round(100*time.Millisecond), highSeen.Sub(highSent).Round(10*time.Millisecond))
	r.checkInvariants(ctx, out, nil)

	first := func(j job) (observe.Execution, bool) {
		xs := out.byJob[j.Type+"/"+j.ID]
		if len(xs) != 1 || xs[0].Job.Attempt != 1 {
			t.Errorf("job %s: executions %s, want exactly one, attempt 1", j.ID, names(xs))
		}
		if len(xs) == 0 {
			return observe.Execution{}, false
		}
		return xs[0], true
	}
	var hx, lowAfter, lowWaiting []observe.Execution
	for _, j := range highs {
		if x, ok := first(j); ok {
			hx = append(hx, x)
			if x.Job.Priority != sfnjob.HighPriority {
				t.Errorf("job %s ran with priority %d in its input, want %d", j.ID, x.Job.Priority, sfnjob.HighPriority)
			}
		}
	}
	for _, j := range lows {
		if x, ok := first(j); ok {
			if x.Start.After(highSeen) {
				lowAfter = append(lowAfter, x)
			}
			if x.Start.After(highSent) {
				lowWaiting = append(lowWaiting, x)
			}
		}
	}
	sort.Slice(lowAfter, func(i, j int) bool { return lowAfter[i].Start.Before(lowAfter[j].Start) })
	if len(hx) != prHighs {
		return
	}
	var lastHigh observe.Execution
	for _, x := range hx {
		if x.Start.After(lastHigh.Start) {
			lastHigh = x
		}
	}
	// At highSeen, a lane not working may already have been bound to a low job, or a low job woken
	// for it: those may start before the high jobs. Two binds a moment apart start in either order.
	lowOf := func(x observe.Execution) bool { return strings.HasPrefix(x.Job.ID, "low-") }
	early := max(0, prLimit-workingAt(out.xs, lowOf, highSeen, out.end))
	tol := bindToStart(r.logs, prType)
	passed := 0
	for i, x := range lowAfter {
		if i < early {
			continue
		}
		if lastHigh.Start.Sub(x.Start) > tol {
			passed++
			t.Logf("low job %s started at %s, before high job %s (%s), though it still waited when the high jobs' group parked (%s)",
				x.Job.ID, stamp(x.Start), lastHigh.Job.ID, stamp(lastHigh.Start), stamp(highSeen))
		}
	}
	// A group hands out one head at a time: while the high group's next head is on its way (woken,
	// not yet parked or bound), a second lane freeing at that moment goes to the best group parked,
	// a low one (docs/design.md, Flow control). So each high job can let at most limit-1 low jobs
	// pass; in FIFO order every waiting low job would.
	if most := (prLimit - 1) * prHighs; passed > most {
		t.Errorf("%d low jobs that waited when the high jobs parked started before the last high job, want at most %d (limit-1 per high job)", passed, most)
	}
	t.Logf("%d low jobs waited when the high ones were first served (%s), the first %d of which may have had a lane already; %d started before the last high job (tolerance %v, the longest bind-to-start)",
		len(lowAfter), stamp(highSeen), early, passed, tol.Round(time.Millisecond))
	if len(lowAfter) <= early {
		t.Errorf("only %d low jobs still waited when the high jobs parked: the scenario tested nothing", len(lowAfter))
	}

	ideal := semaphoreWaits(out.xs, hx, prLimit, highSent)
	var actual []time.Duration
	for _, x := range hx {
		actual = append(actual, x.Start.Sub(x.Job.SubmittedAt))
	}
	var lw []time.Duration
	for _, x := range lowWaiting {
		lw = append(lw, x.Start.Sub(x.Job.SubmittedAt))
	}
	t.Logf("%s: wait of the %d high jobs: mean %v, max %v; of a semaphore serving them first: mean %v, max %v; of the %d low jobs waiting when they came: mean %v, max %v",
		b.name, len(actual), mean(actual), maxOf(actual), mean(ideal), maxOf(ideal), len(lw), mean(lw), maxOf(lw))
	if mean(actual) >= mean(lw) {
		t.Errorf("high jobs waited %v on average, no less than the low jobs waiting when they came (%v): priority made no difference", mean(actual), mean(lw))
	}
}

// semaphoreWaits replays the high jobs on a semaphore of limit permits that serves them before any
// other job: at sent, each permit frees when the execution holding it (working at sent, of any
// priority) ends its work; each high job, in submission order, takes the first permit to free and
// holds it for its own work. It returns each job's wait from its submission.
func semaphoreWaits(all, highs []observe.Execution, limit int, sent time.Time) []time.Duration {
	var free []time.Time
	for _, x := range all {
		if !x.Start.After(sent) && x.WorkEnd.After(sent) {
			free = append(free, x.WorkEnd)
		}
	}
	for len(free) < limit {
		free = append(free, sent)
	}
	hs := append([]observe.Execution(nil), highs...)
	sort.Slice(hs, func(i, j int) bool { return hs[i].Job.SubmittedAt.Before(hs[j].Job.SubmittedAt) })
	var waits []time.Duration
	for _, h := range hs {
		sort.Slice(free, func(i, j int) bool { return free[i].Before(free[j]) })
		start := maxTime(free[0], h.Job.SubmittedAt)
		waits = append(waits, start.Sub(h.Job.SubmittedAt))
		free[0] = start.Add(h.WorkEnd.Sub(h.Start))
	}
	return waits
}

func mean(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return (sum / time.Duration(len(ds))).Round(10 * time.Millisecond)
}

func maxOf(ds []time.Duration) time.Duration {
	var m time.Duration
	for _, d := range ds {
		m = max(m, d)
	}
	return m.Round(10 * time.Millisecond)
}

// submitInOrder sends jobs one at a time, each once the router has routed the one before: the
// general queue is a standard queue, so jobs sent together may reach their waiting group in any
// order, and a scenario that checks FIFO order needs to know the order they wait in.
func (r *rig) submitInOrder(ctx context.Context, jobs []job) {
	r.t.Helper()
	for _, j := range jobs {
		before := r.s.Metrics().Sum(j.Type, metrics.JobsRouted)
		r.submit(ctx, j)
		deadline := time.Now().Add(progressWithin)
		for r.s.Metrics().Sum(j.Type, metrics.JobsRouted) <= before {
			if time.Now().After(deadline) || ctx.Err() != nil {
				r.t.Fatalf("job %s not routed within %v", j.ID, progressWithin)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// startedOf returns the jobs of js with an execution of their first attempt.
func (r *rig) startedOf(ctx context.Context, js []job) []string {
	st := r.executionStatuses(ctx)
	var out []string
	for _, j := range js {
		if _, ok := st[r.runName(j, 0, 1)]; ok {
			out = append(out, j.ID)
		}
	}
	return out
}

// parkedGroup reports whether a waiting group of typ has a park record.
func (r *rig) parkedGroup(ctx context.Context, typ, group string) bool {
	for _, p := range r.scan(ctx, "WAIT#"+typ) {
		if p["pk"] == "WAIT#"+typ && p["sk"] == group {
			return true
		}
	}
	return false
}

// parkedForPause reports whether a waiting group of typ has a park record marked paused.
func (r *rig) parkedForPause(ctx context.Context, typ string) bool {
	for _, p := range r.scan(ctx, "WAIT#"+typ) {
		if p["pk"] == "WAIT#"+typ && p["paused"] == "true" {
			return true
		}
	}
	return false
}

// holdsLease reports whether a job of typ whose id starts with prefix holds a lane.
func (r *rig) holdsLease(ctx context.Context, typ, prefix string) bool {
	for _, l := range r.leases(ctx) {
		if l["type"] == typ && strings.HasPrefix(l["jobId"], prefix) {
			return true
		}
	}
	return false
}

// resume clears typ's pause in its live config item and wakes the jobs parked while it held, as
// `sfnlimit resume` does: through the releaser's own service, built from the releaser function's
// environment, reading the config past any cache.
func (r *rig) resume(ctx context.Context, store *config.DynamoStore, typ string) int {
	r.t.Helper()
	ovs, err := store.ListOverrides(ctx)
	if err != nil {
		r.t.Fatalf("read live config: %v", err)
	}
	o := config.Override{Type: typ}
	for _, ov := range ovs {
		if ov.Type == typ {
			o = ov
		}
	}
	o.Pause = nil
	if err := store.SetOverride(ctx, o); err != nil {
		r.t.Fatalf("resume %s: %v", typ, err)
	}
	n, err := r.releaserService().WakeResumed(ctx, typ)
	if err != nil {
		r.t.Fatalf("WakeResumed(%s) = %v", typ, err)
	}
	return n
}

// releaserService builds the releaser's service as the releaser function has it, but with no config
// cache (an operator's command reads the table).
func (r *rig) releaserService() *releaser.Service {
	r.t.Helper()
	tpl, res := r.s.Template()
	for _, f := range tpl.Functions() {
		fc, err := res.Function(f)
		if err != nil {
			r.t.Fatalf("function %s: %v", f.LogicalID, err)
		}
		if filepath.Base(filepath.Clean(fc.CodeDir)) != "releaser" {
			continue
		}
		env := func(k string) string {
			if k == "CONFIG_CACHE_SECONDS" {
				return "0"
			}
			if v, ok := r.o.env[k]; ok {
				return v
			}
			if v, ok := fastEnv[k]; ok {
				return v
			}
			return fc.Environment[k]
		}
		h, err := app.Releaser(env, r.c, r.logs.logger().With("function", "cli"))
		if err != nil {
			r.t.Fatalf("build the releaser's service: %v", err)
		}
		return h.Service
	}
	r.t.Fatalf("the template has no releaser function")
	return nil
}

// bindToStart is the longest a job of typ took from its bind (the starter's "bound to a free lane")
// to its start (its "started"), from the logs: two jobs bound a moment apart may start in either
// order by up to this much.
func bindToStart(logs *logSink, typ string) time.Duration {
	bound := map[string][]time.Time{}
	for _, e := range logs.eventsOf("bound to a free lane") {
		if e.Type == typ {
			bound[e.JobID] = append(bound[e.JobID], e.At)
		}
	}
	var worst time.Duration
	for _, e := range logs.eventsOf("started") {
		if e.Type != typ {
			continue
		}
		var last time.Time
		for _, at := range bound[e.JobID] {
			if at.Before(e.At) && at.After(last) {
				last = at
			}
		}
		if !last.IsZero() {
			worst = max(worst, e.At.Sub(last))
		}
	}
	return worst
}

// sqsTally counts SQS calls on the stack: the functions' own, and the event sources'.
type sqsTally struct {
	// functions are the router's, starter's and releaser's SQS calls; router the router's alone.
	functions, router int64
	// receives are the lanes queue's receives that returned messages (one per starter invocation).
	receives int64
	// pollerOther are the event sources' SQS calls other than receives (deletes of handled batches).
	pollerOther int64
	// emptyReceives are the event sources' receives that returned nothing, on both queues: the
	// long polls an event source makes whether or not anything waits.
	emptyReceives int64
}

func (r *rig) sqsTally() sqsTally {
	var t sqsTally
	for _, fn := range []string{"router", "starter", "releaser"} {
		for _, row := range r.s.Counter(fn).Snapshot() {
			if row.Service == "SQS" {
				t.functions += row.Calls
				if fn == "router" {
					t.router += row.Calls
				}
			}
		}
	}
	var receives int64
	for _, row := range r.s.Counter("pollers").Snapshot() {
		switch {
		case row.Service != "SQS":
		case row.Operation == "ReceiveMessage":
			receives += row.Calls
		default:
			t.pollerOther += row.Calls
		}
	}
	st := r.s.LastRuntimeStats()
	t.receives = int64(st["starter"].Receives)
	t.emptyReceives = receives - t.receives - int64(st["router"].Receives)
	return t
}

func (t sqsTally) minus(o sqsTally) sqsTally {
	return sqsTally{t.functions - o.functions, t.router - o.router, t.receives - o.receives, t.pollerOther - o.pollerOther, t.emptyReceives - o.emptyReceives}
}

// jobCalls are the calls the waiting jobs caused: all but the idle long polls.
func (t sqsTally) jobCalls() int64 { return t.functions + t.receives + t.pollerOther }

// callTimer times one function's AWS calls (SDK middleware), so a scenario's timing tolerances come
// from the run itself: how long a call took on this machine, at this load.
type callTimer struct {
	mu    sync.Mutex
	calls []timedCall
}

type timedCall struct {
	Service string
	// Exec names the execution of a StartExecution, or of a claim (a lease written with status
	// starting, which names its execution before the start).
	Exec       string
	Claim      bool
	Sent, Done time.Time
	Failed     bool
}

// on returns a rigOptions.functionAWS that times function's calls.
func (c *callTimer) on(function string) func(string, *aws.Config) {
	return func(fn string, cfg *aws.Config) {
		if fn == function {
			cfg.APIOptions = append(cfg.APIOptions, c.option)
		}
	}
}

func (c *callTimer) option(stack *middleware.Stack) error {
	return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("e2eCallTimer",
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			tc := timedCall{Service: awsmiddleware.GetServiceID(ctx), Sent: time.Now()}
			switch p := in.Parameters.(type) {
			case *sfn.StartExecutionInput:
				tc.Exec = aws.ToString(p.Name)
			case *dynamodb.PutItemInput:
				st, _ := p.Item["status"].(*ddbtypes.AttributeValueMemberS)
				arn, _ := p.Item["executionArn"].(*ddbtypes.AttributeValueMemberS)
				if st != nil && st.Value == string(lease.Starting) && arn != nil {
					tc.Exec, tc.Claim = arn.Value[strings.LastIndexByte(arn.Value, ':')+1:], true
				}
			}
			out, md, err := next.HandleInitialize(ctx, in)
			tc.Done, tc.Failed = time.Now(), err != nil
			c.mu.Lock()
			c.calls = append(c.calls, tc)
			c.mu.Unlock()
			return out, md, err
		}), middleware.After)
}

// maxDuration is the longest call to service.
func (c *callTimer) maxDuration(service string) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	var worst time.Duration
	for _, tc := range c.calls {
		if tc.Service == service {
			worst = max(worst, tc.Done.Sub(tc.Sent))
		}
	}
	return worst
}

// maxStartPath is the longest from a claim's write being sent to its StartExecution answering: a
// start date falls within it, so a check the starter made before its claim (the config, a start
// token) precedes the start date by at most this much (and the starter's own code between them).
func (c *callTimer) maxStartPath() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	claims := map[string][]time.Time{}
	for _, tc := range c.calls {
		if tc.Claim {
			claims[tc.Exec] = append(claims[tc.Exec], tc.Sent)
		}
	}
	var worst time.Duration
	for _, tc := range c.calls {
		if tc.Service != "SFN" || tc.Exec == "" || tc.Failed {
			continue
		}
		var last time.Time
		for _, at := range claims[tc.Exec] {
			if !at.After(tc.Sent) && at.After(last) {
				last = at
			}
		}
		if !last.IsZero() {
			worst = max(worst, tc.Done.Sub(last))
		}
	}
	return worst
}
