// Package metrics records the limiter's metrics in CloudWatch embedded metric format (EMF): JSON log
// lines that CloudWatch Logs turns into metrics without an API call. Counts are added up during an
// invocation and written once per type at Flush, each under the dimension Type and also without
// dimensions (the total that alarms watch). The local stack reads the same lines back (Collector),
// so the metrics the functions publish are the ones its tests assert.
package metrics

import (
	"encoding/json"
	"io"
	"maps"
	"slices"
	"sync"
	"time"
)

// Metric names.
const (
	JobsRouted    = "JobsRouted"
	JobsRejected  = "JobsRejected"
	JobsHeld      = "JobsHeld" // jobs sent back to the general queue while the lanes queue was full
	JobsStarted   = "JobsStarted"
	JobsHeldAgain = "JobsHeldAgain"
	JobsMoved     = "JobsMoved"
	JobsBound     = "JobsBound"  // first-free: jobs bound from the waiting group to a free lane
	JobsParked    = "JobsParked" // first-free: waiting jobs parked because every lane was taken
	JobsWoken     = "JobsWoken"  // first-free: parked jobs a release woke
	// JobsAtKeyCap counts waiting jobs parked because their key ran its cap (lanes may be free): a
	// per-type figure, never a per-key dimension (keys are unbounded; per-key views come from logs).
	JobsAtKeyCap = "JobsAtKeyCap"
	// JobsAtPoolCap counts waiting jobs parked because a pool of their type ran its cap (lanes may
	// be free), per type.
	JobsAtPoolCap = "JobsAtPoolCap"
	// PoolRunning and PoolOccupancy are gauges per pool (dimension Pool, bounded by the config):
	// the jobs holding its slots, and their share of its cap.
	PoolRunning       = "PoolRunning"
	PoolOccupancy     = "PoolOccupancy"
	DuplicatesDropped = "DuplicatesDropped"
	StartsFailed      = "StartsFailed"
	JobsSucceeded     = "JobsSucceeded"
	JobsRetried       = "JobsRetried"
	JobsDeadLettered  = "JobsDeadLettered"
	// JobsCancelled counts jobs whose execution a newer job of their key stopped (the overflow
	// rule cancel), per type.
	JobsCancelled = "JobsCancelled"
	// CancelsSent counts the stops a waiting job sent to an older running job of its key (the
	// overflow rule cancel), per type.
	CancelsSent = "CancelsSent"
	// JobsSkipped counts jobs ended without running because their key was at its cap with an older
	// job of their sender (the overflow rule skip), per type.
	JobsSkipped   = "JobsSkipped"
	LeasesSwept   = "LeasesSwept"
	RunningLeases = "RunningLeases"
	LaneOccupancy = "LaneOccupancy"
	StartLatency  = "StartLatency"
	// JobsPaused counts waiting jobs parked because their type was paused.
	JobsPaused = "JobsPaused"
	// JobsRateLimited counts starts that waited for their type's rate.
	JobsRateLimited = "JobsRateLimited"
	// PausedSeconds is how long each paused type has been paused, at every sweep: the paused alarm
	// watches its maximum.
	PausedSeconds = "PausedSeconds"
)

// Units of the metrics.
var units = map[string]string{
	StartLatency: "Milliseconds", LaneOccupancy: "Percent", PoolOccupancy: "Percent", PausedSeconds: "Seconds",
}

// NoType is the Type dimension of jobs whose type is not known (unreadable bodies).
const NoType = "(none)"

// Unlisted is the one Type dimension of every type without a limit of its own, once the recorder
// knows which types are listed (Recorder.Listed): producers choose types, and each dimension value
// is a billed custom metric.
const Unlisted = "(unlisted)"

// Recorder accumulates metrics of one function; it is safe for concurrent use. A nil *Recorder
// records nothing.
type Recorder struct {
	w         io.Writer
	namespace string
	now       func() time.Time

	mu     sync.Mutex
	listed func(typ string) bool
	counts map[string]map[string]float64   // type -> metric -> sum
	values map[string]map[string][]float64 // type -> metric -> samples (latencies, gauges)
	pools  map[string]map[string][]float64 // pool -> metric -> samples (gauges)
}

