// Package batch is the batch ledger: it counts each job of a batch exactly once as it ends
// (succeeded, dead-lettered or refused) and tells exactly one caller that the batch closed, so the
// completion event is sent once.
//
// Exactly once: a job's record (an item keyed by its id, written only if absent) and the count it
// adds are written in one TransactWriteItems, so a duplicate release, a redelivery or a second status
// event changes nothing (seed 001: a counter decremented on its own is decremented twice on a retry).
//
// Not a hot item: a batch of 100,000 jobs ending at 300/s would put every count on one item. A
// transactional write costs 2 write units per item up to 1 KB, and one partition takes 1,000 write
// units a second; worse, TransactWriteItems cancels a transaction that meets another on the same item
// (TransactionConflict), so one counter item serialises the whole batch at the pace of one
// read-and-write round trip. The count is therefore split over shards (up to MaxShards, about
// PerShard jobs each), each in its own partition key. Each shard has a fixed capacity
// (ceil(expected/shards), the last ones one less) that adds up to the batch's size: a job is counted
// in the shard its id hashes to, or, when that one is full, in the next one with room. The batch is
// complete exactly when every shard is full, and the write that fills a shard also adds one to the
// batch's filled-shards count; the write that fills the last shard closes the batch in the same
// transaction. So closing needs no sum of shards on every record (reads of every shard per job would
// cost shards × jobs read units), and of two records racing to close, one wins: both write the batch
// item conditionally on the version they read.
//
// Items (one table, keys pk and sk):
//
//	BATCH#{id}            META                 expected, shards, openedAt, filled, version, closedAt, closedBy, announced, claimBy, claimUntil
//	BATCH#{id}            LATE#{job}#{redrive} a job that ended after the batch closed: outcome, at
//	BATCH#{id}#S{k}       COUNT                n, succeeded, dead_lettered, refused, firstMs, lastMs, version
//	BATCH#{id}#S{home}    JOB#{job}            outcome, redrive, at, shard (where it was counted)
//	BATCH#{id}#S{home}    DEAD#{job}           a dead-lettered or refused job, for the completion event's list
//	BATCH#~               PENDING#{id}         a batch closed and not announced yet: batch, closedAt
//
// {home} is the shard the job id hashes to, whatever shard counted it, so every delivery of a job
// meets the same record.
package batch

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Outcome is how a job ended.
type Outcome string

// A job ends in one of these.
const (
	Succeeded    Outcome = "succeeded"
	DeadLettered Outcome = "dead_lettered"
	Refused      Outcome = "refused"
)

// Outcomes lists the outcomes in the order summaries show them.
var Outcomes = []Outcome{Succeeded, DeadLettered, Refused}

func (o Outcome) valid() bool { return o == Succeeded || o == DeadLettered || o == Refused }

// Result says what a Record did.
type Result string

const (
	// Counted: the job was counted; the batch is still open.
	Counted Result = "counted"
	// Closed: the job was counted and its count closed the batch: the caller sends the completion
	// event (Summary), then calls Announced. A later delivery of the closing job gets Closed again
	// until then, so a closer that crashed before sending is stood in for by its own redelivery.
	Closed Result = "closed"
	// Duplicate: the job was recorded already; nothing changed (Prior is its record).
	Duplicate Result = "duplicate"
	// AfterClose: the batch had closed; the job was not counted and the batch stays closed. The job
	// is listed among the batch's late jobs (Show). A redrive of a job counted before the close
	// (a later generation) gets this too.
	AfterClose Result = "after_close"
)

// Errors a caller acts on.
var (
	ErrNotOpen      = errors.New("batch is not open")
	ErrSizeMismatch = errors.New("batch is open with another size")
	// ErrContended: the record lost its race for a shard too often; nothing was written, the caller
	// retries (the release is redelivered).
	ErrContended = errors.New("batch counter contended")
)

// Sizing of the shards: PerShard jobs per shard, at most MaxShards. At 256 shards a batch ending at
// 300 jobs/s writes each shard about 1.2 times a second (5 write units/s against 1,000), and a
// shard's read-and-write round trip (some 20 ms) leaves conflicts rare.
const (
	PerShard  = 50
	MaxShards = 256
	// MaxListed is how many dead-lettered job ids a summary lists; the rest are in Show(withJobs).
	MaxListed = 100
)

// maxRounds bounds how often Record reads again after losing a race for a shard or the batch item.
const maxRounds = 60

