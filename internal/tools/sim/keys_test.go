package sim_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"sort"
	"testing"

	"github.com/sfnlimit/sfnlimit/internal/tools/sim"
)

// keyed builds a keyed workload from its jobs, given in submission order.
func keyed(name string, arrivals, durations []float64, keys []string) sim.KeyedWorkload {
	return sim.KeyedWorkload{Workload: sim.Workload{Name: name, Arrivals: arrivals, Durations: durations}, Keys: keys}
}

func keyedWaits(w sim.KeyedWorkload, r sim.KeyedResult) []float64 { return waits(w.Workload, r.Result) }

// The orders against waits worked out by hand.
func TestRunKeyedByHand(t *testing.T) {
	// Two lanes, key cap 2 (the limit: caps bind nowhere). a0 and a1 take the lanes at 0; a2 parks at
	// 0, b0 at 0.5. a0 ends at 1 with a running 1 job and b none. Keyed: b0 (fewest running) starts
	// at 1, and a2 when b0 ends at 2. Oldest head and FIFO: a2 (submitted first) at 1, b0 when a2
	// ends at 2.
	fewest := keyed("fewest", []float64{0, 0, 0, 0.5}, []float64{1, 3, 1, 1}, []string{"a", "a", "a", "b"})
	// One lane. x0 runs over [0,1]; b0 parks at 0, a0 at 0: both run none and parked at once, so the
	// keyed order serves a0 first by its key's name, although b0 was submitted first.
	byName := keyed("by-name", []float64{0, 0, 0}, []float64{1, 1, 1}, []string{"x", "b", "a"})
	// The same, a0 submitted at 0.5: b has parked longer, which goes before the name.
	byParkTime := keyed("by-park-time", []float64{0, 0, 0.5}, []float64{1, 1, 1}, []string{"x", "b", "a"})
	// Two lanes, key cap 1. a0 runs over [0,2] and b0 over [0,1]; a1 waits for its key's cap, not a
	// lane: b0's end at 1 leaves a lane free until a0 ends at 2. FIFO order ignores the cap.
	capped := keyed("capped", []float64{0, 0, 0}, []float64{2, 1, 1}, []string{"a", "a", "b"})
	// Two lanes, key cap 1, but a may run 2: a0 and a1 start at once, b0 waits for a lane.
	override := keyed("override", []float64{0, 0, 0}, []float64{2, 1, 1}, []string{"a", "a", "b"})
	// The park time is when the key last got a lane: one lane, key cap 1. b0 runs over [0,1]; a0
	// parks at 0.2, b1 and b2 at 0.5 (b's head), c0 at 0.7. At 1, a and c run none, b none: a0 (park
	// 0.2) starts, ends at 2; b1 (park 0.5) starts at 2 and b parks again at 2 with b2; c0 (park 0.7)
	// goes before b2 at 3, and b2 at 4.
	again := keyed("again", []float64{0, 0.2, 0.5, 0.5, 0.7}, []float64{1, 1, 1, 1, 1}, []string{"b", "a", "b", "b", "c"})
	tests := []struct {
		name      string
		give      sim.KeyedWorkload
		limits    sim.KeyLimits
		order     sim.KeyOrder
		wantWaits []float64
		wantMax   int
	}{
		{name: "keyed serves the key with the fewest running", give: fewest, limits: sim.KeyLimits{Limit: 2, KeyLimit: 2}, order: sim.KeyedOrder, wantWaits: []float64{0, 0, 2, 0.5}, wantMax: 2},
		{name: "oldest head serves the head submitted first", give: fewest, limits: sim.KeyLimits{Limit: 2, KeyLimit: 2}, order: sim.OldestHeadOrder, wantWaits: []float64{0, 0, 1, 1.5}, wantMax: 2},
		{name: "fifo serves in submission order", give: fewest, limits: sim.KeyLimits{Limit: 2, KeyLimit: 2}, order: sim.FIFOOrder, wantWaits: []float64{0, 0, 1, 1.5}, wantMax: 2},
		{name: "ties by key name", give: byName, limits: sim.KeyLimits{Limit: 1}, order: sim.KeyedOrder, wantWaits: []float64{0, 2, 1}, wantMax: 1},
		{name: "oldest head ignores the name", give: byName, limits: sim.KeyLimits{Limit: 1}, order: sim.OldestHeadOrder, wantWaits: []float64{0, 1, 2}, wantMax: 1},
		{name: "ties by park time before the name", give: byParkTime, limits: sim.KeyLimits{Limit: 1}, order: sim.KeyedOrder, wantWaits: []float64{0, 1, 1.5}, wantMax: 1},
		{name: "a key at its cap waits with a lane free", give: capped, limits: sim.KeyLimits{Limit: 2, KeyLimit: 1}, order: sim.KeyedOrder, wantWaits: []float64{0, 2, 0}, wantMax: 2},
		{name: "fifo has no key cap", give: capped, limits: sim.KeyLimits{Limit: 2, KeyLimit: 1}, order: sim.FIFOOrder, wantWaits: []float64{0, 0, 1}, wantMax: 2},
		{name: "a key's own limit", give: override, limits: sim.KeyLimits{Limit: 2, KeyLimit: 1, PerKey: map[string]int{"a": 2}}, order: sim.KeyedOrder, wantWaits: []float64{0, 0, 1}, wantMax: 2},
		{name: "park time is the last lane's", give: again, limits: sim.KeyLimits{Limit: 1, KeyLimit: 1}, order: sim.KeyedOrder, wantWaits: []float64{0, 0.8, 1.5, 3.5, 2.3}, wantMax: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := sim.RunKeyed(context.Background(), tt.give, tt.limits, tt.order, sim.Always)
			if err != nil {
				t.Fatalf("RunKeyed error = %v", err)
			}
			if gw := keyedWaits(tt.give, got); !near(gw, tt.wantWaits) {
				t.Errorf("waits = %v, want %v", gw, tt.wantWaits)
			}
			if got.MaxRunning != tt.wantMax {
				t.Errorf("max running = %d, want %d", got.MaxRunning, tt.wantMax)
			}
		})
	}
}

