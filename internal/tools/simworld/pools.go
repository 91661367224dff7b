package simworld

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/tools/ops"
)

// Shared pools (Faults.Pools). With pools on, the deployment puts two or three of the world's
// types in pool psp, whose cap is below the sum of its members' limits so that they contend for
// it, and one of them (and at times another type) in pool llm too: one type counts against two
// pools. Some types get a share of 2-3 in their pools (TYPE_POOL_SHARES). An operator changes a
// pool's live cap Faults.Pools times, lower or higher than the deployment's, and removes it 1-10
// minutes later, so the deployment's cap applies again (ConfigEditor.SetPool and UnsetPool, as
// `sfnlimit config pool set` and `unset` run them, waking parked jobs after a raise). Once a run a
// type joins psp under its running jobs, or leaves it and joins again (rejoin).
//
// The pools are drawn from a stream of their own: a seed's workload, faults and other actions
// are those of the same seed without pools. Without pools nothing is drawn from it.
//
// The checker (KindPoolCap) reads each pool's cap and members back from the world's config at
// every change, through a config.Resolver as the functions build theirs, and checks at every
// start that the running executions of a pool's member types are at most its cap (a type that
// joined counts once the sweep has had time to give its running jobs slots: joinGrace).

// KindPoolCap: the running executions of a pool's member types exceed its cap.
const KindPoolCap = "pool cap exceeded"

// Pool names of the simulated world.
const (
	poolPSP = "psp"
	poolLLM = "llm"
)

// poolSpec is a pool of the deployment: its cap (POOL_CAPS) and member types (TYPE_POOLS).
type poolSpec struct {
	name    string
	cap     int
	members []string
}

// poolsRand is the pools' own random stream.
func (w *World) poolsRand() *rand.Rand { return rand.New(rand.NewPCG(w.seed, 0x706f6f6c73)) }

// drawPools draws the deployment's pools and shares of ts.
func drawPools(r *rand.Rand, ts []typeSpec) ([]poolSpec, map[string]int) {
	limit := map[string]int{}
	names := make([]string, len(ts))
	for i, t := range ts {
		limit[t.name], names[i] = t.limit, t.name
	}
	sum := func(members []string) int {
		n := 0
		for _, m := range members {
			n += limit[m]
		}
		return n
	}
	below := func(members []string) int { return 1 + r.IntN(max(sum(members)-1, 1)) }
	psp := slices.Clone(names)
	if r.IntN(2) == 0 {
		out := r.IntN(len(psp))
		psp = slices.Delete(psp, out, out+1)
	}
	both := psp[r.IntN(len(psp))]
	llm := []string{both}
	if r.IntN(2) == 0 {
		// Another type, outside psp when one is: two pools that overlap in one type.
		others := slices.DeleteFunc(slices.Clone(names), func(n string) bool { return slices.Contains(psp, n) })
		if len(others) == 0 {
			others = slices.DeleteFunc(slices.Clone(names), func(n string) bool { return n == both })
		}
		llm = append(llm, others[r.IntN(len(others))])
	}
	pools := []poolSpec{{name: poolPSP, cap: below(psp), members: psp}, {name: poolLLM, cap: below(llm), members: llm}}
	shares := map[string]int{}
	for _, n := range names {
		if r.IntN(2) == 0 {
			shares[n] = 2 + r.IntN(2)
		}
	}
	return pools, shares
}

// poolsEnv writes pools and shares as POOL_CAPS, TYPE_POOLS and TYPE_POOL_SHARES.
func poolsEnv(pools []poolSpec, shares map[string]int) map[string]string {
	caps := map[string]int{}
	of := map[string][]string{}
	for _, p := range pools {
		caps[p.name] = p.cap
		for _, m := range p.members {
			of[m] = append(of[m], p.name)
		}
	}
	var tp []string
	for t, ps := range of {
		tp = append(tp, t+"="+strings.Join(ps, "+"))
	}
	sort.Strings(tp)
	return map[string]string{"POOL_CAPS": config.FormatPools(caps), "TYPE_POOLS": strings.Join(tp, ","),
		"TYPE_POOL_SHARES": config.FormatPools(shares)}
}

