package simworld

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"

	"github.com/sfnlimit/sfnlimit/internal/lambda/batch"
	"github.com/sfnlimit/sfnlimit/internal/lambda/batchend"
	"github.com/sfnlimit/sfnlimit/internal/lambda/deadletter"
	"github.com/sfnlimit/sfnlimit/internal/lambda/releaser"
	"github.com/sfnlimit/sfnlimit/internal/lambda/router"
	"github.com/sfnlimit/sfnlimit/internal/lambda/starter"
)

// Batches (docs/batches.md): a share of the jobs is sent as members of batches. A batch is opened
// by its jobs (each carries "batch" and "batchSize") or first, as `sfnlimit batch open` does (its
// jobs carry "batch" alone). Some batches also hold a job the router refuses (an unknown type, or
// no type at all), sent among or after the others, so that batches close through refusals too.
// Everything here is drawn from a stream of its own (seed, batchStream), so that a world without
// batches (Config.BatchShare 0) runs as before they were modelled.

const batchStream = 0xba7c4

// batchSpec is a batch of the workload.
type batchSpec struct {
	id        string
	members   []*jobSpec
	openFirst bool
}

// batchWorld is the batches' part of a world: the workload, the bus, and what the checker saw.
type batchWorld struct {
	rng     *rand.Rand
	batches []*batchSpec
	of      map[string]*batchSpec // job (type/id) -> its batch
	bus     bus
	// closed is each batch's close as first seen in its META item (closedAt, closedBy).
	closed map[string]string
	// interlopers are the jobs another tenant sent naming the batches (interloper.go).
	interlopers []interloperJob
	// DuplicateEvents counts completion events sent again after a sender that sent one crashed
	// (the documented at least once), not counted as violations.
	DuplicateEvents int
}

// Batch invariant kinds.
const (
	KindBatchNotClosed   = "batch not closed"
	KindBatchClosedTwice = "batch closed twice"
	KindBatchCounts      = "batch counts wrong"
	KindBatchEvents      = "batch completion events"
)

func newBatchWorld(seed uint64) *batchWorld {
	return &batchWorld{rng: rand.New(rand.NewPCG(seed, batchStream)), of: map[string]*batchSpec{}, closed: map[string]string{}}
}

// batchWorkload puts a share of the jobs (0.5 to 1.5 times Config.BatchShare, drawn per seed) in
// batches of 2-8, adds refused members to about half of them, and draws the bus's outage.
func (w *World) batchWorkload() {
	b := w.batches
	if w.cfg.BatchShare <= 0 {
		return
	}
	r := b.rng
	share := w.cfg.BatchShare * (0.5 + r.Float64())
	var pool []*jobSpec
	for _, j := range w.order {
		if r.Float64() < share {
			pool = append(pool, j)
		}
	}
	next := len(w.order)
	for len(pool) > 0 {
		n := min(len(pool), 2+r.IntN(7))
		bs := &batchSpec{id: fmt.Sprintf("bat%02d", len(b.batches)+1), members: pool[:n:n], openFirst: r.IntN(3) == 0}
		pool = pool[n:]
		if r.Float64() < 0.5 {
			for range 1 + r.IntN(2) {
				bs.members = append(bs.members, w.refusedMember(bs, next))
				next++
			}
		}
		if w.cfg.BatchBurst > 0 && r.Float64() < w.cfg.BatchBurst {
			w.burst(bs)
		}
		for _, j := range bs.members {
			b.of[j.k] = bs
		}
		b.batches = append(b.batches, bs)
	}
	if f := w.cfg.Faults.Bus.Outage; f > 0 && r.Float64() < f {
		from := time.Duration(r.Int64N(int64(25 * time.Minute)))
		b.bus.downFrom = epoch.Add(from)
		b.bus.downTo = b.bus.downFrom.Add(3*time.Minute + time.Duration(r.Int64N(int64(12*time.Minute))))
		w.trace("events", "EventBridge outage from %s to %s", from, b.bus.downTo.Sub(epoch))
	}
}