// sweepCheck checks a keyed run from its starts alone, replaying arrivals, starts and ends: every job
// starts once, at or after its arrival; no lane runs two jobs at once; the total never exceeds the
// limit; within a key (under FIFOOrder, within the type) jobs start in submission order; and under a
// keyed order, no key exceeds its cap, and no lane is free at the end of an instant while a job
// waits whose key is under its cap. It returns the most jobs running at once, in total and per key,
// or what it found wrong first.
func sweepCheck(w sim.KeyedWorkload, l sim.KeyLimits, o sim.KeyOrder, r sim.KeyedResult) (int, map[string]int, error) {
	n := w.Len()
	if len(r.Starts) != n || len(r.Lanes) != n {
		return 0, nil, fmt.Errorf("%s: %d starts and %d lanes for %d jobs", w.Name, len(r.Starts), len(r.Lanes), n)
	}
	const (
		end = iota // at one instant: ends, then starts, then arrivals, as the simulator does
		start
		arrive
	)
	type event struct {
		t    float64
		kind int
		i    int
	}
	var events []event
	for i := range n {
		if !(r.Starts[i] >= w.Arrivals[i]) || math.IsInf(r.Starts[i], 0) {
			return 0, nil, fmt.Errorf("%s: job %d arrives at %g and starts at %g", w.Name, i, w.Arrivals[i], r.Starts[i])
		}
		events = append(events, event{w.Arrivals[i], arrive, i}, event{r.Starts[i], start, i}, event{r.Starts[i] + w.Durations[i], end, i})
	}
	sort.SliceStable(events, func(a, b int) bool {
		if events[a].t != events[b].t {
			return events[a].t < events[b].t
		}
		return events[a].kind < events[b].kind
	})
	var (
		running   int
		krun      = map[string]int{}
		kwait     = map[string]int{}
		maxRun    int
		keyMax    = map[string]int{}
		lanes     = map[int]int{} // lane -> job running in it, +1
		starts    = make([]int, n)
		lastKey   = map[string]int{} // the last job of each key to start
		lastJob   = -1
		capOf     = func(key string) int { return l.Cap(key) }
		isKeyed   = o != sim.FIFOOrder
		checkIdle = func(at float64) error {
			if !isKeyed || running >= l.Limit {
				return nil
			}
			for key, c := range kwait {
				if c > 0 && krun[key] < capOf(key) {
					return fmt.Errorf("%s: at %g a lane is free (%d of %d running) while key %s has %d jobs waiting and runs %d of its cap %d",
						w.Name, at, running, l.Limit, key, c, krun[key], capOf(key))
				}
			}
			return nil
		}
	)
	for k, e := range events {
		key := w.Keys[e.i]
		switch e.kind {
		case arrive:
			kwait[key]++
		case start:
			starts[e.i]++
			kwait[key]--
			running++
			krun[key]++
			ln := r.Lanes[e.i]
			if ln < 1 || ln > l.Limit || lanes[ln] != 0 {
				return 0, nil, fmt.Errorf("%s: job %d starts at %g in lane %d, which is out of 1..%d or runs job %d", w.Name, e.i, e.t, ln, l.Limit, lanes[ln]-1)
			}
			lanes[ln] = e.i + 1
			if prev, ok := lastKey[key]; ok && isKeyed && prev > e.i {
				return 0, nil, fmt.Errorf("%s: job %d of key %s starts after job %d, submitted later", w.Name, e.i, key, prev)
			}
			lastKey[key] = e.i
			if !isKeyed && lastJob > e.i {
				return 0, nil, fmt.Errorf("%s: job %d starts after job %d, submitted later, under FIFO order", w.Name, e.i, lastJob)
			}
			lastJob = max(lastJob, e.i)
		case end:
			running--
			krun[key]--
			lanes[r.Lanes[e.i]] = 0
		}
		maxRun = max(maxRun, running)
		keyMax[key] = max(keyMax[key], krun[key])
		if running > l.Limit {
			return 0, nil, fmt.Errorf("%s: %d jobs run at %g, over the limit %d", w.Name, running, e.t, l.Limit)
		}
		if isKeyed && krun[key] > capOf(key) {
			return 0, nil, fmt.Errorf("%s: key %s runs %d jobs at %g, over its cap %d", w.Name, key, krun[key], e.t, capOf(key))
		}
		if k == len(events)-1 || events[k+1].t != e.t {
			if err := checkIdle(e.t); err != nil {
				return 0, nil, err
			}
		}
	}
	for i, c := range starts {
		if c != 1 {
			return 0, nil, fmt.Errorf("%s: job %d started %d times", w.Name, i, c)
		}
	}
	return maxRun, keyMax, nil
}

