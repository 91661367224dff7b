package starter_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lane"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
	"github.com/sfnlimit/sfnlimit/internal/lambda/metrics"
	"github.com/sfnlimit/sfnlimit/internal/lambda/starter"
	"github.com/sfnlimit/sfnlimit/internal/tools/fakes"
)

// visibilityTimeout is the lanes queue's (FifoVisibilityTimeout's default): a job running longer is
// delivered again every period.
const visibilityTimeout = 900 * time.Second

// The claim names its execution, so a start writes the lease once: no second write to say it runs.
func TestStartWritesOnlyTheClaim(t *testing.T) {
	tests := []struct {
		name        string
		lease       *lease.Lease // the lane's lease before the delivery
		receive     int
		wantAttempt int
	}{
		{name: "free lane", receive: 1, wantAttempt: 1},
		{name: "retrying lease: the next attempt", lease: ptr(leaseOf("reports", 1, "r-1001", 1, lease.Retrying, 1)), receive: 2, wantAttempt: 2},
		{name: "lane bound to the job: its copy claims it", lease: ptr(boundLease("reports", 1, "r-1001")), receive: 1, wantAttempt: 1},
		{name: "unconfirmed claim whose start never went through", lease: ptr(leaseOf("reports", 1, "r-1001", 2, lease.Starting, 3)), receive: 4, wantAttempt: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, nil)
			var emf bytes.Buffer
			r.st.Metrics = metrics.New(&emf, "sfnlimit")
			if tt.lease != nil {
				r.leases.Set(*tt.lease)
			}
			resp, err := r.st.Handle(context.Background(), events.SQSEvent{Records: []events.SQSMessage{jobMessage(t, "reports", 1, "r-1001", 0, tt.receive)}})
			if err != nil {
				t.Fatal(err)
			}
			if got := failures(resp); !equal(got, []string{"msg-r-1001"}) {
				t.Errorf("batch item failures = %q, want the message held", got)
			}
			name := execName("reports", "r-1001", tt.wantAttempt)
			if got := startNames(r.sfn); !equal(got, []string{name}) {
				t.Errorf("StartExecution calls = %q, want %s once", got, name)
			}
			if _, writes, deletes := r.leases.Counts(); writes != 1 || deletes != 0 {
				t.Errorf("lease writes = %d, deletes = %d; want 1 write (the claim) and no delete", writes, deletes)
			}
			checkLeases(t, r.leases, map[lease.Key]wantLease{
				reports1: {"r-1001", lease.Starting, tt.wantAttempt, handle("r-1001", tt.receive), execArn("reports", "r-1001", tt.wantAttempt)},
			})
			if started, again := count(t, &emf, metrics.JobsStarted), count(t, &emf, metrics.JobsHeldAgain); started != 1 || again != 0 {
				t.Errorf("JobsStarted = %v, JobsHeldAgain = %v; want 1 and 0", started, again)
			}
		})
	}
}

