package tests

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"

	"github.com/sfnlimit/sfnlimit/internal/lambda/lane"
	"github.com/sfnlimit/sfnlimit/internal/tools/local/gateway"
)

// Scenario 13: the faults real AWS produces now and then and the emulators never do, all on at once
// at rates far above AWS's (docs/emulators.md, "Injected faults"):
//   - DescribeExecution answers ExecutionDoesNotExist for half the calls about an execution started
//     less than 3 s ago (eventually consistent);
//   - a quarter of the workflow's invocations of the releaser are throttled (429), and every
//     invocation that would release job rel-stuck as succeeded is, so its Release step exhausts its
//     retries;
//   - a fifth of the event-source batches (general and lanes queue) are delivered twice, within 3 s;
//   - large jobs (180 KiB inputs, sent while nothing polls) make the router's batches bigger than
//     SQS's limit on one request (1 MiB), which both SQS emulators enforce.
//
// Every invariant must still hold, and every job runs as many executions as its own outcome needs:
// one, two for a job that fails once, DefaultMaxAttempts for one that always fails.
func TestInjectedFaults(t *testing.T) {
	t.Parallel()
	for _, v := range []struct {
		name     string
		b        backend
		strategy string
	}{
		// Both strategies, each on its own SQS; first-free on the stricter FIFO emulator.
		{"moto/random", moto, lane.Random},
		{"fauxqs/first-free", fauxqs, lane.FirstFree},
	} {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			injectedFaults(t, v.b, v.strategy)
		})
	}
}

const stuckRelease = "rel-stuck"

func injectedFaults(t *testing.T, b backend, strategy string) {
	ctx := t.Context()
	const attempts = 2 // DefaultMaxAttempts
	seed := faultSeed(t)
	faults := &gateway.Faults{
		StaleDescribe: 0.5, StaleDescribeFor: 3 * time.Second,
		InvokeThrottle: 0.25,
		ThrottleInvoke: func(_ string, payload []byte) bool {
			return strings.Contains(string(payload), stuckRelease) && strings.Contains(string(payload), "succeeded")
		},
		Seed: seed,
	}
	r := newRig(t, rigOptions{backend: b, noRuntime: true, faults: faults, duplicates: 0.2, dupWithin: 3 * time.Second,
		params: map[string]string{"TypeLimits": "x=3,y=2", "LaneStrategy": strategy, "DefaultMaxAttempts": fmt.Sprint(attempts)}})
	t.Logf("fault seed %d", seed)
	t.Cleanup(func() { injectedFaultCounts(r) }) // logged whether the scenario settles or not

	want := map[string]int{} // executions per job
	var jobs []job
	add := func(j job, executions int) {
		jobs = append(jobs, j)
		want[j.Type+"/"+j.ID] = executions
	}
	// Large jobs, four per submission (a submission stays under SQS's request limit); the router
	// receives up to ten of them in one batch.
	pad := strings.Repeat("p", 180*1024)
	var large []job
	for i := range 8 {
		j := job{Type: []string{"x", "y"}[i%2], ID: fmt.Sprintf("big-%02d", i), Input: map[string]any{"seconds": 1, "pad": pad}}
		large = append(large, j)
		want[j.Type+"/"+j.ID] = 1
	}
	r.submit(ctx, large[:4]...)
	r.submit(ctx, large[4:]...)

	for i := range 30 {
		typ := []string{"x", "y", "x"}[i%3]
		switch {
		case i%10 == 3: // fails once, then succeeds
			add(job{Type: typ, ID: fmt.Sprintf("flaky-%02d", i), Input: map[string]any{"seconds": 1, "failAttempts": 1}}, 2)
		case i%10 == 7: // always fails
			add(job{Type: typ, ID: fmt.Sprintf("fail-%02d", i), Input: work{Seconds: 1, Fail: true}, Want: "attempts_exhausted"}, attempts)
		default:
			add(job{Type: typ, ID: fmt.Sprintf("ok-%02d", i), Input: work{Seconds: 1 + i%3}}, 1)
		}
	}
	add(job{Type: "x", ID: stuckRelease, Input: work{Seconds: 1}}, 1)
	r.submit(ctx, jobs...)
	began := time.Now()
	r.startRuntime()

	time.Sleep(8 * time.Second) // a second wave while the first runs
	var wave []job
	for i := range 15 {
		j := job{Type: []string{"y", "x"}[i%2], ID: fmt.Sprintf("late-%02d", i), Input: work{Seconds: 1 + i%2}}
		wave = append(wave, j)
		want[j.Type+"/"+j.ID] = 1
	}
	r.submit(ctx, wave...)

	out := r.settle(ctx, settleWithin)
	t.Logf("%d jobs done in %v", len(want), time.Since(began).Round(100*time.Millisecond))
	r.checkInvariants(ctx, out, nil)

	// Faults are no excuse for running a job more often than its own outcome needs.
	keys := make([]string, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		xs := out.byJob[k]
		if len(xs) != want[k] {
			t.Errorf("job %s: executions %s, want %d", k, names(xs), want[k])
			continue
		}
		seen := map[int]bool{}
		for _, x := range xs {
			if seen[x.Job.Attempt] {
				t.Errorf("job %s ran attempt %d twice: %s", k, x.Job.Attempt, names(xs))
			}
			seen[x.Job.Attempt] = true
		}
	}
	if xs := out.byJob["x/"+stuckRelease]; len(xs) == 1 && xs[0].Status != string(sfntypes.ExecutionStatusSucceeded) {
		t.Logf("job x/%s: its work succeeded, its Release step was throttled to the end: execution %s", stuckRelease, names(xs))
	}

	// Evidence, not invariants: every fault was injected.
	injected, dups := injectedFaultCounts(r)
	for _, kind := range []string{gateway.InjectedStaleDescribe, gateway.InjectedInvokeThrottle} {
		if injected[kind] == 0 {
			t.Errorf("no %s fault was injected: the scenario did not test it", kind)
		}
	}
	if dups == 0 {
		t.Errorf("no batch was delivered twice: the scenario did not test duplicate deliveries")
	}
}

