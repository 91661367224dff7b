package sim_test

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/sfnlimit/sfnlimit/internal/lambda/lane"
	"github.com/sfnlimit/sfnlimit/internal/tools/sim"
)

// First-free against waits worked out by hand: two lanes, so one waiting group, three jobs at once.
func TestRunFirstFreeByHand(t *testing.T) {
	w := sim.Workload{Name: "hand", Arrivals: []float64{0, 0, 0}, Durations: []float64{2, 3, 1}}
	tests := []struct {
		name         string
		give         sim.FirstFree
		wantWaits    []float64
		wantLanes    []int
		wantMakespan float64
		wantUtil     float64
	}{
		{
			// The ideal: jobs 0 and 1 start at once; job 2 takes lane 1 when job 0 ends at 2.
			name: "no latency", wantWaits: []float64{0, 0, 2}, wantLanes: []int{1, 2, 1}, wantMakespan: 3, wantUtil: 1,
		},
		{
			// Each job starts 0.5 after its bind; the group binds all it can at once. Job 2 parks,
			// job 0 ends at 2.5 and wakes it: it starts at 3. Backlogged over [0,3]: no job runs over
			// [0,0.5], two over [0.5,2.5], one over [2.5,3]: 4.5 lane-units of 6.
			name: "bind latency, no group hold", give: sim.FirstFree{BindLatency: 0.5},
			wantWaits: []float64{0.5, 0.5, 3}, wantLanes: []int{1, 2, 1}, wantMakespan: 4, wantUtil: 4.5 / 6,
		},
		{
			// Job 0's bind holds the group until 0.5, so job 1 binds only then and starts at 1; job 2
			// parks at 1 and starts at 3 as before. Runs: none over [0,0.5], one over [0.5,1], two over
			// [1,2.5], one over [2.5,3]: 4 lane-units of 6.
			name: "bind latency and group hold", give: sim.FirstFree{BindLatency: 0.5, GroupHold: 0.5},
			wantWaits: []float64{0.5, 1, 3}, wantLanes: []int{1, 2, 1}, wantMakespan: 4, wantUtil: 4.0 / 6,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := sim.RunFirstFree(context.Background(), w, 2, tt.give, sim.Always)
			if err != nil {
				t.Fatalf("RunFirstFree error = %v", err)
			}
			if gw := waits(w, got); !near(gw, tt.wantWaits) {
				t.Errorf("waits = %v, want %v", gw, tt.wantWaits)
			}
			if !slices.Equal(got.Lanes, tt.wantLanes) {
				t.Errorf("lanes = %v, want %v", got.Lanes, tt.wantLanes)
			}
			if math.Abs(got.Makespan-tt.wantMakespan) > 1e-9 {
				t.Errorf("makespan = %g, want %g", got.Makespan, tt.wantMakespan)
			}
			if u, ok := got.Utilization(); !ok || math.Abs(u-tt.wantUtil) > 1e-9 {
				t.Errorf("utilization = %g, %v, want %g", u, ok, tt.wantUtil)
			}
		})
	}
}

