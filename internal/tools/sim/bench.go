package sim

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
)

// Kind is the shape of a workload's arrivals.
type Kind string

// Workload kinds.
const (
	// Poisson arrivals at a steady rate; the figures leave out each run's warm-up.
	Poisson Kind = "poisson"
	// Burst: all of a run's jobs arrive at time 0.
	Burst Kind = "burst"
)

// Cell is one workload of the benchmark grid: its jobs are run through the ideal semaphore and each
// strategy, Runs times with fresh draws, and the figures pool the runs.
type Cell struct {
	Kind Kind `json:"kind"`
	// Load is the arrival rate times the mean duration (1) divided by the lanes; Poisson only.
	Load  float64 `json:"load,omitempty"`
	Sigma float64 `json:"sigma"`
	Lanes int     `json:"lanes"`
	// IDs is the shape of the job ids ("" is SequentialIDs).
	IDs IDScheme `json:"ids"`
	// Jobs per run: the Poisson jobs, or the burst's size.
	Jobs int `json:"jobs"`
	Runs int `json:"runs"`
	// Warmup is how many of each Poisson run's first jobs are left out of the figures (the lanes
	// start empty).
	Warmup int `json:"warmup"`
}

// Stats are one strategy's (or the ideal's) figures over a cell's runs.
type Stats struct {
	Jobs     int     `json:"jobs"` // jobs measured, over all runs
	MeanWait float64 `json:"meanWait"`
	P50Wait  float64 `json:"p50Wait"`
	P99Wait  float64 `json:"p99Wait"`
	// Backlogged is the time, over all runs, during which some job waited; Utilization is the share
	// of lanes running a job during it (meaningless when Backlogged is 0).
	Backlogged  float64 `json:"backlogged"`
	Utilization float64 `json:"utilization"`
	// Makespan is the mean, over runs, of the time from the first arrival to the last end.
	Makespan float64 `json:"makespan"`
	// RunP99Waits is each run's own p99 wait, to show how much the figure moves between seeds.
	RunP99Waits []float64 `json:"runP99Waits"`
}

// Outcome is one strategy's figures in a cell.
type Outcome struct {
	Strategy string `json:"strategy"`
	Real     bool   `json:"real"`
	Stats
}

// CellResult holds a cell's figures: the ideal semaphore's and each strategy's, on the same jobs.
type CellResult struct {
	Cell       Cell      `json:"cell"`
	Ideal      Stats     `json:"ideal"`
	Strategies []Outcome `json:"strategies"`
}

// Ratio is v divided by the ideal's value: 1 when both are 0, and false when only the ideal's is 0.
func Ratio(v, ideal float64) (float64, bool) {
	switch {
	case ideal > 0:
		return v / ideal, true
	case v == 0:
		return 1, true
	}
	return math.Inf(1), false
}

// strategyStream sets the strategies' random sources apart from the workloads'.
const strategyStream = 1 << 40

// strategyRand is the random source of a strategy in run r: it depends on the strategy's name, not
// on which other strategies run beside it.
func strategyRand(seed uint64, r int, name string) *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte(name))
	return rand.New(rand.NewPCG(seed^h.Sum64(), strategyStream+uint64(r)))
}

// RunCell runs cell c: for each run r, the workload drawn from (seed, r) goes through the ideal
// semaphore and through each strategy, whose own random source is drawn from (seed, r, its name).
func RunCell(ctx context.Context, c Cell, seed uint64, specs []Spec) (CellResult, error) {
	if err := c.validate(); err != nil {
		return CellResult{}, err
	}
	ideal := newPool(c)
	pools := make([]*pool, len(specs))
	for k := range specs {
		pools[k] = newPool(c)
	}
	for r := range c.Runs {
		w := c.workload(seed, r)
		win := Always
		if c.Kind == Poisson {
			win = Window{From: w.Arrivals[c.Warmup], To: w.Arrivals[w.Len()-1]}
		}
		res, err := RunSemaphore(ctx, w, c.Lanes, win)
		if err != nil {
			return CellResult{}, err
		}
		ideal.add(w, res)
		for k, spec := range specs {
			res, err := spec.RunOn(ctx, w, c.Lanes, strategyRand(seed, r, spec.Name), win)
			if err != nil {
				return CellResult{}, fmt.Errorf("cell %s, strategy %s: %w", c, spec.Name, err)
			}
			pools[k].add(w, res)
		}
	}
	out := CellResult{Cell: c, Ideal: ideal.stats(), Strategies: make([]Outcome, len(specs))}
	for k, spec := range specs {
		out.Strategies[k] = Outcome{Strategy: spec.Name, Real: spec.Real, Stats: pools[k].stats()}
	}
	return out, nil
}

// RunGrid runs the cells on up to workers goroutines and returns their results in the cells' order.
// The results do not depend on workers.
func RunGrid(ctx context.Context, cells []Cell, seed uint64, specs []Spec, workers int) ([]CellResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The biggest cells go first, so no worker is left with one at the end.
	order := make([]int, len(cells))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		return cells[b].Lanes*cells[b].Jobs*cells[b].Runs - cells[a].Lanes*cells[a].Jobs*cells[a].Runs
	})
	var (
		out   = make([]CellResult, len(cells))
		errs  = make([]error, len(cells))
		todo  = make(chan int)
		group sync.WaitGroup
	)
	for range max(1, workers) {
		group.Go(func() {
			for i := range todo {
				out[i], errs[i] = RunCell(ctx, cells[i], seed, specs)
				if errs[i] != nil {
					cancel()
				}
			}
		})
	}
	for _, i := range order {
		todo <- i
	}
	close(todo)
	group.Wait()
	// A failed cell cancels the others: report its error, not theirs.
	var first error
	for _, err := range errs {
		if err != nil && (first == nil || errors.Is(first, context.Canceled) && !errors.Is(err, context.Canceled)) {
			first = err
		}
	}
	if first != nil {
		return nil, first
	}
	return out, nil
}

