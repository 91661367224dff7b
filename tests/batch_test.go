package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/sfnlimit/sfnlimit/internal/lambda/batch"
	"github.com/sfnlimit/sfnlimit/internal/lambda/batchend"
	sfnjob "github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/tools/local/gateway"
	"github.com/sfnlimit/sfnlimit/internal/tools/local/observe"
)

// Batches (issue 15; docs/design.md, "Batches"). A batch closes when every one of its jobs has
// ended, succeeded, dead-lettered or refused, and the record that closes it sends one
// "sfnlimit Batch Completed" event to the default bus. The local stack's gateway answers PutEvents
// and keeps the events (Stack.Events). Each scenario checks, from the emulators' records and never
// from the ledger's own bookkeeping:
//   - the batch closes exactly once: one completion event;
//   - the event's counts are what Step Functions and the dead-letter queue recorded: succeeded, the
//     batch's jobs with a SUCCEEDED execution; dead_lettered and refused, the dead-letter queue's
//     messages whose batch attribute names the batch (refused: those the router sent);
//   - its deadLettered list names exactly those dead letters' jobs;
//   - the suite's invariants (checkInvariants), and no lease, lane or record left.
//
// Figures, printed and never asserted: the ledger's DynamoDB write units per job of the batch (its
// writes counted in every function's SDK calls: a TransactWriteItems costs 2 units per item up to
// 1 KB, a PutItem 1), and the completion latency, from the batch's last execution's stop date (and
// from its last job's work end) to the event reaching the bus.

// ledgerMeter counts the batch ledger's DynamoDB calls per batch, from SDK middleware on every
// function's clients (each call as the function made it, before it is sent: calls that fail, on a
// condition or an injected conflict, are billed by DynamoDB too).
type ledgerMeter struct {
	mu     sync.Mutex
	writes map[string]*ledgerCost // by batch id
}

type ledgerCost struct {
	transactions, transactItems, puts, reads int
	wcu                                      float64
}

func newLedgerMeter() *ledgerMeter { return &ledgerMeter{writes: map[string]*ledgerCost{}} }

// functionAWS installs the meter on every function's clients (rigOptions.functionAWS).
func (m *ledgerMeter) functionAWS(_ string, cfg *aws.Config) {
	cfg.APIOptions = append(cfg.APIOptions, func(st *middleware.Stack) error {
		return st.Initialize.Add(middleware.InitializeMiddlewareFunc("batchLedgerMeter",
			func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				m.see(in.Parameters)
				return next.HandleInitialize(ctx, in)
			}), middleware.After)
	})
}

// batchOf returns the batch whose ledger item has partition key pk ("BATCH#{id}" or
// "BATCH#{id}#S{k}"), or "".
func batchOf(key map[string]ddbtypes.AttributeValue) string {
	pk, ok := key["pk"].(*ddbtypes.AttributeValueMemberS)
	if !ok || !strings.HasPrefix(pk.Value, "BATCH#") {
		return ""
	}
	id, _, _ := strings.Cut(strings.TrimPrefix(pk.Value, "BATCH#"), "#")
	return id
}

// itemUnits is an item's size in write units of 1 KB: attribute names and values in bytes.
func itemUnits(item map[string]ddbtypes.AttributeValue) float64 {
	size := 0
	for k, v := range item {
		size += len(k)
		switch v := v.(type) {
		case *ddbtypes.AttributeValueMemberS:
			size += len(v.Value)
		case *ddbtypes.AttributeValueMemberN:
			size += len(v.Value)
		default:
			size += 8
		}
	}
	return math.Max(1, math.Ceil(float64(size)/1024))
}