// invariantCases are keyed workloads with their limits: the scenarios and a mixed one with a
// key's own limit and Poisson arrivals.
func invariantCases() []struct {
	name   string
	w      sim.KeyedWorkload
	limits sim.KeyLimits
} {
	type tc = struct {
		name   string
		w      sim.KeyedWorkload
		limits sim.KeyLimits
	}
	var out []tc
	iso := sim.DefaultKeyIsolation()
	for r := range 3 {
		w := iso.Workload(41, r)
		out = append(out, tc{fmt.Sprintf("isolation run %d", r), w, iso.Limits()}, tc{fmt.Sprintf("isolation run %d without the noisy key", r), w.Without(sim.NoisyKey), iso.Limits()})
	}
	long := iso
	long.Window = iso.DrainTime()
	out = append(out, tc{"isolation over the drain time", long.Workload(41, 0), long.Limits()})
	for _, b := range sim.DefaultKeyBacklogs() {
		out = append(out, tc{b.Name, b.Workload(42, 0), b.Limits()})
	}
	// Poisson arrivals at load 0.95 over 8 lanes from 12 keys of skewed weights, key-1 capped at 6,
	// key-2 at 1, the others at 3.
	rng := rand.New(rand.NewPCG(43, 44))
	p := sim.PoissonWorkload(rng, "mixed", 5000, 0.95*8, 1.5)
	mixed := sim.KeyedWorkload{Workload: p, Keys: make([]string, p.Len())}
	for i := range mixed.Keys {
		mixed.Keys[i] = sim.BacklogKey(int(math.Floor(12 * math.Pow(rng.Float64(), 2))))
	}
	out = append(out, tc{"mixed Poisson keys", mixed, sim.KeyLimits{Limit: 8, KeyLimit: 3, PerKey: map[string]int{"key-1": 6, "key-2": 1}}})
	return out
}

