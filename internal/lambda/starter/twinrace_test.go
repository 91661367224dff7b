package starter_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"

	"github.com/sfnlimit/sfnlimit/internal/lambda/batch"
	"github.com/sfnlimit/sfnlimit/internal/lambda/batchend"
	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lane"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
	"github.com/sfnlimit/sfnlimit/internal/lambda/releaser"
	"github.com/sfnlimit/sfnlimit/internal/lambda/starter"
	"github.com/sfnlimit/sfnlimit/internal/tools/fakes"
)

// A first-free lane copy that finds no lease starts only if its delivery still holds its message,
// but that reads the message's state at one moment, while a move changed it in two steps: the move
// deleted the lease first, sent the waiting copy, and only then deleted the original message (found
// by review). The move now leaves a moving lease until the message is gone, which a twin finishes
// the move from. A twin delivery (Lambda handed the batch over twice; same receipt handle) that
// reads the lane between the move's lease delete and its DeleteMessage finds no lease, still holds
// the message (its ChangeMessageVisibility succeeds), claims and starts attempt 1; then the move
// deletes the message. This is seed 20912's state again: the job runs with no message left for its
// release to retry, and its waiting copy drops itself for the twin's claim.
func TestTwinStartingBetweenAMovesLeaseDeleteAndMessageDelete(t *testing.T) {
	ctx := context.Background()
	r := newRigStrategy(t, map[string]int{"reports": 1}, lane.FirstFree) // the limit, lowered to 1
	bound := leaseOf("reports", 2, "r-1", 0, lease.Bound, 1)
	bound.MessageID = "msg-waiting-r-1" // a bind's lease names the waiting message
	r.leases.Set(bound)

	// The twin reads a cached, higher limit (3): lane 2 is within it, so it does not move.
	twin := twinOf(t, r, lane.FirstFree)

	lane2 := jobMessage(t, "reports", 2, "r-1", 0, 1)
	var mu sync.Mutex
	deletedHandles := map[string]bool{}
	r.sqs.OnChangeVisibility = func(in *sqs.ChangeMessageVisibilityInput) error {
		mu.Lock()
		defer mu.Unlock()
		if deletedHandles[aws.ToString(in.ReceiptHandle)] {
			return &smithy.GenericAPIError{Code: "ReceiptHandleIsInvalid", Message: "The input receipt handle is invalid.", Fault: smithy.FaultClient}
		}
		return nil
	}
	var twinResp events.SQSEventResponse
	var twinErr error
	r.sqs.OnDelete = func(in *sqs.DeleteMessageInput) error {
		if aws.ToString(in.ReceiptHandle) != lane2.ReceiptHandle {
			return nil
		}
		// The move has deleted the lease and sent the waiting copy; its DeleteMessage is on its
		// way. The twin delivery runs now, whole.
		r.sqs.OnDelete = nil
		twinResp, twinErr = twin.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{lane2}})
		mu.Lock()
		deletedHandles[lane2.ReceiptHandle] = true
		mu.Unlock()
		return nil
	}
	resp, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{lane2}})
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("mover: Handle = %+v, %v; want r-1 moved and its lane message acknowledged", resp, err)
	}
	if twinErr != nil {
		t.Fatalf("twin: Handle = %+v, %v", twinResp, twinErr)
	}
	moved := map[string]bool{} // by deduplication id: SQS keeps one message of each
	for _, c := range copies(t, r) {
		if c.lane == job.WaitingLane {
			moved[c.dedup] = true
		}
	}
	if len(moved) != 1 {
		t.Fatalf("copies = %+v, want r-1 sent to its waiting group once (one deduplication id)", copies(t, r))
	}
	starts := startNames(r.sfn)
	if len(starts) != 0 {
		t.Errorf("starts = %v, leases = %+v: the twin started r-1 in lane 2 and the move then deleted its "+
			"lane message; the job runs with no message left for its release to retry", starts, r.leases.Leases())
	}

	// The waiting copy the move sent finds the twin's claim of r-1 and drops itself: no copy of r-1
	// is left to retry it.
	w := message(t, job.WaitingGroupID("reports", 0), "r-1", jobBody("reports", "r-1", 0), 1)
	w.MessageId = "msg-waiting-r-1-moved"
	resp, err = r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{w}})
	if err != nil {
		t.Fatal(err)
	}
	if len(starts) != 0 && len(resp.BatchItemFailures) == 0 {
		t.Errorf("waiting copy acknowledged (dropped) while r-1's only other copy, its lane message, was deleted: the job is lost on its first failure")
	}
}

