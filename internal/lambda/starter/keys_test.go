package starter_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lane"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
	"github.com/sfnlimit/sfnlimit/internal/lambda/ratelimit"
	"github.com/sfnlimit/sfnlimit/internal/tools/fakes"
)

// newKeyRig is a rig whose type llm has 4 lanes and caps every key at 2.
func newKeyRig(t *testing.T) *rig {
	t.Helper()
	return newKeyRigCapped(t, 2)
}

// newKeyRigCapped is newKeyRig with every key of llm capped at keyCap.
func newKeyRigCapped(t *testing.T, keyCap int) *rig {
	t.Helper()
	return newKeyRigRule(t, keyCap, "")
}

// newKeyRigRule is newKeyRigCapped with the overflow rule rule ("" the default).
func newKeyRigRule(t *testing.T, keyCap int, rule string) *rig {
	t.Helper()
	r := newRigStrategy(t, map[string]int{"llm": 4}, lane.FirstFree)
	res, err := config.NewResolver(config.Defaults{
		Limits: map[string]int{"llm": 4}, KeyLimits: map[string]int{"llm": keyCap}, DefaultMaxAttempts: 3, StateMachineArn: smArn,
		Overflows: map[string]string{"llm": rule},
	}, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	r.st.Config, r.rel.Config = res, res
	return r
}

// keyed is the receive-th delivery of job id of key waiting in group (its key's, or another).
func keyed(t *testing.T, group, key, id string, receive int) events.SQSMessage {
	t.Helper()
	b, _ := json.Marshal(job.Job{Type: "llm", ID: id, Key: key, Input: json.RawMessage(`{}`), SubmittedAt: submitted})
	return message(t, group, id, string(b), receive)
}

// keyedExecution is attempt's execution of job id of key in lane ln of typ, as the starter names it.
func keyedExecution(typ string, ln int, key, id string, attempt int, st sfntypes.ExecutionStatus) fakes.Execution {
	x := execution(typ, ln, id, attempt, st, "", "")
	j := job.Job{Type: typ, ID: id, Key: key, Input: json.RawMessage(`{}`), SubmittedAt: submitted}
	x.Name, x.Input = job.RunName(typ, "", key, id, 0, attempt), string(j.ExecutionInput(ln, attempt).MustJSON())
	return x
}

// A key's batch binds until the key runs its cap, then parks the group marked at its cap though
// lanes are free; another key binds those lanes; a lane freed by the capped key wakes it.
func TestBindStopsAtTheKeyCap(t *testing.T) {
	ctx := context.Background()
	r := newKeyRig(t)
	resp, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{
		keyed(t, "llm#acme", "acme", "a-1", 1), keyed(t, "llm#acme", "acme", "a-2", 1), keyed(t, "llm#acme", "acme", "a-3", 1),
		keyed(t, "llm#acme", "acme", "a-4", 1),
	}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := failures(resp), sorted("msg-a-3", "msg-a-4"); !equal(got, want) {
		t.Errorf("batch item failures = %v, want %v (a-3 parked at the key's cap, a-4 behind it)", got, want)
	}
	ws, err := r.room.List(ctx, "llm")
	if err != nil || len(ws) != 1 || ws[0].JobID != "a-3" || ws[0].Key != "acme" || !ws[0].AtKeyCap || ws[0].Group != "llm#acme" {
		t.Fatalf("parked = %+v, %v; want group llm#acme parked at a-3, at its key's cap", ws, err)
	}
	// Another key binds the lanes acme may not use.
	resp, err = r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{
		keyed(t, "llm#beta", "beta", "b-1", 1), keyed(t, "llm#beta", "beta", "b-2", 1),
	}})
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("beta's batch = %+v, %v; want both bound", resp, err)
	}
	ls, err := r.leases.ListType(ctx, "llm")
	if err != nil {
		t.Fatal(err)
	}
	perKey := map[string]int{}
	for _, l := range ls {
		perKey[l.JobKey]++
	}
	if len(ls) != 4 || perKey["acme"] != 2 || perKey["beta"] != 2 {
		t.Fatalf("leases per key = %v (%d leases), want acme 2, beta 2", perKey, len(ls))
	}
	// One of acme's lanes frees: the wake-up goes to acme, now under its cap.
	for _, l := range ls {
		if l.JobID == "a-1" {
			if err := r.rel.Free(ctx, l); err != nil {
				t.Fatal(err)
			}
		}
	}
	woke := false
	for _, v := range r.sqs.VisibilityChanges() {
		if v.ReceiptHandle == handle("a-3", 1) && v.Timeout == 0 {
			woke = true
		}
	}
	if !woke {
		t.Errorf("visibility changes = %+v, want a-3 woken for acme's freed lane", r.sqs.VisibilityChanges())
	}
	resp, err = r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{
		keyed(t, "llm#acme", "acme", "a-3", 2), keyed(t, "llm#acme", "acme", "a-4", 2),
	}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := failures(resp), sorted("msg-a-4"); !equal(got, want) {
		t.Errorf("batch item failures = %v, want %v (a-3 bound, a-4 at the cap again)", got, want)
	}
}

// A stale delivery of a waiting message (Lambda handed its batch over twice, and the first delivery
// bound the job and acknowledged the message) is not its key's binder: the group's next head is. If
// the twin binds, the two count the key at once, each without the other's lease: with the head
// binding between the twin's read of the leases and its write, a key capped at 1 runs two jobs
// (seed 40034 of races). The twin's bind holds only while its delivery still holds its message.
func TestStaleDeliveryOfAWaitingMessageDoesNotBindBesideItsGroupsHead(t *testing.T) {
	ctx := context.Background()
	r := newKeyRigCapped(t, 1)
	twin := keyed(t, "llm#acme", "acme", "a-1", 1)
	r.sqs.OnChangeVisibility = func(in *sqs.ChangeMessageVisibilityInput) error {
		if *in.ReceiptHandle == twin.ReceiptHandle {
			return &smithy.GenericAPIError{Code: "ReceiptHandleIsInvalid", Message: "The input receipt handle is invalid.", Fault: smithy.FaultClient}
		}
		return nil
	}
	head := *r.st
	stale := *r.st
	stale.Leases = &racingLeases{LeaseStore: r.leases, take: func() {
		// The group's next head, received once a-1's message was deleted, binds after the twin's read.
		if resp, err := head.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{keyed(t, "llm#acme", "acme", "a-2", 1)}}); err != nil || len(resp.BatchItemFailures) != 0 {
			t.Fatalf("head's batch = %+v, %v; want a-2 bound", resp, err)
		}
	}}
	resp, err := stale.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{twin}})
	if err != nil || !equal(failures(resp), []string{"msg-a-1"}) {
		t.Fatalf("twin's batch = %+v, %v; want the stale delivery held, never acknowledged", resp, err)
	}
	ls, err := r.leases.ListType(ctx, "llm")
	if err != nil {
		t.Fatal(err)
	}
	if len(ls) != 1 || ls[0].JobID != "a-2" {
		t.Errorf("leases = %+v, want a-2's alone: acme's cap is 1 and a-1's twin is not its group's binder", ls)
	}
	if c := copies(t, r); len(c) != 1 || c[0].id != "a-2" {
		t.Errorf("copies = %+v, want a-2's alone", c)
	}
}

