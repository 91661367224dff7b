package sim_test

import (
	"context"
	"reflect"
	"slices"
	"testing"

	"github.com/sfnlimit/sfnlimit/internal/tools/sim"
)

// Issue 14's burst: under the scheduler the high jobs wait as long as under a semaphore that serves
// them first (within 1.1x at p99), and under FIFO many times longer. An aging short enough for the
// low backlog to reach the top while the high jobs wait fails the target.
func TestPriorityBurst(t *testing.T) {
	ctx := context.Background()
	c := sim.DefaultPriorityBurst()
	c.Runs = 50
	for _, seed := range []uint64{1, 2} {
		r, err := sim.RunPriorityBurst(ctx, c, seed, sim.PriorityOrders())
		if err != nil {
			t.Fatalf("RunPriorityBurst error = %v", err)
		}
		sched, _ := r.Order(sim.PriorityAgingOrder)
		strict, _ := r.Order(sim.StrictPriorityOrder)
		fifo, _ := r.Order(sim.SubmissionOrder)
		for _, f := range r.Orders {
			t.Logf("seed %d, %s: high p50/p99 %.3g/%.3g, low max %.3g", seed, f.Order, f.High.P50, f.High.P99, f.Low.Max)
			if f.High.Jobs != c.Runs*c.HighJobs || f.Low.Jobs != c.Runs*c.LowJobs {
				t.Errorf("seed %d, %s: %d high and %d low waits, want %d and %d", seed, f.Order, f.High.Jobs, f.Low.Jobs, c.Runs*c.HighJobs, c.Runs*c.LowJobs)
			}
		}
		if strict.High.P50 <= 0 {
			t.Errorf("seed %d: strict priority's high p50 is %g; the scenario needs the high jobs to wait for the ratio to mean anything", seed, strict.High.P50)
		}
		if ratio, _ := sim.Ratio(sched.High.P99, strict.High.P99); ratio > 1.1 {
			t.Errorf("seed %d: the scheduler's high p99 %g is %.2fx strict priority's %g, want at most 1.1x", seed, sched.High.P99, ratio, strict.High.P99)
		}
		if fifo.High.P99 < 5*strict.High.P99 {
			t.Errorf("seed %d: FIFO's high p99 %g, strict priority's %g; want FIFO 5 times worse, or the scenario does not tell them apart", seed, fifo.High.P99, strict.High.P99)
		}
		short := c
		short.Aging = 0.5
		s, err := sim.RunPriorityBurst(ctx, short, seed, []sim.PriorityOrder{sim.PriorityAgingOrder})
		if err != nil {
			t.Fatalf("RunPriorityBurst error = %v", err)
		}
		if s.Orders[0].High.P99 < 5*strict.High.P99 {
			t.Errorf("seed %d: aging %g s gives high p99 %g, strict %g; want the low backlog, at the top after %g s, to go first",
				seed, short.Aging, s.Orders[0].High.P99, strict.High.P99, sim.StarvationBound(sim.LowPriority, short.Aging))
		}
	}
}

// Issue 14's starvation scenario: under the scheduler every low job starts while the high load lasts,
// no job submitted later passes one at the top, and each waits little past its bound; strict priority
// starves them.
func TestStarvation(t *testing.T) {
	ctx := context.Background()
	c := sim.DefaultStarvation()
	c.Runs = 10
	r, err := sim.RunStarvation(ctx, c, 3, sim.PriorityOrders())
	if err != nil {
		t.Fatalf("RunStarvation error = %v", err)
	}
	if r.Bound != 480 {
		t.Errorf("bound = %g, want (9-1) x 60 = 480", r.Bound)
	}
	by := map[sim.PriorityOrder]sim.StarvationFigures{}
	for _, f := range r.Orders {
		by[f.Order] = f
		t.Logf("%s: low p50/max %.4g/%.4g, %d of %d started before the horizon, %.3g past the top, %d passed", f.Order, f.Low.P50, f.Low.Max, f.LowStarted, f.Low.Jobs, f.PastTop, f.Passed)
	}
	sched, strict := by[sim.PriorityAgingOrder], by[sim.StrictPriorityOrder]
	if sched.Low.Jobs != c.Runs*c.LowJobs || sched.LowStarted != sched.Low.Jobs || sched.Passed != 0 {
		t.Errorf("scheduler: %d of %d low jobs started before the horizon, %d passes at the top; want all and 0", sched.LowStarted, sched.Low.Jobs, sched.Passed)
	}
	// At the top, a low job waits for the next lane that frees (one every 0.2 s on average) unless
	// an older job is at the top too.
	if sched.PastTop > 10 || sched.Low.Max > r.Bound+10 {
		t.Errorf("scheduler: low jobs wait up to %g, %g past the top; want within 10 s of the bound %g", sched.Low.Max, sched.PastTop, r.Bound)
	}
	if strict.LowStarted > strict.Low.Jobs/10 || strict.Passed == 0 || strict.Low.Max < c.Horizon-c.LowWindow {
		t.Errorf("strict priority: %d of %d low jobs started before the horizon, %d passes, max wait %g; want it to starve them",
			strict.LowStarted, strict.Low.Jobs, strict.Passed, strict.Low.Max)
	}
	// The independent check on the same runs.
	for run := range 2 {
		w := c.Workload(3, run)
		res, err := sim.RunPriority(ctx, w, c.Limits(), sim.PriorityAgingOrder, sim.Always)
		if err != nil {
			t.Fatalf("RunPriority error = %v", err)
		}
		// Any job at the top, high or low, waits only for a lane to free or an older job.
		if past, err := starvationCheck(w, c.Limits(), res); err != nil || past > 10 {
			t.Errorf("run %d: the starvation check says %v, %g s past the top at most; want no error and at most 10 s", run, err, past)
		}
	}
}

