package sim_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/sfnlimit/sfnlimit/internal/tools/sim"
)

func TestMaxStartsPerWindow(t *testing.T) {
	tests := []struct {
		name   string
		starts []float64
		width  float64
		want   int
	}{
		{name: "none", width: 1, want: 0},
		{name: "one", starts: []float64{3}, width: 1, want: 1},
		// From 0: 0, 0, 0.5, 0.99 (1 is out); from 0.5: 0.5, 0.99, 1, 1.4.
		{name: "half-open windows", starts: []float64{0, 0, 0.5, 0.99, 1, 1.4, 2.2}, width: 1, want: 4},
		{name: "unsorted", starts: []float64{2.2, 1.4, 0.5, 0, 1, 0.99, 0}, width: 1, want: 4},
		{name: "all at once", starts: []float64{5, 5, 5, 5, 5}, width: 1, want: 5},
		{name: "a wider window", starts: []float64{0, 0, 0.5, 0.99, 1, 1.4, 2.2}, width: 2.5, want: 7},
	}
	for _, tt := range tests {
		if got := sim.MaxStartsPerWindow(tt.starts, tt.width); got != tt.want {
			t.Errorf("%s: MaxStartsPerWindow(%v, %g) = %d, want %d", tt.name, tt.starts, tt.width, got, tt.want)
		}
	}
}

func TestSustainedRate(t *testing.T) {
	tests := []struct {
		name   string
		starts []float64
		want   float64
		wantOK bool
	}{
		{name: "none"},
		{name: "one instant", starts: []float64{2, 2, 2}},
		// The burst at 0 leaves out; three starts over 3 s.
		{name: "a burst then one a second", starts: []float64{0, 0, 0, 1, 2, 3}, want: 1, wantOK: true},
		{name: "unsorted", starts: []float64{3, 0, 0.5, 0, 1}, want: 1, wantOK: true},
	}
	for _, tt := range tests {
		got, ok := sim.SustainedRate(tt.starts)
		if ok != tt.wantOK || math.Abs(got-tt.want) > 1e-12 {
			t.Errorf("%s: SustainedRate(%v) = %g, %v; want %g, %v", tt.name, tt.starts, got, ok, tt.want, tt.wantOK)
		}
	}
}

// No one-second window holds more than R + B starts, whatever the arrivals, durations, lanes and
// bucket; and the replay finds every job taking its lane and its token at once, no lane free while a
// job could take it with a token in the bucket, and the bucket never overdrawn.
func TestTheRateBoundsEveryWindow(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(71, 72))
	burst := func(n int, mean float64) sim.PriorityWorkload {
		w := sim.BurstWorkload(rng, "burst", n, 1)
		for i := range w.Durations {
			w.Durations[i] *= mean
		}
		return sim.PriorityWorkload{Workload: w}
	}
	poisson := func(n int, rate, mean float64) sim.PriorityWorkload {
		w := sim.PoissonWorkload(rng, "poisson", n, rate, 1)
		for i := range w.Durations {
			w.Durations[i] *= mean
		}
		return randomPriorities(rng, w, []int{1, 5, 9})
	}
	// Bursts arriving at once, twice: the second after the bucket has refilled.
	twice := burst(200, 0.2)
	for i := 100; i < 200; i++ {
		twice.Arrivals[i] = 60
	}
	tests := []struct {
		name  string
		w     sim.PriorityWorkload
		limit int
		rate  float64
		burst float64
	}{
		{name: "the issue's backlog", w: burst(500, 0.5), limit: 10, rate: 5, burst: 10},
		{name: "a burst above the limit", w: burst(500, 0.5), limit: 10, rate: 5, burst: 30},
		{name: "no burst to speak of", w: burst(300, 0.1), limit: 4, rate: 3.5, burst: 1},
		{name: "a slow rate with a fractional burst", w: burst(100, 1), limit: 20, rate: 0.5, burst: 2.5},
		{name: "two backlogs a minute apart", w: twice, limit: 10, rate: 5, burst: 10},
		{name: "Poisson arrivals above the rate", w: poisson(3000, 8, 0.5), limit: 10, rate: 5, burst: 10},
		{name: "Poisson arrivals below the rate", w: poisson(3000, 3, 0.5), limit: 10, rate: 5, burst: 10},
		{name: "the lanes bind", w: poisson(3000, 8, 4), limit: 10, rate: 5, burst: 10},
	}
	for _, tt := range tests {
		l := sim.FlowLimits{KeyLimits: lanes(tt.limit), Aging: 30, Rate: tt.rate, Burst: tt.burst}
		for _, o := range sim.PriorityOrders() {
			t.Run(fmt.Sprintf("%s/%s", tt.name, o), func(t *testing.T) {
				got, err := sim.RunPriority(ctx, tt.w, l, o, sim.Always)
				if err != nil {
					t.Fatalf("RunPriority error = %v", err)
				}
				if most := sim.MaxStartsPerWindow(got.Starts, 1); float64(most) > tt.rate+tt.burst {
					t.Errorf("%d starts in one second, over R + B = %g", most, tt.rate+tt.burst)
				}
				if err := flowCheck(tt.w, l, o, got); err != nil {
					t.Error(err)
				}
			})
		}
	}
}