// A stale delivery's bound lease is not the job's run until its check passes: it may be given back.
// Another message of the job waiting in its key's group (its copy moved back to wait, say) that reads
// that lease meanwhile must not drop itself as a duplicate, or the job is lost when the lease goes:
// its first message acknowledged long ago, the other acknowledged, no lease and no copy left.
func TestMessageOfAJobBoundByAStaleDeliveryIsNotDroppedBeforeTheGiveBack(t *testing.T) {
	ctx := context.Background()
	r := newKeyRigCapped(t, 1)
	twin := keyed(t, "llm#acme", "acme", "a-1", 1)
	moved := keyed(t, "llm#acme", "acme", "a-1", 1)
	moved.MessageId, moved.ReceiptHandle = "msg-a-1-moved", handle("a1moved", 1)
	head := *r.st
	var headResp events.SQSEventResponse
	r.sqs.OnChangeVisibility = func(in *sqs.ChangeMessageVisibilityInput) error {
		if *in.ReceiptHandle != twin.ReceiptHandle {
			return nil
		}
		// Between the twin's lease and its check, the moved copy is its group's head.
		r.sqs.OnChangeVisibility = nil
		var err error
		if headResp, err = head.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{moved}}); err != nil {
			t.Fatal(err)
		}
		return &smithy.GenericAPIError{Code: "ReceiptHandleIsInvalid", Message: "The input receipt handle is invalid.", Fault: smithy.FaultClient}
	}
	resp, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{twin}})
	if err != nil || !equal(failures(resp), []string{"msg-a-1"}) {
		t.Fatalf("twin's batch = %+v, %v; want the stale delivery held", resp, err)
	}
	ls, err := r.leases.ListType(ctx, "llm")
	if err != nil {
		t.Fatal(err)
	}
	heldOn := equal(failures(headResp), []string{"msg-a-1-moved"})
	running := len(ls) == 1 && ls[0].JobID == "a-1" && len(copies(t, r)) == 1
	if heldOn == running {
		t.Errorf("moved copy held: %v; leases %+v, copies %+v: want a-1 either waiting in its moved copy or bound with its copy sent, once", heldOn, ls, copies(t, r))
	}
}

// staleBindBesideHead is a rig whose key acme (cap 1) runs a-2, claimed in lane 2 by its group's head,
// beside a-1's lease bound in lane 1 by a stale delivery whose read came before a-2's bind; it
// returns the rig and that bound lease.
func staleBindBesideHead(t *testing.T) (*rig, lease.Lease) {
	t.Helper()
	r := newKeyRigCapped(t, 1)
	head := leaseOf("llm", 2, "a-2", 1, lease.Starting, 1)
	head.JobKey = "acme"
	stale := leaseOf("llm", 1, "a-1", 0, lease.Bound, 1)
	stale.JobKey, stale.KeyCap, stale.TypeLimit = "acme", 1, 4
	r.leases.Set(head)
	r.leases.Set(stale)
	return r, stale
}

// A moved copy (more attempts than the lease) takes over a job's bound lease and sends its copy
// (Starter.behindCopy), as its bind would. A stale delivery's bind, counted from leases read before
// the group's head bound another job of the key, holds one more of the key than its cap until the
// stale delivery gives it back: taken over then, its copy would start beside the head's job. Over
// the key's cap, the moved copy waits for the lease to be given back (or claimed) instead.
func TestMovedCopyDoesNotTakeOverAStaleBindOverItsKeysCap(t *testing.T) {
	ctx := context.Background()
	r, stale := staleBindBesideHead(t)
	b, _ := json.Marshal(job.Job{Type: "llm", ID: "a-1", Key: "acme", Attempts: 1, Input: json.RawMessage(`{}`), SubmittedAt: submitted})
	moved := message(t, "llm#acme", "a-1", string(b), 1)
	moved.MessageId = "msg-a-1-moved"
	resp, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{moved}})
	if err != nil || !equal(failures(resp), []string{"msg-a-1-moved"}) {
		t.Fatalf("Handle = %+v, %v; want the moved copy held", resp, err)
	}
	if c := copies(t, r); len(c) != 0 {
		t.Errorf("copies = %+v, want none: acme runs a-2, its cap of 1", c)
	}
	if l, ok := r.leases.Lease(lease.Key{Type: "llm", Lane: 1}); !ok || l.Version != stale.Version {
		t.Errorf("lane 1 = %+v, want the stale bind's lease as it was, for its delivery to give back", l)
	}
}

// A delivery that finds its own message's bound lease sends that bind's copy again (its bind may have
// stopped before the send). A stale delivery (Lambda handed the batch over three times) must not: the
// lease may be another stale delivery's bind, counted before the group's head bound another job of
// the key, and sent, its copy would claim it before that delivery gives it back. The message was
// acknowledged by the delivery that sent the job's copy, or is delivered again, and that delivery
// sends it.
func TestStaleDeliveryDoesNotSendTheCopyOfItsMessagesBind(t *testing.T) {
	ctx := context.Background()
	r, _ := staleBindBesideHead(t)
	twin := keyed(t, "llm#acme", "acme", "a-1", 1)
	r.sqs.OnChangeVisibility = func(in *sqs.ChangeMessageVisibilityInput) error {
		if *in.ReceiptHandle == twin.ReceiptHandle {
			return &smithy.GenericAPIError{Code: "ReceiptHandleIsInvalid", Message: "The input receipt handle is invalid.", Fault: smithy.FaultClient}
		}
		return nil
	}
	resp, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{twin}})
	if err != nil || !equal(failures(resp), []string{"msg-a-1"}) {
		t.Fatalf("Handle = %+v, %v; want the stale delivery held", resp, err)
	}
	if c := copies(t, r); len(c) != 0 {
		t.Errorf("copies = %+v, want none from a stale delivery: acme runs a-2, its cap of 1", c)
	}
}

// A bind whose check of its message fails (a throttled ChangeMessageVisibility) cannot tell whether
// its delivery is stale. No copy went, so it gives the lane back: kept, a stale delivery's lease
// would count the key and idle the lane until the sweep took it back.
func TestBindWhoseMessageCheckFailsGivesTheLaneBack(t *testing.T) {
	ctx := context.Background()
	r := newKeyRigCapped(t, 1)
	r.sqs.OnChangeVisibility = func(in *sqs.ChangeMessageVisibilityInput) error {
		return &smithy.GenericAPIError{Code: "ThrottlingException", Message: "Rate exceeded", Fault: smithy.FaultClient}
	}
	resp, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{keyed(t, "llm#acme", "acme", "a-1", 1)}})
	if err != nil || !equal(failures(resp), []string{"msg-a-1"}) {
		t.Fatalf("Handle = %+v, %v; want the delivery held, to bind again", resp, err)
	}
	if ls := r.leases.Leases(); len(ls) != 0 {
		t.Errorf("leases = %+v, want none: the bind sent no copy, so its lane goes back", ls)
	}
	if c := copies(t, r); len(c) != 0 {
		t.Errorf("copies = %+v, want none", c)
	}
}

