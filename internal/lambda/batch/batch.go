// Package batch is the batch ledger: it counts each job of a batch exactly once as it ends
// (succeeded, dead-lettered, refused, cancelled by a newer job of its key, or skipped) and tells
// exactly one caller that the batch closed, so the completion event is sent once.
//
// Exactly once: a job's record (an item keyed by its id, written only if absent) and the count it
// adds are written in one TransactWriteItems, so a duplicate release, a redelivery or a second status
// event changes nothing (a counter decremented on its own is decremented twice on a retry).
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
//	BATCH#{id}            META                 expected, shards, openedAt, filled, version, closedAt, closedBy, announced, claimBy, claimUntil, expiresAt
//	BATCH#{id}            LATE#{job}#{redrive} a job that ended after the batch closed: outcome, at, expiresAt
//	BATCH#{id}#S{k}       COUNT                n, succeeded, dead_lettered, refused, cancelled, skipped, firstMs, lastMs, version
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
	"slices"
	"sort"
	"strings"
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
	// Ends by an overflow rule, not failures: stopped by a newer job of its key (cancel), or ended
	// without running behind an older job of its key and sender (skip).
	Cancelled Outcome = "cancelled"
	Skipped   Outcome = "skipped"
)

// Outcomes lists the outcomes in the order summaries show them.
var Outcomes = []Outcome{Succeeded, DeadLettered, Refused, Cancelled, Skipped}

func (o Outcome) valid() bool { return slices.Contains(Outcomes, o) }

// failed says the job ended in the dead-letter queue (dead-lettered, refused): the event lists it.
func (o Outcome) failed() bool { return o == DeadLettered || o == Refused }

// Result says what a Record did.
type Result string

const (
	// Counted: the job was counted; the batch is still open.
	Counted Result = "counted"
	// Closed: the job was counted and its count closed the batch: the caller sends the completion
	// event (Summary), then calls Announced. A later delivery of the closing job gets Closed again
	// until then, so a closer that crashed before sending is stood in for by its own redelivery.
	Closed Result = "closed"
	// Duplicate: the job was recorded already; nothing changed.
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
	// ErrNotOwned: the batch was opened by another principal (OpenBy, Owner).
	ErrNotOwned = errors.New("batch belongs to another sender")
	// ErrExpired: a batch of this id closed and its batch item expired (Retention), but its jobs'
	// records and counts are still in the table: a new batch of the id would count into them.
	ErrExpired = errors.New("a batch of this id closed and expired; use another id")
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
	// Owner is the principal that opened the batch ("": none), whose jobs alone it counts.
	Owner     string
	Announced bool
	// ExpiresAt is when the table's TTL may delete the closed batch (zero: never, or still open).
	ExpiresAt time.Time
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
	// Counted is the outcome the batch counts this end of the job with: this record's, or on a
	// duplicate of the same generation the first record's, which stands ("" for a job listed late,
	// after the close, and for a duplicate of another generation: a redriven job ends as it ends).
	Counted Outcome
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
	// PerShard sizes a batch's shards when it opens (the package's PerShard when 0).
	PerShard int
	// Jitter returns a random number in [0, n) for the pause before a contended record's next
	// round (nil: math/rand; the simulation draws it from its seed).
	Jitter func(n int64) int64
	// Retention is how long a closed batch is kept: the write that closes it, and a late job's
	// record, carry expiresAt = that time + Retention, which the table's TTL deletes after. An open
	// batch never gets one. 0 keeps closed batches for ever.
	Retention time.Duration

	mu sync.Mutex
	// shape caches each batch's size and shard count, which never change once open.
	shape map[string]shape
	// owners caches the owners of the batches this ledger opened.
	owners map[string]string
	// full caches the shards known full, by partition key: a full shard stays full.
	full map[string]bool
}

type shape struct {
	expected, shards int
	owner            string
}