// A job that outlives the visibility timeout is delivered again while its lease is still the claim
// (starting). The delivery takes the claim path: one lease write (the new receipt handle) and one
// StartExecution of the same name and input, which Step Functions answers with the running
// execution. It holds the lane, starts nothing new, and counts a job held again, not a start.
func TestRedeliveredClaimOfRunningJobHoldsTheLane(t *testing.T) {
	tests := []struct {
		name string
		// prepare readies the rig after the first delivery started the job.
		prepare       func(t *testing.T, r *rig)
		wantDescribes int
	}{
		{
			// The input records the delivery's receive count, so a later delivery's start is not
			// taken for the running execution's: it is told ExecutionAlreadyExists and looks.
			name:          "Step Functions answers ExecutionAlreadyExists (the input records the receive)",
			prepare:       func(*testing.T, *rig) {},
			wantDescribes: 1,
		},
		{
			// An emulator without StartExecution's idempotency answers ExecutionAlreadyExists: the
			// execution is described and found running in this lane.
			name: "ExecutionAlreadyExists for the running execution",
			prepare: func(t *testing.T, r *rig) {
				e, ok := r.sfn.Execution(execArn("reports", "r-1001", 1))
				if !ok {
					t.Fatal("the first delivery started no execution")
				}
				e.Input = strings.Replace(e.Input, `"seconds":3`, `"seconds":3 `, 1) // not the same input
				r.sfn.Put(e)
			},
			wantDescribes: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, nil)
			var emf bytes.Buffer
			r.st.Metrics = metrics.New(&emf, "sfnlimit")
			ctx := context.Background()
			if _, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{jobMessage(t, "reports", 1, "r-1001", 0, 1)}}); err != nil {
				t.Fatal(err)
			}
			if err := r.st.Metrics.Flush(); err != nil {
				t.Fatal(err)
			}
			emf.Reset()
			tt.prepare(t, r)
			claim, _ := r.leases.Lease(reports1)
			_, writesBefore, _ := r.leases.Counts()
			startsBefore := len(r.sfn.Starts())

			r.clock.Advance(visibilityTimeout)
			resp, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{jobMessage(t, "reports", 1, "r-1001", 0, 2)}})
			if err != nil {
				t.Fatal(err)
			}
			if got := failures(resp); !equal(got, []string{"msg-r-1001"}) {
				t.Errorf("batch item failures = %q, want the message held", got)
			}
			if n := len(r.sfn.Executions()); n != 1 {
				t.Errorf("executions = %d, want still 1", n)
			}
			if n := len(r.sfn.Starts()) - startsBefore; n != 1 {
				t.Errorf("StartExecution calls = %d, want 1", n)
			}
			if n := len(r.sfn.Describes()); n != tt.wantDescribes {
				t.Errorf("DescribeExecution calls = %d, want %d", n, tt.wantDescribes)
			}
			if _, writes, deletes := r.leases.Counts(); writes-writesBefore != 1 || deletes != 0 {
				t.Errorf("lease writes = %d, deletes = %d; want 1 write (the new receipt handle) and no delete", writes-writesBefore, deletes)
			}
			checkLeases(t, r.leases, map[lease.Key]wantLease{
				reports1: {"r-1001", lease.Starting, 1, handle("r-1001", 2), execArn("reports", "r-1001", 1)},
			})
			// The attempt's start time stays the attempt's: status shows how long the job runs.
			if l, _ := r.leases.Lease(reports1); !l.StartedAt.Equal(claim.StartedAt) {
				t.Errorf("lease started at %v, want the attempt's %v", l.StartedAt, claim.StartedAt)
			}
			checkVisibility(t, r.sqs, nil)
			checkDLQ(t, r.sqs, nil)
			if err := r.st.Metrics.Flush(); err != nil {
				t.Fatal(err)
			}
			if started, again := count(t, &emf, metrics.JobsStarted), count(t, &emf, metrics.JobsHeldAgain); started != 0 || again != 1 {
				t.Errorf("JobsStarted = %v, JobsHeldAgain = %v after the redelivery; want 0 and 1", started, again)
			}
		})
	}
}

// A running job's claim is redelivered after its type was removed from the config (config reset
// --force): the job is not dead-lettered, and its lane not freed, while its execution runs.
func TestRedeliveredClaimOfRemovedTypeKeepsItsLane(t *testing.T) {
	r := newRig(t, nil)
	cfg := &switchableConfig{inner: r.st.Config, gone: map[string]bool{}}
	r.st.Config = cfg
	ctx := context.Background()
	if _, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{jobMessage(t, "reports", 1, "r-1001", 0, 1)}}); err != nil {
		t.Fatal(err)
	}
	cfg.set("reports", true)
	r.clock.Advance(visibilityTimeout)
	resp, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{jobMessage(t, "reports", 1, "r-1001", 0, 2)}})
	if err != nil {
		t.Fatal(err)
	}
	if got := failures(resp); !equal(got, []string{"msg-r-1001"}) {
		t.Errorf("batch item failures = %q, want the message held", got)
	}
	checkDLQ(t, r.sqs, nil)
	checkLeases(t, r.leases, map[lease.Key]wantLease{
		reports1: {"r-1001", lease.Starting, 1, handle("r-1001", 2), execArn("reports", "r-1001", 1)},
	})
	if got := deleted(r.sqs); len(got) != 0 {
		t.Errorf("DeleteMessage handles = %q, want none", got)
	}
}

