package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sfnlimit/sfnlimit/internal/tools/sim"
)

const priorityUsage = `
--priority prints issue 14's figures for priorities instead, in seconds: a burst of low-priority jobs
followed by high-priority jobs under the scheduler (priority with aging), a semaphore that serves
higher priority first (the ideal) and today's FIFO; what a shorter aging costs the high jobs; and
sustained high-priority load beside a few low jobs (starvation, against the documented bound). It uses
--seed, --runs (0: 200 runs of the burst, 50 of the starvation scenario), --aging and --json; the
scenarios are fixed (limit 10, durations of mean 2 s). It takes a second or two.
  go run ./cmd/bench --priority
  go run ./cmd/bench --priority --aging 30
`

// priorityFlags are the flags --priority uses; it refuses the others.
var priorityFlags = []string{"priority", "seed", "runs", "json", "aging"}

// defaultStarvationRuns is how many runs the starvation scenario pools by default: 50 runs of 20 low
// jobs are 1,000 low waits beside some 360,000 high ones.
const defaultStarvationRuns = 50

// agingSweep are the agings of the burst's sweep, in seconds: from the default down to where the low
// backlog reaches the top level while the high jobs still wait.
var agingSweep = []float64{60, 10, 2, 1, 0.5}

// priorityOptions are the runs of --priority.
type priorityOptions struct {
	burstRuns, starvationRuns int
	aging                     float64
}

func resolvePriority(o options, set map[string]bool, aging float64) (*priorityOptions, error) {
	for name := range set {
		if !slices.Contains(priorityFlags, name) {
			return nil, fmt.Errorf("--%s has no effect with --priority", name)
		}
	}
	if !(aging > 0) || math.IsInf(aging, 0) {
		return nil, fmt.Errorf("--aging: %g is not a finite number of seconds above 0", aging)
	}
	po := &priorityOptions{burstRuns: o.runs, starvationRuns: o.runs, aging: aging}
	if o.runs == 0 {
		po.burstRuns, po.starvationRuns = sim.DefaultPriorityBurst().Runs, defaultStarvationRuns
	}
	return po, nil
}

// priorityReport is everything --priority prints.
type priorityReport struct {
	Seed       uint64                    `json:"seed"`
	Burst      sim.PriorityBurstResult   `json:"burst"`
	AgingSweep []sim.PriorityBurstResult `json:"agingSweep"`
	Starvation sim.StarvationResult      `json:"starvation"`
	Violation  string                    `json:"violation,omitempty"`
}

func runPriority(ctx context.Context, o options, stdout, stderr io.Writer) int {
	began := time.Now()
	rep, err := measurePriority(ctx, o.seed, *o.priority)
	if err != nil {
		fmt.Fprintln(stderr, "bench --priority:", err)
		return exitError
	}
	if o.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(rep)
	} else {
		err = writePriorityText(stdout, rep)
	}
	if err != nil {
		fmt.Fprintln(stderr, "bench --priority:", err)
		return exitError
	}
	fmt.Fprintf(stderr, "bench --priority: simulated in %.1fs\n", time.Since(began).Seconds())
	if rep.Violation != "" {
		fmt.Fprintln(stderr, "bench --priority:", rep.Violation)
		return exitError
	}
	return exitOK
}

func measurePriority(ctx context.Context, seed uint64, po priorityOptions) (priorityReport, error) {
	rep := priorityReport{Seed: seed}
	burst := sim.DefaultPriorityBurst()
	burst.Runs, burst.Aging = po.burstRuns, po.aging
	var err error
	if rep.Burst, err = sim.RunPriorityBurst(ctx, burst, seed, sim.PriorityOrders()); err != nil {
		return rep, err
	}
	for _, a := range agingSweep {
		c := burst
		c.Aging = a
		r, err := sim.RunPriorityBurst(ctx, c, seed, []sim.PriorityOrder{sim.PriorityAgingOrder})
		if err != nil {
			return rep, err
		}
		rep.AgingSweep = append(rep.AgingSweep, r)
	}
	starve := sim.DefaultStarvation()
	starve.Runs, starve.Aging = po.starvationRuns, po.aging
	if rep.Starvation, err = sim.RunStarvation(ctx, starve, seed, sim.PriorityOrders()); err != nil {
		return rep, err
	}
	// The documented bound, checked on every run: no job submitted after a low job passes it once it
	// is at the top level as its group's head.
	for _, f := range rep.Starvation.Orders {
		if f.Order == sim.PriorityAgingOrder && f.Passed > 0 {
			rep.Violation = fmt.Sprintf("starvation scenario: %d times a job submitted later was bound before a low job ranked at the top", f.Passed)
		}
	}
	return rep, nil
}