// refusedMember is a job of bs the router refuses: of a type nobody configured, or of none. Half
// of them are sent after the batch's other jobs (the producer's last, bad line), so that they
// close their batch more often.
func (w *World) refusedMember(bs *batchSpec, i int) *jobSpec {
	r := w.batches.rng
	first, last := bs.members[0].submitAt, bs.members[0].submitAt
	for _, m := range bs.members {
		first, last = min(first, m.submitAt), max(last, m.submitAt)
	}
	at := first + time.Duration(r.Int64N(int64(last-first)+1))
	if r.IntN(2) == 0 {
		at = last + time.Duration(r.Int64N(int64(10*time.Minute)))
	}
	j := &jobSpec{typ: []string{"omega", ""}[r.IntN(2)], id: fmt.Sprintf("j%03d", i), submitAt: at}
	j.k = jobKey(j.typ, "", j.id)
	w.jobs[j.k] = j
	w.order = append(w.order, j)
	return j
}

// burst sends bs's jobs within 2 s of its first, as a producer sending a file of jobs does
// (`sfnlimit submit --batch`): routers take its first jobs at once, and open the batch at once.
func (w *World) burst(bs *batchSpec) {
	first := bs.members[0].submitAt
	for _, m := range bs.members {
		first = min(first, m.submitAt)
	}
	for _, m := range bs.members {
		m.submitAt = first + time.Duration(w.batches.rng.Int64N(int64(2*time.Second)))
	}
}

// bodyOf is the message a producer sends for j.
func (w *World) bodyOf(j *jobSpec) string {
	m := map[string]any{"type": j.typ, "id": j.id, "input": map[string]any{"seconds": int(j.duration / time.Second)}}
	if j.key != "" {
		m["key"] = j.key
	}
	if j.typ == "" {
		delete(m, "type")
	}
	if bs := w.batches.of[j.k]; bs != nil {
		m["batch"] = bs.id
		if !bs.openFirst {
			m["batchSize"] = len(bs.members)
		}
	}
	body, _ := json.Marshal(m)
	return string(body)
}

// openBatches opens the batches opened first, a second before their first job is sent, straight
// in the table as `sfnlimit batch open` does.
func (w *World) openBatches(start time.Time) {
	for _, bs := range w.batches.batches {
		if !bs.openFirst {
			continue
		}
		first := bs.members[0].submitAt
		for _, m := range bs.members {
			first = min(first, m.submitAt)
		}
		at := max(first-time.Second, 0)
		w.sched.at(start.Add(at), func() {
			// Opened by the producer, as its `sfnlimit submit --batch` would: its principal owns it.
			if err := batch.New(w.table, "sim").OpenBy(context.Background(), bs.id, len(bs.members), batch.Principal(ProducerSenderID), w.now()); err != nil {
				panic(fmt.Sprintf("simworld: open batch %s: %v", bs.id, err))
			}
			w.trace("batch "+bs.id, "operator: batch %s opened for %d jobs", bs.id, len(bs.members))
		})
	}
}

// ---- invariants ----

// watchBatches runs after every write: a batch's close, once written, never changes (closed
// exactly once).
func (w *World) watchBatches() {
	b := w.batches
	for _, bs := range b.batches {
		it := w.table.Item("BATCH#"+bs.id, "META")
		if it == nil {
			continue
		}
		closed := strAttr(it, "closedAt")
		if closed != "" {
			closed += " by " + strAttr(it, "closedBy")
		}
		prev, seen := b.closed[bs.id]
		switch {
		case !seen && closed != "":
			b.closed[bs.id] = closed
			w.trace("batch "+bs.id, "batch %s closed at %s", bs.id, closed)
		case seen && prev != closed:
			w.check.violate(KindBatchClosedTwice, bs.id, "batch %s closed at %s, its item now says %q", bs.id, prev, closed)
			b.closed[bs.id] = closed
		}
	}
}

