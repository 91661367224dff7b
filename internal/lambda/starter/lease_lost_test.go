package starter_test

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"

	"github.com/sfnlimit/sfnlimit/internal/lambda/deadletter"
	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
	"github.com/sfnlimit/sfnlimit/internal/lambda/metrics"
	"github.com/sfnlimit/sfnlimit/internal/lambda/releaser"
	"github.com/sfnlimit/sfnlimit/internal/lambda/starter"
	"github.com/sfnlimit/sfnlimit/internal/tools/fakes"
)

// startedBy is an execution as the starter starts it for the lanes-queue message messageID.
func startedBy(t *testing.T, e fakes.Execution, messageID string) fakes.Execution {
	t.Helper()
	var in job.ExecutionInput
	if err := json.Unmarshal([]byte(e.Input), &in); err != nil {
		t.Fatal(err)
	}
	in.Job.MessageID = messageID
	e.Input = string(in.MustJSON())
	return e
}

// deliver hands the receive-th delivery of job r-1001 (reports, lane 1) to the starter and reports
// whether it was acknowledged (not a batch item failure).
func deliver(t *testing.T, r *rig, receive int) bool {
	t.Helper()
	resp, err := r.st.Handle(context.Background(), events.SQSEvent{Records: []events.SQSMessage{jobMessage(t, "reports", 1, "r-1001", 0, receive)}})
	if err != nil {
		t.Fatal(err)
	}
	r.clock.Advance(2 * retryDelay)
	return len(resp.BatchItemFailures) == 0
}

// An operator deletes a stuck lease, as docs/operations.md advises. The job's attempts are not lost with it:
// Step Functions keeps which message started each attempt, so the message's next deliveries go on
// from the last attempt's outcome instead of taking the job for a duplicate and dropping it.
func TestDeletedLeaseKeepsTheJobsAttempts(t *testing.T) {
	const self = "msg-r-1001" // the message id jobMessage gives job r-1001
	tests := []struct {
		name string
		// ended lists the statuses of the attempts that ran before the lease was deleted.
		ended []sfntypes.ExecutionStatus
		// by is the message that started them: this job's message, or a duplicate's.
		by            string
		wantNewStart  string // the execution the job goes on with ("" for none)
		wantDeadLeter string // the dead letter's reason ("" for none)
		wantAcked     bool
		// cancelled: the last attempt was stopped by a newer job of its key (the overflow rule cancel).
		cancelled bool
	}{
		{name: "first attempt failed: the second runs", ended: []sfntypes.ExecutionStatus{"FAILED"}, by: self,
			wantNewStart: execName("reports", "r-1001", 2)},
		{name: "two attempts failed: the third runs", ended: []sfntypes.ExecutionStatus{"FAILED", "TIMED_OUT"}, by: self,
			wantNewStart: execName("reports", "r-1001", 3)},
		{name: "last attempt failed: dead-lettered", ended: []sfntypes.ExecutionStatus{"FAILED", "FAILED", "FAILED"}, by: self,
			wantDeadLeter: deadletter.ReasonAttemptsExhausted, wantAcked: true},
		{name: "first attempt succeeded: done", ended: []sfntypes.ExecutionStatus{"SUCCEEDED"}, by: self, wantAcked: true},
		{name: "second attempt aborted: dead-lettered", ended: []sfntypes.ExecutionStatus{"FAILED", "ABORTED"}, by: self,
			wantDeadLeter: "aborted", wantAcked: true},
		{name: "second attempt cancelled by a newer job of its key: done, not dead-lettered", ended: []sfntypes.ExecutionStatus{"FAILED", "ABORTED"}, by: self,
			cancelled: true, wantAcked: true},
		{name: "a duplicate message ran the job: this copy is dropped", ended: []sfntypes.ExecutionStatus{"SUCCEEDED"}, by: "msg-another-copy",
			wantAcked: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, nil)
			for i, st := range tt.ended {
				errName, cause := "JobFailed", "boom"
				if tt.cancelled && i == len(tt.ended)-1 {
					errName, cause = job.ErrorCancelled, job.CancelCause("r-1002")
				}
				r.sfn.Put(startedBy(t, execution("reports", 1, "r-1001", i+1, st, errName, cause), tt.by))
			}
			before := len(r.sfn.Executions())
			acked := false
			for receive := 2; receive < 2+len(tt.ended)+1 && !acked; receive++ {
				acked = deliver(t, r, receive)
			}
			if acked != tt.wantAcked {
				t.Errorf("message acknowledged = %v, want %v", acked, tt.wantAcked)
			}
			var started []string
			for _, e := range r.sfn.Executions() {
				if e.Status == sfntypes.ExecutionStatusRunning {
					started = append(started, e.Name)
				}
			}
			switch {
			case tt.wantNewStart == "" && len(r.sfn.Executions()) != before:
				t.Errorf("executions %d -> %d, want no new one", before, len(r.sfn.Executions()))
			case tt.wantNewStart != "" && !equal(started, []string{tt.wantNewStart}):
				t.Errorf("running executions = %q, want [%s]", started, tt.wantNewStart)
			}
			dead := r.sqs.Sent(dlqURL)
			switch {
			case tt.wantDeadLeter == "" && len(dead) != 0:
				t.Errorf("dead letters = %+v, want none", dead)
			case tt.wantDeadLeter != "" && (len(dead) != 1 || dead[0].Attributes["reason"] != tt.wantDeadLeter):
				t.Errorf("dead letters = %+v, want one with reason %s", dead, tt.wantDeadLeter)
			case tt.wantDeadLeter != "":
				var sub job.Submission
				if err := json.Unmarshal([]byte(dead[0].Body), &sub); err != nil || string(sub.Input) != `{"seconds":3}` {
					t.Errorf("dead letter body %s lost the job's input", dead[0].Body)
				}
			}
			if tt.wantAcked {
				if l, ok := r.leases.Lease(reports1); ok {
					t.Errorf("job ended, yet its lane keeps lease %+v", l)
				}
			}
		})
	}
}

