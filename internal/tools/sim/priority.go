package sim

import (
	"context"
	"fmt"
	"math"
	"slices"
)

// Flow control (issue 14): priorities with aging, and a rate limit, on top of the lane model.
// RunPriority models the scheduler in virtual time, beside a semaphore that serves higher priority
// first (the ideal the issue measures against) and today's single FIFO.
//
// Time is in seconds here, not in mean durations as in the lane strategies' grid: the aging and the
// rate are deployment settings in seconds, so the flow scenarios draw their durations in seconds.
//
// The scheduler. Waiting jobs sit in FIFO groups: per priority for a type without key caps (the
// production code groups by key and priority, which orders jobs the same when no key is capped:
// within a priority the oldest head ranks first either way), and per key for a type with key caps,
// the group's priority being its head job's. A freed lane goes to the eligible waiting group with
// the highest effective priority
//
//	min(MaxPriority, priority + floor(headWait / aging))
//
// where headWait is now minus the head job's submission time. Ties go to the oldest head (the head
// submitted first) without key caps; with key caps, to the key holding the fewest lanes, then the one
// parked earliest (when its head became its head: its arrival, or its key's last lane if later),
// then by key name.
//
// The starvation bound. A job of priority p that is its group's head is ranked at MaxPriority once
// it has waited (MaxPriority-p) x aging since its submission (StarvationBound). At MaxPriority, the
// oldest head goes first, so from then on no job submitted after it takes a lane before it: its wait
// is at most StarvationBound(p) plus the time the lanes take to serve the jobs submitted before it,
// however many high-priority jobs arrive later. (With key caps the tie at the top goes to the key
// holding the fewest lanes, so a key holding many lanes can be passed by other keys at the top
// level; within keys holding equally many, the one parked earliest goes first.)
//
// The rate. A type may have a rate R starts per second with a burst B: a token bucket of capacity B,
// refilled at R per second, full at the first arrival. A job needs a lane and a token to start, and
// takes both at once: while the bucket holds no token, waiting jobs stay in their groups holding no
// lane, and when the next token is due the free lane and the token go to the group ranked first then,
// by the rule above. An arrival that finds its group empty, a lane free and a token starts at once.

// Priorities: a job's priority is 1..9, higher first.
const (
	MinPriority    = 1
	LowPriority    = 1 // "low"
	NormalPriority = 5 // "normal", a job's priority when it names none
	HighPriority   = 9 // "high"
	MaxPriority    = 9
)

// DefaultAging is the simulator's aging when a scenario names none: a waiting head rises one priority
// level per minute, so a low job reaches the top after 8 minutes at the head.
const DefaultAging = 60.0

// EffectivePriority is the rank of a group whose head has priority p and was submitted headWait
// seconds ago: min(MaxPriority, p + floor(headWait / aging)). An infinite aging never raises it.
func EffectivePriority(p int, headWait, aging float64) int {
	if p >= MaxPriority {
		return p
	}
	levels := math.Floor(headWait / aging)
	switch {
	case levels >= float64(MaxPriority-p):
		return MaxPriority
	case levels > 0:
		return p + int(levels)
	}
	return p
}

// StarvationBound is how long a head of priority p waits after its submission before it is ranked at
// the top level, where no job submitted after it can pass it: (MaxPriority - p) x aging.
func StarvationBound(p int, aging float64) float64 {
	return float64(MaxPriority-min(p, MaxPriority)) * aging
}

// PriorityWorkload is a workload whose jobs each have a priority and, optionally, a key.
type PriorityWorkload struct {
	Workload
	// Priorities is each job's priority, 1..9, one per arrival; nil gives every job NormalPriority.
	Priorities []int
	// Keys is each job's key, one per arrival; nil gives every job the key "". Keys matter only to a
	// type with key caps.
	Keys []string
}

// Priority is job i's priority.
func (w PriorityWorkload) Priority(i int) int {
	if w.Priorities == nil {
		return NormalPriority
	}
	return w.Priorities[i]
}

