package sim

import (
	"context"
	"fmt"
	"math"

	"github.com/sfnlimit/sfnlimit/internal/lambda/lane"
)

// FirstFree is the first-free strategy's mechanism, in virtual time. The router puts each job in one
// of its type's lane.WaitingGroups(N) waiting groups, chosen by lane.WaitingGroup (the router's own
// code); each group is a FIFO message group. The starter receives a batch of a group's first
// messages, binds them in order to free lanes, and parks the group at the first message that finds
// no lane free (one record per group, with its head's submission time). A lane freed by a job's end
// wakes the parked group whose head was submitted earliest.
//
// A group is served one batch at a time: while the starter binds a batch, one message after another,
// the group's later messages wait, and a freed lane wakes only a parked group. (So a group binds at
// most one job per GroupHold, whatever the batch size, and the model needs none.) With no latency that is the ideal semaphore
// exactly (each group is FIFO, so the earliest head of all the groups is the earliest job waiting);
// with latency, a lane can stay free while the job that would take it waits behind its group's batch,
// and jobs can start out of their global order.
type FirstFree struct {
	// BindLatency is how long a bind takes from the moment it takes a free lane to its job's start,
	// in units of the mean duration: the lane is held and idle meanwhile (the starter's lease query,
	// bound lease and copy to the lane's group; the lanes queue's delivery of the copy; the claim and
	// StartExecution). On the stack it is part of the handover (make bench-local measures it).
	BindLatency float64
	// GroupHold is how long each bind keeps its waiting group from serving its next message: the
	// binds of a batch go one after another, and the group's next batch comes once the last is done
	// (its messages stay in flight until the starter returns). At most BindLatency on the stack.
	GroupHold float64
}

// Name is the model's name in tables: first-free, with its latencies when it has any.
func (m FirstFree) Name() string {
	switch {
	case m.BindLatency == 0 && m.GroupHold == 0:
		return lane.FirstFree
	case m.GroupHold == m.BindLatency:
		return fmt.Sprintf("%s+%g", lane.FirstFree, m.BindLatency)
	}
	return fmt.Sprintf("%s+%g/%g", lane.FirstFree, m.BindLatency, m.GroupHold)
}

func (m FirstFree) validate() error {
	for _, v := range []float64{m.BindLatency, m.GroupHold} {
		if !(v >= 0) || math.IsInf(v, 0) {
			return fmt.Errorf("first-free: bind latency %g and group hold %g must be finite and at least 0", m.BindLatency, m.GroupHold)
		}
	}
	return nil
}

// Group states.
const (
	groupIdle   = iota // no message in flight; an idle group has no job waiting
	groupBusy          // a batch is being bound
	groupParked        // its head is parked until a release wakes it
)

