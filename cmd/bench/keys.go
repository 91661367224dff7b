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

const keysUsage = `
--keys prints issue 13's figures for per-key limits instead: a noisy key's backlog beside quiet keys
under the keyed scheduler and under today's FIFO order, and keys with backlogs alone (work
conservation). It uses --seed, --runs (0: 200 per scenario) and --sigmas (one value, default 1), and
--json; the scenarios are fixed (limit 10, key cap 5). It takes a second or two.
  go run ./cmd/bench --keys
`

// keysFlags are the flags --keys uses; it refuses the others.
var keysFlags = []string{"keys", "seed", "runs", "sigmas", "json"}

// defaultKeysRuns is how many runs each --keys scenario pools: 200 runs of the isolation scenario are
// 20,000 quiet waits, so each p99 rests on 200 of them.
const defaultKeysRuns = 200

// keysOptions are the runs of --keys.
type keysOptions struct {
	runs  int
	sigma float64
}

func resolveKeys(o options, set map[string]bool) (*keysOptions, error) {
	for name := range set {
		if !slices.Contains(keysFlags, name) {
			return nil, fmt.Errorf("--%s has no effect with --keys", name)
		}
	}
	ko := &keysOptions{runs: o.runs, sigma: 1}
	if ko.runs == 0 {
		ko.runs = defaultKeysRuns
	}
	if set["sigmas"] {
		if len(o.sigmas) != 1 {
			return nil, fmt.Errorf("--sigmas: --keys takes one sigma, not %d", len(o.sigmas))
		}
		ko.sigma = o.sigmas[0]
	}
	return ko, nil
}

// isolationLoads are the quiet loads of the isolation sweep, the first the headline's: the quiet
// keys' work over their window as a share of the lanes. The sweep ends at the noisy backlog's drain
// time.
var isolationLoads = []float64{1, 0.5, 0.2, 0.1}

// keysReport is everything --keys prints.
type keysReport struct {
	Seed      uint64                   `json:"seed"`
	Headline  sim.KeyIsolationResult   `json:"isolation"`
	Sweep     []sim.KeyIsolationResult `json:"isolationSweep"`
	Backlogs  []sim.KeyBacklogResult   `json:"workConservation"`
	Violation string                   `json:"violation,omitempty"`
}

func runKeys(ctx context.Context, o options, stdout, stderr io.Writer) int {
	began := time.Now()
	rep, err := measureKeys(ctx, o.seed, *o.keys)
	if err != nil {
		fmt.Fprintln(stderr, "bench --keys:", err)
		return exitError
	}
	if o.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(rep)
	} else {
		err = writeKeysText(stdout, o.seed, rep)
	}
	if err != nil {
		fmt.Fprintln(stderr, "bench --keys:", err)
		return exitError
	}
	fmt.Fprintf(stderr, "bench --keys: simulated in %.1fs\n", time.Since(began).Seconds())
	if rep.Violation != "" {
		fmt.Fprintln(stderr, "bench --keys:", rep.Violation)
		return exitError
	}
	return exitOK
}

func measureKeys(ctx context.Context, seed uint64, ko keysOptions) (keysReport, error) {
	rep := keysReport{Seed: seed}
	orders := sim.KeyOrders()
	base := sim.DefaultKeyIsolation()
	base.Runs, base.Sigma = ko.runs, ko.sigma
	windows := []float64{}
	for _, load := range isolationLoads {
		windows = append(windows, base.IsolationWindow()/load)
	}
	if d := base.DrainTime(); !slices.Contains(windows, d) {
		windows = append(windows, d)
	}
	for k, win := range windows {
		c := base
		c.Window = win
		r, err := sim.RunKeyIsolation(ctx, c, seed, orders)
		if err != nil {
			return rep, err
		}
		if k == 0 {
			rep.Headline = r
		}
		rep.Sweep = append(rep.Sweep, r)
		for _, f := range r.Orders {
			if f.MaxRunning > c.Limit {
				rep.Violation = fmt.Sprintf("order %s ran %d jobs at once over a limit of %d", f.Order, f.MaxRunning, c.Limit)
			}
			if f.Order != sim.FIFOOrder && f.MaxKeyOverCap > 0 {
				rep.Violation = fmt.Sprintf("order %s ran a key %d jobs over its cap", f.Order, f.MaxKeyOverCap)
			}
		}
	}
	for _, c := range sim.DefaultKeyBacklogs() {
		c.Runs, c.Sigma = ko.runs, ko.sigma
		r, err := sim.RunKeyBacklog(ctx, c, seed, sim.KeyedOrder)
		if err != nil {
			return rep, err
		}
		if r.MaxRunning > c.Limit || slices.ContainsFunc(r.Keys, func(k sim.KeyRunning) bool { return k.Max > k.Cap }) {
			rep.Violation = fmt.Sprintf("backlog scenario %q ran more than its limit or a key's cap", c.Name)
		}
		rep.Backlogs = append(rep.Backlogs, r)
	}
	return rep, nil
}

