package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	sfnjob "github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/tools/local/observe"
)

// Scenario 15: concurrency keys (tenants) inside one type. Type k runs at most 6 jobs at once and at
// most 2 of any one key (TypeKeyLimits); key premium has its own cap of 4, set in the live config
// item before any job, and lowered to 2 mid-run. In order:
//  1. noisy submits 20 jobs at once and, alone, gets its cap of 2;
//  2. premium submits 20 jobs: with noisy's 2 they fill the type's 6 lanes;
//  3. quiet keys q1-q4 submit 2 jobs each, the default key (no key) 3, q1 also a job that always
//     fails (tried twice, then dead-lettered), and two jobs with keys the contract refuses (the
//     router dead-letters them with invalid_key);
//  4. once every quiet job ended, premium's cap is lowered to 2 and premium submits 3 more;
//  5. once premium is done, noisy submits 6 more and is alone again.
//
// Checked from Step Functions' records (each execution's work interval and the key in its input):
// every invariant of the suite; no key ever ran more jobs at once than its cap; every quiet job
// started while noisy's and premium's first backlogs still waited (plain FIFO order, or waking the
// oldest head, would have started them all first); premium's starts after the lowered cap reached
// every function kept to it; and noisy, alone, ran exactly its cap, each freed lane handed on
// without waiting for a parked job's own timeout.
func TestKeys(t *testing.T) {
	forBackends(t, sqsFacing, func(t *testing.T, b backend) { keysScenario(t, b) })
}

// Scenario 15b: a key cap set live on a type whose backlog already waits in its lanes. With the
// random strategy the router sends every job straight to a lane group, so 16 jobs of key acme wait
// four to a lane when the type (4 lanes) gets keyLimit 1. A job in a lane was never bound, and only a
// bind counts a key's running jobs: each must go to its key's group first, so that from the change
// on, acme runs one job at a time, checked from Step Functions' records as in scenario 15.
func TestKeysCapTheBacklogInLanes(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	const (
		typ    = "r"
		lanes  = 4
		capped = 1
	)
	r := newRig(t, rigOptions{backend: fauxqs, params: map[string]string{
		"TypeLimits": fmt.Sprintf("%s=%d", typ, lanes), "LaneStrategy": "random", "ConfigCacheSeconds": fmt.Sprint(keyCacheSecs),
	}})
	var jobs []job
	for _, id := range idsPerLane(t, typ, lanes, 4) {
		jobs = append(jobs, job{Type: typ, ID: id, Key: "acme", Input: work{Seconds: keyJobSeconds}})
	}
	r.submit(ctx, jobs...)
	r.waitFor(ctx, progressWithin, "acme to run in every lane", func() (bool, string) {
		n := r.runningPerKey(ctx, typ)["acme"]
		return n >= lanes, fmt.Sprintf("acme runs %d", n)
	})
	store := config.NewDynamoStore(r.c.DDB, r.table)
	if err := store.SetOverride(ctx, config.Override{Type: typ, KeyLimit: capped}); err != nil {
		t.Fatalf("SetOverride(keyLimit %d) = %v", capped, err)
	}
	lowered := time.Now()
	out := r.settle(ctx, settleWithin)
	t.Logf("%d jobs done; key limit set at %v", len(jobs), lowered.Sub(r.began).Round(100*time.Millisecond))
	r.checkInvariants(ctx, out, nil)
	lag := overrun(out.xs, func(x observe.Execution) (int, bool) { return keyJobSeconds, true })
	t.Logf("overrun of the stack in this run: %v", lag.Round(10*time.Millisecond))
	checkLoweredCap(t, out, "acme", lanes, capped, lowered.Add(keyCacheSecs*time.Second+2*time.Second+lag))
	if moved := r.logs.count("job moved to its key's group"); moved == 0 {
		t.Errorf("no job left its lane for its key's group: the scenario tested nothing")
	}
}

const (
	keyType        = "k"
	keyTypeLimit   = 6
	keyLimit       = 2 // TypeKeyLimits: every key's cap
	premiumCap     = 4 // premium's own cap, from the live config item
	premiumLowered = 2 // premium's cap after the live change
	keyJobSeconds  = 2
	keyCacheSecs   = 1 // ConfigCacheSeconds
)

