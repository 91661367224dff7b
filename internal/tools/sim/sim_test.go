package sim_test

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lane"
	"github.com/sfnlimit/sfnlimit/internal/tools/sim"
)

// fixed routes the k-th job it sees to lanes[k], whatever the occupancy.
type fixed struct {
	lanes []int
	next  int
}

func (f *fixed) Lane(context.Context, job.Job, []int) (int, error) {
	ln := f.lanes[f.next]
	f.next++
	return ln, nil
}

func waits(w sim.Workload, r sim.Result) []float64 {
	out := make([]float64, w.Len())
	for i := range out {
		out[i] = r.Wait(w, i)
	}
	return out
}

func near(a, b []float64) bool {
	return slices.EqualFunc(a, b, func(x, y float64) bool { return math.Abs(x-y) < 1e-9 })
}

// The ideal semaphore against waits worked out by hand.
func TestRunSemaphoreByHand(t *testing.T) {
	tests := []struct {
		name         string
		giveSlots    int
		giveArrivals []float64
		giveDurs     []float64
		wantWaits    []float64
		wantMakespan float64
		wantUtil     float64 // while backlogged, over the whole run
	}{
		{
			// Slot A runs job 0 over [0,3]; slot B job 1 over [0,1], then job 2 over [1,3] (it was
			// queued before job 3 arrived at 1); job 3 starts at 3 on either; job 4 finds both free.
			name: "two slots", giveSlots: 2,
			giveArrivals: []float64{0, 0, 0, 1, 5}, giveDurs: []float64{3, 1, 2, 1, 1},
			wantWaits: []float64{0, 0, 1, 2, 0}, wantMakespan: 6, wantUtil: 1,
		},
		{
			// A: job 0 [0,4]. B: job 1 [0,2], job 4 [2,3], job 5 [3,5]. C: job 2 [0,1], job 3 [1,4].
			name: "three slots, a burst", giveSlots: 3,
			giveArrivals: []float64{0, 0, 0, 0, 0, 0}, giveDurs: []float64{4, 2, 1, 3, 1, 2},
			wantWaits: []float64{0, 0, 0, 1, 2, 3}, wantMakespan: 5, wantUtil: 1,
		},
		{
			// First come, first served: the short job 2 waits behind the long job 1.
			name: "one slot, FIFO", giveSlots: 1,
			giveArrivals: []float64{0, 0.5, 0.6}, giveDurs: []float64{1, 5, 0.1},
			wantWaits: []float64{0, 0.5, 5.4}, wantMakespan: 6.1, wantUtil: 1,
		},
		{
			// Job 0 ends at 2 as job 1 arrives: the end comes first, so job 1 does not wait.
			name: "an end and an arrival at the same moment", giveSlots: 1,
			giveArrivals: []float64{0, 2}, giveDurs: []float64{2, 1},
			wantWaits: []float64{0, 0}, wantMakespan: 3,
		},
		{
			name: "more slots than jobs", giveSlots: 5,
			giveArrivals: []float64{1, 1, 2}, giveDurs: []float64{10, 10, 10},
			wantWaits: []float64{0, 0, 0}, wantMakespan: 11,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := sim.Workload{Name: "hand", Arrivals: tt.giveArrivals, Durations: tt.giveDurs}
			got, err := sim.RunSemaphore(context.Background(), w, tt.giveSlots, sim.Always)
			if err != nil {
				t.Fatalf("RunSemaphore error = %v", err)
			}
			if gw := waits(w, got); !near(gw, tt.wantWaits) {
				t.Errorf("RunSemaphore waits = %v, want %v", gw, tt.wantWaits)
			}
			if math.Abs(got.Makespan-tt.wantMakespan) > 1e-9 {
				t.Errorf("RunSemaphore makespan = %g, want %g", got.Makespan, tt.wantMakespan)
			}
			u, ok := got.Utilization()
			if ok != (tt.wantUtil > 0) || math.Abs(u-tt.wantUtil) > 1e-9 {
				t.Errorf("RunSemaphore utilization = %g, %v, want %g", u, ok, tt.wantUtil)
			}
		})
	}
}

