package sim_test

import (
	"context"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lane"
	"github.com/sfnlimit/sfnlimit/internal/tools/sim"
)

func smallCells() []sim.Cell {
	return []sim.Cell{
		{Kind: sim.Poisson, Load: 0.8, Sigma: 1, Lanes: 5, Jobs: 4000, Runs: 3, Warmup: 400},
		{Kind: sim.Poisson, Load: 0.9, Sigma: 1.5, Lanes: 10, IDs: sim.RandomIDs, Jobs: 4000, Runs: 2, Warmup: 400},
		{Kind: sim.Burst, Sigma: 0.5, Lanes: 5, Jobs: 50, Runs: 20},
	}
}

func TestRunCellIsDeterministic(t *testing.T) {
	ctx := context.Background()
	specs := sim.Specs()
	for _, c := range smallCells() {
		a, err := sim.RunCell(ctx, c, 7, specs)
		if err != nil {
			t.Fatalf("RunCell(%s) error = %v", c, err)
		}
		b, err := sim.RunCell(ctx, c, 7, specs)
		if err != nil {
			t.Fatalf("RunCell(%s) error = %v", c, err)
		}
		if !reflect.DeepEqual(a, b) {
			t.Errorf("RunCell(%s, seed 7) twice gave different results", c)
		}
		other, err := sim.RunCell(ctx, c, 8, specs)
		if err != nil {
			t.Fatalf("RunCell(%s) error = %v", c, err)
		}
		if reflect.DeepEqual(a.Ideal, other.Ideal) {
			t.Errorf("RunCell(%s) with seeds 7 and 8 gave the same ideal figures, want fresh draws", c)
		}
	}
	// A strategy's figures do not depend on the strategies beside it.
	alone, err := sim.SpecsNamed([]string{"two-choices"})
	if err != nil {
		t.Fatalf("SpecsNamed error = %v", err)
	}
	c := smallCells()[0]
	all, err := sim.RunCell(ctx, c, 7, specs)
	if err != nil {
		t.Fatalf("RunCell(%s) error = %v", c, err)
	}
	one, err := sim.RunCell(ctx, c, 7, alone)
	if err != nil {
		t.Fatalf("RunCell(%s) error = %v", c, err)
	}
	for _, o := range all.Strategies {
		if o.Strategy == "two-choices" && !reflect.DeepEqual(o, one.Strategies[0]) {
			t.Errorf("RunCell(%s): two-choices alone and beside others gave different figures", c)
		}
	}
	// Workers only share out the cells.
	onWorker, err := sim.RunGrid(ctx, smallCells(), 3, specs, 1)
	if err != nil {
		t.Fatalf("RunGrid error = %v", err)
	}
	three, err := sim.RunGrid(ctx, smallCells(), 3, specs, 3)
	if err != nil {
		t.Fatalf("RunGrid error = %v", err)
	}
	if !reflect.DeepEqual(onWorker, three) {
		t.Errorf("RunGrid on 1 and on 3 workers gave different results")
	}
	for i, r := range three {
		if r.Cell != smallCells()[i] {
			t.Errorf("RunGrid result %d is for %s, want %s", i, r.Cell, smallCells()[i])
		}
	}
}

