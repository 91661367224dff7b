package starter_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"

	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lane"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
	"github.com/sfnlimit/sfnlimit/internal/lambda/releaser"
	"github.com/sfnlimit/sfnlimit/internal/tools/fakes"
)

// sentMessage is a message the starter sent to the lanes queue, as a later receive delivers it:
// with a message id and receipt handle of its own.
func sentMessage(t *testing.T, s fakes.SentMessage, id string, receive int) events.SQSMessage {
	t.Helper()
	m := message(t, s.MessageGroupID, "sent", s.Body, receive)
	m.MessageId = id
	m.ReceiptHandle = "AQEB" + id + "-receive-" + strconv.Itoa(receive)
	return m
}

// A job above a lowered limit moves back to wait, and its waiting copy may be delivered the moment
// it was sent: before the move has deleted the job's lease in the old lane, or after the move
// stopped with that lease still there (its delete failed). The copy must not take that lease for
// another carrier of its job and drop itself as a duplicate: the original message is gone (or goes),
// and so would be the job, neither run, retried nor dead-lettered.
func TestMovedJobIsNotDroppedForItsOwnOldLease(t *testing.T) {
	for _, tt := range []struct {
		name       string
		status     lease.Status
		failDelete bool // the move's delete of the old lease fails once
		failSend   bool // the move's send of the waiting copy fails once
	}{
		{name: "retrying job, copy delivered at once", status: lease.Retrying},
		{name: "bound job, copy delivered at once", status: lease.Bound},
		{name: "retrying job, lease delete fails", status: lease.Retrying, failDelete: true},
		{name: "retrying job, copy not sent", status: lease.Retrying, failSend: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			r := newRigStrategy(t, nil, lane.FirstFree) // reports=3: lane 5 is above the limit
			old := leaseOf("reports", 5, "r-1", 1, tt.status, 1)
			if tt.status == lease.Bound {
				old.MessageID, old.ReceiptHandle, old.Attempt = "msg-waiting", "", 0
			}
			r.leases.Set(old)
			wantAttempts := old.Attempt
			if tt.status == lease.Retrying { // attempt 1 failed, started by the message in lane 5
				r.sfn.Put(startedBy(t, execution("reports", 5, "r-1", 1, "FAILED", "JobFailed", "boom"), "msg-r-1"))
			}

			// Deliver every waiting copy the moment it exists, from inside the move's later calls.
			delivered, inside := 0, false
			deliver := func() {
				if inside {
					return
				}
				inside = true
				defer func() { inside = false }()
				for _, s := range r.sqs.Sent(lanesURL)[delivered:] {
					delivered++
					if s.Err != nil {
						continue
					}
					if _, ln, _ := job.ParseGroupID(s.MessageGroupID); ln != job.WaitingLane {
						continue
					}
					m := sentMessage(t, s, "copy-"+strconv.Itoa(delivered), 1)
					if _, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{m}}); err != nil {
						t.Fatal(err)
					}
				}
			}
			failed := false
			r.leases.BeforeDelete = func(prev lease.Lease) error {
				if prev.Lane != 5 {
					return nil
				}
				deliver()
				if tt.failDelete && !failed {
					failed = true
					return errors.New("ProvisionedThroughputExceededException")
				}
				return nil
			}
			r.sqs.OnDelete = func(*sqs.DeleteMessageInput) error { deliver(); return nil }
			sendFailed := false
			r.sqs.OnSend = func(*sqs.SendMessageInput) error {
				if tt.failSend && !sendFailed {
					sendFailed = true
					return errors.New("send refused")
				}
				return nil
			}

			for receive := 2; receive <= 6; receive++ { // the original comes back while it is held
				resp, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{jobMessage(t, "reports", 5, "r-1", 0, receive)}})
				if err != nil {
					t.Fatal(err)
				}
				deliver()
				if len(resp.BatchItemFailures) == 0 {
					break
				}
			}

			// The job is bound to a lane within the limit, and its copy is on its way there.
			var bound *lease.Lease
			for _, l := range r.leases.Leases() {
				if l.JobID == "r-1" {
					l := l
					bound = &l
				}
			}
			if bound == nil || bound.Lane > 3 || bound.Status != lease.Bound {
				t.Fatalf("lease of r-1 = %+v; want it bound to a lane within the limit (the job was dropped as a duplicate of itself)", bound)
			}
			if bound.Attempt != wantAttempts {
				t.Errorf("bound lease counts %d attempts, want %d", bound.Attempt, wantAttempts)
			}
			found := false
			for _, c := range copies(t, r) {
				if c.id == "r-1" && c.lane == bound.Lane {
					found = true
				}
			}
			if !found {
				t.Errorf("copies = %+v, want r-1 sent to its bound lane %d", copies(t, r), bound.Lane)
			}
		})
	}
}