// New returns the ledger of table.
func New(db dynamoAPI, table string) *Ledger {
	return &Ledger{db: db, table: table, shape: map[string]shape{}, owners: map[string]string{}, full: map[string]bool{}}
}

// ShardsFor is how many shards a batch of expected jobs gets.
func (l *Ledger) ShardsFor(expected int) int {
	per := l.PerShard
	if per <= 0 {
		per = PerShard
	}
	return max(1, min(MaxShards, (expected+per-1)/per))
}

// capacity is shard k's share of expected over n shards: they add up to expected.
func capacity(expected, n, k int) int {
	c := expected / n
	if k < expected%n {
		c++
	}
	return c
}

// ExpiresAttribute is the table's TTL attribute (template.yaml, TimeToLiveSpecification): a number of
// seconds since the epoch, as DynamoDB's TTL reads it.
const ExpiresAttribute = "expiresAt"

// expiry is when an item of a batch closed at at may be deleted; zero (never) without a Retention.
func (l *Ledger) expiry(at time.Time) time.Time {
	if l.Retention <= 0 || at.IsZero() {
		return time.Time{}
	}
	return at.Add(l.Retention).Truncate(time.Second)
}

// Home is the shard a job id hashes to.
func Home(jobID string, shards int) int {
	h := fnv.New32a()
	h.Write([]byte(jobID))
	return int(h.Sum32() % uint32(shards))
}

// Open opens batch id for expected jobs with no owner: OpenBy(ctx, id, expected, "", at).
func (l *Ledger) Open(ctx context.Context, id string, expected int, at time.Time) error {
	return l.OpenBy(ctx, id, expected, "", at)
}

// OpenBy opens batch id for expected jobs, owned by owner (a principal: Principal of an SQS
// SenderId, or of the caller's STS UserId; "" owns nothing and anyone may name the batch). Opening
// an open batch of the same owner and size does nothing; of another owner it is ErrNotOwned, and
// with another size ErrSizeMismatch (a batch's size never changes: its shards' capacities are cut
// from it; its owner never changes either).
func (l *Ledger) OpenBy(ctx context.Context, id string, expected int, owner string, at time.Time) error {
	if id == "" || expected < 1 {
		return fmt.Errorf("open batch %q of %d jobs: a batch needs an id and at least one job", id, expected)
	}
	err := l.sameSize(ctx, id, expected, owner)
	if !errors.Is(err, ErrNotOpen) {
		return err
	}
	if err := l.checkNotExpired(ctx, id); err != nil {
		if errors.Is(err, ErrExpired) {
			// Or opened meanwhile by another job, which counted one since (its batch item is
			// written before any count): expired only if the batch item is still absent.
			if again := l.sameSize(ctx, id, expected, owner); !errors.Is(again, ErrNotOpen) {
				return again
			}
		}
		return err
	}
	m := meta{expected: expected, shards: l.ShardsFor(expected), version: 1, openedAt: at, owner: owner}
	_, err = l.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: &l.table, Item: m.item(id), ConditionExpression: aws.String("attribute_not_exists(pk)"),
	})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return l.sameSize(ctx, id, expected, owner) // opened meanwhile
	}
	if err != nil {
		return fmt.Errorf("open batch %s: %w", id, err)
	}
	// Only the owner is remembered here: what Record reads stays as it was before owners existed.
	l.mu.Lock()
	l.owners[id] = owner
	l.mu.Unlock()
	return nil
}

// sameSize is nil when batch id is open (or closed) for expected jobs by owner, ErrNotOwned when by
// another owner, ErrSizeMismatch when for another number, ErrNotOpen when it does not exist.
func (l *Ledger) sameSize(ctx context.Context, id string, expected int, owner string) error {
	m, err := l.readMeta(ctx, id)
	if err != nil {
		return err
	}
	if !Owns(m.owner, owner) {
		return fmt.Errorf("open batch %s: %w", id, ErrNotOwned)
	}
	if m.expected != expected {
		return fmt.Errorf("open batch %s of %d jobs: %w (%d jobs)", id, expected, ErrSizeMismatch, m.expected)
	}
	return nil
}

