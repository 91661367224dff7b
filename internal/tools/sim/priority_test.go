package sim_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"

	"github.com/sfnlimit/sfnlimit/internal/tools/sim"
)

// prio builds a priority workload from its jobs, given in submission order; keys may be nil.
func prio(name string, arrivals, durations []float64, priorities []int, keys []string) sim.PriorityWorkload {
	return sim.PriorityWorkload{Workload: sim.Workload{Name: name, Arrivals: arrivals, Durations: durations}, Priorities: priorities, Keys: keys}
}

func lanes(n int) sim.KeyLimits { return sim.KeyLimits{Limit: n} }

func TestEffectivePriority(t *testing.T) {
	tests := []struct {
		p        int
		headWait float64
		aging    float64
		want     int
	}{
		{p: 1, headWait: 0, aging: 60, want: 1},
		{p: 1, headWait: 59.9, aging: 60, want: 1},
		{p: 1, headWait: 60, aging: 60, want: 2},
		{p: 1, headWait: 479.9, aging: 60, want: 8},
		{p: 1, headWait: 480, aging: 60, want: 9}, // StarvationBound(1, 60)
		{p: 1, headWait: 1e9, aging: 60, want: 9},
		{p: 5, headWait: 150, aging: 60, want: 7},
		{p: 9, headWait: 1e9, aging: 1, want: 9},
		{p: 3, headWait: 1e9, aging: math.Inf(1), want: 3},
	}
	for _, tt := range tests {
		if got := sim.EffectivePriority(tt.p, tt.headWait, tt.aging); got != tt.want {
			t.Errorf("EffectivePriority(%d, %g, %g) = %d, want %d", tt.p, tt.headWait, tt.aging, got, tt.want)
		}
	}
	for p := sim.MinPriority; p <= sim.MaxPriority; p++ {
		b := sim.StarvationBound(p, 60)
		if got := sim.EffectivePriority(p, b, 60); got != sim.MaxPriority {
			t.Errorf("priority %d after its starvation bound %g: effective %d, want %d", p, b, got, sim.MaxPriority)
		}
		if b > 0 && sim.EffectivePriority(p, b-1e-6, 60) == sim.MaxPriority {
			t.Errorf("priority %d reaches the top before its starvation bound %g", p, b)
		}
	}
}