// setUpPools gives the deployment its pools (none unless Faults.Pools is set) and schedules the
// operator's changes of their caps.
func (w *World) setUpPools(ts []typeSpec, start time.Time) {
	if w.cfg.Faults.Pools <= 0 {
		return
	}
	r := w.poolsRand()
	pools, shares := drawPools(r, ts)
	for k, v := range poolsEnv(pools, shares) {
		w.env[k] = v
	}
	w.trace("pools", "pools: POOL_CAPS=%s TYPE_POOLS=%s TYPE_POOL_SHARES=%s", w.env["POOL_CAPS"], w.env["TYPE_POOLS"], w.env["TYPE_POOL_SHARES"])
	w.check.poolsOn = true
	w.check.poolsChanged()
	for range w.cfg.Faults.Pools {
		p := pools[r.IntN(len(pools))]
		at := time.Duration(r.Int64N(int64(25 * time.Minute)))
		d := time.Minute + time.Duration(r.Int64N(int64(9*time.Minute)))
		n := 1 + r.IntN(p.cap+2) // lower, the same, or higher than the deployment's
		w.sched.at(start.Add(at), func() {
			if !w.stopped {
				w.setPoolCap(p.name, n, d)
			}
		})
	}
	// Once a run, a type joins psp under its running jobs (or leaves it and joins again), through
	// `config set TYPE --pools`: until the sweep gives them slots they hold none.
	t := ts[r.IntN(len(ts))].name
	at := time.Duration(r.Int64N(int64(25 * time.Minute)))
	d := time.Minute + time.Duration(r.Int64N(int64(9*time.Minute)))
	w.sched.at(start.Add(at), func() {
		if !w.stopped {
			w.rejoin(pools, t, d)
		}
	})
}

// rejoin puts typ in pool psp and takes it out after d, or, when the deployment has it there,
// takes it out and puts it back after d; its other pool stays as it is.
func (w *World) rejoin(pools []poolSpec, typ string, d time.Duration) {
	var in, out []string
	for _, p := range pools {
		if p.name == poolPSP || slices.Contains(p.members, typ) {
			in = append(in, p.name)
		}
		if p.name != poolPSP && slices.Contains(p.members, typ) {
			out = append(out, p.name)
		}
	}
	first, then := in, out
	for _, p := range pools {
		if p.name == poolPSP && slices.Contains(p.members, typ) {
			first, then = out, in
		}
	}
	w.setPools(typ, first)
	w.sched.after(d, func() { w.setPools(typ, then) })
}

// setPools is `config set TYPE --pools a+b`, or `--no-pools` for none.
func (w *World) setPools(typ string, ps []string) {
	c := ops.Change{Type: typ, NoPools: len(ps) == 0}
	what := "config set " + typ + " --no-pools"
	if len(ps) > 0 {
		list := strings.Join(ps, "+")
		c.Pools, what = &list, "config set "+typ+" --pools "+list
	}
	w.set(context.Background(), c, what)
}

// setPoolCap sets pool's live cap to n (`sfnlimit config pool set`, whose raise wakes the pool's
// parked jobs at once with the resume's waker), and removes it after d (`config pool unset`).
func (w *World) setPoolCap(pool string, n int, d time.Duration) {
	e, err := w.editor()
	if err != nil {
		w.poolOperated("config pool set "+pool, err)
		return
	}
	res, err := e.SetPool(context.Background(), pool, n, w.waker())
	w.poolOperated(fmt.Sprintf("config pool set %s --cap %d (woke %d groups)", pool, n, res.Woken), err)
	w.sched.after(d, func() {
		res, err := e.UnsetPool(context.Background(), pool, w.waker())
		w.poolOperated(fmt.Sprintf("config pool unset %s (woke %d groups)", pool, res.Woken), err)
	})
}

func (w *World) poolOperated(what string, err error) {
	if err != nil {
		w.trace("pools", "operator: %s: %v", what, err)
	} else {
		w.trace("pools", "operator: %s", what)
	}
	w.check.poolsChanged()
}

// poolsAt are the pools in force from a time: each pool's cap and member types, as the
// functions' resolvers merge them (a pool without a cap, or without members, is absent).
type poolsAt struct {
	from    time.Time
	caps    map[string]int
	members map[string][]string
}

// poolsChanged reads every type's pools back from the world's config and records them, from now,
// when they changed.
func (c *checker) poolsChanged() {
	if !c.poolsOn {
		return
	}
	d, _, err := config.FromEnv(c.w.getenv)
	if err != nil {
		panic(fmt.Sprintf("simworld: pools: defaults: %v", err))
	}
	r, err := config.NewResolver(d, config.NewDynamoStore(c.w.table, "sim"), 0)
	if err != nil {
		panic(fmt.Sprintf("simworld: pools: resolver: %v", err))
	}
	all, err := r.All(context.Background())
	if err != nil {
		panic(fmt.Sprintf("simworld: pools: read config: %v", err))
	}
	p := poolsAt{from: c.w.now(), caps: map[string]int{}, members: map[string][]string{}}
	for _, tc := range all {
		for _, x := range tc.Pools {
			p.caps[x.Name] = x.Cap
			p.members[x.Name] = append(p.members[x.Name], tc.Type)
		}
	}
	if n := len(c.pools); n > 0 && maps.Equal(c.pools[n-1].caps, p.caps) &&
		maps.EqualFunc(c.pools[n-1].members, p.members, slices.Equal[[]string]) {
		return
	}
	c.pools = append(c.pools, p)
}

