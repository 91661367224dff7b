package sim

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
)

// Issue 14's scenarios for priorities: a burst of low-priority jobs followed by high-priority jobs
// (the high jobs' wait against a semaphore that serves them first), and sustained high-priority load
// beside a few low jobs (starvation). Times are in seconds.

// PriorityWaits are pooled waits, in seconds.
type PriorityWaits struct {
	Jobs int     `json:"jobs"`
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P99  float64 `json:"p99"`
	Max  float64 `json:"max"`
}

func priorityWaits(waits []float64) PriorityWaits {
	f := PriorityWaits{Jobs: len(waits)}
	for _, v := range waits {
		f.Mean += v / float64(len(waits))
		f.Max = math.Max(f.Max, v)
	}
	f.P50, f.P99 = quantile(waits, 0.5), quantile(waits, 0.99)
	return f
}

func validDuration(name string, mean, sigma float64) error {
	if !(mean > 0) || math.IsInf(mean, 0) || !(sigma >= 0) || math.IsInf(sigma, 0) {
		return fmt.Errorf("%s: mean duration %g must be finite and above 0, sigma %g finite and at least 0", name, mean, sigma)
	}
	return nil
}

// PriorityBurst is the scenario: LowJobs low-priority jobs submitted at time 0, then HighJobs
// high-priority jobs at times drawn uniformly over (0, HighWindow], all with lognormal durations.
type PriorityBurst struct {
	Limit      int     `json:"limit"`
	LowJobs    int     `json:"lowJobs"`
	HighJobs   int     `json:"highJobs"`
	HighWindow float64 `json:"highWindow"` // seconds
	// MeanDuration is the durations' mean in seconds, Sigma their logarithm's standard deviation.
	MeanDuration float64 `json:"meanDuration"`
	Sigma        float64 `json:"sigma"`
	Aging        float64 `json:"aging"` // seconds per level
	Runs         int     `json:"runs"`
}

// DefaultPriorityBurst is issue 14's burst: limit 10, 500 low jobs at 0, then 50 high jobs over the
// next 5 seconds, durations of mean 2 s and sigma 1, aging 60 s, 200 runs. The lanes run the low
// backlog in about 100 s; the high jobs bring 100 lane-seconds of their own over 5 s, so they queue
// for one another even when served first.
func DefaultPriorityBurst() PriorityBurst {
	return PriorityBurst{Limit: 10, LowJobs: 500, HighJobs: 50, HighWindow: 5, MeanDuration: 2, Sigma: 1, Aging: DefaultAging, Runs: 200}
}

// Limits are the scenario's flow settings: Limit lanes, its aging, no rate.
func (c PriorityBurst) Limits() FlowLimits {
	return FlowLimits{KeyLimits: KeyLimits{Limit: c.Limit}, Aging: c.Aging}
}

func (c PriorityBurst) validate() error {
	switch {
	case c.Limit < 1 || c.LowJobs < 0 || c.HighJobs < 1 || c.Runs < 1:
		return fmt.Errorf("priority burst: limit %d, high jobs %d and runs %d must be at least 1, low jobs %d at least 0", c.Limit, c.HighJobs, c.Runs, c.LowJobs)
	case !(c.HighWindow >= 0) || math.IsInf(c.HighWindow, 0):
		return fmt.Errorf("priority burst: high window %g must be finite and at least 0", c.HighWindow)
	case !(c.Aging > 0):
		return fmt.Errorf("priority burst: aging %g must be above 0", c.Aging)
	}
	return validDuration("priority burst", c.MeanDuration, c.Sigma)
}