// Under the random strategy a job is routed straight to its lane (no lease), and a move writes a
// moving lease on the lane anyway. A twin delivery (Lambda handed the batch over twice; same receipt
// handle) whose cached config still has the higher limit, reading the lane after the move deleted the
// message, must not start the job: it would run above the lowered limit with no message left for
// its release to retry, while the moved copy dropped itself as a duplicate of the twin's execution.
func TestRandomTwinStartsAJobItsMoveAlreadyDeleted(t *testing.T) {
	ctx := context.Background()
	r := newRigStrategy(t, map[string]int{"reports": 1}, lane.Random) // the limit, lowered to 1
	twin := twinOf(t, r, lane.Random)

	lane2 := jobMessage(t, "reports", 2, "r-1", 0, 1) // routed straight to lane 2: no lease
	resp, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{lane2}})
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("mover: Handle = %+v, %v; want r-1 moved and its lane message acknowledged", resp, err)
	}
	if d := deleted(r.sqs); len(d) != 1 {
		t.Fatalf("deleted = %v, want the moved lane message deleted", d)
	}
	// The twin delivery of the same receive, with its cached limit of 3: lane 2 is within it.
	r.sqs.OnChangeVisibility = func(in *sqs.ChangeMessageVisibilityInput) error {
		return &smithy.GenericAPIError{Code: "ReceiptHandleIsInvalid", Message: "The input receipt handle is invalid.", Fault: smithy.FaultClient}
	}
	if _, err := twin.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{lane2}}); err != nil {
		t.Fatal(err)
	}
	if starts := startNames(r.sfn); len(starts) != 0 {
		t.Errorf("starts = %v, leases = %+v: the twin started r-1 in lane 2 after the move deleted its message; "+
			"the job runs above the lowered limit with no message left for its release to retry", starts, r.leases.Leases())
	}
	// The moved copy, in lane 1, is then the job's only message: it must not be dropped.
	var sent []copyMsg
	for _, c := range copies(t, r) {
		if c.id == "r-1" && c.lane == 1 {
			sent = append(sent, c)
		}
	}
	if len(sent) != 1 {
		t.Fatalf("copies = %+v, want r-1 moved to lane 1 once", copies(t, r))
	}
	r.sqs.OnChangeVisibility = nil
	lane1 := jobMessage(t, "reports", 1, "r-1", 0, 1)
	lane1.MessageId = "msg-r-1-moved"
	resp, err = r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{lane1}})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.BatchItemFailures) == 0 {
		t.Errorf("moved copy acknowledged as a duplicate of the twin's execution, whose lane message was deleted: " +
			"r-1's first failure is never retried nor dead-lettered (the job is lost)")
	}
}

// A move whose DeleteMessage failed keeps its moving lease: the message is still in the queue until
// Lambda deletes it once the mover's invocation returns, and a twin delivery (same receipt handle)
// with a cached, higher limit that found the lane free would still hold the message, claim and
// start attempt 1; Lambda would then delete the message, and the job would run with no message left
// for its release to retry.
func TestTwinStartingAfterAMoveWhoseDeleteMessageFailed(t *testing.T) {
	ctx := context.Background()
	r := newRigStrategy(t, map[string]int{"reports": 1}, lane.FirstFree) // the limit, lowered to 1
	bound := leaseOf("reports", 2, "r-1", 0, lease.Bound, 1)
	bound.MessageID = "msg-waiting-r-1"
	r.leases.Set(bound)
	twin := twinOf(t, r, lane.FirstFree)

	lane2 := jobMessage(t, "reports", 2, "r-1", 0, 1)
	r.sqs.OnDelete = func(in *sqs.DeleteMessageInput) error {
		if aws.ToString(in.ReceiptHandle) == lane2.ReceiptHandle {
			return &smithy.GenericAPIError{Code: "ThrottlingException", Message: "Rate exceeded", Fault: smithy.FaultServer}
		}
		return nil
	}
	resp, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{lane2}})
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("mover: Handle = %+v, %v; want r-1 moved and its lane message acknowledged", resp, err)
	}
	if len(r.leases.Leases()) == 0 {
		t.Errorf("no lease left after a move whose DeleteMessage failed: the moving lease must stay while the message may remain")
	}
	// Before Lambda deletes the acknowledged message, the twin runs: the message is still held.
	r.sqs.OnDelete = nil
	if _, err := twin.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{lane2}}); err != nil {
		t.Fatal(err)
	}
	if starts := startNames(r.sfn); len(starts) != 0 {
		t.Errorf("starts = %v, leases = %+v: the twin started r-1 in lane 2, whose message Lambda deletes once the mover "+
			"returns (it acknowledged it); the job runs with no message left for its release to retry", starts, r.leases.Leases())
	}
}

