package releaser

import (
	"cmp"
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"maps"
	"slices"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
	"github.com/sfnlimit/sfnlimit/internal/lambda/metrics"
	"github.com/sfnlimit/sfnlimit/internal/lambda/pool"
	"github.com/sfnlimit/sfnlimit/internal/lambda/waitroom"
)

// wakeFreed wakes the parked jobs a lane of typ freed room for: its own type's (wake), or, for a
// type in pools, each pool's members fairly (wakePool), since the slot it freed is theirs as much
// as its own. A failure only delays a parked job: the next sweep wakes it while there is room.
func (s *Service) wakeFreed(ctx context.Context, log *slog.Logger, freed lease.Lease) {
	cfg, err := s.Config.Get(ctx, freed.Type)
	if err != nil || !cfg.Pooled() || s.Pools == nil {
		s.wake(ctx, log, freed.Type, 1)
		return
	}
	for _, p := range cfg.Pools {
		plog := log.With("pool", p.Name)
		if _, err := s.wakePool(ctx, plog, p, freed.Key().String()+"/"+freed.JobID); err != nil {
			plog.WarnContext(ctx, "pool's parked jobs not woken; a parked job looks again within a minute", "error", err)
		}
	}
}

// WakePool wakes parked jobs of pool name's member types for the pool's free slots, fairly, as a
// release in the pool does, and returns how many it woke. `sfnlimit config pool set` calls it
// when it raises a cap, and every sweep for each pool with room (a cap raised by a deployment, or
// a wake-up cut short), so a raised cap starts waiting jobs at once rather than after their park.
// A pool without a cap in force, or without members, wakes nobody.
func (s *Service) WakePool(ctx context.Context, name string) (int, error) {
	if s.WaitRoom == nil || s.Pools == nil {
		return 0, nil
	}
	types, err := s.Config.Members(ctx, name)
	if err != nil || len(types) == 0 {
		return 0, err
	}
	i := slices.IndexFunc(types[0].Pools, func(p config.Pool) bool { return p.Name == name })
	return s.wakePool(ctx, s.Log.With("pool", name), types[0].Pools[i], "wake/"+name+"/"+s.now().String())
}

// member is one type of a pool as a wake-up sees it: its parked heads that could bind (a free lane,
// their key under its cap), in the order its own wake-up would take them, and its running jobs in
// the pool.
type member struct {
	cfg     config.TypeConfig
	heads   []waitroom.Waiter
	running int
	woken   int
}

// wakePool wakes parked heads of the pool's member types, one per slot free in the pool (at most
// maxWakes), fairly (nextMember): each slot goes to a member type below its fair share of the cap,
// the share of the members with work (running or parked) in proportion to their shares, and else
// to the member least over it. So a type with a backlog never takes a freed slot from a type under
// its share, each member with work gets its share over time (a fractional share by turns), and a
// lone type with work gets every slot its lanes can use. seed makes the turns (the freed lane and
// job: any value that differs from release to release). It returns how many it woke; an error
// says where it stopped (the next sweep wakes parked jobs while the pool has room).
func (s *Service) wakePool(ctx context.Context, log *slog.Logger, p config.Pool, seed string) (int, error) {
	if s.WaitRoom == nil {
		return 0, nil
	}
	types, err := s.Config.Members(ctx, p.Name)
	if err != nil {
		return 0, fmt.Errorf("read pool %s's members: %w", p.Name, err)
	}
	names := make([]string, len(types))
	for i, c := range types {
		names[i] = c.Type
	}
	leases := cachedLeases{s: s.Leases, by: map[string][]lease.Lease{}}
	v, err := pool.Look(ctx, s.Pools, &leases, p.Name, p.Cap, names...)
	if err != nil {
		return 0, fmt.Errorf("read pool %s's slots: %w", p.Name, err)
	}
	room := min(v.Room(), maxWakes)
	if room == 0 {
		return 0, nil
	}
	running := v.Running()
	full := map[string]bool{} // the members' other pools, by whether they run their caps
	var ms []*member
	for _, c := range types {
		m := &member{cfg: c, running: running[c.Type]}
		if !c.Paused() {
			if m.heads, err = s.pooledHeads(ctx, &leases, c); err != nil {
				log.WarnContext(ctx, "a member's parked jobs not read; they look again within a minute", "member", c.Type, "error", err)
			}
		}
		if m.running > 0 || len(m.heads) > 0 {
			ms = append(ms, m)
		}
		// Its heads waiting at another pool still full have work all the same (the shares are
		// split as before), but no use for this slot.
		m.heads = slices.DeleteFunc(m.heads, func(w waitroom.Waiter) bool {
			return s.atOtherFullPool(ctx, &leases, c, p.Name, w, full)
		})
	}
	woken := 0
	for tries := 0; woken < room && tries < room+3; tries++ {
		m := nextMember(ms, p.Cap, turn(seed, tries))
		if m == nil {
			break
		}
		w := m.heads[0]
		m.heads = m.heads[1:]
		ok, stop := s.wakeHead(ctx, log, w)
		if stop {
			return woken, fmt.Errorf("wake parked job %s of pool %s", w.JobID, p.Name)
		}
		if ok {
			woken++
			m.woken++
			log.InfoContext(ctx, "woke a parked job for a free pool slot", "parkedJobId", w.JobID, "member", w.Type, "key", w.Key, "group", w.Group)
			s.Metrics.Add(w.Type, metrics.JobsWoken, 1)
		}
	}
	return woken, nil
}