// The targets of issue 13.
const (
	targetRatio = 2.0
	targetUtil  = 0.9
)

var orderAbout = map[sim.KeyOrder]string{
	sim.KeyedOrder: "issue 13's scheduler: one FIFO per key, each key capped; a freed lane goes to the eligible parked key " +
		"running the fewest jobs, then the one parked longest, then by name",
	sim.OldestHeadOrder: "the same caps, a freed lane to the key whose head was submitted first (a model, to show what the " +
		"fewest-running rule buys)",
	sim.FIFOOrder: "today's behaviour: one FIFO of all the type's jobs, no key caps",
}

func writeKeysText(w io.Writer, seed uint64, rep keysReport) error {
	var b strings.Builder
	h := rep.Headline
	c := h.Scenario
	b.WriteString("sfnlimit per-key limits (issue 13) in virtual time (internal/tools/sim)\n\n")
	fmt.Fprintf(&b, "Type limit %d lanes, key cap %d. Durations lognormal with mean 1, sigma %g; waits in mean durations.\n", c.Limit, c.KeyLimit, c.Sigma)
	fmt.Fprintf(&b, "Seeds: --seed %d; %d runs per scenario (run r draws its jobs from PCG(seed, r)); the figures pool the runs.\n", seed, c.Runs)
	b.WriteString("Orders:\n")
	for _, o := range sim.KeyOrders() {
		fmt.Fprintf(&b, "  %-18s %s\n", o, orderAbout[o])
	}

	fmt.Fprintf(&b, "\n== Isolation: a noisy key submits %d jobs at time 0; %d quiet keys each submit %d jobs at once, at a random time in [0, %g) ==\n",
		c.NoisyJobs, c.QuietKeys, c.QuietJobs, c.Window)
	fmt.Fprintf(&b, "The quiet window is the time the %d lanes take to run the quiet keys' %d jobs (quiet load %g): quiet keys overlap and wait\n"+
		"for one another without the noisy key too, so the ratio compares waits, not zeros. (a), (b): keyed with and without the noisy\n"+
		"key; (c), (d): FIFO order with and without it; the same quiet jobs in all four.\n",
		c.Limit, c.QuietKeys*c.QuietJobs, c.QuietLoad())
	tw := tabwriter.NewWriter(&b, 0, 0, 1, ' ', 0)
	row(tw, "order", "quiet p50 with noisy", "quiet p99 with noisy", "quiet p50 without", "quiet p99 without", "p99 with / without",
		"noisy max running (alone)", "utilization while backlogged", "while a startable job waited")
	rule(tw, 9)
	for _, f := range h.Orders {
		with, without := "", ""
		switch f.Order {
		case sim.KeyedOrder:
			with, without = "(a) ", "(b) "
		case sim.FIFOOrder:
			with, without = "(c) ", "(d) "
		}
		row(tw, string(f.Order), with+num(f.With.P50), with+num(f.With.P99), without+num(f.Without.P50), without+num(f.Without.P99),
			ratio(f.With.P99, f.Without.P99), fmt.Sprintf("%d (%d)", f.Noisy.Max, f.NoisyAlone.Max),
			share(f.Utilization.Share, f.Utilization.Backlogged), share(f.Utilization.StartableShare, f.Utilization.Startable))
	}
	tw.Flush()
	keyed := h.Orders[slices.IndexFunc(h.Orders, func(f sim.IsolationFigures) bool { return f.Order == sim.KeyedOrder })]
	fifo := h.Orders[slices.IndexFunc(h.Orders, func(f sim.IsolationFigures) bool { return f.Order == sim.FIFOOrder })]
	r, _ := keyed.P99Ratio()
	fmt.Fprintf(&b, "Quiet keys: %d waits per column. Target (a)/(b) p99 at most %gx: %s (%s). FIFO order: (c)/(d) %s.\n",
		keyed.With.Jobs, targetRatio, verdict(r <= targetRatio), ratio(keyed.With.P99, keyed.Without.P99), ratio(fifo.With.P99, fifo.Without.P99))
	na := keyed.NoisyAlone
	fmt.Fprintf(&b, "Noisy key alone under keyed: at most %d running, at least %d while its jobs waited (mean %.3g); its cap is %d: %s.\n",
		na.Max, na.MinBacklogged, na.MeanBacklogged, na.Cap, verdict(na.Max == na.Cap && na.MinBacklogged == na.Cap))
	u := keyed.Utilization
	fmt.Fprintf(&b, "Utilization under keyed, target at least %.0f%%: %s while any job waited (%s: most of the time only the noisy key waits,\n"+
		"and its cap leaves %d of the %d lanes free on purpose); %s while a job waited that its key's cap let start (%s).\n",
		100*targetUtil, share(u.Share, u.Backlogged), verdict(u.Share >= targetUtil), c.Limit-c.KeyLimit, c.Limit,
		share(u.StartableShare, u.Startable), verdict(u.StartableShare >= targetUtil))

	fmt.Fprintf(&b, "\n== Isolation over longer quiet windows: quiet p99 with the noisy key / without it ==\n")
	fmt.Fprintf(&b, "A longer window thins the quiet keys out: without the noisy key they wait less and less, and the ratio compares\n"+
		"ever smaller waits. The last window is the noisy backlog's drain time at its cap (%d jobs / %d).\n", c.NoisyJobs, c.KeyLimit)
	tw = tabwriter.NewWriter(&b, 0, 0, 1, ' ', 0)
	hdr := []string{"quiet window", "quiet load"}
	for _, o := range sim.KeyOrders() {
		hdr = append(hdr, string(o)+" p99 with / without")
	}
	row(tw, hdr...)
	rule(tw, len(hdr))
	for _, s := range rep.Sweep {
		cells := []string{fmt.Sprintf("%g", s.Scenario.Window), fmt.Sprintf("%.3g", s.Scenario.QuietLoad())}
		for _, f := range s.Orders {
			cells = append(cells, fmt.Sprintf("%s / %s = %s", num(f.With.P99), num(f.Without.P99), ratio(f.With.P99, f.Without.P99)))
		}
		row(tw, cells...)
	}
	tw.Flush()
	within := "none of these"
	for _, s := range rep.Sweep {
		f := s.Orders[slices.IndexFunc(s.Orders, func(f sim.IsolationFigures) bool { return f.Order == sim.KeyedOrder })]
		if r, _ := f.P99Ratio(); r > targetRatio {
			break
		}
		within = fmt.Sprintf("up to %g (quiet load down to %.3g)", s.Scenario.Window, s.Scenario.QuietLoad())
	}
	fmt.Fprintf(&b, "Keyed within %gx from the first window on: windows %s. With the noisy key, quiet bursts wait once they need\n"+
		"more lanes than the noisy key leaves them (at least %d); without it, once they need more than all %d: the second grows\n"+
		"rare faster as the quiet keys thin out, though the waits with the noisy key stay small in mean durations.\n",
		targetRatio, within, c.Limit-c.KeyLimit, c.Limit)

	fmt.Fprintf(&b, "\n== Work conservation under keyed: every key's backlog submitted at time 0, nothing else ==\n")
	b.WriteString("Running while backlogged: the fewest and the time-weighted mean of a key's jobs running while one of its jobs waited\n" +
		"(over every key and run). With one key, the cap leaves the other lanes free: the startable column is the one to hold to 90%.\n")
	tw = tabwriter.NewWriter(&b, 0, 0, 1, ' ', 0)
	row(tw, "scenario", "jobs per key", "limit / cap", "max running", "key max running", "key min / mean running while backlogged",
		"utilization while backlogged", "while a startable job waited", "makespan")
	rule(tw, 9)
	for _, r := range rep.Backlogs {
		s := r.Scenario
		keyMax, keyMin := 0, s.Limit
		var means []string
		for _, k := range r.Keys {
			keyMax = max(keyMax, k.Max)
			keyMin = min(keyMin, k.MinBacklogged)
			means = append(means, fmt.Sprintf("%.3g", k.MeanBacklogged))
		}
		jobs := strings.Trim(strings.Join(strings.Fields(fmt.Sprint(s.Backlogs)), ", "), "[]")
		row(tw, s.Name, jobs, fmt.Sprintf("%d / %d", s.Limit, s.KeyLimit), fmt.Sprint(r.MaxRunning), fmt.Sprint(keyMax),
			fmt.Sprintf("%d / %s", keyMin, strings.Join(means, ", ")),
			share(r.Utilization.Share, r.Utilization.Backlogged), share(r.Utilization.StartableShare, r.Utilization.Startable), num(r.Makespan))
	}
	tw.Flush()
	one := rep.Backlogs[0]
	if len(one.Keys) == 1 {
		k := one.Keys[0]
		fmt.Fprintf(&b, "One key: exactly its cap %d at a time (max %d, min %d while backlogged): %s.\n",
			k.Cap, k.Max, k.MinBacklogged, verdict(k.Max == k.Cap && k.MinBacklogged == k.Cap))
	}
	worst := 1.0
	for _, r := range rep.Backlogs[1:] {
		worst = min(worst, r.Utilization.StartableShare)
	}
	fmt.Fprintf(&b, "Several keys: lanes busy while a startable job waited, target at least %.0f%%: %s (at least %.1f%%).\n",
		100*targetUtil, verdict(worst >= targetUtil), 100*worst)
	_, err := io.WriteString(w, b.String())
	return err
}

func row(tw *tabwriter.Writer, cells ...string) {
	fmt.Fprintln(tw, "| "+strings.Join(cells, "\t| ")+"\t|")
}

func rule(tw *tabwriter.Writer, n int) {
	fmt.Fprintln(tw, "|"+strings.Repeat("---\t|", n))
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}

// share is a utilization as a percentage, or "never" when no time counted.
func share(v, over float64) string {
	if over <= 0 {
		return "never"
	}
	return fmt.Sprintf("%.1f%%", 100*v)
}