// In every scenario and order: the limit and the caps hold, every job starts once, each key's jobs
// start in submission order, and a keyed order never leaves a lane free that a waiting job's cap
// lets it take. The run's own counts agree with the replay.
func TestRunKeyedInvariants(t *testing.T) {
	ctx := context.Background()
	for _, tc := range invariantCases() {
		for _, o := range sim.KeyOrders() {
			t.Run(tc.name+"/"+string(o), func(t *testing.T) {
				got, err := sim.RunKeyed(ctx, tc.w, tc.limits, o, sim.Always)
				if err != nil {
					t.Fatalf("RunKeyed error = %v", err)
				}
				maxRun, keyMax, err := sweepCheck(tc.w, tc.limits, o, got)
				if err != nil {
					t.Fatal(err)
				}
				if got.MaxRunning != maxRun {
					t.Errorf("max running = %d, the replay's %d", got.MaxRunning, maxRun)
				}
				for key, m := range keyMax {
					if s := got.Keys[key]; s.MaxRunning != m || s.Jobs == 0 {
						t.Errorf("key %s: max running %d over %d jobs, the replay's %d", key, s.MaxRunning, s.Jobs, m)
					}
				}
				if u, ok := got.StartableUtilization(); o != sim.FIFOOrder && ok && u < 1-1e-9 {
					t.Errorf("utilization while a startable job waited = %g, want 1: no bind latency in the model", u)
				}
			})
		}
	}
}

// The replay must catch a run that breaks the rules: a scheduler that ignores the key caps (FIFO
// order's starts, checked as keyed).
func TestSweepCheckCatchesAnUncappedRun(t *testing.T) {
	b := sim.DefaultKeyBacklogs()[0]
	w := b.Workload(45, 0)
	got, err := sim.RunKeyed(context.Background(), w, b.Limits(), sim.FIFOOrder, sim.Always)
	if err != nil {
		t.Fatalf("RunKeyed error = %v", err)
	}
	if _, _, err := sweepCheck(w, b.Limits(), sim.FIFOOrder, got); err != nil {
		t.Fatalf("the replay refused FIFO order's run as FIFO: %v", err)
	}
	if _, _, err := sweepCheck(w, b.Limits(), sim.KeyedOrder, got); err == nil {
		t.Errorf("the replay passed FIFO order's run of one key with 200 jobs as keyed with cap %d", b.KeyLimit)
	}
}

// A single key with a backlog gets exactly its cap: never more, and never fewer while it waits.
func TestASingleKeyGetsExactlyItsCap(t *testing.T) {
	tests := []struct {
		name    string
		limits  sim.KeyLimits
		wantCap int
	}{
		{name: "key limit 5 of 10", limits: sim.KeyLimits{Limit: 10, KeyLimit: 5}, wantCap: 5},
		{name: "key limit 1", limits: sim.KeyLimits{Limit: 10, KeyLimit: 1}, wantCap: 1},
		{name: "key limit above the type's", limits: sim.KeyLimits{Limit: 10, KeyLimit: 15}, wantCap: 10},
		{name: "uncapped", limits: sim.KeyLimits{Limit: 10}, wantCap: 10},
		{name: "the key's own limit", limits: sim.KeyLimits{Limit: 10, KeyLimit: 5, PerKey: map[string]int{"key-1": 7}}, wantCap: 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := sim.KeyBacklog{Name: tt.name, Limit: tt.limits.Limit, KeyLimit: max(1, tt.limits.KeyLimit), Backlogs: []int{200}, Sigma: 1, Runs: 1}
			w := b.Workload(46, 0)
			got, err := sim.RunKeyed(context.Background(), w, tt.limits, sim.KeyedOrder, sim.Always)
			if err != nil {
				t.Fatalf("RunKeyed error = %v", err)
			}
			s := got.Keys[sim.BacklogKey(0)]
			mean, ok := s.MeanRunning()
			if s.Cap != tt.wantCap || s.MaxRunning != tt.wantCap || s.MinRunning != tt.wantCap || !ok || math.Abs(mean-float64(tt.wantCap)) > 1e-9 {
				t.Errorf("cap %d, max running %d, min %d and mean %g (%v) while backlogged; want %d for each", s.Cap, s.MaxRunning, s.MinRunning, mean, ok, tt.wantCap)
			}
		})
	}
	// The default scenario says the same over its runs.
	one := sim.DefaultKeyBacklogs()[0]
	one.Runs = 20
	r, err := sim.RunKeyBacklog(context.Background(), one, 47, sim.KeyedOrder)
	if err != nil {
		t.Fatalf("RunKeyBacklog error = %v", err)
	}
	if k := r.Keys[0]; k.Max != one.KeyLimit || k.MinBacklogged != one.KeyLimit || r.MaxRunning != one.KeyLimit {
		t.Errorf("%s: max %d, min %d while backlogged, %d running in all; want %d", one.Name, k.Max, k.MinBacklogged, r.MaxRunning, one.KeyLimit)
	}
}