func strAttr(it map[string]ddbtypes.AttributeValue, k string) string {
	if v, ok := it[k].(*ddbtypes.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}

func numAttr(it map[string]ddbtypes.AttributeValue, k string) int {
	if v, ok := it[k].(*ddbtypes.AttributeValueMemberN); ok {
		n, _ := strconv.Atoi(v.Value)
		return n
	}
	return 0
}

// ledgerOf is what the table says of a batch: its size, close and counts (the shards' sums).
type ledgerOf struct {
	expected  int
	closedAt  string
	announced bool
	counts    map[batch.Outcome]int
}

func (w *World) readLedgers() map[string]*ledgerOf {
	out, err := w.table.Scan(context.Background(), &dynamodb.ScanInput{TableName: aws.String("sim")})
	if err != nil {
		panic(fmt.Sprintf("simworld: scan: %v", err))
	}
	ls := map[string]*ledgerOf{}
	get := func(id string) *ledgerOf {
		if ls[id] == nil {
			ls[id] = &ledgerOf{counts: map[batch.Outcome]int{}}
		}
		return ls[id]
	}
	for _, it := range out.Items {
		pk, sk := strAttr(it, "pk"), strAttr(it, "sk")
		if !strings.HasPrefix(pk, "BATCH#") {
			continue
		}
		id, shard, isShard := strings.Cut(strings.TrimPrefix(pk, "BATCH#"), "#S")
		switch {
		case sk == "META" && !isShard:
			l := get(id)
			l.expected, l.closedAt = numAttr(it, "expected"), strAttr(it, "closedAt")
			if v, ok := it["announced"].(*ddbtypes.AttributeValueMemberBOOL); ok {
				l.announced = v.Value
			}
		case sk == "COUNT" && isShard && shard != "":
			l := get(id)
			for _, o := range batch.Outcomes {
				l.counts[o] += numAttr(it, string(o))
			}
		}
	}
	return ls
}

// outcomes are a batch's jobs' ends as Step Functions and the dead-letter queue record them:
// succeeded (an execution SUCCEEDED), refused (a dead letter from the router), dead-lettered (one
// from anyone else), or unrecorded (a message SQS moved to the dead-letter queue, no reason).
func (w *World) outcomes(bs *batchSpec) (map[batch.Outcome]int, int) {
	succeeded := map[string]bool{}
	for _, e := range w.sfn.order {
		if e.status == sfntypes.ExecutionStatusSucceeded {
			succeeded[e.jk] = true
		}
	}
	source := map[string]string{}
	for _, m := range w.dlq.msgs {
		if attr(m, deadletter.AttrReason) == "" {
			continue // moved by SQS after maxReceiveCount: nobody recorded why
		}
		k := jobKeyOf(attr(m, deadletter.AttrType), attr(m, deadletter.AttrSender), keyOfBody(m.body), attr(m, deadletter.AttrJobID))
		if _, ok := source[k]; !ok {
			source[k] = attr(m, deadletter.AttrSource)
		}
	}
	counts, unrecorded := map[batch.Outcome]int{}, 0
	for _, j := range bs.members {
		src, dead := source[j.k]
		cancelled, skipped := false, false
		if how, from, ok := w.check.firstEnd(j.k); ok {
			// A batch counts a job's first end: a redriven generation's end is a duplicate while
			// the batch is open, and after it closed an end after close (docs/batches.md).
			succeeded[j.k], cancelled, skipped = how == "succeeded", how == "cancelled", how == "skipped"
			dead, src = !succeeded[j.k] && !cancelled && !skipped, from
		}
		switch {
		case cancelled:
			counts[batch.Cancelled]++
		case skipped:
			counts[batch.Skipped]++
		case succeeded[j.k]:
			counts[batch.Succeeded]++
		case dead && src == "router":
			counts[batch.Refused]++
		case dead && src != "":
			counts[batch.DeadLettered]++
		default:
			unrecorded++
		}
	}
	return counts, unrecorded
}

// checkBatches checks at quiescence that every batch closed, with counts equal to its jobs'
// outcomes, and that the bus accepted exactly one completion event for it, with those counts. A
// second event is the design's at least once (not a violation) only when a sender of an earlier
// one crashed after sending.
func (c *checker) checkBatches() {
	w := c.w
	ls := w.readLedgers()
	events := map[string][]busEvent{}
	for _, e := range w.batches.bus.accepted {
		events[e.detail.Batch] = append(events[e.detail.Batch], e)
	}
	for _, bs := range w.batches.batches {
		truth, unrecorded := w.outcomes(bs)
		late := w.check.lateCancelled(bs)
		l := ls[bs.id]
		switch {
		case l == nil:
			c.violate(KindBatchNotClosed, bs.id, "batch %s of %d jobs was never opened", bs.id, len(bs.members))
			continue
		case l.closedAt == "":
			c.violate(KindBatchNotClosed, bs.id, "batch %s: counted %s of %d, outcomes %s (%d unrecorded)", bs.id, countsString(l.counts), l.expected, countsString(truth), unrecorded)
		case !sameCountsBut(l.counts, truth, late) || unrecorded > 0:
			c.violate(KindBatchCounts, bs.id, "batch %s: counted %s, outcomes %s (%d unrecorded)", bs.id, countsString(l.counts), countsString(truth), unrecorded)
		}
		c.checkEvents(bs, events[bs.id], truth, late, l)
	}
}

func (c *checker) checkEvents(bs *batchSpec, evs []busEvent, truth map[batch.Outcome]int, late int, l *ledgerOf) {
	if len(evs) == 0 {
		if l.closedAt != "" {
			c.violate(KindBatchEvents, bs.id, "batch %s closed at %s (announced %v), no completion event accepted", bs.id, l.closedAt, l.announced)
		}
		return
	}
	crashed := 0
	for i, e := range evs {
		if i > 0 && crashed >= i {
			c.w.batches.DuplicateEvents++
			c.w.trace("batch "+bs.id, "duplicate completion event of %s after a sender crashed (at least once)", bs.id)
		} else if i > 0 {
			c.violate(KindBatchEvents, bs.id, "batch %s: completion event %d accepted at %s from %s, the first at %s from %s", bs.id, i+1,
				e.at.Sub(c.start).Truncate(time.Millisecond), e.sender.name, evs[0].at.Sub(c.start).Truncate(time.Millisecond), evs[0].sender.name)
		}
		if e.lost || e.sender.dead {
			crashed++
		}
		got := map[batch.Outcome]int{}
		for _, o := range batch.Outcomes {
			got[o] = e.detail.Counts[string(o)]
		}
		if !sameCountsBut(got, truth, late) || e.detail.Expected != len(bs.members) {
			c.violate(KindBatchEvents, bs.id, "batch %s: completion event says %s of %d, outcomes %s of %d", bs.id, countsString(got), e.detail.Expected, countsString(truth), len(bs.members))
		}
	}
}

// sameCountsBut says a is b with at most late of b's successes counted cancelled: jobs stopped
// by a newer job of their key after their work ended (cancelClosed) end either way.
func sameCountsBut(a, b map[batch.Outcome]int, late int) bool {
	for n := 0; n <= late && n <= b[batch.Succeeded]; n++ {
		x := map[batch.Outcome]int{}
		for o, v := range b {
			x[o] = v
		}
		x[batch.Succeeded] -= n
		x[batch.Cancelled] += n
		if sameCounts(a, x) {
			return true
		}
	}
	return false
}

func sameCounts(a, b map[batch.Outcome]int) bool {
	for _, o := range batch.Outcomes {
		if a[o] != b[o] {
			return false
		}
	}
	return true
}

func countsString(m map[batch.Outcome]int) string {
	var parts []string
	for _, o := range batch.Outcomes {
		parts = append(parts, fmt.Sprintf("%s=%d", o, m[o]))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

// seedBatches makes the batch tracker of a router, starter or releaser draw its pauses from the
// seed (batchend.Tracker.Jitter, batch.Ledger.Jitter), as the starter's back-off does.
func (w *World) seedBatches(t *batchend.Tracker) {
	if t == nil {
		return
	}
	t.Jitter = w.rng.Int64N
	if l, ok := t.Ledger.(*batch.Ledger); ok {
		l.Jitter = w.rng.Int64N
	}
}

// trackerOf is the batch tracker a handler was built with.
func trackerOf(h any) *batchend.Tracker {
	switch h := h.(type) {
	case *router.Router:
		t, _ := h.Batches.(*batchend.Tracker)
		return t
	case *releaser.Handler:
		t, _ := h.Service.Batches.(*batchend.Tracker)
		return t
	case *starter.Starter:
		if svc, ok := h.Releaser.(*releaser.Service); ok {
			t, _ := svc.Batches.(*batchend.Tracker)
			return t
		}
	}
	return nil
}

// firstEnd is how the earliest generation of job that ended, ended, and for a dead letter which
// function sent it.
func (c *checker) firstEnd(job string) (how, source string, ok bool) {
	for g := 0; g <= c.ops.gen[job]+1; g++ {
		if how, ok := c.ops.ended[genKey(job, g)]; ok {
			return how, c.sources[genKey(job, g)], true
		}
	}
	return "", "", false
}
