package simworld

import (
	"cmp"
	"container/heap"
	"flag"
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

var (
	flagScale       = flag.Float64("scale", 0, "TestScale's factor: AWS's quotas and the issue's shapes divided by it (0: TestScale skips)")
	flagScaleShapes = flag.String("shapes", "", "TestScale's shapes (comma-separated names; empty: all)")
	flagScaleLimit  = flag.Int("limit", 5000, "TestScale's limit of one-type's and many-keys' type, at AWS's scale (before -scale divides it)")
)

// scaleDuration is each scale job's work: 15 s, so that a limit L sustains L/15 starts a second,
// above the StartExecution refill (300/s) at limit 5,000.
const scaleDuration = 15 * time.Second

// scaleShape is one shape of the scale benchmark at factor f.
type scaleShape struct {
	name  string
	shape func(r *rand.Rand, f float64) *Shape
	// perType: the shape divides each type's limit and keys by f, and so what each type's partition
	// keys hold and serve (AWSModel.PartitionScale f); otherwise only the number of types (1).
	perType bool
}

func scaleShapes() []scaleShape {
	n := func(x, f float64) int { return max(1, int(math.Round(x/f))) }
	return []scaleShape{
		{"one-type", func(r *rand.Rand, f float64) *Shape {
			// One type, limit 5,000, a backlog of 200,000 jobs.
			s := &Shape{Types: map[string]int{"hot": n(float64(*flagScaleLimit), f)}}
			for range n(200000, f) {
				s.Jobs = append(s.Jobs, ShapeJob{Type: "hot", At: time.Duration(r.Int64N(int64(time.Second))), Duration: scaleDuration})
			}
			return s
		}, true},
		{"many-types", func(r *rand.Rand, f float64) *Shape {
			// 1,000 types at one start a second each (Poisson), limit 30 (twice what 1/s of 15 s
			// jobs holds), for 2 minutes.
			s := &Shape{Types: map[string]int{}}
			for i := range n(1000, f) {
				typ := fmt.Sprintf("t%04d", i)
				s.Types[typ] = 30
				for at := time.Duration(0); ; {
					at += time.Duration(r.ExpFloat64() * float64(time.Second))
					if at > 2*time.Minute {
						break
					}
					s.Jobs = append(s.Jobs, ShapeJob{Type: typ, At: at, Duration: scaleDuration})
				}
			}
			return s
		}, false},
		{"many-keys", func(r *rand.Rand, f float64) *Shape {
			// One type with 100,000 keys, key cap 2, limit 5,000, a backlog of two jobs a key.
			keys := n(100000, f)
			s := &Shape{Types: map[string]int{"keyed": n(float64(*flagScaleLimit), f)}, KeyLimits: map[string]int{"keyed": 2}}
			for range 2 * keys {
				k := fmt.Sprintf("k%06d", r.IntN(keys))
				s.Jobs = append(s.Jobs, ShapeJob{Type: "keyed", Key: k, At: time.Duration(r.Int64N(int64(time.Second))), Duration: scaleDuration})
			}
			return s
		}, true},
	}
}

// TestScale is the scale benchmark (make bench-scale): the real handlers in the AWS model's world
// (AWS's latencies, and its quotas divided by -scale), without faults, for each of issue 26's
// shapes divided by -scale, with and without batches. It prints, per shape: jobs, simulated time,
// sustained starts a second, p99 wait against an ideal semaphore of the same limit, AWS calls and
// DynamoDB write units per job, and each quota's peak use, the first to saturate named. The
// invariants are checked as in every run; a violation fails it. It asserts nothing on the figures.
//
//	go test ./internal/tools/simworld -run TestScale -v -timeout 30m -args -scale 100
func TestScale(t *testing.T) {
	f := *flagScale
	if f <= 0 {
		t.Skip("a benchmark: -args -scale F runs it (make bench-scale)")
	}
	var want map[string]bool
	if *flagScaleShapes != "" {
		want = map[string]bool{}
		for _, s := range strings.Split(*flagScaleShapes, ",") {
			want[s] = true
		}
	}
	var out strings.Builder
	fmt.Fprintf(&out, "scale factor %g: AWS's quotas, limits, keys, types and jobs divided by it; durations as on AWS\n", f)
	for _, sh := range scaleShapes() {
		if want != nil && !want[sh.name] {
			continue
		}
		for _, batches := range []float64{0, 0.3} {
			s := sh.shape(rand.New(rand.NewPCG(1, 0x5ca1e)), f)
			cfg := DefaultConfig()
			cfg.Faults, cfg.BatchShare, cfg.Shape, cfg.Trace = Faults{}, batches, s, false
			cfg.AWS = &AWSModel{Scale: f, Enforce: true}
			if !sh.perType {
				cfg.AWS.PartitionScale = 1
			}
			cfg.StarterConcurrency = max(2, int(math.Round(50/f)))
			began := time.Now()
			var w *World
			var vs []Violation
			synctest.Test(t, func(*testing.T) {
				w = New(1, cfg)
				vs = w.Run()
			})
			wall := time.Since(began)
			if len(vs) > 0 {
				t.Errorf("%s batches=%g: %d violations; first: %s", sh.name, batches, len(vs), vs[0])
			}
			scaleReport(&out, sh.name, batches, f, s, w, wall)
		}
	}
	t.Log("\n" + out.String())
}

// scaleReport prints one run's figures.
func scaleReport(out *strings.Builder, name string, batches, f float64, s *Shape, w *World, wall time.Duration) {
	jobs := len(w.order)
	var first, last time.Time
	var waitsAll, ideal []time.Duration
	starts := 0
	for typ := range s.Types {
		waitsAll = append(waitsAll, waits(w, typ)...)
	}
	ideal = idealWaits(s, f)
	for _, e := range w.sfn.order {
		if e.meta.Attempt != 1 || e.spec == nil {
			continue
		}
		starts++
		if first.IsZero() || e.start.Before(first) {
			first = e.start
		}
		if e.start.After(last) {
			last = e.start
		}
	}
	rate := 0.0
	w.aws.span = last.Sub(first)
	if span := w.aws.span.Seconds(); span > 0 {
		rate = float64(starts) / span
	}
	fmt.Fprintf(out, "\n%s, batches %g: %d jobs, %s simulated (%s wall, %.1f s per 1,000 jobs); partition keys divided by %g\n", name, batches, jobs,
		w.Stats.VirtualTime.Round(time.Second), wall.Round(time.Second), wall.Seconds()*1000/float64(max(jobs, 1)), w.aws.model.partitionScale())
	fmt.Fprintf(out, "  sustained %.1f starts/s (x%g = %.0f at AWS scale); wait p50 %s p99 %s, ideal p99 %s (a semaphore of the limit under the StartExecution bucket)\n",
		rate, f, rate*f, pct(waitsAll, 0.5).Round(10*time.Millisecond), pct(waitsAll, 0.99).Round(10*time.Millisecond), pct(ideal, 0.99).Round(10*time.Millisecond))
	fmt.Fprintf(out, "  AWS calls per job %.1f; DynamoDB write units per job %.1f\n", float64(w.Stats.Calls)/float64(jobs), w.aws.WCU/float64(jobs))
	tw := tabwriter.NewWriter(out, 0, 0, 1, ' ', 0)
	fmt.Fprintln(tw, "  quota\tpeak\tbound\tuse\t\t")
	var binding, saturated []string
	for _, q := range w.Quotas() {
		use := q.Peak / q.Bound
		how := "counted"
		if q.Enforced {
			how = fmt.Sprintf("enforced, %d refused", q.Refused)
		}
		fmt.Fprintf(tw, "  %s\t%.1f\t%.0f\t%.0f%%\t%s\t%s\n", q.Name, q.Peak, q.Bound, 100*use, how, q.Note)
		switch {
		case q.Refused > 0:
			binding = append(binding, fmt.Sprintf("%s (%d calls refused)", q.Name, q.Refused))
		case use >= 1 && !q.Enforced:
			saturated = append(saturated, fmt.Sprintf("%s (%.0f%%, not enforced: AWS would refuse past it)", q.Name, 100*use))
		}
	}
	tw.Flush()
	fmt.Fprintf(out, "  binding (an enforced quota that refused calls): %s\n", cmp.Or(strings.Join(binding, "; "), "none"))
	fmt.Fprintf(out, "  saturated, counted only: %s\n", cmp.Or(strings.Join(saturated, "; "), "none"))
}

// idealWaits are the waits of s's jobs under a perfect FIFO semaphore per type, of its limit,
// granting at once in arrival order, under the account's StartExecution bucket at factor f (key
// caps ignored).
func idealWaits(s *Shape, f float64) []time.Duration {
	b := newBucket(1300/f, 300/f)
	js := slices.Clone(s.Jobs)
	slices.SortStableFunc(js, func(a, b ShapeJob) int { return int(a.At - b.At) })
	ends := map[string]*durHeap{}
	var out []time.Duration
	for _, j := range js {
		h := ends[j.Type]
		if h == nil {
			h = &durHeap{}
			ends[j.Type] = h
		}
		start := j.At
		if h.Len() >= s.Types[j.Type] {
			start = max(start, heap.Pop(h).(time.Duration))
		}
		for !b.take(epoch.Add(start)) {
			start += time.Duration(float64(time.Second) / b.refill)
		}
		heap.Push(h, start+j.Duration)
		out = append(out, start-j.At)
	}
	return out
}

type durHeap []time.Duration

func (h durHeap) Len() int           { return len(h) }
func (h durHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h durHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *durHeap) Push(x any)        { *h = append(*h, x.(time.Duration)) }
func (h *durHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