// A dead-lettering lease written without an execution ARN (the last attempt's release came while
// the claim was unconfirmed) whose release died: the message's next delivery finishes the dead
// letter, with the job's input, instead of failing to describe an execution with no ARN forever.
func TestDeadLetteringLeaseWithoutArnIsFinished(t *testing.T) {
	r := newRig(t, nil)
	for a := 1; a <= 3; a++ {
		r.sfn.Put(execution("reports", 1, "r-1001", a, sfntypes.ExecutionStatusFailed, "JobFailed", "boom"))
	}
	l := leaseOf("reports", 1, "r-1001", 3, lease.DeadLettering, 3)
	l.ExecutionArn = ""
	r.leases.Set(l) // last changed 20 minutes ago: its release is long gone
	if acked := deliver(t, r, 4); !acked {
		t.Errorf("message held, want it acknowledged after the dead letter")
	}
	dead := r.sqs.Sent(dlqURL)
	if len(dead) != 1 {
		t.Fatalf("dead letters = %d, want 1", len(dead))
	}
	if want := `{"type":"reports","id":"r-1001","input":{"seconds":3},"redrive":1}`; dead[0].Body != want {
		t.Errorf("dead letter body = %s, want %s", dead[0].Body, want)
	}
	if l, ok := r.leases.Lease(reports1); ok {
		t.Errorf("lane keeps lease %+v, want it free", l)
	}
}

// DescribeExecution is eventually consistent: right after an ambiguous start it may not find the
// execution. A lane above a lowered limit whose claim is that recent is not moved (the job may be
// running); once the claim is older than starter.DescribeSettle and still no execution exists, the
// job moves without having used an attempt.
func TestUnconfirmedStartIsNotMovedWhileDescribeMayLag(t *testing.T) {
	r := newRig(t, nil) // reports=3
	l := leaseOf("reports", 7, "r-1001", 1, lease.Starting, 1)
	l.UpdatedAt = t0.Add(-5 * time.Second)
	l.StateMachineArn = smArn
	r.leases.Set(l)
	ctx := context.Background()
	msg := func(receive int) events.SQSEvent {
		return events.SQSEvent{Records: []events.SQSMessage{jobMessage(t, "reports", 7, "r-1001", 0, receive)}}
	}
	resp, _ := r.st.Handle(ctx, msg(2))
	if len(resp.BatchItemFailures) != 1 || len(r.sqs.Sent(lanesURL)) != 0 {
		t.Fatalf("claim 5 s old, execution not found: held %d, moved %d; want held and not moved",
			len(resp.BatchItemFailures), len(r.sqs.Sent(lanesURL)))
	}
	r.clock.Advance(starter.DescribeSettle)
	r.st.Handle(ctx, msg(3))
	moved := r.sqs.Sent(lanesURL)
	if len(moved) != 1 {
		t.Fatalf("claim older than DescribeSettle, no execution: moved %d, want 1", len(moved))
	}
	var j job.Job
	if err := json.Unmarshal([]byte(moved[0].Body), &j); err != nil {
		t.Fatal(err)
	}
	if j.Attempts != 0 {
		t.Errorf("moved job carries %d attempts, want 0: its unconfirmed start never ran", j.Attempts)
	}
}

// A start retried after an ambiguous error goes to the state machine the claim named, even when the
// type's config has since moved to another: one attempt, one execution.
func TestRetriedStartKeepsTheClaimsStateMachine(t *testing.T) {
	r := newRig(t, nil)
	const before = "arn:aws:states:us-east-1:123456789012:stateMachine:reports-v1"
	l := leaseOf("reports", 1, "r-1001", 1, lease.Starting, 1)
	l.StateMachineArn = before
	r.leases.Set(l)
	deliver(t, r, 2)
	starts := r.sfn.Starts()
	if len(starts) != 1 || starts[0].StateMachineArn != before {
		t.Errorf("starts = %+v, want one on %s (the claim's), not the config's %s", starts, before, smArn)
	}
}

// Lambda's event source may hand a batch to the starter twice. A copy that arrives after the job's
// release deleted its message (or after the message was received again) must not act on the ended
// attempt: that would count the outcome twice, or, for a failure, write a retrying lease for a message
// that no longer exists and hold the lane for good.
func TestStaleDeliveryDoesNotActOnAnEndedAttempt(t *testing.T) {
	for _, st := range []sfntypes.ExecutionStatus{"SUCCEEDED", "FAILED", "ABORTED"} {
		t.Run(string(st), func(t *testing.T) {
			r := newRig(t, nil)
			r.sfn.Put(startedBy(t, execution("reports", 1, "r-1001", 1, st, "JobFailed", "boom"), "msg-r-1001"))
			// The message is gone: SQS refuses its receipt handle.
			r.sqs.OnChangeVisibility = func(in *sqs.ChangeMessageVisibilityInput) error {
				return &smithy.GenericAPIError{Code: "ReceiptHandleIsInvalid", Message: "The input receipt handle is invalid.", Fault: smithy.FaultClient}
			}
			before := len(r.sfn.Executions())
			// Held, not acknowledged: SQS's refusal cannot tell a deleted message from one whose
			// visibility ran out (TestDeliveryWhoseMessageWentVisibleIsNotAcknowledged).
			if acked := deliver(t, r, 1); acked {
				t.Errorf("stale delivery acknowledged, want it held")
			}
			if l, ok := r.leases.Lease(reports1); ok {
				t.Errorf("stale delivery left lease %+v, want the lane free", l)
			}
			if n := len(r.sfn.Executions()); n != before {
				t.Errorf("executions %d -> %d, want none started", before, n)
			}
			if dead := r.sqs.Sent(dlqURL); len(dead) != 0 {
				t.Errorf("dead letters = %+v, want none (the job's release already did its part)", dead)
			}
			if d := r.sqs.Deletes(); len(d) != 0 {
				t.Errorf("DeleteMessage calls = %+v, want none", d)
			}
		})
	}
}