// Lanes against waits worked out by hand, with the lanes fixed in advance, beside the ideal on the
// same jobs.
func TestRunLanesByHand(t *testing.T) {
	// Lane 1: job 0 [0,2], job 1 [2,4], job 3 [4,5]. Lane 2: job 2 [1,2], then idle.
	// Backlogged over [0,4]: job 1 waits over [0,2], job 3 over [1.5,4]. Lanes busy: 1 over [0,1],
	// 2 over [1,2], 1 over [2,4]: 5 lane-units of 8, so 62.5%.
	w := sim.Workload{Name: "hand", Arrivals: []float64{0, 0, 1, 1.5}, Durations: []float64{2, 2, 1, 1}}
	ctx := context.Background()
	got, err := sim.RunLanes(ctx, w, 2, &fixed{lanes: []int{1, 1, 2, 1}}, sim.Always)
	if err != nil {
		t.Fatalf("RunLanes error = %v", err)
	}
	if gw, want := waits(w, got), []float64{0, 2, 0, 2.5}; !near(gw, want) {
		t.Errorf("RunLanes waits = %v, want %v", gw, want)
	}
	if want := []int{1, 1, 2, 1}; !slices.Equal(got.Lanes, want) {
		t.Errorf("RunLanes lanes = %v, want %v", got.Lanes, want)
	}
	if u, ok := got.Utilization(); !ok || math.Abs(u-0.625) > 1e-9 {
		t.Errorf("RunLanes utilization = %g, %v, want 0.625", u, ok)
	}
	if got.Makespan != 5 {
		t.Errorf("RunLanes makespan = %g, want 5", got.Makespan)
	}
	// Within [0,1] only lane 1 runs while job 1 waits.
	win, err := sim.RunLanes(ctx, w, 2, &fixed{lanes: []int{1, 1, 2, 1}}, sim.Window{From: 0, To: 1})
	if err != nil {
		t.Fatalf("RunLanes error = %v", err)
	}
	if u, ok := win.Utilization(); !ok || math.Abs(u-0.5) > 1e-9 || win.Backlogged != 1 {
		t.Errorf("RunLanes over [0,1]: utilization = %g, %v over %g, want 0.5 over 1", u, ok, win.Backlogged)
	}
	// The ideal: A runs job 0 [0,2], B job 1 [0,2]; jobs 2 and 3 wait for 2.
	ideal, err := sim.RunSemaphore(ctx, w, 2, sim.Always)
	if err != nil {
		t.Fatalf("RunSemaphore error = %v", err)
	}
	if gw, want := waits(w, ideal), []float64{0, 0, 1, 0.5}; !near(gw, want) {
		t.Errorf("RunSemaphore waits = %v, want %v", gw, want)
	}
}

// lindley is a single-server FIFO queue: each job starts at its arrival or at the previous job's end.
func lindley(w sim.Workload) []float64 {
	out := make([]float64, w.Len())
	end := math.Inf(-1)
	for i, a := range w.Arrivals {
		start := math.Max(a, end)
		out[i] = start - a
		end = start + w.Durations[i]
	}
	return out
}

func TestOneLaneIsASingleServerQueue(t *testing.T) {
	ctx := context.Background()
	for _, sigma := range []float64{0.5, 1.5} {
		w := sim.PoissonWorkload(rand.New(rand.NewPCG(1, 2)), "one", 5000, 0.9, sigma)
		want := lindley(w)
		ideal, err := sim.RunSemaphore(ctx, w, 1, sim.Always)
		if err != nil {
			t.Fatalf("RunSemaphore error = %v", err)
		}
		if got := waits(w, ideal); !slices.Equal(got, want) {
			t.Errorf("sigma %g: RunSemaphore(1 slot) waits differ from a single-server queue's", sigma)
		}
		for _, spec := range sim.Specs() {
			got, err := spec.RunOn(ctx, w, 1, rand.New(rand.NewPCG(3, 4)), sim.Always)
			if err != nil {
				t.Fatalf("%s: run error = %v", spec.Name, err)
			}
			if gw := waits(w, got); !slices.Equal(gw, want) {
				t.Errorf("sigma %g: %s over 1 lane: waits differ from a single-server queue's", sigma, spec.Name)
			}
		}
	}
}

