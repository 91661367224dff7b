package batch

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// end is what Record is asked to count: job of batch ended with outcome at, in generation redrive.
type end struct {
	batch, job string
	redrive    int
	outcome    Outcome
	at         time.Time
}

// Record counts job jobID of batch id as ended with outcome at, once: see Result for what a second
// record of the job does. redrive is the job's generation: a later generation of a job counted
// before the batch closed is reported as AfterClose; while the batch is open it is a Duplicate (the
// job keeps the outcome it was counted with).
func (l *Ledger) Record(ctx context.Context, id, jobID string, redrive int, outcome Outcome, at time.Time) (Recorded, error) {
	if !outcome.valid() {
		return Recorded{}, fmt.Errorf("record job %s of batch %s: outcome %q is not one of %v", jobID, id, outcome, Outcomes)
	}
	if jobID == "" {
		return Recorded{}, fmt.Errorf("record a job of batch %s: no job id", id)
	}
	sp, err := l.shapeOf(ctx, id)
	if err != nil {
		return Recorded{}, fmt.Errorf("record job %s: %w", jobID, err)
	}
	e := end{batch: id, job: jobID, redrive: redrive, outcome: outcome, at: at}
	for round := range maxRounds {
		if err := l.pause(ctx, round); err != nil {
			return Recorded{}, err
		}
		rec, again, err := l.count(ctx, e, sp)
		if !again {
			return rec, err
		}
	}
	return Recorded{}, fmt.Errorf("record job %s of batch %s: %w after %d rounds", jobID, id, ErrContended, maxRounds)
}

// pause waits before every round but the first, a jittered, growing time: racing records of one
// shard spread out instead of meeting again.
func (l *Ledger) pause(ctx context.Context, round int) error {
	if round == 0 {
		return nil
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Duration(l.jitter(int64(min(round, 10))*int64(2*time.Millisecond)) + 1)):
		return nil
	}
}

// count tries once to count e in the first shard with room from its home on; again says that a
// shard or the batch item moved since it was read, nothing was written, and e is to be tried again.
func (l *Ledger) count(ctx context.Context, e end, sp shape) (rec Recorded, again bool, err error) {
	sh, ok, err := l.room(ctx, e.batch, sp, Home(e.job, sp.shards))
	if err != nil {
		return Recorded{}, false, fmt.Errorf("record job %s: %w", e.job, err)
	}
	if !ok {
		rec, err := l.afterClose(ctx, e, sp)
		return rec, false, err
	}
	next := sh.counting(e)
	items := l.countItems(e, sp, next)
	fills := next.n == capacity(sp.expected, sp.shards, sh.k)
	closes := false
	if fills {
		// The write that fills a shard adds it to the batch's filled count, in the same
		// transaction: a crash cannot leave a full shard uncounted. Filling the last one closes
		// the batch; the batch item's version makes one of two racing closers win.
		m, err := l.readMeta(ctx, e.batch)
		if err != nil {
			return Recorded{}, false, fmt.Errorf("record job %s: %w", e.job, err)
		}
		if m.closed() {
			// Closed since the shard was read: so the shard filled meanwhile, and its version
			// moved. Read again rather than write past the close.
			return Recorded{}, true, nil
		}
		prev := m.version
		m.filled++
		m.version++
		if m.filled == sp.shards {
			m.closedAt, m.closedBy, closes = e.at, e.job, true
			// The batch is listed as closed and not announced in the same transaction, so no
			// crash or failed send can lose its announcement (Pending).
			items = append(items, types.TransactWriteItem{Put: &types.Put{TableName: &l.table, Item: pendingItem(e.batch, e.at)}})
			m.expiresAt = l.expiry(e.at)
		}
		items = append(items, versioned(l.table, m.item(e.batch), prev))
	}
	_, err = l.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
	var tc *types.TransactionCanceledException
	switch {
	case err == nil:
		if fills {
			l.markFull(e.batch, sh.k)
		}
		if !closes {
			return Recorded{Result: Counted, Counted: e.outcome}, false, nil
		}
		sum, err := l.summary(ctx, e.batch, false)
		if err != nil {
			return Recorded{Result: Closed, Counted: e.outcome}, false, fmt.Errorf("closed batch %s, but: %w", e.batch, err)
		}
		return Recorded{Result: Closed, Summary: &sum, Counted: e.outcome}, false, nil
	case errors.As(err, &tc):
		if len(tc.CancellationReasons) > 0 && aws.ToString(tc.CancellationReasons[0].Code) == "ConditionalCheckFailed" {
			rec, err := l.duplicate(ctx, e, sp)
			return rec, false, err
		}
		// The shard or the batch item moved since they were read (ConditionalCheckFailed), or
		// another transaction holds one of them (TransactionConflict, which the SDK does not
		// retry): nothing was written; read again.
		return Recorded{}, true, nil
	default:
		return Recorded{}, false, fmt.Errorf("record job %s of batch %s: %w", e.job, e.batch, err)
	}
}