func (m *ledgerMeter) see(params any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	cost := func(id string) *ledgerCost {
		if m.writes[id] == nil {
			m.writes[id] = &ledgerCost{}
		}
		return m.writes[id]
	}
	switch in := params.(type) {
	case *dynamodb.PutItemInput:
		if id := batchOf(in.Item); id != "" {
			c := cost(id)
			c.puts++
			c.wcu += itemUnits(in.Item)
		}
	case *dynamodb.TransactWriteItemsInput:
		var id string
		units := 0.0
		for _, it := range in.TransactItems {
			if it.Put != nil {
				if b := batchOf(it.Put.Item); b != "" {
					id = b
					units += 2 * itemUnits(it.Put.Item)
				}
			}
		}
		if id != "" {
			c := cost(id)
			c.transactions++
			c.transactItems += len(in.TransactItems)
			c.wcu += units
		}
	case *dynamodb.GetItemInput:
		if id := batchOf(in.Key); id != "" {
			cost(id).reads++
		}
	case *dynamodb.QueryInput:
		if pk, ok := in.ExpressionAttributeValues[":pk"]; ok {
			if id := batchOf(map[string]ddbtypes.AttributeValue{"pk": pk}); id != "" {
				cost(id).reads++
			}
		}
	}
}

func (m *ledgerMeter) of(id string) ledgerCost {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c := m.writes[id]; c != nil {
		return *c
	}
	return ledgerCost{}
}

// completion is one completion event the stack received.
type completion struct {
	gateway.Event
	D batchend.Detail
}

// completions returns the completion events of batch id received so far.
func (r *rig) completions(id string) []completion {
	r.t.Helper()
	var out []completion
	for _, e := range r.s.Events() {
		if e.Source != batchend.Source || e.DetailType != batchend.DetailType {
			continue
		}
		var d batchend.Detail
		if err := json.Unmarshal(e.Detail, &d); err != nil {
			r.t.Errorf("completion event %s: detail %s: %v", e.ID, e.Detail, err)
			continue
		}
		if e.Bus != "default" {
			r.t.Errorf("completion event of batch %s went to bus %q, want the default bus", d.Batch, e.Bus)
		}
		if d.Batch == id {
			out = append(out, completion{Event: e, D: d})
		}
	}
	return out
}

// batchSpec is one batch a scenario submits.
type batchSpec struct {
	id   string
	jobs []job // Batch and BatchSize are set by the scenario
}

// inBatch returns jobs as members of batch id, every one carrying its size (so none waits for
// the batch to be opened by another).
func inBatch(id string, jobs ...job) batchSpec {
	for i := range jobs {
		jobs[i].Batch, jobs[i].BatchSize = id, len(jobs)
	}
	return batchSpec{id: id, jobs: jobs}
}

// batchDeadLetters returns the dead letters whose batch attribute names batch id.
func (r *rig) batchDeadLetters(id string) []deadLetter {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []deadLetter
	for _, d := range r.dead {
		if d.Attrs["batch"] == id {
			out = append(out, d)
		}
	}
	return out
}

// waitClosed waits for the first completion event of batch b, then a little longer, so that a
// second one has time to arrive.
func (r *rig) waitClosed(ctx context.Context, id string) {
	r.t.Helper()
	r.waitFor(ctx, progressWithin, "the completion event of batch "+id, func() (bool, string) {
		return len(r.completions(id)) > 0, "no event"
	})
	time.Sleep(3 * time.Second)
}

