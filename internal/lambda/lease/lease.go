// Package lease keeps each lane's lease in DynamoDB: which job holds the lane, the latest receipt
// handle of its message, its execution and attempt. Every write is conditional on the version it
// replaces, so a retried or racing writer can never apply a change twice or over a newer one.
package lease

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
)

// Status is where a lease is in its life.
type Status string

const (
	// Bound: a first-free job was bound to the lane from its waiting group and its copy is on its
	// way to the lane's group; the copy claims the lane from this lease. No execution runs yet.
	Bound Status = "bound"
	// Starting: the lane is claimed for the execution the lease names, started or about to be. A
	// confirmed start writes nothing more, so this is also the status of a running job: every
	// reader takes a claim whose execution exists for a running one.
	Starting Status = "starting"
	// Retrying: the attempt failed with attempts left; the message was made visible to run again.
	Retrying Status = "retrying"
	// DeadLettering: the attempt ended for good (attempts exhausted, or aborted); the release that
	// wrote this status sends the job's one dead letter, then deletes the message and the lease.
	DeadLettering Status = "dead-lettering"
	// Moving: the job is leaving the lane (a lowered limit or key cap): its copy is on its way to
	// its waiting group, or another lane, and the move then deletes its message and this lease. No
	// execution runs. The lease keeps the lane from looking free to a twin delivery of the message
	// (Lambda may hand a batch over twice), which would start the job with no message left; the
	// copy does not take it for its job holding a lane.
	Moving Status = "moving"
)

// running is the status earlier versions wrote once a start was confirmed; it is read as Starting
// (AsRead), which every reader already takes for a running job.
const running Status = "running"

// ErrConflict means the lease changed since it was read (or exists when it should not).
var ErrConflict = errors.New("lease changed since it was read")

// Lease is one lane's claim.
type Lease struct {
	Type  string `dynamodbav:"type"`
	Lane  int    `dynamodbav:"lane"`
	JobID string `dynamodbav:"jobId"`
	// Key is the job's concurrency key ("" the default key): a key's running jobs are counted
	// from its type's leases, the only record of occupancy.
	JobKey string `dynamodbav:"key,omitempty"`
	// JobSender is the job's sender (job.Job.Sender; "" for a job routed before senders were part of
	// a job's identity): another sender's job with the same type, key and id is another job.
	JobSender string `dynamodbav:"sender,omitempty"`
	// Batch is the job's batch ("" none): whoever ends the job (a release, the sweep, the
	// starter's dead letter) records it there without reading the execution's input.
	Batch         string `dynamodbav:"batch,omitempty"`
	MessageID     string `dynamodbav:"messageId"`
	ReceiptHandle string `dynamodbav:"receiptHandle"`
	// HandedBy is, on a bound lease, the waiting message that handed it its count (a newer copy of
	// the job finding its lane bound to a stale one): that message sends the bind's copy, and its
	// next delivery sends it again if it stopped before the send.
	HandedBy string `dynamodbav:"handedBy,omitempty"`
	// ExecutionArn is the attempt's execution, written with the claim (before StartExecution is
	// called): the name is deterministic, so every reader (release, sweep, dead letter) can find the
	// execution even when the start was never confirmed.
	ExecutionArn string `dynamodbav:"executionArn,omitempty"`
	// StateMachineArn is the state machine the claim starts. A retried start uses it rather than the
	// type's current config, so a config change mid-flight cannot start the same attempt twice.
	StateMachineArn string `dynamodbav:"stateMachineArn,omitempty"`
	// Receives is the ApproximateReceiveCount of the delivery whose receipt handle the lease holds,
	// so a late copy of an earlier delivery never puts back a receipt handle SQS no longer honours.
	Receives    int       `dynamodbav:"receives,omitempty"`
	Attempt     int       `dynamodbav:"attempt"`
	Redrive     int       `dynamodbav:"redrive,omitempty"`
	Status      Status    `dynamodbav:"status"`
	StartedAt   time.Time `dynamodbav:"startedAt"`
	UpdatedAt   time.Time `dynamodbav:"updatedAt"`
	SubmittedAt time.Time `dynamodbav:"submittedAt"`
	// HeldUntil is when the lease's message, away for a known time (parked for a pause, waiting
	// for a start token), is due back: until then the lease is not stale however long ago it was
	// written (Stale).
	HeldUntil time.Time `dynamodbav:"heldUntil,omitempty"`
	// PoolCaps are the caps of the pools a bound lease's bind took slots of, "a=50,b=20": its claim
	// looks at its pools again only when one is lower now, or new.
	PoolCaps string `dynamodbav:"poolCaps,omitempty"`
	// KeyCap is the cap of its job's key a bound lease's bind counted the key under (0: none, or a
	// bind that did not record it): its claim counts the key again under a lower cap.
	KeyCap int `dynamodbav:"keyCap,omitempty"`
	// TypeLimit is the limit of its type a first-free bound lease's bind counted the type's leases
	// under (0: a bind that did not record it): its claim counts them again under a lower limit.
	TypeLimit int `dynamodbav:"typeLimit,omitempty"`
	// PoolMembers are the member types of those pools at the bind, "a=x+y,b=y": its claim looks at
	// its pools again when a type joined one since (its running jobs count toward the cap).
	PoolMembers string `dynamodbav:"poolMembers,omitempty"`
	// KeyToken and TypeToken are the start tokens a bound lease's bind took for its job: its key's
	// and its type's (each only when it had a rate then). No start has used them while the lease is
	// bound (the copy's claim replaces it), so the one delete of a bound lease gives them back
	// (releaser.Service.Free); a claim does not carry them.
	KeyToken  bool `dynamodbav:"keyToken,omitempty"`
	TypeToken bool `dynamodbav:"typeToken,omitempty"`
	// MovedTo is a moving lease's destination: the message group its job's copy is sent to, which
	// a delivery finishing the move sends to again (SQS deduplicates a copy within its group).
	MovedTo string `dynamodbav:"movedTo,omitempty"`
	// Reclaimed says the attempt was claimed again after its lease was gone, to finish it: the
	// release that freed that lease counted its end (its message outlived it: a DeleteMessage with a
	// receipt handle gone stale, which SQS answers with OK), or the lease was deleted by hand. A
	// release does not count its end (succeeded or dead-lettered) again.
	Reclaimed bool  `dynamodbav:"reclaimed,omitempty"`
	Version   int64 `dynamodbav:"version"`
}

