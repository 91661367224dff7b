package starter_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"

	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lane"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
	"github.com/sfnlimit/sfnlimit/internal/lambda/metrics"
	"github.com/sfnlimit/sfnlimit/internal/lambda/releaser"
	"github.com/sfnlimit/sfnlimit/internal/lambda/waitroom"
	"github.com/sfnlimit/sfnlimit/internal/tools/fakes"
)

// A duplicate delivery of a waiting message whose job was already bound, ran and released binds the
// job a second time and sends a second copy to the lane (the copy must come, to free the lane its
// bind took). That copy's claim finds the job's execution ended, started by the first copy. If its
// first look fails (DescribeExecution answered ExecutionDoesNotExist, as it may for a moment), its
// claim is left behind, and the next delivery must still take the copy for the duplicate it is: drop
// it and free the lane, and never release the job's attempt a second time (found by CI's fault
// scenario: the job's success was counted twice).
func TestSecondCopyOfAReleasedJobIsADuplicateAfterAFailedLook(t *testing.T) {
	for _, status := range []sfntypes.ExecutionStatus{sfntypes.ExecutionStatusSucceeded, sfntypes.ExecutionStatusFailed} {
		t.Run(string(status), func(t *testing.T) {
			r := newRigStrategy(t, nil, lane.FirstFree)
			var emf bytes.Buffer
			r.st.Metrics = metrics.New(&emf, "sfnlimit")
			r.rel.Metrics = r.st.Metrics // the starter releases through the releaser's service
			first := execution("reports", 1, "r-1", 1, status, "", "")
			first.Input = withMessageID(t, first.Input, "msg-first-copy")
			r.sfn.Put(first)
			r.leases.Set(boundLease("reports", 1, "r-1"))

			m := jobMessage(t, "reports", 1, "r-1", 0, 1) // the second copy, msg-r-1
			fail := true
			r.sfn.OnDescribe = func(string) error {
				if fail {
					fail = false
					return &sfntypes.ExecutionDoesNotExist{Message: aws.String("not visible yet")}
				}
				return nil
			}
			if _, err := r.st.Handle(context.Background(), events.SQSEvent{Records: []events.SQSMessage{m}}); err != nil {
				t.Fatal(err)
			}
			r.clock.Advance(2 * retryDelay)
			resp, err := r.st.Handle(context.Background(), events.SQSEvent{Records: []events.SQSMessage{jobMessage(t, "reports", 1, "r-1", 0, 2)}})
			if err != nil {
				t.Fatal(err)
			}
			if len(resp.BatchItemFailures) != 0 {
				t.Errorf("second copy held (%v), want it dropped as a duplicate", resp.BatchItemFailures)
			}
			if l, ok := r.leases.Lease(lease.Key{Type: "reports", Lane: 1}); ok {
				t.Errorf("lane 1 keeps lease %+v, want it free", l)
			}
			for _, name := range []string{metrics.JobsSucceeded, metrics.JobsRetried, metrics.JobsDeadLettered} {
				if strings.Contains(emf.String(), name) {
					t.Errorf("metrics = %s, want no %s: the first copy's release already counted the attempt", emf.String(), name)
				}
			}
			if n := len(r.sqs.Sent(dlqURL)); n != 0 {
				t.Errorf("dead letters = %d, want 0", n)
			}
			if len(r.sfn.Executions()) != 1 {
				t.Errorf("executions = %d, want the first copy's only", len(r.sfn.Executions()))
			}
		})
	}
}

// A bound lease's copy is queued, not in flight, until its first delivery: behind a lanes queue the
// starter has not caught up with (the scale benchmark's many-keys shape), it may wait past
// StaleAfter. Taken back then, the lane would be bound again and the new copy would queue behind the
// first in the lane's group. So the sweep takes a stale bound lease back only through the lane's
// group: it sends a probe there, and the starter frees the lane when the probe arrives with the
// lease still as the sweep saw it. A copy queued ahead of the probe claims its lane first and the
// probe changes nothing; a copy that never went leaves the lease to the probe, which frees the lane
// and wakes a parked group for it, so no lane is held for ever.
func TestStaleBoundLaneIsTakenBackOnlyBehindItsGroup(t *testing.T) {
	for _, copyQueued := range []bool{true, false} {
		t.Run(fmt.Sprintf("copy queued %v", copyQueued), func(t *testing.T) {
			ctx := context.Background()
			r := newRigStrategy(t, nil, lane.FirstFree) // reports=3
			r.leases.Set(boundLease("reports", 1, "r-1"))
			for ln := 2; ln <= 3; ln++ {
				id := fmt.Sprintf("busy-%d", ln)
				r.leases.Set(leaseOf("reports", ln, id, 1, lease.Starting, 1))
				r.sfn.Put(execution("reports", ln, id, 1, sfntypes.ExecutionStatusRunning, "", ""))
			}
			parked := waitroom.Waiter{Type: "reports", Group: job.WaitingGroupID("reports", 0), MessageID: "msg-w-9", ReceiptHandle: handle("w-9", 1),
				JobID: "w-9", SubmittedAt: t0, ParkedAt: t0}
			if err := r.room.Park(ctx, parked); err != nil {
				t.Fatal(err)
			}
			r.clock.Advance(2 * staleAfter)
			h := &releaser.Handler{Service: r.rel, Leases: r.leases, SweepMinAge: time.Minute, StaleAfter: staleAfter, Probes: r.sqs,
				Now: r.clock.Now, Log: fakes.Logger(t)}
			if _, err := h.Sweep(ctx); err != nil {
				t.Fatal(err)
			}
			lane1 := lease.Key{Type: "reports", Lane: 1}
			if l, ok := r.leases.Lease(lane1); !ok || l.Status != lease.Bound || l.JobID != "r-1" {
				t.Fatalf("lane 1 after the sweep = %+v (%v), want still bound to r-1: its copy may be queued", l, ok)
			}
			var probes []events.SQSMessage
			for _, m := range r.sqs.Sent(lanesURL) {
				if m.MessageGroupID == job.GroupID("reports", 1) {
					probes = append(probes, message(t, m.MessageGroupID, "probe", m.Body, 1))
				}
			}
			if len(probes) != 1 {
				t.Fatalf("sent to lane 1's group = %d messages, want the sweep's probe", len(probes))
			}
			if copyQueued {
				if _, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{jobMessage(t, "reports", 1, "r-1", 0, 1)}}); err != nil {
					t.Fatal(err)
				}
			}
			resp, err := r.st.Handle(ctx, events.SQSEvent{Records: probes})
			if err != nil || len(resp.BatchItemFailures) != 0 {
				t.Fatalf("Handle(probe) = %+v, %v; want the probe acknowledged", resp, err)
			}
			woken := false
			for _, v := range r.sqs.VisibilityChanges() {
				woken = woken || (v.ReceiptHandle == handle("w-9", 1) && v.Timeout == 0)
			}
			l, held := r.leases.Lease(lane1)
			switch {
			case copyQueued && (!held || l.Status != lease.Starting || l.JobID != "r-1" || woken):
				t.Errorf("lane 1 = %+v (%v), parked group woken %v; want r-1 started in its lane and nobody woken", l, held, woken)
			case !copyQueued && (held || !woken):
				t.Errorf("lane 1 = %+v (%v), parked group woken %v; want the lane taken back and the parked group woken for it", l, held, woken)
			}
			if n := len(r.sqs.Sent(dlqURL)); n != 0 {
				t.Errorf("dead letters = %d, want none: a probe is not a job", n)
			}
		})
	}
}