// A default-key job that waits in one of the type's other waiting groups (routed before the type
// had a key limit) moves to the type's first group, where one binder counts the default key.
func TestDefaultKeyMovesToItsOneGroup(t *testing.T) {
	ctx := context.Background()
	r := newKeyRig(t)
	resp, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{keyed(t, "llm-w1", "", "d-1", 1)}})
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("Handle = %+v, %v; want the message acknowledged", resp, err)
	}
	cs := copies(t, r)
	if len(cs) != 1 || cs[0].group != "llm-0" || cs[0].id != "d-1" {
		t.Fatalf("copies = %+v, want d-1 sent to llm-0", cs)
	}
	if ls, _ := r.leases.ListType(ctx, "llm"); len(ls) != 0 {
		t.Errorf("leases = %+v, want none: the job binds from its new group", ls)
	}
	// A keyed job in the wrong group moves to its key's.
	if _, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{keyed(t, "llm-0", "acme", "a-9", 1)}}); err != nil {
		t.Fatal(err)
	}
	if cs := copies(t, r); len(cs) != 2 || cs[1].group != "llm#acme" {
		t.Fatalf("copies = %+v, want a-9 sent to llm#acme", cs)
	}
	// In their groups they bind, each lease naming its key.
	for _, m := range []events.SQSMessage{keyed(t, "llm-0", "", "d-1", 1), keyed(t, "llm#acme", "acme", "a-9", 1)} {
		if resp, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{m}}); err != nil || len(resp.BatchItemFailures) != 0 {
			t.Fatalf("Handle(%s) = %+v, %v", m.MessageId, resp, err)
		}
	}
	ls, _ := r.leases.ListType(ctx, "llm")
	keys := map[string]string{}
	for _, l := range ls {
		if l.Status != lease.Bound {
			t.Errorf("lease %+v, want bound", l)
		}
		keys[l.JobID] = l.JobKey
	}
	if len(keys) != 2 || keys["d-1"] != "" || keys["a-9"] != "acme" {
		t.Errorf("bound jobs and keys = %v, want d-1 (default key) and a-9 (acme)", keys)
	}
}

// A job of a type that caps keys reaching a free lane without a bind (routed straight to a lane
// before its type capped keys, as the random strategy does with its whole backlog, or a copy whose
// bind was taken back) must not start there: only a bind counts its key's running jobs. It goes to
// its key's waiting group, and the lane stays free; unless this very message made an attempt in the
// lane whose lease is gone (deleted by hand), which goes on there as in TestRewaitGoesOnFromTheMessagesOwnAttempts.
func TestJobInALaneWaitsForItsKeyCap(t *testing.T) {
	for _, tt := range []struct {
		name       string
		receive    int
		own        sfntypes.ExecutionStatus // this message's attempt 1 in lane 3 ("": none)
		wantMoved  bool
		wantHeld   bool
		wantLease3 bool
		wantCount  int // attempts the moved copy carries
	}{
		{name: "first delivery moves to its key's group", receive: 1, wantMoved: true},
		{name: "a later delivery without an attempt moves too", receive: 2, wantMoved: true},
		{name: "its own running attempt stays in the lane", receive: 2, own: sfntypes.ExecutionStatusRunning, wantHeld: true, wantLease3: true},
		// Retried in the lane, the job would run a third execution of acme, capped at 2: it waits
		// for its key's cap in its key's group, with the attempt it made (issue 22, defect 2).
		{name: "its own failed attempt moves with its count", receive: 2, own: sfntypes.ExecutionStatusFailed, wantMoved: true, wantCount: 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			r := newKeyRig(t)
			for ln, id := range map[int]string{1: "a-1", 2: "a-2"} {
				l := leaseOf("llm", ln, id, 1, lease.Starting, 1)
				l.JobKey = "acme"
				r.leases.Set(l)
			}
			m := keyed(t, job.GroupID("llm", 3), "acme", "a-3", tt.receive)
			if tt.own != "" {
				x := keyedExecution("llm", 3, "acme", "a-3", 1, tt.own)
				x.Input = withMessageID(t, x.Input, m.MessageId)
				r.sfn.Put(x)
			}
			resp, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{m}})
			if err != nil {
				t.Fatal(err)
			}
			if held := len(resp.BatchItemFailures) == 1; held != tt.wantHeld {
				t.Errorf("held = %v, want %v", held, tt.wantHeld)
			}
			if got := startNames(r.sfn); len(got) != 0 {
				t.Errorf("starts = %v, want none: acme runs its cap of 2 already", got)
			}
			cs := copies(t, r)
			if moved := len(cs) == 1 && cs[0].group == "llm#acme" && cs[0].id == "a-3"; moved != tt.wantMoved || len(cs) > 1 {
				t.Errorf("copies = %+v, want a-3 sent to its key's group llm#acme: %v", cs, tt.wantMoved)
			}
			if tt.wantMoved && len(cs) == 1 && cs[0].attempt != tt.wantCount {
				t.Errorf("moved copy carries %d attempts, want %d", cs[0].attempt, tt.wantCount)
			}
			if _, ok := r.leases.Lease(lease.Key{Type: "llm", Lane: 3}); ok != tt.wantLease3 {
				t.Errorf("lane 3 holds a lease: %v, want %v", ok, tt.wantLease3)
			}
			if got, want := deleted(r.sqs), []string{handle("a-3", tt.receive)}; tt.wantMoved && !equal(got, want) {
				t.Errorf("deleted = %v, want the original in the lane %v", got, want)
			}
		})
	}
}

// A key's cap lowered under its running jobs holds from the next start, and a retry is one: a job
// whose attempt failed in its lane retries there only while its key runs under its cap. Over it,
// the job waits in its key's group with the attempts it made (found by the simulation at seed 74 of
// actions+skew+kill+events: a retry in place ran 2 executions of a key whose cap was lowered to 1).
func TestRetryWaitsWhenItsKeysCapWasLowered(t *testing.T) {
	ctx := context.Background()
	r := newKeyRigCapped(t, 1)
	running := leaseOf("llm", 1, "a-1", 1, lease.Starting, 1)
	running.JobKey = "acme"
	r.leases.Set(running)
	retrying := leaseOf("llm", 2, "a-2", 1, lease.Retrying, 1)
	retrying.JobKey = "acme"
	r.leases.Set(retrying)
	resp, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{keyed(t, job.GroupID("llm", 2), "acme", "a-2", 2)}})
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("Handle = %+v, %v; want a-2 moved (acknowledged)", resp, err)
	}
	if got := startNames(r.sfn); len(got) != 0 {
		t.Errorf("starts = %v, want none: acme runs its cap of 1 already", got)
	}
	if cs := copies(t, r); len(cs) != 1 || cs[0].group != "llm#acme" || cs[0].attempt != 1 {
		t.Errorf("copies = %+v, want a-2 sent to llm#acme with its 1 attempt", cs)
	}
	if l, ok := r.leases.Lease(lease.Key{Type: "llm", Lane: 2}); ok {
		t.Errorf("lane 2 holds %+v, want it free", l)
	}
	// Under its cap, a retry goes on in its lane as always.
	r.leases.Remove(running.Key())
	r.leases.Set(retrying)
	if _, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{keyed(t, job.GroupID("llm", 2), "acme", "a-2", 3)}}); err != nil {
		t.Fatal(err)
	}
	if got := startNames(r.sfn); len(got) != 1 || got[0] != job.RunName("llm", "", "acme", "a-2", 0, 2) {
		t.Errorf("starts = %v, want a-2's attempt 2 in its lane", got)
	}
}