// Another job's claim holds the lane a message arrives for. A claim is most often a running job:
// its execution is looked up, and the claim is taken back only when no execution of it exists,
// however long it sat untouched.
func TestLaneHeldByAnotherJobsClaim(t *testing.T) {
	backoff := visibility{Handle: handle("r-1001", 1), Min: int32(retryDelay / time.Second), Max: int32(2 * retryDelay / time.Second)}
	const settleBelowStale = 30 * time.Second // a StaleAfter shorter than DescribeSettle
	tests := []struct {
		name       string
		staleAfter time.Duration // 0: the rig's
		age        time.Duration // how long the claim sat untouched
		exec       sfntypes.ExecutionStatus
		// wantTaken: this job claims the lane and starts; else the other job's claim stays.
		wantTaken   bool
		wantDeleted []string
	}{
		{name: "running, untouched past StaleAfter: kept", age: staleAfter + time.Hour, exec: sfntypes.ExecutionStatusRunning},
		{name: "running, fresh: kept", age: time.Minute, exec: sfntypes.ExecutionStatusRunning},
		{name: "succeeded: released, this job starts", age: time.Minute, exec: sfntypes.ExecutionStatusSucceeded,
			wantTaken: true, wantDeleted: []string{handle("r-0999", 1)}},
		{name: "succeeded, untouched past StaleAfter: released, this job starts", age: staleAfter + time.Hour, exec: sfntypes.ExecutionStatusSucceeded,
			wantTaken: true, wantDeleted: []string{handle("r-0999", 1)}},
		{name: "no execution, untouched past StaleAfter: taken back", age: staleAfter + time.Minute, wantTaken: true},
		{name: "no execution, fresh: kept", age: time.Minute},
		{name: "no execution, past a short StaleAfter but within DescribeSettle: kept",
			staleAfter: settleBelowStale, age: starter.DescribeSettle - 10*time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, nil)
			if tt.staleAfter > 0 {
				r.st.StaleAfter = tt.staleAfter
			}
			other := r.leases.Set(withUpdated(leaseOf("reports", 1, "r-0999", 1, lease.Starting, 1), t0.Add(-tt.age)))
			if tt.exec != "" {
				r.sfn.Put(startedBy(t, execution("reports", 1, "r-0999", 1, tt.exec, "", ""), other.MessageID))
			}
			resp, err := r.st.Handle(context.Background(), events.SQSEvent{Records: []events.SQSMessage{jobMessage(t, "reports", 1, "r-1001", 0, 1)}})
			if err != nil {
				t.Fatal(err)
			}
			if got := failures(resp); !equal(got, []string{"msg-r-1001"}) {
				t.Errorf("batch item failures = %q, want the message held", got)
			}
			if got, want := deleted(r.sqs), sorted(tt.wantDeleted...); !equal(got, want) {
				t.Errorf("DeleteMessage handles = %q, want %q", got, want)
			}
			if tt.wantTaken {
				if got := startNames(r.sfn); !equal(got, []string{execName("reports", "r-1001", 1)}) {
					t.Errorf("StartExecution calls = %q, want this job's", got)
				}
				checkLeases(t, r.leases, map[lease.Key]wantLease{
					reports1: {"r-1001", lease.Starting, 1, handle("r-1001", 1), execArn("reports", "r-1001", 1)},
				})
				checkVisibility(t, r.sqs, nil)
				return
			}
			if got := startNames(r.sfn); len(got) != 0 {
				t.Errorf("StartExecution calls = %q, want none while the lane is held", got)
			}
			if l, _ := r.leases.Lease(reports1); l.Version != other.Version || l.JobID != "r-0999" {
				t.Errorf("lease = %+v, want the other job's claim untouched", l)
			}
			checkVisibility(t, r.sqs, []visibility{backoff})
		})
	}
}