// The orders and the rate against binds and starts worked out by hand.
func TestRunPriorityByHand(t *testing.T) {
	// Two lanes. Two low jobs take them at 0 (ending at 1 and 3); low job 2 waits from 0, high job 3
	// from 0.5. At 1 the high job goes first (ends at 2), then the low one at 2. FIFO: the low one at
	// 1, the high one at 2.
	highFirst := prio("high-first", []float64{0, 0, 0, 0.5}, []float64{1, 3, 1, 1}, []int{1, 1, 1, 9}, nil)
	// One lane busy until 3. Low job 1 waits from 0, high job 2 from 2.5. At 3 the low head has waited
	// 3: with aging 1 it ranks 1+3 = 4 < 9 and the high one goes first; with aging 0.375 it has waited
	// exactly 8 levels (its starvation bound) and ranks 9, tied with the high job: the older head goes
	// first.
	aged := prio("aged", []float64{0, 0, 2.5}, []float64{3, 1, 1}, []int{5, 1, 9}, nil)
	// One lane busy until 2. Job 1 (priority 3, from 0) and job 2 (priority 5, from 1.5). At 2, with
	// aging 1: 3+2 = 5 and 5+0 = 5, a tie that the older head takes; without aging the 5 goes first.
	tie := prio("tie", []float64{0, 0, 1.5}, []float64{2, 1, 1}, []int{5, 3, 5}, nil)
	// Key caps group a key's jobs in one FIFO whose priority is its head's. Two lanes, cap 2 (binding
	// nowhere). x0 runs over [0,1], x1 over [0,3]; a0 (low) heads key a with a1 (high) behind it; b0
	// (normal) waits from 0.5. At 1: a ranks 1, b ranks 5: b0 (ends at 2); at 2: a0; at 3: a1. Without
	// caps, one group per priority: a1 at 1, b0 at 2, a0 at 3.
	headOfLine := prio("head-of-line", []float64{0, 0, 0, 0, 0.5}, []float64{1, 3, 1, 1, 1}, []int{5, 5, 1, 9, 5}, []string{"x", "x", "a", "a", "b"})
	// Key caps, equal ranks: two lanes, cap 2. a0 runs over [0,5] and b0 over [0,1]; a1 waits from 0,
	// b1 from 0.5. At 1 key b holds no lane and a one: b1 goes first though a1 is older. Without caps
	// the older head: a1 at 1, b1 at 2.
	fewest := prio("fewest", []float64{0, 0, 0, 0.5}, []float64{5, 1, 1, 1}, []int{5, 5, 5, 5}, []string{"a", "b", "a", "b"})
	// Key cap 1 of two lanes: high a1 waits for its key's cap with a lane free; low b0 takes a lane at
	// once.
	capped := prio("capped", []float64{0, 0, 0}, []float64{2, 1, 1}, []int{5, 9, 1}, []string{"a", "a", "b"})
	// Rate 1/s, burst 1, two lanes, three jobs of 5 at 0. Job 0 takes the token and a lane; jobs 1 and
	// 2 wait in their group with lane 2 free; at 1 the next token is due and job 1 takes it with the
	// lane; job 2 waits for a lane until job 0 ends at 5, when the bucket is full again.
	rate := prio("rate", []float64{0, 0, 0}, []float64{5, 5, 5}, nil, nil)
	// Rate 2/s, burst 2, three lanes, five jobs of 10 at 0: two tokens at 0, the third job takes the
	// third lane at 0.5 with the next token, the last two get lanes at 10 and the full bucket's two
	// tokens.
	burst := prio("burst", []float64{0, 0, 0, 0, 0}, []float64{10, 10, 10, 10, 10}, nil, nil)
	// Rate 1/s, burst 1, two lanes: job 0 takes the token at 0 and ends at 0.1; jobs 1 (normal), 2
	// (low) and 3 (high) wait holding no lane, with lanes free, for the token due at 1. It goes to the
	// job ranked first then: high job 3 (ends at 2); the token at 2 to job 1, the one at 3 to low job
	// 2. FIFO: jobs 1, 2, 3 at 1, 2, 3.
	rateByPriority := prio("rate-by-priority", []float64{0, 0, 0.05, 0.06}, []float64{0.1, 5, 1, 1}, []int{5, 5, 1, 9}, nil)
	// Rate 1/s, burst 1, two lanes, key cap 1: a0 and b0 arrive at 0, b0 waits for the token due at 1
	// with lane 2 free; a1 (high) waits from 0.5 behind a0, which holds key a's cap until 3. At 1 the
	// token goes to b0, the only eligible group; at 3 a1 takes a0's lane and a token at once.
	rateCapped := prio("rate-capped", []float64{0, 0, 0.5}, []float64{3, 1, 1}, []int{5, 5, 9}, []string{"a", "b", "a"})
	flow := func(n int, aging float64) sim.FlowLimits { return sim.FlowLimits{KeyLimits: lanes(n), Aging: aging} }
	withRate := func(n int, r, b float64) sim.FlowLimits {
		return sim.FlowLimits{KeyLimits: lanes(n), Aging: sim.DefaultAging, Rate: r, Burst: b}
	}
	capTo := func(n, c int) sim.FlowLimits {
		return sim.FlowLimits{KeyLimits: sim.KeyLimits{Limit: n, KeyLimit: c}, Aging: sim.DefaultAging}
	}
	capWithRate := capTo(2, 1)
	capWithRate.Rate, capWithRate.Burst = 1, 1
	tests := []struct {
		name       string
		give       sim.PriorityWorkload
		limits     sim.FlowLimits
		order      sim.PriorityOrder
		wantStarts []float64 // the binds too: a job takes its lane and its token at once
	}{
		{name: "high before low", give: highFirst, limits: flow(2, 60), order: sim.PriorityAgingOrder, wantStarts: []float64{0, 0, 2, 1}},
		{name: "strict: high before low", give: highFirst, limits: flow(2, 60), order: sim.StrictPriorityOrder, wantStarts: []float64{0, 0, 2, 1}},
		{name: "fifo ignores priority", give: highFirst, limits: flow(2, 60), order: sim.SubmissionOrder, wantStarts: []float64{0, 0, 1, 2}},
		{name: "aging short of the top", give: aged, limits: flow(1, 1), order: sim.PriorityAgingOrder, wantStarts: []float64{0, 4, 3}},
		{name: "aged to the top: the older head", give: aged, limits: flow(1, 0.375), order: sim.PriorityAgingOrder, wantStarts: []float64{0, 3, 4}},
		{name: "strict never ages", give: aged, limits: flow(1, 0.375), order: sim.StrictPriorityOrder, wantStarts: []float64{0, 4, 3}},
		{name: "equal ranks: the older head", give: tie, limits: flow(1, 1), order: sim.PriorityAgingOrder, wantStarts: []float64{0, 2, 3}},
		{name: "strict: the higher priority", give: tie, limits: flow(1, 1), order: sim.StrictPriorityOrder, wantStarts: []float64{0, 3, 2}},
		{name: "key caps: a group ranks by its head", give: headOfLine, limits: capTo(2, 2), order: sim.PriorityAgingOrder, wantStarts: []float64{0, 0, 2, 3, 1}},
		{name: "no key caps: groups by priority", give: headOfLine, limits: flow(2, 60), order: sim.PriorityAgingOrder, wantStarts: []float64{0, 0, 3, 1, 2}},
		{name: "key caps: fewest lanes held first", give: fewest, limits: capTo(2, 2), order: sim.PriorityAgingOrder, wantStarts: []float64{0, 0, 2, 1}},
		{name: "no key caps: the older head", give: fewest, limits: flow(2, 60), order: sim.PriorityAgingOrder, wantStarts: []float64{0, 0, 1, 2}},
		{name: "a key at its cap waits with a lane free", give: capped, limits: capTo(2, 1), order: sim.PriorityAgingOrder, wantStarts: []float64{0, 2, 0}},
		{name: "the semaphores have no key caps", give: capped, limits: capTo(2, 1), order: sim.StrictPriorityOrder, wantStarts: []float64{0, 0, 1}},
		{name: "a job waits for its token holding no lane", give: rate, limits: withRate(2, 1, 1), order: sim.PriorityAgingOrder, wantStarts: []float64{0, 1, 5}},
		{name: "the burst, then the rate", give: burst, limits: withRate(3, 2, 2), order: sim.SubmissionOrder, wantStarts: []float64{0, 0, 0.5, 10, 10}},
		{name: "a token goes to the job ranked first when it is due", give: rateByPriority, limits: withRate(2, 1, 1), order: sim.PriorityAgingOrder, wantStarts: []float64{0, 2, 3, 1}},
		{name: "a token goes to the oldest job, fifo", give: rateByPriority, limits: withRate(2, 1, 1), order: sim.SubmissionOrder, wantStarts: []float64{0, 1, 2, 3}},
		{name: "a token goes to an eligible group", give: rateCapped, limits: capWithRate, order: sim.PriorityAgingOrder, wantStarts: []float64{0, 1, 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := sim.RunPriority(context.Background(), tt.give, tt.limits, tt.order, sim.Always)
			if err != nil {
				t.Fatalf("RunPriority error = %v", err)
			}
			if !near(got.Binds, tt.wantStarts) || !near(got.Starts, tt.wantStarts) {
				t.Errorf("binds %v and starts %v, want both %v", got.Binds, got.Starts, tt.wantStarts)
			}
			if err := flowCheck(tt.give, tt.limits, tt.order, got); err != nil {
				t.Error(err)
			}
		})
	}
}

