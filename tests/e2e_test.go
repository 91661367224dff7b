package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	sfnjob "github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lane"
	"github.com/sfnlimit/sfnlimit/internal/tools/local/gateway"
	"github.com/sfnlimit/sfnlimit/internal/tools/local/observe"
)

// settleWithin bounds every wait for a scenario's jobs to finish; the scenarios take 10-80 s on a
// quiet machine and several times that on a busy one. progressWithin bounds a wait for one step
// of a scenario (a job to start, a run to finish). Both only bound a stack that stopped making
// progress: a passing run never waits for them.
const (
	settleWithin   = 12 * time.Minute
	progressWithin = 4 * time.Minute
)

// Scenario 2: jobs that outlive the lanes queue's visibility timeout. The template refuses a
// FifoVisibilityTimeout below 30 s (Lambda wants it at least the starter's 30 s timeout), so the
// test sets that minimum and runs jobs of 34-36 s: each job's message is delivered again while its
// execution runs. There must be exactly one execution per job, and each release (with the receipt
// handle of the latest delivery: fauxqs, like AWS, ignores a stale one) must still delete it.
// It is first in the file because it is the longest.
func TestJobsOutliveVisibilityTimeout(t *testing.T) {
	forBackends(t, sqsFacing, func(t *testing.T, b backend) {
		ctx := t.Context()
		const visibility = 30
		// Random lanes: the ids are placed with the router's hashed choice.
		r := newRig(t, rigOptions{backend: b, params: map[string]string{
			"TypeLimits": "long=2,short=2", "FifoVisibilityTimeout": fmt.Sprint(visibility), "LaneStrategy": "random",
		}})
		// Two long jobs per lane, so each lane must be released for its second job to run. Ids are
		// picked with the router's lane choice only so the run takes two rounds, not four.
		ids := idsPerLane(t, "long", 2, 2)
		var jobs []job
		for i, id := range ids {
			jobs = append(jobs, job{Type: "long", ID: id, Input: work{Seconds: visibility + 4 + i%3}})
		}
		for i := range 6 {
			jobs = append(jobs, job{Type: "short", ID: fmt.Sprintf("short-%d", i), Input: work{Seconds: 2}})
		}
		began := time.Now()
		r.submit(ctx, jobs...)
		out := r.settle(ctx, settleWithin)
		t.Logf("%d jobs of %d-%d s with a %d s visibility timeout done in %v", len(ids), visibility+4, visibility+6, visibility,
			time.Since(began).Round(100*time.Millisecond))
		r.checkInvariants(ctx, out, nil)

		for _, id := range ids {
			xs := out.byJob["long/"+id]
			if len(xs) != 1 || xs[0].Job.Attempt != 1 || xs[0].Status != string(sfntypes.ExecutionStatusSucceeded) {
				t.Errorf("job long/%s: executions %s, want exactly one, attempt 1, SUCCEEDED", id, names(xs))
			}
		}
		// Not an invariant: evidence that the scenario did what it is for (each long job's message
		// was delivered again while it ran and was held again, not restarted).
		if n := r.logs.count("holding its lane again"); n < len(ids) {
			t.Errorf("the starter held %d redelivered messages of running jobs, want at least %d (one per long job): the scenario did not outlive the visibility timeout", n, len(ids))
		} else {
			t.Logf("redelivered messages held again: %d", n)
		}
	})
}

// idsPerLane returns perLane ids for each of a type's lanes, as the router's lane choice places them.
func idsPerLane(t *testing.T, typ string, lanes, perLane int) []string {
	t.Helper()
	byLane := map[int][]string{}
	for i := 0; !full(byLane, lanes, perLane); i++ {
		id := fmt.Sprintf("%s-%03d", typ, i)
		l, err := routerLanes(t).Choose(context.Background(), sfnjob.Job{Type: typ, ID: id}, lanes)
		if err != nil {
			t.Fatal(err)
		}
		if len(byLane[l]) < perLane {
			byLane[l] = append(byLane[l], id)
		}
		if i > 10000 {
			t.Fatalf("no %d ids per lane found", perLane)
		}
	}
	var ids []string
	for l := 1; l <= lanes; l++ {
		ids = append(ids, byLane[l]...)
	}
	sort.Strings(ids)
	return ids
}