// Key is job i's key.
func (w PriorityWorkload) Key(i int) string {
	if w.Keys == nil {
		return ""
	}
	return w.Keys[i]
}

func (w PriorityWorkload) validate() error {
	if err := w.Workload.validate(); err != nil {
		return err
	}
	if w.Priorities != nil && len(w.Priorities) != len(w.Arrivals) {
		return fmt.Errorf("workload %s has %d arrivals and %d priorities", w.Name, len(w.Arrivals), len(w.Priorities))
	}
	if w.Keys != nil && len(w.Keys) != len(w.Arrivals) {
		return fmt.Errorf("workload %s has %d arrivals and %d keys", w.Name, len(w.Arrivals), len(w.Keys))
	}
	for i, p := range w.Priorities {
		if p < MinPriority || p > MaxPriority {
			return fmt.Errorf("workload %s: job %d has priority %d, want %d..%d", w.Name, i, p, MinPriority, MaxPriority)
		}
	}
	return nil
}

// FlowLimits are a type's flow settings: its lanes and key caps, the aging of its priorities, and its
// rate.
type FlowLimits struct {
	// KeyLimits are the lanes (Limit) and the key caps; a type with a key cap (KeyLimit above 0, or
	// any PerKey) groups its waiting jobs by key.
	KeyLimits
	// Aging is the head wait, in seconds, that raises a waiting group by one priority level; above 0,
	// and +Inf never ages.
	Aging float64
	// Rate is the starts per second the token bucket allows, 0 for no rate limit; Burst the bucket's
	// capacity, at least 1 with a rate.
	Rate, Burst float64
}

// Capped says the type has key caps, so that its waiting jobs are grouped by key.
func (l FlowLimits) Capped() bool { return l.KeyLimit > 0 || len(l.PerKey) > 0 }

func (l FlowLimits) validate() error {
	if err := l.KeyLimits.validate(); err != nil {
		return err
	}
	if !(l.Aging > 0) {
		return fmt.Errorf("flow limits: aging %g must be above 0 seconds (+Inf never ages; the simulator's default is %g)", l.Aging, DefaultAging)
	}
	switch {
	case !(l.Rate >= 0) || math.IsInf(l.Rate, 0):
		return fmt.Errorf("flow limits: rate %g must be finite and at least 0 (0: no rate limit)", l.Rate)
	case l.Rate > 0 && (!(l.Burst >= 1) || math.IsInf(l.Burst, 0)):
		return fmt.Errorf("flow limits: burst %g must be finite and at least 1 with a rate, or no start could take a token", l.Burst)
	}
	return nil
}

// PriorityOrder is how a type's waiting jobs are served.
type PriorityOrder string

// Orders.
const (
	// PriorityAgingOrder is issue 14's scheduler: the waiting group with the highest effective
	// priority first, with aging (see the package's flow notes above).
	PriorityAgingOrder PriorityOrder = "priority"
	// StrictPriorityOrder is the ideal the issue measures against: a semaphore that serves the highest
	// priority first and, within a priority, in submission order; no aging and no key caps.
	StrictPriorityOrder PriorityOrder = "strict-priority"
	// SubmissionOrder is today's behaviour: one FIFO of all the type's jobs, no priorities and no key
	// caps (the ideal semaphore).
	SubmissionOrder PriorityOrder = "fifo"
)

// PriorityOrders lists the orders, the scheduler first.
func PriorityOrders() []PriorityOrder {
	return []PriorityOrder{PriorityAgingOrder, StrictPriorityOrder, SubmissionOrder}
}

// FlowResult is what happened in one RunPriority run. Result.Starts is when each job started,
// Result.Lanes the lane it was bound to; Result.Backlogged is the time within the window during which
// a job had arrived and not started, Result.Busy the lane-time spent running jobs during it.
type FlowResult struct {
	Result
	Order PriorityOrder
	// Binds is when each job was bound to its lane: its start, as a job takes its lane and its token
	// at once.
	Binds []float64
	// MaxHeld is the most lanes held at once.
	MaxHeld int
}

