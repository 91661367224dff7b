package starter_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
	"github.com/sfnlimit/sfnlimit/internal/lambda/pool"
	"github.com/sfnlimit/sfnlimit/internal/lambda/ratelimit"
	"github.com/sfnlimit/sfnlimit/internal/tools/fakes"
)

// newPoolRig is a rig whose types a and b (3 lanes each) share pool psp of cap 2.
func newPoolRig(t *testing.T) (*rig, *pool.Store) {
	t.Helper()
	r := newRig(t, map[string]int{"a": 3, "b": 3})
	res, err := config.NewResolver(config.Defaults{
		Limits: map[string]int{"a": 3, "b": 3}, DefaultMaxAttempts: 3, StateMachineArn: smArn,
		Pools: map[string]int{"psp": 2}, TypePools: map[string][]string{"a": {"psp"}, "b": {"psp"}},
	}, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	slots := pool.NewStore(fakes.NewDynamoDB("table"), "table")
	r.st.Config, r.rel.Config, r.st.Pools, r.rel.Pools = res, res, slots, slots
	return r, slots
}

// Two types in one pool bind until the pool runs its cap, though their own lanes are free; the
// other type's head parks marked at the pool; a lane freed by the first type wakes it.
func TestBindStopsAtThePoolCap(t *testing.T) {
	ctx := context.Background()
	r, _ := newPoolRig(t)
	resp, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{waiting(t, "a", "a-1", 1), waiting(t, "a", "a-2", 1)}})
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("a's batch = %+v, %v; want both bound", resp, err)
	}
	resp, err = r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{waiting(t, "b", "b-1", 1)}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := failures(resp), sorted("msg-b-1"); !equal(got, want) {
		t.Fatalf("batch item failures = %v, want %v (b-1 parked: the pool runs its cap)", got, want)
	}
	if ls, _ := r.leases.ListType(ctx, "b"); len(ls) != 0 {
		t.Fatalf("b's leases = %+v, want none: a job over its pool's cap holds no lane", ls)
	}
	ws, err := r.room.List(ctx, "b")
	if err != nil || len(ws) != 1 || ws[0].JobID != "b-1" || ws[0].AtPool != "psp" {
		t.Fatalf("parked = %+v, %v; want b's group parked at b-1, at pool psp", ws, err)
	}
	as, _ := r.leases.ListType(ctx, "a")
	if err := r.rel.Free(ctx, as[0]); err != nil {
		t.Fatal(err)
	}
	woke := false
	for _, v := range r.sqs.VisibilityChanges() {
		woke = woke || (v.ReceiptHandle == handle("b-1", 1) && v.Timeout == 0)
	}
	if !woke {
		t.Fatalf("visibility changes = %+v, want b-1 woken by a's freed pool slot", r.sqs.VisibilityChanges())
	}
	resp, err = r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{waiting(t, "b", "b-1", 2)}})
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("b-1 woken = %+v, %v; want it bound", resp, err)
	}
	resp, err = r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{waiting(t, "a", "a-3", 1)}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := failures(resp), sorted("msg-a-3"); !equal(got, want) {
		t.Errorf("batch item failures = %v, want %v (the pool runs its cap again)", got, want)
	}
}