// routerLanes is the router's lane choice with LaneStrategy random, which scenarios that place jobs
// ask for. It derives the lane from the job's type and id, so a test can place jobs; placement only
// shapes a scenario's timing, never what it checks.
func routerLanes(t *testing.T) lane.Chooser {
	t.Helper()
	c, err := lane.New("random")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// idInLane returns an id that the router's lane choice puts in lane want of limit lanes.
func idInLane(t *testing.T, typ string, limit, want int, prefix string) string {
	t.Helper()
	for i := range 10000 {
		id := fmt.Sprintf("%s-%03d", prefix, i)
		if l, err := routerLanes(t).Choose(context.Background(), sfnjob.Job{Type: typ, ID: id}, limit); err == nil && l == want {
			return id
		}
	}
	t.Fatalf("no id for lane %d of %d", want, limit)
	return ""
}

func full(byLane map[int][]string, lanes, perLane int) bool {
	for l := 1; l <= lanes; l++ {
		if len(byLane[l]) < perLane {
			return false
		}
	}
	return true
}

// Scenario 1: steady mixed load over three types.
func TestSteadyMixedLoad(t *testing.T) {
	forBackends(t, sqsFacing, func(t *testing.T, b backend) {
		ctx := t.Context()
		r := newRig(t, rigOptions{backend: b, params: map[string]string{"TypeLimits": "a=2,b=3,c=5"}})
		var jobs []job
		for i := range 40 {
			typ := []string{"a", "b", "c", "c", "b", "c", "a", "c", "b", "c"}[i%10]
			jobs = append(jobs, job{Type: typ, ID: fmt.Sprintf("steady-%02d", i), Input: work{Seconds: 1 + i%3}})
		}
		began := time.Now()
		// Two waves, the second while the first runs.
		r.submit(ctx, jobs[:25]...)
		time.Sleep(3 * time.Second)
		r.submit(ctx, jobs[25:]...)
		out := r.settle(ctx, settleWithin)
		t.Logf("%d jobs done in %v", len(jobs), time.Since(began).Round(100*time.Millisecond))
		r.checkInvariants(ctx, out, nil)
		for _, j := range jobs {
			if xs := out.byJob[j.Type+"/"+j.ID]; len(xs) != 1 {
				t.Errorf("job %s/%s: executions %s, want exactly one", j.Type, j.ID, names(xs))
			}
		}
	})
}

// Scenario 3: failing jobs are tried DefaultMaxAttempts times, then dead-lettered with the reason
// attempts_exhausted and the workflow's error; a job that fails once and then succeeds is not
// dead-lettered.
func TestFailingJobs(t *testing.T) {
	forBackends(t, sqsFacing, func(t *testing.T, b backend) { failingJobs(t, b) })
}

func failingJobs(t *testing.T, b backend) {
	ctx := t.Context()
	// ExecutionTimeoutSeconds: jobs of type slow outlive it; every other job must end well within
	// it, its 1 s of work and the Release step included, on however busy a machine (a 4 s timeout
	// around 1 s jobs timed them out on a loaded 2-core machine).
	const timeout = 20
	r := newRig(t, rigOptions{backend: b, params: map[string]string{
		"TypeLimits": "f=2,ok=2,flaky=1,slow=2", "DefaultMaxAttempts": "2", "ExecutionTimeoutSeconds": fmt.Sprint(timeout),
	}})
	var jobs []job
	for i := range 4 {
		jobs = append(jobs,
			job{Type: "f", ID: fmt.Sprintf("fail-%d", i), Input: work{Seconds: 1, Fail: true, FailCause: fmt.Sprintf("boom %d", i)}, Want: "attempts_exhausted"},
			job{Type: "ok", ID: fmt.Sprintf("ok-%d", i), Input: work{Seconds: 1}})
	}
	// Executions that time out never reach the workflow's release step: the status-change event and
	// the sweep (both on, every 1 and 2 s) release them, racing each other.
	for i := range 3 {
		jobs = append(jobs, job{Type: "slow", ID: fmt.Sprintf("slow-%d", i), Input: work{Seconds: 3 * timeout}, Want: "attempts_exhausted"})
	}
	// The sample workflow fails while job.attempt <= input.failAttempts: these fail once, then succeed.
	jobs = append(jobs, job{Type: "flaky", ID: "flaky-0", Input: map[string]any{"seconds": 1, "failAttempts": 1}},
		job{Type: "flaky", ID: "flaky-1", Input: map[string]any{"failAttempts": 1}})
	began := time.Now()
	r.submit(ctx, jobs...)
	out := r.settle(ctx, settleWithin)
	t.Logf("%d jobs done in %v", len(jobs), time.Since(began).Round(100*time.Millisecond))
	r.checkInvariants(ctx, out, nil)

	for i := range 4 {
		id := fmt.Sprintf("fail-%d", i)
		xs := out.byJob["f/"+id]
		var got []string
		for _, x := range xs {
			got = append(got, fmt.Sprintf("%s/%s/attempt %d", x.Name, x.Status, x.Job.Attempt))
		}
		sort.Strings(got)
		jf := job{Type: "f", ID: id}
		want := []string{r.runName(jf, 0, 1) + "/FAILED/attempt 1", r.runName(jf, 0, 2) + "/FAILED/attempt 2"}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("job f/%s: executions %v, want %v", id, got, want)
		}
		if ds := out.dead["f/"+id]; len(ds) == 1 {
			a := ds[0].Attrs
			if a["reason"] != "attempts_exhausted" || a["error"] != "JobFailed" || a["attempt"] != "2" || a["type"] != "f" {
				t.Errorf("job f/%s dead letter attributes = %v, want reason attempts_exhausted, error JobFailed, attempt 2, type f", id, a)
			}
			if want := fmt.Sprintf("boom %d", i); !strings.Contains(a["cause"], want) {
				t.Errorf("job f/%s dead letter cause = %q, want it to contain the workflow's cause %q", id, a["cause"], want)
			}
			var body struct {
				Type, ID string
				Input    work
			}
			if err := json.Unmarshal([]byte(ds[0].Body), &body); err != nil || body.Type != "f" || body.ID != id || !body.Input.Fail {
				t.Errorf("job f/%s dead letter body = %s, want the job as submitted (err %v)", id, ds[0].Body, err)
			}
		}
	}
	for i := range 3 {
		id := fmt.Sprintf("slow-%d", i)
		var got []string
		for _, x := range out.byJob["slow/"+id] {
			got = append(got, x.Name+"/"+x.Status)
			// Cut by the timeout: not before it, and long before its work (3 timeouts) would end.
			if d := x.WorkEnd.Sub(x.Start); d < timeout*time.Second || d >= 3*timeout*time.Second {
				t.Errorf("execution %s worked %v, want it stopped by its %d s timeout (its work takes %d s)", x.Name, d, timeout, 3*timeout)
			}
		}
		sort.Strings(got)
		js := job{Type: "slow", ID: id}
		want := []string{r.runName(js, 0, 1) + "/TIMED_OUT", r.runName(js, 0, 2) + "/TIMED_OUT"}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("job slow/%s: executions %v, want %v", id, got, want)
		}
		if ds := out.dead["slow/"+id]; len(ds) == 1 && (ds[0].Attrs["attempt"] != "2" || ds[0].Attrs["error"] == "") {
			t.Errorf("job slow/%s dead letter attributes = %v, want attempt 2 and the timeout's error", id, ds[0].Attrs)
		}
	}
	for _, id := range []string{"flaky-0", "flaky-1"} {
		xs := out.byJob["flaky/"+id]
		var got []string
		for _, x := range xs {
			got = append(got, x.Name+"/"+x.Status)
		}
		sort.Strings(got)
		jk := job{Type: "flaky", ID: id}
		want := []string{r.runName(jk, 0, 1) + "/FAILED", r.runName(jk, 0, 2) + "/SUCCEEDED"}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("job flaky/%s: executions %v, want %v", id, got, want)
		}
	}
	for i := range 4 {
		if xs := out.byJob[fmt.Sprintf("ok/ok-%d", i)]; len(xs) != 1 {
			t.Errorf("job ok/ok-%d: executions %s, want exactly one", i, names(xs))
		}
	}
}

