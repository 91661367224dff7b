package releaser_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sfn"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/lambda/deadletter"
	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
	"github.com/sfnlimit/sfnlimit/internal/lambda/metrics"
	"github.com/sfnlimit/sfnlimit/internal/lambda/releaser"
	"github.com/sfnlimit/sfnlimit/internal/tools/fakes"
)

// claimed is a lane's lease as the starter leaves a started job: its claim (starting), which names
// the execution, since a confirmed start writes nothing more.
func claimed(typ string, ln int, jobID string, attempt int) lease.Lease {
	l := held(typ, ln, jobID, attempt, lease.Starting)
	l.StateMachineArn, l.ExecutionArn = smArn, execArn(typ, jobID, attempt)
	return l
}

// The sweep counts a claim as a running job in its gauges, leaves it alone while its execution runs
// (however long it sat untouched), and releases it like a running lease when its execution ended.
func TestSweepTakesClaimsForRunningJobs(t *testing.T) {
	const staleAfter = 1350 * time.Second
	type row struct {
		lease     lease.Lease
		age       time.Duration // since its last update
		execution string        // status of its execution; "" for none
		want      *wantLease    // nil: released (or taken back)
	}
	rows := []row{
		{ // a started job running longer than StaleAfter: kept
			lease: claimed("reports", 1, "r-1", 1), age: staleAfter + time.Hour, execution: "RUNNING",
			want: &wantLease{JobID: "r-1", Status: lease.Starting, Attempt: 1, Handle: handle("r-1", 2), Arn: execArn("reports", "r-1", 1), Version: 4},
		},
		{ // a lease written by a version that recorded every start: kept
			lease: held("reports", 2, "r-2", 1, lease.Starting), age: 5 * time.Minute, execution: "RUNNING",
			want: &wantLease{JobID: "r-2", Status: lease.Starting, Attempt: 1, Handle: handle("r-2", 2), Arn: execArn("reports", "r-2", 1), Version: 4},
		},
		{ // a started job whose execution succeeded without a release: released
			lease: claimed("reports", 3, "r-3", 1), age: 5 * time.Minute, execution: "SUCCEEDED",
		},
		{ // failed with attempts left: retried, as a running lease is
			lease: claimed("payments", 1, "p-1", 1), age: 5 * time.Minute, execution: "FAILED",
			want: &wantLease{JobID: "p-1", Status: lease.Retrying, Attempt: 1, Handle: handle("p-1", 2)},
		},
		{ // a claim whose start never went through, untouched past StaleAfter: taken back
			lease: claimed("payments", 2, "p-2", 1), age: staleAfter + time.Minute,
		},
		{ // bound: no execution yet, not counted
			lease: held("payments", 3, "p-3", 0, lease.Bound), age: time.Minute,
			want: &wantLease{JobID: "p-3", Status: lease.Bound, Handle: handle("p-3", 2), Version: 4},
		},
	}
	r := newRig(t)
	r.h.StaleAfter = staleAfter
	var emf bytes.Buffer
	r.svc.Metrics = metrics.New(&emf, "sfnlimit")
	for _, x := range rows {
		l := x.lease
		l.UpdatedAt = t0.Add(-x.age)
		r.leases.Set(l)
		if x.execution != "" {
			r.sfn.Put(execution(l.Type, l.Lane, l.JobID, l.Attempt, `{}`, x.execution, "", ""))
		}
	}
	if _, err := r.h.Handle(context.Background(), fixture(t, "scheduled_event.json")); err != nil {
		t.Fatalf("Handle(scheduled event) = %v", err)
	}
	for _, x := range rows {
		checkLease(t, r.leases, x.lease.Key(), x.want)
	}
	if d := sorted(deletedHandles(r.sqs)); !equal(d, []string{handle("r-3", 2)}) {
		t.Errorf("DeleteMessage handles = %q, want the succeeded job's", d)
	}
	// The gauges are read before the sweep acts, from the leases alone: reports' three started jobs
	// fill its three lanes; payments' two claims count (the gauge cannot tell the one whose start
	// never went through from a running job), its bound lease does not.
	wantGauges := map[string]map[string]float64{
		"reports":  {metrics.RunningLeases: 3, metrics.LaneOccupancy: 100},
		"payments": {metrics.RunningLeases: 2, metrics.LaneOccupancy: 4}, // 2 of 50 lanes
	}
	got := gauges(t, emf.Bytes())
	for typ, want := range wantGauges {
		for m, v := range want {
			if g, ok := got[typ][m]; !ok || g != v {
				t.Errorf("%s %s = %v (recorded %v), want %v", typ, m, g, ok, v)
			}
		}
	}
}