// RunPriority runs w through a type with flow settings l, serving its waiting jobs in order o; l's
// rate applies under every order. Key caps apply under PriorityAgingOrder only: the two baselines
// are semaphores.
//
// At one instant, ends come first and all of them free their lanes before any is handed out; then
// the token that is due, if the waiting jobs wait for one; then arrivals, one at a time in submission
// order (an arrival that finds a lane free, a token and its group empty takes the lane, whatever its
// priority).
func RunPriority(ctx context.Context, w PriorityWorkload, l FlowLimits, o PriorityOrder, win Window) (FlowResult, error) {
	if err := l.validate(); err != nil {
		return FlowResult{}, fmt.Errorf("run %s: %w", w.Name, err)
	}
	if !slices.Contains(PriorityOrders(), o) {
		return FlowResult{}, fmt.Errorf("run %s: unknown order %q", w.Name, o)
	}
	if err := w.validate(); err != nil {
		return FlowResult{}, err
	}
	jobs := w.Len()
	if jobs > math.MaxInt32 {
		return FlowResult{}, fmt.Errorf("workload %s: %d jobs is too many", w.Name, jobs)
	}
	res := FlowResult{
		Result: Result{Slots: l.Limit, Lanes: make([]int, jobs), Starts: make([]float64, jobs)},
		Order:  o, Binds: make([]float64, jobs),
	}
	if jobs == 0 {
		return res, nil
	}
	capped := o == PriorityAgingOrder && l.Capped()
	aging := l.Aging
	if o == StrictPriorityOrder {
		aging = math.Inf(1)
	}
	// Groups: one per key (capped), one per priority, or one for all (submission order).
	groupOf := make([]int32, jobs)
	var gcap []int
	switch {
	case o == SubmissionOrder:
		gcap = []int{l.Limit}
	case capped:
		// Keys by name, so that an index order is the name order.
		names := make([]string, jobs)
		for i := range names {
			names[i] = w.Key(i)
		}
		names = slices.Compact(slices.Sorted(slices.Values(names)))
		for i := range groupOf {
			x, _ := slices.BinarySearch(names, w.Key(i))
			groupOf[i] = int32(x)
		}
		gcap = make([]int, len(names))
		for x, k := range names {
			gcap[x] = l.Cap(k)
		}
	default:
		for i := range groupOf {
			groupOf[i] = int32(w.Priority(i) - MinPriority)
		}
		gcap = slices.Repeat([]int{l.Limit}, MaxPriority-MinPriority+1)
	}
	groups := len(gcap)
	var (
		qs       = make([]queue, groups)
		gheld    = make([]int, groups)     // lanes held per group (per key when capped)
		parkedAt = make([]float64, groups) // when a waiting group's head became its head
		parked   []int32                   // the groups with jobs waiting
		free     = make([]int32, l.Limit)  // the free lanes, as a stack
		ends     endHeap                   // job ends, with the job
		started  = make([]bool, jobs)
		running  int // lanes held, each by a running job
		waiting  int // jobs arrived and not started
		now      = w.Arrivals[0]
		lastEnd  = now
		level    = l.Burst // the bucket's tokens at last
		last     = now
		tokenAt  = math.Inf(1) // when the token that waiting jobs wait for is due
	)
	for k := range free {
		free[k] = int32(l.Limit - k) // lane 1 on top
	}
	advance := func(t float64) {
		d := math.Min(t, win.To) - math.Max(now, win.From)
		now = t
		if d <= 0 {
			return
		}
		if waiting > 0 {
			res.Backlogged += d
			res.Busy += d * float64(running)
		}
	}
	// token says the bucket holds a token now, refilling it to now.
	token := func() bool {
		if l.Rate == 0 {
			return true
		}
		level = math.Min(l.Burst, level+l.Rate*(now-last))
		last = now
		return level >= 1
	}
	// bind gives job i a free lane and a token (token said there is one): it starts now.
	bind := func(i int) error {
		if started[i] {
			return fmt.Errorf("run %s: job %d started twice", w.Name, i)
		}
		started[i] = true
		res.Binds[i], res.Starts[i] = now, now
		res.Lanes[i] = int(free[len(free)-1])
		free = free[:len(free)-1]
		gheld[groupOf[i]]++
		waiting--
		running++
		res.MaxHeld = max(res.MaxHeld, running)
		if l.Rate > 0 {
			level--
		}
		end := now + w.Durations[i]
		lastEnd = math.Max(lastEnd, end)
		ends.push(end, i)
		return nil
	}
	rank := func(g int32) int {
		h := qs[g].front()
		return EffectivePriority(w.Priority(h), now-w.Arrivals[h], aging)
	}
	// before says waiting group a is served before waiting group b.
	before := func(a, b int32) bool {
		if ra, rb := rank(a), rank(b); ra != rb {
			return ra > rb
		}
		if !capped {
			return qs[a].front() < qs[b].front() // the oldest head
		}
		if gheld[a] != gheld[b] {
			return gheld[a] < gheld[b]
		}
		if parkedAt[a] != parkedAt[b] {
			return parkedAt[a] < parkedAt[b]
		}
		return a < b // the key name's order
	}
	// dispatch hands the free lanes and the tokens to the eligible waiting groups, one job at a time:
	// each bind changes its group's head, so the ranks are taken afresh. With a lane free and a group
	// eligible but no token, it sets when the next token is due, and the groups wait for it.
	dispatch := func() error {
		for len(free) > 0 {
			best := -1
			for p, g := range parked {
				if gheld[g] < gcap[g] && (best < 0 || before(g, parked[best])) {
					best = p
				}
			}
			if best < 0 {
				return nil
			}
			if !token() {
				tokenAt = now + (1-level)/l.Rate
				return nil
			}
			g := parked[best]
			i, _ := qs[g].pop()
			if err := bind(i); err != nil {
				return err
			}
			if qs[g].len() > 0 {
				parkedAt[g] = now // its new head arrived no later
			} else {
				parked = slices.Delete(parked, best, best+1)
			}
		}
		return nil
	}
	for next, events := 0, 0; next < jobs || ends.len() > 0 || !math.IsInf(tokenAt, 1); events++ {
		if events&0xfff == 0 {
			if err := ctx.Err(); err != nil {
				return FlowResult{}, fmt.Errorf("run %s: %w", w.Name, err)
			}
		}
		arrival := math.Inf(1)
		if next < jobs {
			arrival = w.Arrivals[next]
		}
		switch {
		case ends.len() > 0 && ends.top() <= min(arrival, tokenAt):
			t := ends.top()
			advance(t)
			for ends.len() > 0 && ends.top() == t {
				_, i := ends.pop()
				free = append(free, int32(res.Lanes[i]))
				gheld[groupOf[i]]--
				running--
			}
			if err := dispatch(); err != nil {
				return FlowResult{}, err
			}
		case tokenAt <= arrival:
			advance(tokenAt)
			tokenAt = math.Inf(1)
			token()
			level = math.Max(level, 1) // due now: the refill's rounding must not put it off
			if err := dispatch(); err != nil {
				return FlowResult{}, err
			}
		default:
			i := next
			next++
			advance(arrival)
			waiting++
			g := groupOf[i]
			if qs[g].len() == 0 && len(free) > 0 && gheld[g] < gcap[g] && token() {
				if err := bind(i); err != nil {
					return FlowResult{}, err
				}
				continue
			}
			if qs[g].len() == 0 {
				parked = append(parked, g)
				parkedAt[g] = now
			}
			qs[g].push(i)
			if len(free) > 0 && math.IsInf(tokenAt, 1) {
				// A lane is free and no token is left: the job waits for the next one.
				if err := dispatch(); err != nil {
					return FlowResult{}, err
				}
			}
		}
	}
	if waiting > 0 {
		return FlowResult{}, fmt.Errorf("run %s: %d jobs never started", w.Name, waiting)
	}
	res.Makespan = lastEnd - w.Arrivals[0]
	return res, nil
}
