package localbench

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"

	"github.com/sfnlimit/sfnlimit/internal/tools/sim"
)

// Overheads are the stack's latencies, measured on a run from the jobs whose situation is clear.
type Overheads struct {
	// Entry holds start - submit of each job whose lane was empty when it was submitted: the lane's
	// previous job (if any) had stopped by then.
	Entry []float64 `json:"entry"`
	// Handover holds start - (previous start + previous duration) of each job that was surely queued
	// behind the previous job of its lane when that job's work ended: submitted more than the
	// largest entry latency before the previous job entered its release state.
	Handover []float64 `json:"handover"`
	// Ambiguous counts the jobs in neither set.
	Ambiguous int `json:"ambiguous"`
}

// MeasureOverheads sorts each lane's jobs by start and reads the entry and handover latencies.
func MeasureOverheads(jobs []Job) Overheads {
	byLane := map[int][]Job{}
	for _, j := range jobs {
		byLane[j.Lane] = append(byLane[j.Lane], j)
	}
	lanes := make([]int, 0, len(byLane))
	for l := range byLane {
		lanes = append(lanes, l)
	}
	sort.Ints(lanes)
	type pair struct{ prev, cur Job }
	var o Overheads
	var queued []pair
	for _, l := range lanes {
		js := byLane[l]
		sort.SliceStable(js, func(a, b int) bool { return js[a].Start < js[b].Start })
		for k, j := range js {
			if k == 0 || js[k-1].Stop <= j.Submit {
				o.Entry = append(o.Entry, j.Start-j.Submit)
				continue
			}
			queued = append(queued, pair{js[k-1], j})
		}
	}
	maxEntry := math.Inf(1) // with no entry sample, only jobs submitted before the previous one started
	if len(o.Entry) > 0 {
		maxEntry = slices.Max(o.Entry)
	}
	for _, p := range queued {
		sure := p.cur.Submit+maxEntry < p.prev.WorkEnd
		if math.IsInf(maxEntry, 1) {
			sure = p.cur.Submit < p.prev.Start
		}
		if sure {
			o.Handover = append(o.Handover, p.cur.Start-p.prev.Start-p.prev.Seconds)
		} else {
			o.Ambiguous++
		}
	}
	return o
}

// Figures are the wait statistics compared: mean and nearest-rank p50, p90 and p99, in seconds.
type Figures struct {
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
}

// FigureNames are the figures in the order of Figures.values.
var FigureNames = []string{"mean", "p50", "p90", "p99"}

func (f Figures) values() []float64 { return []float64{f.Mean, f.P50, f.P90, f.P99} }

func figuresOf(waits []float64) Figures {
	if len(waits) == 0 {
		return Figures{}
	}
	s := slices.Clone(waits)
	sort.Float64s(s)
	sum := 0.0
	for _, v := range s {
		sum += v
	}
	return Figures{Mean: sum / float64(len(s)), P50: quantile(s, 0.5), P90: quantile(s, 0.9), P99: quantile(s, 0.99)}
}

// quantile is the nearest-rank q-quantile of sorted values, as internal/tools/sim computes it.
func quantile(sorted []float64, q float64) float64 {
	k := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(k, 0), len(sorted)-1)]
}

// Row compares one figure.
type Row struct {
	Figure   string  `json:"figure"`
	Measured float64 `json:"measured"`
	// Predicted is the figure's mean over the Monte Carlo trials, Noise its standard deviation, and
	// Z = (Measured - Predicted) / Noise.
	Predicted float64 `json:"predicted"`
	Noise     float64 `json:"noise"`
	Z         float64 `json:"z"`
	Agree     bool    `json:"agree"`
	// Bare is the simulator's figure for the same jobs without the stack's latencies.
	Bare float64 `json:"bare"`
	// Ideal is the ideal N-slot semaphore's figure for the same jobs and latencies (trials' mean).
	Ideal float64 `json:"ideal"`
	// SeedSpread is the figure's standard deviation between fresh workloads of the same size.
	SeedSpread float64 `json:"seedSpread"`
}