// gauges reads the single samples of the EMF lines a recorder wrote: type -> metric -> value.
func gauges(t *testing.T, emf []byte) map[string]map[string]float64 {
	t.Helper()
	out := map[string]map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(emf))
	for sc.Scan() {
		var line map[string]any
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("EMF line %s: %v", sc.Text(), err)
		}
		typ, _ := line["Type"].(string)
		for _, m := range []string{metrics.RunningLeases, metrics.LaneOccupancy} {
			vs, ok := line[m].([]any)
			if !ok || len(vs) != 1 {
				continue
			}
			if out[typ] == nil {
				out[typ] = map[string]float64{}
			}
			out[typ][m], _ = vs[0].(float64)
		}
	}
	return out
}

// Each sweep reports how long each paused type has been paused (PausedSeconds), per type and in
// total over types: the paused alarm reads the total's maximum, and the stalled alarm is held quiet
// by it while a pause keeps jobs waiting on purpose. A type that is not paused reports nothing.
func TestSweepReportsHowLongEachPausedTypeHasBeenPaused(t *testing.T) {
	r := newRig(t)
	res, err := config.NewResolver(config.Defaults{
		Limits: map[string]int{"reports": 3, "payments": 50}, DefaultMaxAttempts: 3, StateMachineArn: smArn,
	}, overrides{{Type: "reports", Pause: &config.Pause{Reason: "INC-7", Since: t0.Add(-10 * time.Minute)}}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	r.svc.Config = res
	var emf bytes.Buffer
	r.svc.Metrics = metrics.New(&emf, "sfnlimit")
	if _, err := r.h.Handle(context.Background(), fixture(t, "scheduled_event.json")); err != nil {
		t.Fatalf("Handle(scheduled event) = %v", err)
	}
	got := map[string][]any{} // Type -> samples
	sc := bufio.NewScanner(bytes.NewReader(emf.Bytes()))
	for sc.Scan() {
		var line struct {
			Type   string
			Paused []any `json:"PausedSeconds"`
			AWS    struct {
				CloudWatchMetrics []struct {
					Namespace  string
					Dimensions [][]string
					Metrics    []struct{ Name, Unit string }
				}
			} `json:"_aws"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("EMF line %s: %v", sc.Text(), err)
		}
		if line.Paused == nil {
			continue
		}
		got[line.Type] = append(got[line.Type], line.Paused...)
		if len(line.AWS.CloudWatchMetrics) != 1 {
			t.Fatalf("EMF line %s: want one metric directive", sc.Text())
		}
		d := line.AWS.CloudWatchMetrics[0]
		if want := [][]string{{"Type"}, {}}; d.Namespace != "sfnlimit" || len(d.Dimensions) != 2 ||
			!equal(d.Dimensions[0], want[0]) || len(d.Dimensions[1]) != 0 {
			t.Errorf("PausedSeconds directive = %+v, want namespace sfnlimit, dimensions [Type] and [] (the alarms read the total)", d)
		}
		if len(d.Metrics) != 1 || d.Metrics[0].Name != metrics.PausedSeconds || d.Metrics[0].Unit != "Seconds" {
			t.Errorf("PausedSeconds metrics = %+v, want PausedSeconds in Seconds", d.Metrics)
		}
	}
	if v := got["reports"]; len(v) != 1 || v[0] != float64(600) {
		t.Errorf("reports PausedSeconds = %v, want one sample of 600 (paused ten minutes)", v)
	}
	if v, ok := got["payments"]; ok {
		t.Errorf("payments PausedSeconds = %v, want none: it is not paused", v)
	}
	if len(got) != 1 {
		t.Errorf("PausedSeconds reported for %v, want reports only", got)
	}
}

// A claim is released exactly as a running lease is, whatever the outcome.
func TestReleaseOfAClaim(t *testing.T) {
	tests := []struct {
		name        string
		attempt     int
		outcome     releaser.Outcome
		want        releaser.Result
		wantLease   *wantLease
		wantDeleted []string
		wantVisible []string
	}{
		{name: "succeeded", attempt: 1, outcome: releaser.Succeeded, want: releaser.Deleted, wantDeleted: []string{handle("r-1", 2)}},
		{name: "failed with attempts left", attempt: 1, outcome: releaser.Failed, want: releaser.Retried,
			wantLease: &wantLease{JobID: "r-1", Status: lease.Retrying, Attempt: 1, Handle: handle("r-1", 2)}, wantVisible: []string{handle("r-1", 2)}},
		{name: "attempts exhausted", attempt: 3, outcome: releaser.Failed, want: releaser.DeadLettered, wantDeleted: []string{handle("r-1", 2)}},
		{name: "aborted", attempt: 1, outcome: releaser.Aborted, want: releaser.DeadLettered, wantDeleted: []string{handle("r-1", 2)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t)
			l := r.leases.Set(claimed("reports", 1, "r-1", tt.attempt))
			r.sfn.Put(execution("reports", 1, "r-1", tt.attempt, `{}`, "FAILED", "", ""))
			got, err := r.svc.Release(context.Background(), releaser.Request{
				Key: l.Key(), JobID: "r-1", Attempt: tt.attempt, Outcome: tt.outcome, Source: "workflow",
			})
			if err != nil || got != tt.want {
				t.Fatalf("Release = %s, %v; want %s", got, err, tt.want)
			}
			checkLease(t, r.leases, l.Key(), tt.wantLease)
			if d := deletedHandles(r.sqs); !equal(d, tt.wantDeleted) {
				t.Errorf("DeleteMessage handles = %q, want %q", d, tt.wantDeleted)
			}
			if v := visibleHandles(r.sqs); !equal(v, tt.wantVisible) {
				t.Errorf("made visible = %q, want %q", v, tt.wantVisible)
			}
		})
	}
}

// DescribeExecution is eventually consistent: with a short StaleAfter (a visibility timeout under
// 40 s), a claim younger than DescribeSettle whose execution is not found yet must be kept, and only
// an older one taken back.
func TestSweepBelievesAMissingExecutionOnlyAfterDescribeSettle(t *testing.T) {
	for _, tt := range []struct {
		name     string
		age      time.Duration
		wantKept bool
	}{
		{name: "past StaleAfter, younger than DescribeSettle", age: releaser.DescribeSettle - 10*time.Second, wantKept: true},
		{name: "past both", age: releaser.DescribeSettle + 10*time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t)
			r.h.StaleAfter = 30 * time.Second
			r.h.SweepMinAge = 0
			l := claimed("reports", 1, "r-1", 1)
			l.UpdatedAt = t0.Add(-tt.age)
			r.leases.Set(l)
			if _, err := r.h.Handle(context.Background(), fixture(t, "scheduled_event.json")); err != nil {
				t.Fatalf("Handle(scheduled event) = %v", err)
			}
			if _, kept := r.leases.Lease(l.Key()); kept != tt.wantKept {
				t.Errorf("claim kept = %v, want %v", kept, tt.wantKept)
			}
		})
	}
}

// With the list of running executions, a sweep describes only the leases whose executions are not
// in it (those that may have ended), so it can run every minute: a lost status event leaves a lane
// held for about a sweep period. A list that cannot be read makes it describe every due lease.
func TestSweepDescribesOnlyExecutionsNotRunning(t *testing.T) {
	for _, tt := range []struct {
		name          string
		listErr       error
		wantDescribes []string
	}{
		{name: "list read", wantDescribes: []string{execArn("reports", "r-4", 1)}},
		{name: "list failed", listErr: errors.New("ThrottlingException"), wantDescribes: []string{
			execArn("reports", "r-1", 1), execArn("reports", "r-2", 1), execArn("reports", "r-3", 1), execArn("reports", "r-4", 1),
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t)
			r.h.Running = r.sfn
			r.h.StaleAfter = time.Hour
			r.sfn.OnList = func(*sfn.ListExecutionsInput) error { return tt.listErr }
			for i, st := range []string{"RUNNING", "RUNNING", "RUNNING", "SUCCEEDED"} {
				l := claimed("reports", i+1, "r-"+strconv.Itoa(i+1), 1)
				l.UpdatedAt = t0.Add(-10 * time.Minute)
				r.leases.Set(l)
				r.sfn.Put(execution(l.Type, l.Lane, l.JobID, 1, `{}`, st, "", ""))
			}
			if _, err := r.h.Handle(context.Background(), fixture(t, "scheduled_event.json")); err != nil {
				t.Fatalf("Handle(scheduled event) = %v", err)
			}
			if got := sorted(r.sfn.Describes()); !equal(got, sorted(tt.wantDescribes)) {
				t.Errorf("described = %q, want %q", got, tt.wantDescribes)
			}
			if _, held := r.leases.Lease(lease.Key{Type: "reports", Lane: 4}); held {
				t.Error("the succeeded job's lane is still held")
			}
			for ln := 1; ln <= 3; ln++ {
				if _, held := r.leases.Lease(lease.Key{Type: "reports", Lane: ln}); !held {
					t.Errorf("running job's lane %d was released", ln)
				}
			}
		})
	}
}

// qualified is a claim made on a version or alias ARN of the type's state machine (the config names
// ...:stateMachine:sfnlimit-sample:3 or :prod): the starter records that ARN and the execution's
// ARN as job.ExecutionArn derives it.
func qualified(qualifier string, ln int, jobID string, attempt int) lease.Lease {
	l := claimed("reports", ln, jobID, attempt)
	l.StateMachineArn = smArn + ":" + qualifier
	l.ExecutionArn = job.ExecutionArn(l.StateMachineArn, execName("reports", jobID, attempt))
	return l
}

// onAWS is an execution of a claim as Step Functions records it: started through a version or
// alias, it is an execution of the state machine itself (its ARN and stateMachineArn carry no
// qualifier; DescribeExecution gives the version or alias in fields of their own).
func onAWS(l lease.Lease, status string) fakes.Execution {
	e := execution(l.Type, l.Lane, l.JobID, l.Attempt, `{}`, status, "", "")
	e.StateMachineArn = job.UnqualifiedStateMachine(l.StateMachineArn)
	e.Arn = job.ExecutionArn(e.StateMachineArn, e.Name)
	return e
}

// A type may run a version or an alias of its state machine. Its executions' status events, the
// sweep and the dead letter of a last attempt all find the execution by the ARN Step Functions gives
// it, which has no qualifier; the sweep lists the running ones by the state machine, one list for
// every version and alias the type's claims name.
func TestVersionOrAliasExecutionsAreReleased(t *testing.T) {
	t.Run("status event", func(t *testing.T) {
		r := newRig(t)
		l := r.leases.Set(qualified("prod", 1, "r-1001", 1))
		got, err := r.h.Handle(context.Background(), statusEventOf(t, smArn, execArn("reports", "r-1001", 1), execName("reports", "r-1001", 1), "SUCCEEDED"))
		if err != nil || got.Result != releaser.Deleted {
			t.Fatalf("Handle(SUCCEEDED event of the alias's execution) = %+v, %v; want %s", got, err, releaser.Deleted)
		}
		checkLease(t, r.leases, l.Key(), nil)
	})
	t.Run("sweep", func(t *testing.T) {
		r := newRig(t)
		r.h.Running = r.sfn
		r.h.StaleAfter = time.Hour
		for i, tt := range []struct{ qualifier, status string }{{"3", "RUNNING"}, {"prod", "RUNNING"}, {"3", "SUCCEEDED"}, {"prod", "FAILED"}} {
			l := qualified(tt.qualifier, i+1, "r-"+strconv.Itoa(i+1), 3)
			l.UpdatedAt = t0.Add(-10 * time.Minute)
			r.leases.Set(l)
			r.sfn.Put(onAWS(l, tt.status))
		}
		if _, err := r.h.Handle(context.Background(), fixture(t, "scheduled_event.json")); err != nil {
			t.Fatalf("Handle(scheduled event) = %v", err)
		}
		want := []string{execArn("reports", "r-3", 3), execArn("reports", "r-4", 3), execArn("reports", "r-4", 3)} // r-4's twice: its dead letter's input
		if got := sorted(r.sfn.Describes()); !equal(got, sorted(want)) {
			t.Errorf("described = %q, want %q", got, want)
		}
		for ln, wantHeld := range map[int]bool{1: true, 2: true, 3: false, 4: false} {
			if _, held := r.leases.Lease(lease.Key{Type: "reports", Lane: ln}); held != wantHeld {
				t.Errorf("lane %d held = %v, want %v", ln, held, wantHeld)
			}
		}
		checkDLQ(t, r.sqs, []dead{{Reason: deadletter.ReasonAttemptsExhausted, JobID: "r-4", Attempt: "3", Error: "States.FAILED",
			Body: `{"type":"reports","id":"r-4","input":{},"redrive":1}`}})
	})
}

// Before versions and aliases were handled, a claim on one recorded its execution's ARN with the
// qualifier (...:execution:sfnlimit-sample:prod:NAME), which names nothing: its type stalled. Such
// a claim, still in the table after the upgrade, is released like any other, by its execution's
// status event and by the sweep.
func TestVersionOrAliasClaimsRecordedWithTheQualifierAreReleased(t *testing.T) {
	old := func(qualifier string, ln int, jobID string) lease.Lease {
		l := qualified(qualifier, ln, jobID, 1)
		l.ExecutionArn = strings.Replace(l.StateMachineArn, ":stateMachine:", ":execution:", 1) + ":" + execName("reports", jobID, 1)
		return l
	}
	t.Run("status event", func(t *testing.T) {
		r := newRig(t)
		l := r.leases.Set(old("prod", 1, "r-1001"))
		got, err := r.h.Handle(context.Background(), statusEventOf(t, smArn, execArn("reports", "r-1001", 1), execName("reports", "r-1001", 1), "SUCCEEDED"))
		if err != nil || got.Result != releaser.Deleted {
			t.Fatalf("Handle(SUCCEEDED event) = %+v, %v; want %s", got, err, releaser.Deleted)
		}
		checkLease(t, r.leases, l.Key(), nil)
	})
	t.Run("sweep", func(t *testing.T) {
		r := newRig(t)
		r.h.Running = r.sfn
		r.h.StaleAfter = time.Hour
		for i, st := range []string{"RUNNING", "SUCCEEDED"} {
			l := old("3", i+1, "r-"+strconv.Itoa(i+1))
			l.UpdatedAt = t0.Add(-10 * time.Minute)
			r.leases.Set(l)
			r.sfn.Put(onAWS(l, st))
		}
		if _, err := r.h.Handle(context.Background(), fixture(t, "scheduled_event.json")); err != nil {
			t.Fatalf("Handle(scheduled event) = %v", err)
		}
		if got, want := r.sfn.Describes(), []string{execArn("reports", "r-2", 1)}; !equal(got, want) {
			t.Errorf("described = %q, want %q", got, want)
		}
		for ln, wantHeld := range map[int]bool{1: true, 2: false} {
			if _, held := r.leases.Lease(lease.Key{Type: "reports", Lane: ln}); held != wantHeld {
				t.Errorf("lane %d held = %v, want %v", ln, held, wantHeld)
			}
		}
	})
}

// A job bound twice (its waiting message came back after its first copy ran) has a second copy
// whose claim of the same attempt stays in a lane (its delivery stopped after the claim). The
// attempt's execution is the first copy's, whose release counted its outcome: the sweep, or a late
// status event, drops the duplicate's claim and message without counting or retrying it again.
func TestReleaseDropsADuplicateCopysClaim(t *testing.T) {
	for _, status := range []string{"SUCCEEDED", "FAILED"} {
		for _, via := range []string{"sweep", "status-event"} {
			t.Run(status+"/"+via, func(t *testing.T) {
				r := newRig(t)
				published := metrics.NewCollector()
				r.svc.Metrics = metrics.New(published, "test")
				x := execution("reports", 2, "r-1", 1, `{}`, status, "JobFailed", "boom")
				var in job.ExecutionInput
				if err := json.Unmarshal([]byte(x.Input), &in); err != nil {
					t.Fatal(err)
				}
				in.Job.MessageID = "msg-first-copy"
				x.Input = string(in.MustJSON())
				x.StopDate = t0.Add(-2 * time.Minute)
				r.sfn.Put(x)
				claim := held("reports", 2, "r-1", 1, lease.Starting) // message msg-r-1: the second copy
				r.leases.Set(claim)
				var err error
				if via == "sweep" {
					_, err = r.h.Sweep(context.Background())
				} else {
					_, err = r.svc.Release(context.Background(), releaser.Request{Key: claim.Key(), JobID: "r-1", Attempt: 1,
						Outcome: map[string]releaser.Outcome{"SUCCEEDED": releaser.Succeeded, "FAILED": releaser.Failed}[status],
						Source:  "status-event", ExecutionArn: execArn("reports", "r-1", 1), MessageID: "msg-first-copy"})
				}
				if err != nil {
					t.Fatal(err)
				}
				checkLease(t, r.leases, claim.Key(), nil)
				if err := r.svc.Metrics.Flush(); err != nil {
					t.Fatal(err)
				}
				for _, m := range []string{metrics.JobsSucceeded, metrics.JobsRetried, metrics.JobsDeadLettered} {
					if got := published.Sum("", m); got != 0 {
						t.Errorf("%s = %v, want 0: the first copy's release acted on the attempt", m, got)
					}
				}
				if vs := r.sqs.VisibilityChanges(); len(vs) != 0 {
					t.Errorf("visibility changes = %+v, want none: the duplicate is not retried", vs)
				}
			})
		}
	}
}