// Only the mover's own receive, or a later one, finishes a move: the moving lease records the
// mover's receive count, and a late copy of an earlier delivery (Lambda handed receive 1's batch over
// twice, the message was received again since) holds. Were it to finish the move, its DeleteMessage
// with a stale receipt handle would delete nothing (SQS answers success), it would delete the moving
// lease with the message still in the queue under receive 2, and a twin of receive 2 with a cached,
// higher limit would find the lane free, still hold the message and start the job, which the
// mover's DeleteMessage then leaves with no message for its release to retry.
func TestLateCopyOfAnEarlierDeliveryFinishingAMove(t *testing.T) {
	ctx := context.Background()
	r := newRigStrategy(t, map[string]int{"reports": 1}, lane.FirstFree) // the limit, lowered to 1
	bound := leaseOf("reports", 2, "r-1", 0, lease.Bound, 1)
	bound.MessageID = "msg-waiting-r-1"
	r.leases.Set(bound)
	twin := twinOf(t, r, lane.FirstFree)

	late := jobMessage(t, "reports", 2, "r-1", 0, 1) // receive 1's late copy
	current := jobMessage(t, "reports", 2, "r-1", 0, 2)
	var lateErr, twinErr error
	var movingAfterLate bool
	r.sqs.OnDelete = func(in *sqs.DeleteMessageInput) error {
		if aws.ToString(in.ReceiptHandle) != current.ReceiptHandle {
			return nil // a stale handle: SQS answers success and deletes nothing
		}
		// The mover (receive 2) has written its moving lease and sent the copy; its DeleteMessage
		// is on its way. The late copy of receive 1 runs, then receive 2's twin.
		r.sqs.OnDelete = nil
		_, lateErr = r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{late}})
		_, movingAfterLate = r.leases.Lease(lease.Key{Type: "reports", Lane: 2})
		_, twinErr = twin.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{current}})
		return nil
	}
	resp, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{current}})
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("mover: Handle = %+v, %v; want r-1 moved and its lane message acknowledged", resp, err)
	}
	if lateErr != nil || twinErr != nil {
		t.Fatalf("late copy: %v; twin: %v", lateErr, twinErr)
	}
	if !movingAfterLate {
		t.Errorf("the late copy of receive 1 deleted the moving lease while the message was still in the queue under receive 2")
	}
	if starts := startNames(r.sfn); len(starts) != 0 {
		t.Errorf("starts = %v, leases = %+v: receive 2's twin started r-1 in lane 2, whose message the mover then deleted; "+
			"the job runs with no message left for its release to retry", starts, r.leases.Leases())
	}
}

// A job that finds no lease in its lane claims the lane first and only then asks whether its
// delivery still holds its message (ChangeMessageVisibility), so no twin's whole move fits between
// the check and the claim. Lambda hands a random-strategy lane copy's batch over twice (same receipt
// handle); the twin, reading a cached, higher limit (3), finds no lease in lane 2; the other
// delivery (limit lowered to 1) moves the job: moving lease (attribute_not_exists), copy to lane 1,
// DeleteMessage, moving lease deleted. Either the move came before the claim, and the check finds
// the message gone, or it finds the claim (whose fresh, unconfirmed start it backs off from); never
// does the twin start r-1 in lane 2 with no message left for its release to retry.
func TestTwinMovedAwayBetweenItsMessageCheckAndItsClaim(t *testing.T) {
	ctx := context.Background()
	r := newRigStrategy(t, map[string]int{"reports": 1}, lane.Random) // the limit, lowered to 1
	twin := twinOf(t, r, lane.Random)

	lane2 := jobMessage(t, "reports", 2, "r-1", 0, 1) // routed straight to lane 2: no lease
	var mu sync.Mutex
	deletedHandles := map[string]bool{}
	r.sqs.OnDelete = func(in *sqs.DeleteMessageInput) error {
		mu.Lock()
		defer mu.Unlock()
		deletedHandles[aws.ToString(in.ReceiptHandle)] = true
		return nil
	}
	var moverResp events.SQSEventResponse
	var moverErr error
	moved := false
	r.sqs.OnChangeVisibility = func(in *sqs.ChangeMessageVisibilityInput) error {
		mu.Lock()
		gone := deletedHandles[aws.ToString(in.ReceiptHandle)]
		first := !moved && aws.ToString(in.ReceiptHandle) == lane2.ReceiptHandle
		moved = moved || first
		mu.Unlock()
		if gone {
			return &smithy.GenericAPIError{Code: "ReceiptHandleIsInvalid", Message: "The input receipt handle is invalid.", Fault: smithy.FaultClient}
		}
		if first {
			// SQS applied the twin's ChangeMessageVisibility; before its answer is read, the other
			// delivery of the same receive moves the job, whole.
			moverResp, moverErr = r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{lane2}})
		}
		return nil
	}
	if _, err := twin.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{lane2}}); err != nil {
		t.Fatal(err)
	}
	if moverErr != nil {
		t.Fatalf("mover: Handle = %+v, %v", moverResp, moverErr)
	}
	// Either the twin's check came first (it now follows the twin's claim: the mover finds the
	// claim, and backs off from its fresh start) and the job runs with its message, or the move came
	// first and nothing starts; never a start whose message the move deleted.
	starts, d := startNames(r.sfn), deleted(r.sqs)
	if len(starts) != 0 && len(d) != 0 {
		t.Errorf("starts = %v, deleted = %v, leases = %+v: the twin started r-1 in lane 2 and the move deleted its message; "+
			"the job runs above the lowered limit with no message left for its release to retry", starts, d, r.leases.Leases())
	}
	if len(starts) == 0 && len(d) == 0 {
		t.Fatalf("neither started nor moved: leases = %+v", r.leases.Leases())
	}
	if len(starts) != 0 {
		return // the job runs in lane 2 with its message; the mover comes back to it
	}
	// The moved copy, in lane 1, is then the job's only message: it must not be dropped.
	r.sqs.OnChangeVisibility, r.sqs.OnDelete = nil, nil
	lane1 := jobMessage(t, "reports", 1, "r-1", 0, 1)
	lane1.MessageId = "msg-r-1-moved"
	resp, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{lane1}})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.BatchItemFailures) == 0 && len(startNames(r.sfn)) == 1 {
		t.Errorf("moved copy acknowledged as a duplicate of the twin's execution, whose lane message was deleted: " +
			"r-1's first failure is never retried nor dead-lettered (the job is lost)")
	}
}