// A job bound under a key cap of 2 whose cap is lowered to 1 before its copy's claim (a limit lowered
// under the key cap, a `config set --key-limit`): its first start is a new execution of its key, as a
// retry is, and the cap in force holds from it. Found by the simulation (seed 237 of races: two jobs
// of key k2 bound in one batch under cap 2, their copies' claims delayed 5 minutes by a killed
// delivery, then both started under cap 1). The bind records the cap it counted under; a claim under
// a lower cap counts its key again, and over it the job waits in its key's group.
func TestBoundJobWaitsWhenItsKeysCapWasLoweredSinceItsBind(t *testing.T) {
	for _, tt := range []struct {
		name      string
		boundCap  int // the cap the bind recorded (0: a bind that recorded none)
		wantMoved bool
	}{
		{name: "bound under cap 2, cap now 1", boundCap: 2, wantMoved: true},
		{name: "bound without a recorded cap", boundCap: 0, wantMoved: true},
		{name: "bound under the cap in force", boundCap: 1, wantMoved: false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			r := newKeyRigCapped(t, 1)
			if tt.wantMoved || tt.boundCap == 1 {
				running := leaseOf("llm", 1, "a-1", 1, lease.Starting, 1)
				running.JobKey = "acme"
				r.leases.Set(running)
			}
			b := leaseOf("llm", 2, "a-2", 0, lease.Bound, 1)
			b.JobKey, b.KeyCap = "acme", tt.boundCap
			r.leases.Set(b)
			m := keyed(t, job.GroupID("llm", 2), "acme", "a-2", 1)
			m.Attributes["MessageDeduplicationId"] = job.BoundDedupID("llm", "", "acme", "a-2", 0, 2, b.MessageID, b.StartedAt.UnixNano())
			if _, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{m}}); err != nil {
				t.Fatal(err)
			}
			starts := startNames(r.sfn)
			if tt.wantMoved {
				if len(starts) != 0 {
					t.Errorf("starts = %v, want none: acme runs its cap of 1 already", starts)
				}
				if cs := copies(t, r); len(cs) != 1 || cs[0].group != "llm#acme" {
					t.Errorf("copies = %+v, want a-2 sent back to llm#acme", cs)
				}
				return
			}
			// Bound under the cap in force: its bind counted the key, and the claim trusts it.
			if len(starts) != 1 {
				t.Errorf("starts = %v, want a-2 started", starts)
			}
		})
	}
}

// The same for a claim whose start never went through (its invocation killed after the claim's
// write): its next delivery would start the attempt, a new execution of its key, so it counts the
// key too. A claim whose execution runs is left to run (found by the simulation's long run, seed
// 2436 of all: a key reset to a cap of 1 while such a claim waited, then 2 executions of the key).
func TestUnstartedClaimWaitsWhenItsKeysCapWasLowered(t *testing.T) {
	for _, tt := range []struct {
		name      string
		execution bool
		wantMoved bool
	}{
		{name: "never started: moved with its attempts", wantMoved: true},
		{name: "its execution runs: held in its lane", execution: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			r := newKeyRigCapped(t, 1)
			running := leaseOf("llm", 1, "a-1", 1, lease.Starting, 1)
			running.JobKey = "acme"
			r.leases.Set(running)
			claim := leaseOf("llm", 2, "a-2", 2, lease.Starting, 2)
			claim.JobKey = "acme"
			r.leases.Set(claim) // written 20 minutes ago, past DescribeSettle
			m := keyed(t, job.GroupID("llm", 2), "acme", "a-2", 3)
			if tt.execution {
				x := execution("llm", 2, "a-2", 2, sfntypes.ExecutionStatusRunning, "", "")
				x.Input = withMessageID(t, x.Input, m.MessageId)
				r.sfn.Put(x)
			}
			if _, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{m}}); err != nil {
				t.Fatal(err)
			}
			if got := startNames(r.sfn); len(got) != 0 {
				t.Errorf("starts = %v, want none: acme runs its cap of 1", got)
			}
			cs := copies(t, r)
			if moved := len(cs) == 1 && cs[0].group == "llm#acme" && cs[0].attempt == 1; moved != tt.wantMoved {
				t.Errorf("copies = %+v, want a-2 moved to llm#acme with its 1 attempt: %v", cs, tt.wantMoved)
			}
			if _, held := r.leases.Lease(lease.Key{Type: "llm", Lane: 2}); held == tt.wantMoved {
				t.Errorf("lane 2 held: %v, want %v", held, !tt.wantMoved)
			}
		})
	}
}

// newKeyRateRig is a rig whose type llm has 4 lanes, no key caps, and rates given by the override.
func newKeyRateRig(t *testing.T, o config.Override) *rig {
	t.Helper()
	r := newRigStrategy(t, map[string]int{"llm": 4}, lane.FirstFree)
	buckets := ratelimit.New(fakes.NewDynamoDB("table"), "table")
	buckets.Now = r.clock.Now
	r.st.Rates, r.rel.Rates = buckets, buckets
	o.Type = "llm"
	withLiveConfig(t, r, &liveConfig{list: []config.Override{o}}, config.Defaults{Limits: map[string]int{"llm": 4}, DefaultMaxAttempts: 3, StateMachineArn: smArn})
	return r
}

