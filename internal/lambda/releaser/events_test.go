package releaser_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/sfnlimit/sfnlimit/internal/lambda/deadletter"
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

// A workflow with Release steps of its own may end SUCCEEDED after its ReleaseFailed step (a Catch
// that releases the failure and then succeeds, so that the failure does not show as a failed
// execution), and a user may redrive a FAILED execution to success by hand. If the release that
// dead-letters its last attempt stopped after it marked the lease dead-lettering (its dead letter's
// send throttled, say, and the workflow's retry of the step found the lease taken), every later
// release of the attempt sees SUCCEEDED: the sweep's, the status event's, and a redelivery's, which
// acknowledges the message. They must finish the dead-lettering once it is theirs to take over, or
// the lane stays held for good and the job, its message deleted, is in no queue at all.
func TestSucceededExecutionFinishesAnInterruptedDeadLetter(t *testing.T) {
	r := newRig(t)
	r.svc.Now = r.clock.Now
	r.h.StaleAfter = time.Hour
	l := claimed("reports", 1, "r-1001", 3)
	l.Status = lease.DeadLettering
	l.UpdatedAt = t0.Add(-releaser.DeadLetterTakeover - time.Minute)
	r.leases.Set(l)
	r.sfn.Put(execution("reports", 1, "r-1001", 3, `{"seconds":3}`, "SUCCEEDED", "", ""))
	if _, err := r.h.Handle(context.Background(), fixture(t, "scheduled_event.json")); err != nil {
		t.Fatalf("Handle(scheduled event) = %v", err)
	}
	checkLease(t, r.leases, l.Key(), nil)
	checkDLQ(t, r.sqs, []dead{{Reason: deadletter.ReasonAttemptsExhausted, JobID: "r-1001", Attempt: "3",
		Body: `{"type":"reports","id":"r-1001","input":{"seconds":3},"redrive":1}`}})
	if d := deletedHandles(r.sqs); !equal(d, []string{handle("r-1001", 2)}) {
		t.Errorf("DeleteMessage handles = %q, want the job's", d)
	}
}

// Within DeadLetterTakeover the release that marked the lease dead-lettering may still be sending
// its dead letter: a success release of the attempt leaves it alone.
func TestSucceededExecutionLeavesARecentDeadLetterAlone(t *testing.T) {
	r := newRig(t)
	r.svc.Now = r.clock.Now
	l := claimed("reports", 1, "r-1001", 3)
	l.Status = lease.DeadLettering
	l.UpdatedAt = t0.Add(-10 * time.Second)
	l = r.leases.Set(l)
	got, err := r.svc.Release(context.Background(), releaser.Request{
		Key: l.Key(), JobID: "r-1001", Attempt: 3, Outcome: releaser.Succeeded, Source: "status-event",
	})
	if err != nil || got != releaser.Noop {
		t.Fatalf("Release(succeeded) = %s, %v; want %s", got, err, releaser.Noop)
	}
	checkLease(t, r.leases, l.Key(), &wantLease{JobID: "r-1001", Status: lease.DeadLettering, Attempt: 3,
		Handle: handle("r-1001", 2), Arn: execArn("reports", "r-1001", 3), Version: l.Version})
	checkDLQ(t, r.sqs, nil)
}