// A later receive that finishes a move first writes its receive count and receipt handle into the
// moving lease (conditional on the lease read, as a claim is), so a late copy of the mover's own
// receive holds. Receive 1 wrote r-1's moving lease and sent its copy, then stopped; the message
// comes back (receive 2), whose delivery finishes the move. While receive 2's DeleteMessage is on
// its way, a late copy of receive 1 (Lambda handed that batch over twice) must not finish the move
// with its stale receipt handle (SQS answers success and deletes nothing) and delete the moving
// lease with the message still in the queue: receive 2's twin, with a cached higher limit, would
// find the lane free, still hold the message and start r-1, which receive 2's DeleteMessage then
// deletes.
func TestLateCopyOfTheMoversReceiveAfterALaterReceiveFinishesTheMove(t *testing.T) {
	ctx := context.Background()
	r := newRigStrategy(t, map[string]int{"reports": 1}, lane.FirstFree)   // the limit, lowered to 1
	moving := leaseOf("reports", 2, "r-1", 0, lease.Moving, 1)             // receive 1's move, stopped after its copy
	moving.MessageID, moving.Receives, moving.UpdatedAt = "msg-r-1", 1, t0 // as the mover wrote it
	r.leases.Set(moving)
	twin := twinOf(t, r, lane.FirstFree)

	late := jobMessage(t, "reports", 2, "r-1", 0, 1) // receive 1's late copy
	current := jobMessage(t, "reports", 2, "r-1", 0, 2)
	var lateErr, twinErr error
	r.clock.Advance(visibilityTimeout)
	r.sqs.OnDelete = func(in *sqs.DeleteMessageInput) error {
		if aws.ToString(in.ReceiptHandle) != current.ReceiptHandle {
			return nil // a stale handle: SQS answers success and deletes nothing
		}
		// Receive 2 finishes the move: its copy is sent (dropped by SQS), its DeleteMessage is on
		// its way. The late copy of receive 1 runs, then receive 2's twin.
		r.sqs.OnDelete = nil
		_, lateErr = r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{late}})
		_, twinErr = twin.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{current}})
		return nil
	}
	resp, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{current}})
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("finisher: Handle = %+v, %v; want r-1's move finished and its lane message acknowledged", resp, err)
	}
	if lateErr != nil || twinErr != nil {
		t.Fatalf("late copy: %v; twin: %v", lateErr, twinErr)
	}
	if starts := startNames(r.sfn); len(starts) != 0 {
		t.Errorf("starts = %v, leases = %+v: the late copy of receive 1 deleted the moving lease while the message was "+
			"in flight under receive 2, whose twin then started r-1; receive 2 deleted the message, and the job runs with "+
			"no message left for its release to retry", starts, r.leases.Leases())
	}
}

// twinOf is a second delivery of r's starter, as Lambda may hand a batch over twice, whose container
// still has the limit of reports cached from before it was lowered: 3.
func twinOf(t *testing.T, r *rig, strategy string) *starter.Starter {
	t.Helper()
	cached, err := config.NewResolver(config.Defaults{Limits: map[string]int{"reports": 3}, DefaultMaxAttempts: 3, StateMachineArn: smArn, Strategy: strategy}, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	twin := *r.st
	twin.Config = cached
	return &twin
}

// A twin delivery (Lambda handed the batch over twice; same receipt handle) of a job leaving a lane
// above a lowered limit, run after the first delivery finished the move (moving lease and message
// both deleted), finds no lease in the lane. It must not move the job again: its moving lease would
// hold a free lane for a job that has left it, and with its delete failing (a DynamoDB throttle)
// nothing but the sweep would take it back, 1.5 visibility timeouts later, since no message is left
// to come back and finish the move (seed 15 of races: lane 2 of gamma held 8.5 minutes).
func TestTwinOfAFinishedMoveLeavesNoMovingLease(t *testing.T) {
	ctx := context.Background()
	r := newRigStrategy(t, map[string]int{"reports": 1}, lane.FirstFree) // the limit, lowered to 1

	lane2 := jobMessage(t, "reports", 2, "r-1", 0, 1) // no lease: lane 2 is above the limit
	resp, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{lane2}})
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("mover: Handle = %+v, %v; want r-1 moved and its lane message acknowledged", resp, err)
	}
	if d := deleted(r.sqs); len(d) != 1 {
		t.Fatalf("deleted = %v, want the moved lane message deleted", d)
	}
	if ls := r.leases.Leases(); len(ls) != 0 {
		t.Fatalf("leases = %+v, want none once the move finished", ls)
	}

	// The twin: its message is gone (SQS refuses its handle), and its lease deletes are throttled.
	r.sqs.OnChangeVisibility = func(in *sqs.ChangeMessageVisibilityInput) error {
		return &smithy.GenericAPIError{Code: "ReceiptHandleIsInvalid", Message: "The input receipt handle is invalid.", Fault: smithy.FaultClient}
	}
	rel := *r.rel
	rel.Leases = throttledDeletes{r.leases}
	twin := *r.st
	twin.Releaser = &rel
	sent := len(copies(t, r))
	resp, err = twin.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{lane2}})
	if err != nil {
		t.Fatal(err)
	}
	if ls := r.leases.Leases(); len(ls) != 0 {
		t.Errorf("leases = %+v: the twin moved r-1 again after its move finished, and its moving lease holds lane 2 "+
			"with no message left to finish it (until the sweep takes it back)", ls)
	}
	if c := copies(t, r); len(c) != sent {
		t.Errorf("copies = %+v, want none sent by the twin of a finished move", c)
	}
	if len(resp.BatchItemFailures) != 1 {
		t.Errorf("twin: failures = %v, want its delivery held: it no longer holds its message (never acknowledged)", failures(resp))
	}
}