// A key with a start rate binds at most its burst at once: the next job of the key waits in its
// key's group for its token, holding no lane, and spending none of its type's tokens, and binds once
// its token is due, while another key binds with the type's tokens left.
func TestKeyRateHoldsTheKeyInItsGroupNotInALane(t *testing.T) {
	ctx := context.Background()
	noisy := config.Rate{PerSecond: 0.5, Burst: 1}
	r := newKeyRateRig(t, config.Override{KeyRates: map[string]config.Rate{"noisy": noisy}, Rate: config.Rate{PerSecond: 0.5, Burst: 2}})
	resp, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{
		keyed(t, "llm#noisy", "noisy", "n-1", 1), keyed(t, "llm#noisy", "noisy", "n-2", 1), keyed(t, "llm#noisy", "noisy", "n-3", 1),
	}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := failures(resp), sorted("msg-n-2", "msg-n-3"); !equal(got, want) {
		t.Errorf("batch item failures = %v, want %v (n-2 waits for its key's token, n-3 behind it)", got, want)
	}
	if c := copies(t, r); len(c) != 1 || c[0].id != "n-1" {
		t.Errorf("copies = %+v, want only n-1 bound (the key's burst of 1)", c)
	}
	if ls := r.leases.Leases(); len(ls) != 1 {
		t.Errorf("leases = %+v, want n-1's only: a job waiting for its key's token holds no lane", ls)
	}
	waited := false
	for _, v := range decisions(r.sqs) {
		waited = waited || (v.ReceiptHandle == handle("n-2", 1) && v.Timeout >= 2 && v.Timeout <= 3)
	}
	if !waited {
		t.Errorf("visibility changes = %+v, want n-2 back in 2-3 s (a token every 2 s)", decisions(r.sqs))
	}
	// The type's burst of 2: n-1 took one, n-2 (waiting for its key's) none, so quiet's first job
	// binds with the other, and its second waits for the type's next.
	resp, err = r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{
		keyed(t, "llm#quiet", "quiet", "q-1", 1), keyed(t, "llm#quiet", "quiet", "q-2", 1),
	}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := failures(resp), sorted("msg-q-2"); !equal(got, want) {
		t.Errorf("quiet's batch item failures = %v, want %v: q-1 bound with the type's token n-2 left, q-2 waiting for the next", got, want)
	}
	r.clock.Advance(2 * time.Second)
	resp, err = r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{keyed(t, "llm#noisy", "noisy", "n-2", 2)}})
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Errorf("n-2 once its key's token is due = %+v, %v; want it bound", resp, err)
	}
	var ids []string
	for _, c := range copies(t, r) {
		ids = append(ids, c.id)
	}
	if want := sorted("n-1", "q-1", "n-2"); !equal(sorted(ids...), want) {
		t.Errorf("bound = %v, want %v", ids, want)
	}
}

// A retry is a new start, and takes a token of its key in its lane (no bind took one for it); a
// bound job's copy whose lease records its bind's token does not take a second one.
func TestKeyRateCountsRetriesNotBoundCopies(t *testing.T) {
	ctx := context.Background()
	r := newKeyRateRig(t, config.Override{KeyRate: config.Rate{PerSecond: 1.0 / 60, Burst: 1}})
	retrying := leaseOf("llm", 2, "a-1", 1, lease.Retrying, 1)
	retrying.JobKey = "acme"
	r.leases.Set(retrying)
	b, _ := json.Marshal(job.Job{Type: "llm", ID: "a-1", Key: "acme", Input: json.RawMessage(`{}`), SubmittedAt: submitted, Attempts: 1})
	if _, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{message(t, job.GroupID("llm", 2), "a-1", string(b), 2)}}); err != nil {
		t.Fatal(err)
	}
	if got := startNames(r.sfn); len(got) != 1 {
		t.Fatalf("starts = %v, want a-1's retry with acme's one token", got)
	}
	bound := boundLease("llm", 3, "a-2")
	bound.JobKey, bound.KeyToken = "acme", true // its bind took the key's token
	r.leases.Set(bound)
	if _, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{keyed(t, job.GroupID("llm", 3), "acme", "a-2", 1)}}); err != nil {
		t.Fatal(err)
	}
	if got := startNames(r.sfn); len(got) != 2 {
		t.Errorf("starts = %v, want a-2's bound copy started: its bind took its key's token", got)
	}
	retrying = leaseOf("llm", 4, "a-3", 1, lease.Retrying, 1)
	retrying.JobKey = "acme"
	r.leases.Set(retrying)
	b, _ = json.Marshal(job.Job{Type: "llm", ID: "a-3", Key: "acme", Input: json.RawMessage(`{}`), SubmittedAt: submitted, Attempts: 1})
	if _, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{message(t, job.GroupID("llm", 4), "a-3", string(b), 2)}}); err != nil {
		t.Fatal(err)
	}
	if got := startNames(r.sfn); len(got) != 2 {
		t.Errorf("starts = %v, want a-3's retry waiting for acme's next token", got)
	}
}

// A key's start rate must not let the key hold lanes other keys could start in ("a noisy tenant's
// burst must not use up the type's..."): a retry of a key out of tokens waits in its lane, holding
// it with its retrying lease for as long as its key's next token is due (a minute here), while
// another key's job, whose key has tokens, finds every lane taken and parks. A first start waits in
// its key's group holding no lane (bindFree); a retry should too, or give its lane up meanwhile.
func TestKeyRateRetryDoesNotHoldALaneWhileItsKeyWaits(t *testing.T) {
	ctx := context.Background()
	noisy := config.Rate{PerSecond: 1.0 / 60, Burst: 1}
	r := newKeyRateRig(t, config.Override{KeyRates: map[string]config.Rate{"noisy": noisy}})
	if wait, err := r.st.Rates.TakeKey(ctx, "llm", "noisy", ratelimit.Rate{PerSecond: noisy.PerSecond, Burst: noisy.Burst}); err != nil || wait != 0 {
		t.Fatalf("spending noisy's burst = %v, %v", wait, err)
	}
	for ln, id := range map[int]string{1: "o-1", 2: "o-2", 3: "o-3"} {
		l := leaseOf("llm", ln, id, 1, lease.Starting, 1)
		l.JobKey = "other"
		r.leases.Set(l)
		r.sfn.Put(keyedExecution("llm", ln, "other", id, 1, sfntypes.ExecutionStatusRunning))
	}
	retrying := leaseOf("llm", 4, "n-1", 1, lease.Retrying, 1)
	retrying.JobKey = "noisy"
	r.leases.Set(retrying)
	b, _ := json.Marshal(job.Job{Type: "llm", ID: "n-1", Key: "noisy", Input: json.RawMessage(`{}`), SubmittedAt: submitted, Attempts: 1})
	if _, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{message(t, job.GroupID("llm", 4), "n-1", string(b), 2)}}); err != nil {
		t.Fatal(err)
	}
	if got := startNames(r.sfn); len(got) != 0 {
		t.Fatalf("starts = %v, want none: noisy's next token is a minute away", got)
	}
	resp, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{keyed(t, "llm#quiet", "quiet", "q-1", 1)}})
	if err != nil {
		t.Fatal(err)
	}
	bound := false
	for _, c := range copies(t, r) {
		bound = bound || c.id == "q-1"
	}
	if !bound {
		l, _ := r.leases.Lease(lease.Key{Type: "llm", Lane: 4})
		t.Errorf("q-1 (key quiet, tokens to spare) not bound (failures %v): lane 4 stays held by noisy's retry waiting a minute for its key's token (%s %s)", failures(resp), l.JobID, l.Status)
	}
}

