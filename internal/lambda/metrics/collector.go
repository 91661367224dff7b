package metrics

import (
	"bytes"
	"encoding/json"
	"maps"
	"sync"
)

// Collector reads EMF lines (it is an io.Writer) and keeps totals, as CloudWatch would: the sum of
// counts and every sample of latencies and gauges, per type. The local stack gives one to each
// function's recorder so tests and the demo can read the metrics the functions published.
type Collector struct {
	mu      sync.Mutex
	pending []byte
	sums    map[string]map[string]float64
	samples map[string]map[string][]float64
}

// NewCollector returns an empty collector.
func NewCollector() *Collector {
	return &Collector{sums: map[string]map[string]float64{}, samples: map[string]map[string][]float64{}}
}

// Write takes EMF lines; lines that are not EMF are ignored.
func (c *Collector) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pending = append(c.pending, p...)
	for {
		i := bytes.IndexByte(c.pending, '\n')
		if i < 0 {
			break
		}
		c.take(c.pending[:i])
		c.pending = c.pending[i+1:]
	}
	return len(p), nil
}

func (c *Collector) take(line []byte) {
	var doc map[string]json.RawMessage
	if json.Unmarshal(line, &doc) != nil || doc["_aws"] == nil {
		return
	}
	var meta struct {
		CloudWatchMetrics []struct {
			Metrics []struct{ Name string }
		}
	}
	var typ string
	if json.Unmarshal(doc["_aws"], &meta) != nil || json.Unmarshal(doc["Type"], &typ) != nil {
		return
	}
	for _, d := range meta.CloudWatchMetrics {
		for _, m := range d.Metrics {
			raw := doc[m.Name]
			var v float64
			var vs []float64
			if json.Unmarshal(raw, &v) == nil {
				vs = []float64{v}
			} else if json.Unmarshal(raw, &vs) != nil {
				continue
			}
			if c.sums[typ] == nil {
				c.sums[typ], c.samples[typ] = map[string]float64{}, map[string][]float64{}
			}
			for _, x := range vs {
				c.sums[typ][m.Name] += x
			}
			c.samples[typ][m.Name] = append(c.samples[typ][m.Name], vs...)
		}
	}
}

// Sum returns the total of a metric for a type ("" for all types).
func (c *Collector) Sum(typ, metric string) float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if typ != "" {
		return c.sums[typ][metric]
	}
	var s float64
	for _, m := range c.sums {
		s += m[metric]
	}
	return s
}

// Samples returns every sample of a metric for a type.
func (c *Collector) Samples(typ, metric string) []float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]float64(nil), c.samples[typ][metric]...)
}

// Totals returns type -> metric -> sum.
func (c *Collector) Totals() map[string]map[string]float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]map[string]float64{}
	for t, m := range c.sums {
		out[t] = maps.Clone(m)
	}
	return out
}