// Workload draws run r's jobs from the random source (seed, r): the low jobs' durations, then the
// high jobs' times and durations. The low jobs come first, all at 0.
func (c PriorityBurst) Workload(seed uint64, r int) PriorityWorkload {
	rng := rand.New(rand.NewPCG(seed, uint64(r)))
	n := c.LowJobs + c.HighJobs
	w := PriorityWorkload{Workload: Workload{Name: fmt.Sprintf("burst-s%d-r%d", seed, r), Arrivals: make([]float64, n), Durations: make([]float64, n)}, Priorities: make([]int, n)}
	for i := range c.LowJobs {
		w.Durations[i], w.Priorities[i] = c.MeanDuration*Lognormal(rng, c.Sigma), LowPriority
	}
	for i := c.LowJobs; i < n; i++ {
		w.Arrivals[i] = c.HighWindow * (1 - rng.Float64()) // in (0, HighWindow]
		w.Durations[i], w.Priorities[i] = c.MeanDuration*Lognormal(rng, c.Sigma), HighPriority
	}
	slices.Sort(w.Arrivals[c.LowJobs:])
	return w
}

// PriorityBurstFigures are one order's figures in the burst scenario.
type PriorityBurstFigures struct {
	Order    PriorityOrder `json:"order"`
	High     PriorityWaits `json:"high"`
	Low      PriorityWaits `json:"low"`
	Makespan float64       `json:"makespan"` // mean over runs, seconds
}

// PriorityBurstResult is the burst scenario's figures for each order, on the same jobs.
type PriorityBurstResult struct {
	Scenario PriorityBurst          `json:"scenario"`
	Seed     uint64                 `json:"seed"`
	Orders   []PriorityBurstFigures `json:"orders"`
}

// Order is order o's figures, and false when the run left it out.
func (r PriorityBurstResult) Order(o PriorityOrder) (PriorityBurstFigures, bool) {
	k := slices.IndexFunc(r.Orders, func(f PriorityBurstFigures) bool { return f.Order == o })
	if k < 0 {
		return PriorityBurstFigures{}, false
	}
	return r.Orders[k], true
}

// RunPriorityBurst runs scenario c under each order.
func RunPriorityBurst(ctx context.Context, c PriorityBurst, seed uint64, orders []PriorityOrder) (PriorityBurstResult, error) {
	if err := c.validate(); err != nil {
		return PriorityBurstResult{}, err
	}
	out := PriorityBurstResult{Scenario: c, Seed: seed, Orders: make([]PriorityBurstFigures, len(orders))}
	high := make([][]float64, len(orders))
	low := make([][]float64, len(orders))
	for r := range c.Runs {
		w := c.Workload(seed, r)
		for k, o := range orders {
			res, err := RunPriority(ctx, w, c.Limits(), o, Always)
			if err != nil {
				return PriorityBurstResult{}, fmt.Errorf("priority burst, order %s: %w", o, err)
			}
			for i := range w.Len() {
				if w.Priorities[i] == HighPriority {
					high[k] = append(high[k], res.Wait(w.Workload, i))
				} else {
					low[k] = append(low[k], res.Wait(w.Workload, i))
				}
			}
			out.Orders[k].Makespan += res.Makespan / float64(c.Runs)
		}
	}
	for k, o := range orders {
		out.Orders[k].Order = o
		out.Orders[k].High = priorityWaits(high[k])
		out.Orders[k].Low = priorityWaits(low[k])
	}
	return out, nil
}

// Starvation is the starvation scenario: high-priority jobs arrive as a Poisson process whose work
// alone exceeds the lanes (HighLoad above 1) from 0 until Horizon, and LowJobs jobs of LowPriority
// arrive at times drawn uniformly over [0, LowWindow). Under strict priority the high backlog only
// grows until the horizon, so no low job starts before it; under the scheduler each low job is
// ranked at the top StarvationBound after its submission, and starts soon after.
type Starvation struct {
	Limit        int     `json:"limit"`
	HighLoad     float64 `json:"highLoad"` // the high jobs' arrival rate x mean duration / limit
	Horizon      float64 `json:"horizon"`  // seconds
	LowJobs      int     `json:"lowJobs"`
	LowWindow    float64 `json:"lowWindow"` // seconds
	LowPriority  int     `json:"lowPriority"`
	MeanDuration float64 `json:"meanDuration"`
	Sigma        float64 `json:"sigma"`
	Aging        float64 `json:"aging"`
	Runs         int     `json:"runs"`
}

