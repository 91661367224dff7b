package releaser_test

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"sync"
	"testing"
	"time"

	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/lambda/deadletter"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
	"github.com/sfnlimit/sfnlimit/internal/lambda/pool"
	"github.com/sfnlimit/sfnlimit/internal/lambda/releaser"
	"github.com/sfnlimit/sfnlimit/internal/tools/fakes"
)

func TestHandlerDispatch(t *testing.T) {
	const failCause = "the job input asked the work to fail (input.fail is true)"
	running := held("reports", 1, "r-1001", 1, lease.Starting)
	tests := []struct {
		name          string
		give          []byte
		lease         *lease.Lease
		exec          *fakes.Execution
		want          releaser.Response
		wantErr       bool
		wantDescribes int
		wantDeleted   []string
		wantVisible   []string
		wantLease     *wantLease
		wantDLQ       []dead
	}{
		{
			name:        "workflow: succeeded",
			give:        fixture(t, "workflow_release_succeeded.json"),
			lease:       &running,
			want:        releaser.Response{Result: releaser.Deleted},
			wantDeleted: []string{handle("r-1001", 2)},
		},
		{
			name:        "workflow: failed with attempts left",
			give:        fixture(t, "workflow_release_failed.json"),
			lease:       &running,
			want:        releaser.Response{Result: releaser.Retried},
			wantVisible: []string{handle("r-1001", 2)},
			wantLease:   &wantLease{JobID: "r-1001", Status: lease.Retrying, Attempt: 1, Handle: handle("r-1001", 2)},
		},
		{
			name:      "workflow: job already released",
			give:      fixture(t, "workflow_release_succeeded.json"),
			want:      releaser.Response{Result: releaser.Noop},
			wantLease: nil,
		},
		{
			name:    "workflow: outcome neither succeeded nor failed",
			give:    []byte(`{"source":"workflow","outcome":"maybe","job":{"id":"r-1001","type":"reports","lane":1,"attempt":1},"executionArn":"x"}`),
			lease:   &running,
			wantErr: true,
			wantLease: &wantLease{JobID: "r-1001", Status: lease.Starting, Attempt: 1, Handle: handle("r-1001", 2),
				Arn: execArn("reports", "r-1001", 1), Version: 4},
		},
		{
			name:    "workflow: no job metadata",
			give:    []byte(`{"source":"workflow","outcome":"succeeded","executionArn":"arn:aws:states:us-east-1:123456789012:execution:sfnlimit-sample:x"}`),
			lease:   &running,
			wantErr: true,
			wantLease: &wantLease{JobID: "r-1001", Status: lease.Starting, Attempt: 1, Handle: handle("r-1001", 2),
				Arn: execArn("reports", "r-1001", 1), Version: 4},
		},
		{
			name:        "status change: FAILED with attempts left is retried",
			give:        fixture(t, "status_change_failed.json"),
			lease:       &running,
			want:        releaser.Response{Result: releaser.Retried},
			wantVisible: []string{handle("r-1001", 2)},
			wantLease:   &wantLease{JobID: "r-1001", Status: lease.Retrying, Attempt: 1, Handle: handle("r-1001", 2)},
		},
		{
			// The work succeeded and the workflow's Release step failed (its Catch ends the
			// execution in success): the status event releases the lane as a success.
			name:        "status change: SUCCEEDED with the lane still held is released as a success",
			give:        fixture(t, "status_change_succeeded.json"),
			lease:       &running,
			want:        releaser.Response{Result: releaser.Deleted},
			wantDeleted: []string{handle("r-1001", 2)},
		},
		{
			name: "status change: execution without job metadata",
			give: fixture(t, "status_change_not_a_job.json"),
			want: releaser.Response{Result: releaser.Noop},
		},
		{
			name:          "status change: input left out of the event is read with DescribeExecution",
			give:          fixture(t, "status_change_timed_out_input_omitted.json"),
			lease:         &running,
			exec:          ptr(execution("reports", 1, "r-1001", 1, `{"seconds":3}`, "TIMED_OUT", "States.Timeout", "")),
			want:          releaser.Response{Result: releaser.Retried},
			wantDescribes: 1,
			wantVisible:   []string{handle("r-1001", 2)},
			wantLease:     &wantLease{JobID: "r-1001", Status: lease.Retrying, Attempt: 1, Handle: handle("r-1001", 2)},
		},
		{
			name:          "status change: ABORTED is dead-lettered",
			give:          fixture(t, "status_change_aborted.json"),
			lease:         &running,
			exec:          ptr(execution("reports", 1, "r-1001", 1, `{"seconds":600}`, "ABORTED", "", "")),
			want:          releaser.Response{Result: releaser.DeadLettered},
			wantDescribes: 1, // the dead letter's body comes from the execution's input
			wantDeleted:   []string{handle("r-1001", 2)},
			wantDLQ:       []dead{{Reason: releaser.ReasonAborted, JobID: "r-1001", Error: "States.ABORTED", Body: `{"type":"reports","id":"r-1001","input":{"seconds":600},"redrive":1}`}},
		},
		{
			name:          "status change: FAILED on the last attempt",
			give:          statusEventForAttempt(t, 3),
			lease:         ptr(held("reports", 1, "r-1001", 3, lease.Starting)),
			exec:          ptr(execution("reports", 1, "r-1001", 3, `{"seconds":3,"fail":true}`, "FAILED", "JobFailed", failCause)),
			want:          releaser.Response{Result: releaser.DeadLettered},
			wantDescribes: 1,
			wantDeleted:   []string{handle("r-1001", 2)},
			wantDLQ:       []dead{{Reason: deadletter.ReasonAttemptsExhausted, JobID: "r-1001", Attempt: "3", Error: "JobFailed"}},
		},
		{
			name:    "unknown event",
			give:    []byte(`{"version":"0","id":"1","detail-type":"Object Created","source":"aws.s3","detail":{}}`),
			wantErr: true,
		},
		{
			name:    "not a JSON object",
			give:    []byte(`["reports-r-1001-1"]`),
			wantErr: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t)
			if tt.lease != nil {
				r.leases.Set(*tt.lease)
			}
			if tt.exec != nil {
				r.sfn.Put(*tt.exec)
			}
			got, err := r.h.Handle(context.Background(), json.RawMessage(tt.give))
			if (err != nil) != tt.wantErr {
				t.Fatalf("Handle() = %+v, %v, want error %v", got, err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("Handle() = %+v, want %+v", got, tt.want)
			}
			if n := len(r.sfn.Describes()); n != tt.wantDescribes {
				t.Errorf("DescribeExecution calls = %d, want %d", n, tt.wantDescribes)
			}
			if d := deletedHandles(r.sqs); !equal(d, tt.wantDeleted) {
				t.Errorf("DeleteMessage handles = %q, want %q", d, tt.wantDeleted)
			}
			if v := visibleHandles(r.sqs); !equal(v, tt.wantVisible) {
				t.Errorf("made visible = %q, want %q", v, tt.wantVisible)
			}
			checkLease(t, r.leases, lease.Key{Type: "reports", Lane: 1}, tt.wantLease)
			checkDLQ(t, r.sqs, tt.wantDLQ)
		})
	}
}

