// Package occupancy keeps, for each lane of a type, how many jobs are queued or running in it, so the
// router can send a job to the least-loaded lane.
//
// The counts live in the limiter's table next to the leases:
//
//	pk OCC#{type}  sk LANE#{lane, 6 digits}          n: jobs in the lane
//	pk OCC#{type}  sk JOB#{redrive}#{job id}         lane, at; left and expiresAt once it left
//
// Every change of a count is one transaction with the job's marker, conditional on the state the
// marker leaves: a job joins a lane once (the marker must not exist), leaves it once (the marker must
// still be in that lane and not have left) and moves once (same). A retried send, start or release
// finds the marker already changed, its transaction is cancelled, and the count is untouched: no
// double increment, no double decrement. A transaction that DynamoDB cancels because it met another
// one on the same item (TransactionConflict) changed nothing and is sent again (internal/txretry).
//
// A marker that left stays as a tombstone for DedupWindow, because a router that routes the job again
// within SQS's deduplication window sends a copy that SQS drops: counting it would leave the lane one
// job too heavy for good. After the window the tombstone counts for nothing and DynamoDB's TTL removes
// it.
//
// Cost per job: a join and a leave are two-item transactions (4 write units each for items under
// 1 KB), 8 write units in all; a router batch reads each of its types' counts once, with one query
// (strongly consistent, 1 read unit per 4 KB: about 80 lanes per read unit).
package occupancy

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sfnlimit/sfnlimit/internal/job"
	"github.com/sfnlimit/sfnlimit/internal/txretry"
)

// DedupWindow is SQS FIFO's deduplication interval: a copy of a job sent again within it is dropped.
const DedupWindow = 5 * time.Minute

// TombstoneTTL is how long a left marker is kept before DynamoDB's TTL may remove it (the TTL
// attribute is expiresAt, template.yaml's LimiterTable TimeToLiveSpecification).
const TombstoneTTL = 24 * time.Hour

// Job names one job run: its type, id and redrive generation (a redriven job counts afresh).
type Job struct {
	Type    string
	ID      string
	Redrive int
}

// JobOf names a routed job's run.
func JobOf(j job.Job) Job { return Job{Type: j.Type, ID: j.ID, Redrive: j.Redrive} }

func (j Job) String() string {
	if j.Redrive > 0 {
		return fmt.Sprintf("%s/%s (redrive %d)", j.Type, j.ID, j.Redrive)
	}
	return j.Type + "/" + j.ID
}

const prefix = "OCC#"

func pk(typ string) string   { return prefix + typ }
func laneSK(lane int) string { return fmt.Sprintf("LANE#%06d", lane) }
func jobSK(j Job) string     { return "JOB#" + strconv.Itoa(j.Redrive) + "#" + j.ID }

func key(p, s string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: p},
		"sk": &types.AttributeValueMemberS{Value: s},
	}
}

func num(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}

// dynamoAPI is the part of the DynamoDB client the store uses.
type dynamoAPI interface {
	GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	Query(context.Context, *dynamodb.QueryInput, ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	TransactWriteItems(context.Context, *dynamodb.TransactWriteItemsInput, ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
}

// Store keeps lane occupancy in one DynamoDB table.
type Store struct {
	db    dynamoAPI
	table string
	now   func() time.Time
}

// NewStore returns an occupancy store on table.
func NewStore(db dynamoAPI, table string) *Store { return &Store{db: db, table: table, now: time.Now} }

// WithClock returns a copy of s that reads the time from now (tests).
func (s *Store) WithClock(now func() time.Time) *Store {
	c := *s
	c.now = now
	return &c
}

// Counts returns the jobs queued or running in lanes 1..limit of typ: counts[i] is lane i+1. It is
// one strongly consistent query over the type's lane counters (paginated past 1 MB, which takes
// about 20,000 lanes); lanes never counted are 0.
func (s *Store) Counts(ctx context.Context, typ string, limit int) ([]int, error) {
	if limit < 1 {
		return nil, fmt.Errorf("count lanes of type %s: limit %d has no lane", typ, limit)
	}
	counts := make([]int, limit)
	p := dynamodb.NewQueryPaginator(s.db, &dynamodb.QueryInput{
		TableName:              &s.table,
		KeyConditionExpression: aws.String("pk = :pk AND sk BETWEEN :first AND :last"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":pk":    &types.AttributeValueMemberS{Value: pk(typ)},
			":first": &types.AttributeValueMemberS{Value: laneSK(1)},
			":last":  &types.AttributeValueMemberS{Value: laneSK(limit)},
		},
		ProjectionExpression: aws.String("sk, n"),
		ConsistentRead:       aws.Bool(true),
	})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("count lanes of type %s: %w", typ, err)
		}
		for _, it := range page.Items {
			sk, _ := it["sk"].(*types.AttributeValueMemberS)
			n, _ := it["n"].(*types.AttributeValueMemberN)
			if sk == nil || n == nil {
				continue
			}
			lane, err1 := strconv.Atoi(sk.Value[len("LANE#"):])
			v, err2 := strconv.Atoi(n.Value)
			if err1 != nil || err2 != nil || lane < 1 || lane > limit {
				return nil, fmt.Errorf("count lanes of type %s: bad counter item %s n=%s", typ, sk.Value, n.Value)
			}
			counts[lane-1] = max(v, 0)
		}
	}
	return counts, nil
}