// Scenario 4: executions stopped from outside while running: the job is dead-lettered with reason
// aborted (an operator's decision is not retried) and its lane is freed for the jobs behind it.
func TestStoppedExecutions(t *testing.T) {
	t.Parallel()
	for _, v := range []struct {
		name string
		b    backend
		drop float64
	}{
		{"moto/status-events", moto, 0},
		// Every status-change event lost: the sweep alone must find the aborted executions.
		{"moto/sweep-only", moto, 1},
		{"fauxqs/status-events", fauxqs, 0},
	} {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			// Random lanes: the ids are placed with the router's hashed choice.
			stoppedExecutions(t, rigOptions{backend: v.b, eventDropRate: v.drop, params: map[string]string{
				"TypeLimits": "s=2", "DefaultMaxAttempts": "3", "LaneStrategy": "random",
			}})
		})
	}
}

func stoppedExecutions(t *testing.T, o rigOptions) {
	ctx := t.Context()
	r := newRig(t, o)
	ids := idsPerLane(t, "s", 2, 4)
	var jobs []job
	for _, id := range ids {
		jobs = append(jobs, job{Type: "s", ID: id, Input: work{Seconds: 4}})
	}
	began := time.Now()
	r.submit(ctx, jobs...)

	// Stop the first execution that runs in each lane.
	stopped := map[string]bool{}
	r.waitFor(ctx, progressWithin, "two executions to stop", func() (bool, string) {
		for _, id := range ids {
			if stopped[id] {
				continue
			}
			if arn := r.runningJob(ctx, "s", id); arn != "" && len(stopped) < 2 {
				if _, err := r.c.SFN.StopExecution(ctx, &sfn.StopExecutionInput{ExecutionArn: &arn, Error: aws.String("Operator"), Cause: aws.String("stopped by the test")}); err != nil {
					t.Fatalf("StopExecution(%s) = %v", arn, err)
				}
				stopped[id] = true
				r.expect("s", id, "aborted")
				t.Logf("stopped %s at %v", arn, time.Since(began).Round(100*time.Millisecond))
			}
		}
		return len(stopped) == 2, fmt.Sprintf("%d of 2 stopped", len(stopped))
	})
	out := r.settle(ctx, settleWithin)
	t.Logf("%d jobs done in %v", len(jobs), time.Since(began).Round(100*time.Millisecond))
	r.checkInvariants(ctx, out, nil)

	// Each stopped job: one execution, ABORTED; the lane it held ran a later job soon after.
	// Status events are looked for every 1 s and the sweep runs every 2 s (leases 2 s old); then the
	// release and the next start.
	// The fixed part is those periods; the run's own overrun (how far behind the stack was) is
	// added, so a busy machine moves the bound with it. A lane never freed fails either way.
	freedWithin := 10*time.Second + overrun(out.xs, func(x observe.Execution) (int, bool) { return 4, x.Job.Type == "s" })
	for id := range stopped {
		xs := out.byJob["s/"+id]
		if len(xs) != 1 || xs[0].Status != string(sfntypes.ExecutionStatusAborted) {
			t.Errorf("stopped job s/%s: executions %s, want exactly one, ABORTED", id, names(xs))
			continue
		}
		x := xs[0]
		var next *observe.Execution
		for i := range out.xs {
			y := &out.xs[i]
			if y.Job.Type == "s" && y.Job.Lane == x.Job.Lane && !y.Start.Before(x.Stop) && (next == nil || y.Start.Before(next.Start)) {
				next = y
			}
		}
		if next == nil {
			t.Errorf("no job ran in lane s-%d after %s was stopped (4 jobs were placed in each lane)", x.Job.Lane, x.Name)
			continue
		}
		gap := next.Start.Sub(x.Stop)
		t.Logf("lane s-%d: next job %s started %v after the stop", x.Job.Lane, next.Name, gap.Round(10*time.Millisecond))
		if gap > freedWithin {
			t.Errorf("lane s-%d freed %v after %s was stopped, want within %v", x.Job.Lane, gap, x.Name, freedWithin)
		}
	}
}

// Scenario 5: the same job id submitted several times, some copies at once, some after its run
// finished (through the general queue, where the lanes queue's deduplication drops them, and straight
// into the lanes queue with fresh deduplication ids, as a copy older than the 5-minute window would
// arrive): one execution, nothing dead-lettered.
func TestDuplicateSubmissions(t *testing.T) {
	ctx := t.Context()
	t.Parallel()
	r := newRig(t, rigOptions{backend: moto, params: map[string]string{"TypeLimits": "d=2"}})
	began := time.Now()
	dup := job{Type: "d", ID: "dup-a", Input: work{Seconds: 2}}
	r.submit(ctx, dup, dup, dup, job{Type: "d", ID: "dup-b", Input: work{Seconds: 1}}, job{Type: "d", ID: "dup-b", Input: work{Seconds: 1}},
		job{Type: "d", ID: "uniq-0", Input: work{Seconds: 1}}, job{Type: "d", ID: "uniq-1", Input: work{Seconds: 1}})
	// Three more copies at the same moment, each its own SendMessage.
	body, _ := json.Marshal(map[string]any{"type": dup.Type, "id": dup.ID, "input": dup.Input})
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i := range errs {
		r.record(dup.Type, dup.ID, "", "")
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = r.c.SQS.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &r.general, MessageBody: aws.String(string(body))})
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatalf("SendMessage(general queue) = %v", err)
		}
	}

	var first observe.Execution
	r.waitFor(ctx, progressWithin, "the first run of d/dup-a to finish", func() (bool, string) {
		for _, x := range r.collect(ctx) {
			if x.Job.ID == "dup-a" && x.Status == string(sfntypes.ExecutionStatusSucceeded) {
				first = x
				return true, ""
			}
		}
		return false, "d/dup-a has no SUCCEEDED execution"
	})
	// Later copies: through the general queue, and into the lanes queue, in its own lane and another.
	r.submit(ctx, dup, dup, job{Type: "d", ID: "uniq-2", Input: work{Seconds: 1}})
	other := 3 - first.Job.Lane
	for i, l := range []int{first.Job.Lane, other} {
		r.sendLanes(ctx, "d", l, fmt.Sprintf("late-copy-%d", i), job{Type: "d", ID: "dup-a", Input: work{Seconds: 2}})
	}
	out := r.settle(ctx, settleWithin)
	t.Logf("done in %v", time.Since(began).Round(100*time.Millisecond))
	r.checkInvariants(ctx, out, nil)
	// Evidence, not an invariant: the copies written into the lanes queue reached the starter, which
	// found the job's execution and dropped them.
	if n := r.logs.count("duplicate"); n < 2 {
		t.Errorf("the starter dropped %d duplicate copies, want at least the 2 written into the lanes queue", n)
	}
	for _, id := range []string{"dup-a", "dup-b"} {
		xs := out.byJob["d/"+id]
		if len(xs) != 1 || xs[0].Status != string(sfntypes.ExecutionStatusSucceeded) || xs[0].Job.Attempt != 1 {
			t.Errorf("job d/%s: executions %s, want exactly one, attempt 1, SUCCEEDED", id, names(xs))
		}
	}
}