// checkNotExpired refuses to open id when a batch of that id closed and its batch item expired
// (Retention): every closed batch counted a job in shard 0, whose count item does not expire.
func (l *Ledger) checkNotExpired(ctx context.Context, id string) error {
	out, err := l.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &l.table, Key: shardKey(id, 0), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return fmt.Errorf("open batch %s: %w", id, err)
	}
	if out.Item != nil {
		return fmt.Errorf("open batch %s: %w", id, ErrExpired)
	}
	return nil
}

// Size returns the number of jobs batch id was opened for (ErrNotOpen when it was not): one
// consistent read of the batch item, none once this ledger has read it.
func (l *Ledger) Size(ctx context.Context, id string) (int, error) {
	sp, err := l.shapeOf(ctx, id)
	return sp.expected, err
}

// Owner returns the principal that opened batch id ("": nobody in particular), or ErrNotOpen: one
// consistent read of the batch item, none once this ledger has read it (an owner never changes).
func (l *Ledger) Owner(ctx context.Context, id string) (string, error) {
	l.mu.Lock()
	owner, ok := l.owners[id]
	l.mu.Unlock()
	if ok {
		return owner, nil
	}
	sp, err := l.shapeOf(ctx, id)
	return sp.owner, err
}

// Principal is the part of an SQS SenderId (or an STS GetCallerIdentity UserId, of the same form)
// before its first ':': an IAM user's unique id ("AIDA…"), or a role's ("AROA…") without the
// session name that follows it for an assumed role ("AROA…:session"; a Lambda function's role has
// the function's name there). Two sessions of one role are one principal: a role is the unit an
// operator grants sqs:SendMessage to, and a session name is chosen by whoever assumes the role.
//
// A federated user's id (sts:GetFederationToken) is "{account}:{name}" (IAM User Guide, policy
// variables, aws:userid), and the root user's is the account id alone: before the ':' there is no
// principal of its own, only the account. Such an id is kept whole, so that two federated users
// are two principals, neither the account's root.
func Principal(senderID string) string {
	id := strings.TrimSpace(senderID)
	p, _, federated := strings.Cut(id, ":")
	if federated && accountID(p) {
		return id
	}
	return p
}