// Keys with backlogs whose caps add up to the limit or more keep every lane busy while they all wait.
func TestSeveralKeysKeepTheLanesBusy(t *testing.T) {
	for _, b := range sim.DefaultKeyBacklogs()[1:] {
		b.Runs = 20
		r, err := sim.RunKeyBacklog(context.Background(), b, 48, sim.KeyedOrder)
		if err != nil {
			t.Fatalf("RunKeyBacklog(%s) error = %v", b.Name, err)
		}
		u := r.Utilization
		if u.Startable <= 0 || u.StartableShare < 0.9 || r.MaxRunning != b.Limit {
			t.Errorf("%s: %d running at most, %.3f of the lanes busy over %g while a startable job waited; want %d and at least 0.9",
				b.Name, r.MaxRunning, u.StartableShare, u.Startable, b.Limit)
		}
		if slices.Equal(b.Backlogs, []int{100, 100, 100, 100}) && u.Share < 0.9 {
			t.Errorf("%s: %.3f of the lanes busy while any job waited, want at least 0.9 with equal backlogs", b.Name, u.Share)
		}
	}
}

// With one key and no cap, or under FIFO order, the type is the ideal semaphore: the same starts.
func TestKeyedIsTheSemaphoreWithoutCaps(t *testing.T) {
	ctx := context.Background()
	for _, n := range []int{1, 4, 10} {
		p := sim.PoissonWorkload(rand.New(rand.NewPCG(49, uint64(n))), "sem", 20000, 0.95*float64(n), 1)
		sem, err := sim.RunSemaphore(ctx, p, n, sim.Always)
		if err != nil {
			t.Fatalf("RunSemaphore error = %v", err)
		}
		one := sim.KeyedWorkload{Workload: p, Keys: make([]string, p.Len())}
		many := sim.KeyedWorkload{Workload: p, Keys: make([]string, p.Len())}
		for i := range many.Keys {
			one.Keys[i] = "only"
			many.Keys[i] = sim.BacklogKey(i % 7)
		}
		for _, v := range []struct {
			name   string
			w      sim.KeyedWorkload
			limits sim.KeyLimits
			o      sim.KeyOrder
		}{
			{"one uncapped key", one, sim.KeyLimits{Limit: n}, sim.KeyedOrder},
			{"seven keys capped at 1, fifo", many, sim.KeyLimits{Limit: n, KeyLimit: 1}, sim.FIFOOrder},
		} {
			got, err := sim.RunKeyed(ctx, v.w, v.limits, v.o, sim.Always)
			if err != nil {
				t.Fatalf("RunKeyed error = %v", err)
			}
			if !slices.Equal(got.Starts, sem.Starts) || math.Abs(got.Busy-sem.Busy) > 1e-6 || math.Abs(got.Backlogged-sem.Backlogged) > 1e-6 {
				t.Errorf("%d lanes, %s: starts or utilization differ from the semaphore's", n, v.name)
			}
		}
	}
}