// The lane's holder is a claim whose execution just ended: the releaser deletes its message, then
// its lease. The next message of the lane is delivered in between, and waits for the lease to go
// (HandoverWait) rather than back off for seconds, as it does for a running lease.
func TestHandoverWaitsForAClaim(t *testing.T) {
	r := newRig(t, nil)
	r.st.HandoverWait = time.Minute // bounds a failure only: the lease goes on the wait's first look
	other := r.leases.Set(leaseOf("reports", 1, "r-0999", 1, lease.Starting, 1))
	r.sfn.Put(startedBy(t, execution("reports", 1, "r-0999", 1, sfntypes.ExecutionStatusRunning, "", ""), other.MessageID))
	var once sync.Once
	r.sfn.OnDescribe = func(string) error {
		// The holder's release runs while this message looks at the lane.
		once.Do(func() { r.leases.Remove(reports1) })
		return nil
	}
	resp, err := r.st.Handle(context.Background(), events.SQSEvent{Records: []events.SQSMessage{jobMessage(t, "reports", 1, "r-1001", 0, 1)}})
	if err != nil {
		t.Fatal(err)
	}
	if got := failures(resp); !equal(got, []string{"msg-r-1001"}) {
		t.Errorf("batch item failures = %q, want the message held", got)
	}
	if got := startNames(r.sfn); !equal(got, []string{execName("reports", "r-1001", 1)}) {
		t.Errorf("StartExecution calls = %q, want this job's once the holder's lease went", got)
	}
	checkVisibility(t, r.sqs, nil)
	checkLeases(t, r.leases, map[lease.Key]wantLease{
		reports1: {"r-1001", lease.Starting, 1, handle("r-1001", 1), execArn("reports", "r-1001", 1)},
	})
}

// Lambda may hand a batch over twice. The second copy of a delivery (same receipt handle) finds the
// first copy's claim and starts the same name again: the job's start is counted once, by the copy
// that made it, even when the copies are less than the clock skew apart.
func TestBatchHandedOverTwiceCountsOneStart(t *testing.T) {
	for _, tt := range []struct {
		name string
		gap  time.Duration // between the copies
		// nameIdempotent: Step Functions answers a running execution's name and input with it (AWS);
		// else with ExecutionAlreadyExists (an emulator without that idempotency).
		nameIdempotent bool
	}{
		{name: "at once", gap: 0, nameIdempotent: true},
		{name: "3 s apart", gap: 3 * time.Second, nameIdempotent: true},
		{name: "at once, ExecutionAlreadyExists", gap: 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, nil)
			var emf bytes.Buffer
			r.st.Metrics = metrics.New(&emf, "sfnlimit")
			if !tt.nameIdempotent {
				r.sfn.OnStart = func(in *sfn.StartExecutionInput) error {
					if _, ok := r.sfn.Execution(fakes.ExecutionArn(aws.ToString(in.StateMachineArn), aws.ToString(in.Name))); ok {
						return &sfntypes.ExecutionAlreadyExists{Message: in.Name}
					}
					return nil
				}
			}
			m := jobMessage(t, "reports", 1, "r-1001", 0, 1)
			for i := range 2 {
				if i == 1 {
					r.clock.Advance(tt.gap)
				}
				resp, err := r.st.Handle(context.Background(), events.SQSEvent{Records: []events.SQSMessage{m}})
				if err != nil {
					t.Fatal(err)
				}
				if got := failures(resp); !equal(got, []string{"msg-r-1001"}) {
					t.Errorf("copy %d: batch item failures = %q, want the message held", i+1, got)
				}
			}
			if n := len(r.sfn.Executions()); n != 1 {
				t.Errorf("executions = %d, want 1", n)
			}
			checkLeases(t, r.leases, map[lease.Key]wantLease{
				reports1: {"r-1001", lease.Starting, 1, handle("r-1001", 1), execArn("reports", "r-1001", 1)},
			})
			checkVisibility(t, r.sqs, nil)
			if err := r.st.Metrics.Flush(); err != nil {
				t.Fatal(err)
			}
			if started, again := count(t, &emf, metrics.JobsStarted), count(t, &emf, metrics.JobsHeldAgain); started != 1 || again != 1 {
				t.Errorf("JobsStarted = %v, JobsHeldAgain = %v; want 1 and 1", started, again)
			}
		})
	}
}