// Joined is what Join did.
type Joined struct {
	// Lane is where the job is: the lane asked for, or the lane an earlier join of the same job chose
	// (a router that routes a job again must send it there, where SQS deduplicates it).
	Lane int
	// Counted says the job is counted in Lane, so its leaving must uncount it. It is false when the
	// job already left Lane within DedupWindow: a copy sent now is dropped by SQS, so it is not
	// counted.
	Counted bool
	// Fresh says this call counted the job (the count of Lane went up by one).
	Fresh bool
}

// Join counts j in lane, once: if j joined before, nothing changes and the earlier lane is returned.
func (s *Store) Join(ctx context.Context, j Job, lane int) (Joined, error) {
	return s.join(ctx, j, lane, false)
}

// ErrLaneBusy means JoinEmpty found the lane with a job counted in it.
var ErrLaneBusy = errors.New("lane has a job")

// JoinEmpty counts j in lane only if no job is counted there: the first-free strategy's way to bind
// a waiting job to a free lane, so two binders never take one lane. If j joined before, nothing
// changes and the earlier lane is returned; if the lane is not empty it returns ErrLaneBusy.
func (s *Store) JoinEmpty(ctx context.Context, j Job, lane int) (Joined, error) {
	return s.join(ctx, j, lane, true)
}

// join is Join, or JoinEmpty when onlyEmpty: the marker's put and the count's update in one
// transaction, the put conditional on the marker, the update (onlyEmpty) on the count being 0.
func (s *Store) join(ctx context.Context, j Job, lane int, onlyEmpty bool) (Joined, error) {
	if lane < 1 {
		return Joined{}, fmt.Errorf("count job %s in lane %d: no such lane", j, lane)
	}
	for range 2 {
		now := s.now().UTC()
		upd := s.add(j.Type, lane, 1, now)
		if onlyEmpty {
			upd.ConditionExpression = aws.String("attribute_not_exists(n) OR n < :one")
			upd.ExpressionAttributeValues[":one"] = num(1)
		}
		_, err := s.transact(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
			{Put: &types.Put{
				TableName: &s.table,
				Item: map[string]types.AttributeValue{
					"pk":   &types.AttributeValueMemberS{Value: pk(j.Type)},
					"sk":   &types.AttributeValueMemberS{Value: jobSK(j)},
					"lane": num(int64(lane)),
					"at":   &types.AttributeValueMemberS{Value: now.Format(time.RFC3339Nano)},
				},
				// A tombstone older than the deduplication window protects nothing: a copy sent now
				// is delivered, so it counts.
				ConditionExpression:       aws.String("attribute_not_exists(pk) OR leftAt < :stale"),
				ExpressionAttributeValues: map[string]types.AttributeValue{":stale": num(now.Add(-DedupWindow).Unix())},
			}},
			{Update: upd},
		}})
		switch {
		case err == nil:
			return Joined{Lane: lane, Counted: true, Fresh: true}, nil
		case cancelledBy(err, 0):
			// Joined before (whether or not the lane is busy too): answer with the earlier lane.
		case cancelledBy(err, 1):
			return Joined{}, fmt.Errorf("count job %s in lane %d: %w", j, lane, ErrLaneBusy)
		default:
			return Joined{}, fmt.Errorf("count job %s in lane %d: %w", j, lane, err)
		}
		m, err := s.marker(ctx, j)
		if err != nil {
			return Joined{}, err
		}
		if m != nil {
			return Joined{Lane: m.lane, Counted: !m.left}, nil
		}
		// The marker went between the transaction and the read (its TTL, or an operator): again.
	}
	return Joined{}, fmt.Errorf("count job %s in lane %d: its marker changed twice during the join", j, lane)
}

// Leave uncounts j from lane, once: it returns false, changing nothing, when j is not counted there
// (it never joined, left already, or moved to another lane).
func (s *Store) Leave(ctx context.Context, j Job, lane int) (bool, error) {
	now := s.now().UTC()
	_, err := s.transact(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Update: &types.Update{
			TableName:           &s.table,
			Key:                 key(pk(j.Type), jobSK(j)),
			UpdateExpression:    aws.String("SET leftAt = :now, expiresAt = :exp"),
			ConditionExpression: aws.String("attribute_exists(pk) AND lane = :lane AND attribute_not_exists(leftAt)"),
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":now": num(now.Unix()), ":exp": num(now.Add(TombstoneTTL).Unix()), ":lane": num(int64(lane)),
			},
		}},
		{Update: s.add(j.Type, lane, -1, now)},
	}})
	if err == nil {
		return true, nil
	}
	if cancelledBy(err, 0) {
		return false, nil
	}
	return false, fmt.Errorf("uncount job %s from lane %d: %w", j, lane, err)
}