// Issue 13's isolation scenario: under the keyed scheduler the quiet keys' p99 wait with the noisy
// key is at most twice their p99 without it; under FIFO order it is many times worse. Keys served in
// submission order (the oldest head first) fail the bound.
func TestKeyIsolation(t *testing.T) {
	c := sim.DefaultKeyIsolation()
	for _, seed := range []uint64{1, 2} {
		r, err := sim.RunKeyIsolation(context.Background(), c, seed, sim.KeyOrders())
		if err != nil {
			t.Fatalf("RunKeyIsolation error = %v", err)
		}
		by := map[sim.KeyOrder]sim.IsolationFigures{}
		for _, f := range r.Orders {
			by[f.Order] = f
			t.Logf("seed %d, %s: quiet p50/p99 %.3g/%.3g with the noisy key, %.3g/%.3g without", seed, f.Order, f.With.P50, f.With.P99, f.Without.P50, f.Without.P99)
		}
		keyedOrder, oldest, fifo := by[sim.KeyedOrder], by[sim.OldestHeadOrder], by[sim.FIFOOrder]
		if keyedOrder.Without.P99 <= 0 || keyedOrder.Without.P50 <= 0 {
			t.Errorf("seed %d: quiet waits without the noisy key p50 %g, p99 %g; the scenario needs them above 0 for the ratio to mean anything",
				seed, keyedOrder.Without.P50, keyedOrder.Without.P99)
		}
		if ratio, _ := keyedOrder.P99Ratio(); ratio > 2 {
			t.Errorf("seed %d: keyed quiet p99 %g with the noisy key, %g without: %.2fx, want at most 2x", seed, keyedOrder.With.P99, keyedOrder.Without.P99, ratio)
		}
		if ratio, _ := oldest.P99Ratio(); ratio <= 2 {
			t.Errorf("seed %d: serving keys by their oldest head gives %.2fx, want above 2x, or the bound does not tell the orders apart", seed, ratio)
		}
		if ratio, _ := fifo.P99Ratio(); ratio < 10 || fifo.With.P99 < 10*keyedOrder.With.P99 {
			t.Errorf("seed %d: FIFO order's quiet p99 %g with the noisy key, %g without (%.2fx), keyed %g; want it 10 times worse than either",
				seed, fifo.With.P99, fifo.Without.P99, ratio, keyedOrder.With.P99)
		}
		// The noisy key alone runs exactly its cap; the keyed orders never exceed a cap or the limit.
		if na := keyedOrder.NoisyAlone; na.Max != c.KeyLimit || na.MinBacklogged != c.KeyLimit {
			t.Errorf("seed %d: the noisy key alone runs at most %d and at least %d while backlogged, want %d", seed, na.Max, na.MinBacklogged, c.KeyLimit)
		}
		for _, f := range []sim.IsolationFigures{keyedOrder, oldest} {
			if f.MaxRunning > c.Limit || f.MaxKeyOverCap > 0 || f.Noisy.Max > c.KeyLimit {
				t.Errorf("seed %d, %s: %d running, a key %d over its cap, the noisy key %d", seed, f.Order, f.MaxRunning, f.MaxKeyOverCap, f.Noisy.Max)
			}
		}
		if fifo.NoisyAlone.Max != c.Limit {
			t.Errorf("seed %d: FIFO order ran the noisy key alone %d at a time, want all %d lanes (no key cap)", seed, fifo.NoisyAlone.Max, c.Limit)
		}
		if u := keyedOrder.Utilization; u.StartableShare < 0.9 || u.Share < float64(c.KeyLimit)/float64(c.Limit) {
			t.Errorf("seed %d: keyed utilization %.3f while any job waited, %.3f while a startable one did; want at least the cap's share and 0.9",
				seed, u.Share, u.StartableShare)
		}
	}
}

