package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/sfnlimit/sfnlimit/internal/lambda/lane"
	"github.com/sfnlimit/sfnlimit/internal/tools/localbench"
)

const localUsage = `
--local runs a workload on the local stack instead (moto and the limiter's Go handlers, as make demo
does): Poisson arrivals and lognormal durations drawn by the simulator, in seconds, each job sent to
the general queue at its time with input {"seconds": duration}. For each strategy it starts a stack
with LaneStrategy set to it and the type's limit --lanes, measures every job's wait (its execution's
start - its submission) and lane from Step Functions' records, and compares the waits with the
simulator's prediction for the same jobs, the stack's measured latencies included. It exits 1 if a
figure is further from its prediction than --tolerance noise, a job ran in another lane than the
simulator's where that choice does not depend on timing (random), the latencies do not fit the
model (see internal/tools/localbench), or the limit was exceeded. Defaults with --local: each strategy
of the router (first-free, random; the retired least-loaded runs as first-free) that template.yaml
allows, --lanes 5, --loads 0.8, --sigmas 1, --jobs 72; about 90 s per strategy. --seed picks the
jobs (the same for every strategy).
  go run ./cmd/bench --local
  go run ./cmd/bench --local --strategies first-free,random --lanes 5 --jobs 72
`

// localOnly are the flags that only --local uses.
var localOnly = []string{"mean-seconds", "trials", "timeout", "tolerance", "max-latency", "log"}

// simOnly are the flags --local refuses: they shape the simulator's grid, which --local does not run.
var simOnly = []string{"headline", "workloads", "runs", "bursts", "burst", "warmup", "ids", "workers", "bind-latency", "group-hold"}

type localFlagValues struct {
	meanSeconds *float64
	trials      *int
	timeout     *time.Duration
	tolerance   *float64
	maxLatency  *float64
	log         *string
}

func localFlags(fs *flag.FlagSet) localFlagValues {
	return localFlagValues{
		meanSeconds: fs.Float64("mean-seconds", localbench.DefaultMeanSeconds, "with --local: the durations' mean in seconds (they are rounded to whole seconds)"),
		trials:      fs.Int("trials", localbench.DefaultTrials, "with --local: Monte Carlo trials of the prediction"),
		timeout:     fs.Duration("timeout", 10*time.Minute, "with --local: the longest one strategy's run may take"),
		tolerance:   fs.Float64("tolerance", localbench.DefaultTolerance, "with --local: how many noise standard deviations a figure may be from its prediction"),
		maxLatency:  fs.Float64("max-latency", 0, "with --local: the most the stack's median entry latency and median handover may be, in seconds, for the simulator to be its model (0: the mean duration)"),
		log:         fs.String("log", "", "with --local: write the stack's and handlers' logs (JSON lines) to this file"),
	}
}

// localOptions are the runs of --local: one per strategy, lane count, load and sigma.
type localOptions struct {
	configs []localbench.Config
	timeout time.Duration
	log     string
}

func (v localFlagValues) resolve(o options, set map[string]bool) (*localOptions, error) {
	for _, name := range simOnly {
		if set[name] {
			return nil, fmt.Errorf("--%s has no effect with --local", name)
		}
	}
	available, err := localbench.Strategies("")
	if err != nil {
		return nil, err
	}
	strategies := available
	if set["strategies"] {
		strategies = o.strategies
		for _, s := range strategies {
			if _, err := lane.CheckChoosable(s); errors.Is(err, lane.ErrRetired) {
				return nil, fmt.Errorf("--strategies: %w", err)
			}
			if !slices.Contains(available, s) {
				return nil, fmt.Errorf("--strategies: %q is not a router strategy of template.yaml that the simulator knows (%s)", s, strings.Join(available, ", "))
			}
		}
	}
	lanes, loads, sigmas := o.lanes, o.loads, o.sigmas
	if !set["lanes"] {
		lanes = []int{localbench.DefaultLanes}
	}
	if !set["loads"] {
		loads = []float64{localbench.DefaultLoad}
	}
	if !set["sigmas"] {
		sigmas = []float64{localbench.DefaultSigma}
	}
	if *v.timeout <= 0 {
		return nil, errors.New("--timeout must be above 0")
	}
	lo := &localOptions{timeout: *v.timeout, log: *v.log}
	for _, s := range strategies {
		for _, n := range lanes {
			for _, load := range loads {
				for _, sigma := range sigmas {
					c := localbench.Config{
						Strategy: s, Lanes: n, Jobs: o.jobs, Load: load, Sigma: sigma, MeanSeconds: *v.meanSeconds,
						Seed: o.seed, Trials: *v.trials, Tolerance: *v.tolerance, MaxLatency: *v.maxLatency,
					}.WithDefaults()
					if sigma == 0 {
						c.Sigma = 0 // WithDefaults takes a zero for unset; here it was asked for
					}
					if err := c.Validate(); err != nil {
						return nil, fmt.Errorf("--local: %w", err)
					}
					lo.configs = append(lo.configs, c)
				}
			}
		}
	}
	return lo, nil
}

func runLocal(ctx context.Context, o options, stdout, stderr io.Writer) int {
	lo := o.local
	log := slog.New(slog.DiscardHandler)
	if lo.log != "" {
		f, err := os.Create(lo.log)
		if err != nil {
			fmt.Fprintln(stderr, "bench:", err)
			return exitError
		}
		defer f.Close()
		log = slog.New(slog.NewJSONHandler(f, nil))
	}
	var results []localbench.Result
	began := time.Now()
	for i, c := range lo.configs {
		fmt.Fprintf(stderr, "bench --local: run %d of %d: %s\n", i+1, len(lo.configs), c)
		m, err := localbench.Measure(ctx, c, localbench.RunOptions{Progress: stderr, Log: log, Timeout: lo.timeout})
		if err != nil {
			fmt.Fprintf(stderr, "bench --local: %s: %v\n", c.Strategy, err)
			return exitError
		}
		cmp, err := localbench.Compare(ctx, m)
		if err != nil {
			fmt.Fprintf(stderr, "bench --local: %s: %v\n", c.Strategy, err)
			return exitError
		}
		results = append(results, localbench.Result{Measurement: m, Comparison: cmp})
	}
	var err error
	if o.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(results)
	} else {
		err = localbench.WriteText(stdout, results)
	}
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return exitError
	}
	fmt.Fprintf(stderr, "bench --local: %d runs in %.0fs\n", len(results), time.Since(began).Seconds())
	if i := slices.IndexFunc(results, func(r localbench.Result) bool { return !r.Comparison.Agree || r.Comparison.Peak > r.Comparison.Limit }); i >= 0 {
		fmt.Fprintf(stderr, "bench --local: %s did not agree with the simulator (or exceeded its limit)\n", results[i].Comparison.Config.Strategy)
		return exitError
	}
	return exitOK
}