// The same stale delivery when DescribeExecution also lags (it is eventually consistent): the claim
// the delivery wrote must not stay behind for a message that no longer exists, holding the lane
// until the sweep (which would then count the job's success a second time).
func TestStaleDeliveryLeavesNoClaimWhenDescribeLags(t *testing.T) {
	r := newRig(t, nil)
	r.sfn.Put(startedBy(t, execution("reports", 1, "r-1001", 1, "SUCCEEDED", "", ""), "msg-r-1001"))
	r.sqs.OnChangeVisibility = func(*sqs.ChangeMessageVisibilityInput) error {
		return &smithy.GenericAPIError{Code: "ReceiptHandleIsInvalid", Message: "The input receipt handle is invalid.", Fault: smithy.FaultClient}
	}
	r.sfn.OnDescribe = func(arn string) error {
		return &sfntypes.ExecutionDoesNotExist{Message: aws.String("Execution Does Not Exist: '" + arn + "'")}
	}
	deliver(t, r, 1)
	if l, ok := r.leases.Lease(reports1); ok {
		t.Errorf("stale delivery left lease %+v, want the lane free", l)
	}
}

// SQS answers MessageNotInflight also for a message that is not gone: its visibility timeout ran out
// during this invocation (FifoVisibilityTimeout may be as short as the starter's timeout), and no
// receive has taken it again. Such a delivery must not be acknowledged: Lambda's event source would
// delete the message with its receipt handle, still the latest, and the failed attempt would be
// neither retried nor dead-lettered. Held, the message is received again and goes on.
func TestDeliveryWhoseMessageWentVisibleIsNotAcknowledged(t *testing.T) {
	r := newRig(t, nil)
	r.sfn.Put(startedBy(t, execution("reports", 1, "r-1001", 1, "FAILED", "JobFailed", "boom"), "msg-r-1001"))
	r.leases.Set(leaseOf("reports", 1, "r-1001", 1, lease.Starting, 1))
	// Receive 2's handle is the message's latest, but the message is visible again, not in flight.
	r.sqs.OnChangeVisibility = func(in *sqs.ChangeMessageVisibilityInput) error {
		if aws.ToString(in.ReceiptHandle) == handle("r-1001", 2) {
			return &smithy.GenericAPIError{Code: "AWS.SimpleQueueService.MessageNotInflight", Message: "The message referred to isn't in flight.", Fault: smithy.FaultClient}
		}
		return nil
	}
	if acked := deliver(t, r, 2); acked {
		t.Fatalf("delivery acknowledged: the event source would delete a message whose failed attempt was never acted on")
	}
	if dead := r.sqs.Sent(dlqURL); len(dead) != 0 {
		t.Errorf("dead letters = %+v, want none yet", dead)
	}
	// The message's next receive goes on from the failed attempt: it is retried.
	if acked := deliver(t, r, 3); acked {
		t.Errorf("receive 3 acknowledged, want it held for its retry")
	}
	l, ok := r.leases.Lease(reports1)
	if !ok || l.Status != lease.Retrying || l.Attempt != 1 {
		t.Errorf("lease after receive 3 = %+v (found %v), want attempt 1 retrying", l, ok)
	}
}

// A stale delivery whose start Step Functions answers with the running execution itself (same name
// and input while it runs: the release deleted the message while the execution was finishing) must
// not claim the lane for it: the lane would stay held until the sweep.
func TestStaleDeliveryDoesNotClaimAFinishingExecution(t *testing.T) {
	r := newRig(t, nil)
	e := execution("reports", 1, "r-1001", 1, sfntypes.ExecutionStatusRunning, "", "")
	e.StartDate = t0.Add(-time.Minute)
	r.sfn.Put(startedBy(t, e, "msg-r-1001"))
	r.sqs.OnChangeVisibility = func(*sqs.ChangeMessageVisibilityInput) error {
		return &smithy.GenericAPIError{Code: "ReceiptHandleIsInvalid", Message: "The input receipt handle is invalid.", Fault: smithy.FaultClient}
	}
	deliver(t, r, 1)
	if l, ok := r.leases.Lease(reports1); ok {
		t.Errorf("stale delivery claimed the lane: lease %+v, want it free", l)
	}
	if n := len(r.sfn.Executions()); n != 1 {
		t.Errorf("executions = %d, want the one that runs", n)
	}
}

// A late copy of an earlier delivery of a running job's message (Lambda may hand a batch over twice)
// must not put its receipt handle back in the lease: SQS honours only the latest, and the release's
// DeleteMessage with an older one succeeds without deleting, so the message would hold its lane for a
// whole visibility timeout after the job ended.
func TestLateCopyKeepsTheNewerReceiptHandle(t *testing.T) {
	r := newRig(t, nil)
	r.sfn.Put(execution("reports", 1, "r-1001", 1, sfntypes.ExecutionStatusRunning, "", ""))
	l := leaseOf("reports", 1, "r-1001", 1, lease.Starting, 3)
	l.Receives = 3
	r.leases.Set(l)
	if acked := deliver(t, r, 2); acked {
		t.Errorf("late copy acknowledged, want it held")
	}
	got, _ := r.leases.Lease(reports1)
	if got.ReceiptHandle != handle("r-1001", 3) {
		t.Errorf("lease receipt handle = %s, want the third receive's %s", got.ReceiptHandle, handle("r-1001", 3))
	}
}