// Stale reports whether the lease has sat untouched for longer than after, counted from its last
// write or from when its message is due back, whichever is later: its message, if it still
// existed, would have come back and written it (after 0: never stale).
func (l Lease) Stale(now time.Time, after time.Duration) bool {
	return after > 0 && now.Sub(l.idleSince()) > after
}

// Idle is how long the lease has sat untouched (see Stale).
func (l Lease) Idle(now time.Time) time.Duration { return now.Sub(l.idleSince()) }

func (l Lease) idleSince() time.Time {
	if l.HeldUntil.After(l.UpdatedAt) {
		return l.HeldUntil
	}
	return l.UpdatedAt
}

// Key names a lane.
type Key struct {
	Type string
	Lane int
}

func (k Key) String() string { return k.Type + "-" + strconv.Itoa(k.Lane) }

// Holds reports whether the lease is of this job run: a job is its type (the lease's), sender, key
// and id, a run its redrive generation. Another key's or sender's job with the same id is another
// job.
func (l Lease) Holds(sender, key, jobID string, redrive int) bool {
	return l.JobSender == sender && l.JobKey == key && l.JobID == jobID && l.Redrive == redrive
}

// Key returns the lane a lease is for.
func (l Lease) Key() Key { return Key{l.Type, l.Lane} }

const leasePrefix = "LEASE#"

func pk(typ string) string { return leasePrefix + typ }
func sk(lane int) string   { return fmt.Sprintf("LANE#%06d", lane) }

func keyAttrs(k Key) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: pk(k.Type)},
		"sk": &types.AttributeValueMemberS{Value: sk(k.Lane)},
	}
}