// DefaultStarvation is issue 14's starvation scenario: limit 10, high load 1.2 for 20 minutes (about
// 7,200 high jobs a run, 1.2x what the lanes run), 20 low jobs (priority 1) over the first 10 minutes,
// durations of mean 2 s and sigma 1, aging 60 s (so the bound is 480 s and every low job reaches the
// top before the high load ends), 20 runs.
func DefaultStarvation() Starvation {
	return Starvation{Limit: 10, HighLoad: 1.2, Horizon: 1200, LowJobs: 20, LowWindow: 600, LowPriority: LowPriority,
		MeanDuration: 2, Sigma: 1, Aging: DefaultAging, Runs: 20}
}

// Bound is the low jobs' starvation bound: the wait after which they are ranked at the top.
func (c Starvation) Bound() float64 { return StarvationBound(c.LowPriority, c.Aging) }

// Limits are the scenario's flow settings: Limit lanes, its aging, no rate.
func (c Starvation) Limits() FlowLimits {
	return FlowLimits{KeyLimits: KeyLimits{Limit: c.Limit}, Aging: c.Aging}
}

func (c Starvation) validate() error {
	switch {
	case c.Limit < 1 || c.LowJobs < 1 || c.Runs < 1:
		return fmt.Errorf("starvation scenario: limit %d, low jobs %d and runs %d must be at least 1", c.Limit, c.LowJobs, c.Runs)
	case c.LowPriority < MinPriority || c.LowPriority >= HighPriority:
		return fmt.Errorf("starvation scenario: low priority %d must be %d..%d", c.LowPriority, MinPriority, HighPriority-1)
	case !(c.HighLoad > 0) || math.IsInf(c.HighLoad, 0) || !(c.Horizon > 0) || math.IsInf(c.Horizon, 0):
		return fmt.Errorf("starvation scenario: high load %g and horizon %g must be finite and above 0", c.HighLoad, c.Horizon)
	case !(c.LowWindow >= 0) || c.LowWindow > c.Horizon:
		return fmt.Errorf("starvation scenario: low window %g must be in [0, the horizon %g]", c.LowWindow, c.Horizon)
	case !(c.Aging > 0):
		return fmt.Errorf("starvation scenario: aging %g must be above 0", c.Aging)
	}
	return validDuration("starvation scenario", c.MeanDuration, c.Sigma)
}

// Workload draws run r's jobs from the random source (seed, r): the high jobs' arrivals and
// durations, then the low jobs', merged in arrival order.
func (c Starvation) Workload(seed uint64, r int) PriorityWorkload {
	rng := rand.New(rand.NewPCG(seed, uint64(r)))
	type job struct {
		at, d float64
		p     int
	}
	var jobs []job
	rate := c.HighLoad * float64(c.Limit) / c.MeanDuration
	for t := rng.ExpFloat64() / rate; t < c.Horizon; t += rng.ExpFloat64() / rate {
		jobs = append(jobs, job{t, c.MeanDuration * Lognormal(rng, c.Sigma), HighPriority})
	}
	for range c.LowJobs {
		jobs = append(jobs, job{c.LowWindow * rng.Float64(), c.MeanDuration * Lognormal(rng, c.Sigma), c.LowPriority})
	}
	slices.SortStableFunc(jobs, func(a, b job) int { return cmp.Compare(a.at, b.at) })
	w := PriorityWorkload{Workload: Workload{Name: fmt.Sprintf("starve-s%d-r%d", seed, r)}}
	for _, j := range jobs {
		w.Arrivals = append(w.Arrivals, j.at)
		w.Durations = append(w.Durations, j.d)
		w.Priorities = append(w.Priorities, j.p)
	}
	return w
}