// count adds up a count metric over the EMF lines a recorder wrote (one per flush and type).
func count(t *testing.T, emf *bytes.Buffer, metric string) float64 {
	t.Helper()
	var sum float64
	for _, line := range strings.Split(strings.TrimSpace(emf.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("EMF line %s: %v", line, err)
		}
		v, _ := m[metric].(float64)
		sum += v
	}
	return sum
}

// A move stopped after its copy went (the invocation was killed before its DeleteMessage) leaves the
// lane message and its moving lease; the type is then removed from the config. The copy is
// dead-lettered (unknown type) from its waiting group, and that is the job's end: the lane message,
// back to its moving lease, finishes the move with a stand-in config rather than fail on every
// receive until the sweep takes the lease back and then be dead-lettered a second time.
func TestMoveStoppedAfterItsCopyThenTypeRemovedEndsOnce(t *testing.T) {
	ctx := context.Background()
	r := newRigStrategy(t, map[string]int{"reports": 1}, lane.FirstFree)
	cfg := &switchableConfig{inner: r.st.Config, gone: map[string]bool{}}
	r.st.Config = cfg
	moving := leaseOf("reports", 2, "r-1", 0, lease.Moving, 1)
	moving.MessageID = "msg-r-1" // the lane message's move: its copy went, its DeleteMessage did not
	r.leases.Set(moving)
	cfg.set("reports", true)

	w := message(t, job.WaitingGroupID("reports", 0), "r-1", jobBody("reports", "r-1", 0), 1)
	w.MessageId = "msg-r-1-moved"
	if resp, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{w}}); err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("waiting copy: Handle = %+v, %v; want it dead-lettered (unknown type) and acknowledged", resp, err)
	}
	checkDLQ(t, r.sqs, []dead{{string(job.ReasonUnknownType), "r-1"}})

	// The lane message comes back after the visibility timeout, to its moving lease.
	r.clock.Advance(visibilityTimeout)
	resp, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{jobMessage(t, "reports", 2, "r-1", 0, 2)}})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.BatchItemFailures) != 0 {
		t.Errorf("lane message held (resp %+v, leases %+v): the moving branch fails on the unknown type, and the lane "+
			"message comes back until the sweep takes its moving lease", resp, r.leases.Leases())
	}
	// The sweep takes the stale moving lease back; the lane message, if still there, comes back again.
	if len(resp.BatchItemFailures) != 0 {
		r.leases.Remove(moving.Key())
		if _, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{jobMessage(t, "reports", 2, "r-1", 0, 3)}}); err != nil {
			t.Fatal(err)
		}
	}
	if got := r.sqs.Sent(dlqURL); len(got) != 1 {
		t.Errorf("dead letters = %d, want 1: r-1 ends twice (its moved copy's and its lane message's)", len(got))
	}
}

