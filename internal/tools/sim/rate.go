package sim

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// Issue 14's scenarios for the rate: a type's backlog submitted at once, with a rate below what its
// lanes could start (the rate binds) and above it (the limit binds). Times are in seconds.

// MaxStartsPerWindow is the most starts within any window [s, s+width) that begins at a start s: the
// figure the issue bounds by R + B for a width of one second. (A window holding the most starts can
// always be slid right until it begins at one.)
func MaxStartsPerWindow(starts []float64, width float64) int {
	s := slices.Clone(starts)
	slices.Sort(s)
	most := 0
	for i, j := 0, 0; i < len(s); i++ {
		for j < len(s) && s[j] < s[i]+width {
			j++
		}
		most = max(most, j-i)
	}
	return most
}

// SustainedRate is the starts per second after the first instant of starts: the starts later than
// the first, over the time from the first start to the last. A backlog submitted at once spends its
// burst at the first instant (up to the limit), so this is the rate that the bucket or the lanes
// sustain. It is false when every start is at one instant.
func SustainedRate(starts []float64) (float64, bool) {
	if len(starts) == 0 {
		return 0, false
	}
	first, last := slices.Min(starts), slices.Max(starts)
	if last <= first {
		return 0, false
	}
	later := 0
	for _, s := range starts {
		if s > first {
			later++
		}
	}
	return float64(later) / (last - first), true
}

// RateScenario is a type's backlog of Jobs jobs submitted at time 0, with lognormal durations, run
// through Limit lanes with a rate of Rate starts per second and a burst of Burst (Rate 0: no rate).
type RateScenario struct {
	Name         string  `json:"name"`
	Limit        int     `json:"limit"`
	Rate         float64 `json:"rate"`
	Burst        float64 `json:"burst"`
	Jobs         int     `json:"jobs"`
	MeanDuration float64 `json:"meanDuration"` // seconds
	Sigma        float64 `json:"sigma"`
	Runs         int     `json:"runs"`
}

// DefaultRateScenarios are issue 14's: limit 10, rate 5/s, burst 10, 500 jobs at once. Jobs of mean
// 0.5 s could start at 20/s on ten lanes, so the rate binds; jobs of mean 10 s start at only 1/s, so
// the limit binds. The short jobs without a rate show what the rate holds back. 50 runs each.
func DefaultRateScenarios() []RateScenario {
	return []RateScenario{
		{Name: "short jobs, rate 5/s", Limit: 10, Rate: 5, Burst: 10, Jobs: 500, MeanDuration: 0.5, Sigma: 1, Runs: 50},
		{Name: "long jobs, rate 5/s", Limit: 10, Rate: 5, Burst: 10, Jobs: 500, MeanDuration: 10, Sigma: 1, Runs: 50},
		{Name: "short jobs, no rate", Limit: 10, Jobs: 500, MeanDuration: 0.5, Sigma: 1, Runs: 50},
	}
}

// Limits are the scenario's flow settings: its lanes and rate (the aging does not matter: every job
// has one priority).
func (c RateScenario) Limits() FlowLimits {
	return FlowLimits{KeyLimits: KeyLimits{Limit: c.Limit}, Aging: DefaultAging, Rate: c.Rate, Burst: c.Burst}
}

// Expected is the start rate that the binding constraint sustains while the backlog lasts: the rate,
// or the lanes over the mean duration if that is lower.
func (c RateScenario) Expected() float64 {
	lanes := float64(c.Limit) / c.MeanDuration
	if c.Rate > 0 {
		return math.Min(c.Rate, lanes)
	}
	return lanes
}

// WindowBound is the most starts a one-second window may hold, R + B, and false without a rate.
func (c RateScenario) WindowBound() (float64, bool) { return c.Rate + c.Burst, c.Rate > 0 }

func (c RateScenario) validate() error {
	if c.Jobs < 1 || c.Runs < 1 {
		return fmt.Errorf("rate scenario %q: jobs %d and runs %d must be at least 1", c.Name, c.Jobs, c.Runs)
	}
	if err := c.Limits().validate(); err != nil {
		return fmt.Errorf("rate scenario %q: %w", c.Name, err)
	}
	return validDuration(fmt.Sprintf("rate scenario %q", c.Name), c.MeanDuration, c.Sigma)
}

// Workload draws run r's durations from the random source (seed, r).
func (c RateScenario) Workload(seed uint64, r int) PriorityWorkload {
	rng := rand.New(rand.NewPCG(seed, uint64(r)))
	w := PriorityWorkload{Workload: Workload{Name: fmt.Sprintf("rate-s%d-r%d", seed, r), Arrivals: make([]float64, c.Jobs), Durations: make([]float64, c.Jobs)}}
	for i := range w.Durations {
		w.Durations[i] = c.MeanDuration * Lognormal(rng, c.Sigma)
	}
	return w
}

// RateFigures are a rate scenario's figures over its runs.
type RateFigures struct {
	Scenario RateScenario `json:"scenario"`
	Seed     uint64       `json:"seed"`
	// Sustained is the mean over runs of SustainedRate, Min and Max its extremes.
	Sustained    float64 `json:"sustained"`
	SustainedMin float64 `json:"sustainedMin"`
	SustainedMax float64 `json:"sustainedMax"`
	// MaxWindowStarts is the most starts in any one-second window of any run.
	MaxWindowStarts int `json:"maxWindowStarts"`
	// Utilization is the share of the lanes running jobs while jobs waited, pooled over runs; the rest
	// were free, as a job waiting for a token holds no lane.
	Utilization float64       `json:"utilization"`
	Makespan    float64       `json:"makespan"` // mean over runs, seconds
	Wait        PriorityWaits `json:"wait"`
}

// RunRateScenario runs scenario c under the scheduler.
func RunRateScenario(ctx context.Context, c RateScenario, seed uint64) (RateFigures, error) {
	if err := c.validate(); err != nil {
		return RateFigures{}, err
	}
	out := RateFigures{Scenario: c, Seed: seed, SustainedMin: math.Inf(1)}
	var waits []float64
	var backlogged, busy float64
	for r := range c.Runs {
		w := c.Workload(seed, r)
		res, err := RunPriority(ctx, w, c.Limits(), PriorityAgingOrder, Always)
		if err != nil {
			return RateFigures{}, fmt.Errorf("rate scenario %q: %w", c.Name, err)
		}
		rate, ok := SustainedRate(res.Starts)
		if !ok {
			return RateFigures{}, fmt.Errorf("rate scenario %q: run %d started every job at once; no rate to measure", c.Name, r)
		}
		out.Sustained += rate / float64(c.Runs)
		out.SustainedMin = math.Min(out.SustainedMin, rate)
		out.SustainedMax = math.Max(out.SustainedMax, rate)
		out.MaxWindowStarts = max(out.MaxWindowStarts, MaxStartsPerWindow(res.Starts, 1))
		out.Makespan += res.Makespan / float64(c.Runs)
		backlogged += res.Backlogged
		busy += res.Busy
		for i := range w.Len() {
			waits = append(waits, res.Wait(w.Workload, i))
		}
	}
	if backlogged > 0 {
		out.Utilization = busy / (backlogged * float64(c.Limit))
	}
	out.Wait = priorityWaits(waits)
	return out, nil
}
