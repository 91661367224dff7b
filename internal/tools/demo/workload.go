// Package demo runs the main job locally: it submits a mixed workload to a local stack, shows each
// type's running executions against its limit while it runs, and ends with a report (peaks against
// limits, outcomes, utilization while backlogged, API calls and cost per million jobs) and a chart.
package demo

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
)

// TypeSpec shapes one type's share of the workload.
type TypeSpec struct {
	Type  string
	Limit int
	Jobs  int
	// MeanSeconds is the mean job duration; durations are lognormal around it, 1 s at least.
	MeanSeconds float64
	// Release is the type's release mode: config.ReleaseEvents runs it on the bare sample workflow
	// (no release state), released by its status events; "" or config.ReleaseStep on the sample
	// workflow, released by its Release state.
	Release string
	// FailOnce and FailAlways are shares of jobs that fail their first attempt (and then succeed)
	// or every attempt (and are dead-lettered).
	FailOnce, FailAlways float64
}

// Workload is what the demo submits.
type Workload struct {
	Types []TypeSpec
	// Malformed adds one job of each kind the router refuses.
	Malformed bool
	// Batches puts each type's jobs in one batch (BatchOf), which the demo opens before it submits
	// them and watches until it closes. A malformed job of a type of the workload joins its
	// type's batch, and is counted there as refused.
	Batches bool
	Seed    uint64
	// Pools are shared caps over some of the types (template parameters Pools and TypePools).
	Pools []PoolSpec
}

// PoolSpec is a shared pool of the demo: its cap and its member types.
type PoolSpec struct {
	Name    string
	Cap     int
	Members []string
}

// PoolCaps renders the pools as the Pools template parameter ("" for none).
func (w Workload) PoolCaps() string {
	parts := make([]string, len(w.Pools))
	for i, p := range w.Pools {
		parts[i] = fmt.Sprintf("%s=%d", p.Name, p.Cap)
	}
	return strings.Join(parts, ",")
}

// TypePools renders each member type's pools as the TypePools template parameter ("" for none).
func (w Workload) TypePools() string {
	of := map[string][]string{}
	var order []string
	for _, p := range w.Pools {
		for _, m := range p.Members {
			if of[m] == nil {
				order = append(order, m)
			}
			of[m] = append(of[m], p.Name)
		}
	}
	parts := make([]string, len(order))
	for i, m := range order {
		parts[i] = m + "=" + strings.Join(of[m], "+")
	}
	return strings.Join(parts, ",")
}

// BatchOf is the batch of a type's jobs in the demo.
func BatchOf(typ string) string { return "demo-" + typ }

// DefaultWorkload is three types with limits 2, 5 and 10, varied durations, some failures and
// malformed jobs: about a minute of work at those limits. llm runs on the bare workflow in events
// mode, the others on the sample workflow in step mode. reports and llm share pool api of cap 12
// (a service both call): together they run at most 12 of their 15 lanes.
func DefaultWorkload() Workload {
	return Workload{
		Types: []TypeSpec{
			{Type: "payments", Limit: 2, Jobs: 24, MeanSeconds: 3, FailOnce: 0.1, FailAlways: 0.05},
			{Type: "reports", Limit: 5, Jobs: 60, MeanSeconds: 3, FailOnce: 0.05, FailAlways: 0.03},
			{Type: "llm", Limit: 10, Jobs: 120, MeanSeconds: 4, FailOnce: 0.05, FailAlways: 0.02, Release: "events"},
		},
		Malformed: true,
		Batches:   true,
		Seed:      42,
		Pools:     []PoolSpec{{Name: "api", Cap: 12, Members: []string{"reports", "llm"}}},
	}
}

// TypeLimits renders the limits as the TypeLimits template parameter.
func (w Workload) TypeLimits() string {
	parts := make([]string, len(w.Types))
	for i, t := range w.Types {
		parts[i] = fmt.Sprintf("%s=%d", t.Type, t.Limit)
	}
	return strings.Join(parts, ",")
}

// ReleaseModes renders each type's release mode, "payments=step,...".
func (w Workload) ReleaseModes() string {
	parts := make([]string, len(w.Types))
	for i, t := range w.Types {
		m := t.Release
		if m == "" {
			m = "step"
		}
		parts[i] = t.Type + "=" + m
	}
	return strings.Join(parts, ",")
}

// Job is one submission, with what the demo expects of it.
type Job struct {
	Type, ID string
	// Batch is the job's batch ("": none).
	Batch string
	Body  string
	// Expect is "succeeded", "dead-lettered" or a refusal reason.
	Expect string
}

// Jobs returns the submissions in a shuffled, reproducible order.
func (w Workload) Jobs() []Job {
	r := rand.New(rand.NewPCG(w.Seed, w.Seed^0x5f1))
	var out []Job
	for _, t := range w.Types {
		for i := range t.Jobs {
			id := fmt.Sprintf("%s-%04d", t.Type, i+1)
			secs := int(math.Max(1, math.Round(t.MeanSeconds*math.Exp(0.5*r.NormFloat64()-0.125))))
			in := map[string]any{"seconds": secs}
			expect := "succeeded"
			switch u := r.Float64(); {
			case u < t.FailAlways:
				in["fail"], in["failCause"] = true, "demo: this job always fails"
				expect = "dead-lettered"
			case u < t.FailAlways+t.FailOnce:
				in["failAttempts"] = 1
			}
			body := map[string]any{"type": t.Type, "id": id, "input": in}
			batch := w.batchOf(t.Type)
			if batch != "" {
				body["batch"] = batch
			}
			b, _ := json.Marshal(body)
			out = append(out, Job{Type: t.Type, ID: id, Batch: batch, Body: string(b), Expect: expect})
		}
	}
	r.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	if w.Malformed {
		big := strings.Repeat("x", 300*1024)
		// The oversized job joins the reports batch, if there is one: its refusal is counted there.
		bigBatch, bigField := w.batchOf("reports"), ""
		if bigBatch != "" {
			bigField = `, "batch": "` + bigBatch + `"`
		}
		out = append(out,
			Job{ID: "bad-json", Body: `{"type": "payments", "id": `, Expect: "not_json"},
			Job{ID: "bad-notype", Body: `{"id": "bad-notype", "input": {}}`, Expect: "missing_type"},
			Job{Type: "unknown", ID: "bad-unknown", Body: `{"type": "unknown", "id": "bad-unknown"}`, Expect: "unknown_type"},
			Job{Type: "reports", ID: "bad-big", Batch: bigBatch, Body: `{"type": "reports", "id": "bad-big"` + bigField + `, "input": {"blob": "` + big + `"}}`, Expect: "input_too_large"},
		)
	}
	return out
}

// batchOf is the batch of typ's jobs: BatchOf(typ) when the workload has batches and the type.
func (w Workload) batchOf(typ string) string {
	if !w.Batches {
		return ""
	}
	for _, t := range w.Types {
		if t.Type == typ {
			return BatchOf(typ)
		}
	}
	return ""
}