// keyCap is the most jobs of a key that may work at once over the whole run.
func keyCap(key string) int {
	if key == "premium" {
		return premiumCap
	}
	return keyLimit
}

func keysScenario(t *testing.T, b backend) {
	ctx := t.Context()
	r := newRig(t, rigOptions{backend: b, noRuntime: true, params: map[string]string{
		"TypeLimits": fmt.Sprintf("%s=%d", keyType, keyTypeLimit), "TypeKeyLimits": fmt.Sprintf("%s=%d", keyType, keyLimit),
		"ConfigCacheSeconds": fmt.Sprint(keyCacheSecs), "DefaultMaxAttempts": "2",
	}})
	store := config.NewDynamoStore(r.c.DDB, r.table)
	if err := store.SetOverride(ctx, config.Override{Type: keyType, KeyLimits: map[string]int{"premium": premiumCap}}); err != nil {
		t.Fatalf("SetOverride(premium=%d) = %v", premiumCap, err)
	}
	r.startRuntime()
	began := time.Now()
	since := func(at time.Time) time.Duration { return at.Sub(r.began).Round(100 * time.Millisecond) }

	keyOf := map[string]string{} // job id -> key
	batch := func(key, prefix string, n int) []job {
		var jobs []job
		for i := range n {
			j := job{Type: keyType, ID: fmt.Sprintf("%s-%02d", prefix, i), Key: key, Input: work{Seconds: keyJobSeconds}}
			keyOf[j.ID] = key
			jobs = append(jobs, j)
		}
		return jobs
	}

	// 1. noisy alone.
	noisy := batch("noisy", "noisy", 20)
	r.submit(ctx, noisy...)
	r.waitFor(ctx, progressWithin, "noisy, alone, to run its cap", func() (bool, string) {
		n := r.runningPerKey(ctx, keyType)["noisy"]
		return n >= keyLimit, fmt.Sprintf("noisy runs %d", n)
	})

	// 2. premium fills the rest of the type.
	premium := batch("premium", "premium", 20)
	r.submit(ctx, premium...)
	r.waitFor(ctx, progressWithin, "premium to run its cap beside noisy", func() (bool, string) {
		n := r.runningPerKey(ctx, keyType)
		return n["premium"] >= premiumCap, fmt.Sprintf("running by key %v", n)
	})

	// 3. Quiet keys, the default key, a failing job and refused keys.
	var quiet []job
	for q := 1; q <= 4; q++ {
		quiet = append(quiet, batch(fmt.Sprintf("q%d", q), fmt.Sprintf("q%d", q), 2)...)
	}
	quiet = append(quiet, batch("", "default", 3)...)
	fail := job{Type: keyType, ID: "q1-fail", Key: "q1", Input: work{Seconds: 1, Fail: true, FailCause: "boom"}, Want: "attempts_exhausted"}
	keyOf[fail.ID] = fail.Key
	quiet = append(quiet, fail)
	refused := []job{
		{Type: keyType, ID: "badkey-slash", Key: "acme/eu", Input: work{Seconds: 1}, Want: string(sfnjob.ReasonInvalidKey)},
		{Type: keyType, ID: "badkey-long", Key: strings.Repeat("x", sfnjob.MaxKeyLen+1), Input: work{Seconds: 1}, Want: string(sfnjob.ReasonInvalidKey)},
	}
	quietSent := time.Now()
	r.submit(ctx, append(append([]job(nil), quiet...), refused...)...)
	r.waitFor(ctx, progressWithin, "every quiet job to end", func() (bool, string) {
		st := r.executionStatuses(ctx)
		var pending []string
		for _, j := range quiet {
			name, want := r.runName(j, 0, 1), sfntypes.ExecutionStatusSucceeded
			if j.Want != "" {
				name, want = r.runName(j, 0, 2), sfntypes.ExecutionStatusFailed
			}
			if st[name] != string(want) {
				pending = append(pending, j.ID)
			}
		}
		return len(pending) == 0, strings.Join(pending, ", ")
	})
	quietDone := time.Now()

	// 4. premium's cap lowered while its backlog waits; more premium jobs after the change.
	if err := store.SetOverride(ctx, config.Override{Type: keyType, KeyLimits: map[string]int{"premium": premiumLowered}}); err != nil {
		t.Fatalf("SetOverride(premium=%d) = %v", premiumLowered, err)
	}
	lowered := time.Now()
	time.Sleep(keyCacheSecs*time.Second + 2*time.Second)
	premiumLate := batch("premium", "premium-late", 3)
	r.submit(ctx, premiumLate...)
	r.waitFor(ctx, progressWithin, "every premium job to end", func() (bool, string) {
		st := r.executionStatuses(ctx)
		var pending []string
		for _, j := range append(append([]job(nil), premium...), premiumLate...) {
			if st[r.runName(j, 0, 1)] != string(sfntypes.ExecutionStatusSucceeded) {
				pending = append(pending, j.ID)
			}
		}
		return len(pending) == 0, strings.Join(pending, ", ")
	})

	// 5. noisy alone again, with a backlog.
	noisyLate := batch("noisy", "noisy-late", 6)
	burstSent := time.Now()
	r.submit(ctx, noisyLate...)

	out := r.settle(ctx, settleWithin)
	t.Logf("%d jobs done in %v; quiet jobs sent at %v, all ended at %v; premium lowered at %v; noisy's last burst at %v",
		len(keyOf)+len(refused), time.Since(began).Round(100*time.Millisecond), since(quietSent), since(quietDone), since(lowered), since(burstSent))
	r.checkInvariants(ctx, out, nil)

	byKey := map[string][]observe.Execution{}
	for _, x := range out.xs {
		want, ok := keyOf[x.Job.ID]
		if !ok || x.Job.Key != want {
			t.Errorf("execution %s carries key %q in its input, want %q (submitted: %v)", x.Name, x.Job.Key, want, ok)
		}
		byKey[x.Job.Key] = append(byKey[x.Job.Key], x)
	}

	// No key ever ran more than its cap (premium: the higher, before it was lowered).
	peaks := observe.PeaksBy(out.xs, out.end, observe.TypeKey)
	groups := make([]string, 0, len(peaks))
	for g := range peaks {
		groups = append(groups, g)
	}
	sort.Strings(groups)
	for _, g := range groups {
		p := peaks[g]
		key := strings.TrimPrefix(g, keyType+"#")
		t.Logf("key %q: peak %d working at once (at %v), cap %d, %d executions", key, p.Max, since(p.At), keyCap(key), len(byKey[key]))
		if p.Max > keyCap(key) {
			t.Errorf("key %q: %d executions worked at once at %s, over its cap %d", key, p.Max, stamp(p.At), keyCap(key))
		}
	}
	for _, j := range refused {
		for _, d := range out.dead[j.Type+"/"+j.ID] {
			if d.Attrs["source"] != "router" {
				t.Errorf("job %s (key %.20q...) was dead-lettered by %q, want the router", j.ID, j.Key, d.Attrs["source"])
			}
		}
	}
	if xs := out.byJob[keyType+"/"+fail.ID]; len(xs) != 2 {
		t.Errorf("job %s: executions %s, want 2 (DefaultMaxAttempts)", fail.ID, names(xs))
	}

	lag := overrun(out.xs, func(x observe.Execution) (int, bool) { return keyJobSeconds, x.Job.ID != fail.ID })
	t.Logf("overrun of the stack in this run: %v", lag.Round(10*time.Millisecond))
	checkKeyFairness(t, out, quiet, noisy, premium)
	checkLoweredCap(t, out, "premium", premiumCap, premiumLowered, lowered.Add(keyCacheSecs*time.Second+2*time.Second+lag))
	checkKeyAlone(t, out, burstSent, lag)
}