// reference is an independent model of the scheduler without key caps: lanes are the times they
// free, the waiting jobs one list, and a freed lane goes to the waiting job ranked first, as the
// issue states the rule (the highest min(9, p + floor(wait / aging)), then the earliest submitted;
// by priority alone under strict order, by submission alone under FIFO). A job binds only with a lane
// free and a token: tokens follow the generic cell rate algorithm (a theoretical arrival time tat; a
// token is there from tat - (B-1)/R), not a bucket level.
func reference(w sim.PriorityWorkload, l sim.FlowLimits, o sim.PriorityOrder) (binds, starts []float64) {
	n := w.Len()
	binds, starts = make([]float64, n), make([]float64, n)
	laneFree := slices.Repeat([]float64{math.Inf(-1)}, l.Limit)
	tat := math.Inf(-1)
	tokenAt := func() float64 { // when the next token is there
		if l.Rate == 0 {
			return math.Inf(-1)
		}
		return tat - (l.Burst-1)/l.Rate
	}
	var waiting []int
	rank := func(i int, now float64) int {
		p := w.Priority(i)
		switch o {
		case sim.SubmissionOrder:
			return 0
		case sim.PriorityAgingOrder:
			return int(math.Min(9, float64(p)+math.Floor((now-w.Arrivals[i])/l.Aging)))
		}
		return p
	}
	now := math.Inf(-1)
	for next := 0; next < n || len(waiting) > 0; {
		at := math.Inf(1)
		if next < n {
			at = w.Arrivals[next]
		}
		if len(waiting) > 0 {
			// The next lane to free, or the next token if a lane is free.
			for _, f := range laneFree {
				if f > now && f < at {
					at = f
				}
			}
			if slices.Min(laneFree) <= now && tokenAt() > now {
				at = math.Min(at, tokenAt())
			}
		}
		now = at
		freeLane := func() int {
			if tokenAt() > now {
				return -1 // no token: no lane to bind
			}
			return slices.IndexFunc(laneFree, func(f float64) bool { return f <= now })
		}
		bind := func(i, k int) {
			binds[i], starts[i] = now, now
			if l.Rate > 0 {
				tat = math.Max(tat, now) + 1/l.Rate
			}
			laneFree[k] = now + w.Durations[i]
		}
		for k := freeLane(); k >= 0 && len(waiting) > 0; k = freeLane() {
			best := 0
			for x, i := range waiting {
				if r, rb := rank(i, now), rank(waiting[best], now); r > rb || r == rb && i < waiting[best] {
					best = x
				}
			}
			bind(waiting[best], k)
			waiting = slices.Delete(waiting, best, best+1)
		}
		for ; next < n && w.Arrivals[next] == now; next++ {
			if k := freeLane(); k >= 0 && len(waiting) == 0 {
				bind(next, k)
			} else {
				waiting = append(waiting, next)
			}
		}
	}
	return binds, starts
}