// dynamoAPI is the part of the DynamoDB client the store uses.
type dynamoAPI interface {
	GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(context.Context, *dynamodb.PutItemInput, ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	DeleteItem(context.Context, *dynamodb.DeleteItemInput, ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
	Query(context.Context, *dynamodb.QueryInput, ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	Scan(context.Context, *dynamodb.ScanInput, ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
}

// Store reads and writes leases in one DynamoDB table.
type Store struct {
	db    dynamoAPI
	table string
	now   func() time.Time
	// registered holds the types this store has written to the type registry (types.go).
	registered sync.Map
}

// NewStore returns a lease store on table.
func NewStore(db dynamoAPI, table string) *Store {
	return &Store{db: db, table: table, now: time.Now}
}

// SetClock sets the clock a lease's UpdatedAt is stamped by (time.Now by default). The
// deterministic simulation gives each function's container its own, a little off true time, as
// the clocks of two Lambda hosts may be.
func (s *Store) SetClock(now func() time.Time) { s.now = now }

// Get returns a lane's lease, or nil when the lane is free. Reads are strongly consistent.
func (s *Store) Get(ctx context.Context, k Key) (*Lease, error) {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: &s.table, Key: keyAttrs(k), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return nil, fmt.Errorf("read lease of lane %s: %w", k, err)
	}
	if len(out.Item) == 0 {
		return nil, nil
	}
	var l Lease
	if err := attributevalue.UnmarshalMap(out.Item, &l); err != nil {
		return nil, fmt.Errorf("decode lease of lane %s: %w", k, err)
	}
	l = AsRead(l)
	return &l, nil
}

// AsRead is a stored lease as its readers take it: a claim on a version or alias of its state
// machine, written by an earlier version, named its execution with the qualifier
// (...:execution:NAME:3:EXEC), which no execution has; it is read as Step Functions names it
// (job.UnqualifiedExecution); and a lease an earlier version confirmed running is a claim. Every
// store of leases reads through it.
func AsRead(l Lease) Lease {
	l.ExecutionArn = job.UnqualifiedExecution(l.ExecutionArn)
	if l.Status == running {
		l.Status = Starting
	}
	return l
}

// firstVersion is a new lease's version. It is drawn at random, so a lane's successive leases do
// not share versions: were every lease to start at 1, a release still holding a former job's lease
// (read before another release freed the lane) would find its version on the next job's lease and
// delete or overwrite it. Below 2^52, so the version stays exact as a JSON number.
func firstVersion() int64 { return rand.Int64N(1<<52) + 1 }

// Put writes next in place of prev: prev nil means the lane must be free. It returns the lease as
// written (with its new version) or ErrConflict when the lane is no longer in state prev.
func (s *Store) Put(ctx context.Context, next Lease, prev *Lease) (Lease, error) {
	next.UpdatedAt = s.now().UTC()
	in := &dynamodb.PutItemInput{TableName: &s.table}
	if prev == nil {
		// A type's first lease is registered before it is written, so the sweep finds it (types.go).
		if err := s.registerType(ctx, next.Type); err != nil {
			return Lease{}, err
		}
		next.Version = firstVersion()
		in.ConditionExpression = aws.String("attribute_not_exists(pk)")
	} else {
		if prev.Key() != next.Key() {
			return Lease{}, fmt.Errorf("lease of lane %s cannot replace lane %s", next.Key(), prev.Key())
		}
		next.Version = prev.Version + 1
		in.ConditionExpression = aws.String(sameLease)
		in.ExpressionAttributeValues = sameLeaseValues(*prev)
	}
	item, err := attributevalue.MarshalMap(next)
	if err != nil {
		return Lease{}, fmt.Errorf("encode lease of lane %s: %w", next.Key(), err)
	}
	for k, v := range keyAttrs(next.Key()) {
		item[k] = v
	}
	// The write's own token: when DynamoDB applies the write and its answer is lost, the SDK sends
	// the same request again, which fails its condition against the first; the item that failed
	// it (ALL_OLD) then carries this token, and the write is known to be done.
	token := writeToken()
	item[writeIDAttr] = &types.AttributeValueMemberS{Value: token}
	in.Item = item
	in.ReturnValuesOnConditionCheckFailure = types.ReturnValuesOnConditionCheckFailureAllOld
	if _, err := s.db.PutItem(ctx, in); err != nil {
		if old, failed := conditionFailed(err); failed {
			if own, ok := old[writeIDAttr].(*types.AttributeValueMemberS); ok && own.Value == token {
				return next, nil
			}
			return Lease{}, fmt.Errorf("write lease of lane %s: %w", next.Key(), ErrConflict)
		}
		return Lease{}, fmt.Errorf("write lease of lane %s: %w", next.Key(), err)
	}
	return next, nil
}

// writeIDAttr holds each lease write's token (Put).
const writeIDAttr = "writeId"

func writeToken() string { return strconv.FormatUint(rand.Uint64(), 36) }

// conditionFailed reports whether err is a failed condition, with the item that failed it when the
// request asked for it (nil: none was stored).
func conditionFailed(err error) (map[string]types.AttributeValue, bool) {
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return ccf.Item, true
	}
	return nil, false
}

// sameLease is the condition that the lane still holds the lease a writer read: its version and
// its job. The version alone is not enough: it restarts at 1 with each new lease, so a release that
// read one job's lease and writes late (after the lane was freed and taken by another job whose
// lease reached the same version) would delete or overwrite the other job's lease (ABA).
const sameLease = "version = :v AND jobId = :j"

func sameLeaseValues(prev Lease) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		":v": &types.AttributeValueMemberN{Value: strconv.FormatInt(prev.Version, 10)},
		":j": &types.AttributeValueMemberS{Value: prev.JobID},
	}
}