// checkBatch checks batch b's one completion event against the emulators' records, and logs the
// figures. It returns the event.
func (r *rig) checkBatch(ctx context.Context, scenario string, out *settled, b batchSpec, meter *ledgerMeter) completion {
	r.t.Helper()
	t := r.t
	evs := r.completions(b.id)
	if len(evs) != 1 {
		for _, e := range evs {
			t.Logf("completion event of %s: %s at %s", b.id, e.Detail, stamp(e.Received))
		}
		t.Errorf("batch %s: %d completion events, want exactly 1", b.id, len(evs))
		if len(evs) == 0 {
			return completion{}
		}
	}
	ev := evs[0]

	// What Step Functions recorded: the batch's jobs with a SUCCEEDED execution, and when the
	// batch's last execution ended.
	var lastStop, lastWorkEnd time.Time
	succeededJobs := 0
	var xs []observe.Execution
	for _, j := range b.jobs {
		jx := out.byJob[j.Type+"/"+j.ID]
		xs = append(xs, jx...)
		if succeeded(jx) {
			succeededJobs++
		}
	}
	for _, x := range xs {
		if x.Stop.After(lastStop) {
			lastStop = x.Stop
		}
		if x.WorkEnd.After(lastWorkEnd) {
			lastWorkEnd = x.WorkEnd
		}
		if x.Job.Batch != b.id {
			t.Errorf("execution %s of batch %s's job carries batch %q in its input", x.Name, b.id, x.Job.Batch)
		}
	}
	// What the dead-letter queue holds for the batch.
	dead, refused := 0, 0
	var listed []string
	for _, d := range r.batchDeadLetters(b.id) {
		if d.Attrs["source"] == "router" {
			refused++
		} else {
			dead++
		}
		if d.Attrs["reason"] == "" {
			t.Errorf("batch %s: dead letter of %s/%s without a reason", b.id, d.Attrs["type"], d.Attrs["jobId"])
		}
		// A job is its type, key and id, as the ledger names it (an invalid key by its hash).
		listed = append(listed, sfnjob.BatchJobID(d.Attrs["type"], d.Attrs["key"], d.Attrs["jobId"]))
	}
	want := map[string]int{string(batch.Succeeded): succeededJobs, string(batch.DeadLettered): dead, string(batch.Refused): refused}
	if !maps2Equal(ev.D.Counts, want) {
		t.Errorf("batch %s: event counts %v, want %v (Step Functions' succeeded jobs, the dead-letter queue's messages)", b.id, ev.D.Counts, want)
	}
	if succeededJobs+dead+refused != len(b.jobs) || ev.D.Expected != len(b.jobs) {
		t.Errorf("batch %s: %d jobs, event expects %d; %d succeeded + %d dead-lettered + %d refused on the emulators",
			b.id, len(b.jobs), ev.D.Expected, succeededJobs, dead, refused)
	}
	sort.Strings(listed)
	got := slices.Clone(ev.D.DeadLettered)
	sort.Strings(got)
	if !slices.Equal(got, listed) || ev.D.DeadLetteredMore {
		t.Errorf("batch %s: event lists dead-lettered %v (more %v), the dead-letter queue holds %v", b.id, got, ev.D.DeadLetteredMore, listed)
	}
	if ev.D.Stack == "" || ev.D.ClosedAt.IsZero() || ev.D.OpenedAt.IsZero() || ev.D.ClosedAt.Before(ev.D.OpenedAt) {
		t.Errorf("batch %s: event detail %+v lacks its stack or times", b.id, ev.D)
	}
	// The ledger agrees, and was told the event went out.
	sum, _, err := batch.New(r.c.DDB, r.table).Show(ctx, b.id, false)
	if err != nil {
		t.Fatalf("batch.Show(%s) = %v", b.id, err)
	}
	if !sum.Closed || !sum.Announced || sum.Recorded != len(b.jobs) {
		t.Errorf("batch %s: ledger closed %v, announced %v, recorded %d of %d", b.id, sum.Closed, sum.Announced, sum.Recorded, len(b.jobs))
	}

	// Figures.
	c := meter.of(b.id)
	fromStop, fromWork := ev.Received.Sub(lastStop), ev.Received.Sub(lastWorkEnd)
	t.Logf("batch figures (%s, %s, batch %s): %d jobs (%d succeeded, %d dead-lettered, %d refused), %d executions; "+
		"ledger writes %.2f WCU/job (%.0f WCU: %d transactions of %d items, %d puts), %.2f reads/job; "+
		"completion latency %v from the last execution's stop date, %v from the last job's work end; batch open for %v",
		scenario, r.o.backend.name, b.id, len(b.jobs), succeededJobs, dead, refused, len(xs),
		c.wcu/float64(len(b.jobs)), c.wcu, c.transactions, c.transactItems, c.puts, float64(c.reads)/float64(len(b.jobs)),
		fromStop.Round(time.Millisecond), fromWork.Round(time.Millisecond), ev.D.ClosedAt.Sub(ev.D.OpenedAt).Round(100*time.Millisecond))
	return ev
}