// sendLanes puts a job straight into the lanes queue, as the router writes it.
func (r *rig) sendLanes(ctx context.Context, typ string, l int, dedup string, j job) {
	r.t.Helper()
	body := r.lanesBody(j)
	if _, err := r.c.SQS.SendMessage(ctx, &sqs.SendMessageInput{
		QueueUrl: &r.lanes, MessageBody: &body, MessageGroupId: aws.String(fmt.Sprintf("%s-%d", typ, l)), MessageDeduplicationId: &dedup,
	}); err != nil {
		r.t.Fatalf("SendMessage(lanes queue) = %v", err)
	}
	r.record(j.Type, j.ID, "", j.Want)
}

func (r *rig) lanesBody(j job) string {
	r.t.Helper()
	b, err := json.Marshal(map[string]any{"type": j.Type, "id": j.ID, "sender": r.sender(), "input": j.Input, "submittedAt": time.Now().UTC().Format(time.RFC3339Nano)})
	if err != nil {
		r.t.Fatal(err)
	}
	return string(b)
}

// expect changes what a submitted job must end as (a scenario decides it after submitting).
func (r *rig) expect(typ, id, want string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.byID[typ+"/"+id]
	if !ok {
		r.t.Fatalf("expect(%s/%s): never submitted", typ, id)
	}
	s.Want = want
}

// Scenario 6: StartExecution throttled for a while (every start for 4 s, then every other one for
// 3 s): nothing is lost, every job runs once, and no lane stays blocked long after the fault ends.
func TestStartThrottled(t *testing.T) {
	forBackends(t, sqsFacing, func(t *testing.T, b backend) {
		ctx := t.Context()
		const retry = 1 // START_RETRY_SECONDS
		r := newRig(t, rigOptions{backend: b, params: map[string]string{"TypeLimits": "t=3,u=2"}, env: map[string]string{"START_RETRY_SECONDS": fmt.Sprint(retry)}})
		var (
			phase   atomic.Int32 // 0 none, 1 all starts, 2 every other start
			calls   atomic.Int64
			faulted atomic.Int64
		)
		r.s.Gateway().SetFaults(func(target string) *gateway.Fault {
			if target != "AWSStepFunctions.StartExecution" {
				return nil
			}
			n := calls.Add(1)
			if p := phase.Load(); p == 1 || (p == 2 && n%2 == 0) {
				faulted.Add(1)
				return &gateway.Fault{Code: "ThrottlingException", Message: "Rate exceeded"}
			}
			return nil
		})
		phase.Store(1)
		faultStart := time.Now()
		var jobs []job
		for i := range 20 {
			typ := "t"
			if i%5 >= 3 {
				typ = "u"
			}
			jobs = append(jobs, job{Type: typ, ID: fmt.Sprintf("thr-%02d", i), Input: work{Seconds: 2}})
		}
		r.submit(ctx, jobs...)
		time.Sleep(4 * time.Second)
		phase.Store(2)
		time.Sleep(3 * time.Second)
		phase.Store(0)
		faultEnd := time.Now()
		t.Logf("StartExecution faulted %d of %d calls over %v", faulted.Load(), calls.Load(), faultEnd.Sub(faultStart).Round(100*time.Millisecond))
		if faulted.Load() == 0 {
			t.Fatalf("no StartExecution call was faulted: the scenario tested nothing")
		}
		out := r.settle(ctx, settleWithin)
		r.checkInvariants(ctx, out, nil)
		for _, j := range jobs {
			if xs := out.byJob[j.Type+"/"+j.ID]; len(xs) != 1 || xs[0].Job.Attempt != 1 {
				t.Errorf("job %s/%s: executions %s, want exactly one, attempt 1 (a throttled start is not an attempt)", j.Type, j.ID, names(xs))
			}
		}

		// Every job was submitted before the fault ended, so each lane had jobs waiting until its last
		// one started: it must never sit idle long. A failed start makes its message visible again
		// after START_RETRY_SECONDS jittered up to 2x; the SDK's standard retryer may still be in a
		// backoff of up to 4 s (its 3rd attempt) when the fault ends; the rest is polling and
		// scheduling on a loaded 2-core machine. Without the short retry the lane would wait out the
		// 30 s+ visibility timeout.
		// The fixed part is 2 x START_RETRY_SECONDS and the SDK's backoff; the slack is the run's
		// own overrun (how far behind the stack was, measured on its 2 s jobs) on top of 4 s.
		lag := overrun(out.xs, func(observe.Execution) (int, bool) { return 2, true })
		bound := 2*retry*time.Second + 4*time.Second + 4*time.Second + lag
		worst, where := laneIdleAfter(out.xs, faultEnd)
		t.Logf("longest idle lane after the fault ended: %v (%s); bound %v (overrun %v); last job ended %v after the fault",
			worst.Round(10*time.Millisecond), where, bound, lag.Round(10*time.Millisecond), lastWorkEnd(out.xs).Sub(faultEnd).Round(100*time.Millisecond))
		if worst > bound {
			t.Errorf("lane %s sat idle %v with jobs waiting after the fault ended, want at most %v (2 x START_RETRY_SECONDS + SDK retry backoff + slack + the run's overrun)", where, worst, bound)
		}
	})
}