// Job is one job's record in a batch.
type Job struct {
	ID      string
	Outcome Outcome
	Redrive int
	At      time.Time
	// Shard is where the job was counted (its home shard unless that was full).
	Shard int
}

// Summary is a batch's state: what the completion event carries, and what Show prints.
type Summary struct {
	Batch    string
	Expected int
	Shards   int
	// Recorded is the number of jobs counted: Counts summed.
	Recorded    int
	Counts      map[Outcome]int
	First, Last time.Time // the earliest and latest end of a counted job
	OpenedAt    time.Time
	Closed      bool
	ClosedAt    time.Time
	ClosedBy    string // the job whose record closed the batch
	Announced   bool
	// DeadLetteredIDs lists up to MaxListed jobs on the dead-letter queue (dead-lettered or
	// refused); DeadLetteredMore says there are more (Counts[DeadLettered]+Counts[Refused] of
	// them): DeadLetteredWhere says where to find them all.
	DeadLetteredIDs   []string
	DeadLetteredMore  bool
	DeadLetteredWhere string
	// Late are the jobs that ended after the batch closed, not counted.
	Late []Job
}

// Recorded is what Record did.
type Recorded struct {
	Result Result
	// Summary is set when Result is Closed.
	Summary *Summary
	// Prior is the job's earlier record when Result is Duplicate, or AfterClose for a counted job.
	Prior *Job
}