// The same for a claim still unconfirmed, or a job between attempts: a late copy of an earlier
// delivery leaves the lease (and its newer receipt handle) alone and starts nothing.
func TestLateCopyLeavesAnyLeaseAlone(t *testing.T) {
	for _, st := range []lease.Status{lease.Starting, lease.Retrying} {
		t.Run(string(st), func(t *testing.T) {
			r := newRig(t, nil)
			l := leaseOf("reports", 1, "r-1001", 1, st, 3)
			l.Receives = 3
			r.leases.Set(l)
			deliver(t, r, 2)
			got, _ := r.leases.Lease(reports1)
			if got.ReceiptHandle != handle("r-1001", 3) || got.Status != st {
				t.Errorf("lease = %s with handle %s, want %s with the third receive's", got.Status, got.ReceiptHandle, st)
			}
			if n := len(r.sfn.Starts()); n != 0 {
				t.Errorf("StartExecution calls = %d, want none from a late copy", n)
			}
		})
	}
}

// A claim whose start was never confirmed may be running: lowering the limit must not move it and
// start it a second time in another lane.
func TestUnconfirmedStartIsNotMoved(t *testing.T) {
	r := newRig(t, nil) // reports=3
	r.leases.Set(leaseOf("reports", 7, "r-1001", 1, lease.Starting, 1))
	r.sfn.Put(execution("reports", 7, "r-1001", 1, sfntypes.ExecutionStatusRunning, "", ""))
	ctx := context.Background()
	resp, _ := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{jobMessage(t, "reports", 7, "r-1001", 0, 2)}})
	if len(resp.BatchItemFailures) != 1 {
		t.Errorf("running unconfirmed job: batch item failures = %d, want 1 (held)", len(resp.BatchItemFailures))
	}
	if n := len(r.sqs.Sent(lanesURL)); n != 0 {
		t.Errorf("running unconfirmed job was moved: %d messages sent to the lanes queue, want 0", n)
	}
	if l, ok := r.leases.Lease(lease.Key{Type: "reports", Lane: 7}); !ok || l.Status != lease.Starting {
		t.Errorf("lease = %+v (found %v), want running", l, ok)
	}
}

// queued is a lanes-queue message a test delivers: its group, id, body and how often it was received.
type queued struct {
	group, id, body string
	receive         int
}

// drain delivers the queue's messages one at a time, as a FIFO lane would, for at most rounds
// deliveries: a held message comes back (its next receive), an acknowledged one goes, and what the
// starter sends to the lanes queue (a moved job's copy) joins the queue with a message id of its own.
func drain(t *testing.T, r *rig, q []queued, rounds int) {
	t.Helper()
	sent := len(r.sqs.Sent(lanesURL))
	for i := 0; i < rounds && len(q) > 0; i++ {
		x := q[0]
		var j job.Job
		if err := json.Unmarshal([]byte(x.body), &j); err != nil {
			t.Fatal(err)
		}
		m := message(t, x.group, j.ID, x.body, x.receive)
		m.MessageId = x.id
		resp, err := r.st.Handle(context.Background(), events.SQSEvent{Records: []events.SQSMessage{m}})
		if err != nil {
			t.Fatal(err)
		}
		r.clock.Advance(2 * retryDelay)
		q = q[1:]
		if len(resp.BatchItemFailures) > 0 {
			x.receive++
			q = append(q, x)
		}
		for _, s := range r.sqs.Sent(lanesURL)[sent:] {
			sent++
			q = append(q, queued{group: s.MessageGroupID, id: "copy-" + strconv.Itoa(sent), body: s.Body, receive: 1})
		}
	}
}

// An operator deletes a lane's lease (docs/operations.md's advice for a stuck lane), and the type's limit
// is lowered below that lane before the job's message comes back. The message's attempts are in
// Step Functions, started by that message in that lane: the job goes on from them. Moving it with
// the attempt count its body carries (0) made the copy start attempt 1 again, find it taken by
// another message in another lane, and drop itself as a duplicate: a failed job was neither retried
// nor dead-lettered, and a running one lost its message.
func TestDeletedLeaseAboveLoweredLimitKeepsTheJobsAttempts(t *testing.T) {
	const self = "msg-r-1001"
	tests := []struct {
		name        string
		ran         []sfntypes.ExecutionStatus // attempts started by the message in lane 7
		wantRunning string                     // the execution running at the end ("" for none)
		wantLane    int                        // the lane whose lease holds it (0: any within the limit, 1-3)
		wantDead    string                     // the dead letter's reason ("" for none)
	}{
		{name: "attempt 1 failed: attempt 2 runs within the limit", ran: []sfntypes.ExecutionStatus{"FAILED"},
			wantRunning: execName("reports", "r-1001", 2)},
		{name: "attempts 1 and 2 failed: attempt 3 runs within the limit", ran: []sfntypes.ExecutionStatus{"FAILED", "FAILED"},
			wantRunning: execName("reports", "r-1001", 3)},
		{name: "every attempt failed: dead-lettered", ran: []sfntypes.ExecutionStatus{"FAILED", "FAILED", "FAILED"},
			wantDead: deadletter.ReasonAttemptsExhausted},
		{name: "attempt 1 still running: it keeps its lane and message", ran: []sfntypes.ExecutionStatus{"RUNNING"},
			wantRunning: execName("reports", "r-1001", 1), wantLane: 7},
		{name: "attempt 1 succeeded: done", ran: []sfntypes.ExecutionStatus{"SUCCEEDED"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, nil) // reports=3
			for i, st := range tt.ran {
				r.sfn.Put(startedBy(t, execution("reports", 7, "r-1001", i+1, st, "JobFailed", "boom"), self))
			}
			drain(t, r, []queued{{group: "reports-7", id: self, body: jobBody("reports", "r-1001", 0), receive: 2}}, 12)
			var running []string
			for _, e := range r.sfn.Executions() {
				if e.Status == sfntypes.ExecutionStatusRunning {
					running = append(running, e.Name)
				}
			}
			var want []string
			if tt.wantRunning != "" {
				want = []string{tt.wantRunning}
			}
			if !equal(running, want) {
				t.Errorf("running executions = %q, want %q", running, want)
			}
			dead := r.sqs.Sent(dlqURL)
			switch {
			case tt.wantDead == "" && len(dead) != 0:
				t.Errorf("dead letters = %+v, want none", dead)
			case tt.wantDead != "" && (len(dead) != 1 || dead[0].Attributes[deadletter.AttrReason] != tt.wantDead):
				t.Errorf("dead letters = %+v, want one with reason %s", dead, tt.wantDead)
			}
			// A running attempt is held by a lease naming it (its release and the sweep find it through
			// the lease); an ended job leaves no lease.
			ls := r.leases.Leases()
			inLane := func(l lease.Lease) bool {
				if tt.wantLane == 0 {
					return l.Lane >= 1 && l.Lane <= 3
				}
				return l.Lane == tt.wantLane
			}
			switch {
			case tt.wantRunning == "" && len(ls) != 0:
				t.Errorf("job ended, yet its lanes keep leases %+v", ls)
			case tt.wantRunning != "" && (len(ls) != 1 || !holdsRunning(ls[0]) || !inLane(ls[0]) || ls[0].ExecutionArn != fakes.ExecutionArn(smArn, tt.wantRunning)):
				t.Errorf("leases = %+v, want one lease (starting or running) of %s in lane %d", ls, tt.wantRunning, tt.wantLane)
			}
		})
	}
}