// randomPriorities gives w's jobs priorities drawn from ps.
func randomPriorities(rng *rand.Rand, w sim.Workload, ps []int) sim.PriorityWorkload {
	out := sim.PriorityWorkload{Workload: w, Priorities: make([]int, w.Len())}
	for i := range out.Priorities {
		out.Priorities[i] = ps[rng.IntN(len(ps))]
	}
	return out
}

// RunPriority agrees with the independent model on Poisson arrivals at and above the lanes' capacity,
// with every priority drawn, with and without a rate.
func TestRunPriorityMatchesAnIndependentModel(t *testing.T) {
	ctx := context.Background()
	for _, n := range []int{1, 3, 10} {
		for _, load := range []float64{0.95, 1.2} {
			rng := rand.New(rand.NewPCG(61, uint64(n)))
			w := randomPriorities(rng, sim.PoissonWorkload(rng, "model", 2000, load*float64(n), 1), []int{1, 2, 3, 4, 5, 6, 7, 8, 9})
			for _, l := range []sim.FlowLimits{
				{KeyLimits: lanes(n), Aging: 5},
				{KeyLimits: lanes(n), Aging: 50},
				{KeyLimits: lanes(n), Aging: math.Inf(1)},
				// The rate binds below the lanes' capacity, with a burst of 3.
				{KeyLimits: lanes(n), Aging: 20, Rate: 0.8 * float64(n), Burst: 3},
			} {
				for _, o := range sim.PriorityOrders() {
					name := fmt.Sprintf("%d lanes, load %g, aging %g, rate %g, %s", n, load, l.Aging, l.Rate, o)
					got, err := sim.RunPriority(ctx, w, l, o, sim.Always)
					if err != nil {
						t.Fatalf("%s: RunPriority error = %v", name, err)
					}
					wantBinds, wantStarts := reference(w, l, o)
					if !near(got.Binds, wantBinds) || !near(got.Starts, wantStarts) {
						k := 0
						for i := range wantBinds {
							if math.Abs(got.Binds[i]-wantBinds[i]) > 1e-9 || math.Abs(got.Starts[i]-wantStarts[i]) > 1e-9 {
								k = i
								break
							}
						}
						t.Errorf("%s: job %d (priority %d, arrives %g) bound at %g and started at %g; the model's %g and %g",
							name, k, w.Priority(k), w.Arrivals[k], got.Binds[k], got.Starts[k], wantBinds[k], wantStarts[k])
					}
				}
			}
		}
	}
}

