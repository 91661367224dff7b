package sim

import (
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lane"
)

// FromChooser routes with the router's own lane choice: c.Choose(ctx, j, lanes). It sees the job,
// never the occupancy, as the router does.
func FromChooser(c lane.Chooser) Strategy { return chooser{c} }

type chooser struct{ c lane.Chooser }

func (s chooser) Lane(ctx context.Context, j job.Job, occ []int) (int, error) {
	return s.c.Choose(ctx, j, len(occ))
}

// Uniform joins a lane drawn uniformly at random, each job on its own: Poisson arrivals split into
// independent Poisson streams, so each lane is an M/G/1 queue. It is the textbook model of random
// lanes, against which the router's hashed choice can be checked.
func Uniform(rng *rand.Rand) Strategy { return uniform{rng: rng} }

type uniform struct{ rng *rand.Rand }

func (s uniform) Lane(_ context.Context, _ job.Job, occ []int) (int, error) {
	if len(occ) == 0 {
		return 0, fmt.Errorf("uniform: no lane to choose")
	}
	return 1 + s.rng.IntN(len(occ)), nil
}

// FromLeast routes as the retired least-loaded strategy did (hashedLeast, its router code), on the
// exact occupancy: what its router saw when its lane counts were up to date.
func FromLeast() Strategy { return least{} }

type least struct{}

func (least) Lane(_ context.Context, j job.Job, occ []int) (int, error) { return hashedLeast(j, occ) }

// hashedLeast is the retired least-loaded strategy's choice, kept as a model: the lane with the
// fewest jobs in occ, ties broken by a hash of the job.
func hashedLeast(j job.Job, occ []int) (int, error) {
	if len(occ) == 0 {
		return 0, fmt.Errorf("type %s has no lane to choose", j.Type)
	}
	least, ties := occ[0], 0
	for _, c := range occ {
		switch {
		case c < least:
			least, ties = c, 1
		case c == least:
			ties++
		}
	}
	h := fnv.New64a()
	h.Write([]byte(j.Type))
	h.Write([]byte{0})
	h.Write([]byte(j.ID))
	x := h.Sum64()
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	k := int(x % uint64(ties))
	for i, c := range occ {
		if c == least {
			if k == 0 {
				return i + 1, nil
			}
			k--
		}
	}
	return 0, fmt.Errorf("least: no tie found")
}

// LeastLoaded joins the lane with the fewest jobs queued or running, breaking ties uniformly at
// random (join-the-shortest-queue): the textbook model, against which lane.Least's hashed tie-break
// can be checked.
func LeastLoaded(rng *rand.Rand) Strategy { return &leastLoaded{rng: rng} }

type leastLoaded struct {
	rng  *rand.Rand
	ties []int
}

func (s *leastLoaded) Lane(_ context.Context, _ job.Job, occ []int) (int, error) {
	if len(occ) == 0 {
		return 0, fmt.Errorf("least-loaded: no lane to choose")
	}
	s.ties = s.ties[:0]
	least := occ[0]
	for i, c := range occ {
		switch {
		case c < least:
			least = c
			s.ties = append(s.ties[:0], i)
		case c == least:
			s.ties = append(s.ties, i)
		}
	}
	if len(s.ties) == 1 {
		return s.ties[0] + 1, nil
	}
	return s.ties[s.rng.IntN(len(s.ties))] + 1, nil
}

// LeastLoadedFirst is LeastLoaded with ties broken by the lowest lane number instead of at random.
func LeastLoadedFirst() Strategy { return leastLoadedFirst{} }

type leastLoadedFirst struct{}

func (leastLoadedFirst) Lane(_ context.Context, _ job.Job, occ []int) (int, error) {
	if len(occ) == 0 {
		return 0, fmt.Errorf("least-loaded-first: no lane to choose")
	}
	best := 0
	for i, c := range occ {
		if c < occ[best] {
			best = i
		}
	}
	return best + 1, nil
}

// TwoChoices looks at two distinct lanes drawn at random and joins the one with fewer jobs queued or
// running, either of them at random on a tie (the power of two choices): two reads per job instead
// of every lane's count.
func TwoChoices(rng *rand.Rand) Strategy { return twoChoices{rng: rng} }

type twoChoices struct{ rng *rand.Rand }

func (s twoChoices) Lane(_ context.Context, _ job.Job, occ []int) (int, error) {
	n := len(occ)
	if n == 0 {
		return 0, fmt.Errorf("two-choices: no lane to choose")
	}
	if n == 1 {
		return 1, nil
	}
	a := s.rng.IntN(n)
	b := s.rng.IntN(n - 1)
	if b >= a {
		b++
	}
	switch {
	case occ[a] < occ[b]:
		return a + 1, nil
	case occ[b] < occ[a]:
		return b + 1, nil
	case s.rng.IntN(2) == 0:
		return a + 1, nil
	}
	return b + 1, nil
}

// RoundRobin sends job k to lane 1 + k mod N, ignoring the occupancy: one shared counter per type
// instead of per-lane counts.
func RoundRobin() Strategy { return &roundRobin{} }

type roundRobin struct{ next int }

func (s *roundRobin) Lane(_ context.Context, _ job.Job, occ []int) (int, error) {
	if len(occ) == 0 {
		return 0, fmt.Errorf("round-robin: no lane to choose")
	}
	ln := s.next%len(occ) + 1
	s.next++
	return ln, nil
}