// A lowered limit moves every job queued above it; a message received for the first time has made
// no attempt, so its move costs no DescribeExecution (Step Functions' quota is shared).
func TestFirstReceiveMovesWithoutLookingForAttempts(t *testing.T) {
	r := newRig(t, nil) // reports=3
	drain(t, r, []queued{{group: "reports-7", id: "msg-r-1001", body: jobBody("reports", "r-1001", 0), receive: 1}}, 1)
	if n := len(r.sqs.Sent(lanesURL)); n != 1 {
		t.Fatalf("copies sent = %d, want 1 (moved)", n)
	}
	if d := r.sfn.Describes(); len(d) != 0 {
		t.Errorf("describes = %q, want none", d)
	}
}

// The type's maxAttempts was lowered (5 -> 3) while attempt 4 of a job ran, and the operator then
// deleted the job's lease. Walking the message's attempts from the first, the starter found attempt 3
// exhausted and dead-lettered the job, deleted its message and freed the lane, while attempt 4 still
// ran with no lease: the lane took another job beside it, and attempt 4's outcome went nowhere. The
// last attempt the message started decides, in its own lane and in one above a lowered limit.
func TestDeletedLeaseGoesOnFromTheLastAttempt(t *testing.T) {
	const self = "msg-r-1001"
	for _, ln := range []int{1, 7} { // reports=3: lane 7 is above the limit
		t.Run("lane "+strconv.Itoa(ln), func(t *testing.T) {
			r := newRig(t, nil) // reports: maxAttempts 3
			for a, st := range []sfntypes.ExecutionStatus{"FAILED", "FAILED", "FAILED", "RUNNING"} {
				r.sfn.Put(startedBy(t, execution("reports", ln, "r-1001", a+1, st, "JobFailed", "boom"), self))
			}
			drain(t, r, []queued{{group: job.GroupID("reports", ln), id: self, body: jobBody("reports", "r-1001", 0), receive: 2}}, 8)
			if dead := r.sqs.Sent(dlqURL); len(dead) != 0 {
				t.Errorf("dead letters = %d while attempt 4 runs, want none", len(dead))
			}
			if n := len(r.sqs.Sent(lanesURL)); n != 0 {
				t.Errorf("copies sent = %d while attempt 4 runs, want none", n)
			}
			l, ok := r.leases.Lease(lease.Key{Type: "reports", Lane: ln})
			if !ok || l.Status != lease.Starting || l.Attempt != 4 || l.ExecutionArn != execArn("reports", "r-1001", 4) {
				t.Errorf("lease = %+v (held %v), want attempt 4 running", l, ok)
			}
			// When attempt 4 ends in failure, the job is dead-lettered (4 >= 3), once.
			r.sfn.Close(execArn("reports", "r-1001", 4), sfntypes.ExecutionStatusFailed, "JobFailed", "boom")
			drain(t, r, []queued{{group: job.GroupID("reports", ln), id: self, body: jobBody("reports", "r-1001", 0), receive: 20}}, 4)
			if dead := r.sqs.Sent(dlqURL); len(dead) != 1 || dead[0].Attributes[deadletter.AttrAttempt] != "4" {
				t.Errorf("dead letters = %+v, want one, of attempt 4", dead)
			}
			if ls := r.leases.Leases(); len(ls) != 0 {
				t.Errorf("leases = %+v, want none", ls)
			}
		})
	}
}

// A stale copy of a delivery (Lambda handed its batch over twice, and the other copy was
// acknowledged) finds the job's lease dead-lettering: a release is sending its one dead letter, or
// stopped before it did and the sweep takes it over. The stale copy must leave that lease alone:
// it is the only record that the job still owes a dead letter (found by the simulation, seed 1438
// of duplicate+kill: the job was never dead-lettered).
func TestStaleDeliveryLeavesADeadLetteringLease(t *testing.T) {
	r := newRig(t, nil)
	for a := 1; a <= 3; a++ {
		r.sfn.Put(startedBy(t, execution("reports", 1, "r-1001", a, sfntypes.ExecutionStatusFailed, "JobFailed", "boom"), "msg-r-1001"))
	}
	r.leases.Set(leaseOf("reports", 1, "r-1001", 3, lease.DeadLettering, 3))
	r.sqs.OnChangeVisibility = func(in *sqs.ChangeMessageVisibilityInput) error {
		return &smithy.GenericAPIError{Code: "ReceiptHandleIsInvalid", Message: "The input receipt handle is invalid.", Fault: smithy.FaultClient}
	}
	if acked := deliver(t, r, 3); acked {
		t.Errorf("stale delivery acknowledged, want it held")
	}
	if l, ok := r.leases.Lease(reports1); !ok || l.Status != lease.DeadLettering {
		t.Errorf("lane after the stale delivery = %+v (held %v), want the dead-lettering lease kept for its dead letter", l, ok)
	}
}