type dynamoAPI interface {
	GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(context.Context, *dynamodb.PutItemInput, ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	DeleteItem(context.Context, *dynamodb.DeleteItemInput, ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
	Query(context.Context, *dynamodb.QueryInput, ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	TransactWriteItems(context.Context, *dynamodb.TransactWriteItemsInput, ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
}

// Ledger keeps batches in the limiter's table.
type Ledger struct {
	db    dynamoAPI
	table string
	// PerShard and MaxShards size a batch's shards when it opens (the package defaults when 0).
	PerShard, MaxShards int
	// Jitter returns a random number in [0, n) for the pause before a contended record's next
	// round (nil: math/rand; the simulation draws it from its seed).
	Jitter func(n int64) int64

	mu sync.Mutex
	// shape caches each batch's size and shard count, which never change once open.
	shape map[string]shape
	// full caches the shards known full: a full shard stays full.
	full map[string]map[int]bool
}

type shape struct{ expected, shards int }

// New returns the ledger of table.
func New(db dynamoAPI, table string) *Ledger {
	return &Ledger{db: db, table: table, shape: map[string]shape{}, full: map[string]map[int]bool{}}
}

func (l *Ledger) jitter(n int64) int64 {
	if l.Jitter != nil {
		return l.Jitter(n)
	}
	return rand.Int64N(n)
}

// ShardsFor is how many shards a batch of expected jobs gets.
func (l *Ledger) ShardsFor(expected int) int {
	per, most := l.PerShard, l.MaxShards
	if per <= 0 {
		per = PerShard
	}
	if most <= 0 {
		most = MaxShards
	}
	return max(1, min(most, (expected+per-1)/per))
}

// capacity is shard k's share of expected over n shards: they add up to expected.
func capacity(expected, n, k int) int {
	c := expected / n
	if k < expected%n {
		c++
	}
	return c
}

// Home is the shard a job id hashes to.
func Home(jobID string, shards int) int {
	h := fnv.New32a()
	h.Write([]byte(jobID))
	return int(h.Sum32() % uint32(shards))
}

func s(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
func n(v int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
}

func metaKey(id string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": s("BATCH#" + id), "sk": s("META")}
}

// pendingPK lists the batches closed and not announced yet, one item each (sk PENDING#{id}), so
// that the sweep finds them with one Query: written by the transaction that closes a batch,
// deleted by Announced. "~" is in no batch id, and the functions' roles allow keys BATCH#*.
const pendingPK = "BATCH#~"

func pendingKey(id string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": s(pendingPK), "sk": s("PENDING#" + id)}
}

func pendingItem(id string, closedAt time.Time) map[string]types.AttributeValue {
	it := pendingKey(id)
	it["batch"], it["closedAt"] = s(id), s(closedAt.UTC().Format(time.RFC3339Nano))
	return it
}

func shardPK(id string, k int) string { return fmt.Sprintf("BATCH#%s#S%03d", id, k) }
func shardKey(id string, k int) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": s(shardPK(id, k)), "sk": s("COUNT")}
}
func jobKey(id, jobID string, shards int) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": s(shardPK(id, Home(jobID, shards))), "sk": s("JOB#" + jobID)}
}

// Open opens batch id for expected jobs. Opening an open batch with the same size does nothing;
// with another size it is ErrSizeMismatch (a batch's size never changes: its shards' capacities are
// cut from it).
func (l *Ledger) Open(ctx context.Context, id string, expected int, at time.Time) error {
	if id == "" || expected < 1 {
		return fmt.Errorf("open batch %q of %d jobs: a batch needs an id and at least one job", id, expected)
	}
	shards := l.ShardsFor(expected)
	item := metaKey(id)
	item["expected"], item["shards"], item["filled"], item["version"] = n(int64(expected)), n(int64(shards)), n(0), n(1)
	item["openedAt"] = s(at.UTC().Format(time.RFC3339Nano))
	_, err := l.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: &l.table, Item: item, ConditionExpression: aws.String("attribute_not_exists(pk)"),
	})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		m, err := l.readMeta(ctx, id)
		if err != nil {
			return err
		}
		if m.expected != expected {
			return fmt.Errorf("open batch %s of %d jobs: %w (%d jobs)", id, expected, ErrSizeMismatch, m.expected)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("open batch %s: %w", id, err)
	}
	return nil
}

// Size returns the number of jobs batch id was opened for (ErrNotOpen when it was not): one
// consistent read of the batch item, none once this ledger has read it.
func (l *Ledger) Size(ctx context.Context, id string) (int, error) {
	sp, err := l.shapeOf(ctx, id)
	return sp.expected, err
}

// meta is the batch item.
type meta struct {
	expected, shards, filled int
	version                  int64
	openedAt, closedAt       time.Time
	closedBy                 string
	announced                bool
	// claimBy holds the announcement (ClaimAnnouncement) until claimUntil.
	claimBy    string
	claimUntil time.Time
}

func (m meta) closed() bool { return !m.closedAt.IsZero() }

func (l *Ledger) readMeta(ctx context.Context, id string) (meta, error) {
	out, err := l.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &l.table, Key: metaKey(id), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return meta{}, fmt.Errorf("read batch %s: %w", id, err)
	}
	if out.Item == nil {
		return meta{}, fmt.Errorf("batch %s: %w", id, ErrNotOpen)
	}
	it := out.Item
	m := meta{
		expected: int(integer(it, "expected")), shards: int(integer(it, "shards")), filled: int(integer(it, "filled")),
		version: integer(it, "version"), closedBy: str(it, "closedBy"),
		openedAt: stamp(it, "openedAt"), closedAt: stamp(it, "closedAt"),
		claimBy: str(it, "claimBy"), claimUntil: stamp(it, "claimUntil"),
	}
	if b, ok := it["announced"].(*types.AttributeValueMemberBOOL); ok {
		m.announced = b.Value
	}
	if m.shards < 1 || m.expected < 1 {
		return meta{}, fmt.Errorf("batch %s: item has no size (expected %d, shards %d)", id, m.expected, m.shards)
	}
	l.mu.Lock()
	l.shape[id] = shape{m.expected, m.shards}
	l.mu.Unlock()
	return m, nil
}

func (m meta) item(id string) map[string]types.AttributeValue {
	it := metaKey(id)
	it["expected"], it["shards"], it["filled"], it["version"] = n(int64(m.expected)), n(int64(m.shards)), n(int64(m.filled)), n(m.version)
	it["openedAt"] = s(m.openedAt.UTC().Format(time.RFC3339Nano))
	if m.closed() {
		it["closedAt"], it["closedBy"] = s(m.closedAt.UTC().Format(time.RFC3339Nano)), s(m.closedBy)
	}
	if m.announced {
		it["announced"] = &types.AttributeValueMemberBOOL{Value: true}
	}
	if m.claimBy != "" {
		it["claimBy"], it["claimUntil"] = s(m.claimBy), s(m.claimUntil.UTC().Format(time.RFC3339Nano))
	}
	return it
}

func (l *Ledger) shapeOf(ctx context.Context, id string) (shape, error) {
	l.mu.Lock()
	sh, ok := l.shape[id]
	l.mu.Unlock()
	if ok {
		return sh, nil
	}
	m, err := l.readMeta(ctx, id)
	return shape{m.expected, m.shards}, err
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
	return l.full[id][k]
}