// StarvationFigures are one order's figures in the starvation scenario.
type StarvationFigures struct {
	Order PriorityOrder `json:"order"`
	Low   PriorityWaits `json:"low"`
	High  PriorityWaits `json:"high"`
	// LowStarted is how many low jobs started before the horizon, while high jobs still arrived.
	LowStarted int `json:"lowStarted"`
	// PastTop is the most a low job waited after the scheduler's rule ranks it at the top as its
	// group's head (its submission plus the bound, or when it became the head if later), and Passed
	// how many times a job submitted after a low job was bound during that time: 0 is the documented
	// bound. The same point is used under every order, so that the baselines can be compared with it.
	PastTop float64 `json:"pastTop"`
	Passed  int     `json:"passed"`
}

// StarvationResult is the starvation scenario's figures for each order, on the same jobs.
type StarvationResult struct {
	Scenario Starvation          `json:"scenario"`
	Seed     uint64              `json:"seed"`
	Bound    float64             `json:"bound"` // the low jobs' StarvationBound, seconds
	Orders   []StarvationFigures `json:"orders"`
}

// RunStarvation runs scenario c under each order.
func RunStarvation(ctx context.Context, c Starvation, seed uint64, orders []PriorityOrder) (StarvationResult, error) {
	if err := c.validate(); err != nil {
		return StarvationResult{}, err
	}
	out := StarvationResult{Scenario: c, Seed: seed, Bound: c.Bound(), Orders: make([]StarvationFigures, len(orders))}
	high := make([][]float64, len(orders))
	low := make([][]float64, len(orders))
	for r := range c.Runs {
		w := c.Workload(seed, r)
		for k, o := range orders {
			res, err := RunPriority(ctx, w, c.Limits(), o, Always)
			if err != nil {
				return StarvationResult{}, fmt.Errorf("starvation scenario, order %s: %w", o, err)
			}
			f := &out.Orders[k]
			tops := topTimes(w, res.Binds, c.Aging)
			byBind := make([]int, w.Len())
			for i := range byBind {
				byBind[i] = i
			}
			sort.SliceStable(byBind, func(a, b int) bool { return res.Binds[byBind[a]] < res.Binds[byBind[b]] })
			for i := range w.Len() {
				if w.Priorities[i] != c.LowPriority {
					high[k] = append(high[k], res.Wait(w.Workload, i))
					continue
				}
				low[k] = append(low[k], res.Wait(w.Workload, i))
				if res.Starts[i] < c.Horizon {
					f.LowStarted++
				}
				if res.Binds[i] <= tops[i] {
					continue
				}
				f.PastTop = math.Max(f.PastTop, res.Binds[i]-tops[i])
				from := sort.Search(len(byBind), func(x int) bool { return res.Binds[byBind[x]] > tops[i] })
				for _, j := range byBind[from:] {
					if res.Binds[j] >= res.Binds[i] {
						break
					}
					if j > i {
						f.Passed++
					}
				}
			}
		}
	}
	for k, o := range orders {
		out.Orders[k].Order = o
		out.Orders[k].High = priorityWaits(high[k])
		out.Orders[k].Low = priorityWaits(low[k])
	}
	return out, nil
}

// topTimes is when each job of a run without key caps was ranked at the top level as its group's
// head: its submission plus its starvation bound, or when it became its priority's oldest waiting
// job (when the one before it was bound) if that was later.
func topTimes(w PriorityWorkload, binds []float64, aging float64) []float64 {
	out := make([]float64, w.Len())
	prev := map[int]int{}
	for i := range out {
		p := w.Priority(i)
		head := w.Arrivals[i]
		if j, ok := prev[p]; ok {
			head = math.Max(head, binds[j])
		}
		prev[p] = i
		out[i] = math.Max(head, w.Arrivals[i]+StarvationBound(p, aging))
	}
	return out
}