// A release deletes the job's message with the receipt handle its lease holds, counts the success
// and frees the lease. When the message was received again meanwhile by a delivery that failed
// before it stored its new handle, SQS answers that delete with OK and keeps the message (a stale
// handle). The message's next delivery finds the attempt ended with no lease, and finishes it: the
// message goes, and the job is not counted as succeeded a second time, even when that delivery
// fails after claiming the attempt and a later one finishes it from the claim.
func TestEndedAttemptWithoutItsLeaseIsNotCountedTwice(t *testing.T) {
	stops := map[string]func(r *rig){
		"finishing delivery goes through": nil,
		"it stops at its DeleteMessage": func(r *rig) {
			r.sqs.OnDelete = func(*sqs.DeleteMessageInput) error {
				r.sqs.OnDelete = nil
				return fakes.APIError("InternalError", "the delivery stops after its claim")
			}
		},
		"it stops at the look-up after its start": func(r *rig) {
			looks := 0
			r.sfn.OnDescribe = func(string) error {
				if looks++; looks == 2 { // the first is before its claim
					return fakes.APIError("ThrottlingException", "Rate exceeded")
				}
				return nil
			}
		},
	}
	for name, stop := range stops {
		t.Run(name, func(t *testing.T) {
			failsOnce := stop != nil
			r := newRig(t, nil)
			published := metrics.NewCollector()
			r.rel.Metrics = metrics.New(published, "test")
			if deliver(t, r, 1) { // the first delivery starts the job and holds its lane
				t.Fatal("first delivery acknowledged; want it held")
			}
			arn := execArn("reports", "r-1001", 1)
			if !r.sfn.Close(arn, sfntypes.ExecutionStatusSucceeded, "", "") {
				t.Fatalf("no execution %s", arn)
			}
			res, err := r.rel.Release(context.Background(), releaser.Request{Key: reports1, JobID: "r-1001", Attempt: 1, Outcome: releaser.Succeeded, Source: "workflow"})
			if err != nil || res != releaser.Deleted {
				t.Fatalf("release = %v, %v; want deleted", res, err)
			}
			if failsOnce {
				stop(r)
				if deliver(t, r, 3) {
					t.Fatal("a delivery whose DeleteMessage failed was acknowledged")
				}
			}
			if !deliver(t, r, 4) { // the message's next delivery (its second failed before storing its handle)
				t.Error("the ended job's message was not acknowledged")
			}
			if err := r.rel.Metrics.Flush(); err != nil {
				t.Fatal(err)
			}
			if got := published.Sum("", metrics.JobsSucceeded); got != 1 {
				t.Errorf("JobsSucceeded = %v, want 1 (one job succeeded once)", got)
			}
			if n := len(r.sfn.Executions()); n != 1 {
				t.Errorf("%d executions, want 1", n)
			}
			if l, ok := r.leases.Lease(reports1); ok {
				t.Errorf("job ended, yet its lane keeps lease %+v", l)
			}
		})
	}
}

// An operator deletes the lease of a RUNNING job (docs/operations.md's advice for a stuck lane),
// and the type's limit is lowered below its lane before its message comes back. The claim that
// takes the attempt back (ownAttempt) holds it in its lane and its release frees the lane. It is
// marked Reclaimed: a lease gone under a running attempt is most often one a workflow's release
// step freed before its execution ended, which counted it
// (TestAttemptReleasedAroundItsRedeliveryIsNotCountedTwice), and the two cannot be told apart,
// so this success goes uncounted rather than another be counted twice (docs/operations.md).
func TestRunningAttemptTakenBackAboveALoweredLimitIsReleasedOnce(t *testing.T) {
	const self = "msg-r-1001"
	r := newRig(t, nil) // reports=3
	published := metrics.NewCollector()
	r.rel.Metrics = metrics.New(published, "test")
	r.sfn.Put(startedBy(t, execution("reports", 7, "r-1001", 1, sfntypes.ExecutionStatusRunning, "", ""), self))
	drain(t, r, []queued{{group: "reports-7", id: self, body: jobBody("reports", "r-1001", 0), receive: 2}}, 4)
	key := lease.Key{Type: "reports", Lane: 7}
	l, ok := r.leases.Lease(key)
	if !ok {
		t.Fatalf("no lease holds the running attempt in lane 7: %+v", r.leases.Leases())
	}
	if !l.Reclaimed {
		t.Errorf("the running attempt's claim is not marked Reclaimed (%+v): the release that freed its lease may have counted it", l)
	}
	arn := execArn("reports", "r-1001", 1)
	if !r.sfn.Close(arn, sfntypes.ExecutionStatusSucceeded, "", "") {
		t.Fatalf("no execution %s", arn)
	}
	res, err := r.rel.Release(context.Background(), releaser.Request{Key: key, JobID: "r-1001", Attempt: 1, Outcome: releaser.Succeeded, Source: "workflow", ExecutionArn: arn, MessageID: self})
	if err != nil || res != releaser.Deleted {
		t.Fatalf("release = %v, %v; want deleted", res, err)
	}
	if err := r.rel.Metrics.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := published.Sum("", metrics.JobsSucceeded); got != 0 {
		t.Errorf("JobsSucceeded = %v, want 0 (a reclaimed attempt's end is not counted)", got)
	}
	if l, ok := r.leases.Lease(key); ok {
		t.Errorf("job ended, yet its lane keeps lease %+v", l)
	}
}