// A bind that wrote its lease and stopped before taking its pool slot sent no copy: the waiting
// message's next delivery takes the slot before the copy goes, or, with the pool full since, gives
// the lane back and looks again later.
func TestBoundLeaseTakesItsPoolSlotBeforeItsCopyGoes(t *testing.T) {
	for _, full := range []bool{false, true} {
		ctx := context.Background()
		r, slots := newPoolRig(t)
		if full {
			fillPool(ctx, t, r)
		}
		m := waiting(t, "b", "b-1", 1)
		if _, err := r.leases.Put(ctx, lease.Lease{Type: "b", Lane: 1, JobID: "b-1", MessageID: m.MessageId, Status: lease.Bound, StartedAt: t0}, nil); err != nil {
			t.Fatal(err)
		}
		sent := len(r.sqs.Sent(lanesURL))
		resp, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{waiting(t, "b", "b-1", 2)}})
		if err != nil {
			t.Fatal(err)
		}
		ofB := slotsOf(ctx, t, slots, "b")
		ls, _ := r.leases.ListType(ctx, "b")
		if full {
			if len(resp.BatchItemFailures) != 1 || len(r.sqs.Sent(lanesURL)) != sent || len(ls) != 0 || ofB != 0 {
				t.Errorf("pool full: failures %v, copies sent %d, b's leases %+v, b's slots %d; want the message back, no copy, no lease, no slot",
					resp.BatchItemFailures, len(r.sqs.Sent(lanesURL))-sent, ls, ofB)
			}
			continue
		}
		if len(resp.BatchItemFailures) != 0 || len(r.sqs.Sent(lanesURL)) != sent+1 || len(ls) != 1 || ofB != 1 {
			t.Errorf("pool with room: failures %v, copies sent %d, b's leases %+v, b's slots %d; want the copy sent with one slot taken",
				resp.BatchItemFailures, len(r.sqs.Sent(lanesURL))-sent, ls, ofB)
		}
	}
}

// A moved copy that finds its job's lane bound to a stale bind, and sends that bind's copy with its
// count (Starter.behindCopy), sends it as the bind's own message would: with the lease's pool slot,
// which that bind may have stopped before taking (its lease write answered as failed). Sent without
// it, the copy would claim and start over its pool's cap. With the pool full, the lane goes back and
// the moved copy looks again later.
func TestMovedCopyTakesAStaleBindsPoolSlotBeforeItsCopyGoes(t *testing.T) {
	for _, full := range []bool{false, true} {
		ctx := context.Background()
		r, slots := newPoolRig(t)
		if full {
			fillPool(ctx, t, r)
		}
		if _, err := r.leases.Put(ctx, lease.Lease{Type: "b", Lane: 1, JobID: "b-1", MessageID: "stale-copy", Status: lease.Bound, StartedAt: t0}, nil); err != nil {
			t.Fatal(err)
		}
		sent := len(r.sqs.Sent(lanesURL))
		moved := message(t, job.WaitingGroupID("b", 0), "b-1", jobBody("b", "b-1", 1), 1)
		resp, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{moved}})
		if err != nil {
			t.Fatal(err)
		}
		ofB := slotsOf(ctx, t, slots, "b")
		ls, _ := r.leases.ListType(ctx, "b")
		if full {
			if len(resp.BatchItemFailures) != 1 || len(r.sqs.Sent(lanesURL)) != sent || len(ls) != 0 || ofB != 0 {
				t.Errorf("pool full: failures %v, copies sent %d, b's leases %+v, b's slots %d; want the moved copy back, no copy, no lease, no slot",
					resp.BatchItemFailures, len(r.sqs.Sent(lanesURL))-sent, ls, ofB)
			}
			continue
		}
		if len(resp.BatchItemFailures) != 0 || len(r.sqs.Sent(lanesURL)) != sent+1 || len(ls) != 1 || ls[0].Attempt != 1 || ofB != 1 {
			t.Errorf("pool with room: failures %v, copies sent %d, b's leases %+v, b's slots %d; want the bind's copy sent with one slot taken and the moved copy's count",
				resp.BatchItemFailures, len(r.sqs.Sent(lanesURL))-sent, ls, ofB)
		}
	}
}

