package localbench

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Result is one strategy's run and its comparison.
type Result struct {
	Measurement Measurement `json:"measurement"`
	Comparison  Comparison  `json:"comparison"`
}

// WriteText prints the comparisons as tables, one per run.
func WriteText(w io.Writer, results []Result) error {
	var b strings.Builder
	b.WriteString("sfnlimit on the local stack against the lane simulator: measured waits vs predicted for the same jobs\n")
	b.WriteString("(wait = the execution's start date - when the job was sent to the general queue, in seconds)\n")
	for _, r := range results {
		writeOne(&b, r)
	}
	b.WriteString("\npredicted ± noise: mean and standard deviation over Monte Carlo trials of the simulator on the same\n" +
		"jobs, each job's entry latency and handover drawn from the run's measured ones (resampled each trial);\n" +
		"z = (measured - predicted) / noise. bare sim: the simulator without the stack's latencies. ideal: an\n" +
		"N-slot semaphore with the same latencies. seed spread: the figure's standard deviation between fresh\n" +
		"workloads of the same size, for scale.\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func writeOne(b *strings.Builder, r Result) {
	c, m := r.Comparison, r.Measurement
	cfg := c.Config
	fmt.Fprintf(b, "\n== %s: %d lanes, %d jobs, Poisson load %g, lognormal sigma %g, mean %gs (seed %d): %s ==\n",
		cfg.Strategy, cfg.Lanes, cfg.Jobs, cfg.Load, cfg.Sigma, cfg.MeanSeconds, cfg.Seed, c.Verdict())
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "wait\tmeasured\tpredicted ± noise\tz\tagree\tbare sim\tideal\tseed spread\t")
	for _, row := range c.Rows {
		agree := "yes"
		if !row.Agree {
			agree = "NO"
		}
		fmt.Fprintf(tw, "%s\t%.2f\t%.2f ± %.2f\t%+.1f\t%s\t%.2f\t%.2f\t±%.2f\t\n",
			row.Figure, row.Measured, row.Predicted, row.Noise, row.Z, agree, row.Bare, row.Ideal, row.SeedSpread)
	}
	tw.Flush()
	lanes := fmt.Sprintf("lanes: %d/%d jobs ran in the lane the simulator chose", c.LaneMatches, c.Jobs)
	switch {
	case c.BindOnFree:
		lanes = "lanes: a job takes whichever lane is free, so they are not compared; the simulator runs its waiting groups with no bind latency of their own (the ideal semaphore's waits)"
	case c.LanesFixed:
		lanes += " (every trial chose the same lanes, whatever the timing: all must match)"
	default:
		lanes += " (in its first trial; the lanes changed with the timing between trials, so they need not match)"
	}
	if c.Real {
		lanes += fmt.Sprintf("; the simulator drives the router's own %s code", cfg.Strategy)
	}
	fmt.Fprintln(b, lanes)
	held := "held"
	if c.Peak > c.Limit {
		held = "EXCEEDED"
	}
	fmt.Fprintf(b, "concurrency: at most %d executions worked at once, limit %d: %s\n", c.Peak, c.Limit, held)
	o := c.Overheads
	fmt.Fprintf(b, "latencies: entry %.2fs mean (%d jobs found their lane empty, %.2f-%.2fs); handover %.2fs mean (%d queued jobs, %.2f-%.2fs); %d jobs in neither\n",
		c.EntryMean, len(o.Entry), minOf(o.Entry), maxOf(o.Entry), c.HandoverMean, len(o.Handover), minOf(o.Handover), maxOf(o.Handover), o.Ambiguous)
	if c.LatencyProblem != "" {
		fmt.Fprintf(b, "latencies do NOT fit the model (simulator + small latencies): %s\n", c.LatencyProblem)
	} else {
		fmt.Fprintf(b, "latencies fit the model: medians at most %gs, no job started early\n", cfg.MaxLatency)
	}
	fmt.Fprintf(b, "load: %g (the jobs' own), %.2f with the handover added to each hold\n", cfg.Load, c.EffectiveLoad)
	if m.RunSeconds > 0 {
		fmt.Fprintf(b, "wall time: %.1fs stack start and warm-up, %.1fs run; submissions at most %.0fms behind schedule\n",
			m.StackSeconds, m.RunSeconds, 1000*m.SubmitLag)
	}
}

func minOf(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	v := xs[0]
	for _, x := range xs {
		v = min(v, x)
	}
	return v
}

func maxOf(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	v := xs[0]
	for _, x := range xs {
		v = max(v, x)
	}
	return v
}

// Verdict says in a few words whether the run agrees with the simulator, and if not, why.
func (c Comparison) Verdict() string {
	if c.Agree {
		return fmt.Sprintf("AGREE, every figure within %g noise", c.Config.Tolerance)
	}
	var why []string
	if !c.LanesAgree() {
		why = append(why, fmt.Sprintf("%d of %d lanes differ", c.Jobs-c.LaneMatches, c.Jobs))
	}
	if c.LatencyProblem != "" {
		why = append(why, "the latencies do not fit the model")
	}
	off := 0
	for _, r := range c.Rows {
		if !r.Agree {
			off++
		}
	}
	if off > 0 {
		why = append(why, fmt.Sprintf("%d figures off by more than %g noise", off, c.Config.Tolerance))
	}
	return "DISAGREE: " + strings.Join(why, "; ")
}
