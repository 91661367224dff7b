// Package waitroom keeps the parked waiting groups of first-free types: when the starter finds every
// lane of a type taken, it parks the head of the waiting group it was binding from (the message stays
// in flight, so FIFO holds the group behind it) and records it here, one item per group. A release
// that frees a lane takes the group whose head was submitted earliest and makes that message visible,
// so the starter binds it to the freed lane at once and a type's jobs start in (nearly) their global
// FIFO order across its waiting groups. Nothing polls: a parked head is woken by a release, and looks
// again by itself only after its park period (ParkPeriod: ParkFor at first, longer each time it
// parks again, at most MaxParkFor), as a safety net.
//
// Items live in the limiter's table: pk WAIT#{type}, sk {waiting group id}. A group has at most one
// head in flight, so a group parked again replaces its item.
package waitroom

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// ParkFor is how long a head parked on its first delivery stays invisible if no release wakes it.
// A head that looks again by itself and parks again parks longer (ParkPeriod).
const ParkFor = 60 * time.Second

// MaxParkFor caps a head's park: the bound on a missed wake-up that nothing else catches (the
// sweep wakes parked groups of a type with free lanes every run, which covers a raised limit and
// a failed wake-up). Each look costs a write under the type's WAIT# key and two queries of its
// LEASE# key, whose partition serves 1,000 write units a second: 100,000 parked groups looking
// again every ParkFor would ask 1,700 a second of it for the safety net alone, and every
// MaxParkFor about 420.
const MaxParkFor = 4 * time.Minute

// ParkPeriod is how long a head parks on its delivery with the given ApproximateReceiveCount:
// ParkFor on the first, twice as long on each later one (a head parks again on each delivery that
// finds nothing changed, or that a release woke and another binder beat), at most MaxParkFor; past
// the first, less up to a quarter of it chosen by jitter (a random number in [0, n)), so that the
// looks of groups that parked together spread out. Whole seconds, as SQS takes them.
func ParkPeriod(receives int, jitter func(n int64) int64) time.Duration {
	if receives <= 1 {
		return ParkFor
	}
	p := MaxParkFor
	if receives-1 < 8 && ParkFor<<(receives-1) < MaxParkFor {
		p = ParkFor << (receives - 1)
	}
	secs := int64(p / time.Second)
	return time.Duration(secs-jitter(secs/4+1)) * time.Second
}

// Waiter is a parked waiting group: the head message that parked it.
type Waiter struct {
	Type string
	// Group is the waiting group's MessageGroupId.
	Group         string
	MessageID     string
	ReceiptHandle string
	// Receives is the parking delivery's ApproximateReceiveCount: a record of a later delivery of the
	// same message is not an earlier delivery's to remove (Unpark).
	Receives int
	JobID    string
	// Key is the head job's concurrency key: a key's jobs all wait in its one group.
	Key string
	// AtKeyCap says the head waits for its key to fall under its cap, not for a lane.
	AtKeyCap bool
	// AtPool names the pool whose cap the head waits for (lanes may be free): a release in the
	// pool, of any member type, wakes it.
	AtPool string
	// Priority is the head's priority (job.EffectivePriority): a release serves higher first.
	Priority int
	// Paused says the head parked because its type was paused: it waits for a resume, not a lane.
	Paused bool
	// SubmittedAt is when the head job was submitted: of groups without keys, a release wakes the
	// one whose head is oldest.
	SubmittedAt time.Time
	// ParkedAt is when the head parked: the key that has waited longest for service.
	ParkedAt time.Time
	// Until is when the head looks again by itself if no release wakes it (zero: ParkFor after
	// ParkedAt). Park writes it; List leaves it zero.
	Until time.Time
}

func pk(typ string) string { return "WAIT#" + typ }

