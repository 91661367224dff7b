package metrics_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"github.com/sfnlimit/sfnlimit/internal/lambda/metrics"
)

// Each line is valid EMF: its metric names are declared under the namespace with the Type
// dimension and the dimensionless total, and the values are there.
func TestFlushWritesEMF(t *testing.T) {
	var buf bytes.Buffer
	r := metrics.New(&buf, "sfnlimit-test")
	r.Add("payments", metrics.JobsStarted, 1)
	r.Add("payments", metrics.JobsStarted, 2)
	r.Add("", metrics.JobsRejected, 1)
	for i := range 250 {
		r.Observe("payments", metrics.StartLatency, float64(i))
	}
	if err := r.Flush(); err != nil {
		t.Fatal(err)
	}
	lines := 0
	sc := bufio.NewScanner(&buf)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		lines++
		var doc struct {
			AWS struct {
				Timestamp         int64
				CloudWatchMetrics []struct {
					Namespace  string
					Dimensions [][]string
					Metrics    []struct{ Name, Unit string }
				}
			} `json:"_aws"`
			Type string
		}
		raw := map[string]json.RawMessage{}
		if err := json.Unmarshal(sc.Bytes(), &doc); err != nil || json.Unmarshal(sc.Bytes(), &raw) != nil {
			t.Fatalf("line %q is not JSON: %v", sc.Text(), err)
		}
		d := doc.AWS.CloudWatchMetrics[0]
		if d.Namespace != "sfnlimit-test" || doc.AWS.Timestamp == 0 || len(d.Dimensions) != 2 || d.Dimensions[0][0] != "Type" || len(d.Dimensions[1]) != 0 {
			t.Errorf("line %s: want namespace, timestamp and dimension sets [[Type] []]", sc.Text())
		}
		for _, m := range d.Metrics {
			if _, ok := raw[m.Name]; !ok {
				t.Errorf("metric %s declared but has no value in %s", m.Name, sc.Text())
			}
			if m.Name == metrics.StartLatency && m.Unit != "Milliseconds" {
				t.Errorf("StartLatency unit = %s, want Milliseconds", m.Unit)
			}
			var vs []float64
			if json.Unmarshal(raw[m.Name], &vs) == nil && len(vs) > 100 {
				t.Errorf("metric %s has %d values in one line; EMF takes at most 100", m.Name, len(vs))
			}
		}
	}
	// payments counts, (none) counts, and 250 latency samples in 3 lines of at most 100.
	if lines != 5 {
		t.Errorf("lines = %d, want 5", lines)
	}
}

// The collector adds EMF lines up as CloudWatch would.
func TestCollectorSums(t *testing.T) {
	c := metrics.NewCollector()
	r := metrics.New(c, "")
	r.Add("a", metrics.JobsSucceeded, 2)
	r.Add("b", metrics.JobsSucceeded, 3)
	r.Observe("a", metrics.StartLatency, 10)
	r.Observe("a", metrics.StartLatency, 30)
	if err := r.Flush(); err != nil {
		t.Fatal(err)
	}
	r.Add("a", metrics.JobsSucceeded, 1)
	_ = r.Flush()
	_ = r.Flush() // nothing new: writes nothing
	c.Write([]byte("not json\n{\"no\":\"emf\"}\n"))
	if got := c.Sum("a", metrics.JobsSucceeded); got != 3 {
		t.Errorf("Sum(a, JobsSucceeded) = %v, want 3", got)
	}
	if got := c.Sum("", metrics.JobsSucceeded); got != 6 {
		t.Errorf("Sum(all, JobsSucceeded) = %v, want 6", got)
	}
	if got := c.Samples("a", metrics.StartLatency); len(got) != 2 || got[0]+got[1] != 40 {
		t.Errorf("Samples(a, StartLatency) = %v, want [10 30]", got)
	}
	var nilRec *metrics.Recorder
	nilRec.Add("a", metrics.JobsStarted, 1) // a nil recorder records nothing and does not panic
	if err := nilRec.Flush(); err != nil {
		t.Errorf("nil Flush() = %v", err)
	}
}

// Any producer may send jobs of any well-formed type: a type without a limit of its own (refused as
// unknown_type, or run on DefaultLimit) must not become a metric dimension of its own, or producers
// could add CloudWatch custom metrics, each billed, without bound. With the configured types known,
// every other type is counted under one dimension, Unlisted.
func TestUnlistedTypesShareOneDimension(t *testing.T) {
	var buf bytes.Buffer
	r := metrics.New(&buf, "ns")
	r.Listed(func(typ string) bool { return typ == "payments" })
	r.Add("payments", metrics.JobsStarted, 1)
	for i := range 1000 {
		r.Add(fmt.Sprintf("invented%d", i), metrics.JobsRejected, 1)
		r.Observe(fmt.Sprintf("invented%d", i), metrics.StartLatency, 5)
	}
	r.Add("", metrics.JobsRejected, 1)
	if err := r.Flush(); err != nil {
		t.Fatal(err)
	}
	types := map[string]bool{}
	sc := bufio.NewScanner(&buf)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var doc struct{ Type string }
		if err := json.Unmarshal(sc.Bytes(), &doc); err != nil {
			t.Fatal(err)
		}
		types[doc.Type] = true
	}
	want := map[string]bool{"payments": true, metrics.Unlisted: true, metrics.NoType: true}
	if !reflect.DeepEqual(types, want) {
		t.Errorf("Type dimensions = %v, want %v", types, want)
	}
}

// A pool's gauges go under the Pool dimension alone, never as a type.
func TestPoolGaugesHaveThePoolDimension(t *testing.T) {
	var buf bytes.Buffer
	r := metrics.New(&buf, "sfnlimit-test")
	r.ObservePool("llm_api", metrics.PoolRunning, 7)
	r.ObservePool("llm_api", metrics.PoolOccupancy, 70)
	if err := r.Flush(); err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	sc := bufio.NewScanner(&buf)
	for sc.Scan() {
		var doc map[string]any
		if err := json.Unmarshal(sc.Bytes(), &doc); err != nil {
			t.Fatal(err)
		}
		if doc["Pool"] != "llm_api" || doc["Type"] != nil {
			t.Errorf("line %s: want Pool llm_api and no Type", sc.Text())
		}
		dims := doc["_aws"].(map[string]any)["CloudWatchMetrics"].([]any)[0].(map[string]any)["Dimensions"]
		if fmt.Sprint(dims) != "[[Pool]]" {
			t.Errorf("dimensions = %v, want [[Pool]]", dims)
		}
		for _, m := range []string{metrics.PoolRunning, metrics.PoolOccupancy} {
			if vs, ok := doc[m].([]any); ok {
				got[m] = vs[0].(float64)
			}
		}
	}
	if want := map[string]float64{metrics.PoolRunning: 7, metrics.PoolOccupancy: 70}; !reflect.DeepEqual(got, want) {
		t.Errorf("pool gauges = %v, want %v", got, want)
	}
}