// injectedFaultCounts logs and returns the faults injected so far, by kind, and the batches the
// pollers delivered twice.
func injectedFaultCounts(r *rig) (map[string]int64, int) {
	injected := r.s.Gateway().Injected()
	dups := 0
	if rt := r.s.Runtime(); rt != nil {
		for kind, p := range rt.Pollers {
			st := p.Stats()
			dups += st.Duplicates
			r.t.Logf("poller %s: %d invocations, %d batches delivered twice", kind, st.Invocations, st.Duplicates)
		}
	}
	calls := r.s.Gateway().Calls()
	r.t.Logf("faults injected: %s %d of %d describes, %s %d of %d invokes; duplicate batches %d; SendMessageBatch calls %d",
		gateway.InjectedStaleDescribe, injected[gateway.InjectedStaleDescribe], calls[gateway.Call{Service: "states", Operation: "DescribeExecution"}],
		gateway.InjectedInvokeThrottle, injected[gateway.InjectedInvokeThrottle], calls[gateway.Call{Service: "lambda", Operation: "Invoke"}],
		dups, calls[gateway.Call{Service: "sqs", Operation: "SendMessageBatch"}])
	return injected, dups
}

// faultSeed is the seed of a scenario's injected faults: SFNLIMIT_FAULT_SEED when set (to replay
// the faults of a failed run, whose log names its seed), else a new one.
func faultSeed(t *testing.T) uint64 {
	t.Helper()
	if v := os.Getenv("SFNLIMIT_FAULT_SEED"); v != "" {
		seed, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("SFNLIMIT_FAULT_SEED=%q: want an unsigned integer: %v", v, err)
		}
		return seed
	}
	return uint64(time.Now().UnixNano())
}