// The rate scenarios: the short jobs start at the rate, the long ones at what the lanes
// allow, and no second holds more than R + B starts. Without the rate the short jobs break that bound,
// so the check can fail.
func TestRateScenarios(t *testing.T) {
	ctx := context.Background()
	sc := sim.DefaultRateScenarios()
	short, long, free := sc[0], sc[1], sc[2]
	run := func(c sim.RateScenario) sim.RateFigures {
		c.Runs = 20
		f, err := sim.RunRateScenario(ctx, c, 73)
		if err != nil {
			t.Fatalf("RunRateScenario(%s) error = %v", c.Name, err)
		}
		t.Logf("%s: %.4g starts/s (%.4g-%.4g), at most %d in 1 s, lanes %.3f running, makespan %.4g",
			c.Name, f.Sustained, f.SustainedMin, f.SustainedMax, f.MaxWindowStarts, f.Utilization, f.Makespan)
		return f
	}
	fs, fl, ff := run(short), run(long), run(free)
	if short.Expected() != short.Rate || long.Expected() >= long.Rate {
		t.Fatalf("expected rates %g and %g: the scenarios must bind the rate and the limit", short.Expected(), long.Expected())
	}
	if math.Abs(fs.SustainedMin-short.Rate) > 0.01*short.Rate || math.Abs(fs.SustainedMax-short.Rate) > 0.01*short.Rate {
		t.Errorf("%s: %g-%g starts/s, want %g within 1%% in every run", short.Name, fs.SustainedMin, fs.SustainedMax, short.Rate)
	}
	if math.Abs(fl.Sustained-long.Expected()) > 0.15*long.Expected() || fl.SustainedMax >= long.Rate {
		t.Errorf("%s: %g starts/s (at most %g), want about the lanes' %g, under the rate %g", long.Name, fl.Sustained, fl.SustainedMax, long.Expected(), long.Rate)
	}
	for _, f := range []sim.RateFigures{fs, fl} {
		if bound, _ := f.Scenario.WindowBound(); float64(f.MaxWindowStarts) > bound || f.MaxWindowStarts < f.Scenario.Limit {
			t.Errorf("%s: at most %d starts in one second, want between the limit %d and R + B = %g", f.Scenario.Name, f.MaxWindowStarts, f.Scenario.Limit, bound)
		}
	}
	if bound, _ := short.WindowBound(); float64(ff.MaxWindowStarts) <= bound {
		t.Errorf("%s: at most %d starts in one second without a rate; the scenario should break R + B = %g", free.Name, ff.MaxWindowStarts, bound)
	}
	// Where the rate binds, the lanes run about R x the mean duration jobs and the rest are free:
	// waiting jobs hold none. Where the limit binds, or without a rate, every lane runs a job.
	if want := short.Rate * short.MeanDuration / float64(short.Limit); math.Abs(fs.Utilization-want) > 0.05 {
		t.Errorf("%s: lanes %.3f running, want about R x mean duration / limit = %.3f", short.Name, fs.Utilization, want)
	}
	for _, f := range []sim.RateFigures{fl, ff} {
		if f.Utilization < 0.999 {
			t.Errorf("%s: lanes %.3f running, want all", f.Scenario.Name, f.Utilization)
		}
	}
}