// flowCheck checks a run from its binds and starts alone, replaying arrivals, binds, starts and ends:
// every job is bound and starts once, after its arrival, at its bind (it takes its lane and its token
// at once); no lane holds two jobs; the lanes held never exceed the limit, nor a key's under its cap
// (key caps under PriorityAgingOrder); each group binds in submission order; at the end of each
// instant no lane is free while a job waits that could take it, unless the bucket holds no token;
// the bucket, replayed from the starts, never goes below 0; and without key caps, the jobs bound at
// an instant from the waiting ones rank at least as high as every job still waiting (by effective
// priority, then submission).
func flowCheck(w sim.PriorityWorkload, l sim.FlowLimits, o sim.PriorityOrder, r sim.FlowResult) error {
	n := w.Len()
	if len(r.Starts) != n || len(r.Binds) != n || len(r.Lanes) != n {
		return fmt.Errorf("%s: %d starts, %d binds and %d lanes for %d jobs", w.Name, len(r.Starts), len(r.Binds), len(r.Lanes), n)
	}
	capped := o == sim.PriorityAgingOrder && l.Capped()
	group := func(i int) string {
		switch {
		case o == sim.SubmissionOrder:
			return ""
		case capped:
			return w.Key(i)
		}
		return fmt.Sprint(w.Priority(i))
	}
	capOf := func(i int) int {
		if capped {
			return l.Cap(w.Key(i))
		}
		return l.Limit
	}
	rank := func(i int, now float64) (int, int) { // higher first, then lower index
		switch o {
		case sim.SubmissionOrder:
			return 0, -i
		case sim.StrictPriorityOrder:
			return w.Priority(i), -i
		}
		return int(math.Min(9, float64(w.Priority(i))+math.Floor((now-w.Arrivals[i])/l.Aging))), -i
	}
	const (
		end = iota // at one instant: ends, then arrivals, binds and starts
		arrive
		bind
		start
	)
	type event struct {
		t    float64
		kind int
		i    int
	}
	events := make([]event, 0, 4*n)
	for i := range n {
		a, b, s := w.Arrivals[i], r.Binds[i], r.Starts[i]
		if !(a <= b && b <= s) || math.IsInf(s, 0) {
			return fmt.Errorf("%s: job %d arrives at %g, is bound at %g and starts at %g", w.Name, i, a, b, s)
		}
		if s != b {
			return fmt.Errorf("%s: job %d is bound at %g and starts at %g: a job takes its lane and its token at once", w.Name, i, b, s)
		}
		events = append(events, event{a, arrive, i}, event{b, bind, i}, event{s, start, i}, event{s + w.Durations[i], end, i})
	}
	sort.SliceStable(events, func(a, b int) bool {
		if events[a].t != events[b].t {
			return events[a].t < events[b].t
		}
		return events[a].kind < events[b].kind
	})
	var (
		held       int
		gheld      = map[string]int{}
		laneOf     = map[int]int{} // lane -> job holding it, +1
		lastBound  = map[string]int{}
		waiting    = map[int]bool{} // arrived, not bound
		level      = l.Burst
		last       = w.Arrivals[0]
		dispatched []int // bound at this instant after arriving earlier
	)
	for k, e := range events {
		i := e.i
		g := group(i)
		switch e.kind {
		case arrive:
			waiting[i] = true
		case bind:
			if !waiting[i] {
				return fmt.Errorf("%s: job %d bound twice", w.Name, i)
			}
			delete(waiting, i)
			if prev, ok := lastBound[g]; ok && prev > i {
				return fmt.Errorf("%s: job %d of group %q is bound after job %d, submitted later", w.Name, i, g, prev)
			}
			lastBound[g] = max(lastBound[g], i)
			ln := r.Lanes[i]
			if ln < 1 || ln > l.Limit || laneOf[ln] != 0 {
				return fmt.Errorf("%s: job %d is bound at %g to lane %d, which is out of 1..%d or held by job %d", w.Name, i, e.t, ln, l.Limit, laneOf[ln]-1)
			}
			laneOf[ln] = i + 1
			held++
			gheld[g]++
			if held > l.Limit || gheld[g] > capOf(i) {
				return fmt.Errorf("%s: at %g, %d lanes held (limit %d), %d by group %q (cap %d)", w.Name, e.t, held, l.Limit, gheld[g], g, capOf(i))
			}
			if w.Arrivals[i] < e.t {
				dispatched = append(dispatched, i)
			}
		case start:
			if l.Rate > 0 {
				level = math.Min(l.Burst, level+l.Rate*(e.t-last)) - 1
				last = e.t
				if level < -1e-9 {
					return fmt.Errorf("%s: job %d starts at %g with no token in the bucket (%g)", w.Name, i, e.t, level+1)
				}
			}
		case end:
			held--
			gheld[g]--
			laneOf[r.Lanes[i]] = 0
		}
		if k < len(events)-1 && events[k+1].t == e.t {
			continue
		}
		// The end of an instant: a job may wait with a lane free to it only for a token.
		tokens := math.Inf(1)
		if l.Rate > 0 {
			tokens = math.Min(l.Burst, level+l.Rate*(e.t-last))
		}
		for j := range waiting {
			if held < l.Limit && gheld[group(j)] < capOf(j) && tokens >= 1+1e-9 {
				return fmt.Errorf("%s: at %g, %d of %d lanes held and %.3g tokens in the bucket while job %d (group %q, %d held of %d) waits",
					w.Name, e.t, held, l.Limit, tokens, j, group(j), gheld[group(j)], capOf(j))
			}
		}
		if !capped {
			for _, b := range dispatched {
				rb, ib := rank(b, e.t)
				for j := range waiting {
					if w.Arrivals[j] >= e.t {
						continue
					}
					if rj, ij := rank(j, e.t); rj > rb || rj == rb && ij > ib {
						return fmt.Errorf("%s: at %g, job %d (rank %d) is bound while job %d (rank %d) waits", w.Name, e.t, b, rb, j, rj)
					}
				}
			}
		}
		dispatched = dispatched[:0]
	}
	if len(waiting) > 0 || held != 0 {
		return fmt.Errorf("%s: %d jobs never bound, %d lanes held at the end", w.Name, len(waiting), held)
	}
	return nil
}

