package demo_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sfnlimit/sfnlimit/internal/tools/demo"
)

// The demo is the main job: a small run of it must hold every limit, end every job as the workload
// says it should, and write its report, JSON and chart.
func TestDemoSmallRun(t *testing.T) {
	w := demo.Workload{
		Types: []demo.TypeSpec{
			{Type: "payments", Limit: 2, Jobs: 8, MeanSeconds: 1, FailOnce: 0.25, FailAlways: 0.15},
			{Type: "llm", Limit: 3, Jobs: 10, MeanSeconds: 1, Release: "events"},
		},
		Malformed: true,
		Batches:   true,
		Seed:      7,
		Pools:     []demo.PoolSpec{{Name: "api", Cap: 3, Members: []string{"payments", "llm"}}}, // their limits add up to 5
	}
	out := t.TempDir()
	var buf bytes.Buffer
	rep, err := demo.Run(context.Background(), demo.Options{Workload: w, OutDir: out, Timeout: 10 * time.Minute, Out: &buf}) // about a minute; the bound is for a stuck run
	if err != nil {
		t.Fatalf("demo.Run: %v\n%s", err, buf.String())
	}
	if !rep.LimitHeld {
		t.Errorf("LimitHeld = false, want true: %+v", rep.Types)
	}
	if rep.Verified != rep.Jobs || len(rep.Mismatches) > 0 {
		t.Errorf("verified %d of %d jobs, mismatches %v", rep.Verified, rep.Jobs, rep.Mismatches)
	}
	// Each type's batch closed with its jobs' outcomes and sent its event (a mismatch otherwise),
	// and the run said so.
	if len(rep.Batches) != 2 {
		t.Errorf("batches %+v, want one per type", rep.Batches)
	}
	for _, b := range rep.Batches {
		if !b.Closed || !b.Announced || b.Recorded != b.Jobs {
			t.Errorf("batch %+v, want closed with every job and its event sent", b)
		}
		if !strings.Contains(buf.String(), "batch "+b.Batch+" closed ") {
			t.Errorf("the run did not print the close of batch %s:\n%s", b.Batch, buf.String())
		}
	}
	wantRefused := map[string]int{"not_json": 1, "missing_type": 1, "unknown_type": 1, "input_too_large": 1}
	for k, v := range wantRefused {
		if rep.Refused[k] != v {
			t.Errorf("Refused[%s] = %d, want %d (all: %v)", k, rep.Refused[k], v, rep.Refused)
		}
	}
	if len(rep.Pools) != len(w.Pools) {
		t.Errorf("pools reported = %+v, want the workload's %+v", rep.Pools, w.Pools)
	}
	for _, p := range rep.Pools {
		if p.Peak < 1 || p.Peak > p.Cap {
			t.Errorf("pool %s peak %d, want 1..%d", p.Name, p.Peak, p.Cap)
		}
	}
	for _, tr := range rep.Types {
		if tr.Peak < 1 || tr.Peak > tr.Limit {
			t.Errorf("type %s peak %d, want 1..%d", tr.Type, tr.Peak, tr.Limit)
		}
		if tr.Succeeded+tr.DeadLettered != tr.Jobs {
			t.Errorf("type %s: %d succeeded + %d dead-lettered, want %d jobs", tr.Type, tr.Succeeded, tr.DeadLettered, tr.Jobs)
		}
	}
	// The metrics the functions published agree with the outcomes.
	var succeeded, dead float64
	for _, m := range rep.Metrics {
		succeeded += m["JobsSucceeded"]
		dead += m["JobsDeadLettered"]
	}
	wantSucceeded, wantDead := 0, 0
	for _, tr := range rep.Types {
		wantSucceeded += tr.Succeeded
		wantDead += tr.DeadLettered
	}
	if int(succeeded) != wantSucceeded || int(dead) != wantDead {
		t.Errorf("metrics JobsSucceeded %v, JobsDeadLettered %v; want %d and %d", succeeded, dead, wantSucceeded, wantDead)
	}
	// Every release was made by a Release step or a status event: the sweep, which is for releases
	// that were missed, had none to make (the lease-drift alarm watches LeasesSwept).
	var swept float64
	for _, m := range rep.Metrics {
		swept += m["LeasesSwept"]
	}
	if swept != 0 {
		t.Errorf("LeasesSwept = %v on a healthy run, want 0", swept)
	}
	if rep.TotalPerMillion <= 0 || len(rep.Calls) == 0 {
		t.Errorf("cost %v, %d call rows: want a priced report", rep.TotalPerMillion, len(rep.Calls))
	}
	for _, f := range []string{"report.md", "report.json", "concurrency.svg", "limiter.log"} {
		b, err := os.ReadFile(filepath.Join(out, f))
		if err != nil || len(b) == 0 {
			t.Errorf("%s: %v (%d bytes), want a written file", f, err, len(b))
		}
	}
	var js map[string]any
	if b, _ := os.ReadFile(filepath.Join(out, "report.json")); json.Unmarshal(b, &js) != nil {
		t.Errorf("report.json is not JSON")
	}
	if b, _ := os.ReadFile(filepath.Join(out, "concurrency.svg")); !strings.Contains(string(b), "<polyline") {
		t.Errorf("concurrency.svg has no series")
	}
	// The handlers' logs name jobs and never carry their input.
	logs, _ := os.ReadFile(filepath.Join(out, "limiter.log"))
	// (Not "seconds": a batch's completion log gives its duration so.)
	if strings.Contains(string(logs), `"failAttempts"`) || strings.Contains(string(logs), `"input":`) || strings.Contains(string(logs), "this job always fails") {
		t.Errorf("limiter.log contains job input")
	}
	if !strings.Contains(string(logs), `"jobId"`) {
		t.Errorf("limiter.log has no jobId fields")
	}
}
