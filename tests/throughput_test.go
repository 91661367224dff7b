package tests

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
)

// Scenario 14: how fast first-free binds, side by side with random in the same run. Two types of the
// same limit on fauxqs, ff on first-free (the default) and rr on random (a live override), each get
// the same burst of instant jobs at once; each type's start rate is measured from Step Functions'
// own start times, over the middle 80% of its starts (leaving out the ramp-up and the tail). Every
// first-free start follows one bind, so ff's start rate is its bind rate.
//
// make test runs it with 60 jobs per type and checks the invariants; the rates are figures, printed,
// never asserted (a busy machine changes them). `make bench-binds` runs it with more jobs
// (SFNLIMIT_BIND_JOBS) for the figure in docs/strategies.md.
func TestBindThroughput(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	n := 60
	if v := os.Getenv("SFNLIMIT_BIND_JOBS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 10 {
			t.Fatalf("SFNLIMIT_BIND_JOBS=%q: want a number of at least 10", v)
		}
	}
	const limit = 50
	r := newRig(t, rigOptions{backend: fauxqs, noRuntime: true, params: map[string]string{
		"TypeLimits": fmt.Sprintf("ff=%d,rr=%d", limit, limit), "ConfigCacheSeconds": "0",
	}})
	if err := config.NewDynamoStore(r.c.DDB, r.table).SetOverride(ctx, config.Override{Type: "rr", Strategy: "random"}); err != nil {
		t.Fatal(err)
	}
	var jobs []job
	for i := range n {
		for _, typ := range []string{"ff", "rr"} {
			jobs = append(jobs, job{Type: typ, ID: fmt.Sprintf("t-%04d", i), Input: work{Seconds: 0}})
		}
	}
	r.submit(ctx, jobs...)
	r.startRuntime()
	out := r.settle(ctx, settleWithin)
	r.checkInvariants(ctx, out, nil)

	rate := map[string]float64{}
	for _, typ := range []string{"ff", "rr"} {
		var starts []time.Time
		for _, x := range out.xs {
			if x.Job.Type == typ {
				starts = append(starts, x.Start)
			}
		}
		rate[typ] = middleRate(starts)
		t.Logf("%s: %d starts, %.1f starts/s over the middle 80%%", typ, len(starts), rate[typ])
	}
	t.Logf("bind throughput: first-free %.1f binds/s per type = %.0f%% of random's %.1f starts/s (%d jobs per type, limit %d, fauxqs)",
		rate["ff"], 100*rate["ff"]/rate["rr"], rate["rr"], n, limit)
}

// middleRate is the rate of the starts between the 10th and the 90th percentile of their times.
func middleRate(starts []time.Time) float64 {
	if len(starts) < 10 {
		return 0
	}
	sort.Slice(starts, func(i, j int) bool { return starts[i].Before(starts[j]) })
	lo, hi := len(starts)/10, len(starts)-1-len(starts)/10
	d := starts[hi].Sub(starts[lo]).Seconds()
	if d <= 0 {
		return 0
	}
	return float64(hi-lo) / d
}