func (c Cell) String() string {
	if c.Kind == Burst {
		return fmt.Sprintf("burst of %d, sigma %g, %d lanes", c.Jobs, c.Sigma, c.Lanes)
	}
	return fmt.Sprintf("poisson load %g, sigma %g, %d lanes", c.Load, c.Sigma, c.Lanes)
}

func (c Cell) validate() error {
	switch {
	case c.Kind != Poisson && c.Kind != Burst:
		return fmt.Errorf("cell %s: unknown kind %q", c, c.Kind)
	case c.Lanes < 1 || c.Jobs < 1 || c.Runs < 1:
		return fmt.Errorf("cell %s: lanes, jobs and runs must be at least 1 (%d, %d, %d)", c, c.Lanes, c.Jobs, c.Runs)
	case !(c.Sigma >= 0):
		return fmt.Errorf("cell %s: sigma must be at least 0", c)
	case c.IDs != "" && c.IDs != SequentialIDs && c.IDs != RandomIDs:
		return fmt.Errorf("cell %s: unknown id scheme %q", c, c.IDs)
	case c.Kind == Poisson && !(c.Load > 0):
		return fmt.Errorf("cell %s: load must be above 0", c)
	case c.Kind == Poisson && (c.Warmup < 0 || c.Warmup >= c.Jobs):
		return fmt.Errorf("cell %s: warm-up of %d jobs out of %d", c, c.Warmup, c.Jobs)
	}
	return nil
}

// workload draws run r's jobs.
func (c Cell) workload(seed uint64, r int) Workload {
	rng := rand.New(rand.NewPCG(seed, uint64(r)))
	name := fmt.Sprintf("s%d-r%d", seed, r)
	var w Workload
	if c.Kind == Burst {
		w = BurstWorkload(rng, name, c.Jobs, c.Sigma)
	} else {
		w = PoissonWorkload(rng, name, c.Jobs, c.Load*float64(c.Lanes), c.Sigma)
	}
	w.IDs = c.IDs
	return w
}

// pool gathers one strategy's runs of a cell.
type pool struct {
	warmup           int
	waits            []float64
	sum              float64
	backlogged, busy float64
	slots            int
	makespans        float64
	runs             int
	runP99           []float64
}

func newPool(c Cell) *pool {
	p := &pool{waits: make([]float64, 0, c.Runs*(c.Jobs-c.Warmup))}
	if c.Kind == Poisson {
		p.warmup = c.Warmup
	}
	return p
}

func (p *pool) add(w Workload, r Result) {
	first := len(p.waits)
	for i := p.warmup; i < w.Len(); i++ {
		wait := r.Wait(w, i)
		p.waits = append(p.waits, wait)
		p.sum += wait
	}
	// Selecting reorders only this run's waits, which the pooled figures do not mind.
	p.runP99 = append(p.runP99, quantile(p.waits[first:], 0.99))
	p.backlogged += r.Backlogged
	p.busy += r.Busy
	p.slots = r.Slots
	p.makespans += r.Makespan
	p.runs++
}

func (p *pool) stats() Stats {
	s := Stats{
		Jobs:        len(p.waits),
		P99Wait:     quantile(p.waits, 0.99),
		P50Wait:     quantile(p.waits, 0.5),
		Backlogged:  p.backlogged,
		Makespan:    p.makespans / float64(max(1, p.runs)),
		RunP99Waits: p.runP99,
	}
	if len(p.waits) > 0 {
		s.MeanWait = p.sum / float64(len(p.waits))
	}
	if p.backlogged > 0 {
		s.Utilization = p.busy / (p.backlogged * float64(p.slots))
	}
	return s
}

// quantile is the nearest-rank q-quantile of values: the smallest value with at least a share q of
// the values at or below it. It reorders values.
func quantile(values []float64, q float64) float64 {
	if len(values) == 0 {
		return 0
	}
	k := int(math.Ceil(q*float64(len(values)))) - 1
	return nth(values, min(max(k, 0), len(values)-1))
}

// nth returns the value that would be at index k if a were sorted, partly reordering a (quickselect
// with a median-of-three pivot), in time linear in len(a) on average.
func nth(a []float64, k int) float64 {
	lo, hi := 0, len(a)-1
	for lo < hi {
		mid := lo + (hi-lo)/2
		if a[mid] < a[lo] {
			a[mid], a[lo] = a[lo], a[mid]
		}
		if a[hi] < a[lo] {
			a[hi], a[lo] = a[lo], a[hi]
		}
		if a[hi] < a[mid] {
			a[hi], a[mid] = a[mid], a[hi]
		}
		pivot := a[mid]
		i, j := lo, hi
		for i <= j {
			for a[i] < pivot {
				i++
			}
			for a[j] > pivot {
				j--
			}
			if i <= j {
				a[i], a[j] = a[j], a[i]
				i++
				j--
			}
		}
		// Now a[lo..j] <= pivot <= a[i..hi], and anything between equals the pivot.
		switch {
		case k <= j:
			hi = j
		case k >= i:
			lo = i
		default:
			return a[k]
		}
	}
	return a[k]
}
