package starter

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
	"github.com/sfnlimit/sfnlimit/internal/lambda/pool"
)

// slotStore reads and takes pool slots (internal/lambda/pool).
type slotStore interface {
	pool.SlotReader
	Take(ctx context.Context, name string, n int, h pool.Holder, prev *pool.Slot) (pool.Slot, error)
}

// lookPools reads each of the type's pools; full names the first with no room for another job.
func (s *Starter) lookPools(ctx context.Context, cfg config.TypeConfig) (views []pool.View, full string, err error) {
	if !cfg.Pooled() {
		return nil, "", nil
	}
	if s.Pools == nil {
		return nil, "", errors.New("the starter has no pool store, and its type is in a pool")
	}
	for _, p := range cfg.Pools {
		v, err := s.look(ctx, p)
		if err != nil {
			return nil, "", err
		}
		if len(v.Free) == 0 {
			return nil, p.Name, nil
		}
		views = append(views, v)
	}
	return views, "", nil
}

// memberLister lists a pool's member types (config.Resolver).
type memberLister interface {
	Members(ctx context.Context, pool string) ([]config.TypeConfig, error)
}

// look reads pool p with the claims of its member types that hold no slot counted (pool.Look).
func (s *Starter) look(ctx context.Context, p config.Pool) (pool.View, error) {
	members, err := s.members(ctx, p.Name)
	if err != nil {
		return pool.View{}, err
	}
	return pool.Look(ctx, s.Pools, s.Leases, p.Name, p.Cap, members...)
}

// members are pool name's member types, sorted (none when the config cannot list them).
func (s *Starter) members(ctx context.Context, name string) ([]string, error) {
	m, ok := s.Config.(memberLister)
	if !ok {
		return nil, nil
	}
	cs, err := m.Members(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("read pool %s's members: %w", name, err)
	}
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.Type
	}
	slices.Sort(out)
	return out, nil
}

// poolMembers are the member types of cfg's pools, "a=x+y,b=y" ("": none), as a bound lease
// records them.
func (s *Starter) poolMembers(ctx context.Context, cfg config.TypeConfig) (string, error) {
	var parts []string
	for _, p := range cfg.Pools {
		ms, err := s.members(ctx, p.Name)
		if err != nil {
			return "", err
		}
		parts = append(parts, p.Name+"="+strings.Join(ms, "+"))
	}
	slices.Sort(parts)
	return strings.Join(parts, ","), nil
}

// takeSlots takes a slot of each of the type's pools for b, the bound lease just written (a slot is
// written after its holder's lease: pool.Look). It tries the free slots seen, then looks once more;
// full names a pool left with no room, whose slots b must not hold: the caller gives the lane back.
func (s *Starter) takeSlots(ctx context.Context, cfg config.TypeConfig, b lease.Lease, views []pool.View) (full string, err error) {
	h := pool.HolderOf(b)
	for i, p := range cfg.Pools {
		v := views[i]
		if sl, ok := v.Named(b); ok && !offered(v, b, sl.N) {
			// Above the places the look offers (written under a higher cap, or while slots below
			// it were live): taken over, it would let this job start beside a bind that read the
			// pool before this lease was written and took the last offered place. It names nobody
			// from here (a write on its token: taken since, it names another job), and this job
			// takes an offered slot below.
			if _, err := s.Pools.Take(ctx, p.Name, sl.N, pool.Holder{}, &sl); err == nil {
				v = v.Unheld(b) // read live with b's lease (a look after it), that slot is free now
			} else if !errors.Is(err, pool.ErrTaken) {
				return "", err
			}
			s.Log.InfoContext(ctx, "the pool slot an earlier lease of this job in this lane named lies above the places offered; it names nobody, and the job takes an offered one",
				"jobId", b.JobID, "type", b.Type, "key", b.JobKey, "toLane", b.Lane, "pool", p.Name, "slot", sl.N)
		} else if ok {
			// A slot of an earlier lease of this job in this lane, live now that this lease holds
			// it (read before or after this lease was written): it is taken over (a write on the
			// token read), so a bind that judged it free before this lease was written cannot take
			// it from under this one, and this job takes no second slot beside it. Taken since, it
			// names another job, and this one takes a free slot.
			if _, err := s.Pools.Take(ctx, p.Name, sl.N, h, &sl); err == nil {
				if _, live := v.Holds(b); !live {
					s.Log.InfoContext(ctx, "took over the pool slot an earlier lease of this job in this lane named; the job counts once",
						"jobId", b.JobID, "type", b.Type, "key", b.JobKey, "toLane", b.Lane, "pool", p.Name, "slot", sl.N)
				}
				continue
			} else if !errors.Is(err, pool.ErrTaken) {
				return "", err
			}
		}
		took := false
		for look := 0; look < 2 && !took; look++ {
			if look == 1 {
				if v, err = s.look(ctx, p); err != nil {
					return "", err
				}
				v = v.Without(b) // b's own claim (a retry's or an unstarted one's) counts for none

			}
			for _, c := range v.Free {
				_, err := s.Pools.Take(ctx, p.Name, c.N, h, c.Prev)
				if errors.Is(err, pool.ErrTaken) {
					continue // taken since the slots were read
				}
				if err != nil {
					return "", err
				}
				took = true
				if len(v.Left) > 0 {
					s.Log.InfoContext(ctx, "took a pool slot beside a job of a type that left the pool; that job counts in the pool no more",
						"jobId", b.JobID, "type", b.Type, "toLane", b.Lane, "pool", p.Name, "slot", c.N,
						"leftType", v.Left[0].Holder.Type, "leftJobId", v.Left[0].Holder.JobID, "leftSlot", v.Left[0].N)
				}
				break
			}
		}
		if !took {
			return p.Name, nil
		}
	}
	return "", nil
}