// Comparison is a run's measured waits against the simulator's prediction.
type Comparison struct {
	Config Config `json:"config"`
	// Real says the simulator drives the router's own lane choice (internal/lambda/lane) for the
	// strategy.
	Real bool `json:"real"`
	// BindOnFree says the strategy binds a job to a lane only when one is free (first-free): its
	// lanes are whichever were free, and are not compared. The simulator runs its waiting groups
	// with no bind latency of their own (the measured latencies are the stack's), which waits as the
	// ideal semaphore does.
	BindOnFree bool `json:"bindOnFree"`
	// LanesFixed says every Monte Carlo trial put every job in the same lane: the strategy's choice
	// did not depend on the timing, so the stack must have put each job in that lane too (random's
	// hash does not look at the lanes). Never for a strategy that binds on a free lane.
	LanesFixed bool      `json:"lanesFixed"`
	Overheads  Overheads `json:"overheads"`
	// LatencyProblem says why the latencies do not fit the model (empty when they do): the model is
	// the simulator plus small pipeline latencies, so their medians must be at most Config.MaxLatency,
	// and no job may start before its submission or its lane's previous job's duration has passed.
	// Without this check a stack that is not the simulator's model at all would be absorbed into
	// large, widely spread "latencies" and a noise to match.
	LatencyProblem string `json:"latencyProblem,omitempty"`
	// MedianLatency is the larger of the entry latency's and the handover's medians: what
	// Config.MaxLatency bounds. A run on a busy machine can exceed it with a stack that is the
	// model; a longer time scale (Config.MeanSeconds) makes such latencies small beside the jobs
	// again.
	MedianLatency float64 `json:"medianLatency"`
	// EntryMean and HandoverMean are the latencies' means, the constant-latency model.
	EntryMean    float64 `json:"entryMean"`
	HandoverMean float64 `json:"handoverMean"`
	// EffectiveLoad is the load with each hold lengthened by the handover: the arrival rate times
	// (mean duration + HandoverMean) divided by the lanes.
	EffectiveLoad float64 `json:"effectiveLoad"`
	Rows          []Row   `json:"rows"`
	// LaneMatches counts the jobs whose measured lane is the one the simulator chose (in its first
	// trial, when the lanes are not fixed).
	LaneMatches int `json:"laneMatches"`
	// SimLanes are the lanes the simulator chose for the jobs (in its first trial).
	SimLanes []int `json:"simLanes"`
	Jobs     int   `json:"jobs"`
	// Peak is the most executions of the type that worked at once, Limit the type's limit.
	Peak  int `json:"peak"`
	Limit int `json:"limit"`
	// Agree: every figure agrees, the latencies fit the model, and every lane matches when the lanes
	// are fixed.
	Agree bool `json:"agree"`
}

// LanesAgree says whether the lanes are as the simulator's: all of them when they are fixed; a
// timing-dependent choice is not held to it.
func (c Comparison) LanesAgree() bool { return !c.LanesFixed || c.LaneMatches == c.Jobs }