// A retry is a new start: with its pool's cap lowered under the jobs holding its slots, the job
// waits in its waiting group with the attempts it made; a job of a type that joined the pool after
// its bind takes a slot before it starts again, or waits when there is none.
func TestRetryWaitsWhenItsPoolsCapWasLowered(t *testing.T) {
	ctx := context.Background()
	r, slots := newPoolRig(t)
	running, retrying := leaseOf("a", 1, "a-1", 1, lease.Starting, 1), leaseOf("b", 1, "b-1", 1, lease.Retrying, 1)
	for i, l := range []lease.Lease{running, retrying} {
		r.leases.Set(l)
		if _, err := slots.Take(ctx, "psp", i+1, pool.HolderOf(l), nil); err != nil {
			t.Fatal(err)
		}
	}
	lowered, err := config.NewResolver(config.Defaults{
		Limits: map[string]int{"a": 3, "b": 3}, DefaultMaxAttempts: 3, StateMachineArn: smArn,
		Pools: map[string]int{"psp": 1}, TypePools: map[string][]string{"a": {"psp"}, "b": {"psp"}},
	}, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	r.st.Config = lowered
	resp, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{jobMessage(t, "b", 1, "b-1", 1, 2)}})
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("Handle = %+v, %v; want b-1 moved (acknowledged)", resp, err)
	}
	if got := startNames(r.sfn); len(got) != 0 {
		t.Errorf("starts = %v, want none: the pool runs its lowered cap of 1", got)
	}
	if cs := copies(t, r); len(cs) != 1 || cs[0].group != job.WaitingGroupID("b", 0) || cs[0].attempt != 1 {
		t.Errorf("copies = %+v, want b-1 sent to its waiting group with its 1 attempt", cs)
	}
	// Under its cap, a retry goes on in its lane as always.
	r.leases.Remove(running.Key())
	r.leases.Set(retrying)
	if _, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{jobMessage(t, "b", 1, "b-1", 1, 3)}}); err != nil {
		t.Fatal(err)
	}
	if got := startNames(r.sfn); len(got) != 1 {
		t.Errorf("starts = %v, want b-1's attempt 2 in its lane", got)
	}
	v, err := pool.Look(ctx, slots, r.leases, "psp", 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := v.Holds(retrying); !ok || len(v.Live) != 1 {
		t.Errorf("live slots = %+v, want one, b-1's", v.Live)
	}
}

// A job of a type that joined its pool after the job's bind holds no slot: its retry takes one
// before it starts, or waits in its waiting group when the pool has none.
func TestRetryOfAJobBoundBeforeItsTypeJoinedAPoolTakesASlot(t *testing.T) {
	for _, full := range []bool{false, true} {
		ctx := context.Background()
		r, slots := newPoolRig(t)
		if full {
			for i, l := range []lease.Lease{leaseOf("a", 1, "a-1", 1, lease.Starting, 1), leaseOf("a", 2, "a-2", 1, lease.Starting, 1)} {
				r.leases.Set(l)
				if _, err := slots.Take(ctx, "psp", i+1, pool.HolderOf(l), nil); err != nil {
					t.Fatal(err)
				}
			}
		}
		retrying := leaseOf("b", 1, "b-1", 1, lease.Retrying, 1)
		r.leases.Set(retrying)
		if _, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{jobMessage(t, "b", 1, "b-1", 1, 2)}}); err != nil {
			t.Fatal(err)
		}
		v, err := pool.Look(ctx, slots, r.leases, "psp", 2)
		if err != nil {
			t.Fatal(err)
		}
		_, holds := v.Holds(retrying)
		starts := startNames(r.sfn)
		if full && (len(starts) != 0 || holds || len(copies(t, r)) != 1) {
			t.Errorf("pool full: starts %v, holds a slot %v, copies %+v; want b-1 moved to wait, no slot", starts, holds, copies(t, r))
		}
		if !full && (len(starts) != 1 || !holds) {
			t.Errorf("pool with room: starts %v, holds a slot %v; want b-1's attempt 2 started with a slot", starts, holds)
		}
	}
}

