package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sfnlimit/sfnlimit/internal/tools/sim"
)

const rateUsage = `
--rate prints issue 14's figures for rate limits instead, in seconds: a backlog of 500 jobs submitted
at once to a type of 10 lanes with a rate of 5 starts/s and a burst of 10 (a token bucket; a job takes
a lane and a token at once, and waits for a token holding no lane), with short jobs (the rate binds)
and long ones (the limit binds), beside the short jobs without a rate. It checks that no one-second window holds more than
R + B starts. It uses --seed, --runs (0: 50 per scenario) and --json. It takes well under a second.
  go run ./cmd/bench --rate
`

// rateFlags are the flags --rate uses; it refuses the others.
var rateFlags = []string{"rate", "seed", "runs", "json"}

// rateOptions are the runs of --rate.
type rateOptions struct {
	runs int
}

func resolveRate(o options, set map[string]bool) (*rateOptions, error) {
	for name := range set {
		if !slices.Contains(rateFlags, name) {
			return nil, fmt.Errorf("--%s has no effect with --rate", name)
		}
	}
	return &rateOptions{runs: o.runs}, nil
}

// rateReport is everything --rate prints.
type rateReport struct {
	Seed      uint64            `json:"seed"`
	Scenarios []sim.RateFigures `json:"scenarios"`
	Violation string            `json:"violation,omitempty"`
}

func runRate(ctx context.Context, o options, stdout, stderr io.Writer) int {
	began := time.Now()
	rep := rateReport{Seed: o.seed}
	for _, c := range sim.DefaultRateScenarios() {
		if o.rate.runs > 0 {
			c.Runs = o.rate.runs
		}
		f, err := sim.RunRateScenario(ctx, c, o.seed)
		if err != nil {
			fmt.Fprintln(stderr, "bench --rate:", err)
			return exitError
		}
		if bound, ok := c.WindowBound(); ok && float64(f.MaxWindowStarts) > bound {
			rep.Violation = fmt.Sprintf("scenario %q: %d starts in one second, over R + B = %g", c.Name, f.MaxWindowStarts, bound)
		}
		rep.Scenarios = append(rep.Scenarios, f)
	}
	var err error
	if o.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(rep)
	} else {
		err = writeRateText(stdout, rep)
	}
	if err != nil {
		fmt.Fprintln(stderr, "bench --rate:", err)
		return exitError
	}
	fmt.Fprintf(stderr, "bench --rate: simulated in %.1fs\n", time.Since(began).Seconds())
	if rep.Violation != "" {
		fmt.Fprintln(stderr, "bench --rate:", rep.Violation)
		return exitError
	}
	return exitOK
}

func writeRateText(w io.Writer, rep rateReport) error {
	var b strings.Builder
	first := rep.Scenarios[0].Scenario
	b.WriteString("sfnlimit rate limits (issue 14) in virtual time (internal/tools/sim)\n\n")
	fmt.Fprintf(&b, "Each scenario: %d jobs submitted at 0 to a type of %d lanes; durations lognormal, sigma %g; times in seconds.\n",
		first.Jobs, first.Limit, first.Sigma)
	fmt.Fprintf(&b, "Seeds: --seed %d; %d runs per scenario (run r draws its durations from PCG(seed, r)); the figures pool the runs.\n", rep.Seed, first.Runs)
	b.WriteString("The rate is a token bucket of capacity B refilled at R per second, full at the start. A job takes a free lane\n" +
		"and a token at once and starts; with no token left the jobs wait in their groups holding no lane, and the next\n" +
		"token goes with a free lane to the job ranked first when it is due. Starts/s: the starts after the first instant\n" +
		"(which spends the burst) over the time to the last start, the mean over runs (min-max). Max in 1 s: the most starts\n" +
		"in any window [s, s+1) from a start s, over all runs. Lanes running: the share of lane-time, while jobs waited,\n" +
		"that ran jobs; the rest was free.\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 1, ' ', 0)
	row(tw, "scenario", "R / B", "mean duration", "lanes / mean duration", "starts/s (min-max)", "max in 1 s", "R + B",
		"lanes running", "makespan", "wait p99")
	rule(tw, 10)
	for _, f := range rep.Scenarios {
		c := f.Scenario
		rb, bound := "none", "-"
		if wb, ok := c.WindowBound(); ok {
			rb, bound = fmt.Sprintf("%g / %g", c.Rate, c.Burst), fmt.Sprintf("%g", wb)
		}
		row(tw, c.Name, rb, fmt.Sprintf("%g", c.MeanDuration), fmt.Sprintf("%.3g", float64(c.Limit)/c.MeanDuration),
			fmt.Sprintf("%.3g (%.3g-%.3g)", f.Sustained, f.SustainedMin, f.SustainedMax), fmt.Sprint(f.MaxWindowStarts), bound,
			share(f.Utilization, 1), num(f.Makespan), num(f.Wait.P99))
	}
	tw.Flush()
	for _, f := range rep.Scenarios {
		c := f.Scenario
		wb, ok := c.WindowBound()
		if !ok {
			fmt.Fprintf(&b, "%s: %.3g starts/s, what the lanes sustain (%d / %g s); up to %d in one second.\n",
				c.Name, f.Sustained, c.Limit, c.MeanDuration, f.MaxWindowStarts)
			continue
		}
		binds := "the rate binds"
		if c.Expected() < c.Rate {
			binds = fmt.Sprintf("the limit binds (%d lanes / %g s = %.3g/s under the rate)", c.Limit, c.MeanDuration, c.Expected())
		}
		fmt.Fprintf(&b, "%s: %s; %.3g starts/s against the %.3g expected. At most %d starts in one second, target at most R + B = %g: %s.\n",
			c.Name, binds, f.Sustained, c.Expected(), f.MaxWindowStarts, wb, verdict(float64(f.MaxWindowStarts) <= wb))
	}
	_, err := io.WriteString(w, b.String())
	return err
}