// checkKeyFairness: every quiet job (the quiet keys' and the default key's, first attempts) started
// before the last of noisy's first 20 and of premium's first 20 started. Noisy and premium, sent
// first, held all six lanes with long backlogs when the quiet jobs came: a release wakes the key
// with the fewest running, so each quiet key got the next freed lanes, while in plain FIFO order
// (one waiting group) or waking the oldest head first the quiet jobs would have waited for one of
// those backlogs to drain. No timing enters: only the order of starts.
func checkKeyFairness(t *testing.T, out *settled, quiet, noisy, premium []job) {
	t.Helper()
	starts := map[string]time.Time{} // job id -> start of its first attempt
	for _, x := range out.xs {
		if x.Job.Attempt == 1 {
			starts[x.Job.ID] = x.Start
		}
	}
	last := func(jobs []job) (time.Time, string) {
		var at time.Time
		var id string
		for _, j := range jobs {
			if s, ok := starts[j.ID]; ok && s.After(at) {
				at, id = s, j.ID
			}
		}
		return at, id
	}
	after := func(jobs []job, t0 time.Time) int {
		n := 0
		for _, j := range jobs {
			if starts[j.ID].After(t0) {
				n++
			}
		}
		return n
	}
	quietLast, quietID := last(quiet)
	for _, big := range []struct {
		name string
		jobs []job
	}{{"noisy", noisy}, {"premium", premium}} {
		bigLast, bigID := last(big.jobs)
		t.Logf("last quiet start %s (%s); last of %s's first backlog %s (%s): %d of its %d jobs started after every quiet job",
			stamp(quietLast), quietID, big.name, stamp(bigLast), bigID, after(big.jobs, quietLast), len(big.jobs))
		if !quietLast.Before(bigLast) {
			t.Errorf("quiet job %s started at %s, after %s's whole backlog had started (last: %s at %s): a key with a backlog took the lanes quiet keys waited for",
				quietID, stamp(quietLast), big.name, bigID, stamp(bigLast))
		}
	}
}