func maps2Equal(a, b map[string]int) bool {
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	for k, v := range b {
		if a[k] != v {
			return false
		}
	}
	return true
}

// mixedBatch is a batch of succeeding jobs, jobs that fail once then succeed, jobs that fail
// every attempt (dead-lettered, attempts_exhausted) and, if refused, one job refused for its key:
// n jobs of the given types, the refused one first (so that the router has counted it well before
// the batch's last job ends).
func mixedBatch(id string, types []string, n int, refused bool) batchSpec {
	var jobs []job
	if refused {
		jobs = append(jobs, job{Type: types[0], ID: id + "-refused", Key: "bad key!", Input: work{Seconds: 1}, Want: "invalid_key"})
	}
	for i := len(jobs); i < n; i++ {
		typ := types[i%len(types)]
		jid := fmt.Sprintf("%s-%02d", id, i)
		switch i % 6 {
		case 2:
			jobs = append(jobs, job{Type: typ, ID: jid + "-flaky", Input: map[string]any{"seconds": 1, "failAttempts": 1}})
		case 5:
			jobs = append(jobs, job{Type: typ, ID: jid + "-fails", Input: work{Seconds: 1, Fail: true}, Want: "attempts_exhausted"})
		default:
			jobs = append(jobs, job{Type: typ, ID: jid, Input: work{Seconds: 1 + i%2}})
		}
	}
	return inBatch(id, jobs...)
}

