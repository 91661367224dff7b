// Package unlisted bounds the job types that run on DEFAULT_LIMIT without being listed (in
// TYPE_LIMITS or a live config item). Each may take DEFAULT_LIMIT lanes, so a producer inventing
// types could otherwise hold any number of lanes in all and push the lanes queue past SQS FIFO's
// in-flight quota. The router routes a job of an unlisted type only once its type holds one of
// Limit slots, and refuses it (job.ReasonUnlistedTypes) when every slot is held by another type.
//
// Items live in the limiter's table: pk "UNLISTED", sk "SLOT#{n}" for n in 1..Limit, with the
// type holding the slot and expiresAt (Unix seconds, the table's TTL). A slot is taken only when
// it has no item or its item has expired (a conditional write), and is renewed only by its own
// type, so at no moment do more than Limit types hold an unexpired slot, however many routers
// race. A type routes only while its slot stays unexpired for at least Retention more (the lanes
// queue's retention): every message of an unlisted type in the lanes queue was routed under a
// slot still held, so at most Limit unlisted types hold lanes at once, Limit x DEFAULT_LIMIT lanes
// in all. Two routers racing for the same new type may each take a slot for it: the type then
// holds two until they expire, which only lowers the number of types served.
//
// The slots are shared by every producer, and a slot lasts weeks after its type's last job, so
// one producer inventing types could hold them all and refuse everyone else's unlisted types. A
// sender (the principal of the job's SQS SenderId) takes a new slot only while it holds fewer
// than Share of them: at least half the slots stay for other senders. Routers racing for one
// sender's new types may each take one, so a sender may briefly hold Share plus one per racing
// router; the bound on all unlisted types (Limit) is exact.
package unlisted

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Retention is the lanes queue's message retention (template.yaml, LanesQueue): the longest a
// routed job's message stays in the lanes queue.
const Retention = 14 * 24 * time.Hour

// HoldFor is how long a slot lasts after its type's last renewal; a type is renewed, once a day
// per container, when its slot would last less than Retention more.
const HoldFor = Retention + 24*time.Hour

// ErrFull means every slot is held by another type, or the sender holds its share of them.
var ErrFull = errors.New("every unlisted type slot is held")

// Share is how many slots one sender may hold: half of limit, at least one.
func Share(limit int) int { return max(1, limit/2) }

type dynamoAPI interface {
	PutItem(context.Context, *dynamodb.PutItemInput, ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	Query(context.Context, *dynamodb.QueryInput, ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
}

// Slots are the unlisted types' slots in one table. Safe for concurrent use.
type Slots struct {
	DB    dynamoAPI
	Table string
	// Limit is how many unlisted types may hold lanes at once (UNLISTED_TYPES_LIMIT).
	Limit int
	Now   func() time.Time // time.Now when nil

	mu      sync.Mutex
	expires map[string]time.Time // this container's types, until when their slots last
}

const pk = "UNLISTED"

// maxRounds bounds how often Take reads the slots again after losing a race for one.
const maxRounds = 3

// Take makes sure typ holds a slot lasting at least Retention from now: from this container's
// memory, or by renewing its slot or taking a free one for sender (a principal). ErrFull: every
// slot is another type's, or sender holds its Share of them.
func (s *Slots) Take(ctx context.Context, typ, sender string) error {
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	s.mu.Lock()
	exp, ok := s.expires[typ]
	s.mu.Unlock()
	if ok && exp.Sub(now()) >= Retention {
		return nil
	}
	for range maxRounds {
		at := now()
		slots, err := s.read(ctx)
		if err != nil {
			return err
		}
		// Its own slot first (renewed), else the free ones in order.
		var try []int
		own, mine := false, 0
		for n := 1; n <= s.Limit; n++ {
			x, held := slots[n]
			switch {
			case held && x.typ == typ && x.expires.After(at):
				try, own = append([]int{n}, try...), true
			case !held || !x.expires.After(at):
				try = append(try, n)
			case x.sender == sender:
				mine++
			}
		}
		if len(try) == 0 {
			return fmt.Errorf("%w: other types hold all %d", ErrFull, s.Limit)
		}
		if !own && mine >= Share(s.Limit) {
			return fmt.Errorf("%w: this sender's other types hold %d of %d, its share", ErrFull, mine, s.Limit)
		}
		for _, n := range try {
			won, err := s.put(ctx, n, typ, sender, at)
			if err != nil {
				return err
			}
			if won {
				s.mu.Lock()
				if s.expires == nil {
					s.expires = map[string]time.Time{}
				}
				s.expires[typ] = at.Add(HoldFor)
				s.mu.Unlock()
				return nil
			}
		}
	}
	return fmt.Errorf("take an unlisted type slot for %s: lost %d races in a row", typ, maxRounds)
}

type slot struct {
	typ, sender string
	expires     time.Time
}

// read returns the slots' items by number (strongly consistent).
func (s *Slots) read(ctx context.Context) (map[int]slot, error) {
	out := map[int]slot{}
	in := &dynamodb.QueryInput{
		TableName: aws.String(s.Table), ConsistentRead: aws.Bool(true),
		KeyConditionExpression:    aws.String("pk = :pk"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": &types.AttributeValueMemberS{Value: pk}},
	}
	for {
		page, err := s.DB.Query(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("read the unlisted type slots: %w", err)
		}
		for _, it := range page.Items {
			sk, _ := it["sk"].(*types.AttributeValueMemberS)
			typ, _ := it["type"].(*types.AttributeValueMemberS)
			exp, _ := it["expiresAt"].(*types.AttributeValueMemberN)
			if sk == nil || typ == nil || exp == nil || len(sk.Value) < 6 {
				continue
			}
			n, err1 := strconv.Atoi(sk.Value[len("SLOT#"):])
			e, err2 := strconv.ParseInt(exp.Value, 10, 64)
			if err1 != nil || err2 != nil {
				continue
			}
			x := slot{typ: typ.Value, expires: time.Unix(e, 0)}
			if snd, ok := it["sender"].(*types.AttributeValueMemberS); ok {
				x.sender = snd.Value
			}
			out[n] = x
		}
		if len(page.LastEvaluatedKey) == 0 {
			return out, nil
		}
		in.ExclusiveStartKey = page.LastEvaluatedKey
	}
}

// put writes slot n for typ, taken or renewed by sender, until at+HoldFor, if the slot is free (no
// item, or expired at at) or already typ's; won is false when another type holds it.
func (s *Slots) put(ctx context.Context, n int, typ, sender string, at time.Time) (won bool, err error) {
	_, err = s.DB.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: aws.String(s.Table),
		Item: map[string]types.AttributeValue{
			"pk":        &types.AttributeValueMemberS{Value: pk},
			"sk":        &types.AttributeValueMemberS{Value: "SLOT#" + strconv.Itoa(n)},
			"type":      &types.AttributeValueMemberS{Value: typ},
			"sender":    &types.AttributeValueMemberS{Value: sender},
			"expiresAt": &types.AttributeValueMemberN{Value: strconv.FormatInt(at.Add(HoldFor).Unix(), 10)},
		},
		ConditionExpression:      aws.String("attribute_not_exists(pk) OR expiresAt <= :now OR #t = :t"),
		ExpressionAttributeNames: map[string]string{"#t": "type"},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":now": &types.AttributeValueMemberN{Value: strconv.FormatInt(at.Unix(), 10)},
			":t":   &types.AttributeValueMemberS{Value: typ},
		},
	})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("take unlisted type slot %d for %s: %w", n, typ, err)
	}
	return true, nil
}