func (l *Ledger) markFull(id string, k int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.full[id] == nil {
		l.full[id] = map[int]bool{}
	}
	l.full[id][k] = true
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
	home := Home(jobID, sp.shards)
	job := jobKey(id, jobID, sp.shards)
	for round := range maxRounds {
		if round > 0 {
			// Jittered, growing pause: racing records of one shard spread out instead of meeting again.
			select {
			case <-ctx.Done():
				return Recorded{}, ctx.Err()
			case <-time.After(time.Duration(l.jitter(int64(min(round, 10))*int64(2*time.Millisecond)) + 1)):
			}
		}
		sh, ok, err := l.room(ctx, id, sp, home)
		if err != nil {
			return Recorded{}, fmt.Errorf("record job %s: %w", jobID, err)
		}
		if !ok {
			return l.afterClose(ctx, id, jobID, redrive, outcome, at, sp)
		}
		atMs := at.UnixMilli()
		jobItem := map[string]types.AttributeValue{
			"pk": job["pk"], "sk": job["sk"], "outcome": s(string(outcome)), "redrive": n(int64(redrive)),
			"at": s(at.UTC().Format(time.RFC3339Nano)), "shard": n(int64(sh.k)),
		}
		items := []types.TransactWriteItem{{Put: &types.Put{
			TableName: &l.table, Item: jobItem, ConditionExpression: aws.String("attribute_not_exists(pk)"),
		}}}
		next := sh
		next.counts = map[Outcome]int{}
		for o, c := range sh.counts {
			next.counts[o] = c
		}
		next.n++
		next.counts[outcome]++
		if sh.n == 0 || atMs < sh.firstMs {
			next.firstMs = atMs
		}
		if atMs > sh.lastMs {
			next.lastMs = atMs
		}
		items = append(items, next.put(l.table, id))
		if outcome != Succeeded { // dead-lettered or refused: both are on the dead-letter queue
			items = append(items, types.TransactWriteItem{Put: &types.Put{TableName: &l.table, Item: map[string]types.AttributeValue{
				"pk": job["pk"], "sk": s("DEAD#" + jobID), "at": jobItem["at"],
			}}})
		}
		fills := next.n == capacity(sp.expected, sp.shards, sh.k)
		closes := false
		if fills {
			// The write that fills a shard adds it to the batch's filled count, in the same
			// transaction: a crash cannot leave a full shard uncounted. Filling the last one closes
			// the batch; the batch item's version makes one of two racing closers win.
			m, err := l.readMeta(ctx, id)
			if err != nil {
				return Recorded{}, fmt.Errorf("record job %s: %w", jobID, err)
			}
			if m.closed() {
				// Closed since the shard was read: so the shard filled meanwhile, and its version
				// moved. Read again rather than write past the close.
				continue
			}
			prev := m.version
			m.filled++
			m.version++
			if m.filled == sp.shards {
				m.closedAt, m.closedBy, closes = at, jobID, true
				// The batch is listed as closed and not announced in the same transaction, so no
				// crash or failed send can lose its announcement (Pending).
				items = append(items, types.TransactWriteItem{Put: &types.Put{TableName: &l.table, Item: pendingItem(id, at)}})
			}
			items = append(items, versioned(l.table, m.item(id), prev))
		}
		_, err = l.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
		var tc *types.TransactionCanceledException
		switch {
		case err == nil:
			if fills {
				l.markFull(id, sh.k)
			}
			if !closes {
				return Recorded{Result: Counted}, nil
			}
			sum, err := l.summary(ctx, id, false)
			if err != nil {
				return Recorded{Result: Closed}, fmt.Errorf("closed batch %s, but: %w", id, err)
			}
			return Recorded{Result: Closed, Summary: &sum}, nil
		case errors.As(err, &tc):
			if len(tc.CancellationReasons) > 0 && aws.ToString(tc.CancellationReasons[0].Code) == "ConditionalCheckFailed" {
				return l.duplicate(ctx, id, jobID, redrive, outcome, at, sp)
			}
			// The shard or the batch item moved since they were read (ConditionalCheckFailed), or
			// another transaction holds one of them (TransactionConflict, which the SDK does not
			// retry): nothing was written; read again.
			continue
		default:
			return Recorded{}, fmt.Errorf("record job %s of batch %s: %w", jobID, id, err)
		}
	}
	return Recorded{}, fmt.Errorf("record job %s of batch %s: %w after %d rounds", jobID, id, ErrContended, maxRounds)
}