// statusEventForAttempt is the FAILED status-change fixture for another attempt of the same job.
func statusEventForAttempt(t *testing.T, attempt int) []byte {
	t.Helper()
	var ev map[string]any
	if err := json.Unmarshal(fixture(t, "status_change_failed.json"), &ev); err != nil {
		t.Fatal(err)
	}
	d := ev["detail"].(map[string]any)
	var in map[string]any
	if err := json.Unmarshal([]byte(d["input"].(string)), &in); err != nil {
		t.Fatal(err)
	}
	in["job"].(map[string]any)["attempt"] = attempt
	b, _ := json.Marshal(in)
	d["input"] = string(b)
	d["name"] = execName("reports", "r-1001", attempt)
	d["executionArn"] = execArn("reports", "r-1001", attempt)
	ev["resources"] = []string{execArn("reports", "r-1001", attempt)}
	out, _ := json.Marshal(ev)
	return out
}

func TestHandlerSweep(t *testing.T) {
	type row struct {
		lease     lease.Lease
		age       time.Duration // since its last update
		execution string        // status of its execution; "" for none
		want      *wantLease    // nil: released
	}
	lanes := func(typ string, ln int, id string, attempt int, st lease.Status) lease.Lease {
		return held(typ, ln, id, attempt, st)
	}
	rows := []row{
		{ // closed execution, old enough: released (deleted)
			lease: lanes("reports", 1, "r-1001", 1, lease.Starting), age: 5 * time.Minute, execution: "SUCCEEDED",
		},
		{ // still running: untouched
			lease: lanes("reports", 2, "r-1002", 1, lease.Starting), age: 5 * time.Minute, execution: "RUNNING",
			want: &wantLease{JobID: "r-1002", Status: lease.Starting, Attempt: 1, Handle: handle("r-1002", 2), Arn: execArn("reports", "r-1002", 1), Version: 4},
		},
		{ // closed, but younger than SweepMinAge: untouched, not even described
			lease: lanes("reports", 3, "r-1003", 1, lease.Starting), age: 10 * time.Second, execution: "FAILED",
			want: &wantLease{JobID: "r-1003", Status: lease.Starting, Attempt: 1, Handle: handle("r-1003", 2), Arn: execArn("reports", "r-1003", 1), Version: 4},
		},
		{ // not running: not the sweep's business
			lease: lanes("payments", 1, "p-1", 2, lease.Retrying), age: time.Hour,
			want: &wantLease{JobID: "p-1", Status: lease.Retrying, Attempt: 2, Handle: handle("p-1", 2), Version: 4},
		},
		{ // failed with attempts left: retried
			lease: lanes("payments", 2, "p-2", 1, lease.Starting), age: 3 * time.Minute, execution: "FAILED",
			want: &wantLease{JobID: "p-2", Status: lease.Retrying, Attempt: 1, Handle: handle("p-2", 2)},
		},
		{ // an unconfirmed claim (no ARN of its own) whose execution ran and ended: released
			lease: lanes("payments", 3, "p-3", 1, lease.Starting), age: 10 * time.Minute, execution: "SUCCEEDED",
		},
		{ // an unconfirmed claim whose start never went through: described, nothing to release
			lease: lanes("payments", 4, "p-4", 2, lease.Starting), age: 10 * time.Minute,
			want: &wantLease{JobID: "p-4", Status: lease.Starting, Attempt: 2, Handle: handle("p-4", 2), Arn: execArn("payments", "p-4", 2), Version: 4},
		},
	}
	r := newRig(t)
	for _, x := range rows {
		l := x.lease
		l.UpdatedAt = t0.Add(-x.age)
		r.leases.Set(l)
		if x.execution != "" {
			r.sfn.Put(execution(l.Type, l.Lane, l.JobID, l.Attempt, `{}`, x.execution, "", ""))
		}
	}
	got, err := r.h.Handle(context.Background(), fixture(t, "scheduled_event.json"))
	if err != nil {
		t.Fatalf("Handle(scheduled event) = %v", err)
	}
	if want := (releaser.Response{Swept: 3, Checked: 5}); got != want {
		t.Errorf("Handle(scheduled event) = %+v, want %+v", got, want)
	}
	wantDescribed := sorted([]string{execArn("reports", "r-1001", 1), execArn("reports", "r-1002", 1), execArn("payments", "p-2", 1),
		execArn("payments", "p-3", 1), execArn("payments", "p-4", 2)})
	if d := sorted(r.sfn.Describes()); !equal(d, wantDescribed) {
		t.Errorf("described = %q, want %q", d, wantDescribed)
	}
	for _, x := range rows {
		checkLease(t, r.leases, x.lease.Key(), x.want)
	}
	// The sweep releases up to 8 leases at a time, so the order of its deletes is not defined.
	if d := sorted(deletedHandles(r.sqs)); !equal(d, sorted([]string{handle("r-1001", 2), handle("p-3", 2)})) {
		t.Errorf("DeleteMessage handles = %q, want the released jobs'", d)
	}
	if v := visibleHandles(r.sqs); !equal(v, []string{handle("p-2", 2)}) {
		t.Errorf("made visible = %q, want the retried job's", v)
	}
}