// countItems are the puts that count e in shard next: e's record (first: Record reads a failed
// condition on it as a duplicate), the shard's count and, for a job on the dead-letter queue
// (dead-lettered or refused), its DEAD# item.
func (l *Ledger) countItems(e end, sp shape, next shard) []types.TransactWriteItem {
	key := jobKey(e.batch, e.job, sp.shards)
	job := map[string]types.AttributeValue{
		"pk": key["pk"], "sk": key["sk"], "outcome": s(string(e.outcome)), "redrive": n(int64(e.redrive)),
		"at": ts(e.at), "shard": n(int64(next.k)),
	}
	items := []types.TransactWriteItem{
		{Put: &types.Put{TableName: &l.table, Item: job, ConditionExpression: aws.String("attribute_not_exists(pk)")}},
		next.put(l.table, e.batch),
	}
	if e.outcome.failed() {
		items = append(items, types.TransactWriteItem{Put: &types.Put{TableName: &l.table, Item: map[string]types.AttributeValue{
			"pk": key["pk"], "sk": s("DEAD#" + e.job), "at": job["at"],
		}}})
	}
	return items
}

// shard is one shard's count item.
type shard struct {
	k, n            int
	counts          map[Outcome]int
	firstMs, lastMs int64
	version         int64
}

func (l *Ledger) readShard(ctx context.Context, id string, k int) (shard, error) {
	out, err := l.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &l.table, Key: shardKey(id, k), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return shard{}, fmt.Errorf("read shard %d of batch %s: %w", k, id, err)
	}
	sh := shard{k: k, counts: map[Outcome]int{}}
	if it := out.Item; it != nil {
		sh.n, sh.version = int(integer(it, "n")), integer(it, "version")
		sh.firstMs, sh.lastMs = integer(it, "firstMs"), integer(it, "lastMs")
		for _, o := range Outcomes {
			sh.counts[o] = int(integer(it, string(o)))
		}
	}
	return sh, nil
}

// counting is sh with e counted in it.
func (sh shard) counting(e end) shard {
	next := sh
	next.counts = maps.Clone(sh.counts)
	next.n++
	next.counts[e.outcome]++
	atMs := e.at.UnixMilli()
	if sh.n == 0 || atMs < sh.firstMs {
		next.firstMs = atMs
	}
	if atMs > sh.lastMs {
		next.lastMs = atMs
	}
	return next
}

// put is the transaction action that writes sh as the next version of the one read.
func (sh shard) put(table, id string) types.TransactWriteItem {
	it := shardKey(id, sh.k)
	it["n"], it["version"], it["firstMs"], it["lastMs"] = n(int64(sh.n)), n(sh.version+1), n(sh.firstMs), n(sh.lastMs)
	for _, o := range Outcomes {
		if c := sh.counts[o]; c > 0 {
			it[string(o)] = n(int64(c))
		}
	}
	return versioned(table, it, sh.version)
}

// versioned puts item if it is still at version v (absent when v is 0).
func versioned(table string, item map[string]types.AttributeValue, v int64) types.TransactWriteItem {
	p := &types.Put{TableName: &table, Item: item, ConditionExpression: aws.String("attribute_not_exists(pk)")}
	if v > 0 {
		p.ConditionExpression = aws.String("version = :v")
		p.ExpressionAttributeValues = map[string]types.AttributeValue{":v": n(v)}
	}
	return types.TransactWriteItem{Put: p}
}

