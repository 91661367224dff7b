package starter_test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"

	"github.com/sfnlimit/sfnlimit/internal/lambda/deadletter"
	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
	"github.com/sfnlimit/sfnlimit/internal/tools/fakes"
)

// largestAccepted returns the largest input job.Parse accepts for a job of typ and id: an object
// {"s":"xxx..."} found by bisection.
func largestAccepted(t *testing.T, typ, id string) json.RawMessage {
	t.Helper()
	mk := func(n int) string { return `{"s":"` + strings.Repeat("x", n) + `"}` }
	lo, hi := 0, job.MaxExecutionInput // lo accepted, hi refused
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		if _, err := job.Parse([]byte(`{"type":"`+typ+`","id":"`+id+`","input":`+mk(mid)+`}`), "m", submitted); err == nil {
			lo = mid
		} else {
			hi = mid
		}
	}
	return json.RawMessage(mk(lo))
}

// A job the router accepts starts: the execution input the starter builds, message id included
// (SQS message ids are up to 100 characters; today they are 36-character UUIDs), fits Step
// Functions' 256 KiB. Were it over, StartExecution would refuse it as a client error on every
// delivery: the job would never run nor be dead-lettered, and its lane would stay blocked.
func TestLargestAcceptedJobFitsStepFunctionsInput(t *testing.T) {
	r := newRig(t, nil)
	in := largestAccepted(t, "reports", "r-1001")
	body, _ := json.Marshal(job.Job{Type: "reports", ID: "r-1001", Input: in, SubmittedAt: submitted})
	m := message(t, "reports-1", "r-1001", string(body), 1)
	m.MessageId = "4f1c7b9e-8e1a-4c4d-9a51-0d2f7c1b2a10" // as SQS gives them
	if _, err := r.st.Handle(context.Background(), events.SQSEvent{Records: []events.SQSMessage{m}}); err != nil {
		t.Fatal(err)
	}
	starts := r.sfn.Starts()
	if len(starts) != 1 {
		t.Fatalf("starts = %d, want 1", len(starts))
	}
	if n := len(starts[0].Input); n > job.MaxExecutionInput {
		t.Errorf("execution input of the largest accepted job = %d bytes, over Step Functions' %d", n, job.MaxExecutionInput)
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
			if !ok || l.Status != lease.Running || l.Attempt != 4 || l.ExecutionArn != execArn("reports", "r-1001", 4) {
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