// An operator deletes the lease of a job whose attempt 2 runs (attempt 1 failed), as
// docs/operations.md advises for a stuck lane. The message's next delivery finds attempt 1 ended
// (a reclaim: leaseless) and goes on from the last of its attempts, attempt 2, still running, which
// its release then frees. Its claim is marked Reclaimed, as any attempt found running with no lease
// (TestRunningAttemptTakenBackAboveALoweredLimitIsReleasedOnce says why): its success goes
// uncounted rather than risk counting another twice.
func TestRunningLaterAttemptOfALeaselessMessageIsReleasedOnce(t *testing.T) {
	const self = "msg-r-1001"
	r := newRig(t, nil) // reports=3
	published := metrics.NewCollector()
	r.rel.Metrics = metrics.New(published, "test")
	r.sfn.Put(startedBy(t, execution("reports", 1, "r-1001", 1, sfntypes.ExecutionStatusFailed, "JobFailed", "boom"), self))
	r.sfn.Put(startedBy(t, execution("reports", 1, "r-1001", 2, sfntypes.ExecutionStatusRunning, "", ""), self))
	drain(t, r, []queued{{group: "reports-1", id: self, body: jobBody("reports", "r-1001", 0), receive: 2}}, 4)
	l, ok := r.leases.Lease(reports1)
	if !ok || l.Attempt != 2 {
		t.Fatalf("lane 1 = %+v (held %v), want attempt 2's claim", l, ok)
	}
	if !l.Reclaimed {
		t.Errorf("the running attempt's claim is not marked Reclaimed (%+v): the release that freed its lease may have counted it", l)
	}
	arn := execArn("reports", "r-1001", 2)
	if !r.sfn.Close(arn, sfntypes.ExecutionStatusSucceeded, "", "") {
		t.Fatalf("no execution %s", arn)
	}
	res, err := r.rel.Release(context.Background(), releaser.Request{Key: reports1, JobID: "r-1001", Attempt: 2, Outcome: releaser.Succeeded, Source: "workflow", ExecutionArn: arn, MessageID: self})
	if err != nil || res != releaser.Deleted {
		t.Fatalf("release = %v, %v; want deleted", res, err)
	}
	if err := r.rel.Metrics.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := published.Sum("", metrics.JobsSucceeded); got != 0 {
		t.Errorf("JobsSucceeded = %v, want 0 (a reclaimed attempt's end is not counted)", got)
	}
	if l, ok := r.leases.Lease(reports1); ok {
		t.Errorf("job ended, yet its lane keeps lease %+v", l)
	}
}

// The dead-letter twin of TestEndedAttemptWithoutItsLeaseIsNotCountedTwice: a release dead-letters
// the job (its execution aborted) and deletes its message with a receipt handle a later receive
// had replaced (SQS answers OK and keeps the message), then frees the lease. The message's next
// delivery finds the attempt ended with no lease (a reclaim: the claim is Reclaimed) and releases
// it again. Its dead letter is sent again, the same (dead letters are at least once: had the lease
// been deleted by hand, this would be the job's only one, and a redrive of the two runs the job's
// next generation once), but JobsDeadLettered counts the job once, as its success would be.
func TestEndedAttemptWithoutItsLeaseIsNotDeadLetteredTwice(t *testing.T) {
	r := newRig(t, nil)
	published := metrics.NewCollector()
	r.rel.Metrics = metrics.New(published, "test")
	if deliver(t, r, 1) {
		t.Fatal("first delivery acknowledged; want it held")
	}
	arn := execArn("reports", "r-1001", 1)
	if !r.sfn.Close(arn, sfntypes.ExecutionStatusAborted, "", "") {
		t.Fatalf("no execution %s", arn)
	}
	res, err := r.rel.Release(context.Background(), releaser.Request{Key: reports1, JobID: "r-1001", Attempt: 1, Outcome: releaser.Aborted, Source: "workflow"})
	if err != nil || res != releaser.DeadLettered {
		t.Fatalf("release = %v, %v; want dead-lettered", res, err)
	}
	if !deliver(t, r, 3) {
		t.Error("the ended job's message was not acknowledged")
	}
	if err := r.rel.Metrics.Flush(); err != nil {
		t.Fatal(err)
	}
	if dead := r.sqs.Sent(dlqURL); len(dead) < 1 || len(dead) > 2 || dead[0].Body != dead[len(dead)-1].Body {
		t.Errorf("dead letters = %+v, want the job's one, or it and the same again", dead)
	}
	if got := published.Sum("", metrics.JobsDeadLettered); got != 1 {
		t.Errorf("JobsDeadLettered = %v, want 1", got)
	}
}