// steadyMean is the mean of the waits after the first tenth, while the empty start wears off.
func steadyMean(ws []float64) float64 {
	ws = ws[len(ws)/10:]
	sum := 0.0
	for _, v := range ws {
		sum += v
	}
	return sum / float64(len(ws))
}

// Uniform random lanes split Poisson arrivals into independent M/G/1 queues, whose mean wait is the
// Pollaczek-Khinchine formula: load x E[S^2] / (2 (1 - load)), with E[S^2] = exp(sigma^2) here.
func TestUniformLanesMatchPollaczekKhinchine(t *testing.T) {
	const load, sigma, lanes = 0.5, 0.5, 4
	w := sim.PoissonWorkload(rand.New(rand.NewPCG(5, 6)), "pk", 400000, load*lanes, sigma)
	got, err := sim.RunLanes(context.Background(), w, lanes, sim.Uniform(rand.New(rand.NewPCG(7, 8))), sim.Always)
	if err != nil {
		t.Fatalf("RunLanes error = %v", err)
	}
	mean := steadyMean(waits(w, got))
	want := load * math.Exp(sigma*sigma) / (2 * (1 - load))
	t.Logf("uniform lanes: mean wait %.4f, Pollaczek-Khinchine %.4f", mean, want)
	if math.Abs(mean-want) > 0.03*want {
		t.Errorf("uniform lanes: mean wait = %.4f, want %.4f (Pollaczek-Khinchine) within 3%%", mean, want)
	}
}

// The ideal semaphore with exponential durations is an M/M/N queue: the share of jobs that wait is
// Erlang's C formula, and the mean wait that share divided by (N - offered load).
func TestSemaphoreMatchesErlangC(t *testing.T) {
	const slots, load, jobs = 5, 0.8, 1000000
	a := load * slots // offered load in erlangs, for mean duration 1
	rng := rand.New(rand.NewPCG(9, 10))
	w := sim.Workload{Name: "mmn", Arrivals: make([]float64, jobs), Durations: make([]float64, jobs)}
	t0 := 0.0
	for i := range jobs {
		t0 += rng.ExpFloat64() / a
		w.Arrivals[i], w.Durations[i] = t0, rng.ExpFloat64()
	}
	got, err := sim.RunSemaphore(context.Background(), w, slots, sim.Always)
	if err != nil {
		t.Fatalf("RunSemaphore error = %v", err)
	}
	mean, waited, ws := steadyMean(waits(w, got)), 0, waits(w, got)[jobs/10:]
	for _, v := range ws {
		if v > 0 {
			waited++
		}
	}
	share := float64(waited) / float64(len(ws))
	// Erlang C: P(wait) = (a^N/N! * N/(N-a)) / (sum_{k<N} a^k/k! + a^N/N! * N/(N-a)).
	sum, term := 0.0, 1.0
	for k := range slots {
		if k > 0 {
			term *= a / float64(k)
		}
		sum += term
	}
	top := term * a / slots * slots / (slots - a)
	wantShare := top / (sum + top)
	want := wantShare / (slots - a)
	t.Logf("semaphore: %.4f of jobs waited, mean wait %.4f; Erlang C %.4f and %.4f", share, mean, wantShare, want)
	if math.Abs(share-wantShare) > 0.015*wantShare {
		t.Errorf("semaphore of %d at load %g: %.4f of jobs waited, want %.4f (Erlang C) within 1.5%%", slots, load, share, wantShare)
	}
	if math.Abs(mean-want) > 0.04*want {
		t.Errorf("semaphore of %d at load %g: mean wait = %.4f, want %.4f (Erlang C) within 4%%", slots, load, mean, want)
	}
}