// With no latency, first-free's waiting groups are the ideal semaphore exactly: each group is FIFO,
// so the earliest head of all the groups that a freed lane wakes is the earliest job waiting.
func TestFirstFreeWithoutLatencyIsTheIdeal(t *testing.T) {
	ctx := context.Background()
	for _, n := range []int{1, 3, 10, 11, 50, 200} {
		for k, w := range []sim.Workload{
			sim.PoissonWorkload(rand.New(rand.NewPCG(31, uint64(n))), "ff", 20000, 0.95*float64(n), 1.5),
			sim.BurstWorkload(rand.New(rand.NewPCG(32, uint64(n))), "ffb", 10*n, 1),
		} {
			if lane.WaitingGroups(n) > 1 {
				// The workload must spread over the groups, or the test would not test them.
				used := map[int]bool{}
				for i := range w.Len() {
					used[lane.WaitingGroup(w.Job(i), n)] = true
				}
				if len(used) != lane.WaitingGroups(n) {
					t.Fatalf("%d lanes: jobs in %d of %d waiting groups", n, len(used), lane.WaitingGroups(n))
				}
			}
			win := sim.Window{From: w.Arrivals[w.Len()/10], To: w.Arrivals[w.Len()-1]}
			ideal, err := sim.RunSemaphore(ctx, w, n, win)
			if err != nil {
				t.Fatalf("RunSemaphore error = %v", err)
			}
			got, err := sim.RunFirstFree(ctx, w, n, sim.FirstFree{}, win)
			if err != nil {
				t.Fatalf("RunFirstFree error = %v", err)
			}
			if !slices.Equal(got.Starts, ideal.Starts) {
				t.Errorf("%d lanes, workload %d: first-free starts differ from the ideal semaphore's", n, k)
			}
			if got.Makespan != ideal.Makespan || math.Abs(got.Backlogged-ideal.Backlogged) > 1e-6 || math.Abs(got.Busy-ideal.Busy) > 1e-6 {
				t.Errorf("%d lanes, workload %d: makespan, backlogged, busy %g, %g, %g, want the ideal's %g, %g, %g",
					n, k, got.Makespan, got.Backlogged, got.Busy, ideal.Makespan, ideal.Backlogged, ideal.Busy)
			}
			// No lane runs two jobs at once.
			byLane := map[int][][2]float64{}
			for i, ln := range got.Lanes {
				if ln < 1 || ln > n {
					t.Fatalf("%d lanes: job %d in lane %d", n, i, ln)
				}
				byLane[ln] = append(byLane[ln], [2]float64{got.Starts[i], got.Starts[i] + w.Durations[i]})
			}
			for ln, spans := range byLane {
				slices.SortFunc(spans, func(a, b [2]float64) int { return cmpFloat(a[0], b[0]) })
				for s := 1; s < len(spans); s++ {
					if spans[s][0] < spans[s-1][1] {
						t.Fatalf("%d lanes: lane %d runs a job from %g while another runs until %g", n, ln, spans[s][0], spans[s-1][1])
					}
				}
			}
		}
	}
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

// The ideal with a latency (first-free without group hold) is the semaphore whose holds are each the
// latency longer, each start the latency later.
func TestIdealSpecIsTheSemaphoreWithLatency(t *testing.T) {
	ctx := context.Background()
	const n, d = 7, 0.05
	w := sim.PoissonWorkload(rand.New(rand.NewPCG(33, 34)), "lat", 20000, 0.9*n, 1)
	longer := w
	longer.Durations = make([]float64, w.Len())
	for i, v := range w.Durations {
		longer.Durations[i] = v + d
	}
	sem, err := sim.RunSemaphore(ctx, longer, n, sim.Always)
	if err != nil {
		t.Fatalf("RunSemaphore error = %v", err)
	}
	got, err := sim.IdealSpec(d).RunOn(ctx, w, n, nil, sim.Always)
	if err != nil {
		t.Fatalf("IdealSpec(%g) error = %v", d, err)
	}
	for i := range w.Len() {
		if math.Abs(got.Starts[i]-(sem.Starts[i]+d)) > 1e-9 {
			t.Fatalf("job %d starts at %g, want the lengthened semaphore's %g + %g", i, got.Starts[i], sem.Starts[i], d)
		}
	}
}

// The model routes with the router's own group choice: a burst into free lanes binds one job of a
// group per group hold, so each job starts after as many holds as it has jobs ahead in its group.
func TestFirstFreeUsesTheRoutersWaitingGroups(t *testing.T) {
	const n = 40 // 4 waiting groups
	w := sim.BurstWorkload(rand.New(rand.NewPCG(35, 36)), "groups", 30, 1)
	got, err := sim.RunFirstFree(context.Background(), w, n, sim.FirstFree{GroupHold: 1}, sim.Always)
	if err != nil {
		t.Fatalf("RunFirstFree error = %v", err)
	}
	ahead := map[int]int{}
	for i := range w.Len() {
		g := lane.WaitingGroup(w.Job(i), n)
		if want := float64(ahead[g]); got.Starts[i] != want {
			t.Errorf("job %d, waiting group %d: starts at %g, want %g (jobs ahead of it in its group)", i, g, got.Starts[i], want)
		}
		ahead[g]++
	}
	if len(ahead) < 2 {
		t.Errorf("the burst used %d waiting groups, want several", len(ahead))
	}
}

// A group hold costs throughput: a group binds at most one job per hold, so with holds long enough
// the waits grow well past the ideal's with the same latency, and they never fall below it.
func TestGroupHoldOnlyAddsWaits(t *testing.T) {
	ctx := context.Background()
	for _, n := range []int{5, 50} {
		w := sim.PoissonWorkload(rand.New(rand.NewPCG(37, uint64(n))), "hold", 40000, 0.9*float64(n), 1)
		mean := func(m sim.FirstFree) float64 {
			r, err := sim.RunFirstFree(ctx, w, n, m, sim.Always)
			if err != nil {
				t.Fatalf("RunFirstFree error = %v", err)
			}
			return steadyMean(waits(w, r))
		}
		ideal, small, large := mean(sim.FirstFree{BindLatency: 0.05}), mean(sim.FirstFree{BindLatency: 0.05, GroupHold: 0.01}), mean(sim.FirstFree{BindLatency: 0.05, GroupHold: 0.1})
		t.Logf("%d lanes: mean wait %.4f with no group hold, %.4f with 0.01, %.4f with 0.1", n, ideal, small, large)
		if !(ideal <= small && small < large && large > 1.5*ideal) {
			t.Errorf("%d lanes: mean waits %.4f, %.4f, %.4f for group holds 0, 0.01, 0.1; want them to grow, the last past 1.5 times the first", n, ideal, small, large)
		}
	}
}

func TestRunFirstFreeRefusesBadInput(t *testing.T) {
	ctx := context.Background()
	w := sim.Workload{Name: "bad", Arrivals: []float64{0, 1}, Durations: []float64{1, 1}}
	tests := []struct {
		name  string
		w     sim.Workload
		lanes int
		m     sim.FirstFree
	}{
		{name: "no lanes", w: w, lanes: 0},
		{name: "negative latency", w: w, lanes: 2, m: sim.FirstFree{BindLatency: -1}},
		{name: "NaN group hold", w: w, lanes: 2, m: sim.FirstFree{GroupHold: math.NaN()}},
		{name: "infinite latency", w: w, lanes: 2, m: sim.FirstFree{BindLatency: math.Inf(1)}},
		{name: "arrivals out of order", w: sim.Workload{Arrivals: []float64{1, 0}, Durations: []float64{1, 1}}, lanes: 2},
		{name: "job ids missing", w: sim.Workload{JobIDs: []string{"a"}, Arrivals: []float64{0, 1}, Durations: []float64{1, 1}}, lanes: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := sim.RunFirstFree(ctx, tt.w, tt.lanes, tt.m, sim.Always); err == nil {
				t.Errorf("RunFirstFree = nil error, want one")
			}
		})
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := sim.RunFirstFree(cancelled, w, 2, sim.FirstFree{}, sim.Always); err == nil {
		t.Errorf("RunFirstFree with a cancelled context = nil error, want one")
	}
}

func TestFirstFreeNames(t *testing.T) {
	for _, tt := range []struct {
		give sim.FirstFree
		want string
	}{
		{sim.FirstFree{}, "first-free"},
		{sim.FirstFree{BindLatency: 0.01, GroupHold: 0.01}, "first-free+0.01"},
		{sim.FirstFree{BindLatency: 0.01, GroupHold: 0.005}, "first-free+0.01/0.005"},
	} {
		if got := tt.give.Name(); got != tt.want {
			t.Errorf("%+v.Name() = %q, want %q", tt.give, got, tt.want)
		}
	}
}