// A move that stops after its copy went is finished by its message's next delivery, which sends the
// copy again and counts on SQS to drop it. The lanes queue deduplicates per message group
// (DeduplicationScope: messageGroup), so the finisher resends to the group the moving lease names,
// never to one recomputed from the config it reads now. Under random the mover sent r-1's copy to
// lane 1 (limit lowered to 1); the type is then removed, and a finisher with its stand-in
// first-free config would send a second copy to the waiting group (another group, another
// deduplication id): each copy dead-lettered, the job would end twice. (So would a limit raised
// again while the moving lease stands: Choose with the new limit names another lane.)
func TestRandomMoveStoppedAfterItsCopyThenTypeRemovedEndsOnce(t *testing.T) {
	ctx := context.Background()
	r := newRigStrategy(t, map[string]int{"reports": 1}, lane.Random)
	cfg := &switchableConfig{inner: r.st.Config, gone: map[string]bool{}}
	r.st.Config = cfg

	// The move of r-1 from lane 2: moving lease, copy to lane 1, then the invocation stopped (its
	// DeleteMessage failed here; a kill before it leaves the same state, the message in the queue).
	r.sqs.OnDelete = func(in *sqs.DeleteMessageInput) error {
		return &smithy.GenericAPIError{Code: "InternalError", Message: "killed", Fault: smithy.FaultServer}
	}
	if _, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{jobMessage(t, "reports", 2, "r-1", 0, 1)}}); err != nil {
		t.Fatal(err)
	}
	r.sqs.OnDelete = nil
	if l, ok := r.leases.Lease(lease.Key{Type: "reports", Lane: 2}); !ok || l.Status != lease.Moving {
		t.Fatalf("leases = %+v, want r-1's moving lease in lane 2", r.leases.Leases())
	}
	first := copies(t, r)
	if len(first) != 1 || first[0].lane != 1 {
		t.Fatalf("copies = %+v, want r-1's copy in lane 1", first)
	}
	cfg.set("reports", true)

	// The copy in lane 1 is dead-lettered (unknown type): the job's end.
	c := jobMessage(t, "reports", 1, "r-1", 0, 1)
	c.MessageId = "msg-r-1-moved"
	if _, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{c}}); err != nil {
		t.Fatal(err)
	}
	// The lane message comes back to its moving lease and finishes the move.
	r.clock.Advance(visibilityTimeout)
	if _, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{jobMessage(t, "reports", 2, "r-1", 0, 2)}}); err != nil {
		t.Fatal(err)
	}
	// Any copy the finish sent elsewhere (SQS deduplicates within a group only) is delivered.
	for _, cp := range copies(t, r)[1:] {
		if cp.group == first[0].group && cp.dedup == first[0].dedup {
			continue // dropped by SQS
		}
		m := message(t, cp.group, "r-1", jobBody("reports", "r-1", cp.attempt), 1)
		m.MessageId = "msg-r-1-moved-again"
		if _, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{m}}); err != nil {
			t.Fatal(err)
		}
	}
	if got := r.sqs.Sent(dlqURL); len(got) != 1 {
		t.Errorf("dead letters = %d, copies = %+v, want 1: the finished move sent r-1 to another group than the "+
			"first copy's, and both copies ended the job", len(got), copies(t, r))
	}
}

// A second copy of a job (its waiting message was bound again after its first copy ran: the binder
// was killed before it deleted it) claims the attempt in another lane, and its start finds the
// execution that the first copy started and ended. Killed there, the claim is left unconfirmed.
// The copy's next delivery looks the claim's execution up: it is another message's, from another
// lane, so this copy is a duplicate, dropped with its claim. Released instead, it would count a
// job that succeeded once as two successes, or act on another copy's failure.
func TestUnconfirmedClaimOfAnotherCopysAttemptIsDropped(t *testing.T) {
	// The claim is looked up on every path that finds it: started again, or confirmed before the
	// job may not start (its type paused, or its lane above a lowered limit).
	ways := map[string][]config.Override{
		"started again":            nil,
		"type paused":              {paused("reports")},
		"lane above lowered limit": {{Type: "reports", Limit: 1}},
	}
	for way, overrides := range ways {
		for _, st := range []sfntypes.ExecutionStatus{sfntypes.ExecutionStatusSucceeded, sfntypes.ExecutionStatusFailed, sfntypes.ExecutionStatusRunning} {
			t.Run(way+"/"+string(st), func(t *testing.T) {
				r := newRigStrategy(t, nil, lane.FirstFree)
				withLiveConfig(t, r, &liveConfig{list: overrides}, reportsDefaults)
				unconfirmedClaimOfAnotherCopy(t, r, st)
			})
		}
	}
}

