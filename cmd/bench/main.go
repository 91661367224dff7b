// Command bench compares lane strategies with an ideal N-slot semaphore in virtual time
// (internal/tools/sim) and prints the tables of issue 5: `make bench`, or
// `go run ./cmd/bench --help`.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sfnlimit/sfnlimit/internal/tools/sim"
)

// Exit codes.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// options are the command's flags.
type options struct {
	loads, sigmas []float64
	lanes         []int
	strategies    []string
	workloads     []string
	ids           sim.IDScheme
	jobs          int
	runs          int
	burstFactor   int
	bursts        int
	warmup        float64
	seed          uint64
	workers       int
	// bindLatencies are first-free's bind latencies to sweep (0 is the default first-free column),
	// and groupHold each bind's hold of its waiting group as a share of its latency.
	bindLatencies []float64
	groupHold     float64
	json          bool
	headline      bool
	// local runs the workload on the local stack instead (localbench); set, the flags it does not
	// use are refused.
	local *localOptions
	// keys prints issue 13's per-key limit figures instead (keys.go).
	keys *keysOptions
	// priority and rate print issue 14's flow control figures instead (priority.go, rate.go).
	priority *priorityOptions
	rate     *rateOptions
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	opts, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return exitUsage
	}
	if opts.local != nil {
		return runLocal(ctx, opts, stdout, stderr)
	}
	if opts.keys != nil {
		return runKeys(ctx, opts, stdout, stderr)
	}
	if opts.priority != nil {
		return runPriority(ctx, opts, stdout, stderr)
	}
	if opts.rate != nil {
		return runRate(ctx, opts, stdout, stderr)
	}
	specs, err := sim.SpecsNamed(opts.strategies)
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return exitUsage
	}
	cells := opts.cells()
	began := time.Now()
	results, err := sim.RunGrid(ctx, cells, opts.seed, specs, opts.workers)
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return exitError
	}
	var latency []sim.CellResult
	if ls := opts.latencySpecs(); len(ls) > 0 {
		var poisson []sim.Cell
		for _, c := range cells {
			if c.Kind == sim.Poisson {
				poisson = append(poisson, c)
			}
		}
		if latency, err = sim.RunGrid(ctx, poisson, opts.seed, ls, opts.workers); err != nil {
			fmt.Fprintln(stderr, "bench:", err)
			return exitError
		}
	}
	elapsed := time.Since(began)
	if opts.json {
		err = writeJSON(stdout, opts, specs, results, latency)
	} else {
		err = writeText(stdout, opts, specs, results, latency)
	}
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return exitError
	}
	fmt.Fprintf(stderr, "bench: %d cells, %d strategies and the ideal, simulated in %.1fs on %d workers (GOMAXPROCS %d)\n",
		len(cells), len(specs), elapsed.Seconds(), opts.workers, runtime.GOMAXPROCS(0))
	return exitOK
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		opts = options{}
		all  = sim.Specs()
		def  []string
	)
	for _, s := range all {
		if !s.Extra {
			def = append(def, s.Name)
		}
	}
	loads := fs.String("loads", "0.5,0.8,0.9", "Poisson loads (arrival rate x mean duration / lanes), comma-separated")
	sigmas := fs.String("sigmas", "0.5,1,1.5", "sigmas of the lognormal durations (mean 1), comma-separated")
	lanes := fs.String("lanes", "5,10,50,500", "lane counts N (the type's limit), comma-separated")
	strategies := fs.String("strategies", strings.Join(def, ","), "strategies to compare, comma-separated")
	workloads := fs.String("workloads", "poisson,burst", "workload kinds: poisson, burst or both")
	ids := fs.String("ids", string(sim.SequentialIDs), "job ids: sequential (\"s1-r0-42\", like order numbers) or random (32 hex digits, like UUIDs)")
	fs.IntVar(&opts.jobs, "jobs", 0, "Poisson jobs per run (0: max(400000, 1000 x lanes))")
	fs.IntVar(&opts.runs, "runs", 0, "Poisson runs (seeds) per cell, pooled (0: 8, or 2 for 500 lanes or more)")
	fs.IntVar(&opts.burstFactor, "burst", 10, "burst size K as a multiple of the lanes")
	fs.IntVar(&opts.bursts, "bursts", 0, "bursts per cell, pooled (0: enough for 200,000 jobs, at least 20)")
	fs.Float64Var(&opts.warmup, "warmup", 0.1, "share of each Poisson run's first jobs left out of the figures")
	fs.Uint64Var(&opts.seed, "seed", 1, "random seed; the same seed gives the same figures")
	fs.IntVar(&opts.workers, "workers", runtime.GOMAXPROCS(0), "cells simulated at once")
	fs.BoolVar(&opts.json, "json", false, "print JSON instead of tables")
	bindLatencies := fs.String("bind-latency", "0", "first-free bind latencies d to sweep, in units of the mean duration, comma-separated: each bind holds its lane d before its job starts; "+
		"the figures for d above 0 go in a table of their own, against the ideal and against an ideal with the same latency (Poisson cells only)")
	fs.Float64Var(&opts.groupHold, "group-hold", 1, "with --bind-latency: how long each bind keeps its waiting group from serving its next message, as a share of d (1: the whole bind)")
	fs.BoolVar(&opts.headline, "headline", false, "simulate and print only the headline cells: Poisson, sigma 1, loads 0.8 and 0.9 (overrides --loads, --sigmas, --workloads)")
	local := fs.Bool("local", false, "run the workload on the local stack (moto) in seconds of wall time and compare the measured waits with the simulator's prediction for the same jobs; minutes per strategy (see below)")
	lf := localFlags(fs)
	keys := fs.Bool("keys", false, "print issue 13's per-key limit figures instead: a noisy key beside quiet keys, keyed scheduler against FIFO order, and work conservation (see below)")
	priority := fs.Bool("priority", false, "print issue 14's priority figures instead: low jobs then high jobs, the scheduler against a strict-priority semaphore and FIFO, and starvation (see below)")
	aging := fs.Float64("aging", sim.DefaultAging, "with --priority: the head wait in seconds that raises a waiting group one priority level")
	rate := fs.Bool("rate", false, "print issue 14's rate limit figures instead: a backlog under a token bucket, the rate or the limit binding (see below)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `Usage: go run ./cmd/bench [flags]

Simulates a type's lanes in virtual time (internal/tools/sim) under each lane strategy and an ideal N-slot
FIFO semaphore on the same arrivals and durations, and prints wait mean, p50 and p99, utilization
while backlogged and, for bursts, the makespan, each also as a multiple of the ideal's.

Strategies:
`)
		for _, s := range all {
			real := ""
			if s.Real {
				real = " [the router's own code]"
			}
			fmt.Fprintf(fs.Output(), "  %-18s %s%s\n", s.Name, s.About, real)
		}
		fmt.Fprintf(fs.Output(), "%s%s%s%s\nFlags:\n", localUsage, keysUsage, priorityUsage, rateUsage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return opts, err
	}
	if fs.NArg() > 0 {
		return opts, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var modes []string
	for _, m := range []struct {
		name string
		on   bool
	}{{"local", *local}, {"keys", *keys}, {"priority", *priority}, {"rate", *rate}} {
		if m.on {
			modes = append(modes, "--"+m.name)
		}
	}
	if len(modes) > 1 {
		return opts, fmt.Errorf("%s do not go together", strings.Join(modes, " and "))
	}
	if set["aging"] && !*priority {
		return opts, errors.New("--aging needs --priority")
	}
	if !*local {
		for _, name := range localOnly {
			if set[name] {
				return opts, fmt.Errorf("--%s needs --local", name)
			}
		}
	}
	var err error
	if opts.loads, err = floats("loads", *loads); err != nil {
		return opts, err
	}
	if opts.sigmas, err = floats("sigmas", *sigmas); err != nil {
		return opts, err
	}
	if opts.lanes, err = ints("lanes", *lanes); err != nil {
		return opts, err
	}
	if opts.bindLatencies, err = floats("bind-latency", *bindLatencies); err != nil {
		return opts, err
	}
	for _, d := range opts.bindLatencies {
		if !(d >= 0) || math.IsInf(d, 0) {
			return opts, fmt.Errorf("--bind-latency: %g is not a finite latency of at least 0", d)
		}
	}
	if !(opts.groupHold >= 0) || math.IsInf(opts.groupHold, 0) {
		return opts, fmt.Errorf("--group-hold: %g is not a finite share of at least 0", opts.groupHold)
	}
	opts.strategies = split(*strategies)
	opts.workloads = split(*workloads)
	if opts.headline {
		opts.loads = slices.Clone(headlineLoads)
		opts.sigmas = []float64{headlineSigma}
		opts.workloads = []string{string(sim.Poisson)}
	}
	opts.ids = sim.IDScheme(*ids)
	if opts.ids != sim.SequentialIDs && opts.ids != sim.RandomIDs {
		return opts, fmt.Errorf("--ids: unknown scheme %q (known: sequential, random)", *ids)
	}
	for _, w := range opts.workloads {
		if w != string(sim.Poisson) && w != string(sim.Burst) {
			return opts, fmt.Errorf("--workloads: unknown kind %q (known: poisson, burst)", w)
		}
	}
	for _, l := range opts.loads {
		if !(l > 0) {
			return opts, fmt.Errorf("--loads: %g is not above 0", l)
		}
	}
	for _, s := range opts.sigmas {
		if !(s >= 0) {
			return opts, fmt.Errorf("--sigmas: %g is below 0", s)
		}
	}
	for _, n := range opts.lanes {
		if n < 1 {
			return opts, fmt.Errorf("--lanes: %d is below 1", n)
		}
	}
	switch {
	case len(opts.strategies) == 0:
		return opts, errors.New("--strategies: name at least one")
	case len(opts.workloads) == 0:
		return opts, errors.New("--workloads: name at least one")
	case opts.jobs < 0 || opts.runs < 0 || opts.bursts < 0:
		return opts, errors.New("--jobs, --runs and --bursts must be at least 0")
	case opts.burstFactor < 1:
		return opts, errors.New("--burst must be at least 1")
	case !(opts.warmup >= 0 && opts.warmup < 1):
		return opts, fmt.Errorf("--warmup: %g is not in [0, 1)", opts.warmup)
	case opts.workers < 1:
		return opts, errors.New("--workers must be at least 1")
	}
	if *local {
		if opts.local, err = lf.resolve(opts, set); err != nil {
			return opts, err
		}
	}
	if *keys {
		if opts.keys, err = resolveKeys(opts, set); err != nil {
			return opts, err
		}
	}
	if *priority {
		if opts.priority, err = resolvePriority(opts, set, *aging); err != nil {
			return opts, err
		}
	}
	if *rate {
		if opts.rate, err = resolveRate(opts, set); err != nil {
			return opts, err
		}
	}
	return opts, nil
}

// latencySpecs are, for each bind latency d above 0, first-free with that latency and the ideal with
// the same latency.
func (o options) latencySpecs() []sim.Spec {
	var out []sim.Spec
	for _, d := range o.bindLatencies {
		if d > 0 {
			out = append(out, sim.FirstFreeSpec(sim.FirstFree{BindLatency: d, GroupHold: o.groupHold * d}), sim.IdealSpec(d))
		}
	}
	return out
}

// cells lists the grid's cells: Poisson by load, sigma and lanes, then bursts by sigma and lanes.
func (o options) cells() []sim.Cell {
	var cells []sim.Cell
	for _, kind := range o.workloads {
		switch sim.Kind(kind) {
		case sim.Poisson:
			for _, load := range o.loads {
				for _, sigma := range o.sigmas {
					for _, n := range o.lanes {
						jobs, runs := o.poissonSize(n)
						cells = append(cells, sim.Cell{
							Kind: sim.Poisson, Load: load, Sigma: sigma, Lanes: n, IDs: o.ids,
							Jobs: jobs, Runs: runs, Warmup: int(o.warmup * float64(jobs)),
						})
					}
				}
			}
		case sim.Burst:
			for _, sigma := range o.sigmas {
				for _, n := range o.lanes {
					k := o.burstFactor * n
					runs := o.bursts
					if runs == 0 {
						runs = max(20, 200000/k)
					}
					cells = append(cells, sim.Cell{Kind: sim.Burst, Sigma: sigma, Lanes: n, IDs: o.ids, Jobs: k, Runs: runs})
				}
			}
		}
	}
	return cells
}

// poissonSize is the jobs per run and the runs of a Poisson cell with n lanes. Random lanes make each
// lane a single-server queue whose p99 settles only after a thousand or so of its own jobs, so the
// jobs grow with the lanes.
func (o options) poissonSize(n int) (jobs, runs int) {
	jobs, runs = o.jobs, o.runs
	if jobs == 0 {
		jobs = max(400000, 1000*n)
	}
	if runs == 0 {
		runs = 8
		if n >= 500 {
			runs = 2
		}
	}
	return jobs, runs
}

func split(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func floats(name, s string) ([]float64, error) {
	var out []float64
	for _, f := range split(s) {
		v, err := strconv.ParseFloat(f, 64)
		if err != nil {
			return nil, fmt.Errorf("--%s: %q is not a number", name, f)
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--%s: give at least one value", name)
	}
	return out, nil
}

func ints(name, s string) ([]int, error) {
	var out []int
	for _, f := range split(s) {
		v, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("--%s: %q is not a whole number", name, f)
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--%s: give at least one value", name)
	}
	return out, nil
}