// laneIdleAfter is the longest time any lane sat without a working execution between from and its
// last execution's start: from from to its first start after from (unless one was working at from),
// and between one execution's work end and the next start.
func laneIdleAfter(xs []observe.Execution, from time.Time) (time.Duration, string) {
	byLane := map[string][]observe.Execution{}
	for _, x := range xs {
		k := fmt.Sprintf("%s-%d", x.Job.Type, x.Job.Lane)
		byLane[k] = append(byLane[k], x)
	}
	var worst time.Duration
	var where string
	for k, l := range byLane {
		sort.Slice(l, func(i, j int) bool { return l[i].Start.Before(l[j].Start) })
		freeSince := from
		for _, x := range l {
			if x.WorkEnd.Before(from) {
				continue
			}
			if x.Start.After(freeSince) {
				if gap := x.Start.Sub(freeSince); gap > worst {
					worst, where = gap, fmt.Sprintf("%s before %s", k, x.Name)
				}
			}
			if x.WorkEnd.After(freeSince) {
				freeSince = x.WorkEnd
			}
		}
	}
	return worst, where
}

func lastWorkEnd(xs []observe.Execution) time.Time {
	var last time.Time
	for _, x := range xs {
		if x.WorkEnd.After(last) {
			last = x.WorkEnd
		}
	}
	return last
}

// Scenario 7: several messages of one group in one batch. They are written straight into the lanes
// queue before the runtime starts, so the first receive finds them all (moto hands out several of
// one group per receive, as AWS may; fauxqs never does): never two executions of one lane at once.
func TestBatchWithSeveralOfOneGroup(t *testing.T) {
	forBackends(t, sqsFacing, func(t *testing.T, b backend) {
		ctx := t.Context()
		r := newRig(t, rigOptions{backend: b, noRuntime: true, params: map[string]string{"TypeLimits": "g=2"}})
		var entries []sqstypes.SendMessageBatchRequestEntry
		for l := 1; l <= 2; l++ {
			for k := range 5 {
				j := job{Type: "g", ID: fmt.Sprintf("grp-%d-%d", l, k), Input: work{Seconds: 1}}
				body := r.lanesBody(j)
				entries = append(entries, sqstypes.SendMessageBatchRequestEntry{
					Id: aws.String(fmt.Sprintf("m%d%d", l, k)), MessageBody: &body,
					MessageGroupId: aws.String(fmt.Sprintf("g-%d", l)), MessageDeduplicationId: aws.String(j.ID),
				})
				r.record(j.Type, j.ID, "", "")
			}
		}
		out0, err := r.c.SQS.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: &r.lanes, Entries: entries})
		if err != nil || len(out0.Failed) > 0 {
			t.Fatalf("SendMessageBatch(lanes queue) = %v, %d failed", err, len(out0.Failed))
		}
		began := time.Now()
		r.startRuntime()
		out := r.settle(ctx, settleWithin)
		t.Logf("10 jobs in 2 lanes done in %v", time.Since(began).Round(100*time.Millisecond))
		r.checkInvariants(ctx, out, nil) // includes: no two executions of one lane at once
		extras := r.logs.count("of a group in one batch")
		t.Logf("messages returned as the second of their group in a batch: %d", extras)
		if !b.fauxqs && extras == 0 {
			t.Errorf("no batch held two messages of one group on moto: the scenario tested nothing")
		}
	})
}

// Scenario 8: bad input mixed into good traffic: each bad job is dead-lettered with its reason, each
// good one runs.
func TestBadInput(t *testing.T) {
	ctx := t.Context()
	t.Parallel()
	r := newRig(t, rigOptions{backend: moto, params: map[string]string{"TypeLimits": "ok=3", "DefaultLimit": "0"}})
	var good []job
	for i := range 12 {
		good = append(good, job{Type: "ok", ID: fmt.Sprintf("good-%02d", i), Input: work{Seconds: 1}})
	}
	began := time.Now()
	r.submit(ctx, good[:6]...)
	r.submitRaw(ctx, `{"type": "ok", "id": "broken-1", "input": {`, "not_json")
	r.submitRaw(ctx, `["not", "an", "object"]`, "not_json")
	r.submitRaw(ctx, `{"id": "no-type-1", "input": {"seconds": 1}}`, "missing_type")
	r.submitRaw(ctx, `{"type": "has space", "id": "bad-type-1"}`, "invalid_type")
	r.submitRaw(ctx, `{"type": "ok", "id": "bad id/1"}`, "invalid_id")
	r.submit(ctx, job{Type: "nosuch", ID: "unknown-1", Input: work{Seconds: 1}, Want: "unknown_type"})
	// Input that fits the general queue (moto refuses bodies over 256 KiB) but whose execution input,
	// with the job metadata added, is over Step Functions' 256 KiB.
	r.submitRaw(ctx, oversized(t, 256*1024-16), "input_too_large")
	r.submit(ctx, good[6:]...)
	out := r.settle(ctx, settleWithin)
	t.Logf("%d good and 7 bad jobs done in %v", len(good), time.Since(began).Round(100*time.Millisecond))
	r.checkInvariants(ctx, out, nil)
	for k, ds := range out.dead {
		for _, d := range ds {
			if d.Attrs["source"] != "router" {
				t.Errorf("dead letter %.40q has source %q, want router (refused on arrival)", k, d.Attrs["source"])
			}
		}
	}
}

// oversized returns a job body of exactly size bytes.
func oversized(t *testing.T, size int) string {
	t.Helper()
	head, tail := `{"type":"ok","id":"big-1","input":{"seconds":1,"pad":"`, `"}}`
	body := head + strings.Repeat("x", size-len(head)-len(tail)) + tail
	if len(body) != size || !json.Valid([]byte(body)) {
		t.Fatalf("oversized body: %d bytes, valid %v", len(body), json.Valid([]byte(body)))
	}
	return body
}

// Scenario 9: a type's limit lowered, then raised, mid-run through its live config item (cached 1 s).
// Jobs waiting in lanes above the lowered limit move into it; none is lost; the concurrency follows
// the limit in force.
func TestLimitLoweredThenRaised(t *testing.T) {
	t.Parallel()
	// first-free sends a job above the limit back to wait; random moves it to a lane within it.
	for _, strategy := range []string{lane.FirstFree, lane.Random} {
		t.Run(strategy, func(t *testing.T) {
			t.Parallel()
			limitLoweredThenRaised(t, strategy)
		})
	}
}

