package localbench_test

import (
	"bytes"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sfnlimit/sfnlimit/internal/tools/localbench"
)

// The simulator's lanes are the stack's: a small time-scaled run on the local stack, for each lane
// strategy of the router that the template offers (first-free, random), must wait as the simulator
// predicts for the same jobs (within the noise the run's own latencies give the prediction), put each
// job in the lane the simulator chose wherever that choice does not depend on timing, and never run
// more executions of the type at once than its limit.
func TestLocalStackAgreesWithSimulator(t *testing.T) {
	strategies, err := localbench.Strategies("")
	if err != nil {
		t.Fatalf("Strategies() error = %v", err)
	}
	// Each strategy's run takes 30-40 s on a quiet machine: 32 jobs of 2 s on average at load 0.8
	// over 5 lanes, submitted over about 16 s. They run one after another, so that one does not slow
	// another on a small machine.
	//
	// The comparison tests the simulator only while the stack's latencies are small beside the jobs
	// (Config.MaxLatency: medians at most the mean duration). A busy machine can make them seconds
	// long with a stack that is still the model; the run then says so (Comparison.MedianLatency),
	// and the strategy is run again on a time scale derived from the latency it measured, so that
	// the latencies are small beside the jobs again. A latency that grows with the time scale (a
	// stack that is not the model) still fails at the last scale.
	const (
		firstMean = 2.0 // seconds
		maxMean   = 12.0
	)
	for _, s := range strategies {
		t.Run(s, func(t *testing.T) {
			ctx := t.Context()
			var (
				c   localbench.Config
				m   localbench.Measurement
				cmp localbench.Comparison
			)
			for mean := firstMean; ; {
				c = localbench.Config{Strategy: s, Lanes: 5, Jobs: 32, MeanSeconds: mean, Seed: 7}.WithDefaults()
				began := time.Now()
				timeout := time.Duration(float64(3*time.Minute) * mean / firstMean)
				var err error
				m, err = localbench.Measure(ctx, c, localbench.RunOptions{Progress: logWriter{t}, ProgressEvery: 10 * time.Second, Timeout: timeout})
				if err != nil {
					t.Fatalf("Measure(%s) error = %v", c, err)
				}
				cmp, err = localbench.Compare(ctx, m)
				if err != nil {
					t.Fatalf("Compare() error = %v", err)
				}
				var buf bytes.Buffer
				if err := localbench.WriteText(&buf, []localbench.Result{{Measurement: m, Comparison: cmp}}); err != nil {
					t.Fatal(err)
				}
				t.Logf("%s in %v:\n%s", s, time.Since(began).Round(time.Second), buf.String())
				// Twice the measured median latency, in whole seconds: the next scale's jobs are
				// at least twice as long as the latencies this machine gives now.
				next := math.Ceil(2 * cmp.MedianLatency)
				if cmp.MedianLatency <= c.MaxLatency || mean >= maxMean || next <= mean {
					break
				}
				mean = min(next, maxMean)
				t.Logf("median latency %.2fs over the %gs the model allows at this time scale (a busy machine): running %s again with jobs of %gs on average",
					cmp.MedianLatency, c.MaxLatency, s, mean)
			}

			if m.Peak > c.Lanes {
				t.Errorf("%d executions of the type worked at once, over its limit %d", m.Peak, c.Lanes)
			}
			if m.Peak < 2 {
				t.Errorf("at most %d execution worked at once: the run never loaded the lanes it is meant to measure", m.Peak)
			}
			if !cmp.LanesAgree() {
				var off []string
				for i, j := range m.Jobs {
					if j.Lane != cmp.SimLanes[i] && len(off) < 5 {
						off = append(off, fmt.Sprintf("%s in lane %d, simulated %d", j.ID, j.Lane, cmp.SimLanes[i]))
					}
				}
				t.Errorf("%d of %d jobs ran in the lane the simulator chose, want all (the choice does not depend on timing): %s",
					cmp.LaneMatches, cmp.Jobs, strings.Join(off, "; "))
			}
			if cmp.LatencyProblem != "" {
				t.Errorf("the stack's latencies do not fit the model (the simulator plus small latencies): %s", cmp.LatencyProblem)
			}
			for _, r := range cmp.Rows {
				if !r.Agree {
					t.Errorf("%s wait measured %.2fs, predicted %.2fs ± %.2fs: z %+.1f, beyond the tolerance of %g noise",
						r.Figure, r.Measured, r.Predicted, r.Noise, r.Z, c.Tolerance)
				}
			}
			if !strings.HasPrefix(cmp.Verdict(), "AGREE") && !t.Failed() {
				t.Errorf("Verdict() = %q, but no check failed", cmp.Verdict())
			}
		})
	}
}

// logWriter sends progress lines to the test's log.
type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
