// Package localbench checks the lane simulator (internal/tools/sim) against the local stack: it
// draws a workload with the simulator, runs it on the local stack in seconds of wall time, measures
// each job's wait from Step Functions' own records, and compares the waits with what the simulator
// predicts for the same jobs under the same lane strategy, with the stack's own latencies modelled
// and a noise estimate to judge the difference by.
//
// The model. The simulator holds a lane from a job's start for exactly its duration, and starts a job
// the instant it arrives at an empty lane. The stack adds latency at both ends: a job submitted to an
// empty lane starts after an entry latency L (general queue, router, lanes queue, starter,
// StartExecution), and a lane's next job starts a handover h after the previous job's work ends
// (the Wait state's own overrun, the Release step, the releaser, the starter's next poll, the lease
// and StartExecution). Both are measured on the run itself from jobs whose situation is unambiguous:
// L from jobs whose lane was empty when they were submitted, h from jobs that were queued behind
// another when it ended. The prediction runs the same workload through sim.RunLanes with arrivals
// submit+L and durations duration+h, and the measured wait of a job is compared with its predicted
// start minus its submit time.
//
// A strategy that binds a job to a lane only when one is free (sim.Spec.BindOnFree, first-free) is
// predicted by the simulator's model of its waiting groups with no bind latency of its own: the
// stack's latencies are the measured ones, and without more the model waits as the ideal semaphore.
//
// The noise. The prediction is repeated over Monte Carlo trials that draw each job's L and h from the
// measured samples (after resampling the samples themselves, so the trials also carry the
// uncertainty of their means) and give a randomised strategy a fresh random source; the spread of a
// figure over the trials is the noise it is judged by. The spread between fresh workloads of the same
// size is reported beside it, for scale: it is what a figure moves by between seeds, and far wider.
//
// What it takes to agree: every figure (mean, p50, p90, p99 wait) within Tolerance noise standard
// deviations of its prediction; every job in the lane the simulator chose, when every trial chose
// the same lanes (random: a hash that ignores timing); and latencies that fit the model (no job
// started before its submission or before its lane's previous job could have ended, and medians at
// most MaxLatency). Without the last check, a stack that is not the simulator's model at all (one
// that ignored its lanes, say) would be absorbed into large, spread-out "latencies" and a noise to
// match. The limit (at most Lanes executions of the type at once) is measured and reported beside.
package localbench

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sfnlimit/sfnlimit/internal/lambda/lane"
	"github.com/sfnlimit/sfnlimit/internal/tools/cfntemplate"
	"github.com/sfnlimit/sfnlimit/internal/tools/emulator"
	"github.com/sfnlimit/sfnlimit/internal/tools/sim"
)

// Defaults of a Config.
const (
	DefaultLanes       = 5
	DefaultJobs        = 72
	DefaultLoad        = 0.8
	DefaultSigma       = 1.0
	DefaultMeanSeconds = 3.0
	DefaultTrials      = 400
	DefaultSeedRuns    = 200
	// DefaultTolerance is how many noise standard deviations a measured figure may be from its
	// prediction and still agree.
	DefaultTolerance = 3.0
)

// WarmupType is the type of the one job that goes through the stack before the measured ones, so
// first-use costs (connections, the emulator's first execution) are not counted as latency.
const WarmupType = "warmup"

// Config is one benchmark run: a workload of JobType jobs drawn by the simulator and the stack's
// lanes and lane strategy.
type Config struct {
	// Strategy is both the template's LaneStrategy value the stack runs with and the name of the
	// simulator's strategy (sim.Specs) that predicts it: one of lane.Strategies (the retired
	// least-loaded runs on the stack as first-free, so it cannot be compared).
	Strategy string
	// Lanes is the type's limit N.
	Lanes int
	// Jobs is how many jobs the workload has.
	Jobs int
	// Load is the arrival rate times the mean duration divided by the lanes (Poisson arrivals).
	Load float64
	// Sigma is the standard deviation of the durations' logarithm (lognormal durations).
	Sigma float64
	// MeanSeconds scales the simulator's time unit (a mean duration of 1) to seconds.
	MeanSeconds float64
	// Seed draws the workload: the same seed gives the same jobs, whatever the strategy.
	Seed uint64
	// Trials are the Monte Carlo trials of the prediction; SeedRuns the fresh workloads of the seed
	// spread.
	Trials, SeedRuns int
	// Tolerance is how many noise standard deviations a measured figure may be from its prediction.
	Tolerance float64
	// MaxLatency bounds the medians of the measured entry latency and handover (seconds); default
	// MeanSeconds. Beyond the mean duration the waits would be the stack's latencies more than the
	// lanes' queueing, and the comparison would no longer test the simulator. Medians, so that the
	// rare start that finds its lane's lease not yet deleted (and retries a second or two later)
	// does not count as a different machine.
	MaxLatency float64
}