func TestHandlerSweepBudget(t *testing.T) {
	tests := []struct {
		name          string
		leases        int
		maxDescribes  int
		wantDescribes int
	}{
		{name: "budget below the due leases", leases: 6, maxDescribes: 2, wantDescribes: 2},
		{name: "budget above the due leases", leases: 3, maxDescribes: 10, wantDescribes: 3},
		{name: "no budget set", leases: 4, maxDescribes: 0, wantDescribes: 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t)
			r.h.SweepMaxDescribes = tt.maxDescribes
			var keys []lease.Key
			for i := range tt.leases {
				l := held("reports", i+1, "r-"+string(rune('a'+i)), 1, lease.Starting)
				l.UpdatedAt = t0.Add(-time.Duration(10+i) * time.Minute) // lane n+1 is older than lane n
				r.leases.Set(l)
				r.sfn.Put(execution(l.Type, l.Lane, l.JobID, 1, `{}`, string(sfntypes.ExecutionStatusSucceeded), "", ""))
				keys = append(keys, l.Key())
			}
			got, err := r.h.Sweep(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if n := len(r.sfn.Describes()); n != tt.wantDescribes {
				t.Errorf("DescribeExecution calls = %d, want %d", n, tt.wantDescribes)
			}
			if got.Checked != tt.wantDescribes || got.Swept != tt.wantDescribes {
				t.Errorf("Sweep() = %+v, want %d checked and swept", got, tt.wantDescribes)
			}
			// The oldest leases go first.
			for i, k := range keys {
				_, left := r.leases.Lease(k)
				if wantLeft := i < tt.leases-tt.wantDescribes; left != wantLeft {
					t.Errorf("lease of lane %s left = %v, want %v (oldest first)", k, left, wantLeft)
				}
			}
		})
	}
}

