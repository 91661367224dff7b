package simworld

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"text/tabwriter"
	"time"
)

// poolMean is the mean job duration of the pool benchmark.
const poolMean = 60 * time.Second

// poolJobs are n jobs of typ: submitted every poolMean on average (Poisson) from the run's start, or
// all in its first second (backlog), each working an exponential time of mean poolMean (5 s at least).
func poolJobs(r *rand.Rand, typ string, n int, backlog bool) []ShapeJob {
	var out []ShapeJob
	at := time.Duration(0)
	for range n {
		if backlog {
			at = time.Duration(r.Int64N(int64(time.Second)))
		} else {
			at += time.Duration(r.ExpFloat64() * float64(poolMean))
		}
		d := max(time.Duration(r.ExpFloat64()*float64(poolMean)), 5*time.Second)
		out = append(out, ShapeJob{Type: typ, At: at, Duration: d})
	}
	return out
}

// poolRun plays one shape without faults and returns its world.
func poolRun(t *testing.T, seed uint64, s *Shape) *World {
	var w *World
	var vs []Violation
	cfg := DefaultConfig()
	cfg.Faults, cfg.BatchShare, cfg.Shape, cfg.Trace = Faults{}, 0, s, false
	synctest.Test(t, func(*testing.T) {
		w = New(seed, cfg)
		vs = w.Run()
	})
	if len(vs) > 0 {
		t.Fatalf("seed %d: %d violations; first: %s", seed, len(vs), vs[0])
	}
	return w
}

// waits are the first attempts' waits (start - submission) of typ's jobs in w.
func waits(w *World, typ string) []time.Duration {
	var out []time.Duration
	for _, e := range w.sfn.order {
		if e.meta.Type == typ && e.meta.Attempt == 1 && e.spec != nil {
			out = append(out, e.start.Sub(epoch.Add(e.spec.submitAt)))
		}
	}
	return out
}

// slotTime is each type's execution time (running jobs x seconds) within [from, to).
func slotTime(w *World, from, to time.Time) map[string]float64 {
	out := map[string]float64{}
	for _, e := range w.sfn.order {
		a, b := e.start, e.stop
		if b.IsZero() || b.After(to) {
			b = to
		}
		if a.Before(from) {
			a = from
		}
		if b.After(a) {
			out[e.meta.Type] += b.Sub(a).Seconds()
		}
	}
	return out
}

// lastSubmittedStart is when the last of typ's jobs started: its backlog lasted until then.
func lastStart(w *World, typ string) time.Time {
	var last time.Time
	for _, e := range w.sfn.order {
		if e.meta.Type == typ && e.start.After(last) {
			last = e.start
		}
	}
	return last
}