// A pooled type's retry that comes back while its type is paused gives back its lane and its pool
// slot and waits in its waiting group, with the attempts it made: held in its lane for the pause (a
// retry is not running), it would keep the slot from the pool's other members for the whole pause,
// and a type paused because its attempts fail would hold every slot its failed attempts had.
func TestPausedRetryGivesBackItsPoolSlot(t *testing.T) {
	ctx := context.Background()
	r, slots := newPoolRig(t)
	withLiveConfig(t, r, &liveConfig{list: []config.Override{paused("a")}}, config.Defaults{
		Limits: map[string]int{"a": 3, "b": 3}, DefaultMaxAttempts: 3, StateMachineArn: smArn,
		Pools: map[string]int{"psp": 1}, TypePools: map[string][]string{"a": {"psp"}, "b": {"psp"}},
	})
	retrying := leaseOf("a", 1, "a-1", 1, lease.Retrying, 1)
	r.leases.Set(retrying)
	if _, err := slots.Take(ctx, "psp", 1, pool.HolderOf(retrying), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{jobMessage(t, "a", 1, "a-1", 1, 2)}}); err != nil {
		t.Fatal(err)
	}
	if got := startNames(r.sfn); len(got) != 0 {
		t.Fatalf("starts = %v, want none while a is paused", got)
	}
	if cs := copies(t, r); len(cs) != 1 || cs[0].group != job.WaitingGroupID("a", 0) || cs[0].attempt != 1 {
		t.Errorf("copies = %+v, want a-1 sent to its waiting group with its 1 attempt", cs)
	}
	resp, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{waiting(t, "b", "b-1", 1)}})
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Errorf("b-1 = %+v, %v; want it bound to the slot the paused retry gave back", resp, err)
	}
}

// A bound job's copy that claims its lane after its pool's cap was lowered under the jobs holding
// its slots starts no execution: the lowered cap holds from this, the job's first start, and the
// job waits in its waiting group. Bound under the cap in force, it starts with the slot it took.
func TestBoundJobWaitsWhenItsPoolsCapWasLoweredBeforeItsStart(t *testing.T) {
	for _, lowered := range []bool{false, true} {
		ctx := context.Background()
		r, slots := newPoolRig(t)
		running, bound := leaseOf("a", 1, "a-1", 1, lease.Starting, 1), boundLease("b", 1, "b-1")
		bound.PoolCaps = "psp=2"
		for i, l := range []lease.Lease{running, bound} {
			r.leases.Set(l)
			if _, err := slots.Take(ctx, "psp", i+1, pool.HolderOf(l), nil); err != nil {
				t.Fatal(err)
			}
		}
		if lowered {
			res, err := config.NewResolver(config.Defaults{
				Limits: map[string]int{"a": 3, "b": 3}, DefaultMaxAttempts: 3, StateMachineArn: smArn,
				Pools: map[string]int{"psp": 1}, TypePools: map[string][]string{"a": {"psp"}, "b": {"psp"}},
			}, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			r.st.Config = res
		}
		if _, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{jobMessage(t, "b", 1, "b-1", 0, 1)}}); err != nil {
			t.Fatal(err)
		}
		starts := startNames(r.sfn)
		if lowered && (len(starts) != 0 || len(copies(t, r)) != 1 || copies(t, r)[0].group != job.WaitingGroupID("b", 0)) {
			t.Errorf("cap lowered: starts %v, copies %+v; want none started, b-1 back in its waiting group", starts, copies(t, r))
		}
		if !lowered && len(starts) != 1 {
			t.Errorf("cap as bound: starts %v, want b-1's attempt 1", starts)
		}
	}
}

// A raised pool cap counts for a head woken for it at once, though the starter's config is cached:
// a woken head (a later delivery) that finds its pool full reads the config past the cache before
// it parks again. A head's first delivery parks on the cached cap (no read per arrival).
func TestWokenHeadBindsUnderAPoolCapRaisedSinceTheCache(t *testing.T) {
	ctx := context.Background()
	r, _ := newPoolRig(t)
	db := fakes.NewDynamoDB("table")
	store := config.NewDynamoStore(db, "table")
	res, err := config.NewResolver(config.Defaults{
		Limits: map[string]int{"a": 3, "b": 3}, DefaultMaxAttempts: 3, StateMachineArn: smArn,
		Pools: map[string]int{"psp": 2}, TypePools: map[string][]string{"a": {"psp"}, "b": {"psp"}},
	}, store, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	r.st.Config, r.rel.Config = res, res
	resp, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{waiting(t, "a", "a-1", 1), waiting(t, "a", "a-2", 1)}})
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("a's batch = %+v, %v; want both bound", resp, err)
	}
	if err := store.SetOverride(ctx, config.Override{Pool: "psp", Limit: 3}); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		id       string
		receives int
		bound    bool
	}{
		{id: "b-1", receives: 1, bound: false}, // first delivery: the cached cap, 2, is full
		{id: "b-1", receives: 2, bound: true},  // woken by the raise: the cap read afresh, 3
	} {
		resp, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{waiting(t, "b", tt.id, tt.receives)}})
		if err != nil {
			t.Fatal(err)
		}
		if bound := len(resp.BatchItemFailures) == 0; bound != tt.bound {
			t.Errorf("%s, delivery %d: bound = %v, want %v", tt.id, tt.receives, bound, tt.bound)
		}
	}
}