// A key's job finds every lane taken and parks (its group's record written), then looks again and
// finds a lane freed meanwhile, but its key's token is not due: it waits for the token, visible
// again when it is due. Its parked record must go, as a bind's does: left behind (a first receive
// has no deferred unpark), the next release wakes this group for nothing, instead of a group
// parked for the lane, which waits out its ParkFor (60 s) beside an idle lane.
func TestKeyWaitingForItsTokenAfterParkingLeavesNoParkedRecord(t *testing.T) {
	ctx := context.Background()
	noisy := config.Rate{PerSecond: 0.1, Burst: 1}
	r := newKeyRateRig(t, config.Override{KeyRates: map[string]config.Rate{"noisy": noisy}})
	if wait, err := r.st.Rates.TakeKey(ctx, "llm", "noisy", ratelimit.Rate{PerSecond: noisy.PerSecond, Burst: noisy.Burst}); err != nil || wait != 0 {
		t.Fatalf("spending noisy's burst = %v, %v", wait, err)
	}
	var busy lease.Lease
	for ln := 1; ln <= 4; ln++ {
		l := leaseOf("llm", ln, "o-"+string(rune('0'+ln)), 1, lease.Starting, 1)
		l.JobKey = "other"
		l = r.leases.Set(l)
		if ln == 4 {
			busy = l
		}
	}
	r.st.WaitRoom = parkHook{r.room, func() {
		if err := r.leases.Delete(ctx, busy); err != nil { // a release lands between the looks
			t.Error(err)
		}
	}}
	if _, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{keyed(t, "llm#noisy", "noisy", "n-1", 1)}}); err != nil {
		t.Fatal(err)
	}
	if c := copies(t, r); len(c) != 0 {
		t.Fatalf("copies = %+v, want none: noisy's token is 10 s away", c)
	}
	if ws, err := r.room.List(ctx, "llm"); err != nil || len(ws) != 0 {
		t.Errorf("parked records = %+v, %v; want none: the group waits for its key's token, not for a lane", ws, err)
	}
}

// A key's and its type's tokens are both taken at the bind, so its copy starts as soon as it is
// delivered: a job whose type has no token left waits in its key's group (no lane, no key token
// spent on a bind that would wait), and two jobs of a key never start in one instant beyond its
// burst, however the type's tokens come.
func TestKeyRateBoundsStartsNotBinds(t *testing.T) {
	ctx := context.Background()
	noisy := config.Rate{PerSecond: 0.1, Burst: 1}
	typeRate := config.Rate{PerSecond: 0.01, Burst: 2}
	r := newKeyRateRig(t, config.Override{KeyRates: map[string]config.Rate{"noisy": noisy}, Rate: typeRate})
	for i := 0; i < 2; i++ { // other keys spent the type's burst
		if w, err := r.st.Rates.Take(ctx, "llm", ratelimit.Rate{PerSecond: typeRate.PerSecond, Burst: typeRate.Burst}); err != nil || w != 0 {
			t.Fatalf("spending the type's burst = %v, %v", w, err)
		}
	}
	resp, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{keyed(t, "llm#noisy", "noisy", "n-1", 1)}})
	if err != nil || !equal(failures(resp), sorted("msg-n-1")) {
		t.Fatalf("n-1 with no type token left = %+v, %v; want it waiting in its group", resp, err)
	}
	if c, ls := copies(t, r), r.leases.Leases(); len(c) != 0 || len(ls) != 0 {
		t.Fatalf("copies %+v, leases %+v; want none: the job waits in its key's group, holding no lane", c, ls)
	}
	r.clock.Advance(200 * time.Second) // the type's bucket refills (2 tokens)
	for _, id := range []string{"n-1", "n-2"} {
		if _, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{keyed(t, "llm#noisy", "noisy", id, 2)}}); err != nil {
			t.Fatal(err)
		}
	}
	var msgs []events.SQSMessage
	for _, cp := range copies(t, r) {
		msgs = append(msgs, keyed(t, job.GroupID("llm", cp.lane), "noisy", cp.id, 1))
	}
	if _, err := r.st.Handle(ctx, events.SQSEvent{Records: msgs}); err != nil {
		t.Fatal(err)
	}
	if got := startNames(r.sfn); len(got) != 1 {
		t.Errorf("starts of key noisy at one instant = %v: want 1, its burst", got)
	}
}

// A bind takes its key's token, then its type's: when the type's is not due (other keys spend it as
// it comes), the key's token is spent for nothing and the job goes back to wait. It comes back when
// the type's token is due, but its key's is not (it just spent one), and when its key's is due, the
// type's was taken by the other keys when it came due. A key whose rate is well within its type's
// (one start per 62 s, the type one per 5 s) so starts far below its rate, its tokens spent on binds
// that wait: here 4 binds in 620 s, where its rate allows 10 (a copy waiting in its lane for the
// type's token with its key's in hand, as before tokens moved to the bind, would contend for each of
// the type's tokens). The other keys are modelled as heads that take the type's token in the second
// it comes due, after noisy's head when both are there.
func TestKeyRateIsNotStarvedByItsTypesRate(t *testing.T) {
	ctx := context.Background()
	noisy := config.Rate{PerSecond: 1.0 / 62, Burst: 1}
	typeRate := config.Rate{PerSecond: 0.2, Burst: 1}
	r := newKeyRateRig(t, config.Override{KeyRates: map[string]config.Rate{"noisy": noisy}, Rate: typeRate})
	r.st.Jitter = func(int64) int64 { return 0 }
	takeType := func() { // the other keys' heads, always one waiting for the type's next token
		_, _ = r.st.Rates.Take(ctx, "llm", ratelimit.Rate{PerSecond: typeRate.PerSecond, Burst: typeRate.Burst})
	}
	takeType()
	head, recv, due, bound := 1, 0, time.Duration(0), 0
	for at := time.Duration(0); at < 620*time.Second; at += time.Second {
		if at > 0 {
			r.clock.Advance(time.Second)
		}
		if at >= due { // noisy's head is visible again: first in its second
			id := fmt.Sprintf("n-%d", head)
			recv++
			if _, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{keyed(t, "llm#noisy", "noisy", id, recv)}}); err != nil {
				t.Fatal(err)
			}
			if ls := r.leases.Leases(); len(ls) > 0 { // bound: its copy starts at once; its lane freed when it ends
				for _, l := range ls {
					if err := r.leases.Delete(ctx, l); err != nil {
						t.Fatal(err)
					}
				}
				bound++
				head, recv = head+1, 0
			} else {
				var wait int32 = -1
				for _, v := range decisions(r.sqs) {
					if v.ReceiptHandle == handle(id, recv) {
						wait = v.Timeout
					}
				}
				if wait < 0 {
					t.Fatalf("%s at %v neither bound nor put back", id, at)
				}
				due = at + time.Duration(wait)*time.Second
			}
		}
		takeType()
	}
	if bound < 8 {
		t.Errorf("key noisy bound %d jobs in 620 s at a rate of one per 62 s (10 tokens), its type's tokens coming every 5 s: its key's tokens are spent on binds whose type's token is not due", bound)
	}
}