// starvationCheck checks the documented bound on a run without key caps: once a job is its group's
// head (its priority's oldest waiting job) and has waited StarvationBound since its submission, no job
// submitted after it is bound before it. It returns the most any job waited past that point.
func starvationCheck(w sim.PriorityWorkload, l sim.FlowLimits, r sim.FlowResult) (float64, error) {
	n := w.Len()
	byBind := make([]int, n)
	for i := range byBind {
		byBind[i] = i
	}
	sort.SliceStable(byBind, func(a, b int) bool { return r.Binds[byBind[a]] < r.Binds[byBind[b]] })
	prevOf := map[int]int{} // priority -> the last job of that priority so far
	past := 0.0
	for j := range n {
		p := w.Priority(j)
		head := w.Arrivals[j]
		if prev, ok := prevOf[p]; ok {
			head = math.Max(head, r.Binds[prev])
		}
		prevOf[p] = j
		top := math.Max(head, w.Arrivals[j]+float64(sim.MaxPriority-p)*l.Aging)
		if r.Binds[j] <= top {
			continue
		}
		past = math.Max(past, r.Binds[j]-top)
		// The jobs bound strictly between the top and j's bind.
		from := sort.Search(n, func(x int) bool { return r.Binds[byBind[x]] > top+1e-9 })
		for _, k := range byBind[from:] {
			if r.Binds[k] >= r.Binds[j] {
				break
			}
			if k > j {
				return 0, fmt.Errorf("%s: job %d (priority %d, submitted at %g, at the top from %g) is bound at %g, after job %d (priority %d) submitted later at %g and bound at %g",
					w.Name, j, p, w.Arrivals[j], top, r.Binds[j], k, w.Priority(k), w.Arrivals[k], r.Binds[k])
			}
		}
	}
	return past, nil
}