// placeInLanes returns ids of jobs of typ (limit lanes) that start in the given lanes when they are
// submitted while every lane is free, one id per lane. With random lanes the ids are picked with the
// router's hash; with first-free, with the starter's own order of lanes to try (lane.Spread), whose
// first is free.
func placeInLanes(t *testing.T, strategy, typ string, limit int, lanes []int, prefix string) []string {
	t.Helper()
	var ids []string
	for _, want := range lanes {
		if strategy == lane.Random {
			ids = append(ids, idInLane(t, typ, limit, want, prefix))
			continue
		}
		for i := 0; ; i++ {
			id := fmt.Sprintf("%s-%03d", prefix, i)
			if lane.Spread(sfnjob.Job{Type: typ, ID: id}, limit)[0] == want && !slices.Contains(ids, id) {
				ids = append(ids, id)
				break
			}
			if i > 10000 {
				t.Fatalf("no id for lane %d", want)
			}
		}
	}
	return ids
}

func limitLoweredThenRaised(t *testing.T, strategy string) {
	ctx := t.Context()
	const cache = 1 // ConfigCacheSeconds
	r := newRig(t, rigOptions{backend: moto, params: map[string]string{
		"TypeLimits": "v=4,w=2", "ConfigCacheSeconds": fmt.Sprint(cache), "LaneStrategy": strategy,
	}})
	store := config.NewDynamoStore(r.c.DDB, r.table)
	const seconds = 2
	n := 0
	batch := func(typ string, k int) []job {
		var jobs []job
		for range k {
			jobs = append(jobs, job{Type: typ, ID: fmt.Sprintf("lim-%03d", n), Input: work{Seconds: seconds}})
			n++
		}
		return jobs
	}
	// Two jobs in lanes 3 and 4 start before the limit is lowered and fail after it: their retry
	// finds its lane above the limit, moves, and must run as attempt 2 in lane 1 or 2.
	var flaky []job
	flakyIDs := placeInLanes(t, strategy, "v", 4, []int{3, 4}, "flaky")
	for _, id := range flakyIDs {
		flaky = append(flaky, job{Type: "v", ID: id, Input: map[string]any{"seconds": 9, "failAttempts": 1}})
	}
	began := time.Now()
	r.submit(ctx, flaky...)
	r.waitFor(ctx, progressWithin, "the failing-once jobs to start in lanes 3 and 4", func() (bool, string) {
		var pending []string
		for _, j := range flaky {
			if r.runningJob(ctx, j.Type, j.ID) == "" {
				pending = append(pending, j.ID)
			}
		}
		return len(pending) == 0, strings.Join(pending, ", ")
	})
	flakyRunning := time.Now()
	r.submit(ctx, append(batch("v", 24), batch("w", 6)...)...)
	// All four lanes busy; the limit is lowered 3 s after the failing-once jobs were seen running,
	// whatever the submission took, so they fail about 6 s after it.
	time.Sleep(time.Until(flakyRunning.Add(3 * time.Second)))
	lowered := time.Now()
	if err := store.SetOverride(ctx, config.Override{Type: "v", Limit: 2}); err != nil {
		t.Fatalf("SetOverride(v=2) = %v", err)
	}
	time.Sleep(3 * time.Second)
	r.submit(ctx, batch("v", 6)...)
	// The limit stays lowered at least 10 s, and until both failing-once jobs' retries have
	// started (waited for, not guessed: on a busy machine a retry can take longer).
	r.waitFor(ctx, progressWithin, "the failing-once jobs' retries to start", func() (bool, string) {
		var pending []string
		xs := r.collect(ctx)
		for _, j := range flaky {
			if !slices.ContainsFunc(xs, func(x observe.Execution) bool { return x.Job.ID == j.ID && x.Job.Attempt == 2 }) {
				pending = append(pending, j.ID)
			}
		}
		return len(pending) == 0, strings.Join(pending, ", ")
	})
	time.Sleep(time.Until(lowered.Add(13 * time.Second)))
	raised := time.Now()
	if err := store.SetOverride(ctx, config.Override{Type: "v", Limit: 5}); err != nil {
		t.Fatalf("SetOverride(v=5) = %v", err)
	}
	time.Sleep(2 * time.Second)
	r.submit(ctx, append(batch("v", 15), batch("w", 4)...)...)
	out := r.settle(ctx, settleWithin)
	t.Logf("%d jobs done in %v; lowered at %v, raised at %v", n, time.Since(began).Round(100*time.Millisecond),
		lowered.Sub(r.began).Round(100*time.Millisecond), raised.Sub(r.began).Round(100*time.Millisecond))
	// Over the whole run no type passes the highest limit it ever had.
	r.checkInvariants(ctx, out, func(typ string) int {
		if typ == "v" {
			return 5
		}
		return r.limits[typ]
	})

	// The limit in force over time. A function acts on a change within the cache age; an execution
	// started just before runs its full length; the rest is slack for polling, and the run's own
	// overrun (how far behind the stack was, measured on the v jobs of 2 s), which is also how late
	// a starter that read the limit just before it changed may still start an execution.
	lag := overrun(out.xs, func(x observe.Execution) (int, bool) {
		return seconds, x.Job.Type == "v" && strings.HasPrefix(x.Job.ID, "lim-")
	})
	t.Logf("overrun of the stack in this run: %v", lag.Round(10*time.Millisecond))
	settleLow := lowered.Add(cache*time.Second + seconds*time.Second + 2*time.Second + lag)
	// An execution that started before the lowered limit could reach the starter runs its full
	// length (the failing-once jobs' first attempts, 9 s): the lowered limit holds once they end.
	for _, x := range out.xs {
		if x.Job.Type == "v" && x.Start.Before(lowered.Add(cache*time.Second+1500*time.Millisecond+lag)) && x.WorkEnd.After(settleLow) {
			settleLow = x.WorkEnd
		}
	}
	windows := []struct {
		name     string
		from, to time.Time
		limit    int
	}{
		{"before lowering", r.began, lowered, 4},
		{"after lowering settled", settleLow, raised, 2},
		{"after raising", raised, out.end, 5},
	}
	for _, w := range windows {
		p, at := peakIn(out.xs, "v", w.from, w.to, out.end)
		t.Logf("type v %s [%v, %v): peak %d, limit %d", w.name, w.from.Sub(r.began).Round(100*time.Millisecond), w.to.Sub(r.began).Round(100*time.Millisecond), p, w.limit)
		if p > w.limit {
			t.Errorf("type v %s: %d executions worked at once at %s, over the limit %d in force", w.name, p, at.Format(time.RFC3339Nano), w.limit)
		}
		if p == 0 {
			t.Errorf("type v %s: nothing ran in the window: the scenario tested nothing", w.name)
		}
	}
	// Independently of the limiter's records: once the lowered limit reached the starter (cache age
	// plus slack plus the run's overrun), every execution of v started in lanes 1-2 until the limit was raised.
	for _, x := range out.xs {
		if x.Job.Type == "v" && x.Start.After(lowered.Add(cache*time.Second+1500*time.Millisecond+lag)) && x.Start.Before(raised) && x.Job.Lane > 2 {
			t.Errorf("execution %s started in lane %d at %s, after the limit was lowered to 2", x.Name, x.Job.Lane, stamp(x.Start))
		}
	}
	if p, _ := peakIn(out.xs, "v", raised.Add(3*time.Second+lag), out.end, out.end); p <= 2 {
		t.Errorf("type v after raising to 5: peak %d, want more than the lowered 2 (the raise took no effect)", p)
	}
	for _, j := range flaky {
		var got []string
		for _, x := range out.byJob[j.Type+"/"+j.ID] {
			got = append(got, fmt.Sprintf("attempt %d %s", x.Job.Attempt, x.Status))
			if x.Job.Attempt == 1 && x.Start.After(lowered) {
				t.Errorf("job %s/%s started its first attempt at %s, after the limit was lowered: the scenario's timing is off", j.Type, j.ID, stamp(x.Start))
			}
			if x.Job.Attempt == 1 && x.Job.Lane < 3 {
				t.Errorf("job %s/%s ran its first attempt in lane %d, want 3 or 4: the scenario's placement is off", j.Type, j.ID, x.Job.Lane)
			}
			if x.Job.Attempt == 2 && x.Job.Lane > 2 {
				t.Errorf("job %s/%s ran its retry in lane %d, above the lowered limit 2", j.Type, j.ID, x.Job.Lane)
			}
		}
		sort.Strings(got)
		if want := "attempt 1 FAILED,attempt 2 SUCCEEDED"; strings.Join(got, ",") != want {
			t.Errorf("job %s/%s (fails once, moved between its attempts): executions %v, want %s", j.Type, j.ID, got, want)
		}
	}
	moved := r.logs.count("job moved")
	t.Logf("jobs moved out of lanes above the limit: %d", moved)
	if moved == 0 {
		t.Errorf("no job was moved out of a lane above the lowered limit: the scenario tested nothing")
	}
}

