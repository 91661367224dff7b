package simworld

import (
	"testing"
	"testing/synctest"
	"time"
)

// The limit an execution may have been started under is one in force up to the configuration
// cache's age (10 s, and 1 s of skew) before its start: a starter acts on a limit it read that
// long ago. While it runs, the type's bound is the highest such limit, whether it started long
// ago or a moment before the check. A lowered limit under `random` lets jobs start in the new
// range beside the ones still running above it (docs/configuration.md); at seed 11985 of `all`
// gamma's limit went from 3 to 1, gamma-j072 started in lane 3 5.7 s later (on the cached limit),
// and gamma-j000's retry in lane 1, 13.7 s after the change, was taken for 2 executions over a
// limit of 1 (13399: the same with a first start).
func TestBoundKeepsTheLimitARunningExecutionStartedUnder(t *testing.T) {
	tests := []struct {
		name   string
		oldest time.Duration // when the oldest running execution started, after the change
		now    time.Duration // when the new one starts, after the change
		want   int
	}{
		{name: "oldest started within the cache's age after the change", oldest: 5700 * time.Millisecond, now: 13700 * time.Millisecond, want: 3},
		{name: "oldest started before the change", oldest: -time.Minute, now: time.Minute, want: 3},
		{name: "oldest started past the cache's age after the change", oldest: 20 * time.Second, now: 30 * time.Second, want: 1},
		{name: "none running, within the cache's age", oldest: 5 * time.Second, now: 5 * time.Second, want: 3},
		{name: "none running, past the cache's age", oldest: 13 * time.Second, now: 13 * time.Second, want: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := New(1, DefaultConfig()).check
				changed := time.Now().Add(-tt.now)
				c.history["gamma"] = []limitAt{{from: changed.Add(-time.Hour), limit: 3}, {from: changed, limit: 1}}
				if got, _ := c.bound("gamma", "", changed.Add(tt.oldest)); got != tt.want {
					t.Errorf("bound = %d, want %d", got, tt.want)
				}
			})
		})
	}
}