// A release wakes one parked group per lane it frees. The woken head takes its key's token, then
// finds its type's not due: it goes back to wait, the key's token spent, and its record gone. When
// the type's token is due it is back, but its key's is not (a minute away), so the freed lane idles,
// while another key's group, whose key has tokens, stays parked until its ParkFor ends (60 s): the
// lane is free for 55 s with the type's token due and a job that may run waiting. (Before tokens
// moved to the bind, the woken head bound the lane with its key's token and started as soon as the
// type's was due.)
func TestWokenHeadWaitingForTokensLeavesNoLaneIdle(t *testing.T) {
	ctx := context.Background()
	noisy := config.Rate{PerSecond: 1.0 / 60, Burst: 1}
	typeRate := config.Rate{PerSecond: 0.2, Burst: 1}
	r := newKeyRateRig(t, config.Override{KeyRates: map[string]config.Rate{"noisy": noisy}, Rate: typeRate})
	r.st.Jitter = func(int64) int64 { return 0 }
	var busy lease.Lease
	for ln := 1; ln <= 4; ln++ {
		l := leaseOf("llm", ln, fmt.Sprintf("o-%d", ln), 1, lease.Starting, 1)
		l.JobKey = "other"
		l = r.leases.Set(l)
		r.sfn.Put(keyedExecution("llm", ln, "other", l.JobID, 1, sfntypes.ExecutionStatusRunning))
		if ln == 4 {
			busy = l
		}
	}
	for _, m := range []events.SQSMessage{keyed(t, "llm#noisy", "noisy", "n-1", 1), keyed(t, "llm#quiet", "quiet", "q-1", 1)} {
		if _, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{m}}); err != nil {
			t.Fatal(err)
		}
		r.clock.Advance(time.Second)
	}
	if ws, err := r.room.List(ctx, "llm"); err != nil || len(ws) != 2 {
		t.Fatalf("parked = %+v, %v; want noisy's and quiet's groups parked for a lane", ws, err)
	}
	// Another key's job spends the type's token (due again in 5 s); then lane 4 frees.
	if w, err := r.st.Rates.Take(ctx, "llm", ratelimit.Rate{PerSecond: typeRate.PerSecond, Burst: typeRate.Burst}); err != nil || w != 0 {
		t.Fatalf("spending the type's token = %v, %v", w, err)
	}
	if err := r.rel.Free(ctx, busy); err != nil {
		t.Fatal(err)
	}
	woken := func(h string) bool {
		for _, v := range r.sqs.VisibilityChanges() {
			if v.ReceiptHandle == h && v.Timeout == 0 {
				return true
			}
		}
		return false
	}
	if !woken(handle("n-1", 1)) {
		t.Fatalf("visibility changes = %+v, want noisy's group woken first (parked first)", r.sqs.VisibilityChanges())
	}
	if _, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{keyed(t, "llm#noisy", "noisy", "n-1", 2)}}); err != nil {
		t.Fatal(err)
	}
	r.clock.Advance(5 * time.Second) // the type's token is due
	if _, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{keyed(t, "llm#noisy", "noisy", "n-1", 3)}}); err != nil {
		t.Fatal(err)
	}
	if _, held := r.leases.Lease(lease.Key{Type: "llm", Lane: 4}); !held && !woken(handle("q-1", 1)) {
		ws, _ := r.room.List(ctx, "llm")
		t.Errorf("lane 4 free with the type's token due, noisy's head waiting for its key's next token (copies %+v, decisions %+v), and quiet's group still parked (%+v), not woken: the lane idles until quiet's park ends", copies(t, r), decisions(r.sqs), ws)
	}
}

// racingLeases is the lease store with another binder taking lane ln just after a read of the
// type's leases, once.
type racingLeases struct {
	*fakes.LeaseStore
	take func()
}

func (s *racingLeases) ListType(ctx context.Context, typ string) ([]lease.Lease, error) {
	ls, err := s.LeaseStore.ListType(ctx, typ)
	if s.take != nil {
		take := s.take
		s.take = nil
		take()
	}
	return ls, err
}

// A bind takes its tokens once its read of the leases shows a lane free, before its conditional
// write: a lane another group's binder took since that read fails the write, and the job parks with
// its tokens spent, no start made with them. When a lane frees and the release wakes it, the next
// token is a minute away: the freed lane idles while the job that may run waits for a token no
// start used (the type's: new with tokens at the bind; its key's: since key tokens were).
func TestBindLosingItsLaneKeepsItsTokens(t *testing.T) {
	slow := config.Rate{PerSecond: 1.0 / 60, Burst: 1}
	for _, tt := range []struct {
		name string
		o    config.Override
	}{
		{"type rate", config.Override{Rate: slow}},
		{"key rate", config.Override{KeyRates: map[string]config.Rate{"noisy": slow}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			r := newKeyRateRig(t, tt.o)
			r.st.Jitter = func(int64) int64 { return 0 }
			for ln := 1; ln <= 3; ln++ {
				l := leaseOf("llm", ln, fmt.Sprintf("o-%d", ln), 1, lease.Starting, 1)
				l.JobKey = "other"
				r.leases.Set(l)
			}
			var racer lease.Lease
			r.st.Leases = &racingLeases{LeaseStore: r.leases, take: func() {
				b := boundLease("llm", 4, "o-4")
				b.JobKey = "other"
				racer = r.leases.Set(b) // another group's binder takes lane 4 after noisy's read
			}}
			if _, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{keyed(t, "llm#noisy", "noisy", "n-1", 1)}}); err != nil {
				t.Fatal(err)
			}
			if c := copies(t, r); len(c) != 0 {
				t.Fatalf("copies = %+v, want none: lane 4 was taken before noisy's write", c)
			}
			if ws, err := r.room.List(ctx, "llm"); err != nil || len(ws) != 1 {
				t.Fatalf("parked = %+v, %v; want noisy's group parked for a lane", ws, err)
			}
			r.clock.Advance(5 * time.Second)
			if err := r.rel.Free(ctx, racer); err != nil {
				t.Fatal(err)
			}
			if _, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{keyed(t, "llm#noisy", "noisy", "n-1", 2)}}); err != nil {
				t.Fatal(err)
			}
			if c := copies(t, r); len(c) != 1 {
				t.Errorf("copies = %+v, decisions %+v; want n-1 bound to the freed lane 4: nothing started since the bucket was full, but its token went to the bind that lost its lane", c, decisions(r.sqs))
			}
		})
	}
}

