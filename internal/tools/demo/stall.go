package demo

import (
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/sfnlimit/sfnlimit/internal/tools/local/observe"
	"github.com/sfnlimit/sfnlimit/internal/tools/local/stack"
)

// StallAfter is how long a job may wait with its lane free while its type starts nothing before the
// demo calls it a stall. A job reaches a free lane within a second or two on a quiet machine; a job
// that arrives while its lane's release is still under way backs off for up to twice
// StartRetrySeconds (10 s), which a busy machine can stretch a little. A batch that waits out a
// visibility timeout after a handler failed or timed out (60 s on the general queue) is what this
// finds.
const StallAfter = 30 * time.Second

// Stall is the longest a job of Type waited with its lane free while Type started nothing: From and To are
// seconds since the first submission of the run.
type Stall struct {
	Type    string  `json:"type,omitempty"`
	Seconds float64 `json:"seconds"`
	From    float64 `json:"fromSeconds"`
	To      float64 `json:"toSeconds"`
}

// longestStall finds, over every type of limits, the longest stretch in which some job of the type
// waited (submitted and not yet started, or between two attempts) while the lane it then ran in was
// free, and no job of the type started. Jobs that wait because every lane is busy are the limit at
// work, and a job bound to a busy lane while another lane is free (random binds at routing) waits by
// the strategy's design; a type that keeps starting jobs is slow, not stalled. Nor is a type one of
// whose pools runs its cap: its jobs wait for a slot, whatever its own lanes.
func longestStall(xs []observe.Execution, limits map[string]int, pools []PoolSpec) Stall {
	type span struct {
		from, to time.Time
		lane     int
	}
	waiting := map[string][]span{}
	running := map[string][]span{}
	started := map[string]map[time.Time]bool{}
	byJob := map[string][]observe.Execution{}
	var origin, end time.Time
	for _, x := range xs {
		k := x.Job.Type + "/" + x.Job.ID
		byJob[k] = append(byJob[k], x)
		if origin.IsZero() || (!x.Job.SubmittedAt.IsZero() && x.Job.SubmittedAt.Before(origin)) {
			origin = x.Job.SubmittedAt
		}
		if x.WorkEnd.After(end) {
			end = x.WorkEnd
		}
	}
	for _, ex := range byJob {
		sort.Slice(ex, func(i, j int) bool { return ex[i].Start.Before(ex[j].Start) })
		typ := ex[0].Job.Type
		from := ex[0].Job.SubmittedAt
		for _, x := range ex {
			if !from.IsZero() && x.Start.After(from) {
				waiting[typ] = append(waiting[typ], span{from, x.Start, x.Job.Lane})
			}
			we := x.WorkEnd
			if we.IsZero() {
				we = end
			}
			running[typ] = append(running[typ], span{x.Start, we, x.Job.Lane})
			if started[typ] == nil {
				started[typ] = map[time.Time]bool{}
			}
			started[typ][x.Start] = true
			from = we
		}
	}
	var best Stall
	for typ := range limits {
		var cuts []time.Time
		for _, s := range append(slicesClone(waiting[typ]), running[typ]...) {
			cuts = append(cuts, s.from, s.to)
		}
		sort.Slice(cuts, func(i, j int) bool { return cuts[i].Before(cuts[j]) })
		var runFrom time.Time // start of the stretch in progress
		for i := 0; i+1 < len(cuts); i++ {
			a, b := cuts[i], cuts[i+1]
			if !a.Before(b) {
				continue
			}
			mid := a.Add(b.Sub(a) / 2)
			covers := func(s span) bool { return !mid.Before(s.from) && mid.Before(s.to) }
			busy := map[int]bool{}
			for _, r := range running[typ] {
				if covers(r) {
					busy[r.lane] = true
				}
			}
			onFreeLane := false
			for _, w := range waiting[typ] {
				if covers(w) && !busy[w.lane] {
					onFreeLane = true
					break
				}
			}
			waitsOnFreeLane := onFreeLane && !poolFull(pools, typ, running, covers)
			if waitsOnFreeLane {
				if runFrom.IsZero() || started[typ][a] {
					runFrom = a
				}
				if d := b.Sub(runFrom).Seconds(); d > best.Seconds {
					best = Stall{Type: typ, Seconds: d, From: runFrom.Sub(origin).Seconds(), To: b.Sub(origin).Seconds()}
				}
			} else {
				runFrom = time.Time{}
			}
		}
	}
	return best
}

func slicesClone[T any](s []T) []T { return append([]T(nil), s...) }

// poolFull reports whether a pool of typ runs its cap at the moment covers tells.
func poolFull[S any](pools []PoolSpec, typ string, running map[string][]S, covers func(S) bool) bool {
	for _, p := range pools {
		if !slices.Contains(p.Members, typ) {
			continue
		}
		n := 0
		for _, m := range p.Members {
			for _, r := range running[m] {
				if covers(r) {
					n++
				}
			}
		}
		if n >= p.Cap {
			return true
		}
	}
	return false
}

// trouble records what went wrong in the run that the jobs' outcomes do not show: a stall beyond
// StallAfter, and the handlers' failed invocations (each leaves its batch invisible for the queue's
// visibility timeout) and the router's failed messages. The starter's batch item failures are its
// way of holding messages of running jobs, not failures.
func (r *Report) trouble(stats map[string]stack.FunctionStats, st Stall) {
	r.LongestStall = st
	if st.Seconds > StallAfter.Seconds() {
		r.Trouble = append(r.Trouble, fmt.Sprintf("%s started nothing for %.1fs while a job waited for a free lane (%.1fs-%.1fs into the run)", st.Type, st.Seconds, st.From, st.To))
	}
	kinds := make([]string, 0, len(stats))
	for k := range stats {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		f := stats[k]
		if f.Errors > 0 {
			s := fmt.Sprintf("%s: %d failed invocation", k, f.Errors)
			if f.Errors > 1 {
				s += "s"
			}
			if f.Timeouts > 0 {
				s += fmt.Sprintf(" (%d timed out)", f.Timeouts)
			}
			r.Trouble = append(r.Trouble, s)
		}
		if k == "router" && f.FailedItems > 0 {
			r.Trouble = append(r.Trouble, fmt.Sprintf("%s: %d messages failed and were received again after the visibility timeout", k, f.FailedItems))
		}
	}
}