// accountID says whether s is an AWS account id: 12 decimal digits (IAM unique ids start with
// four letters, AIDA, AROA...).
func accountID(s string) bool {
	if len(s) != 12 {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// Owns says whether a batch of owner admits the jobs of principal: its owner's, or anyone's when
// it has none (a batch opened without one).
func Owns(owner, principal string) bool { return owner == "" || owner == principal }

// meta is the batch item.
type meta struct {
	expected, shards, filled int
	version                  int64
	openedAt, closedAt       time.Time
	// expiresAt is when DynamoDB's TTL may delete the item (attribute expiresAt, epoch seconds):
	// set when the batch closes, zero while it is open (Ledger.Retention).
	expiresAt time.Time
	closedBy  string
	// owner is the principal that opened the batch ("": none; attribute owner).
	owner     string
	announced bool
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
		version: integer(it, "version"), closedBy: str(it, "closedBy"), owner: str(it, "owner"),
		openedAt: stamp(it, "openedAt"), closedAt: stamp(it, "closedAt"),
		claimBy: str(it, "claimBy"), claimUntil: stamp(it, "claimUntil"),
		expiresAt: epoch(it, ExpiresAttribute),
	}
	if b, ok := it["announced"].(*types.AttributeValueMemberBOOL); ok {
		m.announced = b.Value
	}
	if m.shards < 1 || m.expected < 1 {
		return meta{}, fmt.Errorf("batch %s: item has no size (expected %d, shards %d)", id, m.expected, m.shards)
	}
	l.mu.Lock()
	l.shape[id] = shape{m.expected, m.shards, m.owner}
	l.mu.Unlock()
	return m, nil
}

func (m meta) item(id string) map[string]types.AttributeValue {
	it := metaKey(id)
	it["expected"], it["shards"], it["filled"], it["version"] = n(int64(m.expected)), n(int64(m.shards)), n(int64(m.filled)), n(m.version)
	it["openedAt"] = ts(m.openedAt)
	if m.owner != "" {
		it["owner"] = s(m.owner)
	}
	if m.closed() {
		it["closedAt"], it["closedBy"] = ts(m.closedAt), s(m.closedBy)
	}
	if m.announced {
		it["announced"] = &types.AttributeValueMemberBOOL{Value: true}
	}
	if m.claimBy != "" {
		it["claimBy"], it["claimUntil"] = s(m.claimBy), ts(m.claimUntil)
	}
	if !m.expiresAt.IsZero() {
		it[ExpiresAttribute] = n(m.expiresAt.Unix())
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
	return shape{m.expected, m.shards, m.owner}, err
}

// updateMeta reads the batch item, lets change edit it and writes it as the next version, reading
// again when another writer moved it first. change returns false to write nothing. wrote says
// whether change's edit was written; what names the update in errors.
func (l *Ledger) updateMeta(ctx context.Context, id, what string, change func(*meta) (bool, error)) (wrote bool, err error) {
	for range maxRounds {
		m, err := l.readMeta(ctx, id)
		if err != nil {
			return false, err
		}
		if write, err := change(&m); err != nil || !write {
			return false, err
		}
		prev := m.version
		m.version++
		_, err = l.db.PutItem(ctx, &dynamodb.PutItemInput{
			TableName: &l.table, Item: m.item(id), ConditionExpression: aws.String("version = :v"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":v": n(prev)},
		})
		var ccf *types.ConditionalCheckFailedException
		if err == nil {
			return true, nil
		}
		if !errors.As(err, &ccf) {
			return false, fmt.Errorf("%s batch %s: %w", what, id, err)
		}
	}
	return false, fmt.Errorf("%s batch %s: %w", what, id, ErrContended)
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
	return l.updateMeta(ctx, id, "announce", func(m *meta) (bool, error) {
		switch {
		case !m.closed():
			return false, notClosed(id)
		case m.announced:
			return false, nil
		case m.claimBy != "" && m.claimBy != holder && at.Before(m.claimUntil):
			return false, fmt.Errorf("announce batch %s: %w (until %s)", id, ErrAnnouncing, m.claimUntil.Format(time.RFC3339Nano))
		}
		m.claimBy, m.claimUntil = holder, at.Add(ttl)
		return true, nil
	})
}

// ReleaseAnnouncement gives back holder's claim on the announcement (its send failed), so that the
// next end of the closing job sends at once rather than when the claim expires.
func (l *Ledger) ReleaseAnnouncement(ctx context.Context, id, holder string) error {
	_, err := l.updateMeta(ctx, id, "release the announcement of", func(m *meta) (bool, error) {
		if m.claimBy != holder {
			return false, nil
		}
		m.claimBy, m.claimUntil = "", time.Time{}
		return true, nil
	})
	return err
}

// Announced records that the completion event of batch id was sent: a redelivery of the closing
// job no longer gets Closed, and the batch leaves the pending list. Called again on a batch
// announced already, it only makes sure of the latter.
func (l *Ledger) Announced(ctx context.Context, id string) error {
	_, err := l.updateMeta(ctx, id, "announce", func(m *meta) (bool, error) {
		if !m.closed() {
			return false, notClosed(id)
		}
		if m.announced {
			return false, nil
		}
		m.announced = true
		return true, nil
	})
	if err != nil {
		return err
	}
	return l.unlist(ctx, id)
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

func (l *Ledger) jitter(n int64) int64 {
	if l.Jitter != nil {
		return l.Jitter(n)
	}
	return rand.Int64N(n)
}

func notClosed(id string) error { return fmt.Errorf("announce batch %s: it has not closed", id) }
