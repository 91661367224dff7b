package tests

import (
	"fmt"
	"testing"
	"time"

	"github.com/sfnlimit/sfnlimit/internal/tools/local/observe"
)

const (
	poolName     = "pp"
	poolCap      = 4
	poolLimit    = 4 // each member's own limit: either alone could fill the pool
	poolJobs     = 12
	poolHeavy    = "ps" // share 3
	poolLight    = "pc" // share 1
	poolAlone    = "pz" // a type outside the pool, which it never holds back
	poolAloneCap = 2
)

// Scenario 23: a shared pool. Types ps and pc (4 lanes each) share pool pp of cap 4, with shares 3
// and 1 (Pools, TypePools, PoolShares); pz, outside the pool, has 2 lanes. Each submits its jobs at
// once (24 of ps, 24 of pc, 6 of pz), of 1, 2 and 3 s of work by turns, so that jobs end one at a
// time as real ones do.
//
// Checked from Step Functions' records (each execution's work interval): every invariant of the
// suite; the pool's members together never worked more than its cap at once, though their limits
// add up to twice it; pz ran its own limit beside the full pool; and while both members had jobs
// waiting, the member of share 3 had the larger part of the pool's slot-time. The split itself is
// logged, not held to 3:1: wake-ups share out the slots among parked heads, and a head on its way
// from the queue takes a slot it finds free, so the split depends on how long a job lasts beside a
// head's way, which on a busy machine is long (docs/design.md, "Handovers"; the shares are held to
// 3:1 within 5 points in the simulation, TestPoolFairness). It is measured from the pool's first
// release, the first slot the limiter hands over: the pool fills by arrival, as nothing runs yet
// to share by. The jobs run on fauxqs, which serves one message of a FIFO group at a time as SQS
// does (moto hands out several, and each would bind by arrival).
func TestPools(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	r := newRig(t, rigOptions{backend: fauxqs, params: map[string]string{
		"TypeLimits": fmt.Sprintf("%s=%d,%s=%d,%s=%d", poolHeavy, poolLimit, poolLight, poolLimit, poolAlone, poolAloneCap),
		"Pools":      fmt.Sprintf("%s=%d", poolName, poolCap),
		"TypePools":  fmt.Sprintf("%s=%s,%s=%s", poolHeavy, poolName, poolLight, poolName),
		"PoolShares": poolHeavy + "=3",
	}})
	var jobs []job
	for i := range poolJobs {
		for _, typ := range []string{poolHeavy, poolLight} {
			jobs = append(jobs, job{Type: typ, ID: fmt.Sprintf("%s-%02d", typ, i), Input: work{Seconds: 4 + i%3}})
		}
		if i < 6 {
			jobs = append(jobs, job{Type: poolAlone, ID: fmt.Sprintf("%s-%02d", poolAlone, i), Input: work{Seconds: 2}})
		}
	}
	r.submit(ctx, jobs...)
	out := r.settle(ctx, settleWithin)
	r.checkInvariants(ctx, out, nil)

	inPool := func(x observe.Execution) string {
		if x.Job.Type == poolHeavy || x.Job.Type == poolLight {
			return poolName
		}
		return x.Job.Type
	}
	peaks := observe.PeaksBy(out.xs, out.end, inPool)
	t.Logf("pool %s: peak %d working at once (cap %d, its members' limits add up to %d); %s: peak %d (limit %d)",
		poolName, peaks[poolName].Max, poolCap, 2*poolLimit, poolAlone, peaks[poolAlone].Max, poolAloneCap)
	if peaks[poolName].Max > poolCap {
		t.Errorf("pool %s: %d of its members' executions worked at once at %s, over its cap %d",
			poolName, peaks[poolName].Max, peaks[poolName].At.Format(time.RFC3339Nano), poolCap)
	}
	if peaks[poolName].Max < poolCap || peaks[poolAlone].Max < poolAloneCap {
		t.Errorf("peaks %d in the pool and %d of %s: want the pool used whole and %s at its limit beside it",
			peaks[poolName].Max, peaks[poolAlone].Max, poolAlone, poolAlone)
	}

	// Slot-time while both members had jobs waiting: from the pool's first release to the earlier
	// of their last starts.
	last := map[string]time.Time{}
	from := out.end
	for _, x := range out.xs {
		if x.Start.After(last[x.Job.Type]) {
			last[x.Job.Type] = x.Start
		}
		if inPool(x) == poolName && x.WorkEnd.Before(from) {
			from = x.WorkEnd
		}
	}
	to := last[poolHeavy]
	if last[poolLight].Before(to) {
		to = last[poolLight]
	}
	used := map[string]float64{}
	for _, x := range out.xs {
		a, b := x.Start, x.WorkEnd
		if a.Before(from) {
			a = from
		}
		if b.After(to) {
			b = to
		}
		if b.After(a) {
			used[x.Job.Type] += b.Sub(a).Seconds()
		}
	}
	share := used[poolHeavy] / (used[poolHeavy] + used[poolLight])
	t.Logf("while both waited (%s from the pool's first release): %s had %.1f%% of the pool's slot-time, %s %.1f%% (shares 3:1: 75%% / 25%%)",
		to.Sub(from).Round(100*time.Millisecond), poolHeavy, 100*share, poolLight, 100*(1-share))
	if share <= 0.5 {
		t.Errorf("%s had %.1f%% of the pool's slot-time while both members waited; want more than %s, whose share is a third of its", poolHeavy, 100*share, poolLight)
	}
}
