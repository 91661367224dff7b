// Package waitroom keeps the jobs of first-free types that found every lane taken: the starter
// parks such a job's message (it stays in flight, blocking its type's waiting group) and leaves its
// receipt handle here; the release that frees a lane takes the oldest parked job and makes its
// message visible, so the starter binds it to the freed lane at once. Nothing polls: a parked job
// is woken by a release, and looks again by itself only after ParkFor, as a safety net.
//
// Items live in the limiter's table: pk WAIT#{type}, sk {message id}; a message parked again
// replaces its item (its receipt handle changed). On AWS a type has at most one parked message, the
// head of its waiting group; an emulator that hands out several messages of a group may park more.
package waitroom

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// ParkFor is how long a parked message stays invisible if no release wakes it: the bound on a
// missed wake-up (a limit raised, a lane freed by a path that does not wake), at the cost of one
// receive and one count query per type per ParkFor while all its lanes are busy.
const ParkFor = 60 * time.Second

// Waiter is a parked message.
type Waiter struct {
	Type          string
	MessageID     string
	ReceiptHandle string
	JobID         string
	ParkedAt      time.Time
}

func (w Waiter) sk() string { return w.MessageID }

func pk(typ string) string { return "WAIT#" + typ }

type dynamoAPI interface {
	PutItem(context.Context, *dynamodb.PutItemInput, ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	DeleteItem(context.Context, *dynamodb.DeleteItemInput, ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
	Query(context.Context, *dynamodb.QueryInput, ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
}

// Store keeps parked messages in one DynamoDB table.
type Store struct {
	db    dynamoAPI
	table string
}

// NewStore returns a wait room on table.
func NewStore(db dynamoAPI, table string) *Store { return &Store{db: db, table: table} }

func (s *Store) key(w Waiter) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: pk(w.Type)},
		"sk": &types.AttributeValueMemberS{Value: w.sk()},
	}
}

// Park records a parked message.
func (s *Store) Park(ctx context.Context, w Waiter) error {
	item := s.key(w)
	item["receiptHandle"] = &types.AttributeValueMemberS{Value: w.ReceiptHandle}
	item["jobId"] = &types.AttributeValueMemberS{Value: w.JobID}
	item["parkedAt"] = &types.AttributeValueMemberS{Value: w.ParkedAt.UTC().Format(time.RFC3339Nano)}
	if _, err := s.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &s.table, Item: item}); err != nil {
		return fmt.Errorf("park job %s of type %s: %w", w.JobID, w.Type, err)
	}
	return nil
}

// Unpark removes a parked message's record (it found a lane after all).
func (s *Store) Unpark(ctx context.Context, w Waiter) error {
	if _, err := s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &s.table, Key: s.key(w)}); err != nil {
		return fmt.Errorf("unpark job %s of type %s: %w", w.JobID, w.Type, err)
	}
	return nil
}

// Take removes and returns the oldest parked message of typ, or nil when none is parked. Of two
// concurrent takers each gets a different message (the delete is conditional on the handle read).
func (s *Store) Take(ctx context.Context, typ string) (*Waiter, error) {
	for range 3 {
		var oldest *Waiter
		p := dynamodb.NewQueryPaginator(s.db, &dynamodb.QueryInput{
			TableName:                 &s.table,
			KeyConditionExpression:    aws.String("pk = :pk"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":pk": &types.AttributeValueMemberS{Value: pk(typ)}},
			ConsistentRead:            aws.Bool(true),
		})
		for p.HasMorePages() {
			page, err := p.NextPage(ctx)
			if err != nil {
				return nil, fmt.Errorf("read parked jobs of type %s: %w", typ, err)
			}
			for _, it := range page.Items {
				w, err := decode(typ, it)
				if err != nil {
					return nil, err
				}
				if oldest == nil || w.ParkedAt.Before(oldest.ParkedAt) {
					oldest = &w
				}
			}
		}
		if oldest == nil {
			return nil, nil
		}
		_, err := s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{
			TableName: &s.table, Key: s.key(*oldest),
			ConditionExpression:       aws.String("receiptHandle = :h"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":h": &types.AttributeValueMemberS{Value: oldest.ReceiptHandle}},
		})
		var ccf *types.ConditionalCheckFailedException
		if errors.As(err, &ccf) {
			continue // taken by another release, or parked again: look again
		}
		if err != nil {
			return nil, fmt.Errorf("take parked job %s of type %s: %w", oldest.JobID, typ, err)
		}
		return oldest, nil
	}
	return nil, fmt.Errorf("take a parked job of type %s: taken by others three times", typ)
}

func decode(typ string, it map[string]types.AttributeValue) (Waiter, error) {
	str := func(k string) string {
		if v, ok := it[k].(*types.AttributeValueMemberS); ok {
			return v.Value
		}
		return ""
	}
	w := Waiter{Type: typ, MessageID: str("sk"), ReceiptHandle: str("receiptHandle"), JobID: str("jobId")}
	t, err := time.Parse(time.RFC3339Nano, str("parkedAt"))
	if err != nil || w.MessageID == "" {
		return Waiter{}, fmt.Errorf("parked job item %q of type %s is malformed: %v", w.MessageID, typ, err)
	}
	w.ParkedAt = t
	return w, nil
}