// While the rate binds, the jobs waiting for a token hold no lane: every job takes its lane and its
// token at once, the lanes held at any time are the jobs running, and a backlog of short jobs leaves
// most lanes free. Lanes held are counted from the binds, so a model that bound jobs before their
// token fails here.
func TestAJobWaitingForATokenHoldsNoLane(t *testing.T) {
	ctx := context.Background()
	short := sim.DefaultRateScenarios()[0]
	tests := []struct {
		name  string
		order sim.PriorityOrder
		rate  float64
		burst float64
	}{
		{name: "the issue's rate", order: sim.PriorityAgingOrder, rate: short.Rate, burst: short.Burst},
		{name: "a burst of 1", order: sim.PriorityAgingOrder, rate: short.Rate, burst: 1},
		{name: "a slower rate, fifo", order: sim.SubmissionOrder, rate: 2, burst: 4},
		{name: "a slower rate, strict priority", order: sim.StrictPriorityOrder, rate: 2, burst: 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := short.Limits()
			l.Rate, l.Burst = tt.rate, tt.burst
			w := short.Workload(74, 0)
			got, err := sim.RunPriority(ctx, w, l, tt.order, sim.Always)
			if err != nil {
				t.Fatalf("RunPriority error = %v", err)
			}
			// Lane-time held, from each bind to the job's end, over the backlog (from the first start
			// to the last).
			first, last := slices.Min(got.Starts), slices.Max(got.Starts)
			var held float64
			for i := range w.Len() {
				if got.Binds[i] != got.Starts[i] {
					t.Errorf("job %d bound at %g and started at %g, want both at once", i, got.Binds[i], got.Starts[i])
				}
				end := got.Starts[i] + w.Durations[i]
				held += math.Max(0, math.Min(end, last)-math.Max(got.Binds[i], first))
			}
			lanes := float64(l.Limit) * (last - first)
			// The lanes hold about R x the mean duration running jobs; the rest are free.
			if want := tt.rate * short.MeanDuration / float64(l.Limit); math.Abs(held/lanes-want) > 0.1 {
				t.Errorf("lanes held %.3f of the backlog's lane-time, want about R x mean duration / limit = %.3f", held/lanes, want)
			}
			if rate, _ := sim.SustainedRate(got.Starts); math.Abs(rate-tt.rate) > 0.02*tt.rate {
				t.Errorf("%.4g starts/s sustained, want %g", rate, tt.rate)
			}
			if most := sim.MaxStartsPerWindow(got.Starts, 1); float64(most) > tt.rate+tt.burst {
				t.Errorf("%d starts in one second, over R + B = %g", most, tt.rate+tt.burst)
			}
		})
	}
}

func TestRunRateScenarioRefusesBadInput(t *testing.T) {
	for name, mod := range map[string]func(*sim.RateScenario){
		"no jobs":          func(c *sim.RateScenario) { c.Jobs = 0 },
		"a burst below 1":  func(c *sim.RateScenario) { c.Burst = 0.5 },
		"a negative rate":  func(c *sim.RateScenario) { c.Rate = -1 },
		"no lanes":         func(c *sim.RateScenario) { c.Limit = 0 },
		"no mean duration": func(c *sim.RateScenario) { c.MeanDuration = 0 },
		"no runs":          func(c *sim.RateScenario) { c.Runs = 0 },
	} {
		c := sim.DefaultRateScenarios()[0]
		mod(&c)
		if _, err := sim.RunRateScenario(context.Background(), c, 1); err == nil {
			t.Errorf("RunRateScenario with %s = nil error, want one", name)
		}
	}
}