// A bound lease given back because its pool filled before its copy went was never claimed: the
// start tokens its bind took go back with it (releaser.Service.Free). Here its waiting message's
// next delivery finds the pool full; the bind's own look gives its lease back the same way
// (bindSlots).
func TestBoundLeaseGivenBackAtAFullPoolGivesBackItsTokens(t *testing.T) {
	ctx := context.Background()
	r, _ := newPoolRig(t)
	rate := config.Rate{PerSecond: 0.001, Burst: 2}
	res, err := config.NewResolver(config.Defaults{
		Limits: map[string]int{"a": 3, "b": 3}, DefaultMaxAttempts: 3, StateMachineArn: smArn, Rates: map[string]config.Rate{"b": rate},
		Pools: map[string]int{"psp": 2}, TypePools: map[string][]string{"a": {"psp"}, "b": {"psp"}},
	}, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	buckets := ratelimit.New(fakes.NewDynamoDB("table"), "table")
	buckets.Now = r.clock.Now
	r.st.Config, r.rel.Config, r.st.Rates, r.rel.Rates = res, res, buckets, buckets
	resp, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{waiting(t, "a", "a-1", 1), waiting(t, "a", "a-2", 1)}})
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("a's batch = %+v, %v; want the pool filled", resp, err)
	}
	br := ratelimit.Rate{PerSecond: rate.PerSecond, Burst: rate.Burst}
	for range 2 { // a start's token, and the bind's
		if w, err := buckets.Take(ctx, "b", br); err != nil || w != 0 {
			t.Fatalf("take b's token = %v, %v", w, err)
		}
	}
	m := waiting(t, "b", "b-1", 1)
	if _, err := r.leases.Put(ctx, lease.Lease{Type: "b", Lane: 1, JobID: "b-1", MessageID: m.MessageId, Status: lease.Bound, StartedAt: t0, TypeToken: true}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{waiting(t, "b", "b-1", 2)}}); err != nil {
		t.Fatal(err)
	}
	if ls, _ := r.leases.ListType(ctx, "b"); len(ls) != 0 {
		t.Fatalf("b's leases = %+v, want the bound lease given back at the full pool", ls)
	}
	if w, err := buckets.Take(ctx, "b", br); err != nil || w != 0 {
		t.Errorf("b's next token = %v, %v; want the bind's given back", w, err)
	}
}