type dynamoAPI interface {
	GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(context.Context, *dynamodb.PutItemInput, ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	DeleteItem(context.Context, *dynamodb.DeleteItemInput, ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
	Query(context.Context, *dynamodb.QueryInput, ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
}

// Store keeps parked waiting groups in one DynamoDB table.
type Store struct {
	db    dynamoAPI
	table string
}

// NewStore returns a wait room on table.
func NewStore(db dynamoAPI, table string) *Store { return &Store{db: db, table: table} }

func (s *Store) key(typ, group string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: pk(typ)},
		"sk": &types.AttributeValueMemberS{Value: group},
	}
}

// ErrGroupParked is returned by Park when another message of the group is parked and not yet due to
// look again: on AWS a FIFO group has one message in flight, so this happens only on a queue that
// hands out two messages of one group at once (moto does, docs/emulators.md).
var ErrGroupParked = errors.New("another message of the waiting group is parked")

// Park records a parked waiting group, replacing its earlier record unless that is another
// message's, not yet due to look again (ErrGroupParked): replacing it would leave that message with
// no record, and no release would wake it.
func (s *Store) Park(ctx context.Context, w Waiter) error {
	_, err := s.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: &s.table, Item: s.item(w),
		// A record without untilMs was parked for ParkFor.
		ConditionExpression: aws.String("attribute_not_exists(pk) OR messageId = :m OR untilMs < :now OR (attribute_not_exists(untilMs) AND parkedAtMs < :due)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":m":   &types.AttributeValueMemberS{Value: w.MessageID},
			":now": &types.AttributeValueMemberN{Value: strconv.FormatInt(w.ParkedAt.UnixMilli(), 10)},
			":due": &types.AttributeValueMemberN{Value: strconv.FormatInt(w.ParkedAt.Add(-ParkFor).UnixMilli(), 10)},
		},
	})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return fmt.Errorf("park waiting group %s at job %s: %w", w.Group, w.JobID, ErrGroupParked)
	}
	if err != nil {
		return fmt.Errorf("park waiting group %s at job %s: %w", w.Group, w.JobID, err)
	}
	return nil
}

// Restore puts back record w (as List read it) that a Claim took, when the wake-up it was taken for
// failed to make its head visible: the head is still parked, and its record is the only way a
// release or the sweep wakes it before its park ends. A group that parked again since keeps its
// new record. (Its untilMs is ParkFor after its park: only another message of the group, which FIFO
// does not hand out while the head is in flight, reads it.)
func (s *Store) Restore(ctx context.Context, w Waiter) error {
	_, err := s.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: &s.table, Item: s.item(w), ConditionExpression: aws.String("attribute_not_exists(pk)"),
	})
	var ccf *types.ConditionalCheckFailedException
	if err != nil && !errors.As(err, &ccf) {
		return fmt.Errorf("restore parked record of group %s at job %s: %w", w.Group, w.JobID, err)
	}
	return nil
}

// item is record w as stored.
func (s *Store) item(w Waiter) map[string]types.AttributeValue {
	until := w.Until
	if until.IsZero() {
		until = w.ParkedAt.Add(ParkFor)
	}
	item := s.key(w.Type, w.Group)
	item["parkedAtMs"] = &types.AttributeValueMemberN{Value: strconv.FormatInt(w.ParkedAt.UnixMilli(), 10)}
	item["untilMs"] = &types.AttributeValueMemberN{Value: strconv.FormatInt(until.UnixMilli(), 10)}
	item["messageId"] = &types.AttributeValueMemberS{Value: w.MessageID}
	item["receiptHandle"] = &types.AttributeValueMemberS{Value: w.ReceiptHandle}
	item["jobId"] = &types.AttributeValueMemberS{Value: w.JobID}
	if w.Receives > 0 {
		item["receives"] = &types.AttributeValueMemberN{Value: strconv.Itoa(w.Receives)}
	}
	item["submittedAt"] = &types.AttributeValueMemberS{Value: w.SubmittedAt.UTC().Format(time.RFC3339Nano)}
	item["parkedAt"] = &types.AttributeValueMemberS{Value: w.ParkedAt.UTC().Format(time.RFC3339Nano)}
	if w.Key != "" {
		item["key"] = &types.AttributeValueMemberS{Value: w.Key}
	}
	if w.AtKeyCap {
		item["atKeyCap"] = &types.AttributeValueMemberBOOL{Value: true}
	}
	if w.AtPool != "" {
		item["atPool"] = &types.AttributeValueMemberS{Value: w.AtPool}
	}
	if w.Priority != 0 {
		item["priority"] = &types.AttributeValueMemberN{Value: strconv.Itoa(w.Priority)}
	}
	if w.Paused {
		item["paused"] = &types.AttributeValueMemberBOOL{Value: true}
	}
	return item
}