func TestHandlerSweepDescribeErrorDoesNotStopOthers(t *testing.T) {
	r := newRig(t)
	for i, id := range []string{"r-1", "r-2", "r-3"} {
		l := held("reports", i+1, id, 1, lease.Starting)
		l.UpdatedAt = t0.Add(-time.Hour)
		r.leases.Set(l)
		r.sfn.Put(execution("reports", i+1, id, 1, `{}`, "SUCCEEDED", "", ""))
	}
	broken := execArn("reports", "r-2", 1)
	r.sfn.OnDescribe = func(arn string) error {
		if arn == broken {
			return fakes.APIError("ThrottlingException", "Rate exceeded")
		}
		return nil
	}
	got, err := r.h.Sweep(context.Background())
	if err == nil {
		t.Errorf("Sweep() error = nil, want the describe error reported")
	}
	if got.Swept != 2 || got.Checked != 3 {
		t.Errorf("Sweep() = %+v, want 2 swept of 3 checked", got)
	}
	if _, ok := r.leases.Lease(lease.Key{Type: "reports", Lane: 2}); !ok {
		t.Errorf("lease whose execution could not be described was released, want it kept")
	}
}

// An execution that closed moments ago is being released by its own Release step or status event,
// which EventBridge delivers after the execution has stopped. The sweep leaves it to them for
// SweepMinAge after its stop: a sweep that raced them would count a healthy release as a missed one
// (LeasesSwept, which the lease-drift alarm watches). Once closed for longer, the release was missed
// and the sweep makes it.
func TestHandlerSweepLeavesARecentlyClosedExecutionToItsOwnRelease(t *testing.T) {
	tests := []struct {
		name      string
		stopped   time.Duration // before the sweep; 0: no stop date known
		wantSwept int
	}{
		{name: "stopped 2 s ago: its status event is on its way", stopped: 2 * time.Second, wantSwept: 0},
		{name: "stopped just under SweepMinAge ago", stopped: time.Minute - time.Second, wantSwept: 0},
		{name: "stopped over SweepMinAge ago: its release was missed", stopped: 2 * time.Minute, wantSwept: 1},
		{name: "no stop date: released as before", wantSwept: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t)
			l := held("reports", 1, "r-ok", 1, lease.Starting)
			l.UpdatedAt = t0.Add(-10 * time.Minute) // older than SweepMinAge: the sweep looks at it
			r.leases.Set(l)
			x := execution("reports", 1, "r-ok", 1, `{}`, "SUCCEEDED", "", "")
			if tt.stopped > 0 {
				x.StopDate = t0.Add(-tt.stopped)
			}
			r.sfn.Put(x)
			got, err := r.h.Sweep(context.Background())
			if err != nil {
				t.Fatalf("Sweep() error = %v", err)
			}
			if got.Swept != tt.wantSwept {
				t.Errorf("Sweep() swept %d, want %d", got.Swept, tt.wantSwept)
			}
			if tt.wantSwept == 0 {
				checkLease(t, r.leases, l.Key(), &wantLease{JobID: "r-ok", Status: lease.Starting, Attempt: 1, Handle: handle("r-ok", 2), Arn: execArn("reports", "r-ok", 1)})
			} else {
				checkLease(t, r.leases, l.Key(), nil)
			}
		})
	}
}