// Scenario 20 (a and d): a batch of successes, retries, dead letters and a refusal closes exactly
// once, with the counts Step Functions and the dead-letter queue recorded. Then one of its
// dead-lettered jobs is redriven from the dead-letter queue after the close: it runs again (and
// fails again), is reported late by the ledger (batch.Show's Late), and the batch stays closed with
// no second event.
func TestBatchClosesOnce(t *testing.T) {
	forBackends(t, sqsFacing, func(t *testing.T, b backend) {
		ctx := t.Context()
		meter := newLedgerMeter()
		r := newRig(t, rigOptions{backend: b, functionAWS: meter.functionAWS, params: map[string]string{
			"TypeLimits": "ba=3", "DefaultMaxAttempts": "2",
		}})
		spec := mixedBatch("batch-a", []string{"ba"}, 14, true)
		r.submit(ctx, spec.jobs...)
		out := r.settle(ctx, settleWithin)
		r.waitClosed(ctx, spec.id)
		r.checkInvariants(ctx, out, nil)
		ev := r.checkBatch(ctx, "closes once", out, spec, meter)

		// (d) Redrive a dead-lettered job after the close, as `sfnlimit dlq redrive` does: its
		// dead letter's body goes back to the general queue (the rig drained the queue already).
		var redriven deadLetter
		for _, d := range r.batchDeadLetters(spec.id) {
			if d.Attrs["reason"] == "attempts_exhausted" {
				redriven = d
				break
			}
		}
		if redriven.Body == "" {
			t.Fatalf("batch %s has no dead letter of a job that failed every attempt", spec.id)
		}
		typ, id := redriven.Attrs["type"], redriven.Attrs["jobId"]
		before := meter.of(spec.id)
		r.sendGeneral(ctx, redriven.Body)
		r.waitFor(ctx, progressWithin, "the redriven job's second dead letter", func() (bool, string) {
			n := 0
			for _, d := range r.batchDeadLetters(spec.id) {
				if d.Attrs["type"] == typ && d.Attrs["jobId"] == id {
					n++
				}
			}
			r.drainDLQ(ctx)
			return n == 2, fmt.Sprintf("%d dead letters of %s/%s", n, typ, id)
		})
		r.waitQuiet(ctx)
		time.Sleep(3 * time.Second) // a second event, if one were sent, has time to arrive

		if evs := r.completions(spec.id); len(evs) != 1 {
			t.Errorf("batch %s: %d completion events after a late job, want still 1", spec.id, len(evs))
		}
		sum, _, err := batch.New(r.c.DDB, r.table).Show(ctx, spec.id, false)
		if err != nil {
			t.Fatal(err)
		}
		late := fmt.Sprint(sum.Late)
		if len(sum.Late) != 1 || sum.Late[0].ID != typ+"/"+id || sum.Late[0].Redrive != 1 || sum.Late[0].Outcome != batch.DeadLettered {
			t.Errorf("batch %s: late jobs %s, want %s/%s, redrive 1, dead_lettered", spec.id, late, typ, id)
		}
		if !sum.Closed || !sum.ClosedAt.Equal(ev.D.ClosedAt) || sum.Recorded != len(spec.jobs) || !maps2Equal(outcomeCounts(sum.Counts), ev.D.Counts) {
			t.Errorf("batch %s after a late job: closed %v at %v, recorded %d, counts %v; want closed at %v as before, %d, %v",
				spec.id, sum.Closed, sum.ClosedAt, sum.Recorded, sum.Counts, ev.D.ClosedAt, len(spec.jobs), ev.D.Counts)
		}
		xs := r.collect(ctx)
		runs := 0
		for _, x := range xs {
			if x.Job.Type == typ && x.Job.ID == id && x.Job.Redrive == 1 {
				runs++
				if x.Status == string(sfntypes.ExecutionStatusSucceeded) {
					t.Errorf("redriven job %s/%s succeeded (%s): its input fails every attempt", typ, id, x.Name)
				}
			}
		}
		if runs != 2 {
			t.Errorf("redriven job %s/%s ran %d executions under redrive 1, want DefaultMaxAttempts (2)", typ, id, runs)
		}
		after := meter.of(spec.id)
		t.Logf("batch figures (late job, %s, batch %s): redriven %s/%s listed late (%s); its end cost the ledger %.0f WCU, %d reads; still 1 completion event",
			b.name, spec.id, typ, id, late, after.wcu-before.wcu, after.reads-before.reads)
	})
}

func outcomeCounts(c map[batch.Outcome]int) map[string]int {
	out := map[string]int{}
	for k, v := range c {
		out[string(k)] = v
	}
	return out
}

// waitQuiet waits until both queues are drained, nothing runs and no lease is left, seen twice in a
// row.
func (r *rig) waitQuiet(ctx context.Context) {
	r.t.Helper()
	quietOnce := false
	r.waitFor(ctx, progressWithin, "the stack to be quiet", func() (bool, string) {
		st := r.look(ctx)
		if st.quiet() {
			if quietOnce {
				return true, ""
			}
			quietOnce = true
		} else {
			quietOnce = false
		}
		return false, st.String()
	})
}