// throttledDeletes is a lease store whose deletes DynamoDB refuses (throttled, the SDK's retries spent).
type throttledDeletes struct{ *fakes.LeaseStore }

func (throttledDeletes) Delete(context.Context, lease.Lease) error {
	return &smithy.GenericAPIError{Code: "ProvisionedThroughputExceededException", Message: "Throughput exceeds the current capacity of your table or index.", Fault: smithy.FaultClient}
}

// A twin of a delivery that ran attempt 1 (failed, retried in its lane) and then moved the job to its
// waiting group (its limit lowered, the job's count carried in the moved copy) comes after the move
// deleted its message and the lane's lease. It finds no lease, and attempt 1 run by this very
// message: its claim would be a reclaim of an attempt it takes for ended and counted. Its check that
// it still holds its message comes after that claim; if the drop of the claim then fails (a
// throttled DeleteItem), the claim stays, names a message that is gone, and the moved copy, finding
// the job's lane claimed by a copy whose attempt that copy's message ran, drops itself: the job is
// lost (simulation seed 211 of races). A delivery that would reclaim an attempt checks that it holds
// its message before it writes anything.
func TestTwinReclaimingAfterTheMoveWritesNothing(t *testing.T) {
	ctx := context.Background()
	r := newRigStrategy(t, nil, lane.FirstFree)
	r.sfn.Put(startedBy(t, execution("reports", 2, "r-1", 1, "FAILED", "JobFailed", "boom"), "msg-r-1"))
	r.sqs.OnChangeVisibility = func(in *sqs.ChangeMessageVisibilityInput) error {
		return &smithy.GenericAPIError{Code: "ReceiptHandleIsInvalid", Message: "The receipt handle has expired.", Fault: smithy.FaultClient}
	}
	twin := jobMessage(t, "reports", 2, "r-1", 0, 3) // message msg-r-1, which ran attempt 1
	if _, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{twin}}); err != nil {
		t.Fatal(err)
	}
	if _, writes, _ := r.leases.Counts(); writes != 0 {
		t.Errorf("%d lease writes by a delivery whose message is gone, want none: a claim whose drop fails would be left naming it (leases %+v)", writes, r.leases.Leases())
	}
	if starts := startNames(r.sfn); len(starts) != 0 {
		t.Errorf("starts = %v, want none", starts)
	}
}

