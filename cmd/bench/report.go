package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/sfnlimit/sfnlimit/internal/tools/sim"
)

// The headline cells of issue 5: sigma 1 at loads 0.8 and 0.9.
const headlineSigma = 1.0

var headlineLoads = []float64{0.8, 0.9}

// metric is one figure of a cell, as printed in a table.
type metric struct {
	title string
	get   func(sim.Stats) float64
	util  bool // a share, printed as a percentage, the ideal's always 100% while backlogged
}

var (
	p99Wait  = metric{title: "p99 wait", get: func(s sim.Stats) float64 { return s.P99Wait }}
	meanWait = metric{title: "mean wait", get: func(s sim.Stats) float64 { return s.MeanWait }}
	p50Wait  = metric{title: "p50 wait", get: func(s sim.Stats) float64 { return s.P50Wait }}
	makespan = metric{title: "makespan", get: func(s sim.Stats) float64 { return s.Makespan }}
	util     = metric{title: "utilization while backlogged", get: func(s sim.Stats) float64 { return s.Utilization }, util: true}
)

func writeText(w io.Writer, o options, specs []sim.Spec, results, latency []sim.CellResult) error {
	var b strings.Builder
	b.WriteString("sfnlimit lane strategies against an ideal N-slot FIFO semaphore, in virtual time (internal/tools/sim)\n\n")
	b.WriteString("Durations are lognormal with mean 1; waits and makespans are in units of the mean duration.\n")
	width := 0
	for _, s := range specs {
		width = max(width, len(s.Name))
	}
	b.WriteString("Each strategy cell is \"ratio to the ideal (absolute value)\"; inf: the ideal's value is 0 and the strategy's is not.\n")
	for _, s := range specs {
		mark := " "
		if s.Real {
			mark = "*"
		}
		fmt.Fprintf(&b, "  %s%-*s  %s\n", mark, width, s.Name, s.About)
	}
	b.WriteString("  * the router's own code (internal/lambda/lane): first-free's waiting groups (lane.WaitingGroups, lane.WaitingGroup) with the\n" +
		"    starter's binds and wake order, random's lane hash. With no bind latency first-free is the ideal exactly; --bind-latency\n" +
		"    shows what a bind's latency costs (make bench-local measures the stack's). The others are models; least-loaded is\n" +
		"    the retired strategy's choice, run on exact lane counts.\n")
	if o.ids == sim.RandomIDs {
		b.WriteString("Job ids are random (32 hex digits, like UUIDs); --ids sequential for ids like order numbers.\n")
	} else {
		b.WriteString("Job ids are sequential (\"s1-r0-42\", like order numbers); --ids random for ids like UUIDs.\n")
	}
	fmt.Fprintf(&b, "Poisson cells pool their runs (seeds from --seed %d), leaving out each run's first %g%% of jobs (lanes start empty).\n", o.seed, 100*o.warmup)
	b.WriteString("Bursts: K jobs arrive at once into empty lanes; the makespan is the mean over the cell's bursts.\n")

	var poisson, bursts []sim.CellResult
	for _, r := range results {
		if r.Cell.Kind == sim.Burst {
			bursts = append(bursts, r)
		} else {
			poisson = append(poisson, r)
		}
	}
	var head []sim.CellResult
	for _, r := range poisson {
		if slices.Contains(headlineLoads, r.Cell.Load) && r.Cell.Sigma == headlineSigma {
			head = append(head, r)
		}
	}
	if len(head) > 0 {
		fmt.Fprintf(&b, "\n== Headline: p99 wait / ideal p99; Poisson arrivals, sigma %g ==\n", headlineSigma)
		table(&b, specs, head, p99Wait, true)
		b.WriteString("±: standard error between the runs (seeds), relative to the figure.\n")
		writeAcceptance(&b, specs, head)
		b.WriteString("Issue 5's quick model at load 0.8: random lanes 6.6x, 15x, 140x and join-shortest-lane 1.6x, 2.3x, 4.5x\n" +
			"for 5, 10, 50 lanes; at load 0.9: random 4.5x to 49x, shortest lane 1.2x to 2.6x.\n")
	} else if o.headline {
		fmt.Fprintf(&b, "\nThe headline cells (Poisson, sigma %g, load 0.8 or 0.9) are not in the chosen grid.\n", headlineSigma)
	}
	if !o.headline {
		for _, m := range []metric{p99Wait, meanWait, p50Wait, util} {
			if len(poisson) > 0 {
				fmt.Fprintf(&b, "\n== Poisson: %s ==\n", m.title)
				table(&b, specs, poisson, m, false)
			}
		}
		for _, m := range []metric{makespan, p99Wait, meanWait, util} {
			if len(bursts) > 0 {
				fmt.Fprintf(&b, "\n== Bursts of K = %d x lanes jobs: %s ==\n", o.burstFactor, m.title)
				table(&b, specs, bursts, m, false)
			}
		}
	}
	if len(latency) > 0 {
		writeLatency(&b, o, latency)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// The acceptance figure: first-free's p99 wait at most acceptRatio times the ideal's at the headline
// loads for acceptLanes lanes.
const acceptRatio = 1.05

var acceptLanes = []int{5, 10, 50}

func accepted(c sim.Cell) bool {
	return c.Kind == sim.Poisson && c.Sigma == headlineSigma && slices.Contains(headlineLoads, c.Load) && slices.Contains(acceptLanes, c.Lanes)
}

// writeAcceptance says whether first-free (no bind latency), if compared, meets the acceptance figure
// in the headline cells.
func writeAcceptance(b *strings.Builder, specs []sim.Spec, head []sim.CellResult) {
	k := slices.IndexFunc(specs, func(s sim.Spec) bool { return s.Name == "first-free" })
	if k < 0 {
		return
	}
	worst, cells := 0.0, 0
	var at sim.Cell
	for _, r := range head {
		if !accepted(r.Cell) {
			continue
		}
		cells++
		if v, _ := sim.Ratio(r.Strategies[k].P99Wait, r.Ideal.P99Wait); v > worst {
			worst, at = v, r.Cell
		}
	}
	if cells == 0 {
		return
	}
	verdict := "met"
	if worst > acceptRatio {
		verdict = "NOT met"
	}
	fmt.Fprintf(b, "Acceptance: first-free p99 at most %gx the ideal's at loads 0.8 and 0.9 for 5, 10 and 50 lanes: %s in the %d such cells here (at most %.3fx",
		acceptRatio, verdict, cells, worst)
	if worst > 1 {
		fmt.Fprintf(b, ", at %s", at)
	}
	b.WriteString("; no bind latency, see --bind-latency).\n")
}

// writeLatency writes first-free's p99 for each bind latency against the ideal's, and against an
// ideal with the same latency.
func writeLatency(b *strings.Builder, o options, latency []sim.CellResult) {
	var ds []float64
	for _, d := range o.bindLatencies {
		if d > 0 {
			ds = append(ds, d)
		}
	}
	fmt.Fprintf(b, "\n== First-free with a bind latency d: p99 wait / ideal p99 (in brackets: / the p99 of an ideal with the same latency) ==\n")
	fmt.Fprintf(b, "d is in units of the mean duration; each bind holds its waiting group %g x d (--group-hold). An ideal with latency d\n"+
		"starts each job d after its slot is free, so the bracket is what the waiting groups add to the latency itself.\n", o.groupHold)
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', tabwriter.AlignRight)
	hdr := []string{"load", "sigma", "lanes", "runs x jobs", "ideal p99"}
	for _, d := range ds {
		hdr = append(hdr, fmt.Sprintf("d=%g", d))
	}
	fmt.Fprintln(tw, strings.Join(hdr, "\t")+"\t")
	worst := make([][2]float64, len(ds)) // per d: the largest ratio to the ideal, and to the ideal with latency d
	for _, r := range latency {
		c := r.Cell
		row := []string{fmt.Sprint(c.Load), fmt.Sprint(c.Sigma), fmt.Sprint(c.Lanes), fmt.Sprintf("%dx%d", c.Runs, c.Jobs), num(r.Ideal.P99Wait)}
		for k := range ds {
			ff, idl := r.Strategies[2*k].P99Wait, r.Strategies[2*k+1].P99Wait
			row = append(row, ratio(ff, r.Ideal.P99Wait)+" ("+ratio(ff, idl)+")")
			a, _ := sim.Ratio(ff, r.Ideal.P99Wait)
			g, _ := sim.Ratio(ff, idl)
			worst[k] = [2]float64{max(worst[k][0], a), max(worst[k][1], g)}
		}
		fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
	}
	row := []string{"", "", "", "", "at most"}
	for k := range ds {
		row = append(row, ratio(worst[k][0], 1)+" ("+ratio(worst[k][1], 1)+")")
	}
	fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
	tw.Flush()
	keeps, groups := "none of these", "none of these"
	for k, d := range ds {
		if worst[k][0] <= acceptRatio {
			keeps = fmt.Sprintf("up to %g", d)
		}
		if worst[k][1] <= acceptRatio {
			groups = fmt.Sprintf("up to %g", d)
		}
	}
	fmt.Fprintf(b, "Within %gx of the ideal in every row: d %s. The waiting groups alone within %gx of the ideal with the same latency: d %s.\n",
		acceptRatio, keeps, acceptRatio, groups)
}

// table writes one metric of the given cells, a row per cell and a column per strategy. With
// spread, each p99 figure also shows its standard error between runs, relative to the figure.
func table(b *strings.Builder, specs []sim.Spec, cells []sim.CellResult, m metric, spread bool) {
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', tabwriter.AlignRight)
	hdr := []string{"load", "sigma", "lanes"}
	if cells[0].Cell.Kind == sim.Burst {
		hdr = []string{"sigma", "lanes", "K"}
	}
	hdr = append(hdr, "runs x jobs", "ideal")
	for _, s := range specs {
		name := s.Name
		if s.Real {
			name += "*"
		}
		hdr = append(hdr, name)
	}
	fmt.Fprintln(tw, strings.Join(hdr, "\t")+"\t")
	for _, r := range cells {
		c := r.Cell
		row := []string{fmt.Sprint(c.Load), fmt.Sprint(c.Sigma), fmt.Sprint(c.Lanes)}
		if c.Kind == sim.Burst {
			row = []string{fmt.Sprint(c.Sigma), fmt.Sprint(c.Lanes), fmt.Sprint(c.Jobs)}
		}
		row = append(row, fmt.Sprintf("%dx%d", c.Runs, c.Jobs))
		if m.util {
			row = append(row, pct(r.Ideal))
			for _, s := range r.Strategies {
				row = append(row, pct(s.Stats))
			}
			fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
			continue
		}
		ideal := m.get(r.Ideal)
		cell := num(ideal)
		if spread {
			cell += stdErr(r.Ideal.RunP99Waits)
		}
		row = append(row, cell)
		for _, s := range r.Strategies {
			v := m.get(s.Stats)
			cell := ratio(v, ideal)
			if spread {
				var runs []float64
				for i, p := range s.RunP99Waits {
					if q := r.Ideal.RunP99Waits[i]; q > 0 {
						runs = append(runs, p/q)
					}
				}
				cell += stdErr(runs)
			}
			row = append(row, cell+" ("+num(v)+")")
		}
		fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
	}
	tw.Flush()
}

// stdErr is " ±x%": the standard error of the mean of values relative to their mean, or "" when it
// cannot be told (fewer than two values, or a mean of 0).
func stdErr(values []float64) string {
	n := float64(len(values))
	if n < 2 {
		return ""
	}
	mean := 0.0
	for _, v := range values {
		mean += v / n
	}
	if mean <= 0 {
		return ""
	}
	ss := 0.0
	for _, v := range values {
		ss += (v - mean) * (v - mean)
	}
	return fmt.Sprintf(" ±%.0f%%", 100*math.Sqrt(ss/(n-1)/n)/mean)
}

func pct(s sim.Stats) string {
	if s.Backlogged <= 0 {
		return "never"
	}
	return fmt.Sprintf("%.1f%%", 100*s.Utilization)
}

func num(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v >= 1000:
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.3g", v)
}

func ratio(v, ideal float64) string {
	r, ok := sim.Ratio(v, ideal)
	switch {
	case !ok:
		return "inf"
	case r < 10:
		return fmt.Sprintf("%.2fx", r)
	case r < 100:
		return fmt.Sprintf("%.1fx", r)
	case r >= 1000:
		return ">1000x"
	}
	return fmt.Sprintf("%.0fx", r)
}

// JSON output: the cells with their figures and, per strategy, the ratios to the ideal (null when
// the ideal's value is 0 and the strategy's is not).
type jsonReport struct {
	Seed       uint64         `json:"seed"`
	Warmup     float64        `json:"warmupShare"`
	Strategies []jsonStrategy `json:"strategies"`
	Cells      []jsonCell     `json:"cells"`
	// BindLatency holds, for --bind-latency values above 0, first-free with each latency and the
	// ideal with the same latency, on the Poisson cells.
	GroupHoldShare float64        `json:"groupHoldShare,omitempty"`
	BindLatency    []jsonStrategy `json:"bindLatencyStrategies,omitempty"`
	LatencyCells   []jsonCell     `json:"bindLatencyCells,omitempty"`
}

type jsonStrategy struct {
	Name  string `json:"name"`
	Real  bool   `json:"real"`
	About string `json:"about"`
}

type jsonCell struct {
	sim.Cell
	Ideal      jsonStats   `json:"ideal"`
	Strategies []jsonStats `json:"strategies"`
}

type jsonStats struct {
	Strategy    string     `json:"strategy,omitempty"`
	Jobs        int        `json:"jobs"`
	MeanWait    float64    `json:"meanWait"`
	P50Wait     float64    `json:"p50Wait"`
	P99Wait     float64    `json:"p99Wait"`
	Utilization *float64   `json:"utilization"` // null: no job ever waited
	Makespan    *float64   `json:"makespan,omitempty"`
	RunP99Waits []float64  `json:"runP99Waits"`
	Ratios      *jsonRatio `json:"ratios,omitempty"`
}

type jsonRatio struct {
	MeanWait    *float64 `json:"meanWait"`
	P50Wait     *float64 `json:"p50Wait"`
	P99Wait     *float64 `json:"p99Wait"`
	Utilization *float64 `json:"utilization"`
	Makespan    *float64 `json:"makespan,omitempty"`
}

func writeJSON(w io.Writer, o options, specs []sim.Spec, results, latency []sim.CellResult) error {
	rep := jsonReport{Seed: o.seed, Warmup: o.warmup, Strategies: jsonStrategies(specs), Cells: jsonCells(results)}
	if len(latency) > 0 {
		rep.GroupHoldShare, rep.BindLatency, rep.LatencyCells = o.groupHold, jsonStrategies(o.latencySpecs()), jsonCells(latency)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

func jsonStrategies(specs []sim.Spec) []jsonStrategy {
	var out []jsonStrategy
	for _, s := range specs {
		out = append(out, jsonStrategy{Name: s.Name, Real: s.Real, About: s.About})
	}
	return out
}

func jsonCells(results []sim.CellResult) []jsonCell {
	out := make([]jsonCell, len(results))
	for i, r := range results {
		burst := r.Cell.Kind == sim.Burst
		c := jsonCell{Cell: r.Cell, Ideal: toJSON("", r.Ideal, burst)}
		for _, s := range r.Strategies {
			js := toJSON(s.Strategy, s.Stats, burst)
			js.Ratios = &jsonRatio{
				MeanWait: ratioPtr(s.MeanWait, r.Ideal.MeanWait),
				P50Wait:  ratioPtr(s.P50Wait, r.Ideal.P50Wait),
				P99Wait:  ratioPtr(s.P99Wait, r.Ideal.P99Wait),
			}
			if js.Utilization != nil && r.Ideal.Backlogged > 0 {
				js.Ratios.Utilization = ratioPtr(s.Utilization, r.Ideal.Utilization)
			}
			if burst {
				js.Ratios.Makespan = ratioPtr(s.Makespan, r.Ideal.Makespan)
			}
			c.Strategies = append(c.Strategies, js)
		}
		out[i] = c
	}
	return out
}

func toJSON(name string, s sim.Stats, burst bool) jsonStats {
	js := jsonStats{
		Strategy: name, Jobs: s.Jobs, MeanWait: s.MeanWait, P50Wait: s.P50Wait, P99Wait: s.P99Wait,
		RunP99Waits: s.RunP99Waits,
	}
	if s.Backlogged > 0 {
		js.Utilization = &s.Utilization
	}
	if burst {
		js.Makespan = &s.Makespan
	}
	return js
}

func ratioPtr(v, ideal float64) *float64 {
	r, ok := sim.Ratio(v, ideal)
	if !ok || math.IsInf(r, 0) {
		return nil
	}
	return &r
}