func TestRunCellFigures(t *testing.T) {
	ctx := context.Background()
	for _, c := range smallCells() {
		r, err := sim.RunCell(ctx, c, 1, sim.Specs())
		if err != nil {
			t.Fatalf("RunCell(%s) error = %v", c, err)
		}
		wantJobs := c.Runs * (c.Jobs - c.Warmup)
		for _, s := range append([]sim.Stats{r.Ideal}, statsOf(r)...) {
			if s.Jobs != wantJobs || len(s.RunP99Waits) != c.Runs {
				t.Errorf("%s: %d jobs measured over %d runs, want %d over %d", c, s.Jobs, len(s.RunP99Waits), wantJobs, c.Runs)
			}
			if !(0 <= s.P50Wait && s.P50Wait <= s.P99Wait) || s.MeanWait < 0 {
				t.Errorf("%s: waits mean %g, p50 %g, p99 %g, want 0 <= p50 <= p99", c, s.MeanWait, s.P50Wait, s.P99Wait)
			}
			if s.Backlogged > 0 && !(s.Utilization > 0 && s.Utilization <= 1+1e-9) {
				t.Errorf("%s: utilization while backlogged %g, want in (0, 1]", c, s.Utilization)
			}
		}
		// Work-conserving: while a job waits, every slot is busy.
		if r.Ideal.Backlogged > 0 && math.Abs(r.Ideal.Utilization-1) > 1e-9 {
			t.Errorf("%s: ideal utilization while backlogged = %g, want 1", c, r.Ideal.Utilization)
		}
	}
	// The figures point the way queueing theory does: at load 0.8 over 5 lanes, joining the least
	// loaded lane waits far less at p99 than a uniformly random lane (about 9 against 34).
	r, err := sim.RunCell(ctx, smallCells()[0], 1, sim.Specs())
	if err != nil {
		t.Fatalf("RunCell error = %v", err)
	}
	p99 := map[string]float64{}
	for _, s := range r.Strategies {
		p99[s.Strategy] = s.P99Wait
	}
	if !(p99["least-loaded"] < p99["uniform"]/2) || !(r.Ideal.P99Wait < p99["least-loaded"]) {
		t.Errorf("%s: p99 waits %v and ideal %g, want ideal < least-loaded < uniform / 2", r.Cell, p99, r.Ideal.P99Wait)
	}
	// First-free without a bind latency is the ideal, figure for figure.
	for _, o := range r.Strategies {
		if o.Strategy == "first-free" && !reflect.DeepEqual(o.Stats, r.Ideal) {
			t.Errorf("%s: first-free's figures %+v, want the ideal's %+v", r.Cell, o.Stats, r.Ideal)
		}
	}
}

func statsOf(r sim.CellResult) []sim.Stats {
	out := make([]sim.Stats, len(r.Strategies))
	for i, s := range r.Strategies {
		out[i] = s.Stats
	}
	return out
}

func TestRunCellRefusesBadCells(t *testing.T) {
	tests := []struct {
		name string
		give sim.Cell
	}{
		{name: "no kind", give: sim.Cell{Sigma: 1, Lanes: 5, Jobs: 10, Runs: 1}},
		{name: "no lanes", give: sim.Cell{Kind: sim.Burst, Sigma: 1, Jobs: 10, Runs: 1}},
		{name: "no runs", give: sim.Cell{Kind: sim.Burst, Sigma: 1, Lanes: 5, Jobs: 10}},
		{name: "no load", give: sim.Cell{Kind: sim.Poisson, Sigma: 1, Lanes: 5, Jobs: 10, Runs: 1}},
		{name: "all warm-up", give: sim.Cell{Kind: sim.Poisson, Load: 0.5, Sigma: 1, Lanes: 5, Jobs: 10, Runs: 1, Warmup: 10}},
		{name: "negative sigma", give: sim.Cell{Kind: sim.Burst, Sigma: -1, Lanes: 5, Jobs: 10, Runs: 1}},
		{name: "unknown ids", give: sim.Cell{Kind: sim.Burst, Sigma: 1, Lanes: 5, IDs: "uuid7", Jobs: 10, Runs: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := sim.RunCell(context.Background(), tt.give, 1, sim.Specs()); err == nil {
				t.Errorf("RunCell(%+v) = nil error, want one", tt.give)
			}
			if _, err := sim.RunGrid(context.Background(), []sim.Cell{smallCells()[0], tt.give}, 1, sim.Specs(), 2); err == nil {
				t.Errorf("RunGrid with %+v = nil error, want one", tt.give)
			}
		})
	}
}

