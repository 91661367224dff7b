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

// The work-conservation bound in a run with kills: two crashes' worth (2 x (2.5 visibility
// timeouts + a sweep) past the 5 minutes) at least, and past that the time the kills of the type's
// own work hold it, each a visibility timeout from its kill (its batch in flight), overlapping
// ones once. At seed 980 of `races` the deliveries of gamma's waiting group were killed at every
// visibility timeout from 10m49s to 40m57s (seven in a row) while gamma idled 32m5s, over the
// constant bound of 32 minutes; at seed 1101 six from 24m51s.
func TestIdleBoundFollowsTheKillsOfTheTypesWork(t *testing.T) {
	const v = 5 * time.Minute // DefaultConfig's visibility timeout, a sweep a minute
	floor := 5*time.Minute + 2*(v*5/2+time.Minute)
	every := func(from time.Duration, n int) []time.Duration {
		var ks []time.Duration
		for i := range n {
			ks = append(ks, from+time.Duration(i)*v)
		}
		return ks
	}
	tests := []struct {
		name  string
		kills []time.Duration // after the idle interval's start, of gamma's work
		other []time.Duration // of alpha's work
		idle  time.Duration
		want  time.Duration
	}{
		{name: "no kills: two crashes' worth", idle: 40 * time.Minute, want: floor},
		{name: "two kills at once hold one visibility timeout, under the floor", kills: []time.Duration{time.Minute, time.Minute}, idle: 40 * time.Minute, want: floor},
		{name: "seven in a row, one each visibility timeout (seed 980)", kills: every(54*time.Second, 7), idle: 32*time.Minute + 5*time.Second, want: 5*time.Minute + 31*time.Minute + 11*time.Second},
		{name: "kills of another type's work count for nothing", other: every(54*time.Second, 7), idle: 32*time.Minute + 5*time.Second, want: floor},
		{name: "a kill before the interval counts for what is left of its hold", kills: append([]time.Duration{-2 * time.Minute}, every(3*time.Minute, 7)...), idle: 40 * time.Minute, want: 5*time.Minute + 38*time.Minute},
		{name: "a hold past now counts up to now", kills: every(0, 8), idle: 36 * time.Minute, want: 5*time.Minute + 36*time.Minute},
		{name: "gaps between holds count for nothing (a lost wake-up between kills, seed 21106 of all+pools)", kills: []time.Duration{-7 * time.Second, 9 * time.Minute, 14 * time.Minute, 19 * time.Minute, 31 * time.Minute}, idle: 32*time.Minute + 5*time.Second, want: floor},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := DefaultConfig()
				cfg.Faults.Kill = 0.01
				c := New(1, cfg).check
				since := time.Now()
				for _, k := range tt.kills {
					c.kills["gamma"] = append(c.kills["gamma"], since.Add(k))
				}
				for _, k := range tt.other {
					c.kills["alpha"] = append(c.kills["alpha"], since.Add(k))
				}
				if got := c.idleBound("gamma", since, since.Add(tt.idle)); got != tt.want {
					t.Errorf("bound = %s, want %s", got, tt.want)
				}
			})
		})
	}
}