// The same twin on the path of a job that must leave its lane (above a lowered limit, or not bound
// in a type that caps keys), whose attempt still runs: the workflow's release step freed its lease
// and made its message visible, the next delivery moved the job to its waiting group (copy sent,
// message and lease deleted), and the execution had not yet ended (or a stale read of it said
// RUNNING). The twin of that delivery finds no lease and a running attempt of its message, and
// claims it back to go on from it. Its claim names a message that is gone: held as a running job's,
// it takes the job's end for its own, retries into a deleted message, and the moved copy, finding
// the job's lane claimed, drops itself. The job is lost (simulation seed 411 of races). A delivery
// with no lease checks that it holds its message before it claims an attempt back.
func TestTwinOfAMoveFindingItsAttemptRunningWritesNothing(t *testing.T) {
	for _, tt := range []struct {
		name string
		rig  func(t *testing.T) *rig
		msg  func(t *testing.T) events.SQSMessage
	}{
		{"above a lowered limit", func(t *testing.T) *rig { return newRigStrategy(t, map[string]int{"reports": 1}, lane.FirstFree) },
			func(t *testing.T) events.SQSMessage { return jobMessage(t, "reports", 2, "r-1", 0, 2) }},
		{"not bound in a type that caps keys", func(t *testing.T) *rig { return newKeyRigCapped(t, 1) },
			func(t *testing.T) events.SQSMessage { return keyed(t, job.GroupID("llm", 2), "acme", "a-1", 2) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			r := tt.rig(t)
			twin := tt.msg(t)
			var j job.Job
			if err := json.Unmarshal([]byte(twin.Body), &j); err != nil {
				t.Fatal(err)
			}
			run := execution(j.Type, 2, j.ID, 1, "RUNNING", "", "")
			if j.Key != "" {
				run = keyedExecution(j.Type, 2, j.Key, j.ID, 1, "RUNNING")
			}
			r.sfn.Put(startedBy(t, run, twin.MessageId))
			r.sqs.OnChangeVisibility = func(in *sqs.ChangeMessageVisibilityInput) error {
				return &smithy.GenericAPIError{Code: "ReceiptHandleIsInvalid", Message: "The receipt handle has expired.", Fault: smithy.FaultClient}
			}
			resp, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{twin}})
			if err != nil || len(resp.BatchItemFailures) != 1 {
				t.Fatalf("Handle = %+v, %v; want the stale delivery held, never acknowledged", resp, err)
			}
			if ls := r.leases.Leases(); len(ls) != 0 {
				t.Errorf("leases = %+v, want none: a claim naming a deleted message would make the moved copy drop itself", ls)
			}
			if c := copies(t, r); len(c) != 0 {
				t.Errorf("copies = %+v, want none: the delivery that moved the job sent its copy", c)
			}
		})
	}
}

// The same stale copy as in TestStaleCopyOfAnEarlierBindDoesNotClaimALaterBind, come back a little
// later: the later bind's copy has already claimed the lane and started the job. A copy of an earlier
// bind (a twin delivery, after its own move deleted it and the moved copy was bound to the same lane
// again) finds that claim, of another message of its job, and writes its own over it: its message id
// and a receipt handle gone stale. The attempt's release, whose execution names the later copy, then
// takes the lane's claim for a duplicate's and drops it, counting the job's end nowhere (the outcome
// of seed 20857, reached through a claim rather than a bound lease). A delivery that would claim a
// lease another message of its job holds checks first that it still holds its message.
func TestStaleCopyDoesNotTakeOverAnotherMessagesClaim(t *testing.T) {
	for _, st := range []lease.Status{lease.Starting, lease.Retrying} {
		t.Run(string(st), func(t *testing.T) {
			ctx := context.Background()
			r := newRigStrategy(t, nil, lane.FirstFree)
			later := leaseOf("reports", 2, "r-1", 1, st, 1)
			later.MessageID, later.ReceiptHandle = "msg-copy-later", "AQEB-later-receive-1"
			r.leases.Set(later)
			e := execution("reports", 2, "r-1", 1, "RUNNING", "", "")
			if st == lease.Retrying {
				e.Status = "FAILED"
			}
			var in job.ExecutionInput
			if err := json.Unmarshal([]byte(e.Input), &in); err != nil {
				t.Fatal(err)
			}
			in.Job.MessageID = later.MessageID
			e.Input = string(in.MustJSON())
			r.sfn.Put(e)
			r.sqs.OnChangeVisibility = func(in *sqs.ChangeMessageVisibilityInput) error {
				if aws.ToString(in.ReceiptHandle) == later.ReceiptHandle {
					return nil
				}
				return &smithy.GenericAPIError{Code: "ReceiptHandleIsInvalid", Message: "The input receipt handle is invalid.", Fault: smithy.FaultClient}
			}
			stale := jobMessage(t, "reports", 2, "r-1", 0, 1) // msg-r-1: the earlier bind's copy, deleted by its move
			if _, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{stale}}); err != nil {
				t.Fatal(err)
			}
			l, ok := r.leases.Lease(later.Key())
			if !ok || l.MessageID != later.MessageID || l.ReceiptHandle != later.ReceiptHandle || l.Status != st {
				t.Errorf("lane 2 holds %+v, want the later copy's %s lease as it was", l, st)
			}
			if starts := startNames(r.sfn); len(starts) != 0 {
				t.Errorf("starts = %v, want none by a delivery whose message is gone (no message left for the attempt's retry)", starts)
			}
		})
	}
}