// Cancel takes back a join whose job never reached its lane (the router's send failed): the marker
// goes with its count, leaving no tombstone, so the job's next routing counts it afresh. It returns
// false, changing nothing, when j is not counted in lane.
func (s *Store) Cancel(ctx context.Context, j Job, lane int) (bool, error) {
	now := s.now().UTC()
	_, err := s.transact(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Delete: &types.Delete{
			TableName:                 &s.table,
			Key:                       key(pk(j.Type), jobSK(j)),
			ConditionExpression:       aws.String("attribute_exists(pk) AND lane = :lane AND attribute_not_exists(leftAt)"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":lane": num(int64(lane))},
		}},
		{Update: s.add(j.Type, lane, -1, now)},
	}})
	if err == nil {
		return true, nil
	}
	if cancelledBy(err, 0) {
		return false, nil
	}
	return false, fmt.Errorf("cancel the count of job %s in lane %d: %w", j, lane, err)
}

// Move counts j in lane to instead of lane from, once: it returns false, changing nothing, when j is
// not counted in from.
func (s *Store) Move(ctx context.Context, j Job, from, to int) (bool, error) {
	if to < 1 {
		return false, fmt.Errorf("move job %s to lane %d: no such lane", j, to)
	}
	if from == to {
		return true, nil
	}
	now := s.now().UTC()
	_, err := s.transact(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Update: &types.Update{
			TableName:           &s.table,
			Key:                 key(pk(j.Type), jobSK(j)),
			UpdateExpression:    aws.String("SET lane = :to"),
			ConditionExpression: aws.String("attribute_exists(pk) AND lane = :from AND attribute_not_exists(leftAt)"),
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":from": num(int64(from)), ":to": num(int64(to)),
			},
		}},
		{Update: s.add(j.Type, from, -1, now)},
		{Update: s.add(j.Type, to, 1, now)},
	}})
	if err == nil {
		return true, nil
	}
	if cancelledBy(err, 0) {
		return false, nil
	}
	return false, fmt.Errorf("move job %s from lane %d to %d: %w", j, from, to, err)
}

// Marker is where a job is counted.
type Marker struct {
	Lane int
	// Left is true once the job left its lane (the marker is a tombstone).
	Left bool
}

// Get returns where j is counted, or nil when it never joined (or its tombstone expired).
func (s *Store) Get(ctx context.Context, j Job) (*Marker, error) {
	m, err := s.marker(ctx, j)
	if err != nil || m == nil {
		return nil, err
	}
	return &Marker{Lane: m.lane, Left: m.left}, nil
}

type marker struct {
	lane int
	left bool
}

func (s *Store) marker(ctx context.Context, j Job) (*marker, error) {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: &s.table, Key: key(pk(j.Type), jobSK(j)), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return nil, fmt.Errorf("read lane count marker of job %s: %w", j, err)
	}
	if len(out.Item) == 0 {
		return nil, nil
	}
	n, ok := out.Item["lane"].(*types.AttributeValueMemberN)
	lane, err := 0, errors.New("no lane")
	if ok {
		lane, err = strconv.Atoi(n.Value)
	}
	if err != nil {
		return nil, fmt.Errorf("read lane count marker of job %s: bad lane: %w", j, err)
	}
	_, left := out.Item["leftAt"]
	return &marker{lane: lane, left: left}, nil
}

// transact applies one transaction, sending it again while DynamoDB cancels it for a conflict with
// another transaction (every join, leave, move and cancel of a lane's jobs updates the lane's
// counter, so jobs of one lane conflict), within txretry's bounds. A failed condition is returned at
// once.
func (s *Store) transact(ctx context.Context, in *dynamodb.TransactWriteItemsInput) (*dynamodb.TransactWriteItemsOutput, error) {
	return txretry.Write(ctx, s.db, in)
}

// add is the counter update of one lane by delta.
func (s *Store) add(typ string, lane, delta int, now time.Time) *types.Update {
	return &types.Update{
		TableName:        &s.table,
		Key:              key(pk(typ), laneSK(lane)),
		UpdateExpression: aws.String("ADD n :d SET updatedAt = :now"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":d": num(int64(delta)), ":now": &types.AttributeValueMemberS{Value: now.Format(time.RFC3339Nano)},
		},
	}
}

// cancelledBy reports whether err is a transaction cancelled because item i's condition failed.
func cancelledBy(err error, i int) bool {
	var tc *types.TransactionCanceledException
	if !errors.As(err, &tc) || i >= len(tc.CancellationReasons) {
		return false
	}
	return aws.ToString(tc.CancellationReasons[i].Code) == "ConditionalCheckFailed"
}