// Spec names a strategy and makes a fresh one for each run.
type Spec struct {
	Name string
	// Real says the strategy is the router's own code (internal/lambda/lane), not a simulated one.
	Real bool
	// About says in a few words what the strategy needs or does.
	About string
	// Extra strategies are left out of the default comparison.
	Extra bool
	// BindOnFree strategies bind a job to a lane only when one is free (first-free): which lane is
	// whichever was free, so a job's lane is not the stack's to compare.
	BindOnFree bool
	// New makes a lane strategy for one run, which RunLanes drives; rng is seeded for that run.
	New func(rng *rand.Rand) (Strategy, error)
	// Run runs a workload through the strategy's own mechanism instead (first-free); nil for a lane
	// strategy.
	Run func(ctx context.Context, w Workload, lanes int, win Window) (Result, error)
}

// RunOn runs w through lanes lanes under the strategy: its own mechanism, or the lane strategy New
// makes with rng.
func (s Spec) RunOn(ctx context.Context, w Workload, lanes int, rng *rand.Rand, win Window) (Result, error) {
	if s.Run != nil {
		return s.Run(ctx, w, lanes, win)
	}
	if s.New == nil {
		return Result{}, fmt.Errorf("strategy %s has no way to run", s.Name)
	}
	st, err := s.New(rng)
	if err != nil {
		return Result{}, fmt.Errorf("strategy %s: %w", s.Name, err)
	}
	return RunLanes(ctx, w, lanes, st, win)
}

// FirstFreeSpec is the router's and starter's first-free strategy (RunFirstFree) with m's latencies.
func FirstFreeSpec(m FirstFree) Spec {
	about := "the router's LANE_STRATEGY=first-free: jobs wait in lane.WaitingGroups(N) FIFO groups (lane.WaitingGroup); " +
		"a freed lane wakes the group whose head was submitted earliest"
	if m.BindLatency > 0 || m.GroupHold > 0 {
		about += fmt.Sprintf("; each bind takes %g before its job starts and holds its group %g", m.BindLatency, m.GroupHold)
	} else {
		about += " (no bind latency: the ideal's waits exactly)"
	}
	return Spec{
		Name: m.Name(), Real: true, BindOnFree: true, About: about,
		Run: func(ctx context.Context, w Workload, lanes int, win Window) (Result, error) {
			return RunFirstFree(ctx, w, lanes, m, win)
		},
	}
}

// Specs lists the strategies the simulator knows: the router's own (lane.Strategies) first, then
// models, among them the retired least-loaded.
func Specs() []Spec {
	return []Spec{
		FirstFreeSpec(FirstFree{}),
		{
			Name: "random", Real: true,
			About: "the router's LANE_STRATEGY=random: lane.New(\"random\"), a hash of type and id",
			New: func(*rand.Rand) (Strategy, error) {
				c, err := lane.New("random")
				if err != nil {
					return nil, fmt.Errorf("the router's random strategy: %w", err)
				}
				return FromChooser(c), nil
			},
		},
		{
			Name:  "least-loaded",
			About: "the retired least-loaded strategy: the lane with the fewest jobs, ties by a hash of the job (its router's code, kept as a model)",
			New:   func(*rand.Rand) (Strategy, error) { return FromLeast(), nil },
		},
		{
			Name:  "uniform",
			About: "a lane drawn uniformly at random per job (the textbook model of random lanes)",
			New:   func(rng *rand.Rand) (Strategy, error) { return Uniform(rng), nil },
		},
		{
			Name:  "round-robin",
			About: "lane 1 + k mod N for the k-th job (one counter per type)",
			New:   func(*rand.Rand) (Strategy, error) { return RoundRobin(), nil },
		},
		{
			Name:  "two-choices",
			About: "the less occupied of two random lanes (two counts per job)",
			New:   func(rng *rand.Rand) (Strategy, error) { return TwoChoices(rng), nil },
		},
		{
			Name:  "jsq",
			About: "join-the-shortest-queue, random among ties (the textbook model of least-loaded)",
			New:   func(rng *rand.Rand) (Strategy, error) { return LeastLoaded(rng), nil },
			Extra: true,
		},
		{
			Name:  "least-loaded-first",
			About: "least-loaded with ties broken by the lowest lane number",
			New:   func(*rand.Rand) (Strategy, error) { return LeastLoadedFirst(), nil },
			Extra: true,
		},
	}
}

// SpecsNamed returns the strategies with the given names, in that order.
func SpecsNamed(names []string) ([]Spec, error) {
	all := Specs()
	out := make([]Spec, 0, len(names))
	for _, name := range names {
		i := slices.IndexFunc(all, func(s Spec) bool { return s.Name == name })
		if i < 0 {
			known := make([]string, len(all))
			for k, s := range all {
				known[k] = s.Name
			}
			return nil, fmt.Errorf("unknown strategy %q (known: %s)", name, strings.Join(known, ", "))
		}
		out = append(out, all[i])
	}
	return out, nil
}

// IdealSpec is the ideal N-slot FIFO semaphore with a latency d on every grant: a job starts d after
// its slot is granted, and holds the slot meanwhile. It is what first-free would be if its waiting
// groups never held a job back (no group hold), and runs as such; with d 0 it is the ideal itself.
func IdealSpec(d float64) Spec {
	return Spec{
		Name: fmt.Sprintf("ideal+%g", d), BindOnFree: true,
		About: fmt.Sprintf("the ideal semaphore with a latency of %g between a grant and its job's start", d),
		Run: func(ctx context.Context, w Workload, lanes int, win Window) (Result, error) {
			return RunFirstFree(ctx, w, lanes, FirstFree{BindLatency: d}, win)
		},
	}
}