var priorityOrderAbout = map[sim.PriorityOrder]string{
	sim.PriorityAgingOrder: "issue 14's scheduler: a freed lane goes to the waiting group (one per priority) ranked\n" +
		"                   highest by min(9, priority + floor(head wait / aging)), then to the oldest head",
	sim.StrictPriorityOrder: "the ideal: a semaphore that serves the highest priority first, in submission order within one, no aging",
	sim.SubmissionOrder:     "today's behaviour: one FIFO of all the type's jobs, no priorities",
}

func writePriorityText(w io.Writer, rep priorityReport) error {
	var b strings.Builder
	bc := rep.Burst.Scenario
	sc := rep.Starvation.Scenario
	b.WriteString("sfnlimit priorities (issue 14) in virtual time (internal/tools/sim)\n\n")
	fmt.Fprintf(&b, "Type limit %d lanes. Durations lognormal with mean %g s, sigma %g; times in seconds. Aging %g s per level.\n",
		bc.Limit, bc.MeanDuration, bc.Sigma, bc.Aging)
	fmt.Fprintf(&b, "Seeds: --seed %d; %d runs of the burst, %d of the starvation scenario (run r draws its jobs from PCG(seed, r));\n"+
		"the figures pool the runs. Priorities: low 1, normal 5, high 9.\n", rep.Seed, bc.Runs, sc.Runs)
	b.WriteString("Orders:\n")
	for _, o := range sim.PriorityOrders() {
		fmt.Fprintf(&b, "  %-16s %s\n", o, priorityOrderAbout[o])
	}

	fmt.Fprintf(&b, "\n== Burst: %d low jobs (priority 1) submitted at 0, then %d high jobs (priority 9) at random times in (0, %g] ==\n",
		bc.LowJobs, bc.HighJobs, bc.HighWindow)
	fmt.Fprintf(&b, "The lanes run the low backlog in about %.0f s; the high jobs bring %.0f lane-seconds over %g s, so they wait for one\n"+
		"another even when served first.\n", float64(bc.LowJobs)*bc.MeanDuration/float64(bc.Limit), float64(bc.HighJobs)*bc.MeanDuration, bc.HighWindow)
	strict, _ := rep.Burst.Order(sim.StrictPriorityOrder)
	tw := tabwriter.NewWriter(&b, 0, 0, 1, ' ', 0)
	row(tw, "order", "high p50", "high p99", "high max", "high p99 / strict's", "low p50", "low p99", "low max", "makespan")
	rule(tw, 9)
	for _, f := range rep.Burst.Orders {
		row(tw, string(f.Order), num(f.High.P50), num(f.High.P99), num(f.High.Max), ratio(f.High.P99, strict.High.P99),
			num(f.Low.P50), num(f.Low.P99), num(f.Low.Max), num(f.Makespan))
	}
	tw.Flush()
	sched, _ := rep.Burst.Order(sim.PriorityAgingOrder)
	fifo, _ := rep.Burst.Order(sim.SubmissionOrder)
	r99, _ := sim.Ratio(sched.High.P99, strict.High.P99)
	fmt.Fprintf(&b, "High jobs: %d waits per row. Target: the scheduler's high waits close to strict priority's (p99 within %gx): %s\n"+
		"(p50 %s, p99 %s). Today's FIFO: high p99 %s strict priority's. The model has no latencies: the scheduler and the\n"+
		"ideal differ only where aging lifts a low job to the high jobs' level, which takes %g s here (the sweep below).\n",
		sched.High.Jobs, targetPriorityRatio, verdict(r99 <= targetPriorityRatio), ratio(sched.High.P50, strict.High.P50),
		ratio(sched.High.P99, strict.High.P99), ratio(fifo.High.P99, strict.High.P99), sim.StarvationBound(sim.LowPriority, bc.Aging))

	b.WriteString("\n== Burst: what a shorter aging costs the high jobs (the scheduler; strict priority never ages) ==\n")
	b.WriteString("Every low job is submitted at 0 and reaches the top level at 8 x aging; from then on it is older than any high job\n" +
		"at the top, and goes first. An aging under the high jobs' own wait / 8 turns the burst back into FIFO.\n")
	tw = tabwriter.NewWriter(&b, 0, 0, 1, ' ', 0)
	row(tw, "aging", "low jobs at the top from", "high p50", "high p99", "high p99 / strict's", "low max")
	rule(tw, 6)
	for _, s := range rep.AgingSweep {
		f := s.Orders[0]
		row(tw, fmt.Sprintf("%g", s.Scenario.Aging), num(sim.StarvationBound(sim.LowPriority, s.Scenario.Aging)),
			num(f.High.P50), num(f.High.P99), ratio(f.High.P99, strict.High.P99), num(f.Low.Max))
	}
	tw.Flush()

	st := rep.Starvation
	fmt.Fprintf(&b, "\n== Starvation: high jobs (priority 9) at %gx the lanes' capacity from 0 to %g s, beside %d low jobs (priority %d)\n"+
		"   at random times in [0, %g) ==\n", sc.HighLoad, sc.Horizon, sc.LowJobs, sc.LowPriority, sc.LowWindow)
	fmt.Fprintf(&b, "The documented bound: a job of priority p that heads its group is ranked at the top level (9) once it has waited\n"+
		"(9 - p) x aging since its submission, %g s here; at the top the oldest head goes first, so from then on no job submitted\n"+
		"after it takes a lane before it, however many high jobs arrive. Its wait past that point is the lanes serving the\n"+
		"jobs submitted before it. \"At the top\" below is that point for each low job (under strict and FIFO too, for\n"+
		"comparison); \"passed\" counts the jobs submitted later and bound between it and the low job's bind.\n", st.Bound)
	tw = tabwriter.NewWriter(&b, 0, 0, 1, ' ', 0)
	row(tw, "order", "low p50", "low max", "lows started before the high load ended", "low max wait past the top", "passed at the top",
		"high p50", "high p99")
	rule(tw, 8)
	for _, f := range st.Orders {
		row(tw, string(f.Order), num(f.Low.P50), num(f.Low.Max), fmt.Sprintf("%d of %d", f.LowStarted, f.Low.Jobs),
			num(f.PastTop), fmt.Sprint(f.Passed), num(f.High.P50), num(f.High.P99))
	}
	tw.Flush()
	var sp, ss sim.StarvationFigures
	for _, f := range st.Orders {
		switch f.Order {
		case sim.PriorityAgingOrder:
			sp = f
		case sim.StrictPriorityOrder:
			ss = f
		}
	}
	fmt.Fprintf(&b, "Scheduler: every low job started while the high load lasted (%d of %d: %s), the longest wait %s s against the bound\n"+
		"of %g s (%s s past its top point at most), and no later job passed a low job at the top: %s. Strict priority starts\n"+
		"%d of them before the high load ends: with no end to it, never. The lows cost the high jobs %s at p99.\n",
		sp.LowStarted, sp.Low.Jobs, verdict(sp.LowStarted == sp.Low.Jobs), num(sp.Low.Max), st.Bound, num(sp.PastTop),
		verdict(sp.Passed == 0), ss.LowStarted, ratio(sp.High.P99, ss.High.P99))
	_, err := io.WriteString(w, b.String())
	return err
}

// targetPriorityRatio is how close the scheduler's high-priority p99 must be to the strict-priority
// semaphore's.
const targetPriorityRatio = 1.1