// flowCases are workloads with flow settings for the invariants: Poisson arrivals with mixed
// priorities, with and without a rate, and keys with caps.
func flowCases() []struct {
	name   string
	w      sim.PriorityWorkload
	limits sim.FlowLimits
} {
	type tc = struct {
		name   string
		w      sim.PriorityWorkload
		limits sim.FlowLimits
	}
	rng := rand.New(rand.NewPCG(62, 63))
	mixed := randomPriorities(rng, sim.PoissonWorkload(rng, "mixed", 3000, 1.1*8, 1.5), []int{1, 5, 9})
	keyedW := randomPriorities(rng, sim.PoissonWorkload(rng, "keyed", 3000, 0.95*8, 1), []int{1, 5, 9})
	keyedW.Keys = make([]string, keyedW.Len())
	for i := range keyedW.Keys {
		keyedW.Keys[i] = sim.BacklogKey(int(math.Floor(6 * math.Pow(rng.Float64(), 2))))
	}
	burst := sim.DefaultPriorityBurst()
	starve := sim.DefaultStarvation()
	starve.Horizon, starve.LowWindow = 600, 200
	return []tc{
		{"mixed priorities at load 1.1", mixed, sim.FlowLimits{KeyLimits: lanes(8), Aging: 10}},
		{"mixed priorities with a rate", mixed, sim.FlowLimits{KeyLimits: lanes(8), Aging: 10, Rate: 5, Burst: 4}},
		{"keys capped", keyedW, sim.FlowLimits{KeyLimits: sim.KeyLimits{Limit: 8, KeyLimit: 3, PerKey: map[string]int{"key-1": 5}}, Aging: 10}},
		{"keys capped, with a rate", keyedW, sim.FlowLimits{KeyLimits: sim.KeyLimits{Limit: 8, KeyLimit: 3}, Aging: 10, Rate: 6, Burst: 2.5}},
		{"the burst scenario", burst.Workload(64, 0), burst.Limits()},
		{"the starvation scenario, shortened", starve.Workload(65, 0), starve.Limits()},
	}
}

// In every case and order the replay finds the rules kept, and without key caps the starvation bound
// holds under the scheduler.
func TestRunPriorityInvariants(t *testing.T) {
	ctx := context.Background()
	for _, tc := range flowCases() {
		for _, o := range sim.PriorityOrders() {
			t.Run(tc.name+"/"+string(o), func(t *testing.T) {
				got, err := sim.RunPriority(ctx, tc.w, tc.limits, o, sim.Always)
				if err != nil {
					t.Fatalf("RunPriority error = %v", err)
				}
				if err := flowCheck(tc.w, tc.limits, o, got); err != nil {
					t.Fatal(err)
				}
				if got.MaxHeld > tc.limits.Limit {
					t.Errorf("max held = %d, over the limit %d", got.MaxHeld, tc.limits.Limit)
				}
				if o == sim.PriorityAgingOrder && !tc.limits.Capped() {
					if _, err := starvationCheck(tc.w, tc.limits, got); err != nil {
						t.Error(err)
					}
				}
			})
		}
	}
}

// The replay and the starvation check must catch runs that break the rules: FIFO's binds checked as
// the scheduler's, and strict priority's (which never ages) on the starvation scenario.
func TestTheChecksCatchBrokenRuns(t *testing.T) {
	ctx := context.Background()
	c := sim.DefaultStarvation()
	c.Horizon, c.LowWindow = 600, 200
	w := c.Workload(66, 0)
	fifo, err := sim.RunPriority(ctx, w, c.Limits(), sim.SubmissionOrder, sim.Always)
	if err != nil {
		t.Fatalf("RunPriority error = %v", err)
	}
	if err := flowCheck(w, c.Limits(), sim.SubmissionOrder, fifo); err != nil {
		t.Fatalf("the replay refused FIFO's run as FIFO: %v", err)
	}
	if err := flowCheck(w, c.Limits(), sim.PriorityAgingOrder, fifo); err == nil {
		t.Errorf("the replay passed FIFO's run as the priority scheduler's")
	}
	strict, err := sim.RunPriority(ctx, w, c.Limits(), sim.StrictPriorityOrder, sim.Always)
	if err != nil {
		t.Fatalf("RunPriority error = %v", err)
	}
	if _, err := starvationCheck(w, c.Limits(), strict); err == nil {
		t.Errorf("the starvation check passed strict priority's run, where high jobs pass the low ones forever")
	}
	// A run whose bucket is overdrawn: the rate scenario's starts, checked against half its rate.
	rc := sim.DefaultRateScenarios()[0]
	rw := rc.Workload(67, 0)
	rr, err := sim.RunPriority(ctx, rw, rc.Limits(), sim.PriorityAgingOrder, sim.Always)
	if err != nil {
		t.Fatalf("RunPriority error = %v", err)
	}
	half := rc.Limits()
	half.Rate /= 2
	if err := flowCheck(rw, half, sim.PriorityAgingOrder, rr); err == nil {
		t.Errorf("the replay passed a run at rate %g as one at rate %g", rc.Rate, half.Rate)
	}
	// A job left waiting with a lane free and tokens in the bucket: the same starts checked against
	// twice the rate.
	double := rc.Limits()
	double.Rate *= 2
	if err := flowCheck(rw, double, sim.PriorityAgingOrder, rr); err == nil {
		t.Errorf("the replay passed a run at rate %g as one at rate %g", rc.Rate, double.Rate)
	}
}

