// Package sim simulates a type's lanes in virtual time, so lane strategies can be compared with an
// ideal N-slot semaphore on the same arrivals and durations.
//
// The model is the limiter's hold/release cycle with the AWS latencies left out. Under a lane
// strategy (random and the models beside it) a job is bound to a lane when it is routed, at its
// arrival. Each lane (one SQS FIFO message group) serves its jobs one at a time in FIFO order, and a
// job holds its lane from its start until its end, when the release lets the lane's next job start.
// The ideal semaphore is the same machine with one queue and N slots: a job starts as soon as any
// slot is free, in arrival order. The first-free strategy binds a job to a lane only when one is
// free, through its type's waiting groups (RunFirstFree), optionally with a bind latency. RunKeyed
// models per-key limits (issue 13): each key's jobs in a FIFO of their own, each key capped, beside
// today's single FIFO.
//
// The simulation is discrete-event: it jumps from one arrival or end to the next, so a run of a
// million jobs takes well under a second, and it is deterministic for a given workload and strategy.
// When a job ends at the moment another arrives, the end comes first: the freed lane or slot serves
// the arrival at once.
package sim

import (
	"context"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"strconv"

	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
)

// JobType is the type of every simulated job.
const JobType = "sim"

// IDScheme is how a workload's job ids look. A hashed lane choice depends on them.
type IDScheme string

// ID schemes.
const (
	// SequentialIDs are "{workload name}-{index}", like order numbers.
	SequentialIDs IDScheme = "sequential"
	// RandomIDs are 32 hex digits drawn for each job (from the workload name and the index), like
	// random UUIDs.
	RandomIDs IDScheme = "random"
)

// Workload is a list of jobs in arrival order: when each arrives and how long it holds its lane.
type Workload struct {
	// Name is part of every job id, so runs with different seeds route differently under a hashed
	// choice.
	Name string
	IDs  IDScheme // "" is SequentialIDs
	// JobIDs, when set, are the jobs' ids, one per arrival, in place of the scheme's (a workload
	// reordered from another keeps its jobs' ids).
	JobIDs    []string
	Arrivals  []float64 // non-decreasing
	Durations []float64 // at least 0, one per arrival
}

// Len is the number of jobs.
func (w Workload) Len() int { return len(w.Arrivals) }

// Job is job i as the router sees it: type JobType and an id unique within the workload.
func (w Workload) Job(i int) job.Job {
	if w.JobIDs != nil {
		return job.Job{Type: JobType, ID: w.JobIDs[i]}
	}
	if w.IDs == RandomIDs {
		h := fnv.New64a()
		h.Write([]byte(w.Name))
		x := h.Sum64() + uint64(i)*0x9e3779b97f4a7c15
		var buf [32]byte
		const hexDigits = "0123456789abcdef"
		for half := range 2 {
			v := splitmix64(x + uint64(half))
			for d := range 16 {
				buf[16*half+d] = hexDigits[v>>(60-4*d)&0xf]
			}
		}
		return job.Job{Type: JobType, ID: string(buf[:])}
	}
	return job.Job{Type: JobType, ID: w.Name + "-" + strconv.Itoa(i)}
}

// splitmix64 scrambles x (the finalizer of Steele, Lea and Flood's SplitMix64).
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

func (w Workload) validate() error {
	if w.IDs != "" && w.IDs != SequentialIDs && w.IDs != RandomIDs {
		return fmt.Errorf("workload %s: unknown id scheme %q", w.Name, w.IDs)
	}
	if len(w.Durations) != len(w.Arrivals) {
		return fmt.Errorf("workload %s has %d arrivals and %d durations", w.Name, len(w.Arrivals), len(w.Durations))
	}
	if w.JobIDs != nil && len(w.JobIDs) != len(w.Arrivals) {
		return fmt.Errorf("workload %s has %d arrivals and %d job ids", w.Name, len(w.Arrivals), len(w.JobIDs))
	}
	for i := range w.Arrivals {
		if i > 0 && w.Arrivals[i] < w.Arrivals[i-1] {
			return fmt.Errorf("workload %s: job %d arrives at %g, before job %d at %g", w.Name, i, w.Arrivals[i], i-1, w.Arrivals[i-1])
		}
		if !(w.Durations[i] >= 0) || math.IsInf(w.Durations[i], 0) {
			return fmt.Errorf("workload %s: job %d lasts %g", w.Name, i, w.Durations[i])
		}
	}
	return nil
}

