package releaser

import (
	"cmp"
	"context"
	"errors"
	"maps"
	"slices"
	"time"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
	"github.com/sfnlimit/sfnlimit/internal/lambda/pool"
)

// slotTaker reads and takes the slots of shared pools (pool.Store).
type slotTaker interface {
	pool.SlotReader
	Take(ctx context.Context, name string, n int, h pool.Holder, prev *pool.Slot) (pool.Slot, error)
}

// adoptRunning gives a slot of each of its pools to every lease of a pooled type that runs, or may
// start, an execution in its lane (a claim, a retry) and holds no live slot of that pool: a job
// that ran when its type joined the pool (or when the pool got its cap back). It takes the lowest
// free slot, or, with none free, the lowest above the cap, so the pool reads as full until enough
// of its jobs end (pool.Look counts live slots above the cap, and offers a free slot only beyond
// them). A bound lease is left to its claim, which takes its slots before it starts (overPool),
// and a lease changed within minAge to the delivery working on it. all are the leases the sweep
// read: only a pool whose members hold such a lease is looked at, and its members' leases are read
// again after its slots (a slot is written after its holder's lease).
func (s *Service) adoptRunning(ctx context.Context, all []lease.Lease, cs []config.TypeConfig, now time.Time, minAge time.Duration) {
	if s.Pools == nil {
		return
	}
	pools, members := poolsOf(cs)
	for _, name := range slices.Sorted(maps.Keys(pools)) {
		due := false
		for _, l := range all {
			due = due || (slices.Contains(members[name], l.Type) && adoptable(l, now, minAge))
		}
		if due {
			s.adoptInto(ctx, pools[name], members[name], now, minAge)
		}
	}
}

// poolsOf returns the pools of the types cs (each with its cap in force) and each pool's member types.
func poolsOf(cs []config.TypeConfig) (map[string]config.Pool, map[string][]string) {
	pools := map[string]config.Pool{}
	members := map[string][]string{}
	for _, c := range cs {
		for _, p := range c.Pools {
			pools[p.Name] = p
			members[p.Name] = append(members[p.Name], c.Type)
		}
	}
	return pools, members
}

// adoptable reports whether l runs, or may start, an execution in its lane, and has not changed
// within minAge.
func adoptable(l lease.Lease, now time.Time, minAge time.Duration) bool {
	return (l.Status == lease.Starting || l.Status == lease.Retrying) && now.Sub(l.UpdatedAt) >= minAge
}

// adoptInto adopts the leases of pool p's member types that hold none of its slots (adoptRunning).
// A take that finds its slot taken since looks again; a failure leaves the rest to the next sweep.
func (s *Service) adoptInto(ctx context.Context, p config.Pool, types []string, now time.Time, minAge time.Duration) {
	log := s.Log.With("pool", p.Name)
	for try := 0; try < 3; try++ {
		leases := cachedLeases{s: s.Leases, by: map[string][]lease.Lease{}}
		v, err := pool.Look(ctx, s.Pools, &leases, p.Name, p.Cap)
		if err != nil {
			log.WarnContext(ctx, "sweep: pool's slots not read; its members' running jobs are adopted at the next sweep", "error", err)
			return
		}
		var orphans []lease.Lease
		for _, t := range slices.Sorted(slices.Values(types)) {
			ls, err := leases.ListType(ctx, t)
			if err != nil {
				log.WarnContext(ctx, "sweep: a member's leases not read; its running jobs are adopted at the next sweep", "member", t, "error", err)
				continue
			}
			for _, l := range ls {
				if _, ok := v.Holds(l); !ok && adoptable(l, now, minAge) {
					orphans = append(orphans, l)
				}
			}
		}
		slices.SortFunc(orphans, func(a, b lease.Lease) int { return cmp.Or(cmp.Compare(a.Type, b.Type), cmp.Compare(a.Lane, b.Lane)) })
		taken := false
		for _, l := range orphans {
			n, prev := adoptSlot(&v)
			sl, err := s.Pools.Take(ctx, p.Name, n, pool.HolderOf(l), prev)
			if errors.Is(err, pool.ErrTaken) {
				taken = true
				break // a bind took it since the look: look again
			}
			if err != nil {
				log.WarnContext(ctx, "sweep: a running job's pool slot not taken; the next sweep tries again", "error", err)
				return
			}
			v.Live = append(v.Live, sl)
			log.WarnContext(ctx, "sweep gave a pool slot to a job that held none (it ran when its type joined the pool)",
				"jobId", l.JobID, "type", l.Type, "lane", l.Lane, "status", l.Status, "slot", n, "overCap", n > p.Cap)
		}
		if !taken {
			return
		}
	}
}

// adoptSlot is the slot an adoption takes in v, and the slot as read (nil: never taken): the lowest
// free one, else the lowest above the cap that no live slot holds. v's free slots lose the one
// named.
func adoptSlot(v *pool.View) (int, *pool.Slot) {
	if len(v.Free) > 0 {
		c := v.Free[0]
		v.Free = v.Free[1:]
		return c.N, c.Prev
	}
	live := map[int]bool{}
	for _, sl := range v.Live {
		live[sl.N] = true
	}
	n := v.Cap + 1
	for live[n] {
		n++
	}
	return n, v.Stored(n)
}