func (l *Ledger) readJob(ctx context.Context, id, jobID string, sp shape) (*Job, error) {
	out, err := l.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &l.table, Key: jobKey(id, jobID, sp.shards), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return nil, fmt.Errorf("read job %s of batch %s: %w", jobID, id, err)
	}
	if out.Item == nil {
		return nil, nil
	}
	j := decodeJob(out.Item)
	return &j, nil
}

// duplicate answers a record of a job already recorded.
func (l *Ledger) duplicate(ctx context.Context, id, jobID string, redrive int, outcome Outcome, at time.Time, sp shape) (Recorded, error) {
	prior, err := l.readJob(ctx, id, jobID, sp)
	if err != nil {
		return Recorded{}, err
	}
	if prior == nil {
		return Recorded{}, fmt.Errorf("record job %s of batch %s: its record was there and is gone", jobID, id)
	}
	m, err := l.readMeta(ctx, id)
	if err != nil {
		return Recorded{}, err
	}
	switch {
	case m.closed() && m.closedBy == jobID && !m.announced:
		// The closer's own redelivery: the completion event may not have been sent.
		sum, err := l.summary(ctx, id, false)
		if err != nil {
			return Recorded{}, err
		}
		return Recorded{Result: Closed, Summary: &sum, Prior: prior}, nil
	case m.closed() && redrive > prior.Redrive:
		if err := l.late(ctx, id, jobID, redrive, outcome, at); err != nil {
			return Recorded{}, err
		}
		return Recorded{Result: AfterClose, Prior: prior}, nil
	}
	return Recorded{Result: Duplicate, Prior: prior}, nil
}

// afterClose answers a record when every shard is full, that is when the batch has closed.
func (l *Ledger) afterClose(ctx context.Context, id, jobID string, redrive int, outcome Outcome, at time.Time, sp shape) (Recorded, error) {
	prior, err := l.readJob(ctx, id, jobID, sp)
	if err != nil {
		return Recorded{}, err
	}
	if prior != nil {
		return l.duplicate(ctx, id, jobID, redrive, outcome, at, sp)
	}
	if err := l.late(ctx, id, jobID, redrive, outcome, at); err != nil {
		return Recorded{}, err
	}
	return Recorded{Result: AfterClose}, nil
}

// late lists a job that ended after its batch closed (one item per job and generation: a
// duplicate rewrites it).
func (l *Ledger) late(ctx context.Context, id, jobID string, redrive int, outcome Outcome, at time.Time) error {
	it := map[string]types.AttributeValue{
		"pk": s("BATCH#" + id), "sk": s(fmt.Sprintf("LATE#%s#%d", jobID, redrive)),
		"jobId": s(jobID), "redrive": n(int64(redrive)),
	}
	if outcome != "" {
		it["outcome"] = s(string(outcome))
	}
	if !at.IsZero() {
		it["at"] = s(at.UTC().Format(time.RFC3339Nano))
	}
	if _, err := l.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &l.table, Item: it}); err != nil {
		return fmt.Errorf("list job %s as late in batch %s: %w", jobID, id, err)
	}
	return nil
}

// ErrAnnouncing: another end of the batch's closing job holds the announcement (ClaimAnnouncement).
var ErrAnnouncing = errors.New("another end of the closing job is sending the completion event")

// ClaimAnnouncement lets one of the closing job's ends send the completion event: Record answers
// every record of the closing job Closed until Announced is written, so two ends of it at once
// (a status event and the sweep releasing one execution, a batch delivered twice) would both
// send. It answers true when holder now holds the claim until at+ttl (it held it already, or
// nobody did, or the holder's claim expired: a holder that crashed), false when the batch has
// been announced (nothing to send), and ErrAnnouncing while another holder's claim runs.
func (l *Ledger) ClaimAnnouncement(ctx context.Context, id, holder string, at time.Time, ttl time.Duration) (bool, error) {
	for range maxRounds {
		m, err := l.readMeta(ctx, id)
		if err != nil {
			return false, err
		}
		switch {
		case !m.closed():
			return false, fmt.Errorf("announce batch %s: it has not closed", id)
		case m.announced:
			return false, nil
		case m.claimBy != "" && m.claimBy != holder && at.Before(m.claimUntil):
			return false, fmt.Errorf("announce batch %s: %w (until %s)", id, ErrAnnouncing, m.claimUntil.Format(time.RFC3339Nano))
		}
		prev := m.version
		m.version++
		m.claimBy, m.claimUntil = holder, at.Add(ttl)
		if ok, err := l.putMeta(ctx, id, m, prev); err != nil {
			return false, fmt.Errorf("announce batch %s: %w", id, err)
		} else if ok {
			return true, nil
		}
	}
	return false, fmt.Errorf("announce batch %s: %w", id, ErrContended)
}

