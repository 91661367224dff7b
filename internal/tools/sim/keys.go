package sim

import (
	"context"
	"fmt"
	"math"
	"slices"
)

// Per-key limits (issue 13). A job may carry a key (a tenant); a type has its limit (its lanes) and a
// cap on the jobs of one key that run at once. The keyed scheduler keeps each key's waiting jobs in
// one FIFO queue (one SQS FIFO message group per key), starts a job when the type has a free lane and
// the job's key runs fewer jobs than its cap, and hands a freed lane to the parked key that runs the
// fewest jobs; RunKeyed models it in virtual time, beside today's single FIFO as the baseline.

// KeyedWorkload is a workload whose jobs each belong to a key. "" is a key like any other here: the
// simulator gives every job of its scenarios a key.
type KeyedWorkload struct {
	Workload
	Keys []string // one per arrival
}

// Without is w without the jobs of key: the others keep their arrivals, durations and order, so a
// run with and a run without the key compare the same jobs.
func (w KeyedWorkload) Without(key string) KeyedWorkload {
	out := KeyedWorkload{Workload: Workload{Name: w.Name + "-without-" + key, IDs: w.IDs}}
	for i, k := range w.Keys {
		if k == key {
			continue
		}
		out.Arrivals = append(out.Arrivals, w.Arrivals[i])
		out.Durations = append(out.Durations, w.Durations[i])
		out.Keys = append(out.Keys, k)
		if w.JobIDs != nil {
			out.JobIDs = append(out.JobIDs, w.JobIDs[i])
		} else {
			// The job keeps its id, so a hashed choice would route it as before.
			out.JobIDs = append(out.JobIDs, w.Job(i).ID)
		}
	}
	return out
}

func (w KeyedWorkload) validate() error {
	if err := w.Workload.validate(); err != nil {
		return err
	}
	if len(w.Keys) != len(w.Arrivals) {
		return fmt.Errorf("workload %s has %d arrivals and %d keys", w.Name, len(w.Arrivals), len(w.Keys))
	}
	return nil
}

// KeyLimits are a type's limits: its lanes, and the cap of each key.
type KeyLimits struct {
	Limit int // the type's lanes
	// KeyLimit caps the jobs of any one key that run at once; 0 leaves keys uncapped.
	KeyLimit int
	// PerKey overrides KeyLimit for the keys it names; each at least 1.
	PerKey map[string]int
}

// Cap is how many of key's jobs may run at once: min(its limit, the type's), the type's when uncapped.
func (l KeyLimits) Cap(key string) int {
	c, ok := l.PerKey[key]
	if !ok {
		c = l.KeyLimit
	}
	if c == 0 {
		return l.Limit
	}
	return min(c, l.Limit)
}

func (l KeyLimits) validate() error {
	if l.Limit < 1 {
		return fmt.Errorf("key limits: the type's limit is %d, need at least 1", l.Limit)
	}
	if l.KeyLimit < 0 {
		return fmt.Errorf("key limits: the key limit is %d, need 0 (uncapped) or more", l.KeyLimit)
	}
	for k, c := range l.PerKey {
		if c < 1 {
			return fmt.Errorf("key limits: key %q's limit is %d, need at least 1 (a key capped at 0 never runs)", k, c)
		}
	}
	return nil
}

// KeyOrder is how a type's waiting jobs are served.
type KeyOrder string

// Orders.
const (
	// KeyedOrder is issue 13's scheduler: one FIFO queue per key and each key capped; a freed lane
	// goes to the eligible parked key (running fewer than its cap) that runs the fewest jobs, then to
	// the one whose head has waited longest for service (its park time: when the key last got a lane
	// or when its head arrived, whichever is later), then by key name.
	KeyedOrder KeyOrder = "keyed"
	// OldestHeadOrder is KeyedOrder with the freed lane going to the eligible key whose head was
	// submitted first (keys served in submission order, as first-free wakes its waiting groups): a
	// model to show what the fewest-running rule buys, not the scheduler.
	OldestHeadOrder KeyOrder = "keyed-oldest-head"
	// FIFOOrder is today's behaviour: one FIFO of all the type's jobs, no key caps; a job starts when
	// any lane is free, strictly in submission order (the ideal semaphore).
	FIFOOrder KeyOrder = "fifo"
)

// KeyOrders lists the orders, the scheduler first.
func KeyOrders() []KeyOrder { return []KeyOrder{KeyedOrder, OldestHeadOrder, FIFOOrder} }

// KeyStats are one key's figures in a run.
type KeyStats struct {
	Cap        int `json:"cap"` // the cap its order enforces (the type's limit under FIFOOrder)
	Jobs       int `json:"jobs"`
	MaxRunning int `json:"maxRunning"` // the most of its jobs that ran at once
	// Backlogged is the time within the window during which one of its jobs waited, and Busy its
	// running jobs times that time; MinRunning is the fewest of its jobs that ran over any stretch of
	// Backlogged (0 when Backlogged is 0). A key capped at c that runs alone has c throughout.
	Backlogged float64 `json:"backlogged"`
	Busy       float64 `json:"busy"`
	MinRunning int     `json:"minRunning"`
}