// Compare predicts the measured run's waits with the simulator and compares them.
func Compare(ctx context.Context, m Measurement) (Comparison, error) {
	c := m.Config.WithDefaults()
	if err := c.Validate(); err != nil {
		return Comparison{}, err
	}
	specs, err := sim.SpecsNamed([]string{c.Strategy})
	if err != nil {
		return Comparison{}, err
	}
	spec := specs[0]
	n := len(m.Jobs)
	if n == 0 {
		return Comparison{}, errors.New("the measurement has no jobs")
	}
	// The workload as it ran: the actual submit times, the durations submitted, the same ids.
	w := sim.Workload{Name: m.Name, Arrivals: make([]float64, n), Durations: make([]float64, n)}
	measured := make([]float64, n)
	for i, j := range m.Jobs {
		if j.Index != i {
			return Comparison{}, fmt.Errorf("job %d has index %d: the jobs must be in workload order", i, j.Index)
		}
		w.Arrivals[i], w.Durations[i] = j.Submit, j.Seconds
		measured[i] = j.Wait()
	}
	if id := w.Job(0).ID; id != m.Jobs[0].ID {
		return Comparison{}, fmt.Errorf("workload %s names job 0 %q, the measurement %q", m.Name, id, m.Jobs[0].ID)
	}
	// Submissions are sequential, so their times only ever grow; keep the simulator's check honest.
	for i := 1; i < n; i++ {
		if w.Arrivals[i] < w.Arrivals[i-1] {
			return Comparison{}, fmt.Errorf("job %d was submitted before job %d", i, i-1)
		}
	}
	// Each lane's first job found it empty, so there is always an entry sample.
	o := MeasureOverheads(m.Jobs)
	cmp := Comparison{Config: c, Real: spec.Real, BindOnFree: spec.BindOnFree, Overheads: o, EntryMean: mean(o.Entry), HandoverMean: mean(o.Handover), Jobs: n, Peak: m.Peak, Limit: c.Lanes}
	rate := float64(n-1) / (w.Arrivals[n-1] - w.Arrivals[0])
	cmp.EffectiveLoad = rate * (mean(w.Durations) + cmp.HandoverMean) / float64(c.Lanes)

	// Monte Carlo trials: each job's latencies drawn from resampled measured sets.
	var lanesSum, lanesSq, idealSum [4]float64
	var firstLanes []int
	cmp.LanesFixed = !spec.BindOnFree
	for t := range c.Trials {
		rng := rand.New(rand.NewPCG(c.Seed^strategyHash(c.Strategy), uint64(t)))
		entry, hand := resample(rng, o.Entry), resample(rng, o.Handover)
		lat, hold := make([]float64, n), make([]float64, n)
		for i := range n {
			lat[i] = entry[rng.IntN(len(entry))]
			if len(hand) > 0 {
				hold[i] = hand[rng.IntN(len(hand))]
			}
		}
		p, err := predict(ctx, w, c.Lanes, spec, rng, lat, hold)
		if err != nil {
			return Comparison{}, err
		}
		switch {
		case spec.BindOnFree: // its lanes are whichever were free: nothing to compare
		case t == 0:
			firstLanes = p.lanes
		case !slices.Equal(firstLanes, p.lanes):
			cmp.LanesFixed = false
		}
		for k, v := range figuresOf(p.waits).values() {
			lanesSum[k] += v
			lanesSq[k] += v * v
		}
		for k, v := range figuresOf(p.idealWaits).values() {
			idealSum[k] += v
		}
	}
	cmp.SimLanes = firstLanes
	for i, j := range m.Jobs {
		if firstLanes != nil && j.Lane == firstLanes[i] {
			cmp.LaneMatches++
		}
	}

	// The bare simulator: the same jobs, no latencies.
	bare, err := predict(ctx, w, c.Lanes, spec, rand.New(rand.NewPCG(c.Seed, 0xba4e)), make([]float64, n), make([]float64, n))
	if err != nil {
		return Comparison{}, err
	}
	spread, err := seedSpread(ctx, c, spec, cmp.EntryMean, cmp.HandoverMean)
	if err != nil {
		return Comparison{}, err
	}

	cmp.LatencyProblem = latencyProblem(o, c.MaxLatency)
	cmp.MedianLatency = medianLatency(o)
	trials := float64(c.Trials)
	cmp.Agree = cmp.LanesAgree() && cmp.LatencyProblem == ""
	bareF, meas := figuresOf(bare.waits).values(), figuresOf(measured).values()
	for k, name := range FigureNames {
		pred := lanesSum[k] / trials
		noise := math.Sqrt(max(lanesSq[k]/trials-pred*pred, 0) * trials / (trials - 1))
		// Step Functions' dates have millisecond resolution: no figure is known better than that.
		noise = max(noise, 0.001)
		r := Row{
			Figure: name, Measured: meas[k], Predicted: pred, Noise: noise, Z: (meas[k] - pred) / noise,
			Bare: bareF[k], Ideal: idealSum[k] / trials, SeedSpread: spread[k],
		}
		r.Agree = math.Abs(r.Z) <= c.Tolerance
		cmp.Agree = cmp.Agree && r.Agree
		cmp.Rows = append(cmp.Rows, r)
	}
	return cmp, nil
}

// dateSlack allows for Step Functions' dates, which have millisecond resolution.
const dateSlack = 0.002