// nextMember is the member type the next free slot of a pool of cap goes to, of those with heads
// left. A member's fair share is the cap split among the members with work (ms: running or parked)
// in proportion to their shares, and its deficit that share less its running (and woken) jobs.
// Members with a deficit get the slot by turns, in proportion to their weight, by u (a number in
// [0, 1)): a share of 7.5 slots is 7 and 8 by turns, 7.5 on average. With none, the member least
// over its share, then the earliest-submitted head, then by type.
func nextMember(ms []*member, cap int, u float64) *member {
	total := 0
	for _, m := range ms {
		total += share(m.cfg)
	}
	deficit := func(m *member) float64 {
		return float64(cap*share(m.cfg))/float64(total) - float64(m.running+m.woken)
	}
	var under []*member
	sum := 0.0
	var best *member
	for _, m := range ms {
		if len(m.heads) == 0 {
			continue
		}
		if d := deficit(m); d > 0 {
			under, sum = append(under, m), sum+weight(m, d)
		}
		if best == nil || cmp.Or(cmp.Compare(deficit(best), deficit(m)),
			m.heads[0].SubmittedAt.Compare(best.heads[0].SubmittedAt), cmp.Compare(m.cfg.Type, best.cfg.Type)) < 0 {
			best = m
		}
	}
	for _, m := range under {
		if u -= weight(m, deficit(m)) / sum; u < 0 {
			return m
		}
	}
	return best
}

// weight is a member's chance of a slot against the others under their shares: its deficit d, times
// its running jobs and one. A member's jobs end in proportion to how many run, so a member running
// more leaves the state where it holds one more slot sooner: weighed so, the turns of a fractional
// share balance over time (3:1 in a pool of 10 is 7.5 : 2.5 on average, not 7.3 : 2.7).
func weight(m *member, d float64) float64 { return d * float64(m.running+m.woken+1) }

// turn is a number in [0, 1) drawn from seed and n: the same release makes the same turns.
func turn(seed string, n int) float64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s#%d", seed, n)
	return float64(h.Sum64()>>11) / (1 << 53)
}

// share is a type's share in its pools (at least 1).
func share(c config.TypeConfig) int {
	if len(c.Pools) == 0 || c.Pools[0].Share < 1 {
		return 1
	}
	return c.Pools[0].Share
}