// A bound job's copy that reaches its lane while its pooled type is paused gives back its lane and
// its pool slot and waits in its waiting group, as a paused retry does: parked in its lane for the
// pause, it would keep its slot from the pool's other members all that while. The start tokens its
// bind took go back with it (it binds again, and takes them then), so the move spends none.
func TestPausedBoundJobGivesBackItsPoolSlotAndTokens(t *testing.T) {
	ctx := context.Background()
	r, slots := newPoolRig(t)
	buckets := ratelimit.New(fakes.NewDynamoDB("table"), "table")
	buckets.Now = r.clock.Now
	r.st.Rates = buckets
	rate := config.Rate{PerSecond: 0.001, Burst: 1}
	withLiveConfig(t, r, &liveConfig{list: []config.Override{{Type: "a", Rate: rate, Pause: &config.Pause{Reason: "INC-42", Since: t0.Add(-time.Minute)}}}},
		config.Defaults{
			Limits: map[string]int{"a": 3, "b": 3}, DefaultMaxAttempts: 3, StateMachineArn: smArn,
			Pools: map[string]int{"psp": 1}, TypePools: map[string][]string{"a": {"psp"}, "b": {"psp"}},
		})
	bound := boundLease("a", 1, "a-1")
	bound.PoolCaps, bound.TypeToken = "psp=1", true
	r.leases.Set(bound)
	if _, err := slots.Take(ctx, "psp", 1, pool.HolderOf(bound), nil); err != nil {
		t.Fatal(err)
	}
	// The bind took the type's one token.
	if wait, err := buckets.Take(ctx, "a", ratelimit.Rate{PerSecond: rate.PerSecond, Burst: rate.Burst}); err != nil || wait != 0 {
		t.Fatalf("the bind's token: wait %v, %v", wait, err)
	}
	if _, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{jobMessage(t, "a", 1, "a-1", 0, 1)}}); err != nil {
		t.Fatal(err)
	}
	if got := startNames(r.sfn); len(got) != 0 {
		t.Fatalf("starts = %v, want none while a is paused", got)
	}
	if cs := copies(t, r); len(cs) != 1 || cs[0].group != job.WaitingGroupID("a", 0) || cs[0].attempt != 0 {
		t.Errorf("copies = %+v, want a-1 sent to its waiting group with no attempt made", cs)
	}
	if l, ok := r.leases.Lease(bound.Key()); ok {
		t.Errorf("lane 1 of a holds %+v, want it given back", l)
	}
	v, err := pool.Look(ctx, slots, r.leases, "psp", 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Live) != 0 || len(v.Free) != 1 {
		t.Errorf("pool psp: live %+v, free %+v; want the slot free for b", v.Live, v.Free)
	}
	if wait, err := buckets.Take(ctx, "a", ratelimit.Rate{PerSecond: rate.PerSecond, Burst: rate.Burst}); err != nil || wait != 0 {
		t.Errorf("a's token after the move: wait %v, %v; want it back (the job takes it again when it binds)", wait, err)
	}
	if wait, err := buckets.Take(ctx, "a", ratelimit.Rate{PerSecond: rate.PerSecond, Burst: rate.Burst}); err != nil || wait == 0 {
		t.Errorf("a second token: wait %v, %v; want none: the move gave back one token, once", wait, err)
	}
}

// A job bound (with a slot within the cap) before another type joined its pool under running jobs
// must not start while the pool runs its cap without it: the joined type's running job counts,
// whether the sweep gave it a slot above the cap (releaser's adoptRunning) or not yet. Its copy
// waits, as a retry's does (overPool). Started, the pool runs over its cap for as long as the two
// run (simworld seed 20747 of all+pools: psp, cap 1, ran 2). With the members as at the bind, and
// room, it starts.
func TestBoundJobDoesNotStartBesideAJobOfATypeThatJoinedItsPool(t *testing.T) {
	for _, tt := range []struct {
		name       string
		boundUnder string // the pool's members at the bind
		adopted    bool   // b-1 holds slot 3, above the cap
		b1         bool   // b-1 runs at all
		wantStart  bool
	}{
		{name: "b joined; b-1 adopted above the cap", boundUnder: "psp=a", adopted: true, b1: true},
		{name: "b joined; b-1 holds no slot yet", boundUnder: "psp=a", b1: true},
		{name: "members as at the bind, room left", boundUnder: "psp=a+b", wantStart: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			r, slots := newPoolRig(t) // psp: cap 2, members a and b
			running := leaseOf("a", 1, "a-1", 1, lease.Starting, 1)
			bound := boundLease("a", 2, "a-2")
			bound.PoolCaps, bound.PoolMembers = "psp=2", tt.boundUnder
			holders := []lease.Lease{running, bound}
			if tt.b1 {
				b1 := leaseOf("b", 1, "b-1", 1, lease.Starting, 1) // ran when b joined psp
				r.leases.Set(b1)
				if tt.adopted {
					holders = append(holders, b1)
				}
			}
			for i, l := range holders {
				r.leases.Set(l)
				if _, err := slots.Take(ctx, "psp", i+1, pool.HolderOf(l), nil); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{jobMessage(t, "a", 2, "a-2", 0, 1)}}); err != nil {
				t.Fatal(err)
			}
			if started := len(startNames(r.sfn)) == 1; started != tt.wantStart {
				t.Errorf("a-2 started = %v, want %v (psp: cap 2, a-1 running, b-1 running %v)", started, tt.wantStart, tt.b1)
			}
		})
	}
}