// New returns a recorder writing EMF lines to w under namespace.
func New(w io.Writer, namespace string) *Recorder {
	if namespace == "" {
		namespace = "sfnlimit"
	}
	return &Recorder{w: w, namespace: namespace, now: time.Now, counts: map[string]map[string]float64{}, values: map[string]map[string][]float64{}}
}

// Listed bounds the Type dimension: a type for which listed is false is recorded as Unlisted.
func (r *Recorder) Listed(listed func(typ string) bool) {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.listed = listed
	r.mu.Unlock()
}

// dimension is typ's Type dimension value; r.mu is held.
func (r *Recorder) dimension(typ string) string {
	switch {
	case typ == "":
		return NoType
	case r.listed != nil && !r.listed(typ):
		return Unlisted
	}
	return typ
}

// Add adds n to a count of a type.
func (r *Recorder) Add(typ, metric string, n float64) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	typ = r.dimension(typ)
	if r.counts[typ] == nil {
		r.counts[typ] = map[string]float64{}
	}
	r.counts[typ][metric] += n
}

// Observe records one sample (a latency or a gauge) of a type.
func (r *Recorder) Observe(typ, metric string, v float64) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	typ = r.dimension(typ)
	if r.values[typ] == nil {
		r.values[typ] = map[string][]float64{}
	}
	r.values[typ][metric] = append(r.values[typ][metric], v)
}

// ObservePool records one sample of a pool's gauge, under the Pool dimension: pools are named in
// the config, so the dimension is bounded.
func (r *Recorder) ObservePool(pool, metric string, v float64) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pools == nil {
		r.pools = map[string]map[string][]float64{}
	}
	if r.pools[pool] == nil {
		r.pools[pool] = map[string][]float64{}
	}
	r.pools[pool][metric] = append(r.pools[pool][metric], v)
}

// Flush writes what was recorded since the last flush, one EMF line per type, and forgets it.
func (r *Recorder) Flush() error {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	counts, values, pools := r.counts, r.values, r.pools
	r.counts, r.values, r.pools = map[string]map[string]float64{}, map[string]map[string][]float64{}, nil
	r.mu.Unlock()
	for _, p := range slices.Sorted(maps.Keys(pools)) {
		for _, m := range slices.Sorted(maps.Keys(pools[p])) {
			vs := pools[p][m]
			for i := 0; i < len(vs); i += 100 {
				if err := r.writeDim("Pool", p, map[string]any{m: vs[i:min(i+100, len(vs))]}); err != nil {
					return err
				}
			}
		}
	}
	types := slices.Concat(slices.Collect(maps.Keys(counts)), slices.Collect(maps.Keys(values)))
	slices.Sort(types)
	for _, t := range slices.Compact(types) {
		if len(counts[t]) > 0 {
			line := map[string]any{}
			for m, v := range counts[t] {
				line[m] = v
			}
			if err := r.write(t, line); err != nil {
				return err
			}
		}
		for m, vs := range values[t] {
			// EMF takes at most 100 values of a metric in one line: each is one sample.
			for i := 0; i < len(vs); i += 100 {
				if err := r.write(t, map[string]any{m: vs[i:min(i+100, len(vs))]}); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// write puts one EMF line for a type with the given metric values.
func (r *Recorder) write(typ string, line map[string]any) error { return r.writeDim("Type", typ, line) }

// writeDim puts one EMF line with the given metric values under dimension dim = value.
func (r *Recorder) writeDim(dim, value string, line map[string]any) error {
	names := slices.Sorted(maps.Keys(line))
	defs := make([]map[string]string, 0, len(names))
	for _, m := range names {
		unit := units[m]
		if unit == "" {
			unit = "Count"
		}
		defs = append(defs, map[string]string{"Name": m, "Unit": unit})
	}
	line[dim] = value
	dims := [][]string{{dim}, {}} // per type, and the total over types
	if dim != "Type" {
		dims = [][]string{{dim}} // a gauge per pool: a total over pools means nothing
	}
	line["_aws"] = map[string]any{
		"Timestamp": r.now().UnixMilli(),
		"CloudWatchMetrics": []map[string]any{{
			"Namespace":  r.namespace,
			"Dimensions": dims,
			"Metrics":    defs,
		}},
	}
	b, err := json.Marshal(line)
	if err != nil {
		return err
	}
	_, err = r.w.Write(append(b, '\n'))
	return err
}