// A message that ran attempts 1 and 2 in its lane (a random type's job retried in place: its body
// still counts none) comes back after the release of attempt 2 freed its lease with a receipt handle
// gone stale. Its delivery reclaims from the attempt its body names, 1, and goes on to its last own
// attempt only after the claim is written: stopped between (killed, or a call refused), it leaves a
// claim of attempt 1, whose execution FAILED, and the sweep retries it; the next delivery then claims
// attempt 2 as a retry (not a reclaim), and its release counts the job's success a second time, or,
// with attempt 1 its last allowed, the job is dead-lettered after it succeeded (seed 41 of
// actions+skew+kill+events: JobsSucceeded 96 published, 95 jobs succeeded). A reclaim claims the last
// attempt its message ran.
func TestReclaimClaimsTheLastAttemptItsMessageRan(t *testing.T) {
	ctx := context.Background()
	r := newRigStrategy(t, nil, lane.Random)
	for a, st := range map[int]string{1: "FAILED", 2: "SUCCEEDED"} {
		e := execution("reports", 1, "r-1", a, "", "", "")
		e.Status = sfntypes.ExecutionStatus(st)
		var in job.ExecutionInput
		if err := json.Unmarshal([]byte(e.Input), &in); err != nil {
			t.Fatal(err)
		}
		in.Job.MessageID = "msg-r-1"
		e.Input = string(in.MustJSON())
		r.sfn.Put(e)
	}
	checks := 0
	r.sqs.OnChangeVisibility = func(*sqs.ChangeMessageVisibilityInput) error {
		if checks++; checks > 1 { // the delivery stops after its claim
			return &smithy.GenericAPIError{Code: "ThrottlingException", Message: "Rate exceeded", Fault: smithy.FaultClient}
		}
		return nil
	}
	if _, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{jobMessage(t, "reports", 1, "r-1", 0, 3)}}); err != nil {
		t.Fatal(err)
	}
	if l, ok := r.leases.Lease(lease.Key{Type: "reports", Lane: 1}); ok && (l.Attempt != 2 || !l.Reclaimed) {
		t.Errorf("lane 1 holds a claim of attempt %d (reclaimed %v), want attempt 2, the last its message ran, reclaimed: attempt 1 FAILED, and the sweep would retry it", l.Attempt, l.Reclaimed)
	}
}

// Two live messages of one job in one lane (a later bind's or move's copy behind the copy that runs
// the job) are never in flight together: FIFO hands out the later one only once the earlier one is
// deleted. So a later copy that holds its message takes over a claim of another message only after
// that message's release deleted it, and the attempt's own release, whose execution names the
// earlier message, then drops the later copy's claim as a duplicate's without counting the job's
// end. That is sound only because a release counts the end before it deletes the message. Here the
// workflow's Release step deletes the earlier copy and stops (SQS applied the delete and answered
// with an error); the later copy, its message now the group's head, takes the running attempt over;
// the status event, naming the earlier copy, drops it. The job's success is counted once, and its
// batch closes.
func TestLaterCopyTakingOverARunningAttemptAfterItsReleaseKeepsTheCount(t *testing.T) {
	ctx := context.Background()
	r := newRigStrategy(t, nil, lane.FirstFree)
	ledger := batch.New(fakes.NewDynamoDB("t"), "t")
	r.rel.Batches = batchend.New(ledger, nopBus{}, "s", fakes.Logger(t))
	if err := ledger.Open(ctx, "up", 1, t0); err != nil {
		t.Fatal(err)
	}
	j := job.Job{Type: "reports", ID: "r-1", Batch: "up", Input: json.RawMessage(`{}`), SubmittedAt: submitted}
	in := j.ExecutionInput(2, 1)
	in.Job.MessageID = "msg-copy-earlier"
	arn := execArn("reports", "r-1", 1)
	r.sfn.Put(fakes.Execution{StateMachineArn: smArn, Name: execName("reports", "r-1", 1), Status: sfntypes.ExecutionStatusRunning, Input: string(in.MustJSON())})
	earlier := leaseOf("reports", 2, "r-1", 1, lease.Starting, 1)
	earlier.MessageID, earlier.ReceiptHandle, earlier.Batch = "msg-copy-earlier", "AQEB-earlier-receive-1", "up"
	r.leases.Set(earlier)

	// The Release step runs before the execution ends: its DeleteMessage is applied, and answered
	// with a server error, and the step stops there (Step Functions retries it later).
	r.sqs.OnDelete = func(in *sqs.DeleteMessageInput) error {
		if aws.ToString(in.ReceiptHandle) == earlier.ReceiptHandle {
			return &smithy.GenericAPIError{Code: "InternalError", Message: "We encountered an internal error.", Fault: smithy.FaultServer}
		}
		return nil
	}
	step := releaser.Request{Key: earlier.Key(), JobID: "r-1", Attempt: 1, Outcome: releaser.Succeeded, Source: "workflow", ExecutionArn: arn, MessageID: "msg-copy-earlier"}
	if _, err := r.rel.Release(ctx, step); err == nil {
		t.Fatal("Release step: want its error (the delete's answer lost)")
	}

	// The earlier copy is gone, so the later one is delivered; it holds its message.
	body, _ := json.Marshal(j)
	later := message(t, job.GroupID("reports", 2), "r-1", string(body), 1)
	later.MessageId = "msg-copy-later"
	if _, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{later}}); err != nil {
		t.Fatal(err)
	}
	if l, ok := r.leases.Lease(earlier.Key()); !ok || l.MessageID != later.MessageId || l.Attempt != 1 {
		t.Fatalf("lane 2 holds %+v (found %v), want the later copy's claim of the running attempt 1", l, ok)
	}

	// The execution ends; its status event (and the Release step's retry) name the earlier copy.
	r.sfn.Close(arn, sfntypes.ExecutionStatusSucceeded, "", "")
	event := step
	event.Source = "status-event"
	for _, req := range []releaser.Request{event, step} {
		if _, err := r.rel.Release(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	if ls := r.leases.Leases(); len(ls) != 0 {
		t.Errorf("leases = %+v, want lane 2 free", ls)
	}
	sum, _, err := ledger.Show(ctx, "up", false)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Recorded != 1 || sum.Counts[batch.Succeeded] != 1 || !sum.Closed {
		t.Errorf("batch up: %d recorded (%d succeeded), closed %v; want r-1's success counted once and the batch closed: "+
			"the release that dropped the later copy's claim took the count for its message's, which was never made", sum.Recorded, sum.Counts[batch.Succeeded], sum.Closed)
	}
}

// A twin of a move on the path that claims after it writes: the first delivery of a message (one
// receive: no look for an attempt it made) found its lane above the type's limit and moved the job
// to its waiting group (copy sent, message and lease deleted); the limit was raised again, and the
// twin of that delivery (Lambda handed the batch over twice) finds no lease in a lane now within the
// limit and claims attempt 1, checking its message only once the claim is written. The moved copy,
// bound in that moment, finds the job's lane claimed and drops itself as a duplicate; the twin,
// finding its message gone, drops its claim. Nothing of the job is left.
func TestMovedCopyBoundWhileAStaleTwinsClaimStandsIsNotDropped(t *testing.T) {
	ctx := context.Background()
	r := newRigStrategy(t, map[string]int{"reports": 2}, lane.FirstFree) // the limit, raised again to 2
	twin := jobMessage(t, "reports", 2, "r-1", 0, 1)
	moved := waiting(t, "reports", "r-1", 1)
	moved.MessageId, moved.ReceiptHandle = "msg-moved-r-1", "AQEB-moved-r-1-receive-1"
	var movedResp events.SQSEventResponse
	var movedErr error
	bound := false
	r.sqs.OnChangeVisibility = func(in *sqs.ChangeMessageVisibilityInput) error {
		if aws.ToString(in.ReceiptHandle) != twin.ReceiptHandle {
			return nil
		}
		if !bound {
			// The moved copy's delivery runs while the twin's claim stands.
			bound = true
			movedResp, movedErr = r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{moved}})
		}
		return &smithy.GenericAPIError{Code: "ReceiptHandleIsInvalid", Message: "The receipt handle has expired.", Fault: smithy.FaultClient}
	}
	resp, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{twin}})
	if err != nil || len(resp.BatchItemFailures) != 1 {
		t.Fatalf("twin: Handle = %+v, %v; want the stale delivery held, never acknowledged", resp, err)
	}
	if got := startNames(r.sfn); len(got) != 0 {
		t.Errorf("starts = %v, want none from a delivery whose message is gone", got)
	}
	if movedErr != nil {
		t.Fatalf("moved copy: Handle error %v", movedErr)
	}
	if ls := r.leases.Leases(); len(movedResp.BatchItemFailures) == 0 && len(copies(t, r)) == 0 && len(ls) == 0 {
		t.Errorf("the moved copy was acknowledged, no copy of the job was sent and no lease holds it: the job is lost")
	}
}