// MeanRunning is how many of the key's jobs ran on average while one of its jobs waited, and false
// when none ever waited.
func (s KeyStats) MeanRunning() (float64, bool) {
	if s.Backlogged <= 0 {
		return 0, false
	}
	return s.Busy / s.Backlogged, true
}

// KeyedResult is what happened in one keyed run. Result.Backlogged is the time during which any job
// waited, Result.Lanes the lane each job took (lanes are interchangeable: it is for checks).
type KeyedResult struct {
	Result
	Order      KeyOrder
	MaxRunning int // the most jobs that ran at once
	// Startable is the time within the window during which some waiting job's key ran fewer jobs than
	// its cap, so that the job could have started on a free lane, and StartableBusy the lane-time
	// spent running jobs during it. A key cap leaves lanes free on purpose while its key alone waits;
	// this is the time during which a free lane is lost work.
	Startable, StartableBusy float64
	Keys                     map[string]KeyStats
}

// StartableUtilization is the share of lanes that ran a job while a job waited that its key's cap
// let start, and false when there was no such time.
func (r KeyedResult) StartableUtilization() (float64, bool) {
	if r.Startable <= 0 {
		return 0, false
	}
	return r.StartableBusy / (r.Startable * float64(r.Slots)), true
}

// RunKeyed runs w through a type with limits l, serving its waiting jobs in order o. Within the
// window, it measures the time during which jobs waited (Result.Backlogged, and per key), the time
// during which a startable job waited (Startable), and the lanes busy during each.
//
// At one instant, ends come first and all of them free their lanes before any is handed out; then
// arrivals, one at a time in submission order.
func RunKeyed(ctx context.Context, w KeyedWorkload, l KeyLimits, o KeyOrder, win Window) (KeyedResult, error) {
	if err := l.validate(); err != nil {
		return KeyedResult{}, fmt.Errorf("run %s: %w", w.Name, err)
	}
	if !slices.Contains(KeyOrders(), o) {
		return KeyedResult{}, fmt.Errorf("run %s: unknown order %q", w.Name, o)
	}
	if err := w.validate(); err != nil {
		return KeyedResult{}, err
	}
	jobs := w.Len()
	if jobs > math.MaxInt32 {
		return KeyedResult{}, fmt.Errorf("workload %s: %d jobs is too many", w.Name, jobs)
	}
	res := KeyedResult{
		Result: Result{Slots: l.Limit, Lanes: make([]int, jobs), Starts: make([]float64, jobs)},
		Order:  o, Keys: map[string]KeyStats{},
	}
	// Keys by name, so that an index order is the name order.
	names := slices.Clone(w.Keys)
	slices.Sort(names)
	names = slices.Compact(names)
	keyOf := make([]int32, jobs)
	for i, k := range w.Keys {
		x, _ := slices.BinarySearch(names, k)
		keyOf[i] = int32(x)
	}
	stats := make([]KeyStats, len(names))
	for x, k := range names {
		stats[x].Cap = l.Cap(k)
		if o == FIFOOrder {
			stats[x].Cap = l.Limit
		}
		stats[x].MinRunning = math.MaxInt
	}
	for _, x := range keyOf {
		stats[x].Jobs++
	}
	finish := func() KeyedResult {
		for x, k := range names {
			if stats[x].Backlogged <= 0 {
				stats[x].MinRunning = 0
			}
			res.Keys[k] = stats[x]
		}
		return res
	}
	if jobs == 0 {
		return finish(), nil
	}
	// The scheduler serves groups: one per key, or under FIFOOrder one for all, capped at the limit.
	groups, groupOf := len(names), keyOf
	gcap := make([]int, groups)
	for x := range gcap {
		gcap[x] = stats[x].Cap
	}
	if o == FIFOOrder {
		groups, groupOf, gcap = 1, make([]int32, jobs), []int{l.Limit}
	}
	var (
		qs       = make([]queue, groups)
		grun     = make([]int, groups)     // jobs running per group
		parkedAt = make([]float64, groups) // a parked group's park time
		parked   []int32                   // the groups with jobs waiting: each has its head parked
		krun     = make([]int, len(names)) // jobs running per key
		kwait    = make([]int, len(names)) // jobs waiting per key
		waitKeys []int32                   // the keys with kwait above 0, in no order
		waitPos  = make([]int32, len(names))
		free     = make([]int32, l.Limit) // the free lanes, as a stack
		ends     endHeap                  // job ends, with the job
		started  = make([]bool, jobs)
		running  int
		waiting  int
		now      = w.Arrivals[0]
		lastEnd  = now
	)
	for x := range waitPos {
		waitPos[x] = -1
	}
	for k := range free {
		free[k] = int32(l.Limit - k) // lane 1 on top
	}
	// held says group g's head waits for its key's cap, not for a lane.
	held := func(g int32) bool { return gcap[g] < l.Limit && grun[g] >= gcap[g] }
	advance := func(t float64) {
		d := math.Min(t, win.To) - math.Max(now, win.From)
		now = t
		if d <= 0 || waiting == 0 {
			return
		}
		res.Backlogged += d
		res.Busy += d * float64(running)
		if slices.ContainsFunc(parked, func(g int32) bool { return !held(g) }) {
			res.Startable += d
			res.StartableBusy += d * float64(running)
		}
		for _, x := range waitKeys {
			s := &stats[x]
			s.Backlogged += d
			s.Busy += d * float64(krun[x])
			s.MinRunning = min(s.MinRunning, krun[x])
		}
	}
	setWaiting := func(x int32, delta int) {
		kwait[x] += delta
		waiting += delta
		switch {
		case kwait[x] > 0 && waitPos[x] < 0:
			waitPos[x] = int32(len(waitKeys))
			waitKeys = append(waitKeys, x)
		case kwait[x] == 0 && waitPos[x] >= 0:
			last := waitKeys[len(waitKeys)-1]
			waitKeys[waitPos[x]], waitPos[last] = last, waitPos[x]
			waitKeys, waitPos[x] = waitKeys[:len(waitKeys)-1], -1
		}
	}
	start := func(i int) error {
		if started[i] {
			return fmt.Errorf("run %s: job %d started twice", w.Name, i)
		}
		started[i] = true
		x, g := keyOf[i], groupOf[i]
		res.Starts[i] = now
		res.Lanes[i] = int(free[len(free)-1])
		free = free[:len(free)-1]
		grun[g]++
		krun[x]++
		running++
		res.MaxRunning = max(res.MaxRunning, running)
		stats[x].MaxRunning = max(stats[x].MaxRunning, krun[x])
		end := now + w.Durations[i]
		lastEnd = math.Max(lastEnd, end)
		ends.push(end, i)
		return nil
	}
	// before says parked group a is served before parked group b.
	before := func(a, b int32) bool {
		if o == OldestHeadOrder {
			return qs[a].front() < qs[b].front()
		}
		if grun[a] != grun[b] {
			return grun[a] < grun[b]
		}
		if parkedAt[a] != parkedAt[b] {
			return parkedAt[a] < parkedAt[b]
		}
		return a < b // the key name's order
	}
	// dispatch hands the free lanes to the eligible parked groups, one job at a time.
	dispatch := func() error {
		for len(free) > 0 {
			best := -1
			for p, g := range parked {
				if grun[g] < gcap[g] && (best < 0 || before(g, parked[best])) {
					best = p
				}
			}
			if best < 0 {
				return nil
			}
			g := parked[best]
			i, _ := qs[g].pop()
			setWaiting(keyOf[i], -1)
			if err := start(i); err != nil {
				return err
			}
			if qs[g].len() > 0 {
				parkedAt[g] = now // it just got a lane; its new head arrived no later
			} else {
				parked[best] = parked[len(parked)-1]
				parked = parked[:len(parked)-1]
			}
		}
		return nil
	}
	for next, events := 0, 0; next < jobs || ends.len() > 0; events++ {
		if events&0xfff == 0 {
			if err := ctx.Err(); err != nil {
				return KeyedResult{}, fmt.Errorf("run %s: %w", w.Name, err)
			}
		}
		if ends.len() > 0 && (next == jobs || ends.top() <= w.Arrivals[next]) {
			t := ends.top()
			advance(t)
			for ends.len() > 0 && ends.top() == t {
				_, i := ends.pop()
				free = append(free, int32(res.Lanes[i]))
				grun[groupOf[i]]--
				krun[keyOf[i]]--
				running--
			}
			if err := dispatch(); err != nil {
				return KeyedResult{}, err
			}
			continue
		}
		i := next
		next++
		advance(w.Arrivals[i])
		g := groupOf[i]
		if qs[g].len() == 0 && len(free) > 0 && grun[g] < gcap[g] {
			if err := start(i); err != nil {
				return KeyedResult{}, err
			}
			continue
		}
		// Its group's head waits already (the new job joins the queue behind it), or the job is the
		// head and parks: no lane is free, or its key is at its cap.
		if qs[g].len() == 0 {
			parked = append(parked, g)
			parkedAt[g] = now
		}
		qs[g].push(i)
		setWaiting(keyOf[i], 1)
	}
	if waiting > 0 {
		return KeyedResult{}, fmt.Errorf("run %s: %d jobs never started", w.Name, waiting)
	}
	res.Makespan = lastEnd - w.Arrivals[0]
	return finish(), nil
}