// poolsNow are the pools in force now (zero when the world has none).
func (c *checker) poolsNow() poolsAt {
	if len(c.pools) == 0 {
		return poolsAt{}
	}
	return c.pools[len(c.pools)-1]
}

// poolsOf are the pools typ belongs to now, sorted.
func (c *checker) poolsOf(typ string) []string {
	var out []string
	for name, ms := range c.poolsNow().members {
		if slices.Contains(ms, typ) {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// joinGrace is how long a type that joined a pool may run jobs that hold no slot of it, started
// before its functions saw it join: until the sweep gives them slots (releaser's adoptRunning),
// which skips a lease changed within its minimum age (60 s here), at a sweep every SweepEvery,
// with room for one sweep that failed (killed, throttled).
func (c *checker) joinGrace() time.Duration { return time.Minute + 2*c.w.cfg.SweepEvery }

// poolBound is the most executions of pool's members that may run now, as bound is a type's: the
// highest cap in force since the configuration cache's age before since (at the latest now), and
// the types that were its members all that while, or at least for the cache's age and joinGrace
// (the sweep has given their running jobs slots by then). capped is false when the pool capped
// nothing at some time in that span (its cap removed, or no member).
func (c *checker) poolBound(pool string, since time.Time) (limit int, members map[string]bool, capped bool) {
	now := c.w.now()
	from := now
	if since.Before(from) {
		from = since
	}
	joined := from
	if g := now.Add(-c.joinGrace()); g.After(joined) {
		joined = g
	}
	joined = joined.Add(-cacheAllowance)
	from = from.Add(-cacheAllowance)
	first := true
	for i, p := range c.pools {
		if i+1 < len(c.pools) && c.pools[i+1].from.Before(from) {
			continue
		}
		n, ok := p.caps[pool]
		if !ok {
			return 0, nil, false
		}
		limit = max(limit, n)
		if i+1 < len(c.pools) && c.pools[i+1].from.Before(joined) {
			capped = true
			continue // membership before the join grace does not matter
		}
		in := map[string]bool{}
		for _, m := range p.members[pool] {
			if first || members[m] {
				in[m] = true
			}
		}
		members, first, capped = in, false, true
	}
	return limit, members, capped
}

// checkPools checks a new execution's start against the caps of its type's pools.
func (c *checker) checkPools(e *execution) {
	m := e.meta
	for _, pool := range c.poolsOf(m.Type) {
		now := c.poolsNow().members[pool]
		oldest := e.start
		for _, x := range c.w.sfn.open {
			if x.running() && slices.Contains(now, x.meta.Type) && x.start.Before(oldest) {
				oldest = x.start
			}
		}
		limit, members, capped := c.poolBound(pool, oldest)
		if !capped {
			continue
		}
		run := 0
		var names []string
		for _, x := range c.w.sfn.open {
			if x.running() && members[x.meta.Type] {
				run++
				names = append(names, fmt.Sprintf("%s(lane %d, since %s)", x.name, x.meta.Lane, x.start.Sub(c.start).Truncate(time.Millisecond)))
			}
		}
		if run > limit {
			c.violate(KindPoolCap, m.Type+"-"+m.ID, "%d executions of pool %s (%s) run, cap %d (start of %s in lane %d): %s",
				run, pool, strings.Join(sortedKeys(members), ", "), limit, e.name, m.Lane, strings.Join(names, " "))
		}
	}
}

// poolHeld says whether one of typ's pools is full now (its members run its cap or more), or its
// pools changed within the cache's age: work conservation does not ask typ to start a job then.
func (c *checker) poolHeld(typ string) bool {
	pools := c.poolsOf(typ)
	if len(pools) == 0 {
		return false
	}
	now := c.poolsNow()
	if c.w.now().Sub(now.from) <= cacheAllowance {
		return true
	}
	for _, pool := range pools {
		run := 0
		for _, x := range c.w.sfn.open {
			if x.running() && slices.Contains(now.members[pool], x.meta.Type) {
				run++
			}
		}
		if run >= now.caps[pool] {
			return true
		}
	}
	return false
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