// The sample's Release step can fail after its retries (a throttled releaser); its Catch ends the
// execution SUCCEEDED with the lease still held. The sweep must release it as a success: the
// message and the lease are deleted; the job is neither retried nor dead-lettered, even on its
// last attempt.
func TestHandlerSweepReleasesASucceededExecutionAsSuccess(t *testing.T) {
	for _, attempt := range []int{1, 3} { // reports has 3 attempts: 3 is the last
		r := newRig(t)
		l := held("reports", 1, "r-ok", attempt, lease.Starting)
		l.UpdatedAt = t0.Add(-10 * time.Minute)
		r.leases.Set(l)
		r.sfn.Put(execution("reports", 1, "r-ok", attempt, `{}`, "SUCCEEDED", "", ""))
		got, err := r.h.Sweep(context.Background())
		if err != nil {
			t.Fatalf("attempt %d: Sweep() error = %v", attempt, err)
		}
		if got.Swept != 1 || got.Checked != 1 {
			t.Errorf("attempt %d: Sweep() = %+v, want 1 checked and swept", attempt, got)
		}
		checkLease(t, r.leases, l.Key(), nil)
		if d := deletedHandles(r.sqs); !equal(d, []string{handle("r-ok", 2)}) {
			t.Errorf("attempt %d: DeleteMessage handles = %q, want the job's", attempt, d)
		}
		if v := visibleHandles(r.sqs); len(v) != 0 {
			t.Errorf("attempt %d: made visible (retried) %q, want none", attempt, v)
		}
		checkDLQ(t, r.sqs, nil)
	}
}

// The sweep reads leases type by type (a Query each), never by scanning the table: the table also
// holds a lane-count item per recent job, millions a day, which a scan cannot get through in the
// releaser's timeout. The types are the configured ones and every type that has held a lease, so
// a type whose config was removed while its leases live is still swept.
func TestHandlerSweepQueriesPerTypeWithoutScanning(t *testing.T) {
	r := newRig(t)
	r.leases.BeforeAll = func() error {
		t.Error("the sweep scanned every lease (All)")
		return errors.New("no scan")
	}
	var listed []string
	var mu sync.Mutex
	r.leases.BeforeListType = func(typ string) error {
		mu.Lock()
		defer mu.Unlock()
		listed = append(listed, typ)
		return nil
	}
	for _, l := range []lease.Lease{
		held("reports", 1, "r-1", 1, lease.Starting), // configured
		held("retired", 2, "x-1", 1, lease.Starting), // its config was removed; its lease lives on
	} {
		l.UpdatedAt = t0.Add(-time.Hour)
		r.leases.Set(l)
		r.sfn.Put(execution(l.Type, l.Lane, l.JobID, 1, `{}`, "SUCCEEDED", "", ""))
	}
	got, err := r.h.Sweep(context.Background())
	if err != nil {
		t.Fatalf("Sweep() error = %v", err)
	}
	if got.Swept != 2 || got.Checked != 2 {
		t.Errorf("Sweep() = %+v, want both leases checked and swept", got)
	}
	// reports and payments are configured, retired is in the registry: each read once.
	if want := []string{"payments", "reports", "retired"}; !equal(sorted(listed), want) {
		t.Errorf("ListType calls = %q, want %q", sorted(listed), want)
	}
}