// RunFirstFree runs w through n lanes under the first-free mechanism m. Result.Lanes is the lane each
// job was bound to (which free lane makes no difference to the waits); a job waits from its arrival
// until its start, its bind latency included, and holds its lane from its bind until its end.
func RunFirstFree(ctx context.Context, w Workload, n int, m FirstFree, win Window) (Result, error) {
	if n < 1 {
		return Result{}, fmt.Errorf("run %s first-free over %d lanes: need at least one", w.Name, n)
	}
	if err := m.validate(); err != nil {
		return Result{}, err
	}
	if err := w.validate(); err != nil {
		return Result{}, err
	}
	jobs := w.Len()
	if jobs > math.MaxInt32 {
		return Result{}, fmt.Errorf("workload %s: %d jobs is too many", w.Name, jobs)
	}
	res := Result{Slots: n, Lanes: make([]int, jobs), Starts: make([]float64, jobs)}
	if jobs == 0 {
		return res, nil
	}
	groups := lane.WaitingGroups(n)
	var (
		qs      = make([]queue, groups)
		state   = make([]int, groups)
		groupOf = make([]int32, jobs)
		free    = make([]int32, n) // the free lanes, as a stack
		parked  intHeap            // the heads of the parked groups (job indices: arrival order)
		ends    endHeap            // job ends, with the lane each frees
		starts  endHeap            // bound jobs' starts, with the job
		ready   endHeap            // when a busy group's batch is done, with the group
		running int                // jobs running
		waiting int                // jobs arrived and not started (queued, parked or binding)
		now     = w.Arrivals[0]
		lastEnd = now
	)
	for i := range jobs {
		groupOf[i] = int32(lane.WaitingGroup(w.Job(i), n))
	}
	for k := range free {
		free[k] = int32(n - k) // lane 1 on top
	}
	advance := func(t float64) {
		if waiting > 0 {
			if d := math.Min(t, win.To) - math.Max(now, win.From); d > 0 {
				res.Backlogged += d
				res.Busy += d * float64(running)
			}
		}
		now = t
	}
	start := func(i int) {
		res.Starts[i] = now
		waiting--
		running++
		end := now + w.Durations[i]
		lastEnd = math.Max(lastEnd, end)
		ends.push(end, res.Lanes[i]-1)
	}
	// serve lets idle group g, which has jobs waiting, bind a batch to the free lanes, or park.
	serve := func(g int) {
		for qs[g].len() > 0 {
			if len(free) == 0 {
				state[g] = groupParked
				parked.push(qs[g].front())
				return
			}
			k := min(len(free), qs[g].len())
			for b := range k {
				i, _ := qs[g].pop()
				res.Lanes[i] = int(free[len(free)-1])
				free = free[:len(free)-1]
				if at := now + float64(b)*m.GroupHold + m.BindLatency; at > now {
					starts.push(at, i)
				} else {
					start(i)
				}
			}
			if done := now + float64(k)*m.GroupHold; done > now {
				state[g] = groupBusy
				ready.push(done, g)
				return
			}
		}
		state[g] = groupIdle
	}
	for next, events := 0, 0; next < jobs || ends.len()+starts.len()+ready.len() > 0; events++ {
		if events&0xfff == 0 {
			if err := ctx.Err(); err != nil {
				return Result{}, fmt.Errorf("run %s first-free: %w", w.Name, err)
			}
		}
		// At one instant: ends first (a freed lane serves what waits), then batches done, then starts,
		// then arrivals.
		arrival := math.Inf(1)
		if next < jobs {
			arrival = w.Arrivals[next]
		}
		switch {
		case ends.len() > 0 && ends.top() <= min(arrival, top(&ready), top(&starts)):
			t, ln := ends.pop()
			advance(t)
			running--
			free = append(free, int32(ln+1))
			if parked.len() > 0 {
				serve(int(groupOf[parked.pop()]))
			}
		case ready.len() > 0 && ready.top() <= min(arrival, top(&starts)):
			t, g := ready.pop()
			advance(t)
			serve(g)
		case starts.len() > 0 && starts.top() <= arrival:
			t, i := starts.pop()
			advance(t)
			start(i)
		default:
			i := next
			next++
			advance(arrival)
			waiting++
			g := int(groupOf[i])
			qs[g].push(i)
			if state[g] == groupIdle {
				serve(g)
			}
		}
	}
	res.Makespan = lastEnd - w.Arrivals[0]
	return res, nil
}

func top(h *endHeap) float64 {
	if h.len() == 0 {
		return math.Inf(1)
	}
	return h.top()
}

// intHeap is a binary min-heap of job indices.
type intHeap []int32

func (h *intHeap) len() int { return len(*h) }

func (h *intHeap) push(i int) {
	*h = append(*h, int32(i))
	a := *h
	for c := len(a) - 1; c > 0; {
		p := (c - 1) / 2
		if a[p] <= a[c] {
			break
		}
		a[p], a[c] = a[c], a[p]
		c = p
	}
}

func (h *intHeap) pop() int {
	a := *h
	out := a[0]
	last := len(a) - 1
	a[0] = a[last]
	a = a[:last]
	for p := 0; ; {
		c := 2*p + 1
		if c >= last {
			break
		}
		if c+1 < last && a[c+1] < a[c] {
			c++
		}
		if a[p] <= a[c] {
			break
		}
		a[p], a[c] = a[c], a[p]
		p = c
	}
	*h = a
	return int(out)
}