// accepted returns the messages SQS enqueued of those the starter sent to the lanes queue: a send
// whose deduplication id an earlier send used (within five minutes: the whole test) is accepted
// and dropped. A send that failed is taken to have gone through (its answer was lost) when went
// says so.
func accepted(r *rig, went bool) []int {
	seen := map[string]bool{}
	var out []int
	for i, s := range r.sqs.Sent(lanesURL) {
		if (s.Err != nil && !went) || seen[s.MessageDeduplicationID] {
			continue
		}
		seen[s.MessageDeduplicationID] = true
		out = append(out, i)
	}
	return out
}

// A waiting message bound again after its first copy ran (a duplicate delivery of its batch, or its
// send timed out after the copy went and it came back) finds the lane it had, freed by that job's
// release, first in its order again. A copy with the first copy's deduplication id was dropped by
// SQS, and the lane stayed bound to a job whose copy never came: unusable until the sweep took it
// back (1.5 x the visibility timeout, 22.5 minutes by default). The second copy must reach the lane,
// where it finds its attempt taken and frees the lane.
func TestRebindAfterTheJobRanFreesTheLane(t *testing.T) {
	for _, tt := range []struct {
		name        string
		lostAnswer  bool // the first copy's send answered with an error although it went
		nextReceive int  // the waiting message's delivery that binds again
	}{
		{name: "duplicate delivery of the waiting batch", nextReceive: 1},
		{name: "send answered with an error", lostAnswer: true, nextReceive: 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			r := newRigStrategy(t, map[string]int{"reports": 1}, lane.FirstFree)
			if tt.lostAnswer {
				first := true
				r.sqs.OnSend = func(*sqs.SendMessageInput) error {
					if first {
						first = false
						return errors.New("read tcp: i/o timeout")
					}
					return nil
				}
			}
			delivered := 0
			deliverCopies := func() {
				for _, i := range accepted(r, tt.lostAnswer) {
					if i < delivered {
						continue
					}
					delivered = i + 1
					m := sentMessage(t, r.sqs.Sent(lanesURL)[i], "copy-"+strconv.Itoa(i), 1)
					if _, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{m}}); err != nil {
						t.Fatal(err)
					}
				}
			}
			if _, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{waiting(t, "reports", "w-1", 1)}}); err != nil {
				t.Fatal(err)
			}
			deliverCopies() // claims lane 1 and starts w-1
			r.clock.Advance(time.Minute)
			if got := startNames(r.sfn); !equal(got, []string{execName("reports", "w-1", 1)}) {
				t.Fatalf("starts = %v, want w-1's first attempt", got)
			}
			l, _ := r.leases.Lease(lease.Key{Type: "reports", Lane: 1})
			if res, err := r.rel.Release(ctx, releaser.Request{Key: l.Key(), JobID: "w-1", Attempt: 1, Outcome: releaser.Succeeded, Source: "workflow"}); err != nil || res != releaser.Deleted {
				t.Fatalf("release = %s, %v", res, err)
			}
			r.sfn.Close(l.ExecutionArn, "SUCCEEDED", "", "")

			// The waiting message is bound again, and whatever copy SQS takes is delivered.
			if _, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{waiting(t, "reports", "w-1", tt.nextReceive)}}); err != nil {
				t.Fatal(err)
			}
			deliverCopies()
			if ls := r.leases.Leases(); len(ls) != 0 {
				t.Errorf("leases = %+v, want lane 1 free: the rebind's copy never came", ls)
			}
			if n := len(r.sfn.Starts()); n > 2 || len(r.sfn.Executions()) != 1 {
				t.Errorf("executions = %+v, want w-1's one", r.sfn.Executions())
			}
		})
	}
}

// woken reports whether a release (or the starter) made the parked message with handle h visible.
func woken(r *rig, h string) bool {
	for _, v := range r.sqs.VisibilityChanges() {
		if v.ReceiptHandle == h && v.Timeout == 0 && v.Err == nil {
			return true
		}
	}
	return false
}

// The starter frees a lane too: a bound copy whose start is refused for good is dead-lettered, and a
// copy that finds its attempt run by another message is dropped; both delete the lane's lease. The
// waiting group parked while that lane was taken must be woken, as a release wakes it: otherwise
// its head waits out the park (60 s) while the lane is free.
func TestStarterWakesAParkedGroupWhenItFreesALane(t *testing.T) {
	for _, tt := range []struct {
		name  string
		setup func(r *rig)
	}{
		{name: "start refused", setup: func(r *rig) {
			r.sfn.OnStart = func(*sfn.StartExecutionInput) error {
				return &sfntypes.StateMachineDoesNotExist{Message: aws.String("State Machine Does Not Exist")}
			}
		}},
		{name: "duplicate dropped", setup: func(r *rig) {
			r.sfn.Put(startedBy(t, execution("reports", 3, "j-1", 1, "SUCCEEDED", "", ""), "another-message"))
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			r := newRigStrategy(t, map[string]int{"reports": 1}, lane.FirstFree)
			r.leases.Set(boundLease("reports", 1, "j-1"))
			tt.setup(r)
			// p-1 finds the only lane bound and parks its group.
			resp, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{waiting(t, "reports", "p-1", 1)}})
			if err != nil || !equal(failures(resp), []string{"msg-p-1"}) {
				t.Fatalf("Handle = %+v, %v; want p-1 parked", resp, err)
			}
			// j-1's copy comes to the lane and frees it.
			if _, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{jobMessage(t, "reports", 1, "j-1", 0, 1)}}); err != nil {
				t.Fatal(err)
			}
			if ls := r.leases.Leases(); len(ls) != 0 {
				t.Fatalf("leases = %+v, want lane 1 freed", ls)
			}
			if !woken(r, handle("p-1", 1)) {
				t.Errorf("visibility changes = %+v; want parked p-1 woken for the freed lane", r.sqs.VisibilityChanges())
			}
			if ws, err := r.room.List(ctx, "reports"); err != nil || len(ws) != 0 {
				t.Errorf("parked = %+v, %v; want the record taken", ws, err)
			}
		})
	}
}

