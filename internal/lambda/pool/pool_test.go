package pool_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
	"github.com/sfnlimit/sfnlimit/internal/lambda/pool"
	"github.com/sfnlimit/sfnlimit/internal/tools/fakes"
)

// leasesOf is a LeaseLister over fixed leases.
type leasesOf []lease.Lease

func (ls leasesOf) ListType(_ context.Context, typ string) ([]lease.Lease, error) {
	var out []lease.Lease
	for _, l := range ls {
		if l.Type == typ {
			out = append(out, l)
		}
	}
	return out, nil
}

func bound(typ string, ln int, id string) lease.Lease {
	return lease.Lease{Type: typ, Lane: ln, JobID: id, Status: lease.Bound}
}

// claim is the lease of a job whose execution runs (or is starting) in its lane.
func claim(typ string, ln int, id string) lease.Lease {
	return lease.Lease{Type: typ, Lane: ln, JobID: id, Status: lease.Starting}
}

// retrying is the lease of a job whose attempt failed and waits to start again in its lane.
func retrying(typ string, ln int, id string) lease.Lease {
	return lease.Lease{Type: typ, Lane: ln, JobID: id, Status: lease.Retrying}
}

// moving is the lease of a job leaving its lane (to wait, or for another lane): no execution runs
// in it, and the job binds again elsewhere, taking a slot of its own.
func moving(typ string, ln int, id string) lease.Lease {
	return lease.Lease{Type: typ, Lane: ln, JobID: id, Status: lease.Moving}
}

// deadLettering is the lease of a job whose last attempt ended for good: it never starts again, and
// the lease may wait for the sweep's takeover of its dead letter.
func deadLettering(typ string, ln int, id string) lease.Lease {
	return lease.Lease{Type: typ, Lane: ln, JobID: id, Status: lease.DeadLettering}
}

func TestLook(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name     string
		cap      int
		holders  []lease.Lease // slot n+1 taken by holders[n]
		leases   leasesOf      // the leases when the pool is looked at
		members  []string      // the pool's member types, whose claims without a slot count
		wantLive int           // live slots, and claims without one
		wantFree []int
		wantLeft int // slots still held by jobs of types not among members
	}{
		{name: "empty", cap: 3, wantFree: []int{1, 2, 3}},
		{name: "held slots are live", cap: 3, holders: []lease.Lease{bound("a", 1, "j1"), bound("b", 1, "j2")},
			leases: leasesOf{bound("a", 1, "j1"), bound("b", 1, "j2")}, wantLive: 2, wantFree: []int{3}},
		{name: "a slot whose lease is gone is free", cap: 2, holders: []lease.Lease{bound("a", 1, "j1"), bound("b", 1, "j2")},
			leases: leasesOf{bound("b", 1, "j2")}, wantLive: 1, wantFree: []int{1}},
		{name: "a slot whose lane holds another job is free", cap: 2, holders: []lease.Lease{bound("a", 1, "j1"), bound("b", 1, "j2")},
			leases: leasesOf{bound("a", 1, "j9"), bound("b", 1, "j2")}, wantLive: 1, wantFree: []int{1}},
		{name: "a slot whose job is moving out of its lane is free", cap: 2, holders: []lease.Lease{bound("a", 1, "j1"), bound("b", 1, "j2")},
			leases: leasesOf{moving("a", 1, "j1"), bound("b", 1, "j2")}, wantLive: 1, wantFree: []int{1}},
		{name: "a slot whose job ended for good and is being dead-lettered is free", cap: 2, holders: []lease.Lease{bound("a", 1, "j1"), bound("b", 1, "j2")},
			leases: leasesOf{deadLettering("a", 1, "j1"), bound("b", 1, "j2")}, wantLive: 1, wantFree: []int{1}},
		{name: "full", cap: 2, holders: []lease.Lease{bound("a", 1, "j1"), bound("a", 2, "j2")},
			leases: leasesOf{bound("a", 1, "j1"), bound("a", 2, "j2")}, wantLive: 2},
		{name: "cap lowered under live slots: none offered", cap: 2, holders: []lease.Lease{bound("a", 1, "j1"), bound("a", 2, "j2"), bound("a", 3, "j3")},
			leases: leasesOf{bound("a", 2, "j2"), bound("a", 3, "j3")}, wantLive: 2},
		{name: "cap lowered: the lowest free slot left after those above it", cap: 3,
			holders: []lease.Lease{bound("a", 1, "j1"), bound("a", 2, "j2"), bound("a", 3, "j3"), bound("a", 4, "j4")},
			leases:  leasesOf{bound("a", 4, "j4")}, wantLive: 1, wantFree: []int{1, 2}},
		{name: "a member's claim without a slot (it ran when its type joined) counts", cap: 3, holders: []lease.Lease{bound("a", 1, "j1")},
			leases: leasesOf{bound("a", 1, "j1"), claim("b", 1, "j2")}, members: []string{"a", "b"}, wantLive: 2, wantFree: []int{2}},
		{name: "claims without slots fill the pool", cap: 2, holders: []lease.Lease{bound("a", 1, "j1")},
			leases: leasesOf{bound("a", 1, "j1"), claim("b", 1, "j2"), claim("b", 2, "j3")}, members: []string{"a", "b"}, wantLive: 3},
		{name: "a bound lease without its slot yet (a bind under way) does not count", cap: 2, holders: []lease.Lease{bound("a", 1, "j1")},
			leases: leasesOf{bound("a", 1, "j1"), bound("b", 1, "j2")}, members: []string{"a", "b"}, wantLive: 1, wantFree: []int{2}},
		{name: "a retry (nothing runs) or a type not a member does not count", cap: 2, holders: []lease.Lease{bound("a", 1, "j1")},
			leases:  leasesOf{bound("a", 1, "j1"), retrying("b", 1, "j2"), claim("c", 1, "j3")},
			members: []string{"a", "b"}, wantLive: 1, wantFree: []int{2}},
		// Type b left the pool with a job running, which failed and waits to start again: its slot
		// (taken when the cap was higher) counts no more, or a look by a member finds the pool
		// full while its members run less than its cap, for as long as that job is retried.
		{name: "a slot held by a type no longer a member is free", cap: 2,
			holders: []lease.Lease{claim("a", 1, "j1"), claim("b", 4, "j2"), retrying("b", 2, "j3")},
			leases:  leasesOf{claim("a", 1, "j1"), claim("b", 4, "j2"), retrying("b", 2, "j3")},
			members: []string{"a", "g"}, wantLive: 1, wantFree: []int{2}, wantLeft: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := pool.NewStore(fakes.NewDynamoDB("table"), "table")
			for i, h := range tt.holders {
				if _, err := s.Take(ctx, "psp", i+1, pool.HolderOf(h), nil); err != nil {
					t.Fatal(err)
				}
			}
			v, err := pool.Look(ctx, s, tt.leases, "psp", tt.cap, tt.members...)
			if err != nil {
				t.Fatal(err)
			}
			var free []int
			for _, c := range v.Free {
				free = append(free, c.N)
				if (c.Prev != nil) != (c.N <= len(tt.holders)) {
					t.Errorf("slot %d offered with prev %v: a slot ever taken is taken over its last write", c.N, c.Prev)
				}
			}
			if len(v.Live)+len(v.Unslotted) != tt.wantLive || !slices.Equal(free, tt.wantFree) {
				t.Errorf("live %d (and %d claims without a slot), free %v; want live %d, free %v", len(v.Live), len(v.Unslotted), free, tt.wantLive, tt.wantFree)
			}
			if len(v.Left) != tt.wantLeft {
				t.Errorf("%d slots held by types not in the pool, want %d", len(v.Left), tt.wantLeft)
			}
			if v.Room() != max(tt.cap-tt.wantLive, 0) {
				t.Errorf("Room = %d, want %d", v.Room(), max(tt.cap-tt.wantLive, 0))
			}
		})
	}
}