func TestRatio(t *testing.T) {
	tests := []struct {
		name           string
		giveV, giveIdl float64
		want           float64
		wantOK         bool
	}{
		{name: "plain", giveV: 6, giveIdl: 2, want: 3, wantOK: true},
		{name: "both zero", giveV: 0, giveIdl: 0, want: 1, wantOK: true},
		{name: "ideal zero", giveV: 5, giveIdl: 0, want: math.Inf(1), wantOK: false},
		{name: "strategy zero", giveV: 0, giveIdl: 2, want: 0, wantOK: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := sim.Ratio(tt.giveV, tt.giveIdl)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("Ratio(%g, %g) = %g, %v, want %g, %v", tt.giveV, tt.giveIdl, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestLeastLoadedPicksAnEmptiestLane(t *testing.T) {
	ctx := context.Background()
	j := job.Job{Type: sim.JobType, ID: "x"}
	occ := []int{1, 0, 3, 0, 2, 0}
	s := sim.LeastLoaded(rand.New(rand.NewPCG(1, 2)))
	counts := map[int]int{}
	for range 3000 {
		ln, err := s.Lane(ctx, j, occ)
		if err != nil {
			t.Fatalf("LeastLoaded.Lane(%v) error = %v", occ, err)
		}
		counts[ln]++
	}
	// Lanes 2, 4 and 6 tie at 0: each about a third of the time, and never another lane.
	if len(counts) != 3 {
		t.Errorf("LeastLoaded.Lane(%v) chose lanes %v, want only 2, 4 and 6", occ, counts)
	}
	for _, ln := range []int{2, 4, 6} {
		if counts[ln] < 850 || counts[ln] > 1150 {
			t.Errorf("LeastLoaded.Lane(%v) chose lane %d %d times of 3000, want about 1000", occ, ln, counts[ln])
		}
	}
	if ln, _ := sim.LeastLoadedFirst().Lane(ctx, j, occ); ln != 2 {
		t.Errorf("LeastLoadedFirst.Lane(%v) = %d, want 2", occ, ln)
	}
	if ln, _ := s.Lane(ctx, j, []int{4, 4, 1, 4}); ln != 3 {
		t.Errorf("LeastLoaded.Lane([4 4 1 4]) = %d, want 3", ln)
	}
}

func TestTwoChoicesTakesTheEmptierOfTwo(t *testing.T) {
	ctx := context.Background()
	j := job.Job{Type: sim.JobType, ID: "x"}
	s := sim.TwoChoices(rand.New(rand.NewPCG(3, 4)))
	for range 200 {
		// Two lanes: both are always looked at, so the emptier one always wins.
		if ln, _ := s.Lane(ctx, j, []int{5, 0}); ln != 2 {
			t.Fatalf("TwoChoices.Lane([5 0]) = %d, want 2", ln)
		}
	}
	// Of three lanes, the fullest is never chosen: it loses to whichever other lane it is drawn with.
	counts := map[int]int{}
	for range 3000 {
		ln, _ := s.Lane(ctx, j, []int{1, 9, 0})
		counts[ln]++
	}
	if counts[2] != 0 || counts[1] == 0 || counts[3] <= counts[1] {
		t.Errorf("TwoChoices.Lane([1 9 0]) over 3000 jobs chose %v, want lane 3 most, lane 1 sometimes, lane 2 never", counts)
	}
}

func TestRoundRobinCycles(t *testing.T) {
	s := sim.RoundRobin()
	var got []int
	for range 7 {
		ln, err := s.Lane(context.Background(), job.Job{}, make([]int, 3))
		if err != nil {
			t.Fatalf("RoundRobin.Lane error = %v", err)
		}
		got = append(got, ln)
	}
	if want := []int{1, 2, 3, 1, 2, 3, 1}; !reflect.DeepEqual(got, want) {
		t.Errorf("RoundRobin over 3 lanes = %v, want %v", got, want)
	}
}

// The router's own strategies come first, in lane.Strategies' order, and only they are marked real.
func TestSpecsListsTheRoutersStrategiesFirst(t *testing.T) {
	specs := sim.Specs()
	for i, name := range lane.Strategies {
		if specs[i].Name != name || !specs[i].Real {
			t.Errorf("Specs()[%d] = %s (real %v), want the router's %s", i, specs[i].Name, specs[i].Real, name)
		}
	}
	for _, s := range specs[len(lane.Strategies):] {
		if s.Real {
			t.Errorf("Specs() marks %s real, but the router has no such strategy (lane.Strategies = %v)", s.Name, lane.Strategies)
		}
		if _, err := lane.CheckChoosable(s.Name); err == nil {
			t.Errorf("%s can be chosen for the router (lane.CheckChoosable), but Specs() lists it as a model", s.Name)
		}
	}
}

func TestSpecsNamed(t *testing.T) {
	got, err := sim.SpecsNamed([]string{"least-loaded", "uniform", "random"})
	if err != nil || len(got) != 3 || got[0].Name != "least-loaded" || got[1].Name != "uniform" || got[2].Name != "random" ||
		got[0].Real || got[1].Real || !got[2].Real {
		t.Errorf("SpecsNamed(least-loaded, uniform, random) = %+v, %v, want those in order, only random the router's own", got, err)
	}
	if _, err := sim.SpecsNamed([]string{"random", "fastest"}); err == nil {
		t.Errorf("SpecsNamed(random, fastest) = nil error, want one")
	}
}