func TestKeyScenariosAreDeterministic(t *testing.T) {
	ctx := context.Background()
	c := sim.DefaultKeyIsolation()
	c.Runs = 5
	run := func(seed uint64) sim.KeyIsolationResult {
		r, err := sim.RunKeyIsolation(ctx, c, seed, sim.KeyOrders())
		if err != nil {
			t.Fatalf("RunKeyIsolation error = %v", err)
		}
		return r
	}
	a, b, other := run(7), run(7), run(8)
	if !reflect.DeepEqual(a, b) {
		t.Errorf("RunKeyIsolation with seed 7 twice gave different results")
	}
	if reflect.DeepEqual(a.Orders, other.Orders) {
		t.Errorf("RunKeyIsolation with seeds 7 and 8 gave the same figures, want fresh draws")
	}
	// The quiet bursts: QuietJobs jobs of each key at one time within the window, after the noisy
	// key's jobs at 0.
	w := c.Workload(7, 0)
	at := map[string][]float64{}
	for i, key := range w.Keys {
		at[key] = append(at[key], w.Arrivals[i])
	}
	if len(at) != c.QuietKeys+1 || len(at[sim.NoisyKey]) != c.NoisyJobs || slices.Max(at[sim.NoisyKey]) != 0 {
		t.Fatalf("workload has %d keys and %d noisy jobs, want %d and %d at 0", len(at), len(at[sim.NoisyKey]), c.QuietKeys+1, c.NoisyJobs)
	}
	for q := range c.QuietKeys {
		ts := at[sim.QuietKey(q)]
		if len(ts) != c.QuietJobs || slices.Min(ts) != slices.Max(ts) || ts[0] < 0 || ts[0] >= c.Window {
			t.Errorf("quiet key %d arrives at %v, want %d jobs at one time in [0, %g)", q, ts, c.QuietJobs, c.Window)
		}
	}
	quiet := w.Without(sim.NoisyKey)
	if quiet.Len() != c.QuietKeys*c.QuietJobs || slices.Contains(quiet.Keys, sim.NoisyKey) || quiet.Job(0).ID != w.Job(c.NoisyJobs).ID {
		t.Errorf("without the noisy key: %d jobs, first id %s; want %d, the quiet jobs keeping their ids (%s)", quiet.Len(), quiet.Job(0).ID, c.QuietKeys*c.QuietJobs, w.Job(c.NoisyJobs).ID)
	}
}

func TestRunKeyedRefusesBadInput(t *testing.T) {
	ok := keyed("ok", []float64{0, 1}, []float64{1, 1}, []string{"a", "b"})
	tests := []struct {
		name   string
		give   sim.KeyedWorkload
		limits sim.KeyLimits
		order  sim.KeyOrder
	}{
		{name: "no lanes", give: ok, limits: sim.KeyLimits{}, order: sim.KeyedOrder},
		{name: "negative key limit", give: ok, limits: sim.KeyLimits{Limit: 2, KeyLimit: -1}, order: sim.KeyedOrder},
		{name: "a key capped at 0", give: ok, limits: sim.KeyLimits{Limit: 2, PerKey: map[string]int{"a": 0}}, order: sim.KeyedOrder},
		{name: "unknown order", give: ok, limits: sim.KeyLimits{Limit: 2}, order: "lifo"},
		{name: "keys missing", give: keyed("short", []float64{0, 1}, []float64{1, 1}, []string{"a"}), limits: sim.KeyLimits{Limit: 2}, order: sim.KeyedOrder},
		{name: "arrivals out of order", give: keyed("late", []float64{1, 0}, []float64{1, 1}, []string{"a", "a"}), limits: sim.KeyLimits{Limit: 2}, order: sim.FIFOOrder},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := sim.RunKeyed(context.Background(), tt.give, tt.limits, tt.order, sim.Always); err == nil {
				t.Errorf("RunKeyed = nil error, want one")
			}
		})
	}
	bad := sim.DefaultKeyIsolation()
	bad.Window = 0
	if _, err := sim.RunKeyIsolation(context.Background(), bad, 1, sim.KeyOrders()); err == nil {
		t.Errorf("RunKeyIsolation with a window of 0 = nil error, want one")
	}
	if _, err := sim.RunKeyBacklog(context.Background(), sim.KeyBacklog{Name: "empty", Limit: 10, KeyLimit: 5, Runs: 1}, 1, sim.KeyedOrder); err == nil {
		t.Errorf("RunKeyBacklog with no key = nil error, want one")
	}
}