// badLane always answers the same lane, in range or not.
type badLane int

func (b badLane) Lane(context.Context, job.Job, []int) (int, error) { return int(b), nil }

func TestStrategiesStayInRange(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(11, 12))
	for _, spec := range sim.Specs() {
		if spec.New == nil {
			continue // chooses no lane on arrival
		}
		for _, n := range []int{1, 2, 3, 7, 50} {
			s, err := spec.New(rand.New(rand.NewPCG(13, uint64(n))))
			if err != nil {
				t.Fatalf("%s: New error = %v", spec.Name, err)
			}
			occ := make([]int, n)
			for i := range 2000 {
				switch i % 4 {
				case 0: // all equal
					for k := range occ {
						occ[k] = i % 3
					}
				case 1: // one empty lane among full ones
					for k := range occ {
						occ[k] = 5
					}
					occ[rng.IntN(n)] = 0
				default:
					for k := range occ {
						occ[k] = rng.IntN(4)
					}
				}
				j := job.Job{Type: sim.JobType, ID: "range-" + string(rune('a'+i%26)) + string(rune('a'+i/26%26))}
				got, err := s.Lane(ctx, j, occ)
				if err != nil || got < 1 || got > n {
					t.Fatalf("%s.Lane(%v) = %d, %v, want 1..%d", spec.Name, occ, got, err, n)
				}
			}
			w := sim.PoissonWorkload(rand.New(rand.NewPCG(14, 15)), "range", 3000, 0.9*float64(n), 1)
			res, err := sim.RunLanes(ctx, w, n, s, sim.Always)
			if err != nil {
				t.Fatalf("%s: RunLanes error = %v", spec.Name, err)
			}
			for i, ln := range res.Lanes {
				if ln < 1 || ln > n {
					t.Fatalf("%s over %d lanes: job %d in lane %d", spec.Name, n, i, ln)
				}
			}
		}
	}
	// The simulator refuses a lane out of range rather than invent one.
	w := sim.Workload{Name: "bad", Arrivals: []float64{0}, Durations: []float64{1}}
	for _, give := range []badLane{0, 4, -1} {
		if _, err := sim.RunLanes(ctx, w, 3, give, sim.Always); err == nil {
			t.Errorf("RunLanes with a strategy answering lane %d of 3 = nil error, want one", give)
		}
	}
}

// With many lanes and little load a job should never wait, whatever the strategy.
func TestNoWaitsAtLowLoad(t *testing.T) {
	ctx := context.Background()
	const lanes = 500
	specs := append(sim.Specs(), sim.Spec{Name: "ideal", Run: sim.RunSemaphore})
	run := func(spec sim.Spec, w sim.Workload) []float64 {
		t.Helper()
		res, err := spec.RunOn(ctx, w, lanes, rand.New(rand.NewPCG(16, 17)), sim.Always)
		if err != nil {
			t.Fatalf("%s: run error = %v", spec.Name, err)
		}
		return waits(w, res)
	}
	// Load 0.001: half a job arrives per unit of time among 500 lanes.
	w := sim.PoissonWorkload(rand.New(rand.NewPCG(18, 19)), "low", 20000, 0.001*lanes, 1)
	for _, spec := range specs {
		ws := run(spec, w)
		mean := 0.0
		waited := 0
		for _, v := range ws {
			mean += v
			if v > 0 {
				waited++
			}
		}
		mean /= float64(len(ws))
		if mean > 0.01 || waited > len(ws)/100 {
			t.Errorf("%s at load 0.001 over %d lanes: mean wait %g, %d of %d jobs waited, want about none", spec.Name, lanes, mean, waited, len(ws))
		}
	}
	// Load 0.1: about 50 jobs at work at once, far from 500, so a strategy that sees an empty lane
	// always takes one, as the ideal does.
	w = sim.PoissonWorkload(rand.New(rand.NewPCG(20, 21)), "tenth", 20000, 0.1*lanes, 1)
	for _, spec := range specs {
		if spec.Name != "first-free" && spec.Name != "least-loaded" && spec.Name != "least-loaded-first" && spec.Name != "ideal" {
			continue
		}
		for i, v := range run(spec, w) {
			if v != 0 {
				t.Fatalf("%s at load 0.1 over %d lanes: job %d waited %g, want 0", spec.Name, lanes, i, v)
			}
		}
	}
}