// A twin delivery (Lambda handed the batch over twice; same receipt handle) finds its attempt ended
// without a release and releases it, while a status event's release of the same attempt retries it
// and the other twin claims and starts the next attempt on the same message: the twin's own release
// then finds nothing to do. The message now backs the running attempt, and acknowledging it would
// delete it: that attempt, should it fail, would have no message to be retried from, and the job
// would end neither way (seed 61164 of races).
func TestTwinDoesNotDeleteTheMessageOfTheNextAttempt(t *testing.T) {
	r := newRig(t, nil)
	r.sfn.Put(startedBy(t, execution("reports", 1, "r-1001", 1, sfntypes.ExecutionStatusTimedOut, "States.Timeout", ""), "msg-r-1001"))
	r.leases.Set(leaseOf("reports", 1, "r-1001", 1, lease.Starting, 1))
	next := leaseOf("reports", 1, "r-1001", 2, lease.Starting, 2)
	r.sfn.OnDescribe = func(arn string) error {
		if arn == execArn("reports", "r-1001", 2) {
			r.leases.Set(next) // the status event retried attempt 1, the other twin claimed attempt 2
		}
		return nil
	}
	if acked := deliver(t, r, 2); acked {
		t.Errorf("twin acknowledged: the event source would delete the message attempt 2 runs on")
	}
	for _, d := range r.sqs.Deletes() {
		if d.ReceiptHandle == handle("r-1001", 2) {
			t.Errorf("deleted %+v, the message attempt 2 runs on", d)
		}
	}
	if l, ok := r.leases.Lease(reports1); !ok || l.Attempt != 2 || l.Status != lease.Starting {
		t.Errorf("lease = %+v (%v), want attempt 2's claim", l, ok)
	}
}