// pooledHeads returns a member type's parked heads that could bind now, as many as it has free
// lanes, in its own wake-up's order.
func (s *Service) pooledHeads(ctx context.Context, leases *cachedLeases, c config.TypeConfig) ([]waitroom.Waiter, error) {
	ws, err := s.WaitRoom.List(ctx, c.Type)
	if err != nil || len(ws) == 0 {
		return nil, err
	}
	ws = slices.DeleteFunc(ws, func(w waitroom.Waiter) bool {
		_, ln, err := job.ParseGroupID(w.Group)
		return err == nil && ln != job.WaitingLane // parked in its lane by a pause: the resume wakes it
	})
	ls, err := leases.ListType(ctx, c.Type)
	if err != nil {
		return nil, err
	}
	byKey, taken := map[string]int{}, 0
	for _, l := range ls {
		byKey[l.JobKey]++
		if l.Lane <= c.Limit {
			taken++
		}
	}
	free := max(c.Limit-taken, 0)
	now := s.now()
	rank := func(w waitroom.Waiter) int { return EffectivePriority(w, now, s.PriorityAging) }
	ws = slices.DeleteFunc(ws, func(w waitroom.Waiter) bool { return c.CapsKeys() && byKey[w.Key] >= c.KeyCap(w.Key) })
	slices.SortFunc(ws, func(a, b waitroom.Waiter) int {
		return cmp.Or(cmp.Compare(rank(b), rank(a)), cmp.Compare(byKey[a.Key], byKey[b.Key]),
			a.SubmittedAt.Compare(b.SubmittedAt), a.ParkedAt.Compare(b.ParkedAt), cmp.Compare(a.Group, b.Group))
	})
	if len(ws) > free {
		ws = ws[:free]
	}
	return ws, nil
}

// atOtherFullPool reports whether head w of member c waits at another of c's pools than this one,
// still at its cap: woken for this pool's slot it would only park again, while the slot waits for a
// member that could use it (that pool's releases wake it). full caches each pool's answer.
func (s *Service) atOtherFullPool(ctx context.Context, leases *cachedLeases, c config.TypeConfig, this string, w waitroom.Waiter, full map[string]bool) bool {
	if w.AtPool == "" || w.AtPool == this {
		return false
	}
	i := slices.IndexFunc(c.Pools, func(p config.Pool) bool { return p.Name == w.AtPool })
	if i < 0 {
		return false // no longer its pool, or without a cap
	}
	f, ok := full[w.AtPool]
	if !ok {
		var names []string
		ms, err := s.Config.Members(ctx, w.AtPool)
		for _, m := range ms {
			names = append(names, m.Type)
		}
		if err == nil {
			var v pool.View
			v, err = pool.Look(ctx, s.Pools, leases, w.AtPool, c.Pools[i].Cap, names...)
			f = err == nil && v.Room() == 0
		}
		full[w.AtPool] = f
	}
	return f
}

// cachedLeases reads each type's leases once per wake-up.
type cachedLeases struct {
	s  leaseStore
	by map[string][]lease.Lease
}

func (c *cachedLeases) ListType(ctx context.Context, typ string) ([]lease.Lease, error) {
	if ls, ok := c.by[typ]; ok {
		return ls, nil
	}
	ls, err := c.s.ListType(ctx, typ)
	if err != nil {
		return nil, err
	}
	c.by[typ] = ls
	return ls, nil
}

// sweepPools records each pool's running jobs (its live slots) and their share of its cap, and
// wakes parked jobs for the room a pool has (WakePool): a cap raised by a deployment, or a wake-up
// that failed, starts waiting jobs within a sweep rather than after their park.
func (s *Service) sweepPools(ctx context.Context, cs []config.TypeConfig) {
	if s.Pools == nil {
		return
	}
	caps, members := poolsOf(cs)
	leases := cachedLeases{s: s.Leases, by: map[string][]lease.Lease{}}
	for _, name := range slices.Sorted(maps.Keys(caps)) {
		log := s.Log.With("pool", name)
		v, err := pool.Look(ctx, s.Pools, &leases, name, caps[name].Cap, members[name]...)
		if err != nil {
			log.WarnContext(ctx, "pool's slots not read for its gauges", "error", err)
			continue
		}
		running := len(v.Live) + len(v.Unslotted)
		s.Metrics.ObservePool(name, metrics.PoolRunning, float64(running))
		s.Metrics.ObservePool(name, metrics.PoolOccupancy, 100*float64(running)/float64(v.Cap))
		if v.Room() == 0 {
			continue
		}
		if n, err := s.wakePool(ctx, log, caps[name], "sweep/"+name+"/"+s.now().String()); err != nil {
			log.WarnContext(ctx, "sweep: pool's parked jobs not woken; the next sweep tries again", "woken", n, "error", err)
		} else if n > 0 {
			log.InfoContext(ctx, "sweep woke parked jobs for a pool's free slots", "woken", n)
		}
	}
}