func (l *Ledger) knownFull(id string, k int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.full[shardPK(id, k)]
}

func (l *Ledger) markFull(id string, k int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.full[shardPK(id, k)] = true
}

// room finds the first shard with room from home on, reading each not known full; ok is false when
// every shard is full (the batch has closed).
func (l *Ledger) room(ctx context.Context, id string, sp shape, home int) (shard, bool, error) {
	for i := range sp.shards {
		k := (home + i) % sp.shards
		if l.knownFull(id, k) {
			continue
		}
		sh, err := l.readShard(ctx, id, k)
		if err != nil {
			return shard{}, false, err
		}
		if sh.n < capacity(sp.expected, sp.shards, k) {
			return sh, true, nil
		}
		l.markFull(id, k)
	}
	return shard{}, false, nil
}

// readJob returns e's job's record, nil when it has none.
func (l *Ledger) readJob(ctx context.Context, e end, sp shape) (*Job, error) {
	out, err := l.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &l.table, Key: jobKey(e.batch, e.job, sp.shards), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return nil, fmt.Errorf("read job %s of batch %s: %w", e.job, e.batch, err)
	}
	if out.Item == nil {
		return nil, nil
	}
	j := decodeJob(out.Item)
	return &j, nil
}

// duplicate answers a record of a job already recorded.
func (l *Ledger) duplicate(ctx context.Context, e end, sp shape) (Recorded, error) {
	prior, err := l.readJob(ctx, e, sp)
	if err != nil {
		return Recorded{}, err
	}
	if prior == nil {
		return Recorded{}, fmt.Errorf("record job %s of batch %s: its record was there and is gone", e.job, e.batch)
	}
	m, err := l.readMeta(ctx, e.batch)
	if err != nil {
		return Recorded{}, err
	}
	switch {
	case m.closed() && m.closedBy == e.job && !m.announced:
		// The closer's own redelivery: the completion event may not have been sent.
		sum, err := l.summary(ctx, e.batch, false)
		if err != nil {
			return Recorded{}, err
		}
		return Recorded{Result: Closed, Summary: &sum, Counted: prior.countedFor(e)}, nil
	case m.closed() && e.redrive > prior.Redrive:
		return l.late(ctx, e)
	}
	return Recorded{Result: Duplicate, Counted: prior.countedFor(e)}, nil
}

// countedFor is the outcome a job recorded as j stands for in e: j's own for the same generation; ""
// for another (a redriven job runs again, and ends as it ends: the batch keeps its first count).
func (j Job) countedFor(e end) Outcome {
	if j.Redrive != e.redrive {
		return ""
	}
	return j.Outcome
}

// afterClose answers a record when every shard is full, that is when the batch has closed.
func (l *Ledger) afterClose(ctx context.Context, e end, sp shape) (Recorded, error) {
	prior, err := l.readJob(ctx, e, sp)
	if err != nil {
		return Recorded{}, err
	}
	if prior != nil {
		return l.duplicate(ctx, e, sp)
	}
	return l.late(ctx, e)
}

// late lists a job that ended after its batch closed, uncounted (one item per job and generation: a
// duplicate rewrites it).
func (l *Ledger) late(ctx context.Context, e end) (Recorded, error) {
	it := map[string]types.AttributeValue{
		"pk": s("BATCH#" + e.batch), "sk": s(fmt.Sprintf("LATE#%s#%d", e.job, e.redrive)),
		"jobId": s(e.job), "redrive": n(int64(e.redrive)), "outcome": s(string(e.outcome)),
	}
	if !e.at.IsZero() {
		it["at"] = ts(e.at)
	}
	if exp := l.expiry(e.at); !exp.IsZero() {
		it[ExpiresAttribute] = n(exp.Unix())
	}
	if _, err := l.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &l.table, Item: it}); err != nil {
		return Recorded{}, fmt.Errorf("list job %s as late in batch %s: %w", e.job, e.batch, err)
	}
	return Recorded{Result: AfterClose}, nil
}