// Unpark removes a group's record if it was written by w's delivery of its message or an earlier one
// (w found a lane after all, or binds on a later receive); a record of another head of the group, or
// of a later delivery of w's message, is left alone. A later delivery exists when a release woke w's
// message while w's delivery still looked for a lane: that delivery may park again, and its record is
// the only way a release wakes it (were it removed, the group would wait the whole park period). It
// reads the record first: most heads that bind were woken by a release, which took their record
// already, and a read costs a fifth of the failed conditional delete it saves (a write unit is billed
// for a failed condition too).
func (s *Store) Unpark(ctx context.Context, w Waiter) error {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &s.table, Key: s.key(w.Type, w.Group), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return fmt.Errorf("read parked record of group %s: %w", w.Group, err)
	}
	if out.Item == nil {
		return nil
	}
	if r := decode(w.Type, out.Item); !r.earlierOf(w) {
		return nil
	}
	_, err = s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName: &s.table, Key: s.key(w.Type, w.Group),
		ConditionExpression: aws.String("messageId = :m AND (receiptHandle = :h OR attribute_not_exists(receives) OR receives < :r)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":m": &types.AttributeValueMemberS{Value: w.MessageID},
			":h": &types.AttributeValueMemberS{Value: w.ReceiptHandle},
			":r": &types.AttributeValueMemberN{Value: strconv.Itoa(w.Receives)},
		},
	})
	var ccf *types.ConditionalCheckFailedException
	if err != nil && !errors.As(err, &ccf) {
		return fmt.Errorf("unpark waiting group %s at job %s: %w", w.Group, w.JobID, err)
	}
	return nil
}

// earlierOf reports whether record r was parked by w's delivery of w's message or an earlier one. A
// record that does not say its delivery's receive count was written before records did: it counts
// as earlier.
func (r Waiter) earlierOf(w Waiter) bool {
	if r.MessageID != w.MessageID {
		return false
	}
	return r.ReceiptHandle == w.ReceiptHandle || r.Receives == 0 || r.Receives < w.Receives
}

// List returns a type's parked groups, in no particular order.
func (s *Store) List(ctx context.Context, typ string) ([]Waiter, error) {
	var out []Waiter
	p := dynamodb.NewQueryPaginator(s.db, &dynamodb.QueryInput{
		TableName:                 &s.table,
		KeyConditionExpression:    aws.String("pk = :pk"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": &types.AttributeValueMemberS{Value: pk(typ)}},
		ConsistentRead:            aws.Bool(true),
	})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("read parked groups of type %s: %w", typ, err)
		}
		for _, it := range page.Items {
			out = append(out, decode(typ, it))
		}
	}
	return out, nil
}

// Claim removes w's record if it still holds w's head (the delete is conditional on the receipt
// handle read), and reports whether it did: of two concurrent claimers of one record, one wins.
func (s *Store) Claim(ctx context.Context, w Waiter) (bool, error) {
	_, err := s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName: &s.table, Key: s.key(w.Type, w.Group),
		ConditionExpression:       aws.String("receiptHandle = :h"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":h": &types.AttributeValueMemberS{Value: w.ReceiptHandle}},
	})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return false, nil // taken by another release, or parked again
	}
	if err != nil {
		return false, fmt.Errorf("take parked group %s of type %s: %w", w.Group, w.Type, err)
	}
	return true, nil
}

// decode reads an item. Records written before a type had several waiting groups were keyed by
// message id and carry no submittedAt: they decode with zero times, so they are taken first, and
// their stale receipt handle is skipped by the release that takes them; nothing of them is left.
func decode(typ string, it map[string]types.AttributeValue) Waiter {
	str := func(k string) string {
		if v, ok := it[k].(*types.AttributeValueMemberS); ok {
			return v.Value
		}
		return ""
	}
	w := Waiter{Type: typ, Group: str("sk"), MessageID: str("messageId"), ReceiptHandle: str("receiptHandle"), JobID: str("jobId"), Key: str("key"), AtPool: str("atPool")}
	if n, ok := it["receives"].(*types.AttributeValueMemberN); ok {
		w.Receives, _ = strconv.Atoi(n.Value)
	}
	if b, ok := it["atKeyCap"].(*types.AttributeValueMemberBOOL); ok {
		w.AtKeyCap = b.Value
	}
	if n, ok := it["priority"].(*types.AttributeValueMemberN); ok {
		w.Priority, _ = strconv.Atoi(n.Value)
	}
	if b, ok := it["paused"].(*types.AttributeValueMemberBOOL); ok {
		w.Paused = b.Value
	}
	w.SubmittedAt, _ = time.Parse(time.RFC3339Nano, str("submittedAt"))
	w.ParkedAt, _ = time.Parse(time.RFC3339Nano, str("parkedAt"))
	return w
}