func TestPriorityScenariosAreDeterministic(t *testing.T) {
	ctx := context.Background()
	c := sim.DefaultPriorityBurst()
	c.Runs = 5
	run := func(seed uint64) sim.PriorityBurstResult {
		r, err := sim.RunPriorityBurst(ctx, c, seed, sim.PriorityOrders())
		if err != nil {
			t.Fatalf("RunPriorityBurst error = %v", err)
		}
		return r
	}
	a, b, other := run(7), run(7), run(8)
	if !reflect.DeepEqual(a, b) {
		t.Errorf("RunPriorityBurst with seed 7 twice gave different results")
	}
	if reflect.DeepEqual(a.Orders, other.Orders) {
		t.Errorf("RunPriorityBurst with seeds 7 and 8 gave the same figures, want fresh draws")
	}
	// The burst: the low jobs at 0 first, then the high ones in order within (0, HighWindow].
	w := c.Workload(7, 0)
	if w.Len() != c.LowJobs+c.HighJobs || !slices.IsSorted(w.Arrivals) {
		t.Fatalf("burst workload: %d jobs, sorted %v; want %d in arrival order", w.Len(), slices.IsSorted(w.Arrivals), c.LowJobs+c.HighJobs)
	}
	for i := range w.Len() {
		low := i < c.LowJobs
		if low && (w.Priorities[i] != sim.LowPriority || w.Arrivals[i] != 0) || !low && (w.Priorities[i] != sim.HighPriority || w.Arrivals[i] <= 0 || w.Arrivals[i] > c.HighWindow) {
			t.Fatalf("burst job %d: priority %d at %g", i, w.Priorities[i], w.Arrivals[i])
		}
	}
	// The starvation workload: high jobs at HighLoad of the lanes until the horizon, the low jobs
	// within their window.
	s := sim.DefaultStarvation()
	sw := s.Workload(7, 0)
	var highs, lows int
	for i := range sw.Len() {
		switch p := sw.Priorities[i]; {
		case p == sim.HighPriority && sw.Arrivals[i] < s.Horizon:
			highs++
		case p == s.LowPriority && sw.Arrivals[i] < s.LowWindow:
			lows++
		default:
			t.Fatalf("starvation job %d: priority %d at %g", i, p, sw.Arrivals[i])
		}
	}
	want := s.HighLoad * float64(s.Limit) / s.MeanDuration * s.Horizon
	if lows != s.LowJobs || float64(highs) < 0.95*want || float64(highs) > 1.05*want || !slices.IsSorted(sw.Arrivals) {
		t.Errorf("starvation workload: %d high and %d low jobs; want about %g and %d, in arrival order", highs, lows, want, s.LowJobs)
	}
}

func TestPriorityScenariosRefuseBadInput(t *testing.T) {
	ctx := context.Background()
	for name, mod := range map[string]func(*sim.PriorityBurst){
		"no high jobs":     func(c *sim.PriorityBurst) { c.HighJobs = 0 },
		"no aging":         func(c *sim.PriorityBurst) { c.Aging = 0 },
		"no mean duration": func(c *sim.PriorityBurst) { c.MeanDuration = 0 },
		"negative window":  func(c *sim.PriorityBurst) { c.HighWindow = -1 },
	} {
		c := sim.DefaultPriorityBurst()
		mod(&c)
		if _, err := sim.RunPriorityBurst(ctx, c, 1, sim.PriorityOrders()); err == nil {
			t.Errorf("RunPriorityBurst with %s = nil error, want one", name)
		}
	}
	for name, mod := range map[string]func(*sim.Starvation){
		"no low jobs":             func(c *sim.Starvation) { c.LowJobs = 0 },
		"low priority at the top": func(c *sim.Starvation) { c.LowPriority = sim.HighPriority },
		"low window past the end": func(c *sim.Starvation) { c.LowWindow = c.Horizon + 1 },
		"an infinite horizon":     func(c *sim.Starvation) { c.Horizon = c.Horizon / 0 },
		"a negative sigma":        func(c *sim.Starvation) { c.Sigma = -1 },
	} {
		c := sim.DefaultStarvation()
		mod(&c)
		if _, err := sim.RunStarvation(ctx, c, 1, sim.PriorityOrders()); err == nil {
			t.Errorf("RunStarvation with %s = nil error, want one", name)
		}
	}
}