// checkLoweredCap: a key's cap, lowered from before to after, holds for every bind made once the
// change reached every function (from settled on: the change, the cache age, and slack). At that
// instant at most before jobs of the key held lanes, of which those already working will not start
// again: only the rest, at most before minus those working, may have been bound under the old cap and
// start later. A bind under the new cap counts every lease of the key, those included, so once any has
// started no start of the key sees more than after working. So only among the first (before -
// working) starts of the key after settled may one see more than after working, itself included.
func checkLoweredCap(t *testing.T, out *settled, key string, before, after int, settled time.Time) {
	t.Helper()
	ofKey := func(x observe.Execution) bool { return x.Job.Key == key }
	var post []observe.Execution
	for _, x := range out.xs {
		if ofKey(x) && x.Start.After(settled) {
			post = append(post, x)
		}
	}
	sort.Slice(post, func(i, j int) bool { return post[i].Start.Before(post[j].Start) })
	early := max(0, before-workingAt(out.xs, ofKey, settled, out.end))
	t.Logf("key %s after its lowered cap settled (%s): %d starts, the first %d of which may have been bound before", key, stamp(settled), len(post), early)
	if len(post) <= early {
		t.Errorf("key %s: %d starts after its lowered cap settled, none surely bound under it: the scenario tested nothing", key, len(post))
	}
	for i, x := range post {
		if n := workingAt(out.xs, ofKey, x.Start, out.end); n > after && i >= early {
			t.Errorf("key %s: execution %s started at %s with %d of its jobs working, over its lowered cap %d", key, x.Name, stamp(x.Start), n, after)
		}
	}
}

