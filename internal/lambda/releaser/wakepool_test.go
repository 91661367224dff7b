package releaser_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
	"github.com/sfnlimit/sfnlimit/internal/lambda/pool"
	"github.com/sfnlimit/sfnlimit/internal/lambda/releaser"
	"github.com/sfnlimit/sfnlimit/internal/lambda/waitroom"
	"github.com/sfnlimit/sfnlimit/internal/tools/fakes"
)

// newPoolRig is a rig whose config is d (with 3 attempts and the sample machine), with a wait room
// and pool slots.
func newPoolRig(t *testing.T, d config.Defaults) (*rig, *waitroom.Store, *pool.Store) {
	t.Helper()
	r := newRig(t)
	d.DefaultMaxAttempts, d.StateMachineArn = 3, smArn
	res, err := config.NewResolver(d, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	db := fakes.NewDynamoDB("table")
	room, slots := waitroom.NewStore(db, "table"), pool.NewStore(db, "table")
	r.svc.Config, r.svc.WaitRoom, r.svc.Pools = res, room, slots
	return r, room, slots
}

// psp is pool psp of cap n shared by types a and b.
func psp(limits map[string]int, n int, shares map[string]int) config.Defaults {
	return config.Defaults{Limits: limits, Pools: map[string]int{"psp": n}, TypePools: map[string][]string{"a": {"psp"}, "b": {"psp"}}, Shares: shares}
}

// A release in a pool wakes the parked heads of its member types fairly: the freed slot goes to the
// member under its fair share of the pool (the cap split by the shares of the members with work),
// whichever type freed it, and never to a member with no free lane of its own.
func TestReleaseWakesPoolMembersFairly(t *testing.T) {
	parked := func(typ string, submittedAgo time.Duration) waitroom.Waiter {
		return waitroom.Waiter{Type: typ, Group: typ + "-0", MessageID: "m-" + typ, ReceiptHandle: "h-" + typ, JobID: typ + "-head",
			AtPool: "psp", SubmittedAt: t0.Add(-submittedAgo), ParkedAt: t0}
	}
	running := func(typ string, n int) []lease.Lease {
		var out []lease.Lease
		for ln := 1; ln <= n; ln++ {
			out = append(out, held(typ, ln, fmt.Sprintf("%s-%d", typ, ln), 1, lease.Starting))
		}
		return out
	}
	tests := []struct {
		name   string
		limits map[string]int
		shares map[string]int
		leases []lease.Lease // each holds a slot; the first is released (succeeded)
		parked []waitroom.Waiter
		want   []string
	}{
		{
			name:   "the member running fewest gets the slot another member freed",
			limits: map[string]int{"a": 5, "b": 5},
			leases: append(running("a", 3), running("b", 1)...),
			parked: []waitroom.Waiter{parked("a", time.Hour), parked("b", time.Minute)},
			want:   []string{"h-b"},
		},
		{
			name:   "shares weigh running jobs",
			limits: map[string]int{"a": 5, "b": 5},
			shares: map[string]int{"a": 3},
			leases: append(running("a", 3), running("b", 1)...),
			parked: []waitroom.Waiter{parked("a", time.Minute), parked("b", time.Hour)},
			want:   []string{"h-a"},
		},
		{
			name:   "equal for their shares, two slots free: one wake-up each",
			limits: map[string]int{"a": 5, "b": 5},
			leases: append(running("a", 2), running("b", 1)...),
			parked: []waitroom.Waiter{parked("a", time.Minute), parked("b", time.Hour)},
			want:   []string{"h-a", "h-b"},
		},
		{
			name:   "a lone member with work takes the slot",
			limits: map[string]int{"a": 5, "b": 5},
			leases: append(running("a", 3), running("b", 1)...),
			parked: []waitroom.Waiter{parked("a", time.Minute)},
			want:   []string{"h-a"},
		},
		{
			name:   "a member with no free lane is passed over",
			limits: map[string]int{"a": 5, "b": 1},
			leases: append(running("a", 3), running("b", 1)...),
			parked: []waitroom.Waiter{parked("a", time.Minute), parked("b", time.Hour)},
			want:   []string{"h-a"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			r, room, slots := newPoolRig(t, psp(tt.limits, 4, tt.shares))
			for _, w := range tt.parked {
				if err := room.Park(ctx, w); err != nil {
					t.Fatal(err)
				}
			}
			for i, l := range tt.leases {
				r.leases.Set(l)
				if _, err := slots.Take(ctx, "psp", i+1, pool.HolderOf(l), nil); err != nil {
					t.Fatal(err)
				}
			}
			rel := tt.leases[0]
			if _, err := r.svc.Release(ctx, req(rel.Type, rel.Lane, rel.JobID, 1, releaser.Succeeded, "", "")); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, v := range r.sqs.VisibilityChanges() {
				if v.Timeout == 0 {
					got = append(got, v.ReceiptHandle)
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, tt.want) {
				t.Errorf("parked handles made visible = %v, want %v", got, tt.want)
			}
		})
	}
}

// A member in two pools whose head waits at the other one, still full, would only park again: a
// release in this pool wakes a member that can use the freed slot instead (else the slot waits for
// that member's head to look again by itself, a minute later, at every release). The other pool is
// full as much with a member's claim that holds no slot (a type that joined it under running jobs:
// pool.View.Unslotted) as with a live slot.
func TestReleaseInAPoolPassesOverAHeadWaitingAtItsOtherFullPool(t *testing.T) {
	for _, unslotted := range []bool{false, true} {
		name := "llm full with a live slot"
		if unslotted {
			name = "llm full with a claim that holds no slot"
		}
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			r, room, slots := newPoolRig(t, config.Defaults{
				Limits: map[string]int{"c": 5, "d": 5, "e": 5}, Pools: map[string]int{"psp": 2, "llm": 1},
				TypePools: map[string][]string{"c": {"psp", "llm"}, "d": {"psp"}, "e": {"llm"}},
			})
			for _, w := range []waitroom.Waiter{
				{Type: "c", Group: "c-0", MessageID: "m-c", ReceiptHandle: "h-c", JobID: "c-head", AtPool: "llm", SubmittedAt: t0.Add(-time.Hour), ParkedAt: t0},
				{Type: "d", Group: "d-0", MessageID: "m-d", ReceiptHandle: "h-d", JobID: "d-head", AtPool: "psp", SubmittedAt: t0.Add(-time.Minute), ParkedAt: t0},
			} {
				if err := room.Park(ctx, w); err != nil {
					t.Fatal(err)
				}
			}
			type slotOf struct {
				pool string
				n    int
				l    lease.Lease
			}
			e1 := held("e", 1, "e-1", 1, lease.Starting)
			r.leases.Set(e1) // without a slot: ran when e joined llm
			taken := []slotOf{{"psp", 1, held("d", 1, "d-1", 1, lease.Starting)}, {"psp", 2, held("d", 2, "d-2", 1, lease.Starting)}}
			if !unslotted {
				taken = append(taken, slotOf{"llm", 1, e1})
			}
			for _, s := range taken {
				r.leases.Set(s.l)
				if _, err := slots.Take(ctx, s.pool, s.n, pool.HolderOf(s.l), nil); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := r.svc.Release(ctx, req("d", 1, "d-1", 1, releaser.Succeeded, "", "")); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, v := range r.sqs.VisibilityChanges() {
				if v.Timeout == 0 {
					got = append(got, v.ReceiptHandle)
				}
			}
			if !slices.Equal(got, []string{"h-d"}) {
				t.Errorf("parked handles made visible = %v, want [h-d]: c's head waits for pool llm, still full", got)
			}
		})
	}
}

// A raised cap starts waiting jobs at once: WakePool (what `sfnlimit config pool set` calls after a
// raise) and every sweep wake one parked head per slot the pool has free, fairly, and nobody while
// the pool is full. Without them the heads parked at the pool waited out their park (a minute)
// beside the free slots.
func TestRaisedPoolCapWakesParkedMembers(t *testing.T) {
	tests := []struct {
		name  string
		cap   int // in force after the raise; slots 1-3 are held (a, a, b)
		sweep bool
		want  []string
	}{
		{name: "pool set: one head per free slot", cap: 5, want: []string{"h-a", "h-b"}},
		{name: "pool set: one free slot goes to the member under its share", cap: 4, want: []string{"h-b"}},
		{name: "pool set: a full pool wakes nobody", cap: 3},
		{name: "sweep: one head per free slot", cap: 5, sweep: true, want: []string{"h-a", "h-b"}},
		{name: "sweep: a full pool wakes nobody", cap: 3, sweep: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			r, room, slots := newPoolRig(t, psp(map[string]int{"a": 5, "b": 5}, tt.cap, nil))
			for _, typ := range []string{"a", "b"} {
				if err := room.Park(ctx, waitroom.Waiter{Type: typ, Group: typ + "-0", MessageID: "m-" + typ, ReceiptHandle: "h-" + typ,
					JobID: typ + "-head", AtPool: "psp", SubmittedAt: t0.Add(-time.Minute), ParkedAt: t0}); err != nil {
					t.Fatal(err)
				}
			}
			for i, l := range []lease.Lease{held("a", 1, "a-1", 1, lease.Starting), held("a", 2, "a-2", 1, lease.Starting), held("b", 1, "b-1", 1, lease.Starting)} {
				l.UpdatedAt = t0 // recent: the sweep leaves them to their own releases
				r.leases.Set(l)
				r.sfn.Put(execution(l.Type, l.Lane, l.JobID, l.Attempt, `{}`, "RUNNING", "", ""))
				if _, err := slots.Take(ctx, "psp", i+1, pool.HolderOf(l), nil); err != nil {
					t.Fatal(err)
				}
			}
			if tt.sweep {
				if _, err := r.h.Handle(ctx, fixture(t, "scheduled_event.json")); err != nil {
					t.Fatalf("sweep: %v", err)
				}
			} else {
				n, err := r.svc.WakePool(ctx, "psp")
				if err != nil {
					t.Fatal(err)
				}
				if n != len(tt.want) {
					t.Errorf("WakePool = %d woken, want %d", n, len(tt.want))
				}
			}
			got := visibleHandles(r.sqs)
			slices.Sort(got)
			if !slices.Equal(got, tt.want) {
				t.Errorf("parked handles made visible = %v, want %v", got, tt.want)
			}
		})
	}
}