// offered reports whether slot n, named by b's job in b's lane, is a place v lets b's bind take:
// one of the free slots it offers, with b's slots free (pool.View.Unheld). A look after b's lease
// reads live both the slot b's bind took (a bind cut short, again) and one an earlier lease of the
// job left; it cannot tell them apart, and takes over neither above the places offered.
func offered(v pool.View, b lease.Lease, n int) bool {
	return slices.ContainsFunc(v.Unheld(b).Free, func(c pool.Candidate) bool { return c.N == n })
}

// overPool says why the job of own, a lease that binders counted, may not start again in its lane
// ("" when it may): a pool of its type has no room for it, its cap lowered since the job's last
// attempt (or the type joined the pool after the job's bind, and the job holds none of its slots,
// which it then takes here).
func (s *Starter) overPool(ctx context.Context, cfg config.TypeConfig, own lease.Lease) (string, error) {
	for _, p := range cfg.Pools {
		v, err := s.look(ctx, p)
		if err != nil {
			return "", err
		}
		if _, ok := v.Holds(own); ok {
			if len(v.Live)+len(v.Unslotted)-1 >= p.Cap {
				return fmt.Sprintf("pool %s at its cap, lowered since the job's last attempt; the job waits in its waiting group", p.Name), nil
			}
			continue
		}
		full, err := s.takeSlots(ctx, config.TypeConfig{Pools: []config.Pool{p}}, own, []pool.View{v.Without(own)})
		if err != nil {
			return "", err
		}
		if full != "" {
			return fmt.Sprintf("pool %s at its cap; the job waits in its waiting group", p.Name), nil
		}
	}
	return "", nil
}

// bindSlots takes b's pool slots; with a pool full, it frees b (the lane goes back, and the tokens
// its bind took: no copy was sent) and returns the pool's name. An error leaves b for the waiting
// message's next delivery, which finds it its own and takes its slots before sending its copy (held).
func (s *Starter) bindSlots(ctx context.Context, x *msg, cfg config.TypeConfig, b lease.Lease, views []pool.View) (full string, err error) {
	if !cfg.Pooled() {
		return "", nil
	}
	full, err = s.takeSlots(ctx, cfg, b, views)
	if err != nil || full == "" {
		return full, err
	}
	if err := s.freeLane(ctx, b); err != nil && !errors.Is(err, lease.ErrConflict) {
		return "", fmt.Errorf("give back lane %d bound while pool %s filled: %w", b.Lane, full, err)
	}
	x.log.InfoContext(ctx, "pool filled while the job was bound; lane given back", "pool", full, "toLane", b.Lane)
	return full, nil
}

// heldSlots makes sure own, a bound lease this message wrote, holds a slot of each of its type's
// pools before its copy goes (its bind may have stopped between the two writes). A pool full since
// gives the lane back: ok false, and the message looks again later.
func (s *Starter) heldSlots(ctx context.Context, x *msg, cfg config.TypeConfig, own lease.Lease) (ok bool, err error) {
	if !cfg.Pooled() {
		return true, nil
	}
	views := make([]pool.View, 0, len(cfg.Pools))
	for _, p := range cfg.Pools {
		v, err := s.look(ctx, p)
		if err != nil {
			return false, err
		}
		views = append(views, v)
	}
	full, err := s.bindSlots(ctx, x, cfg, own, views)
	if err != nil {
		return false, err
	}
	return full == "", nil
}

// poolCaps are the caps of cfg's pools, "a=50,b=20" ("": none), as a bound lease records them.
func poolCaps(cfg config.TypeConfig) string {
	caps := map[string]int{}
	for _, p := range cfg.Pools {
		caps[p.Name] = p.Cap
	}
	return config.FormatPools(caps)
}

// boundUnder reports whether b, a bound lease, took its slots under caps no lower than cfg's, in
// every pool of cfg, and the same members (members: poolMembers now): its claim may then start
// with them as they are. A type that joined a pool since may run jobs that hold no slot of it.
func boundUnder(b lease.Lease, cfg config.TypeConfig, members string) bool {
	caps, err := config.ParseLimits(b.PoolCaps)
	if err != nil || b.PoolMembers != members {
		return false
	}
	for _, p := range cfg.Pools {
		if c, ok := caps[p.Name]; !ok || p.Cap < c {
			return false
		}
	}
	return true
}