// ReleaseAnnouncement gives back holder's claim on the announcement (its send failed), so that the
// next end of the closing job sends at once rather than when the claim expires.
func (l *Ledger) ReleaseAnnouncement(ctx context.Context, id, holder string) error {
	for range maxRounds {
		m, err := l.readMeta(ctx, id)
		if err != nil {
			return err
		}
		if m.claimBy != holder {
			return nil
		}
		prev := m.version
		m.version++
		m.claimBy, m.claimUntil = "", time.Time{}
		if ok, err := l.putMeta(ctx, id, m, prev); err != nil || ok {
			return err
		}
	}
	return fmt.Errorf("release the announcement of batch %s: %w", id, ErrContended)
}

// putMeta writes the batch item if its version is still prev; false when it moved.
func (l *Ledger) putMeta(ctx context.Context, id string, m meta, prev int64) (bool, error) {
	_, err := l.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: &l.table, Item: m.item(id), ConditionExpression: aws.String("version = :v"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":v": n(prev)},
	})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return false, nil
	}
	return err == nil, err
}

// Announced records that the completion event of batch id was sent: a redelivery of the closing
// job no longer gets Closed, and the batch leaves the pending list. Called again on a batch
// announced already, it only makes sure of the latter.
func (l *Ledger) Announced(ctx context.Context, id string) error {
	for range maxRounds {
		m, err := l.readMeta(ctx, id)
		if err != nil {
			return err
		}
		if !m.closed() {
			return fmt.Errorf("announce batch %s: it has not closed", id)
		}
		if m.announced {
			return l.unlist(ctx, id)
		}
		prev := m.version
		m.version++
		m.announced = true
		_, err = l.db.PutItem(ctx, &dynamodb.PutItemInput{
			TableName: &l.table, Item: m.item(id), ConditionExpression: aws.String("version = :v"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":v": n(prev)},
		})
		var ccf *types.ConditionalCheckFailedException
		if errors.As(err, &ccf) {
			continue
		}
		if err != nil {
			return fmt.Errorf("announce batch %s: %w", id, err)
		}
		return l.unlist(ctx, id)
	}
	return fmt.Errorf("announce batch %s: %w", id, ErrContended)
}

// unlist takes an announced batch off the pending list.
func (l *Ledger) unlist(ctx context.Context, id string) error {
	if _, err := l.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &l.table, Key: pendingKey(id)}); err != nil {
		return fmt.Errorf("take announced batch %s off the pending list: %w", id, err)
	}
	return nil
}

// Pending lists the batches that closed before closedBefore and are not announced yet (their
// closer's send failed, or it crashed), oldest first.
func (l *Ledger) Pending(ctx context.Context, closedBefore time.Time) ([]string, error) {
	its, err := l.query(ctx, pendingPK, "PENDING#", 0)
	if err != nil {
		return nil, err
	}
	type pending struct {
		id string
		at time.Time
	}
	var ps []pending
	for _, it := range its {
		if at := stamp(it, "closedAt"); at.Before(closedBefore) {
			ps = append(ps, pending{str(it, "batch"), at})
		}
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].at.Before(ps[j].at) })
	ids := make([]string, len(ps))
	for i, p := range ps {
		ids[i] = p.id
	}
	return ids, nil
}

// Show returns batch id's summary and, withJobs, every counted job's record (sorted by id).
func (l *Ledger) Show(ctx context.Context, id string, withJobs bool) (Summary, []Job, error) {
	sum, err := l.summary(ctx, id, withJobs)
	if err != nil || !withJobs {
		return sum, nil, err
	}
	var jobs []Job
	for k := range sum.Shards {
		its, err := l.query(ctx, shardPK(id, k), "JOB#", 0)
		if err != nil {
			return sum, nil, err
		}
		for _, it := range its {
			jobs = append(jobs, decodeJob(it))
		}
	}
	sort.Slice(jobs, func(i, j int) bool { return jobs[i].ID < jobs[j].ID })
	return sum, jobs, nil
}

