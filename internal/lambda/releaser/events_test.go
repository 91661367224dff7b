package releaser_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
	"github.com/sfnlimit/sfnlimit/internal/lambda/releaser"
)

// childArn is a second state machine of the user's, also listed in ExtraStateMachineArns (attached
// as a type of its own, say), that the job's workflow runs as a nested workflow.
const childArn = "arn:aws:states:us-east-1:123456789012:stateMachine:etl-child"

// statusEventOf is a status-change event of execution arn (on state machine sm) whose input is the
// job r-1001's attempt 1 in lane 1, as the starter starts it.
func statusEventOf(t *testing.T, sm, arn, name, status string) []byte {
	t.Helper()
	var ev map[string]any
	if err := json.Unmarshal(fixture(t, "status_change_succeeded.json"), &ev); err != nil {
		t.Fatal(err)
	}
	d := ev["detail"].(map[string]any)
	d["stateMachineArn"], d["executionArn"], d["name"], d["status"] = sm, arn, name, status
	ev["resources"] = []string{arn}
	out, _ := json.Marshal(ev)
	return out
}

// A workflow in events mode that runs another listed state machine as a nested workflow, passing
// its own input on ("Input.$": "$", as nested workflows usually do), gives the child an input with
// the parent's job metadata. The child's status events reach the releaser (the rules match every
// listed machine, SUCCEEDED included) while the parent still runs: they name another execution
// than the one the lease holds the lane for, and must not release it, or the next job of the lane
// starts beside the running one and the type runs over its limit.
func TestStatusEventOfAnotherExecutionDoesNotRelease(t *testing.T) {
	for _, tt := range []struct {
		name, sm, exec, execName, status string
	}{
		{name: "child succeeded", sm: childArn, exec: "arn:aws:states:us-east-1:123456789012:execution:etl-child:3f1c0a9e",
			execName: "3f1c0a9e", status: "SUCCEEDED"},
		{name: "child failed", sm: childArn, exec: "arn:aws:states:us-east-1:123456789012:execution:etl-child:3f1c0a9e",
			execName: "3f1c0a9e", status: "FAILED"},
		{name: "child named after its parent succeeded", sm: childArn,
			exec:     "arn:aws:states:us-east-1:123456789012:execution:etl-child:" + execName("reports", "r-1001", 1),
			execName: execName("reports", "r-1001", 1), status: "SUCCEEDED"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t)
			l := r.leases.Set(claimed("reports", 1, "r-1001", 1))
			got, err := r.h.Handle(context.Background(), statusEventOf(t, tt.sm, tt.exec, tt.execName, tt.status))
			if err != nil {
				t.Fatalf("Handle(child's %s event) = %v", tt.status, err)
			}
			if got.Result != releaser.Noop {
				t.Errorf("Handle(child's %s event) = %+v, want %s: the parent still runs", tt.status, got, releaser.Noop)
			}
			checkLease(t, r.leases, l.Key(), &wantLease{JobID: "r-1001", Status: lease.Starting, Attempt: 1,
				Handle: handle("r-1001", 2), Arn: execArn("reports", "r-1001", 1), Version: l.Version})
			if d := deletedHandles(r.sqs); len(d) != 0 {
				t.Errorf("DeleteMessage handles = %q, want none", d)
			}
			if v := visibleHandles(r.sqs); len(v) != 0 {
				t.Errorf("made visible = %q, want none", v)
			}
		})
	}
	// The parent's own event still releases the lane.
	r := newRig(t)
	l := r.leases.Set(claimed("reports", 1, "r-1001", 1))
	got, err := r.h.Handle(context.Background(), statusEventOf(t, smArn, execArn("reports", "r-1001", 1), execName("reports", "r-1001", 1), "SUCCEEDED"))
	if err != nil || got.Result != releaser.Deleted {
		t.Fatalf("Handle(parent's SUCCEEDED event) = %+v, %v; want %s", got, err, releaser.Deleted)
	}
	checkLease(t, r.leases, l.Key(), nil)
}
