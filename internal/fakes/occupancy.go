package fakes

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sfnlimit/sfnlimit/internal/occupancy"
)

// Occupancy is an in-memory occupancy.Store with the same rules: a job joins a lane once, leaves
// or moves only from the lane it is counted in, and a left job's tombstone keeps a join within
// occupancy.DedupWindow from counting it again. internal/occupancy's tests run the same scenarios on
// both, so the fake cannot drift from the store.
type Occupancy struct {
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// Err, when set, fails every operation with it (a throttled or unreachable table).
	Err error

	mu      sync.Mutex
	counts  map[string]map[int]int
	markers map[occupancy.Job]occMarker
	calls   map[string]int
}

type occMarker struct {
	lane   int
	leftAt time.Time // zero while counted
}

// NewOccupancy returns an empty store.
func NewOccupancy(now func() time.Time) *Occupancy {
	return &Occupancy{Now: now, counts: map[string]map[int]int{}, markers: map[occupancy.Job]occMarker{}, calls: map[string]int{}}
}

func (o *Occupancy) now() time.Time {
	if o.Now != nil {
		return o.Now()
	}
	return time.Now()
}

func (o *Occupancy) add(typ string, lane, d int) {
	if o.counts[typ] == nil {
		o.counts[typ] = map[int]int{}
	}
	o.counts[typ][lane] += d
}

func (o *Occupancy) begin(op string) error {
	o.calls[op]++
	return o.Err
}

// Counts returns lanes 1..limit's counts.
func (o *Occupancy) Counts(_ context.Context, typ string, limit int) ([]int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := o.begin("Counts"); err != nil {
		return nil, err
	}
	if limit < 1 {
		return nil, fmt.Errorf("count lanes of type %s: limit %d has no lane", typ, limit)
	}
	out := make([]int, limit)
	for lane, n := range o.counts[typ] {
		if lane >= 1 && lane <= limit {
			out[lane-1] = max(n, 0)
		}
	}
	return out, nil
}

// Join counts j in lane once.
func (o *Occupancy) Join(_ context.Context, j occupancy.Job, lane int) (occupancy.Joined, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := o.begin("Join"); err != nil {
		return occupancy.Joined{}, err
	}
	if lane < 1 {
		return occupancy.Joined{}, fmt.Errorf("count job %s in lane %d: no such lane", j, lane)
	}
	m, ok := o.markers[j]
	// The store compares whole seconds (leftAt is stored in Unix seconds).
	if ok && (m.leftAt.IsZero() || m.leftAt.Unix() >= o.now().Add(-occupancy.DedupWindow).Unix()) {
		return occupancy.Joined{Lane: m.lane, Counted: m.leftAt.IsZero()}, nil
	}
	o.markers[j] = occMarker{lane: lane}
	o.add(j.Type, lane, 1)
	return occupancy.Joined{Lane: lane, Counted: true, Fresh: true}, nil
}

// JoinEmpty counts j in lane only if no job is counted there.
func (o *Occupancy) JoinEmpty(_ context.Context, j occupancy.Job, lane int) (occupancy.Joined, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := o.begin("JoinEmpty"); err != nil {
		return occupancy.Joined{}, err
	}
	if lane < 1 {
		return occupancy.Joined{}, fmt.Errorf("bind job %s to lane %d: no such lane", j, lane)
	}
	m, ok := o.markers[j]
	if ok && (m.leftAt.IsZero() || m.leftAt.Unix() >= o.now().Add(-occupancy.DedupWindow).Unix()) {
		return occupancy.Joined{Lane: m.lane, Counted: m.leftAt.IsZero()}, nil
	}
	if o.counts[j.Type][lane] >= 1 {
		return occupancy.Joined{}, fmt.Errorf("bind job %s to lane %d: %w", j, lane, occupancy.ErrLaneBusy)
	}
	o.markers[j] = occMarker{lane: lane}
	o.add(j.Type, lane, 1)
	return occupancy.Joined{Lane: lane, Counted: true, Fresh: true}, nil
}

// Leave uncounts j from lane once.
func (o *Occupancy) Leave(_ context.Context, j occupancy.Job, lane int) (bool, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := o.begin("Leave"); err != nil {
		return false, err
	}
	m, ok := o.markers[j]
	if !ok || m.lane != lane || !m.leftAt.IsZero() {
		return false, nil
	}
	m.leftAt = o.now()
	o.markers[j] = m
	o.add(j.Type, lane, -1)
	return true, nil
}

// Cancel takes back a join whose job never reached its lane, leaving no tombstone.
func (o *Occupancy) Cancel(_ context.Context, j occupancy.Job, lane int) (bool, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := o.begin("Cancel"); err != nil {
		return false, err
	}
	m, ok := o.markers[j]
	if !ok || m.lane != lane || !m.leftAt.IsZero() {
		return false, nil
	}
	delete(o.markers, j)
	o.add(j.Type, lane, -1)
	return true, nil
}

// Move counts j in to instead of from, once.
func (o *Occupancy) Move(_ context.Context, j occupancy.Job, from, to int) (bool, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := o.begin("Move"); err != nil {
		return false, err
	}
	if to < 1 {
		return false, fmt.Errorf("move job %s to lane %d: no such lane", j, to)
	}
	if from == to {
		return true, nil
	}
	m, ok := o.markers[j]
	if !ok || m.lane != from || !m.leftAt.IsZero() {
		return false, nil
	}
	m.lane = to
	o.markers[j] = m
	o.add(j.Type, from, -1)
	o.add(j.Type, to, 1)
	return true, nil
}

// Get returns where j is counted, or nil when it never joined.
func (o *Occupancy) Get(_ context.Context, j occupancy.Job) (*occupancy.Marker, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := o.begin("Get"); err != nil {
		return nil, err
	}
	m, ok := o.markers[j]
	if !ok {
		return nil, nil
	}
	return &occupancy.Marker{Lane: m.lane, Left: !m.leftAt.IsZero()}, nil
}

// Total is the sum of a type's lane counts.
func (o *Occupancy) Total(typ string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, c := range o.counts[typ] {
		n += c
	}
	return n
}

// Calls returns how often op (Counts, Join, Leave, Move, Get) was called.
func (o *Occupancy) Calls(op string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.calls[op]
}