// WithDefaults fills the zero fields with the defaults.
func (c Config) WithDefaults() Config {
	if c.Strategy == "" {
		c.Strategy = "random"
	}
	if c.Lanes == 0 {
		c.Lanes = DefaultLanes
	}
	if c.Jobs == 0 {
		c.Jobs = DefaultJobs
	}
	if c.Load == 0 {
		c.Load = DefaultLoad
	}
	if c.Sigma == 0 {
		c.Sigma = DefaultSigma
	}
	if c.MeanSeconds == 0 {
		c.MeanSeconds = DefaultMeanSeconds
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
	if c.Trials == 0 {
		c.Trials = DefaultTrials
	}
	if c.SeedRuns == 0 {
		c.SeedRuns = DefaultSeedRuns
	}
	if c.Tolerance == 0 {
		c.Tolerance = DefaultTolerance
	}
	if c.MaxLatency == 0 {
		c.MaxLatency = c.MeanSeconds
	}
	return c
}

// Validate checks a config with its defaults filled in.
func (c Config) Validate() error {
	switch {
	case c.Lanes < 1:
		return fmt.Errorf("lanes %d: need at least 1", c.Lanes)
	case c.Jobs < 2:
		return fmt.Errorf("jobs %d: need at least 2", c.Jobs)
	case !(c.Load > 0) || math.IsInf(c.Load, 0):
		return fmt.Errorf("load %g: must be above 0", c.Load)
	case !(c.Sigma >= 0) || math.IsInf(c.Sigma, 0):
		return fmt.Errorf("sigma %g: must be at least 0", c.Sigma)
	case !(c.MeanSeconds >= 1) || c.MeanSeconds > 3600:
		return fmt.Errorf("mean duration %g s: must be 1 to 3600 s (the sample workflow waits whole seconds)", c.MeanSeconds)
	case c.Trials < 10 || c.SeedRuns < 2:
		return fmt.Errorf("trials %d and seed runs %d: need at least 10 and 2", c.Trials, c.SeedRuns)
	case !(c.Tolerance > 0):
		return errors.New("tolerance must be above 0")
	case !(c.MaxLatency > 0):
		return errors.New("the latency bound must be above 0")
	}
	if s, err := lane.CheckChoosable(c.Strategy); err != nil || s != c.Strategy {
		if err == nil {
			err = fmt.Errorf("it is read as %s", s)
		}
		return fmt.Errorf("strategy %q is not one the stack runs as itself (%s): %w", c.Strategy, strings.Join(lane.Strategies, ", "), err)
	}
	if _, err := sim.SpecsNamed([]string{c.Strategy}); err != nil {
		return fmt.Errorf("the simulator cannot predict strategy %q: %w", c.Strategy, err)
	}
	return nil
}

// Workload draws the config's jobs, in seconds: Poisson arrivals (when each job is to be submitted),
// scaled so that the jobs' own load is exactly Load, and lognormal durations of mean MeanSeconds,
// rounded to whole seconds as the sample workflow's Wait state needs them. Job ids are the simulator's (sim.Workload.Job), so a hashed lane choice
// places a job on the stack as in the simulator.
func (c Config) Workload() sim.Workload {
	return c.workload(c.Seed)
}

// workload draws the jobs of seed: Workload for c.Seed, and the seed spread's fresh workloads.
func (c Config) workload(seed uint64) sim.Workload {
	rng := rand.New(rand.NewPCG(seed, 0x10ca1be2c4))
	unit := sim.PoissonWorkload(rng, fmt.Sprintf("lb%d", seed), c.Jobs, c.Load*float64(c.Lanes), c.Sigma)
	w := sim.Workload{Name: unit.Name, IDs: unit.IDs, Arrivals: make([]float64, c.Jobs), Durations: make([]float64, c.Jobs)}
	work := 0.0
	for i := range c.Jobs {
		w.Durations[i] = math.Round(unit.Durations[i] * c.MeanSeconds)
		work += w.Durations[i]
	}
	// Scale the arrivals so that the jobs' own load is c.Load: their work over the lanes' time from 0
	// to the last arrival. A draw of a few dozen jobs is otherwise far off (seed 1's 80 jobs at
	// nominal load 0.8 came to 1.1), and the run would measure a different load from the one named.
	scale := c.MeanSeconds
	if last := unit.Arrivals[c.Jobs-1]; work > 0 && last > 0 {
		scale = work / (float64(c.Lanes) * c.Load * last)
	}
	for i := range c.Jobs {
		w.Arrivals[i] = unit.Arrivals[i] * scale
	}
	return w
}

// WorkloadLoad is a workload's own load over lanes: its work over the lanes' time from 0 to its last
// arrival.
func WorkloadLoad(w sim.Workload, lanes int) float64 {
	work := 0.0
	for _, d := range w.Durations {
		work += d
	}
	return work / (float64(lanes) * w.Arrivals[w.Len()-1])
}

func (c Config) String() string {
	return fmt.Sprintf("%s, %d lanes, %d jobs, load %g, sigma %g, mean %gs, seed %d", c.Strategy, c.Lanes, c.Jobs, c.Load, c.Sigma, c.MeanSeconds, c.Seed)
}

// Strategies lists the lane strategies a local run can compare: the router's strategies
// (lane.Strategies, in its order: the default first) that the template's LaneStrategy parameter
// allows (what the stack runs) and the simulator knows (what predicts them). The retired
// least-loaded is left out even where the template still allows it: the stack runs it as first-free.
// root is the repository root ("" finds it from the working directory).
func Strategies(root string) ([]string, error) {
	if root == "" {
		var err error
		if root, err = emulator.RepoRoot(); err != nil {
			return nil, err
		}
	}
	tpl, err := cfntemplate.Load(filepath.Join(root, "template.yaml"))
	if err != nil {
		return nil, err
	}
	p, ok := tpl.Parameter("LaneStrategy")
	if !ok {
		return nil, errors.New("template.yaml has no LaneStrategy parameter")
	}
	allowed := p.AllowedValues
	if len(allowed) == 0 {
		allowed = []string{p.Default}
	}
	var out []string
	for _, name := range lane.Strategies {
		if !slices.Contains(allowed, name) {
			continue
		}
		if _, err := sim.SpecsNamed([]string{name}); err == nil {
			out = append(out, name)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no LaneStrategy value of template.yaml (%v) is a router strategy (%v) the simulator knows", allowed, lane.Strategies)
	}
	return out, nil
}