// Scenario 21 (b): a batch under every fault the suite injects, at once: event-source batches
// delivered twice, status-change events delivered twice or never (the sweep makes up for them) for
// a type released by its status events, stale DescribeExecution answers, throttled releases,
// DynamoDB transactions cancelled by conflicts (the ledger's records), entries of PutEvents failing
// at random, and the first completion event refused outright. It still closes exactly once with
// exact counts. (It found two events for one batch, from the closing job's status event and the
// sweep at once, and a 2-minute wait when the completion event of a dead-lettered closer failed.)
func TestBatchUnderFaults(t *testing.T) {
	forBackends(t, sqsFacing, func(t *testing.T, b backend) {
		ctx := t.Context()
		meter := newLedgerMeter()
		seed := faultSeed(t)
		r := newRig(t, rigOptions{
			backend: b, functionAWS: meter.functionAWS, noRuntime: true,
			faults: &gateway.Faults{
				StaleDescribe: 0.5, StaleDescribeFor: 3 * time.Second, InvokeThrottle: 0.25,
				TransactionConflict: 0.2, PutEventsFailure: 0.3, Seed: seed,
			},
			duplicates: 0.25, dupWithin: 3 * time.Second, eventDupRate: 0.3, eventDropRate: 0.2,
			bareTypes: []string{"fe"},
			params:    map[string]string{"TypeLimits": "fx=3,fe=2", "DefaultMaxAttempts": "2"},
		})
		t.Logf("fault seed %d", seed)
		// The first PutEvents calls fail as a whole (the SDK's own retries included): the closing
		// job's end fails after the close, and must close the batch again on its retry.
		var mu sync.Mutex
		refused := 0
		r.s.Gateway().SetFaults(func(target string) *gateway.Fault {
			if target != "AWSEvents.PutEvents" {
				return nil
			}
			mu.Lock()
			defer mu.Unlock()
			if refused < 3 {
				refused++
				return &gateway.Fault{Status: 500, Code: "InternalException", Message: "injected by the batch scenario"}
			}
			return nil
		})
		// No refused job: the router refuses a job once per delivery, so a general-queue batch
		// delivered twice dead-letters it twice (the ledger counts it once; the suite's invariant
		// "dead-lettered once" would not hold). Scenarios 20 and 22 count refusals.
		spec := mixedBatch("batch-f", []string{"fx", "fe"}, 16, false)
		r.submit(ctx, spec.jobs...)
		r.startRuntime()
		out := r.settle(ctx, settleWithin)
		r.waitClosed(ctx, spec.id)
		r.checkInvariants(ctx, out, nil)
		r.checkBatch(ctx, "under faults", out, spec, meter)
		injected, dups := injectedFaultCounts(r)
		mu.Lock()
		t.Logf("batch figures (faults, %s): PutEvents calls %d, refused whole %d, entries failed %d; transaction conflicts %d; duplicate batches %d",
			b.name, r.s.Gateway().Calls()[gateway.Call{Service: "events", Operation: "PutEvents"}], refused,
			injected[gateway.InjectedPutEventsFailure], injected[gateway.InjectedTransactionConflict], dups)
		mu.Unlock()
		if refused == 0 {
			t.Errorf("no PutEvents call was refused: the scenario did not test a failed announcement")
		}
	})
}

// Scenario 22 (c): two batches whose jobs are sent mixed together, one of one type and one of two
// (one type shared with the other batch): each closes once with its own counts.
func TestBatchesInterleaved(t *testing.T) {
	forBackends(t, sqsFacing, func(t *testing.T, b backend) {
		ctx := t.Context()
		meter := newLedgerMeter()
		r := newRig(t, rigOptions{backend: b, functionAWS: meter.functionAWS, params: map[string]string{
			"TypeLimits": "ia=3,ib=2", "DefaultMaxAttempts": "2",
		}})
		one := mixedBatch("batch-c1", []string{"ia"}, 10, true)
		two := mixedBatch("batch-c2", []string{"ib", "ia"}, 13, true)
		var jobs []job
		for i := 0; i < max(len(one.jobs), len(two.jobs)); i++ {
			if i < len(one.jobs) {
				jobs = append(jobs, one.jobs[i])
			}
			if i < len(two.jobs) {
				jobs = append(jobs, two.jobs[i])
			}
		}
		r.submit(ctx, jobs...)
		out := r.settle(ctx, settleWithin)
		r.waitClosed(ctx, one.id)
		r.waitClosed(ctx, two.id)
		r.checkInvariants(ctx, out, nil)
		e1 := r.checkBatch(ctx, "interleaved", out, one, meter)
		e2 := r.checkBatch(ctx, "interleaved", out, two, meter)
		if e1.D.Expected == e2.D.Expected {
			t.Errorf("both batches expect %d jobs: the scenario cannot tell their counts apart", e1.D.Expected)
		}
	})
}