// Of two takes of one slot read alike, one wins: never two holders counted on one slot.
func TestTakeIsConditionalOnTheSlotRead(t *testing.T) {
	ctx := context.Background()
	s := pool.NewStore(fakes.NewDynamoDB("table"), "table")
	if _, err := s.Take(ctx, "psp", 1, pool.HolderOf(bound("a", 1, "j1")), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Take(ctx, "psp", 1, pool.HolderOf(bound("b", 1, "j2")), nil); !errors.Is(err, pool.ErrTaken) {
		t.Fatalf("second take of a new slot = %v, want ErrTaken", err)
	}
	v, err := pool.Look(ctx, s, leasesOf{}, "psp", 1) // j1's lease is gone: the slot is free
	if err != nil || len(v.Free) != 1 {
		t.Fatalf("Look = %+v, %v", v, err)
	}
	if _, err := s.Take(ctx, "psp", 1, pool.HolderOf(bound("b", 1, "j2")), v.Free[0].Prev); err != nil {
		t.Fatalf("take over a free slot = %v", err)
	}
	if _, err := s.Take(ctx, "psp", 1, pool.HolderOf(bound("c", 1, "j3")), v.Free[0].Prev); !errors.Is(err, pool.ErrTaken) {
		t.Fatalf("take over the same read = %v, want ErrTaken", err)
	}
}

// retried applies each PutItem, then sends it again, as the SDK does when the first answer is lost.
type retried struct{ *fakes.DynamoDB }

func (r retried) PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	if _, err := r.DynamoDB.PutItem(ctx, in, opts...); err != nil {
		return nil, err
	}
	return r.DynamoDB.PutItem(ctx, in, opts...)
}

// A take that DynamoDB applied and answered as failed is its own: a success, not a slot lost.
func TestTakeAppliedButAnsweredAsFailedIsTaken(t *testing.T) {
	ctx := context.Background()
	db := fakes.NewDynamoDB("table")
	s := pool.NewStore(retried{db}, "table")
	if _, err := s.Take(ctx, "psp", 1, pool.HolderOf(bound("a", 1, "j1")), nil); err != nil {
		t.Fatalf("take whose first answer was lost = %v, want success", err)
	}
	ss, err := s.Slots(ctx, "psp")
	if err != nil || len(ss) != 1 || ss[0].Holder.JobID != "j1" {
		t.Fatalf("slots = %+v, %v", ss, err)
	}
	prev := ss[0]
	if _, err := s.Take(ctx, "psp", 1, pool.HolderOf(bound("b", 1, "j2")), &prev); err != nil {
		t.Fatalf("take over a slot whose first answer was lost = %v, want success", err)
	}
}