// A type whose leases cannot be read does not stop the sweep of the others.
func TestHandlerSweepListErrorDoesNotStopOthers(t *testing.T) {
	r := newRig(t)
	r.leases.BeforeListType = func(typ string) error {
		if typ == "payments" {
			return fakes.APIError("ProvisionedThroughputExceededException", "slow down")
		}
		return nil
	}
	for _, l := range []lease.Lease{held("reports", 1, "r-1", 1, lease.Starting), held("payments", 1, "p-1", 1, lease.Starting)} {
		l.UpdatedAt = t0.Add(-time.Hour)
		r.leases.Set(l)
		r.sfn.Put(execution(l.Type, l.Lane, l.JobID, 1, `{}`, "SUCCEEDED", "", ""))
	}
	got, err := r.h.Sweep(context.Background())
	if err == nil {
		t.Error("Sweep() error = nil, want the list error reported")
	}
	if got.Swept != 1 {
		t.Errorf("Sweep() = %+v, want the reports lease swept", got)
	}
	if _, ok := r.leases.Lease(lease.Key{Type: "reports", Lane: 1}); ok {
		t.Error("the reports lease was not released")
	}
}

// workflowRelease is a Release step's payload for job r-1001's attempt 1 in lane 1, sent by the
// execution arn ("": a payload without executionArn, as a hand-written Release step may send).
func workflowRelease(t *testing.T, outcome releaser.Outcome, arn string) []byte {
	t.Helper()
	ev := map[string]any{
		"source": "workflow", "outcome": outcome,
		"job": map[string]any{"id": "r-1001", "type": "reports", "lane": 1, "attempt": 1, "submittedAt": submitted},
	}
	if arn != "" {
		ev["executionArn"] = arn
	}
	if outcome == releaser.Failed {
		ev["error"], ev["cause"] = "JobFailed", "the work failed"
	}
	b, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A workflow that starts a child workflow with its own input ("Input.$": "$") gives the child the
// job's metadata; a child with Release steps of its own (the sample's, copied) sends the parent's
// job in its release while the parent still runs. The release names the child's execution
// ($$.Execution.Id), not the one the lease holds the lane for: it must not release the lane, or the
// lane's next job starts beside the running parent and the type runs over its limit.
func TestWorkflowReleaseOfAnotherExecutionDoesNotRelease(t *testing.T) {
	const child = "arn:aws:states:us-east-1:123456789012:execution:etl-child:3f1c0a9e"
	retrying := claimed("reports", 1, "r-1001", 1)
	retrying.Status, retrying.ExecutionArn = lease.Retrying, "" // a retrying lease keeps only its machine
	for _, tt := range []struct {
		name    string
		lease   lease.Lease
		outcome releaser.Outcome
	}{
		{name: "child succeeded", lease: claimed("reports", 1, "r-1001", 1), outcome: releaser.Succeeded},
		{name: "child failed", lease: claimed("reports", 1, "r-1001", 1), outcome: releaser.Failed},
		{name: "child failed, the parent's lease retrying", lease: retrying, outcome: releaser.Failed},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t)
			l := r.leases.Set(tt.lease)
			got, err := r.h.Handle(context.Background(), workflowRelease(t, tt.outcome, child))
			if err != nil {
				t.Fatalf("Handle(child's %s release) = %v", tt.outcome, err)
			}
			if got.Result != releaser.Noop {
				t.Errorf("Handle(child's %s release) = %+v, want %s: the parent still runs", tt.outcome, got, releaser.Noop)
			}
			checkLease(t, r.leases, l.Key(), &wantLease{JobID: "r-1001", Status: l.Status, Attempt: 1,
				Handle: handle("r-1001", 2), Arn: l.ExecutionArn, Version: l.Version})
			if d := deletedHandles(r.sqs); len(d) != 0 {
				t.Errorf("DeleteMessage handles = %q, want none", d)
			}
			if v := visibleHandles(r.sqs); len(v) != 0 {
				t.Errorf("made visible = %q, want none", v)
			}
		})
	}
}