// With every job at one priority and no rate, each order is the ideal semaphore: the same starts.
func TestOnePriorityIsTheSemaphore(t *testing.T) {
	ctx := context.Background()
	for _, n := range []int{1, 4, 10} {
		p := sim.PoissonWorkload(rand.New(rand.NewPCG(68, uint64(n))), "sem", 20000, 0.95*float64(n), 1)
		sem, err := sim.RunSemaphore(ctx, p, n, sim.Always)
		if err != nil {
			t.Fatalf("RunSemaphore error = %v", err)
		}
		for _, o := range sim.PriorityOrders() {
			got, err := sim.RunPriority(ctx, sim.PriorityWorkload{Workload: p}, sim.FlowLimits{KeyLimits: lanes(n), Aging: 1}, o, sim.Always)
			if err != nil {
				t.Fatalf("RunPriority error = %v", err)
			}
			if !slices.Equal(got.Starts, sem.Starts) || math.Abs(got.Busy-sem.Busy) > 1e-6 || math.Abs(got.Backlogged-sem.Backlogged) > 1e-6 {
				t.Errorf("%d lanes, %s: starts or utilization differ from the semaphore's", n, o)
			}
		}
	}
}

func TestRunPriorityRefusesBadInput(t *testing.T) {
	ok := prio("ok", []float64{0, 1}, []float64{1, 1}, []int{1, 9}, nil)
	good := sim.FlowLimits{KeyLimits: lanes(2), Aging: 60}
	tests := []struct {
		name   string
		give   sim.PriorityWorkload
		limits sim.FlowLimits
		order  sim.PriorityOrder
	}{
		{name: "no lanes", give: ok, limits: sim.FlowLimits{Aging: 60}, order: sim.PriorityAgingOrder},
		{name: "no aging", give: ok, limits: sim.FlowLimits{KeyLimits: lanes(2)}, order: sim.PriorityAgingOrder},
		{name: "NaN aging", give: ok, limits: sim.FlowLimits{KeyLimits: lanes(2), Aging: math.NaN()}, order: sim.PriorityAgingOrder},
		{name: "negative rate", give: ok, limits: sim.FlowLimits{KeyLimits: lanes(2), Aging: 60, Rate: -1, Burst: 1}, order: sim.PriorityAgingOrder},
		{name: "a rate without a burst", give: ok, limits: sim.FlowLimits{KeyLimits: lanes(2), Aging: 60, Rate: 1}, order: sim.PriorityAgingOrder},
		{name: "a burst below 1", give: ok, limits: sim.FlowLimits{KeyLimits: lanes(2), Aging: 60, Rate: 1, Burst: 0.5}, order: sim.PriorityAgingOrder},
		{name: "a key capped at 0", give: ok, limits: sim.FlowLimits{KeyLimits: sim.KeyLimits{Limit: 2, PerKey: map[string]int{"": 0}}, Aging: 60}, order: sim.PriorityAgingOrder},
		{name: "unknown order", give: ok, limits: good, order: "lifo"},
		{name: "priority 0", give: prio("p0", []float64{0}, []float64{1}, []int{0}, nil), limits: good, order: sim.PriorityAgingOrder},
		{name: "priority 10", give: prio("p10", []float64{0}, []float64{1}, []int{10}, nil), limits: good, order: sim.StrictPriorityOrder},
		{name: "priorities missing", give: prio("short", []float64{0, 1}, []float64{1, 1}, []int{5}, nil), limits: good, order: sim.PriorityAgingOrder},
		{name: "keys missing", give: prio("short", []float64{0, 1}, []float64{1, 1}, nil, []string{"a"}), limits: good, order: sim.PriorityAgingOrder},
		{name: "arrivals out of order", give: prio("late", []float64{1, 0}, []float64{1, 1}, nil, nil), limits: good, order: sim.SubmissionOrder},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := sim.RunPriority(context.Background(), tt.give, tt.limits, tt.order, sim.Always); err == nil {
				t.Errorf("RunPriority = nil error, want one")
			}
		})
	}
}