// A claim whose start never went through (refused for now), of a type that joined its pool since
// the claim, holds no slot: its redelivery takes the pool's last place for itself (overPool). Its
// own claim is one of the pool's unslotted claims (pool.View.Unslotted) but must not count against
// itself, or it gives up its lane with the pool's place free.
func TestUnstartedClaimOfATypeThatJoinedItsPoolTakesItsLastPlace(t *testing.T) {
	ctx := context.Background()
	r, slots := newPoolRig(t) // psp: cap 2, members a and b
	running := leaseOf("a", 1, "a-1", 1, lease.Starting, 1)
	r.leases.Set(running)
	if _, err := slots.Take(ctx, "psp", 1, pool.HolderOf(running), nil); err != nil {
		t.Fatal(err)
	}
	claim := leaseOf("b", 1, "b-1", 1, lease.Starting, 1) // claimed before b joined psp; never started
	r.leases.Set(claim)
	if _, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{jobMessage(t, "b", 1, "b-1", 0, 2)}}); err != nil {
		t.Fatal(err)
	}
	v, err := pool.Look(ctx, slots, r.leases, "psp", 2)
	if err != nil {
		t.Fatal(err)
	}
	_, holds := v.Holds(claim)
	if starts := startNames(r.sfn); len(starts) != 1 || !holds {
		t.Errorf("starts %v, b-1 holds a slot %v, copies %d; want b-1 started in psp's last place (a-1 alone runs in it)", starts, holds, len(copies(t, r)))
	}
}

// A job's bind given back (its other pool filled, or its lease taken back) leaves a slot naming the
// job in its lane. Bound again in that lane, its new lease makes that slot live again: the bind
// takes it over (on its token) rather than a second slot, or the one job counts twice in the pool
// for as long as it runs, idling the pool's other members (simworld seed 21106 of all+pools: psp,
// cap 2, held by one beta job in both slots for 30 minutes while alpha's lane stood idle).
func TestRebindInTheSameLaneTakesOverTheSlotNamingItsJob(t *testing.T) {
	ctx := context.Background()
	r, slots := newPoolRig(t) // psp: cap 2, members a and b
	const ln = 3              // b-1's first lane (lane.Hashed)
	ghost := pool.HolderOf(boundLease("b", ln, "b-1"))
	if _, err := slots.Take(ctx, "psp", 2, ghost, nil); err != nil { // its lease given back since
		t.Fatal(err)
	}
	resp, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{waiting(t, "b", "b-1", 2)}})
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("b-1's bind = %+v, %v; want it bound", resp, err)
	}
	if l, ok := r.leases.Lease(boundLease("b", ln, "b-1").Key()); !ok || l.JobID != "b-1" {
		t.Fatalf("lane %d of b holds %+v, want b-1 bound there again", ln, l)
	}
	v, err := pool.Look(ctx, slots, r.leases, "psp", 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Live) != 1 || len(v.Free) != 1 {
		t.Errorf("pool psp: live %+v, free %+v; want b-1 in one slot and one free", v.Live, v.Free)
	}
	resp, err = r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{waiting(t, "a", "a-1", 1)}})
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Errorf("a-1's bind = %+v, %v; want it bound in psp's second place (b-1 alone runs in the pool)", resp, err)
	}
}