// The parent's own Release step releases its lane, and so, as before, does a Release step whose
// payload has no executionArn (a workflow written before the payload had it, or without it): with
// nothing to compare, the release is taken for the lease's execution's.
func TestWorkflowReleaseOfTheLeasesExecution(t *testing.T) {
	for _, tt := range []struct {
		name, arn string
	}{
		{name: "the lease's execution", arn: execArn("reports", "r-1001", 1)},
		{name: "no executionArn in the payload", arn: ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t)
			l := r.leases.Set(claimed("reports", 1, "r-1001", 1))
			got, err := r.h.Handle(context.Background(), workflowRelease(t, releaser.Succeeded, tt.arn))
			if err != nil || got.Result != releaser.Deleted {
				t.Fatalf("Handle(release) = %+v, %v; want %s", got, err, releaser.Deleted)
			}
			checkLease(t, r.leases, l.Key(), nil)
			// A second delivery of the same release (Lambda retries an invocation) changes nothing.
			again, err := r.h.Handle(context.Background(), workflowRelease(t, releaser.Succeeded, tt.arn))
			if err != nil || again.Result != releaser.Noop {
				t.Fatalf("Handle(release again) = %+v, %v; want %s", again, err, releaser.Noop)
			}
		})
	}
}

// Jobs already running when their type joins a pool hold no slot of it: the sweep adopts them,
// each into the lowest free slot, or into one above the cap when none is free, so the pool reads
// as full until enough of them end; a slot above the cap is never offered as room. Bound leases
// (their claim takes a slot before the start) and leases that run nothing (moving) are left alone.
func TestHandlerSweepAdoptsJobsRunningWhenTheirTypeJoinedAPool(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	res, err := config.NewResolver(config.Defaults{
		Limits: map[string]int{"a": 5, "b": 5}, DefaultMaxAttempts: 3, StateMachineArn: smArn,
		Pools: map[string]int{"psp": 2}, TypePools: map[string][]string{"a": {"psp"}, "b": {"psp"}},
	}, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	slots := pool.NewStore(fakes.NewDynamoDB("table"), "table")
	r.svc.Config, r.svc.Pools = res, slots
	b1 := held("b", 1, "b-1", 1, lease.Starting)
	r.leases.Set(b1)
	if _, err := slots.Take(ctx, "psp", 1, pool.HolderOf(b1), nil); err != nil {
		t.Fatal(err)
	}
	// a joined the pool while these ran or waited to run again.
	a1, a2, a3 := held("a", 1, "a-1", 1, lease.Starting), held("a", 2, "a-2", 1, lease.Starting), held("a", 3, "a-3", 1, lease.Retrying)
	bound, moving := held("a", 4, "a-4", 0, lease.Bound), held("a", 5, "a-5", 1, lease.Moving)
	for _, l := range []lease.Lease{a1, a2, a3, bound, moving} {
		r.leases.Set(l)
	}
	for _, l := range []lease.Lease{b1, a1, a2} {
		r.sfn.Put(execution(l.Type, l.Lane, l.JobID, l.Attempt, `{}`, "RUNNING", "", ""))
	}
	look := func() pool.View {
		t.Helper()
		v, err := pool.Look(ctx, slots, r.leases, "psp", 2)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for range 2 { // a second sweep adopts nothing more
		if _, err := r.h.Sweep(ctx); err != nil {
			t.Fatal(err)
		}
		v := look()
		got := map[string]int{}
		for _, sl := range v.Live {
			got[sl.Holder.JobID] = sl.N
		}
		want := map[string]int{"b-1": 1, "a-1": 2, "a-2": 3, "a-3": 4}
		if !maps.Equal(got, want) {
			t.Fatalf("live slots (job: slot) = %v, want %v: the running and retrying jobs adopted, the lowest free slot first, then above the cap", got, want)
		}
		if len(v.Free) != 0 || v.Room() != 0 {
			t.Fatalf("free = %+v, room %d; want none: the pool runs over its cap", v.Free, v.Room())
		}
	}
	// b-1 ends: slot 1 is free, but the pool still runs 3 jobs, over its cap of 2.
	r.leases.Remove(b1.Key())
	if v := look(); len(v.Free) != 0 || v.Room() != 0 {
		t.Fatalf("after b-1 ended: free = %+v, room %d; want none (3 adopted jobs run, cap 2)", v.Free, v.Room())
	}
	// a-1 and a-3 end: one job runs, in slot 3 above the cap, and the lowest free slot is offered.
	r.leases.Remove(a1.Key())
	r.leases.Remove(a3.Key())
	if v := look(); len(v.Free) != 1 || v.Free[0].N != 1 || v.Room() != 1 {
		t.Fatalf("after a-1 and a-3 ended: free = %+v, room %d; want slot 1 alone (a-2 runs in slot 3)", v.Free, v.Room())
	}
}
