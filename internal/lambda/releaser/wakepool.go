package releaser

import (
	"cmp"
	"context"
	"log/slog"
	"maps"
	"slices"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
	"github.com/sfnlimit/sfnlimit/internal/lambda/metrics"
	"github.com/sfnlimit/sfnlimit/internal/lambda/pool"
	"github.com/sfnlimit/sfnlimit/internal/lambda/waitroom"
)

// wakeFreed wakes the parked jobs a lane of typ freed room for: its own type's (wake), or, for a
// type in pools, each pool's members fairly (wakePool), since the slot it freed is theirs as much
// as its own.
func (s *Service) wakeFreed(ctx context.Context, log *slog.Logger, typ string) {
	cfg, err := s.Config.Get(ctx, typ)
	if err != nil || !cfg.Pooled() || s.Pools == nil {
		s.wake(ctx, log, typ)
		return
	}
	for _, p := range cfg.Pools {
		s.wakePool(ctx, log.With("pool", p.Name), p)
	}
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
// maxWakes), fairly: each slot goes to the member type with the fewest running jobs in the pool for
// its share (running/share, counting those woken by this call), then to the type whose best head
// was submitted earliest. So a type with a backlog never takes a freed slot from a type running
// fewer for its share, and a lone type with work gets every slot its lanes can use.
//
// A failure only delays a parked job: it looks again by itself after waitroom.ParkFor.
func (s *Service) wakePool(ctx context.Context, log *slog.Logger, p config.Pool) {
	if s.WaitRoom == nil {
		return
	}
	types, err := s.Config.Members(ctx, p.Name)
	if err != nil {
		log.WarnContext(ctx, "pool's members not read; a parked job looks again within a minute", "error", err)
		return
	}
	leases := cachedLeases{s: s.Leases, by: map[string][]lease.Lease{}}
	v, err := pool.Look(ctx, s.Pools, &leases, p.Name, p.Cap)
	if err != nil {
		log.WarnContext(ctx, "pool's slots not read; a parked job looks again within a minute", "error", err)
		return
	}
	room := min(v.Room(), maxWakes)
	if room == 0 {
		return
	}
	running := v.Running()
	var ms []*member
	for _, c := range types {
		if c.Paused() {
			continue
		}
		m, err := s.pooledHeads(ctx, &leases, c)
		if err != nil {
			log.WarnContext(ctx, "a member's parked jobs not read; they look again within a minute", "member", c.Type, "error", err)
			continue
		}
		if m != nil {
			m.running = running[c.Type]
			ms = append(ms, m)
		}
	}
	for woken, tries := 0, 0; woken < room && tries < room+3; tries++ {
		m := nextMember(ms)
		if m == nil {
			return
		}
		w := m.heads[0]
		m.heads = m.heads[1:]
		ok, err := s.WaitRoom.Claim(ctx, w)
		if err != nil {
			log.WarnContext(ctx, "parked job not taken; it looks again within a minute", "parkedJobId", w.JobID, "error", err)
			return
		}
		if !ok {
			continue // taken by another release, or parked again by its group
		}
		_, err = s.Queue.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
			QueueUrl: &s.QueueURL, ReceiptHandle: &w.ReceiptHandle, VisibilityTimeout: 0,
		})
		if err != nil && !IsStaleHandle(err) {
			log.WarnContext(ctx, "parked job not woken; it looks again within a minute", "parkedJobId", w.JobID, "error", err)
			return
		}
		if err == nil {
			woken++
			m.woken++
			log.InfoContext(ctx, "woke a parked job for a free pool slot", "parkedJobId", w.JobID, "member", w.Type, "key", w.Key, "group", w.Group)
			s.Metrics.Add(w.Type, metrics.JobsWoken, 1)
		}
	}
}

// nextMember is the member type the next free slot goes to: of those with heads left, the fewest
// running (and woken) for its share, then the earliest-submitted head, then by type.
func nextMember(ms []*member) *member {
	var best *member
	for _, m := range ms {
		if len(m.heads) == 0 {
			continue
		}
		if best == nil || cmp.Or(
			cmp.Compare((m.running+m.woken)*share(best.cfg), (best.running+best.woken)*share(m.cfg)),
			m.heads[0].SubmittedAt.Compare(best.heads[0].SubmittedAt),
			cmp.Compare(m.cfg.Type, best.cfg.Type)) < 0 {
			best = m
		}
	}
	return best
}

// share is a type's share in its pools (at least 1).
func share(c config.TypeConfig) int {
	if len(c.Pools) == 0 || c.Pools[0].Share < 1 {
		return 1
	}
	return c.Pools[0].Share
}

// pooledHeads returns a member type's parked heads that could bind now, as many as it has free
// lanes, in its own wake-up's order (nil: none).
func (s *Service) pooledHeads(ctx context.Context, leases *cachedLeases, c config.TypeConfig) (*member, error) {
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
	if len(ws) == 0 {
		return nil, nil
	}
	return &member{cfg: c, heads: ws}, nil
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

// poolGauges records each pool's running jobs (its live slots) and their share of its cap.
func (s *Service) poolGauges(ctx context.Context, cs []config.TypeConfig) {
	if s.Pools == nil {
		return
	}
	caps := map[string]int{}
	for _, c := range cs {
		for _, p := range c.Pools {
			caps[p.Name] = p.Cap
		}
	}
	leases := cachedLeases{s: s.Leases, by: map[string][]lease.Lease{}}
	for _, name := range slices.Sorted(maps.Keys(caps)) {
		v, err := pool.Look(ctx, s.Pools, &leases, name, caps[name])
		if err != nil {
			s.Log.WarnContext(ctx, "pool's slots not read for its gauges", "pool", name, "error", err)
			continue
		}
		s.Metrics.ObservePool(name, metrics.PoolRunning, float64(len(v.Live)))
		s.Metrics.ObservePool(name, metrics.PoolOccupancy, 100*float64(len(v.Live))/float64(v.Cap))
	}
}