// Delete removes prev, only if the lane still holds exactly that version of that job's lease.
//
// A delete that DynamoDB applied and answered as failed (the SDK's retry finds the lane free) is
// reported as a conflict, as a lane freed by another release is: the two cannot be told apart, and
// a caller must not count another release's work as its own. Its callers read the lane again and
// find it free; what they lose is the wake-up, which the parked head's own look makes up for.
func (s *Store) Delete(ctx context.Context, prev Lease) error {
	_, err := s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName:                 &s.table,
		Key:                       keyAttrs(prev.Key()),
		ConditionExpression:       aws.String(sameLease),
		ExpressionAttributeValues: sameLeaseValues(prev),
	})
	if err != nil {
		if _, failed := conditionFailed(err); failed {
			return fmt.Errorf("delete lease of lane %s: %w", prev.Key(), ErrConflict)
		}
		return fmt.Errorf("delete lease of lane %s: %w", prev.Key(), err)
	}
	return nil
}

// ListType returns every lease of a type, in lane order.
func (s *Store) ListType(ctx context.Context, typ string) ([]Lease, error) {
	var out []Lease
	p := dynamodb.NewQueryPaginator(s.db, &dynamodb.QueryInput{
		TableName:                 &s.table,
		KeyConditionExpression:    aws.String("pk = :pk"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": &types.AttributeValueMemberS{Value: pk(typ)}},
		ConsistentRead:            aws.Bool(true),
	})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("list leases of type %s: %w", typ, err)
		}
		ls, err := decodeAll(page.Items)
		if err != nil {
			return nil, err
		}
		out = append(out, ls...)
	}
	return out, nil
}

// All returns every lease in the table (a paginated scan; used by the sweep and the status view).
func (s *Store) All(ctx context.Context) ([]Lease, error) {
	var out []Lease
	p := dynamodb.NewScanPaginator(s.db, &dynamodb.ScanInput{
		TableName:                 &s.table,
		FilterExpression:          aws.String("begins_with(pk, :p)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":p": &types.AttributeValueMemberS{Value: leasePrefix}},
		ConsistentRead:            aws.Bool(true),
	})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("scan leases: %w", err)
		}
		ls, err := decodeAll(page.Items)
		if err != nil {
			return nil, err
		}
		out = append(out, ls...)
	}
	return out, nil
}

func decodeAll(items []map[string]types.AttributeValue) ([]Lease, error) {
	out := make([]Lease, 0, len(items))
	for _, it := range items {
		var l Lease
		if err := attributevalue.UnmarshalMap(it, &l); err != nil {
			return nil, fmt.Errorf("decode lease %v: %w", it["pk"], err)
		}
		l = AsRead(l)
		if l.Type == "" { // tolerate items written by hand: recover the key from pk/sk
			if s, ok := it["pk"].(*types.AttributeValueMemberS); ok {
				l.Type = strings.TrimPrefix(s.Value, leasePrefix)
			}
		}
		out = append(out, l)
	}
	return out, nil
}