// A stale delivery of a parked head (a duplicate delivery of its batch, or one that outlived the
// message's visibility timeout while the message was received again and parked) must not replace the
// current delivery's park record: a record naming a receipt handle SQS no longer honours is skipped
// by the release that takes it, and the head waited out its park (60 s) with a lane free.
func TestStaleDeliveryDoesNotParkOverTheCurrentOne(t *testing.T) {
	for _, receive := range []int{1, 2} {
		t.Run("stale receive "+strconv.Itoa(receive), func(t *testing.T) {
			ctx := context.Background()
			r := newRigStrategy(t, map[string]int{"reports": 1}, lane.FirstFree)
			busy := r.leases.Set(leaseOf("reports", 1, "busy", 1, lease.Running, 1))
			current := receive + 1
			resp, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{waiting(t, "reports", "p-1", current)}})
			if err != nil || !equal(failures(resp), []string{"msg-p-1"}) {
				t.Fatalf("Handle = %+v, %v; want p-1 parked", resp, err)
			}
			r.sqs.OnChangeVisibility = func(in *sqs.ChangeMessageVisibilityInput) error {
				if aws.ToString(in.ReceiptHandle) == handle("p-1", receive) {
					return &smithy.GenericAPIError{Code: "ReceiptHandleIsInvalid", Message: "The input receipt handle is invalid.", Fault: smithy.FaultClient}
				}
				return nil
			}
			if _, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{waiting(t, "reports", "p-1", receive)}}); err != nil {
				t.Fatal(err)
			}
			res, err := r.rel.Release(ctx, releaser.Request{Key: busy.Key(), JobID: "busy", Attempt: 1, Outcome: releaser.Succeeded, Source: "workflow"})
			if err != nil || res != releaser.Deleted {
				t.Fatalf("release = %s, %v", res, err)
			}
			if !woken(r, handle("p-1", current)) {
				t.Errorf("visibility changes = %+v; want the current delivery of p-1 woken", r.sqs.VisibilityChanges())
			}
		})
	}
}

// A bound copy whose StartExecution is throttled keeps its lane while it backs off: the claim goes
// back to the bind, not to a free lane. Deleting it gave the lane to the next waiting job, and the
// throttled job, back at its lane, found it bound to that one and went to the end of its waiting
// group; under sustained throttling every throttled start reshuffled the queue so.
func TestThrottledBoundCopyKeepsItsLane(t *testing.T) {
	ctx := context.Background()
	r := newRigStrategy(t, map[string]int{"reports": 1}, lane.FirstFree)
	r.leases.Set(boundLease("reports", 1, "j-1"))
	once := false
	r.sfn.OnStart = func(in *sfn.StartExecutionInput) error {
		if !once {
			once = true
			return throttled(in)
		}
		return nil
	}
	resp, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{jobMessage(t, "reports", 1, "j-1", 0, 1)}})
	if err != nil || !equal(failures(resp), []string{"msg-j-1"}) {
		t.Fatalf("Handle = %+v, %v; want j-1 held to try again", resp, err)
	}
	checkLeases(t, r.leases, map[lease.Key]wantLease{{Type: "reports", Lane: 1}: {JobID: "j-1", Status: lease.Bound}})
	// Another waiting job meanwhile finds no free lane.
	resp, err = r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{waiting(t, "reports", "k-1", 1)}})
	if err != nil || !equal(failures(resp), []string{"msg-k-1"}) || len(copies(t, r)) != 0 {
		t.Fatalf("Handle = %+v, %v, copies %+v; want k-1 parked", resp, err, copies(t, r))
	}
	// j-1 comes back and starts in its lane.
	if _, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{jobMessage(t, "reports", 1, "j-1", 0, 2)}}); err != nil {
		t.Fatal(err)
	}
	checkLeases(t, r.leases, map[lease.Key]wantLease{{Type: "reports", Lane: 1}: {JobID: "j-1", Status: lease.Starting, Attempt: 1, Handle: handle("j-1", 2), Arn: execArn("reports", "j-1", 1)}})
}