// TestPoolFairness runs the real handlers in the simulated world, without faults, with two types
// (10 lanes each) in one pool of 10, and logs the figures of the pool benchmark:
//
//   - light, one job per mean duration (60 s), with the pool to itself and beside heavy's backlog of
//     1,000 jobs: a slot freed goes to the member running fewest, so light's jobs wait for the next
//     slot to free, not behind heavy's backlog (checked: light's p99 is under a tenth of heavy's
//     median wait, and heavy uses the slots light leaves: the pool is never idle while heavy waits);
//
//   - shares 3:1, both backlogged: each type's share of the pool's slot-time while both wait is
//     within 5% of its share (checked), and, logged, the same with jobs of mean 5 s and 1 s, where
//     the shares give way to arrival order (docs/design.md, "Handovers").
//
//     go test ./internal/tools/simworld -run TestPoolFairness -v     (make bench-pools)
func TestPoolFairness(t *testing.T) {
	env := func(shares string) map[string]string {
		return map[string]string{"POOL_CAPS": "psp=10", "TYPE_POOLS": "heavy=psp,light=psp", "TYPE_POOL_SHARES": shares}
	}
	types := map[string]int{"heavy": 10, "light": 10}
	const seeds = 3
	var out strings.Builder
	tw := tabwriter.NewWriter(&out, 0, 0, 1, ' ', 0)
	fmt.Fprintln(tw, "shape\tlight jobs\tlight wait p50\tlight wait p99\theavy wait p50\tpool slot-time used (heavy+light)\t")
	var alone, shared, heavyP50 []time.Duration
	for seed := uint64(1); seed <= seeds; seed++ {
		r := rand.New(rand.NewPCG(seed, 0xfa1))
		light := poolJobs(r, "light", 80, false)
		heavy := poolJobs(r, "heavy", 1000, true)
		w := poolRun(t, seed, &Shape{Types: types, Jobs: light, Env: env("")})
		alone = append(alone, waits(w, "light")...)
		w = poolRun(t, seed, &Shape{Types: types, Jobs: append(append([]ShapeJob{}, heavy...), light...), Env: env("")})
		shared = append(shared, waits(w, "light")...)
		heavyP50 = append(heavyP50, waits(w, "heavy")...)
		// While heavy's backlog waits, the pool is used whole: heavy takes what light leaves.
		from, to := epoch.Add(time.Minute), lastStart(w, "heavy")
		used := slotTime(w, from, to)
		occ := (used["heavy"] + used["light"]) / (10 * to.Sub(from).Seconds())
		if occ < 0.97 {
			t.Errorf("seed %d: the pool's 10 slots were %.1f%% used while heavy's backlog waited; want all but the handovers", seed, 100*occ)
		}
		fmt.Fprintf(tw, "beside heavy's backlog (seed %d)\t%d\t%s\t%s\t%s\t%.1f%%\t\n", seed, len(light), percentile(waits(w, "light"), 0.5),
			percentile(waits(w, "light"), 0.99), percentile(waits(w, "heavy"), 0.5), 100*occ)
	}
	fmt.Fprintf(tw, "light with the pool to itself (%d seeds)\t%d\t%s\t%s\t-\t-\t\n", seeds, len(alone), percentile(alone, 0.5), percentile(alone, 0.99))
	fmt.Fprintf(tw, "light beside heavy's backlog (%d seeds)\t%d\t%s\t%s\t%s\t-\t\n", seeds, len(shared), percentile(shared, 0.5), percentile(shared, 0.99), percentile(heavyP50, 0.5))
	tw.Flush()
	if p99, h := pct(shared, 0.99), pct(heavyP50, 0.5); p99 > h/10 {
		t.Errorf("light's p99 wait beside heavy's backlog is %s, heavy's median %s: light waits behind the backlog", p99, h)
	}
	t.Logf("pool of 10, heavy and light with 10 lanes each, jobs of mean %s:\n%s", poolMean, out.String())

	out.Reset()
	fmt.Fprintln(tw, "seed\theavy (share 3)\tlight (share 1)\twant\t")
	for seed := uint64(1); seed <= seeds; seed++ {
		r := rand.New(rand.NewPCG(seed, 0x3a1))
		jobs := append(poolJobs(r, "heavy", 400, true), poolJobs(r, "light", 400, true)...)
		w := poolRun(t, seed, &Shape{Types: types, Jobs: jobs, Env: env("heavy=3")})
		from, to := epoch.Add(time.Minute), minTime(lastStart(w, "heavy"), lastStart(w, "light"))
		used := slotTime(w, from, to)
		h := used["heavy"] / (used["heavy"] + used["light"])
		fmt.Fprintf(tw, "%d\t%.1f%%\t%.1f%%\t75%% / 25%%\t\n", seed, 100*h, 100*(1-h))
		if math.Abs(h-0.75) > 0.05*0.75 || math.Abs((1-h)-0.25) > 0.05*0.25 {
			t.Errorf("seed %d: heavy had %.1f%% of the pool's slot-time while both waited, light %.1f%%; want 75%% and 25%% within 5%%", seed, 100*h, 100*(1-h))
		}
	}
	tw.Flush()
	t.Logf("shares 3:1, both backlogged (400 jobs each), share of the pool's slot-time while both waited:\n%s", out.String())

	// The same with shorter jobs, logged: binds come faster, a head spends more of its time on its
	// way from the queue, and a head on its way takes a slot it finds free whoever's turn it is
	// (docs/design.md, "Handovers").
	out.Reset()
	fmt.Fprintln(tw, "mean job	binds a second	heavy (share 3)	light (share 1)	pool used	")
	for _, mean := range []time.Duration{5 * time.Second, time.Second} {
		r := rand.New(rand.NewPCG(1, 0x3a1))
		var jobs []ShapeJob
		for _, typ := range []string{"heavy", "light"} {
			for range 400 {
				d := max(time.Duration(r.ExpFloat64()*float64(mean)), mean/4)
				jobs = append(jobs, ShapeJob{Type: typ, At: time.Duration(r.Int64N(int64(time.Second))), Duration: d})
			}
		}
		w := poolRun(t, 1, &Shape{Types: types, Jobs: jobs, Env: env("heavy=3")})
		from, to := epoch.Add(10*mean), minTime(lastStart(w, "heavy"), lastStart(w, "light"))
		used := slotTime(w, from, to)
		h := used["heavy"] / (used["heavy"] + used["light"])
		occ := (used["heavy"] + used["light"]) / (10 * to.Sub(from).Seconds())
		fmt.Fprintf(tw, "%s	%.0f	%.1f%%	%.1f%%	%.1f%%	\n", mean, 10/mean.Seconds(), 100*h, 100*(1-h), 100*occ)
	}
	tw.Flush()
	t.Logf("shares 3:1, both backlogged, shorter jobs (seed 1), share of the pool's slot-time while both waited:\n%s", out.String())
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// pct is the p-th percentile of ds.
func pct(ds []time.Duration, p float64) time.Duration {
	s := append([]time.Duration(nil), ds...)
	if len(s) == 0 {
		return 0
	}
	slices.Sort(s)
	return s[min(len(s)-1, int(p*float64(len(s))))]
}
