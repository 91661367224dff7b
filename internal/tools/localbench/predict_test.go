package localbench

import (
	"bytes"
	"context"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/sfnlimit/sfnlimit/internal/lambda/lane"
	"github.com/sfnlimit/sfnlimit/internal/tools/sim"
)

func TestMeasureOverheads(t *testing.T) {
	tests := []struct {
		name string
		jobs []Job
		want Overheads
	}{
		{
			name: "first job of a lane found it empty",
			jobs: []Job{{Lane: 1, Submit: 1, Start: 1.2, Seconds: 2, WorkEnd: 3.3, Stop: 3.4}},
			want: Overheads{Entry: []float64{0.2}},
		},
		{
			name: "a job sent after its lane's previous one stopped found it empty",
			jobs: []Job{
				{Lane: 1, Submit: 0, Start: 0.1, Seconds: 1, WorkEnd: 1.2, Stop: 1.3},
				{Lane: 1, Submit: 2, Start: 2.25, Seconds: 1, WorkEnd: 3.3, Stop: 3.4},
			},
			want: Overheads{Entry: []float64{0.1, 0.25}},
		},
		{
			name: "a job sent well before the previous one's work ended was queued behind it",
			jobs: []Job{
				{Lane: 2, Submit: 0, Start: 0.1, Seconds: 3, WorkEnd: 3.2, Stop: 3.3},
				{Lane: 2, Submit: 1, Start: 3.5, Seconds: 1, WorkEnd: 4.6, Stop: 4.7},
			},
			// handover: 3.5 - 0.1 - 3
			want: Overheads{Entry: []float64{0.1}, Handover: []float64{3.5 - 0.1 - 3}},
		},
		{
			name: "a job sent within the largest entry latency of the previous one's end is ambiguous",
			jobs: []Job{
				{Lane: 1, Submit: 0, Start: 0.5, Seconds: 2, WorkEnd: 2.6, Stop: 2.7},
				{Lane: 1, Submit: 2.3, Start: 2.9, Seconds: 1, WorkEnd: 4, Stop: 4.1},
			},
			want: Overheads{Entry: []float64{0.5}, Ambiguous: 1},
		},
		{
			name: "lanes are read apart and in order of start, whatever the input order",
			jobs: []Job{
				{Lane: 1, Submit: 1, Start: 4.3, Seconds: 2, WorkEnd: 6.4, Stop: 6.5},
				{Lane: 2, Submit: 0.5, Start: 0.6, Seconds: 0, WorkEnd: 0.7, Stop: 0.8},
				{Lane: 1, Submit: 0, Start: 0.2, Seconds: 4, WorkEnd: 4.25, Stop: 4.3},
			},
			want: Overheads{Entry: []float64{0.2, 0.1}, Handover: []float64{4.3 - 0.2 - 4}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := MeasureOverheads(tt.jobs)
			if !approxEqual(got.Entry, tt.want.Entry) || !approxEqual(got.Handover, tt.want.Handover) || got.Ambiguous != tt.want.Ambiguous {
				t.Errorf("MeasureOverheads() = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func approxEqual(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Abs(a[i]-b[i]) > 1e-9 {
			return false
		}
	}
	return true
}

func TestWorkload(t *testing.T) {
	tests := []Config{
		{},
		{Lanes: 10, Jobs: 200, Load: 0.5, Seed: 3},
		{Lanes: 2, Jobs: 30, Load: 0.95, Sigma: 1.5, MeanSeconds: 5, Seed: 9},
	}
	for _, c := range tests {
		c = c.WithDefaults()
		t.Run(c.String(), func(t *testing.T) {
			w := c.Workload()
			if w.Len() != c.Jobs {
				t.Fatalf("Workload() has %d jobs, want %d", w.Len(), c.Jobs)
			}
			if got := WorkloadLoad(w, c.Lanes); math.Abs(got-c.Load) > 1e-9 {
				t.Errorf("the workload's own load is %g, want %g", got, c.Load)
			}
			for i, d := range w.Durations {
				if d < 0 || d != math.Round(d) {
					t.Fatalf("job %d lasts %g s, want whole seconds, at least 0", i, d)
				}
				if i > 0 && w.Arrivals[i] < w.Arrivals[i-1] {
					t.Fatalf("job %d arrives before job %d", i, i-1)
				}
			}
			if m := mean(w.Durations); m < c.MeanSeconds/3 || m > c.MeanSeconds*3 {
				t.Errorf("mean duration %g s, want about %g s", m, c.MeanSeconds)
			}
			if again := c.Workload(); !reflect.DeepEqual(w, again) {
				t.Errorf("Workload() drew different jobs for the same seed")
			}
			other := c
			other.Seed++
			if reflect.DeepEqual(w.Durations, other.Workload().Durations) {
				t.Errorf("seeds %d and %d drew the same durations", c.Seed, other.Seed)
			}
			// Strategies see the simulator's job ids: the stack's router must see the same ones.
			if got, want := w.Job(7).ID, w.Name+"-7"; got != want {
				t.Errorf("job 7 has id %q, want %q", got, want)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		give Config
	}{
		{name: "unknown strategy", give: Config{Strategy: "fastest"}},
		{name: "the retired least-loaded (the stack runs it as first-free)", give: Config{Strategy: lane.LeastLoaded}},
		{name: "a strategy only the simulator has", give: Config{Strategy: "two-choices"}},
		{name: "an old name of random", give: Config{Strategy: "hashed"}},
		{name: "no lanes", give: Config{Lanes: -1}},
		{name: "one job", give: Config{Jobs: 1}},
		{name: "sub-second durations", give: Config{MeanSeconds: 0.5}},
		{name: "negative load", give: Config{Load: -0.8}},
		{name: "too few trials", give: Config{Trials: 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.give.WithDefaults().Validate(); err == nil {
				t.Errorf("Validate(%+v) = nil, want an error", tt.give)
			}
		})
	}
	if err := (Config{}).WithDefaults().Validate(); err != nil {
		t.Errorf("the default config does not validate: %v", err)
	}
	for _, s := range lane.Strategies {
		if err := (Config{Strategy: s}).WithDefaults().Validate(); err != nil {
			t.Errorf("the router's strategy %s does not validate: %v", s, err)
		}
	}
}

func TestStrategies(t *testing.T) {
	got, err := Strategies("")
	if err != nil {
		t.Fatalf("Strategies() error = %v", err)
	}
	// The template allows every router strategy (and, until it drops it, the retired least-loaded).
	if !slices.Equal(got, lane.Strategies) {
		t.Errorf("Strategies() = %v, want the router's %v, the default first", got, lane.Strategies)
	}
	if _, err := sim.SpecsNamed(got); err != nil {
		t.Errorf("Strategies() = %v, each must be one the simulator knows: %v", got, err)
	}
}

// stackModel is a stand-in for the stack, independent of internal/tools/sim: each job reaches its
// lane an entry latency after its submission, a lane serves its jobs one at a time, and a lane's
// next job starts a handover after the previous one's duration. The options make it a different
// machine from the one the simulator models, to check that the comparison tells.
type stackModel struct {
	lanes           int
	entry, handover func(*rand.Rand) float64
	// semaphore ignores the lanes for waiting (any of N slots serves the next job to arrive), while
	// still reporting the router's lane, or with slotLanes the slot that served the job (as a
	// strategy that binds a job to the first free lane does).
	semaphore, slotLanes bool
	// lifo serves a lane's waiting jobs newest first.
	lifo bool
	// shiftLanes reports each job in the lane after the router's.
	shiftLanes bool
	// extraPerWait makes a job that waited wait this share longer.
	extraPerWait float64
}

// measure runs c's workload through the model and returns what Measure would have recorded.
func (s stackModel) measure(t *testing.T, c Config, seed uint64) Measurement {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 1))
	w := c.Workload()
	chooser, err := lane.New("random")
	if err != nil {
		t.Fatal(err)
	}
	n := w.Len()
	arrive := make([]float64, n)
	hold := make([]float64, n)
	order := make([]int, n)
	lanes := make([]int, n)
	for i := range n {
		arrive[i] = w.Arrivals[i] + s.entry(rng)
		hold[i] = s.handover(rng)
		order[i] = i
		if lanes[i], err = chooser.Choose(context.Background(), w.Job(i), s.lanes); err != nil {
			t.Fatal(err)
		}
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmpFloat(arrive[a], arrive[b]) })
	starts := make([]float64, n)
	if s.semaphore {
		free := make([]float64, s.lanes) // when each slot can start its next job
		for _, i := range order {
			slot := slices.Index(free, slices.Min(free))
			starts[i] = max(arrive[i], free[slot])
			free[slot] = starts[i] + w.Durations[i] + hold[i]
			if s.slotLanes {
				lanes[i] = slot + 1
			}
		}
	} else {
		for ln := 1; ln <= s.lanes; ln++ {
			var queue []int // this lane's jobs in order of arrival
			for _, i := range order {
				if lanes[i] == ln {
					queue = append(queue, i)
				}
			}
			var waiting []int
			free := 0.0
			for next := 0; next < len(queue) || len(waiting) > 0; {
				if len(waiting) == 0 {
					free = max(free, arrive[queue[next]])
				}
				for next < len(queue) && arrive[queue[next]] <= free {
					waiting = append(waiting, queue[next])
					next++
				}
				k := 0
				if s.lifo {
					k = len(waiting) - 1
				}
				i := waiting[k]
				waiting = slices.Delete(waiting, k, k+1)
				starts[i] = max(free, arrive[i])
				free = starts[i] + w.Durations[i] + hold[i]
			}
		}
	}
	m := Measurement{Config: c, Name: w.Name, Jobs: make([]Job, n)}
	for i := range n {
		start := starts[i]
		if start > arrive[i] {
			start += s.extraPerWait * (start - w.Arrivals[i])
		}
		ln := lanes[i]
		if s.shiftLanes {
			ln = ln%s.lanes + 1
		}
		end := start + w.Durations[i]
		m.Jobs[i] = Job{
			Index: i, ID: w.Job(i).ID, Seconds: w.Durations[i], Scheduled: w.Arrivals[i], Submit: w.Arrivals[i],
			Start: start, WorkEnd: end + 0.4*hold[i], Stop: end + 0.8*hold[i], Lane: ln, Executions: 1, Status: "SUCCEEDED",
		}
	}
	return m
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func uniformIn(lo, hi float64) func(*rand.Rand) float64 {
	return func(r *rand.Rand) float64 { return lo + (hi-lo)*r.Float64() }
}

func TestCompare(t *testing.T) {
	c := Config{Jobs: 60, Trials: 100, SeedRuns: 20, Seed: 5}.WithDefaults()
	stack := stackModel{lanes: c.Lanes, entry: uniformIn(0.02, 0.15), handover: uniformIn(0.1, 0.4)}
	tests := []struct {
		name  string
		model stackModel
		// want* are what the comparison must find: agreement; every lane as the simulator's; the
		// latencies within the model's bound; some figure further from its prediction than the noise.
		wantAgree, wantLanes, wantLatencyOK, wantFigureOff bool
	}{
		{
			name: "a stack that works as the model says agrees", model: stack,
			wantAgree: true, wantLanes: true, wantLatencyOK: true,
		},
		{
			name: "jobs in other lanes than the router's choice disagree", model: with(stack, func(m *stackModel) { m.shiftLanes = true }),
			wantLatencyOK: true,
		},
		{
			name:      "lanes served newest first disagree on the waits",
			model:     with(stack, func(m *stackModel) { m.lifo = true }),
			wantLanes: true, wantLatencyOK: true, wantFigureOff: true,
		},
		{
			name:      "a stack that ignored its lanes (one N-slot semaphore) does not fit the model",
			model:     with(stack, func(m *stackModel) { m.semaphore = true }),
			wantLanes: true,
		},
		{
			name:      "waits a fifth longer than the lanes explain do not fit the model",
			model:     with(stack, func(m *stackModel) { m.extraPerWait = 0.2 }),
			wantLanes: true,
		},
		{
			name:      "handovers longer than the jobs (a release that waits for a retry) do not fit the model",
			model:     with(stack, func(m *stackModel) { m.handover = uniformIn(4, 6) }),
			wantLanes: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, report := compareAndLog(t, tt.model.measure(t, c, 11))
			if got.Agree != tt.wantAgree {
				t.Errorf("Agree = %v, want %v", got.Agree, tt.wantAgree)
			}
			if !got.LanesFixed || !got.Real {
				t.Errorf("LanesFixed %v, Real %v for random, want both: its hash ignores the timing and is the router's code", got.LanesFixed, got.Real)
			}
			if lanes := got.LaneMatches == got.Jobs; lanes != tt.wantLanes {
				t.Errorf("%d of %d lanes match, want all: %v", got.LaneMatches, got.Jobs, tt.wantLanes)
			}
			if ok := got.LatencyProblem == ""; ok != tt.wantLatencyOK {
				t.Errorf("latency problem %q, want one: %v", got.LatencyProblem, !tt.wantLatencyOK)
			}
			// MedianLatency is what MaxLatency bounds: over it exactly when the problem names a median.
			if over, named := got.MedianLatency > got.Config.MaxLatency, strings.Contains(got.LatencyProblem, "median"); over != named || got.MedianLatency <= 0 {
				t.Errorf("MedianLatency %.3f (MaxLatency %g), latency problem %q: want it over the bound exactly when a median is named", got.MedianLatency, got.Config.MaxLatency, got.LatencyProblem)
			}
			off := false
			for _, r := range got.Rows {
				off = off || !r.Agree
				if !(r.Noise > 0) {
					t.Errorf("figure %s: noise %g, want above 0", r.Figure, r.Noise)
				}
			}
			if tt.wantLatencyOK && off != tt.wantFigureOff {
				t.Errorf("some figure off its prediction: %v, want %v", off, tt.wantFigureOff)
			}
			if tt.wantAgree {
				// The latencies the model drew are recovered from the records alone.
				if got.EntryMean < 0.02 || got.EntryMean > 0.15 || got.HandoverMean < 0.1 || got.HandoverMean > 0.4 {
					t.Errorf("entry %.3f s, handover %.3f s, want them within the model's 0.02-0.15 and 0.1-0.4 s", got.EntryMean, got.HandoverMean)
				}
				for _, r := range got.Rows {
					if r.SeedSpread <= r.Noise {
						t.Errorf("figure %s: seed spread %g, want it above the noise %g (the same jobs are compared)", r.Figure, r.SeedSpread, r.Noise)
					}
				}
				if !strings.Contains(report, "AGREE, every figure within") {
					t.Errorf("the report does not say the run agrees")
				}
			}
		})
	}
}

func with(m stackModel, f func(*stackModel)) stackModel {
	f(&m)
	return m
}

func TestCompareIsDeterministic(t *testing.T) {
	for _, s := range lane.Strategies {
		c := Config{Jobs: 40, Trials: 50, SeedRuns: 10, Strategy: s}.WithDefaults()
		m := stackModel{lanes: c.Lanes, entry: uniformIn(0, 0.1), handover: uniformIn(0.1, 0.2)}.measure(t, c, 3)
		a, err := Compare(context.Background(), m)
		if err != nil {
			t.Fatalf("%s: Compare() error = %v", s, err)
		}
		b, err := Compare(context.Background(), m)
		if err != nil {
			t.Fatalf("%s: Compare() error = %v", s, err)
		}
		if !reflect.DeepEqual(a, b) {
			t.Errorf("%s: Compare() gave different results for the same measurement", s)
		}
	}
}

func TestCompareRefuses(t *testing.T) {
	c := Config{Jobs: 20}.WithDefaults()
	good := stackModel{lanes: c.Lanes, entry: uniformIn(0, 0.1), handover: uniformIn(0.1, 0.2)}.measure(t, c, 3)
	tests := []struct {
		name   string
		change func(m *Measurement)
	}{
		{name: "no jobs", change: func(m *Measurement) { m.Jobs = nil }},
		{name: "jobs out of order", change: func(m *Measurement) { m.Jobs[0], m.Jobs[1] = m.Jobs[1], m.Jobs[0] }},
		{name: "another workload's jobs", change: func(m *Measurement) { m.Name = "other" }},
		{name: "unknown strategy", change: func(m *Measurement) { m.Config.Strategy = "fastest" }},
		{name: "a job submitted before the one ahead of it", change: func(m *Measurement) { m.Jobs[1].Submit = m.Jobs[0].Submit - 1 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := good
			m.Jobs = slices.Clone(good.Jobs)
			tt.change(&m)
			if _, err := Compare(context.Background(), m); err == nil {
				t.Errorf("Compare() = nil error, want one")
			}
		})
	}
}

// A strategy that binds each job to the first free lane is predicted by the simulator's model of its
// waiting groups, which with no bind latency of its own waits as the ideal semaphore: a stack that
// binds so agrees, and one with lanes chosen on arrival does not.
func TestCompareBindOnFree(t *testing.T) {
	name := ""
	for _, s := range sim.Specs() {
		if s.BindOnFree {
			name = s.Name
		}
	}
	if name == "" {
		t.Skip("the simulator has no strategy that binds on a free lane")
	}
	c := Config{Strategy: name, Jobs: 60, Trials: 100, SeedRuns: 20, Seed: 5}.WithDefaults()
	free := stackModel{lanes: c.Lanes, entry: uniformIn(0.02, 0.15), handover: uniformIn(0.1, 0.4), semaphore: true, slotLanes: true}
	tests := []struct {
		name      string
		model     stackModel
		wantAgree bool
	}{
		{name: "jobs bound to the first free lane agree", model: free, wantAgree: true},
		{name: "jobs bound to a lane on arrival disagree", model: with(free, func(m *stackModel) { m.semaphore, m.slotLanes = false, false })},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _ := compareAndLog(t, tt.model.measure(t, c, 11))
			if got.Agree != tt.wantAgree {
				t.Errorf("Agree = %v, want %v: %s", got.Agree, tt.wantAgree, got.Verdict())
			}
			if !got.BindOnFree || got.LanesFixed || got.SimLanes != nil {
				t.Errorf("BindOnFree %v, LanesFixed %v, SimLanes %v; want a bind-on-free run whose lanes are not compared", got.BindOnFree, got.LanesFixed, got.SimLanes)
			}
			for _, r := range got.Rows {
				if r.Predicted != r.Ideal {
					t.Errorf("figure %s predicted %g, ideal %g: binding on a free lane is the ideal semaphore", r.Figure, r.Predicted, r.Ideal)
				}
			}
		})
	}
}

// compareAndLog compares a measurement with its prediction, logs the report and returns both.
func compareAndLog(t *testing.T, m Measurement) (Comparison, string) {
	t.Helper()
	got, err := Compare(context.Background(), m)
	if err != nil {
		t.Fatalf("Compare() error = %v", err)
	}
	var buf bytes.Buffer
	if err := WriteText(&buf, []Result{{Measurement: m, Comparison: got}}); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", buf.String())
	return got, buf.String()
}