// countingChooser counts the calls to the chooser it wraps.
type countingChooser struct {
	lane.Chooser
	calls  int
	limits map[int]int
}

func (c *countingChooser) Choose(ctx context.Context, j job.Job, limit int) (int, error) {
	c.calls++
	c.limits[limit]++
	return c.Chooser.Choose(ctx, j, limit)
}

func TestTheRoutersChooserRoutes(t *testing.T) {
	ctx := context.Background()
	const lanes = 7
	for _, ids := range []sim.IDScheme{sim.SequentialIDs, sim.RandomIDs} {
		w := sim.PoissonWorkload(rand.New(rand.NewPCG(22, 23)), "hashed", 5000, 0.8*lanes, 1)
		w.IDs = ids
		counter := &countingChooser{Chooser: lane.Hashed{}, limits: map[int]int{}}
		got, err := sim.RunLanes(ctx, w, lanes, sim.FromChooser(counter), sim.Always)
		if err != nil {
			t.Fatalf("RunLanes error = %v", err)
		}
		if counter.calls != w.Len() || counter.limits[lanes] != w.Len() {
			t.Errorf("%s ids: Choose called %d times with limits %v, want %d times with limit %d", ids, counter.calls, counter.limits, w.Len(), lanes)
		}
		used := map[int]bool{}
		for i, ln := range got.Lanes {
			want, err := lane.Hashed{}.Choose(ctx, w.Job(i), lanes)
			if err != nil || ln != want {
				t.Fatalf("%s ids: job %d (%s) ran in lane %d, want lane.Hashed's %d (%v)", ids, i, w.Job(i).ID, ln, want, err)
			}
			used[ln] = true
		}
		if len(used) != lanes {
			t.Errorf("%s ids: jobs used lanes %v, want all %d", ids, used, lanes)
		}
		// The "random" strategy of the benchmark is the router's own: the same lanes.
		specs, err := sim.SpecsNamed([]string{"random"})
		if err != nil || !specs[0].Real {
			t.Fatalf("SpecsNamed(random) = %+v, %v, want the router's strategy", specs, err)
		}
		s, err := specs[0].New(rand.New(rand.NewPCG(1, 1)))
		if err != nil {
			t.Fatalf("random: New error = %v", err)
		}
		again, err := sim.RunLanes(ctx, w, lanes, s, sim.Always)
		if err != nil || !slices.Equal(again.Lanes, got.Lanes) {
			t.Errorf("%s ids: the random strategy routed differently from lane.Hashed (%v)", ids, err)
		}
	}
}

func TestJobIDsAreValidAndDistinct(t *testing.T) {
	for _, ids := range []sim.IDScheme{sim.SequentialIDs, sim.RandomIDs} {
		w := sim.BurstWorkload(rand.New(rand.NewPCG(1, 2)), "s1-r0", 20000, 1)
		w.IDs = ids
		seen := map[string]bool{}
		for i := range w.Len() {
			j := w.Job(i)
			if err := job.ValidateID(j.ID); err != nil {
				t.Fatalf("%s ids: job %d id %q: %v", ids, i, j.ID, err)
			}
			if err := job.ValidateType(j.Type); err != nil {
				t.Fatalf("job type %q: %v", j.Type, err)
			}
			if seen[j.ID] {
				t.Fatalf("%s ids: job %d repeats id %q", ids, i, j.ID)
			}
			seen[j.ID] = true
		}
	}
}