// latencyProblem says how the measured latencies break the model, or "".
func latencyProblem(o Overheads, maxLatency float64) string {
	var out []string
	for _, l := range []struct {
		name string
		xs   []float64
	}{{"entry latency", o.Entry}, {"handover", o.Handover}} {
		if len(l.xs) == 0 {
			continue
		}
		s := slices.Clone(l.xs)
		sort.Float64s(s)
		if s[0] < -dateSlack {
			out = append(out, fmt.Sprintf("a %s of %.3fs: a job started before the model allows", l.name, s[0]))
		}
		if m := quantile(s, 0.5); m > maxLatency {
			out = append(out, fmt.Sprintf("the median %s, %.2fs, is over %.2gs", l.name, m, maxLatency))
		}
	}
	return strings.Join(out, "; ")
}

// medianLatency is the larger of the entry latency's and the handover's medians.
func medianLatency(o Overheads) float64 {
	var m float64
	for _, xs := range [][]float64{o.Entry, o.Handover} {
		if len(xs) == 0 {
			continue
		}
		s := slices.Clone(xs)
		sort.Float64s(s)
		m = max(m, quantile(s, 0.5))
	}
	return m
}

// prediction is one simulated run of a measured workload: each job's wait from its submission, and
// its lane.
type prediction struct {
	waits, idealWaits []float64
	lanes             []int
}

// predict runs w (arrivals are submit times) through lanes lanes under spec (with rng, for a
// randomised strategy), and through the ideal semaphore, with job i arriving lat[i] after its
// submission and holding its lane for its duration plus hold[i]. Jobs reach the strategy in the
// order they arrive after their latency, as on the stack, under their own ids.
func predict(ctx context.Context, w sim.Workload, lanes int, spec sim.Spec, rng *rand.Rand, lat, hold []float64) (prediction, error) {
	n := w.Len()
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool {
		return w.Arrivals[order[a]]+lat[order[a]] < w.Arrivals[order[b]]+lat[order[b]]
	})
	shifted := sim.Workload{Name: w.Name + "~arrived", JobIDs: make([]string, n), Arrivals: make([]float64, n), Durations: make([]float64, n)}
	for k, i := range order {
		shifted.Arrivals[k] = w.Arrivals[i] + lat[i]
		shifted.Durations[k] = max(w.Durations[i]+hold[i], 0)
		shifted.JobIDs[k] = w.Job(i).ID
	}
	ideal, err := sim.RunSemaphore(ctx, shifted, lanes, sim.Always)
	if err != nil {
		return prediction{}, err
	}
	res, err := spec.RunOn(ctx, shifted, lanes, rng, sim.Always)
	if err != nil {
		return prediction{}, err
	}
	p := prediction{idealWaits: make([]float64, n), waits: make([]float64, n), lanes: make([]int, n)}
	for k, i := range order {
		p.idealWaits[i] = ideal.Starts[k] - w.Arrivals[i]
		p.waits[i] = res.Starts[k] - w.Arrivals[i]
		p.lanes[i] = res.Lanes[k]
	}
	return p, nil
}

// seedSpread is each figure's standard deviation over c.SeedRuns fresh workloads of c's size, run
// with the constant latencies.
func seedSpread(ctx context.Context, c Config, spec sim.Spec, entry, hold float64) ([4]float64, error) {
	var sum, sq [4]float64
	for r := range c.SeedRuns {
		seed := c.Seed + 1 + uint64(r)*0x9e3779b9
		w := c.workload(seed)
		lat, h := make([]float64, w.Len()), make([]float64, w.Len())
		for i := range lat {
			lat[i], h[i] = entry, hold
		}
		p, err := predict(ctx, w, c.Lanes, spec, rand.New(rand.NewPCG(seed, 0x5eed)), lat, h)
		if err != nil {
			return sum, err
		}
		for k, v := range figuresOf(p.waits).values() {
			sum[k] += v
			sq[k] += v * v
		}
	}
	var out [4]float64
	runs := float64(c.SeedRuns)
	for k := range out {
		m := sum[k] / runs
		out[k] = math.Sqrt(max(sq[k]/runs-m*m, 0) * runs / (runs - 1))
	}
	return out, nil
}

// resample draws len(xs) values from xs with replacement (a bootstrap sample); nil for none.
func resample(rng *rand.Rand, xs []float64) []float64 {
	if len(xs) == 0 {
		return nil
	}
	out := make([]float64, len(xs))
	for i := range out {
		out[i] = xs[rng.IntN(len(xs))]
	}
	return out
}

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

func strategyHash(name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return h.Sum64()
}