// A job in a first-free lane it was not bound to (routed there under random, before the type moved
// to first-free with key rates, or a copy whose bind the sweep took back) waits for its key's token
// in the lane's group, holding no lease: binders see the lane free and bind it, and the bound copy
// is delivered only after this message, a key token's wait later (a minute here). A retry out of
// its key's tokens goes to its key's group instead; this job should too, as it would under a key
// cap.
func TestLeaselessJobOfAKeyOutOfTokensDoesNotBlockAFreeLane(t *testing.T) {
	ctx := context.Background()
	noisy := config.Rate{PerSecond: 1.0 / 60, Burst: 1}
	r := newKeyRateRig(t, config.Override{KeyRates: map[string]config.Rate{"noisy": noisy}})
	if wait, err := r.st.Rates.TakeKey(ctx, "llm", "noisy", ratelimit.Rate{PerSecond: noisy.PerSecond, Burst: noisy.Burst}); err != nil || wait != 0 {
		t.Fatalf("spending noisy's burst = %v, %v", wait, err)
	}
	for _, ln := range []int{1, 3, 4} {
		l := leaseOf("llm", ln, fmt.Sprintf("o-%d", ln), 1, lease.Starting, 1)
		l.JobKey = "other"
		r.leases.Set(l)
	}
	if _, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{keyed(t, job.GroupID("llm", 2), "noisy", "n-1", 1)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{keyed(t, "llm#quiet", "quiet", "q-1", 1)}}); err != nil {
		t.Fatal(err)
	}
	var moved, quietIn2 bool
	for _, c := range copies(t, r) {
		moved = moved || (c.id == "n-1" && c.group == "llm#noisy")
		quietIn2 = quietIn2 || (c.id == "q-1" && c.lane == 2)
	}
	if quietIn2 && !moved {
		t.Errorf("q-1 bound to lane 2, whose group n-1 holds for its key's token (decisions %+v): q-1's copy waits behind it a minute, lane 2 idle; want n-1 moved to llm#noisy", decisions(r.sqs))
	}
}

// A bound lease records the start tokens its bind took (its key's, its type's: each only with a
// rate), so that whoever deletes it before its copy claims it gives back those, and no other.
func TestBoundLeaseRecordsTheTokensItsBindTook(t *testing.T) {
	r1 := config.Rate{PerSecond: 1, Burst: 2}
	for _, tt := range []struct {
		name              string
		o                 config.Override
		wantKey, wantType bool
	}{
		{"no rate", config.Override{}, false, false},
		{"key rate", config.Override{KeyRate: r1}, true, false},
		{"another key's rate", config.Override{KeyRates: map[string]config.Rate{"other": r1}}, false, false},
		{"type rate", config.Override{Rate: r1}, false, true},
		{"both", config.Override{KeyRates: map[string]config.Rate{"acme": r1}, Rate: r1}, true, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := newKeyRateRig(t, tt.o)
			if _, err := r.st.Handle(context.Background(), events.SQSEvent{Records: []events.SQSMessage{keyed(t, "llm#acme", "acme", "a-1", 1)}}); err != nil {
				t.Fatal(err)
			}
			ls := r.leases.Leases()
			if len(ls) != 1 || ls[0].Status != lease.Bound {
				t.Fatalf("leases = %+v, want a-1 bound", ls)
			}
			if ls[0].KeyToken != tt.wantKey || ls[0].TypeToken != tt.wantType {
				t.Errorf("bound lease records key token %v, type token %v; want %v, %v", ls[0].KeyToken, ls[0].TypeToken, tt.wantKey, tt.wantType)
			}
		})
	}
}

// A bound copy whose lease records its key's token (its bind took it) but not its type's (the
// type's rate was set after the bind, or the bind's config cache had none) waits for the type's
// token at its claim. It must not give back the key's token its bind took: its lease still
// records it, so its start after the wait takes no key token, and the key starts once more than
// its rate allows (and a sweep freeing the lease meanwhile would give it back a second time).
func TestBoundCopyWaitingForTheTypesTokenKeepsItsBindsKeyToken(t *testing.T) {
	ctx := context.Background()
	slow := config.Rate{PerSecond: 1.0 / 600, Burst: 1}
	r := newKeyRateRig(t, config.Override{KeyRate: slow, Rate: slow})
	kr := ratelimit.Rate{PerSecond: slow.PerSecond, Burst: slow.Burst}
	if w, err := r.st.Rates.TakeKey(ctx, "llm", "acme", kr); err != nil || w != 0 { // the bind's key token
		t.Fatalf("the bind's key token: wait %v, %v", w, err)
	}
	if w, err := r.st.Rates.Take(ctx, "llm", kr); err != nil || w != 0 { // the type's token, spent by another job
		t.Fatalf("the type's token: wait %v, %v", w, err)
	}
	bound := boundLease("llm", 1, "a-1")
	bound.JobKey, bound.KeyToken = "acme", true // bound before the type had a rate
	r.leases.Set(bound)
	if _, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{keyed(t, job.GroupID("llm", 1), "acme", "a-1", 1)}}); err != nil {
		t.Fatal(err)
	}
	if got := startNames(r.sfn); len(got) != 0 {
		t.Fatalf("starts = %v, want none: the type has no token", got)
	}
	l, ok := r.leases.Lease(bound.Key())
	if w, err := r.st.Rates.TakeKey(ctx, "llm", "acme", kr); err != nil || w == 0 {
		t.Errorf("acme's bucket gave a token (wait %v, %v) while a-1's lease (%+v, %v) still records its bind's: the key's token was given back and stays counted as spent", w, err, l, ok)
	}
}

// Two jobs of a key bound under a cap of 2 whose cap is lowered to 1 before their copies claim: each
// counts the other's lease, so both may go back to the key's group at once (never both start). They
// do not go round forever: the key's one binder binds one of them under the cap in force, which its
// lease records, so its claim starts it without counting again, and the other waits at the key's cap.
func TestTwoJobsBoundOverALoweredKeyCapDoNotBothMoveForever(t *testing.T) {
	ctx := context.Background()
	r := newKeyRigCapped(t, 1)
	var ev events.SQSEvent
	for i, id := range []string{"a-1", "a-2"} {
		b := leaseOf("llm", i+1, id, 0, lease.Bound, 1)
		b.JobKey, b.KeyCap, b.TypeLimit = "acme", 2, 4
		r.leases.Set(b)
		m := keyed(t, job.GroupID("llm", i+1), "acme", id, 1)
		m.Attributes["MessageDeduplicationId"] = job.BoundDedupID("llm", "", "acme", id, 0, i+1, b.MessageID, b.StartedAt.UnixNano())
		ev.Records = append(ev.Records, m)
	}
	seen := 0
	for round := 0; round < 6 && len(ev.Records) > 0; round++ {
		if _, err := r.st.Handle(ctx, ev); err != nil {
			t.Fatal(err)
		}
		if n := len(startNames(r.sfn)); n > 1 {
			t.Fatalf("round %d: starts = %v, want at most one: acme's cap is 1", round, startNames(r.sfn))
		}
		ev = events.SQSEvent{}
		cs := copies(t, r)
		for i, c := range cs[seen:] {
			m := keyed(t, c.group, "acme", c.id, 1)
			m.MessageId = fmt.Sprintf("msg-%s-copy-%d", c.id, seen+i)
			m.Attributes["MessageDeduplicationId"] = c.dedup
			ev.Records = append(ev.Records, m)
		}
		seen = len(cs)
		r.clock.Advance(time.Second)
	}
	if starts := startNames(r.sfn); len(starts) != 1 {
		t.Errorf("starts = %v, want one of a-1 and a-2 started once the key's binder bound it under cap 1", starts)
	}
}
