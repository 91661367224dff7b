package simworld

import (
	"container/heap"
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing/synctest"
	"time"
)

// errKilled is what every AWS call of a killed invocation answers: nothing it does after the kill
// reaches the world, as for a Lambda invocation stopped at its timeout or by a crash.
var errKilled = errors.New("simworld: invocation killed")

// event is something the world does at a virtual instant. Ties are broken by seq, the order in
// which events were scheduled, so a run's order depends on the seed alone.
type event struct {
	at  time.Time
	seq uint64
	fn  func()
	// call: letting a handler's call through (still done while the world winds down).
	call bool
}

type eventHeap []*event

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	if !h[i].at.Equal(h[j].at) {
		return h[i].at.Before(h[j].at)
	}
	return h[i].seq < h[j].seq
}
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(*event)) }
func (h *eventHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// proc is one Lambda invocation: the goroutine running a real handler, and the goroutines it
// starts, all carrying its context.
type proc struct {
	id     int
	name   string
	ctx    context.Context
	cancel context.CancelFunc
	dead   bool
	done   bool
	// types are the workload types whose work the invocation carries (the messages of its batch,
	// the execution it releases; none for the sweep): a kill delays their work (checker.killed).
	types []string
	// jobs are the generations (genKey) of the jobs of its batch's lanes messages (a starter's).
	jobs []string
	// onDone runs in the world when the handler returns (not when it was killed).
	onDone func(resp any, err error)
}

type procKey struct{}

func procOf(ctx context.Context) *proc {
	p, _ := ctx.Value(procKey{}).(*proc)
	return p
}

// kill is how an invocation ends early: applied before its next call (that call and every later
// one fail without effect) or after it (the call takes effect, its answer is lost).
type kill int

const (
	noKill kill = iota
	killBefore
	killAfter
)

// call is one AWS call of a handler, held until the world lets it through at its virtual time.
type call struct {
	proc    *proc
	op, key string
	ready   chan struct{}
	// set by the world when it lets the call through
	kill  kill
	fault fault
	// onFire runs in the world as the call is let through (a handler's return).
	onFire func()
	// units is what a DynamoDB call consumes on its partition keys in the AWS model (nil without
	// it); attempts counts the SDK's attempts the model's partition buckets refused.
	units    *units
	attempts int
}

// sched runs the world: one goroutine (the bubble's root) that alone decides what happens next.
// Handlers run in their own goroutines but only one at a time: each AWS call blocks until the
// world lets it through, and the world waits (synctest.Wait) until every goroutine is blocked
// again before it decides anything. New calls are ordered by (process, operation, key) before
// the world draws their latencies, so goroutine scheduling cannot change a run.
type sched struct {
	mu      sync.Mutex
	pending []*call
	wake    chan struct{}
	events  eventHeap
	seq     uint64
}

func newSched() *sched {
	return &sched{wake: make(chan struct{}, 1)}
}

func (s *sched) at(t time.Time, fn func()) {
	s.seq++
	heap.Push(&s.events, &event{at: t, seq: s.seq, fn: fn})
}

func (s *sched) after(d time.Duration, fn func()) { s.at(time.Now().Add(d), fn) }

func (s *sched) afterCall(d time.Duration, fn func()) {
	s.seq++
	heap.Push(&s.events, &event{at: time.Now().Add(d), seq: s.seq, fn: fn, call: true})
}

// enter parks the calling goroutine until the world lets its call through.
func (s *sched) enter(c *call) {
	s.mu.Lock()
	s.pending = append(s.pending, c)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	<-c.ready
}

// run is the world's loop. admit orders and schedules new calls. Once stopping says so, only
// calls are let through (no new work), and run returns when live says no invocation is left.
func (s *sched) run(admit func([]*call), stopping func() bool, live func() int) {
	for {
		synctest.Wait()
		s.mu.Lock()
		newCalls := s.pending
		s.pending = nil
		s.mu.Unlock()
		if len(newCalls) > 0 {
			slices.SortStableFunc(newCalls, func(a, b *call) int {
				if a.proc.id != b.proc.id {
					return a.proc.id - b.proc.id
				}
				if c := strings.Compare(a.op, b.op); c != 0 {
					return c
				}
				return strings.Compare(a.key, b.key)
			})
			admit(newCalls)
		}
		if stopping() {
			if live() == 0 {
				return
			}
			kept := s.events[:0]
			for _, e := range s.events {
				if e.call {
					kept = append(kept, e)
				}
			}
			s.events = kept
			heap.Init(&s.events)
		}
		if len(s.events) == 0 {
			// Only handler timers are left: wait for them.
			<-s.wake
			continue
		}
		next := s.events[0]
		if d := next.at.Sub(time.Now()); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-s.wake:
				t.Stop()
			}
			continue
		}
		heap.Pop(&s.events)
		next.fn()
	}
}