func unconfirmedClaimOfAnotherCopy(t *testing.T, r *rig, st sfntypes.ExecutionStatus) {
	t.Helper()
	published := metrics.NewCollector()
	r.rel.Metrics = metrics.New(published, "test")
	r.sfn.Put(startedBy(t, execution("reports", 1, "r-1001", 1, st, "JobFailed", "boom"), "msg-first-copy"))
	claim := leaseOf("reports", 2, "r-1001", 1, lease.Starting, 1)
	r.leases.Set(claim)
	resp, err := r.st.Handle(context.Background(), events.SQSEvent{Records: []events.SQSMessage{jobMessage(t, "reports", 2, "r-1001", 0, 2)}})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.BatchItemFailures) != 0 {
		t.Errorf("duplicate copy held (%+v); want it acknowledged", resp.BatchItemFailures)
	}
	if l, ok := r.leases.Lease(claim.Key()); ok {
		t.Errorf("duplicate copy's lane keeps lease %+v", l)
	}
	if err := r.rel.Metrics.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{metrics.JobsSucceeded, metrics.JobsRetried, metrics.JobsDeadLettered} {
		if got := published.Sum("", m); got != 0 {
			t.Errorf("%s = %v, want 0: the first copy's release acts on its attempt", m, got)
		}
	}
	if n := len(r.sfn.Executions()); n != 1 {
		t.Errorf("%d executions, want 1", n)
	}
}

// A queue that hands out two messages of one lane's group at once (moto's FIFO does) brings another
// job's message to a lane whose lease is a duplicate copy's claim: the job was bound twice, and its
// attempt ran and ended in another lane, from the first copy's message. The starter releases an
// ended holder of its lane itself, and must drop that claim, not release the first copy's
// execution as the claim's own: the job's success was counted by its own release (the CI run of
// TestBatchUnderFaults that counted 15 successes for 14 jobs).
func TestLaneHeldByADuplicateCopysClaimIsDroppedNotReleased(t *testing.T) {
	r := newRigStrategy(t, nil, lane.FirstFree)
	withLiveConfig(t, r, &liveConfig{}, reportsDefaults)
	published := metrics.NewCollector()
	r.rel.Metrics = metrics.New(published, "test")
	r.sfn.Put(startedBy(t, execution("reports", 3, "r-1", 1, sfntypes.ExecutionStatusSucceeded, "", ""), "msg-first-copy"))
	claim := leaseOf("reports", 1, "r-1", 1, lease.Starting, 1) // the second copy's, message msg-r-1
	r.leases.Set(claim)
	if _, err := r.st.Handle(context.Background(), events.SQSEvent{Records: []events.SQSMessage{jobMessage(t, "reports", 1, "r-2", 0, 1)}}); err != nil {
		t.Fatal(err)
	}
	if err := r.rel.Metrics.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := published.Sum("", metrics.JobsSucceeded); got != 0 {
		t.Errorf("JobsSucceeded = %v, want 0: the first copy's release counted r-1", got)
	}
	if l, ok := r.leases.Lease(claim.Key()); ok && l.JobID == "r-1" {
		t.Errorf("lane 1 keeps the duplicate's claim %+v", l)
	}
}