// summary reads the batch item and every shard. It lists up to MaxListed dead-lettered jobs
// (allDead: all of them).
func (l *Ledger) summary(ctx context.Context, id string, allDead bool) (Summary, error) {
	m, err := l.readMeta(ctx, id)
	if err != nil {
		return Summary{}, err
	}
	sum := Summary{
		Batch: id, Expected: m.expected, Shards: m.shards, Counts: map[Outcome]int{},
		OpenedAt: m.openedAt, Closed: m.closed(), ClosedAt: m.closedAt, ClosedBy: m.closedBy, Announced: m.announced,
		DeadLetteredWhere: fmt.Sprintf("sfnlimit batch show %s --jobs (items DEAD#{job} under pk BATCH#%s#S{shard})", id, id),
	}
	var first, last int64
	for k := range m.shards {
		sh, err := l.readShard(ctx, id, k)
		if err != nil {
			return Summary{}, err
		}
		if sh.n == 0 {
			continue
		}
		sum.Recorded += sh.n
		for o, c := range sh.counts {
			sum.Counts[o] += c
		}
		if first == 0 || sh.firstMs < first {
			first = sh.firstMs
		}
		last = max(last, sh.lastMs)
	}
	if sum.Recorded > 0 {
		sum.First, sum.Last = time.UnixMilli(first).UTC(), time.UnixMilli(last).UTC()
	}
	limit := MaxListed
	if allDead {
		limit = 0
	}
	dead := sum.Counts[DeadLettered] + sum.Counts[Refused]
	for k := 0; k < m.shards && dead > 0; k++ {
		its, err := l.query(ctx, shardPK(id, k), "DEAD#", limit)
		if err != nil {
			return Summary{}, err
		}
		for _, it := range its {
			sum.DeadLetteredIDs = append(sum.DeadLetteredIDs, str(it, "sk")[len("DEAD#"):])
		}
		if limit > 0 && len(sum.DeadLetteredIDs) >= limit {
			break
		}
	}
	sort.Strings(sum.DeadLetteredIDs)
	if limit > 0 && len(sum.DeadLetteredIDs) > limit {
		sum.DeadLetteredIDs = sum.DeadLetteredIDs[:limit]
	}
	sum.DeadLetteredMore = len(sum.DeadLetteredIDs) < dead
	late, err := l.query(ctx, "BATCH#"+id, "LATE#", 0)
	if err != nil {
		return Summary{}, err
	}
	for _, it := range late {
		j := Job{ID: str(it, "jobId"), Outcome: Outcome(str(it, "outcome")), Redrive: int(integer(it, "redrive")), At: stamp(it, "at"), Shard: -1}
		sum.Late = append(sum.Late, j)
	}
	return sum, nil
}

// query reads the items of pk whose sort key starts with prefix, up to limit (all when 0).
func (l *Ledger) query(ctx context.Context, pk, prefix string, limit int) ([]map[string]types.AttributeValue, error) {
	var out []map[string]types.AttributeValue
	p := dynamodb.NewQueryPaginator(l.db, &dynamodb.QueryInput{
		TableName:              &l.table,
		KeyConditionExpression: aws.String("pk = :pk AND begins_with(sk, :sk)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":pk": s(pk), ":sk": s(prefix),
		},
		ConsistentRead: aws.Bool(true),
	})
	for p.HasMorePages() && (limit == 0 || len(out) < limit) {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("read %s* of %s: %w", prefix, pk, err)
		}
		out = append(out, page.Items...)
	}
	return out, nil
}

func decodeJob(it map[string]types.AttributeValue) Job {
	return Job{
		ID: str(it, "sk")[len("JOB#"):], Outcome: Outcome(str(it, "outcome")), Redrive: int(integer(it, "redrive")),
		At: stamp(it, "at"), Shard: int(integer(it, "shard")),
	}
}

func str(it map[string]types.AttributeValue, k string) string {
	if v, ok := it[k].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}

func integer(it map[string]types.AttributeValue, k string) int64 {
	if v, ok := it[k].(*types.AttributeValueMemberN); ok {
		x, _ := strconv.ParseInt(v.Value, 10, 64)
		return x
	}
	return 0
}

func stamp(it map[string]types.AttributeValue, k string) time.Time {
	t, _ := time.Parse(time.RFC3339Nano, str(it, k))
	return t
}