// Scenario 10: the local runtime (pollers, events, schedule) stopped and started again mid-run, twice:
// nothing lost, invariants hold. Failing jobs make the restarted status-event delivery send events
// again for executions already released.
func TestRuntimeRestart(t *testing.T) {
	ctx := t.Context()
	t.Parallel()
	r := newRig(t, rigOptions{backend: moto, params: map[string]string{"TypeLimits": "r=3,q=2", "DefaultMaxAttempts": "2"}})
	var jobs []job
	for i := range 24 {
		typ := "r"
		if i%3 == 2 {
			typ = "q"
		}
		j := job{Type: typ, ID: fmt.Sprintf("rst-%02d", i), Input: work{Seconds: 1 + i%3}}
		if i%8 == 5 {
			j.Input, j.Want = work{Seconds: 1, Fail: true}, "attempts_exhausted"
		}
		jobs = append(jobs, j)
	}
	began := time.Now()
	r.submit(ctx, jobs[:16]...)
	for round := range 2 {
		time.Sleep(4 * time.Second)
		stopBegan := time.Now()
		r.s.StopRuntime()
		t.Logf("runtime stopped at %v (took %v)", time.Since(began).Round(100*time.Millisecond), time.Since(stopBegan).Round(10*time.Millisecond))
		if round == 0 {
			r.submit(ctx, jobs[16:]...) // jobs arrive while nothing polls
		}
		time.Sleep(3 * time.Second)
		r.startRuntime()
		t.Logf("runtime started again at %v", time.Since(began).Round(100*time.Millisecond))
	}
	out := r.settle(ctx, settleWithin)
	t.Logf("%d jobs done in %v", len(jobs), time.Since(began).Round(100*time.Millisecond))
	r.checkInvariants(ctx, out, nil)
	for _, j := range jobs {
		want := 1
		if j.Want != "" {
			want = 2
		}
		if xs := out.byJob[j.Type+"/"+j.ID]; len(xs) != want {
			t.Errorf("job %s/%s: executions %s, want %d", j.Type, j.ID, names(xs), want)
		}
	}
}