// Lognormal draws a duration with mean 1 whose logarithm has standard deviation sigma.
func Lognormal(rng *rand.Rand, sigma float64) float64 {
	return math.Exp(sigma*rng.NormFloat64() - sigma*sigma/2)
}

// PoissonWorkload draws n jobs arriving as a Poisson process of the given rate (jobs per unit of
// time) with lognormal durations of mean 1.
func PoissonWorkload(rng *rand.Rand, name string, n int, rate, sigma float64) Workload {
	w := Workload{Name: name, Arrivals: make([]float64, n), Durations: make([]float64, n)}
	t := 0.0
	for i := range n {
		t += rng.ExpFloat64() / rate
		w.Arrivals[i] = t
		w.Durations[i] = Lognormal(rng, sigma)
	}
	return w
}

// BurstWorkload draws k jobs that all arrive at time 0, with lognormal durations of mean 1.
func BurstWorkload(rng *rand.Rand, name string, k int, sigma float64) Workload {
	w := Workload{Name: name, Arrivals: make([]float64, k), Durations: make([]float64, k)}
	for i := range k {
		w.Durations[i] = Lognormal(rng, sigma)
	}
	return w
}

// Strategy picks the lane a job joins when it is routed. occupancy[i] is the number of jobs queued
// or running in lane i+1 at that moment (the strategy must neither change nor keep the slice); the
// answer is a lane in 1..len(occupancy).
type Strategy interface {
	Lane(ctx context.Context, j job.Job, occupancy []int) (int, error)
}

// Window limits the utilization figures to the time from From to To; the waits of every job are
// kept either way.
type Window struct{ From, To float64 }

// Always is the window of the whole run.
var Always = Window{From: math.Inf(-1), To: math.Inf(1)}

// Result is what happened to each job of a workload in one run.
type Result struct {
	Slots  int       // lanes, or the semaphore's slots
	Lanes  []int     // the lane each job joined, 1..Slots (always 1 for the semaphore)
	Starts []float64 // when each job started
	// Makespan is the time from the first arrival to the last end.
	Makespan float64
	// Backlogged is the time within the window during which at least one job waited, and Busy the
	// lane-time spent running jobs during it.
	Backlogged, Busy float64
}

// Wait is how long job i of w waited from its arrival to its start.
func (r Result) Wait(w Workload, i int) float64 { return r.Starts[i] - w.Arrivals[i] }

// Utilization is the share of lanes that were running a job while some job waited, and false when
// no job ever waited within the window.
func (r Result) Utilization() (float64, bool) {
	if r.Backlogged <= 0 {
		return 0, false
	}
	return r.Busy / (r.Backlogged * float64(r.Slots)), true
}

// RunLanes runs w through n lanes, routing each job with s when it arrives.
func RunLanes(ctx context.Context, w Workload, n int, s Strategy, win Window) (Result, error) {
	if n < 1 {
		return Result{}, fmt.Errorf("run %s over %d lanes: need at least one", w.Name, n)
	}
	route := func(i int, occ []int) (int, error) {
		ln, err := s.Lane(ctx, w.Job(i), occ)
		if err != nil {
			return 0, fmt.Errorf("route job %d of %s: %w", i, w.Name, err)
		}
		if ln < 1 || ln > len(occ) {
			return 0, fmt.Errorf("route job %d of %s: strategy %T chose lane %d, want 1..%d", i, w.Name, s, ln, len(occ))
		}
		return ln - 1, nil
	}
	return run(ctx, w, n, 1, route, win)
}

// RunSemaphore runs w through the ideal semaphore of n slots: one FIFO queue, and a job starts as
// soon as any slot is free.
func RunSemaphore(ctx context.Context, w Workload, n int, win Window) (Result, error) {
	if n < 1 {
		return Result{}, fmt.Errorf("run %s on a semaphore of %d slots: need at least one", w.Name, n)
	}
	return run(ctx, w, 1, n, func(int, []int) (int, error) { return 0, nil }, win)
}

// queue is one FIFO group of waiting jobs, served by up to slots jobs at once.
type queue struct {
	waiting []int32
	head    int
}

