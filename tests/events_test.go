package tests

import (
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sfn"

	"github.com/sfnlimit/sfnlimit/internal/tools/local/observe"
)

// Scenario 14: release mode events. Jobs run on the bare sample workflow, which has no release
// state: each lane is released by its execution's own status-change event, or by the sweep when the
// event is lost. Successes, failures with retries, a timeout and an abort, with duplicate events and
// with every event lost; a type on the sample workflow (step mode) runs beside them. Every invariant
// of the suite holds: the limit, nothing lost, no lane or record left, exact metrics.
func TestEventsMode(t *testing.T) {
	t.Parallel()
	for _, v := range []struct {
		name      string
		b         backend
		drop, dup float64
	}{
		{"moto/duplicate-events", moto, 0, 1},
		// Every status-change event lost: the sweep alone releases the bare workflow's lanes.
		{"moto/lost-events", moto, 1, 0},
		{"fauxqs/lossy-events", fauxqs, 0.3, 0.3},
	} {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			eventsMode(t, rigOptions{backend: v.b, eventDropRate: v.drop, eventDupRate: v.dup, bareTypes: []string{"e"},
				params: map[string]string{"TypeLimits": "e=2,s=1", "DefaultMaxAttempts": "2", "ExecutionTimeoutSeconds": "20"}})
		})
	}
}

func eventsMode(t *testing.T, o rigOptions) {
	ctx := t.Context()
	r := newRig(t, o)
	var jobs []job
	for i := range 4 {
		jobs = append(jobs, job{Type: "e", ID: fmt.Sprintf("ok-%d", i), Input: work{Seconds: 2}})
	}
	jobs = append(jobs,
		job{Type: "e", ID: "fail-0", Input: work{Seconds: 1, Fail: true, FailCause: "boom"}, Want: "attempts_exhausted"},
		job{Type: "e", ID: "flaky-0", Input: map[string]any{"seconds": 1, "failAttempts": 1}},
		// Outlives ExecutionTimeoutSeconds twice: TIMED_OUT, retried, dead-lettered.
		job{Type: "e", ID: "slow-0", Input: work{Seconds: 60}, Want: "attempts_exhausted"},
		job{Type: "e", ID: "stop-0", Input: work{Seconds: 8}},
		job{Type: "s", ID: "step-0", Input: work{Seconds: 1}},
		job{Type: "s", ID: "step-1", Input: work{Seconds: 1}},
	)
	began := time.Now()
	r.submit(ctx, jobs...)
	r.waitFor(ctx, progressWithin, "e/stop-0 to run", func() (bool, string) {
		arn := r.runningJob(ctx, "e", "stop-0")
		if arn == "" {
			return false, "not running yet"
		}
		if _, err := r.c.SFN.StopExecution(ctx, &sfn.StopExecutionInput{ExecutionArn: &arn, Error: aws.String("Operator"), Cause: aws.String("stopped by the test")}); err != nil {
			t.Fatalf("StopExecution(%s) = %v", arn, err)
		}
		r.expect("e", "stop-0", "aborted")
		return true, ""
	})
	out := r.settle(ctx, settleWithin)
	t.Logf("%d jobs done in %v", len(jobs), time.Since(began).Round(100*time.Millisecond))
	r.checkInvariants(ctx, out, nil)

	// The bare workflow's executions have no release state; the sample's have.
	for _, x := range out.xs {
		bare := x.Job.Type == "e"
		if bare && x.ReleaseTransitions != 0 {
			t.Errorf("execution %s of the bare workflow entered %d release states", x.Name, x.ReleaseTransitions)
		}
		if !bare && x.ReleaseTransitions == 0 && x.Status == "SUCCEEDED" {
			t.Errorf("execution %s of the sample workflow succeeded without its Release state", x.Name)
		}
	}
	// How long a lane stays held after its execution stopped, until the next start in it: the status
	// event's delivery (the local bus looks every 1 s) or, with the event lost, the sweep (every 2 s
	// here, leases 2 s old). Only a lane never freed, or freed far later, fails.
	var gaps []time.Duration
	for _, x := range out.xs {
		if x.Job.Type != "e" {
			continue
		}
		var next *observe.Execution
		for i := range out.xs {
			y := &out.xs[i]
			if y.Job.Type == "e" && y.Job.Lane == x.Job.Lane && !y.Start.Before(x.Stop) && (next == nil || y.Start.Before(next.Start)) {
				next = y
			}
		}
		if next != nil {
			gaps = append(gaps, next.Start.Sub(x.Stop))
		}
	}
	sort.Slice(gaps, func(i, j int) bool { return gaps[i] < gaps[j] })
	if len(gaps) > 0 {
		t.Logf("lane held after an execution stopped, to the next start in it: median %v, max %v (%d handovers; events dropped %.0f%%, duplicated %.0f%%)",
			gaps[len(gaps)/2].Round(10*time.Millisecond), gaps[len(gaps)-1].Round(10*time.Millisecond), len(gaps), 100*o.eventDropRate, 100*o.eventDupRate)
		bound := 20*time.Second + overrun(out.xs, func(x observe.Execution) (int, bool) { return 2, x.Job.Type == "e" && x.Job.ID[:3] == "ok-" })
		if worst := gaps[len(gaps)-1]; worst > bound {
			t.Errorf("a lane stayed held %v after its execution stopped, want within %v", worst, bound)
		}
	}
	for _, id := range []string{"fail-0", "slow-0"} {
		if n := len(out.byJob["e/"+id]); n != 2 {
			t.Errorf("job e/%s: %d executions (%s), want 2 (DefaultMaxAttempts)", id, n, names(out.byJob["e/"+id]))
		}
	}
	if n := len(out.byJob["e/flaky-0"]); n != 2 {
		t.Errorf("job e/flaky-0: %d executions (%s), want 2 (failed once, then succeeded)", n, names(out.byJob["e/flaky-0"]))
	}
}