// Scenario 11: least-loaded and first-free keep short jobs out of the lane a long job holds. A long
// job runs in one of three lanes; short jobs then arrive one at a time. Random lanes would put about
// a third of them behind the long job (the hash ignores it); least-loaded sends each to a lane with
// fewer jobs, first-free to a free lane, so none waits for the long job. Run for every strategy,
// the comparison is the point: random must show the problem in this very run, or the scenario
// proves nothing.
func TestShortJobsAvoidTheBusyLane(t *testing.T) {
	t.Parallel()
	for _, strategy := range lane.Strategies {
		t.Run(strategy, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			r := newRig(t, rigOptions{backend: moto, params: map[string]string{"TypeLimits": "q=3", "LaneStrategy": strategy}})
			// Random lanes ignore the long job: the short jobs arrive every 3 s, all within the long
			// job's 36 s, and the hash alone puts some behind it. least-loaded and first-free must
			// send every short job elsewhere: there each short job is waited for before the next
			// arrives (a pause could be too short for a busy machine and leave two lanes busy),
			// and the long job holds its lane until they are all done, then is stopped.
			longSeconds, shorts := 36, 9
			if strategy != lane.Random {
				longSeconds = 3600
			}
			long := r.startLong(ctx, "q", longSeconds)
			var jobs []job
			for i := range shorts {
				// Ids the hash spreads over all three lanes, so random lanes put some behind the long job.
				j := job{Type: "q", ID: fmt.Sprintf("short-%02d", i), Input: work{Seconds: 1}}
				jobs = append(jobs, j)
				r.submit(ctx, j)
				if strategy == lane.Random {
					time.Sleep(3 * time.Second)
					continue
				}
				r.waitFor(ctx, progressWithin, "short job "+j.ID+" to finish", func() (bool, string) {
					for _, x := range r.collect(ctx) {
						if x.Job.ID == j.ID && x.Status == string(sfntypes.ExecutionStatusSucceeded) {
							return true, ""
						}
					}
					return false, j.ID + " has no SUCCEEDED execution"
				})
			}
			if strategy != lane.Random {
				arn := r.runningJob(ctx, "q", long.ID)
				if arn == "" {
					t.Fatalf("the long job %s is not running after the short jobs", long.ID)
				}
				if _, err := r.c.SFN.StopExecution(ctx, &sfn.StopExecutionInput{ExecutionArn: &arn, Error: aws.String("Operator"), Cause: aws.String("the short jobs are done")}); err != nil {
					t.Fatalf("StopExecution(%s) = %v", arn, err)
				}
				r.expect("q", long.ID, "aborted")
			}
			out := r.settle(ctx, settleWithin)
			r.checkInvariants(ctx, out, nil)
			lx := out.byJob["q/"+long.ID]
			if len(lx) != 1 {
				t.Fatalf("long job: executions %s, want one", names(lx))
			}
			behind := 0
			for _, j := range jobs {
				xs := out.byJob["q/"+j.ID]
				if len(xs) != 1 {
					t.Errorf("job %s: executions %s, want one", j.ID, names(xs))
					continue
				}
				// Behind the long job: in its lane, and submitted while it held the lane.
				if xs[0].Job.Lane == lx[0].Job.Lane && xs[0].Job.SubmittedAt.Before(lx[0].WorkEnd) {
					behind++
					t.Logf("%s: job %s ran in the long job's lane %d, starting %v after the long job (which runs %d s)",
						strategy, j.ID, xs[0].Job.Lane, xs[0].Start.Sub(lx[0].Start).Round(100*time.Millisecond), longSeconds)
				}
			}
			t.Logf("%s: %d of %d short jobs ran in the long job's lane", strategy, behind, shorts)
			switch {
			case strategy != lane.Random && behind > 0:
				t.Errorf("%s sent %d short jobs behind the long job while other lanes were free", strategy, behind)
			case strategy == lane.Random && behind == 0:
				t.Errorf("random lanes sent no short job behind the long job: the scenario shows nothing (pick other ids)")
			}
		})
	}
}

// startLong submits job long-1 of typ, lasting seconds, and returns once it runs.
func (r *rig) startLong(ctx context.Context, typ string, seconds int) job {
	r.t.Helper()
	long := job{Type: typ, ID: "long-1", Input: work{Seconds: seconds}}
	r.submit(ctx, long)
	r.waitFor(ctx, progressWithin, "the long job to start", func() (bool, string) {
		return r.runningJob(ctx, long.Type, long.ID) != "", long.ID
	})
	return long
}

// Scenario 12: a burst while a long job holds one of two lanes. first-free keeps the burst in the
// type's waiting group and binds each job to the lane that frees, so none waits for the long job; the
// waiting group is parked and woken by releases.
func TestFirstFreeBurstBesideALongJob(t *testing.T) {
	t.Parallel()
	for _, strategy := range []string{lane.FirstFree} {
		t.Run(strategy, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			r := newRig(t, rigOptions{backend: moto, params: map[string]string{"TypeLimits": "f=2", "LaneStrategy": strategy}})
			longSeconds, shorts := 40, 6
			if strategy == lane.FirstFree {
				// The long job holds its lane until the whole burst is done, however long the
				// burst takes on this machine: it is stopped then (and dead-lettered, aborted).
				// A fixed 40 s could end first on a busy machine, and the burst would then use
				// its lane rightly.
				longSeconds = 3600
			}
			long := r.startLong(ctx, "f", longSeconds)
			var jobs []job
			for i := range shorts {
				jobs = append(jobs, job{Type: "f", ID: fmt.Sprintf("burst-%02d", i), Input: work{Seconds: 2}})
			}
			r.submit(ctx, jobs...)
			if strategy == lane.FirstFree {
				r.waitFor(ctx, progressWithin, "the burst to finish beside the long job", func() (bool, string) {
					done := map[string]bool{}
					for _, x := range r.collect(ctx) {
						if x.Status == string(sfntypes.ExecutionStatusSucceeded) {
							done[x.Job.ID] = true
						}
					}
					var pending []string
					for _, j := range jobs {
						if !done[j.ID] {
							pending = append(pending, j.ID)
						}
					}
					return len(pending) == 0, strings.Join(pending, ", ")
				})
				arn := r.runningJob(ctx, "f", long.ID)
				if arn == "" {
					t.Fatalf("the long job %s is not running after the burst", long.ID)
				}
				if _, err := r.c.SFN.StopExecution(ctx, &sfn.StopExecutionInput{ExecutionArn: &arn, Error: aws.String("Operator"), Cause: aws.String("the burst is done")}); err != nil {
					t.Fatalf("StopExecution(%s) = %v", arn, err)
				}
				r.expect("f", long.ID, "aborted")
			}
			out := r.settle(ctx, settleWithin)
			r.checkInvariants(ctx, out, nil)
			lx := out.byJob["f/"+long.ID]
			if len(lx) != 1 {
				t.Fatalf("long job: executions %s, want one", names(lx))
			}
			behind, last := 0, time.Time{}
			for _, j := range jobs {
				xs := out.byJob["f/"+j.ID]
				if len(xs) != 1 {
					t.Errorf("job %s: executions %s, want one", j.ID, names(xs))
					continue
				}
				if xs[0].Job.Lane == lx[0].Job.Lane {
					behind++
				}
				if xs[0].WorkEnd.After(last) {
					last = xs[0].WorkEnd
				}
			}
			t.Logf("%s: %d of %d burst jobs ran in the long job's lane; the burst was done %v after the long job started (it runs %d s); parked %d, woken %d",
				strategy, behind, shorts, last.Sub(lx[0].Start).Round(100*time.Millisecond), longSeconds,
				r.logs.count("every lane taken; waiting group parked until a release wakes it"), r.logs.count("woke a parked job"))
			if strategy == lane.FirstFree {
				if behind > 0 {
					t.Errorf("first-free ran %d burst jobs in the long job's lane, want none", behind)
				}
				if r.logs.count("every lane taken; waiting group parked until a release wakes it") == 0 || r.logs.count("woke a parked job") == 0 {
					t.Errorf("no job was parked and woken: the scenario did not test the wait room")
				}
			}
		})
	}
}