func (q *queue) push(i int) { q.waiting = append(q.waiting, int32(i)) }

func (q *queue) len() int { return len(q.waiting) - q.head }

// front is the job at the head; the queue must not be empty.
func (q *queue) front() int { return int(q.waiting[q.head]) }

func (q *queue) pop() (int, bool) {
	if q.head == len(q.waiting) {
		return 0, false
	}
	i := q.waiting[q.head]
	q.head++
	if q.head == len(q.waiting) {
		q.waiting, q.head = q.waiting[:0], 0
	}
	return int(i), true
}

// run is the event loop shared by lanes (groups queues of one slot) and the semaphore (one queue of
// slots slots). route returns the queue, 0-based, that a job joins.
func run(ctx context.Context, w Workload, groups, slots int, route func(i int, occ []int) (int, error), win Window) (Result, error) {
	if err := w.validate(); err != nil {
		return Result{}, err
	}
	if len(w.Arrivals) > math.MaxInt32 {
		return Result{}, fmt.Errorf("workload %s: %d jobs is too many", w.Name, len(w.Arrivals))
	}
	n := w.Len()
	res := Result{Slots: groups * slots, Lanes: make([]int, n), Starts: make([]float64, n)}
	if n == 0 {
		return res, nil
	}
	var (
		qs      = make([]queue, groups)
		running = make([]int, groups)
		occ     = make([]int, groups) // queued + running per queue, what a strategy sees
		ends    endHeap
		busy    int // jobs running
		waiting int // jobs queued
		now     = w.Arrivals[0]
		lastEnd = now
	)
	advance := func(t float64) {
		if waiting > 0 {
			if d := math.Min(t, win.To) - math.Max(now, win.From); d > 0 {
				res.Backlogged += d
				res.Busy += d * float64(busy)
			}
		}
		now = t
	}
	start := func(i, g int) {
		res.Starts[i] = now
		running[g]++
		busy++
		end := now + w.Durations[i]
		lastEnd = math.Max(lastEnd, end)
		ends.push(end, g)
	}
	for next, events := 0, 0; next < n || ends.len() > 0; events++ {
		if events&0xfff == 0 {
			if err := ctx.Err(); err != nil {
				return Result{}, fmt.Errorf("run %s: %w", w.Name, err)
			}
		}
		if ends.len() > 0 && (next == n || ends.top() <= w.Arrivals[next]) {
			t, g := ends.pop()
			advance(t)
			running[g]--
			busy--
			occ[g]--
			if i, ok := qs[g].pop(); ok {
				waiting--
				start(i, g)
			}
			continue
		}
		i := next
		next++
		advance(w.Arrivals[i])
		g, err := route(i, occ)
		if err != nil {
			return Result{}, err
		}
		res.Lanes[i] = g + 1
		occ[g]++
		if running[g] < slots {
			start(i, g)
		} else {
			qs[g].push(i)
			waiting++
		}
	}
	res.Makespan = lastEnd - w.Arrivals[0]
	return res, nil
}

// endHeap is a binary min-heap of job ends, each with the queue whose slot it frees.
type endHeap struct {
	t []float64
	g []int32
}

func (h *endHeap) len() int           { return len(h.t) }
func (h *endHeap) top() float64       { return h.t[0] }
func (h *endHeap) less(a, b int) bool { return h.t[a] < h.t[b] }

func (h *endHeap) swap(a, b int) {
	h.t[a], h.t[b] = h.t[b], h.t[a]
	h.g[a], h.g[b] = h.g[b], h.g[a]
}

func (h *endHeap) push(t float64, g int) {
	h.t = append(h.t, t)
	h.g = append(h.g, int32(g))
	for c := len(h.t) - 1; c > 0; {
		p := (c - 1) / 2
		if !h.less(c, p) {
			break
		}
		h.swap(c, p)
		c = p
	}
}

func (h *endHeap) pop() (float64, int) {
	t, g := h.t[0], int(h.g[0])
	last := len(h.t) - 1
	h.swap(0, last)
	h.t, h.g = h.t[:last], h.g[:last]
	for p := 0; ; {
		c := 2*p + 1
		if c >= last {
			break
		}
		if c+1 < last && h.less(c+1, c) {
			c++
		}
		if !h.less(c, p) {
			break
		}
		h.swap(c, p)
		p = c
	}
	return t, g
}