// A rebind in the same lane whose job's earlier slot lies above the pool's cap (written under a
// higher cap, or while slots below it were live) does not take that slot over: Look offers only the
// lowest free slots that leave room, so that two binds reading the same slots go for the same
// place, and a take above them lets both start (seeds 40023, 40060 and 40076 of all+pools: 3 jobs
// in a pool of 2, 2 in a pool of 1). The rebind names nobody in that slot, on its token, and takes
// an offered one: a bind that read the pool before it, and goes for the same place, loses it.
//
// Nor does a rebind that wrote its lease and stopped before that slot named nobody: the slot is
// live for the lease then, and the waiting message's next delivery, which reads the pool after the
// lease, judges it as if the lease held none (pool.View.Unheld), names nobody in it, and takes an
// offered place or gives the lane back.
func TestRebindDoesNotTakeOverASlotAboveTheCap(t *testing.T) {
	for _, cutShort := range []bool{false, true} {
		ctx := context.Background()
		r, slots := newPoolRig(t) // psp: cap 2, members a and b
		const ln = 3              // b-1's first lane (lane.Hashed)
		b := boundLease("b", ln, "b-1")
		if _, err := slots.Take(ctx, "psp", 3, pool.HolderOf(b), nil); err != nil { // taken under a cap of 3, its lease given back since
			t.Fatal(err)
		}
		resp, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{waiting(t, "a", "a-1", 1)}})
		if err != nil || len(resp.BatchItemFailures) != 0 {
			t.Fatalf("a-1's bind = %+v, %v; want it bound", resp, err)
		}
		before, err := pool.Look(ctx, slots, r.leases, "psp", 2) // another binder's look, before b-1's bind
		if err != nil || len(before.Free) != 1 || before.Free[0].N != 2 {
			t.Fatalf("psp before b-1's bind: free %+v, %v; want slot 2 offered", before.Free, err)
		}
		if cutShort { // b-1's bind stops after its lease
			b.MessageID = waiting(t, "b", "b-1", 1).MessageId
			if _, err := r.leases.Put(ctx, b, nil); err != nil {
				t.Fatal(err)
			}
		}
		resp, err = r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{waiting(t, "b", "b-1", 2)}})
		if err != nil || (!cutShort && len(resp.BatchItemFailures) != 0) {
			t.Fatalf("cut short %v: b-1's bind = %+v, %v; want it bound in psp's last place", cutShort, resp, err)
		}
		other := boundLease("a", 2, "a-2")
		if _, err := r.leases.Put(ctx, other, nil); err != nil {
			t.Fatal(err)
		}
		c := before.Free[0]
		if _, err := slots.Take(ctx, "psp", c.N, pool.HolderOf(other), c.Prev); !errors.Is(err, pool.ErrTaken) && (!cutShort || err != nil) {
			t.Errorf("cut short %v: the other binder's take of slot %d, as it read it before b-1's bind: %v; want ErrTaken (b-1 took that place)", cutShort, c.N, err)
		}
		v, err := pool.Look(ctx, slots, r.leases, "psp", 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(v.Live) > 2 {
			t.Errorf("cut short %v: psp live %+v: %d jobs in a pool of 2", cutShort, v.Live, len(v.Live))
		}
		if sl, ok := v.Holds(b); (ok || !cutShort) && (!ok || sl.N > 2) {
			t.Errorf("cut short %v: b-1 holds slot %+v (held %v); want a slot within the cap of 2 (or, cut short, none)", cutShort, sl, ok)
		}
	}
}

// fillPool binds a-1 and a-2, which run pool psp's cap of 2.
func fillPool(ctx context.Context, t *testing.T, r *rig) {
	t.Helper()
	resp, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{waiting(t, "a", "a-1", 1), waiting(t, "a", "a-2", 1)}})
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("a's batch = %+v, %v", resp, err)
	}
}

// slotsOf counts the slots of pool psp that name a job of type typ.
func slotsOf(ctx context.Context, t *testing.T, slots *pool.Store, typ string) int {
	t.Helper()
	ss, err := slots.Slots(ctx, "psp")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, sl := range ss {
		if sl.Holder.Type == typ {
			n++
		}
	}
	return n
}