func TestRunRefusesBadInput(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name  string
		give  sim.Workload
		lanes int
	}{
		{name: "no lanes", give: sim.Workload{Arrivals: []float64{0}, Durations: []float64{1}}, lanes: 0},
		{name: "durations missing", give: sim.Workload{Arrivals: []float64{0, 1}, Durations: []float64{1}}, lanes: 2},
		{name: "arrivals out of order", give: sim.Workload{Arrivals: []float64{1, 0}, Durations: []float64{1, 1}}, lanes: 2},
		{name: "negative duration", give: sim.Workload{Arrivals: []float64{0}, Durations: []float64{-1}}, lanes: 2},
		{name: "NaN duration", give: sim.Workload{Arrivals: []float64{0}, Durations: []float64{math.NaN()}}, lanes: 2},
		{name: "unknown ids", give: sim.Workload{IDs: "uuid7", Arrivals: []float64{0}, Durations: []float64{1}}, lanes: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := sim.RunSemaphore(ctx, tt.give, tt.lanes, sim.Always); err == nil {
				t.Errorf("RunSemaphore(%+v, %d) = nil error, want one", tt.give, tt.lanes)
			}
			if _, err := sim.RunLanes(ctx, tt.give, tt.lanes, sim.RoundRobin(), sim.Always); err == nil {
				t.Errorf("RunLanes(%+v, %d) = nil error, want one", tt.give, tt.lanes)
			}
		})
	}
}

func TestRunStopsWhenCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	w := sim.PoissonWorkload(rand.New(rand.NewPCG(1, 2)), "stop", 100, 1, 1)
	if _, err := sim.RunLanes(ctx, w, 2, sim.RoundRobin(), sim.Always); err == nil {
		t.Errorf("RunLanes with a cancelled context = nil error, want one")
	}
}

// An independent model of lanes: each lane keeps the ends of its jobs, a job's occupancy count is
// how many of them are still to come at its arrival, and it starts at its arrival or at the end of
// the lane's last job. RunLanes must agree with it exactly, for a strategy that reads the counts.
func TestRunLanesMatchesAnIndependentModel(t *testing.T) {
	ctx := context.Background()
	for _, n := range []int{1, 3, 10} {
		w := sim.PoissonWorkload(rand.New(rand.NewPCG(24, uint64(n))), "model", 20000, 0.9*float64(n), 1)
		ends := make([][]float64, n) // per lane, the ends of its jobs, in order
		gone := make([]int, n)       // per lane, how many of those ends have passed
		occ := make([]int, n)
		want := make([]float64, w.Len())
		wantLanes := make([]int, w.Len())
		for i, a := range w.Arrivals {
			for l := range ends {
				for gone[l] < len(ends[l]) && ends[l][gone[l]] <= a {
					gone[l]++
				}
				occ[l] = len(ends[l]) - gone[l]
			}
			ln, _ := sim.LeastLoadedFirst().Lane(ctx, w.Job(i), occ)
			l := ln - 1
			start := a
			if k := len(ends[l]); k > 0 {
				start = math.Max(a, ends[l][k-1])
			}
			ends[l] = append(ends[l], start+w.Durations[i])
			want[i], wantLanes[i] = start-a, ln
		}
		got, err := sim.RunLanes(ctx, w, n, sim.LeastLoadedFirst(), sim.Always)
		if err != nil {
			t.Fatalf("RunLanes error = %v", err)
		}
		if !slices.Equal(got.Lanes, wantLanes) || !slices.Equal(waits(w, got), want) {
			t.Errorf("%d lanes: RunLanes(least-loaded-first) differs from the independent model", n)
		}
	}
}