// checkKeyAlone: once every other key's work ended, noisy, alone with a backlog, ran exactly its cap,
// and each of its lanes, freed while jobs of it waited, went to its next job within a bound far below
// waitroom.ParkFor (60 s): the release woke the parked key rather than leave the lane to a parked
// job's own timeout.
func checkKeyAlone(t *testing.T, out *settled, burstSent time.Time, lag time.Duration) {
	t.Helper()
	var from time.Time // the end of every other key's work
	var ns []observe.Execution
	for _, x := range out.xs {
		if x.Job.Key == "noisy" {
			ns = append(ns, x)
		} else if x.WorkEnd.After(from) {
			from = x.WorkEnd
		}
	}
	from = maxTime(from, burstSent)
	var alone []observe.Execution
	for _, x := range ns {
		if x.WorkEnd.After(from) {
			alone = append(alone, x)
		}
	}
	p := observe.PeaksBy(clip(alone, from, out.end, out.end), out.end, observe.TypeKey)[keyType+"#noisy"]
	t.Logf("noisy alone from %s: peak %d working at once, cap %d, %d executions", stamp(from), p.Max, keyLimit, len(alone))
	if p.Max != keyLimit {
		t.Errorf("noisy, alone with a backlog from %s: peak %d working at once, want exactly its cap %d", stamp(from), p.Max, keyLimit)
	}
	// Each end (while a noisy job still waited) is matched with the earliest start after it not yet
	// matched: a lane left free shows as a long wait.
	var ends, starts []time.Time
	lastStart := time.Time{}
	for _, x := range ns {
		lastStart = maxTime(lastStart, x.Start)
	}
	for _, x := range ns {
		if !x.WorkEnd.Before(from) && x.WorkEnd.Before(lastStart) {
			ends = append(ends, x.WorkEnd)
		}
		if x.Start.After(from) {
			starts = append(starts, x.Start)
		}
	}
	sort.Slice(ends, func(i, j int) bool { return ends[i].Before(ends[j]) })
	sort.Slice(starts, func(i, j int) bool { return starts[i].Before(starts[j]) })
	bound := 20*time.Second + lag
	var worst time.Duration
	next := 0
	for _, e := range ends {
		for next < len(starts) && starts[next].Before(e) {
			next++
		}
		if next == len(starts) {
			break
		}
		worst = max(worst, starts[next].Sub(e))
		next++
	}
	t.Logf("noisy alone: %d lanes freed while it waited, longest until the next start %v (bound %v)", len(ends), worst.Round(10*time.Millisecond), bound.Round(time.Second))
	if worst > bound {
		t.Errorf("noisy alone: a freed lane waited %v for its next job, want within %v (no wake-up?)", worst, bound)
	}
}

// workingAt counts the executions pick selects that worked at instant at: started at or before it,
// work not yet ended (one ending at that instant handed its lane over).
func workingAt(xs []observe.Execution, pick func(observe.Execution) bool, at, now time.Time) int {
	n := 0
	for _, x := range xs {
		end := x.WorkEnd
		if end.IsZero() {
			end = now
		}
		if pick(x) && !x.Start.After(at) && at.Before(end) {
			n++
		}
	}
	return n
}

// clip cuts work intervals to [from, to), dropping those outside it.
func clip(xs []observe.Execution, from, to, now time.Time) []observe.Execution {
	var out []observe.Execution
	for _, x := range xs {
		end := x.WorkEnd
		if end.IsZero() {
			end = now
		}
		s, e := maxTime(x.Start, from), end
		if e.After(to) {
			e = to
		}
		if s.Before(e) {
			y := x
			y.Start, y.WorkEnd = s, e
			out = append(out, y)
		}
	}
	return out
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// runningPerKey counts a type's running executions by the key in their input.
func (r *rig) runningPerKey(ctx context.Context, typ string) map[string]int {
	r.t.Helper()
	n := map[string]int{}
	for _, arn := range r.runningArns(ctx) {
		d, err := r.c.SFN.DescribeExecution(ctx, &sfn.DescribeExecutionInput{ExecutionArn: aws.String(arn)})
		if err != nil {
			r.t.Fatalf("DescribeExecution(%s) = %v", arn, err)
		}
		var in sfnjob.ExecutionInput
		_ = json.Unmarshal([]byte(aws.ToString(d.Input)), &in)
		if in.Job.Type == typ && d.Status == sfntypes.ExecutionStatusRunning {
			n[in.Job.Key]++
		}
	}
	return n
}

// executionStatuses lists every execution's status by name, as Step Functions lists them.
func (r *rig) executionStatuses(ctx context.Context) map[string]string {
	r.t.Helper()
	out := map[string]string{}
	for _, sm := range r.sms {
		p := sfn.NewListExecutionsPaginator(r.c.SFN, &sfn.ListExecutionsInput{StateMachineArn: aws.String(sm)})
		for p.HasMorePages() {
			page, err := p.NextPage(ctx)
			if err != nil {
				r.t.Fatalf("ListExecutions(%s) = %v", sm, err)
			}
			for _, e := range page.Executions {
				out[aws.ToString(e.Name)] = string(e.Status)
			}
		}
	}
	return out
}