// A job's workflow runs its release step before it ends: the release counts the success and frees
// the lease while the execution is still RUNNING. When the job's message came back meanwhile (its
// claim outlived the visibility timeout, or its start's answer was lost), that release deleted it
// with the receipt handle its lease held, gone stale (SQS answers OK and keeps the message). Either
// the new delivery read the claim just before and finds the lane free when it writes its own
// (under), or it finds no lease and its own attempt running (before its first look). It goes on
// from the attempt it finds running, but claims it reclaimed: its release counted it (a lease with
// no release behind it is one deleted by hand, whose count alone may be lost), so the release that
// frees the lane again (the sweep, once the execution has closed) counts nothing (seed 212 of the
// simulation's all+pools: 88 successes published for 87).
func TestAttemptReleasedAroundItsRedeliveryIsNotCountedTwice(t *testing.T) {
	type rigCase struct {
		name, typ, id string
		rig           func(t *testing.T) *rig
	}
	rigs := []rigCase{
		{name: "its own lane", typ: "reports", id: "r-1001", rig: func(t *testing.T) *rig { return newRig(t, nil) }},
		{name: "a pooled type (ownAttempt)", typ: "a", id: "a-1", rig: func(t *testing.T) *rig { r, _ := newPoolRig(t); return r }},
	}
	for _, under := range []bool{true, false} {
		for _, tt := range rigs {
			when := "before its redelivery looks"
			if under {
				when = "under its redelivery"
			}
			t.Run(when+"/"+tt.name, func(t *testing.T) {
				ctx := context.Background()
				r := tt.rig(t)
				published := metrics.NewCollector()
				r.rel.Metrics = metrics.New(published, "test")
				self := "msg-" + tt.id
				key := lease.Key{Type: tt.typ, Lane: 1}
				arn := execArn(tt.typ, tt.id, 1)
				e := startedBy(t, execution(tt.typ, 1, tt.id, 1, sfntypes.ExecutionStatusRunning, "", ""), self)
				e.StartDate = t0.Add(-20 * time.Minute)
				r.sfn.Put(e)
				r.leases.Set(leaseOf(tt.typ, 1, tt.id, 1, lease.Starting, 1))
				release := func() {
					res, err := r.rel.Release(ctx, releaser.Request{Key: key, JobID: tt.id, Attempt: 1, Outcome: releaser.Succeeded, Source: "workflow", ExecutionArn: arn, MessageID: self})
					if err != nil || res != releaser.Deleted {
						t.Errorf("workflow's release = %v, %v; want deleted", res, err)
					}
				}
				released := false
				if under {
					r.leases.BeforePut = func(next lease.Lease, prev *lease.Lease) error {
						if released || prev == nil || next.Type != tt.typ {
							return nil
						}
						released = true // the workflow's release step, between the delivery's read and its claim
						release()
						return nil
					}
				} else {
					release()
				}
				if _, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{jobMessage(t, tt.typ, 1, tt.id, 0, 2)}}); err != nil {
					t.Fatal(err)
				}
				if under && !released {
					t.Fatal("the delivery wrote no claim over the lease it read")
				}
				if !r.sfn.Close(arn, sfntypes.ExecutionStatusSucceeded, "", "") {
					t.Fatalf("no execution %s", arn)
				}
				if _, err := r.rel.Release(ctx, releaser.Request{Key: key, JobID: tt.id, Attempt: 1, Outcome: releaser.Succeeded, Source: "sweep", ExecutionArn: arn}); err != nil {
					t.Fatal(err)
				}
				if err := r.rel.Metrics.Flush(); err != nil {
					t.Fatal(err)
				}
				if got := published.Sum("", metrics.JobsSucceeded); got != 1 {
					t.Errorf("JobsSucceeded = %v, want 1 (one job succeeded once)", got)
				}
				if l, ok := r.leases.Lease(key); ok {
					t.Errorf("job ended, yet its lane keeps lease %+v", l)
				}
			})
		}
	}
}

// The same with a retry between: the job's message ran attempt 1 (failed) and, retried in its lane,
// attempt 2 (succeeded), and the release of attempt 2 deleted the message with a receipt handle a
// later receive had replaced (SQS answers OK and keeps the message). Its body still counts no
// attempt (a retry in place writes only the lease, which the release freed), so a look at attempt 1
// alone took the message for attempt 1's, failed: its retry started attempt 2 again, found it
// SUCCEEDED, and counted the job's success a second time (simulation seed 41 of
// actions+skew+kill+events). The message's last attempt, the one to finish, is the last that it ran.
func TestLaterAttemptWithoutItsLeaseIsNotCountedTwice(t *testing.T) {
	r := newRig(t, nil)
	published := metrics.NewCollector()
	r.rel.Metrics = metrics.New(published, "test")
	if deliver(t, r, 1) {
		t.Fatal("first delivery acknowledged; want it held")
	}
	if !r.sfn.Close(execArn("reports", "r-1001", 1), sfntypes.ExecutionStatusFailed, "JobFailed", "boom") {
		t.Fatal("no attempt 1")
	}
	res, err := r.rel.Release(context.Background(), releaser.Request{Key: reports1, JobID: "r-1001", Attempt: 1, Outcome: releaser.Failed, Source: "workflow"})
	if err != nil || res != releaser.Retried {
		t.Fatalf("release of attempt 1 = %v, %v; want retried", res, err)
	}
	if deliver(t, r, 2) { // the retry starts attempt 2 in the lane
		t.Fatal("the retry's delivery was acknowledged; want it held")
	}
	if !r.sfn.Close(execArn("reports", "r-1001", 2), sfntypes.ExecutionStatusSucceeded, "", "") {
		t.Fatal("no attempt 2")
	}
	res, err = r.rel.Release(context.Background(), releaser.Request{Key: reports1, JobID: "r-1001", Attempt: 2, Outcome: releaser.Succeeded, Source: "workflow"})
	if err != nil || res != releaser.Deleted {
		t.Fatalf("release of attempt 2 = %v, %v; want deleted", res, err)
	}
	// The message comes back; its delivery claims the job's attempt back and stops before its start
	// (a throttled StartExecution, then the invocation's end), and the sweep releases the claim by
	// the state of the execution it names.
	r.sfn.OnStart = func(*sfn.StartExecutionInput) error {
		return fakes.APIError("ThrottlingException", "Rate exceeded")
	}
	if deliver(t, r, 3) {
		t.Fatal("a delivery whose start was refused was acknowledged")
	}
	r.sfn.OnStart = nil
	l, ok := r.leases.Lease(reports1)
	if !ok {
		t.Fatal("no claim left by the refused start")
	}
	e, _ := r.sfn.Execution(l.ExecutionArn)
	outcome := releaser.Failed
	if e.Status == sfntypes.ExecutionStatusSucceeded {
		outcome = releaser.Succeeded
	}
	if _, err := r.rel.Release(context.Background(), releaser.Request{Key: reports1, JobID: "r-1001", Attempt: l.Attempt, Outcome: outcome, Source: "sweep", ExecutionArn: l.ExecutionArn}); err != nil {
		t.Fatal(err)
	}
	for receive := 4; receive <= 6 && !deliver(t, r, receive); receive++ {
	}
	if err := r.rel.Metrics.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := published.Sum("", metrics.JobsSucceeded); got != 1 {
		t.Errorf("JobsSucceeded = %v, want 1 (one job succeeded once)", got)
	}
	if n := len(r.sfn.Executions()); n != 2 {
		t.Errorf("%d executions, want 2", n)
	}
	if l, ok := r.leases.Lease(reports1); ok {
		t.Errorf("job ended, yet its lane keeps lease %+v", l)
	}
}
