package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	ledger "github.com/sfnlimit/sfnlimit/internal/lambda/batch"
	"github.com/sfnlimit/sfnlimit/internal/tools/fakes"
)

// Each type's jobs name the type's batch, and so does the oversized job of reports; the other
// malformed jobs name none (their type is not the workload's, or they have none).
func TestWorkloadBatches(t *testing.T) {
	w := DefaultWorkload()
	sizes := map[string]int{}
	for _, j := range w.Jobs() {
		var body struct {
			Batch string `json:"batch"`
		}
		_ = json.Unmarshal([]byte(j.Body), &body)
		if body.Batch != j.Batch {
			t.Errorf("job %s: body names batch %q, job %q", j.ID, body.Batch, j.Batch)
		}
		sizes[j.Batch]++
	}
	want := map[string]int{"demo-payments": 24, "demo-reports": 61, "demo-llm": 120, "": 3}
	for b, n := range want {
		if sizes[b] != n {
			t.Errorf("batch %q holds %d jobs, want %d (all: %v)", b, sizes[b], n, sizes)
		}
	}
	w.Batches = false
	for _, j := range w.Jobs() {
		if j.Batch != "" || strings.Contains(j.Body, `"batch"`) {
			t.Fatalf("without batches, job %s names batch %q", j.ID, j.Batch)
		}
	}
}

// The watch opens each batch for its jobs, reports each close once with its counts, and the
// report names a batch that did not close, or closed with other counts than its jobs'.
func TestBatchWatch(t *testing.T) {
	ctx := context.Background()
	jobs := []Job{
		{Type: "a", ID: "1", Batch: "demo-a", Expect: "succeeded"},
		{Type: "a", ID: "2", Batch: "demo-a", Expect: "dead-lettered"},
		{Type: "a", ID: "big", Batch: "demo-a", Expect: "input_too_large"},
		{Type: "b", ID: "1", Batch: "demo-b", Expect: "succeeded"},
		{ID: "bad-json", Expect: "not_json"},
	}
	l := ledger.New(fakes.NewDynamoDB("t"), "t")
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	bw := newBatchWatch(l, jobs)
	bw.start = start
	if err := bw.open(ctx, start); err != nil {
		t.Fatal(err)
	}
	if got := bw.String(); got != "demo-a (3 jobs), demo-b (1 jobs)" {
		t.Errorf("batches %q", got)
	}
	end := func(id, job string, o ledger.Outcome) {
		t.Helper()
		rec, err := l.Record(ctx, id, job, 0, o, start.Add(42*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if rec.Result == ledger.Closed {
			if err := l.Announced(ctx, id); err != nil {
				t.Fatal(err)
			}
		}
	}
	end("demo-a", "a/1", ledger.Succeeded)
	end("demo-a", "a/2", ledger.DeadLettered)
	end("demo-b", "b/1", ledger.DeadLettered) // not what its job should do
	lines, err := bw.poll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"batch demo-b closed 42.0s into the run: 1/1 jobs, 0 succeeded, 1 dead_lettered, 0 refused"}; strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("poll() = %q, want %q", lines, want)
	}
	var out bytes.Buffer
	if err := bw.settle(ctx, &out, 0); err != nil {
		t.Fatal(err)
	}
	if out.Len() != 0 || bw.done() {
		t.Errorf("settle() wrote %q, done %v: want nothing new, demo-a still open", out.String(), bw.done())
	}
	got := batchMismatches(bw.results())
	want := []string{"batch demo-a: not closed (2 of 3 jobs recorded), refused 0, want 1", "batch demo-b: succeeded 0, want 1, dead_lettered 1, want 0"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("mismatches:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	end("demo-a", "a/big", ledger.Refused)
	if err := bw.settle(ctx, &out, time.Minute); err != nil {
		t.Fatal(err)
	}
	if want := "batch demo-a closed 42.0s into the run: 3/3 jobs, 1 succeeded, 1 dead_lettered, 1 refused\n"; out.String() != want || !bw.done() {
		t.Errorf("settle() wrote %q, done %v; want %q", out.String(), bw.done(), want)
	}
	if got := batchMismatches(bw.results()); len(got) != 1 || !strings.HasPrefix(got[0], "batch demo-b:") {
		t.Errorf("mismatches %q, want demo-b's only", got)
	}
	out.Reset()
	printBatches(&out, bw.results())
	for _, want := range []string{"  batch  jobs  succeeded  dead_lettered  refused  closed at  event", "demo-a     3          1              1        1      42.0s   sent"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
}
