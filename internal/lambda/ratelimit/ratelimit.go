// Package ratelimit keeps each job type's start rate, and each key's: a token bucket in the
// limiter's table, shared by every starter invocation. A bucket holds up to burst tokens and gains
// rate tokens per second; a start takes one. Two takers of one bucket cannot both spend its last
// token: each write is conditional on the version it read.
//
// Items: pk "RATE", sk "TYPE#{type}" (a type's bucket) or "KEY#{type}#{key}" (a key's; neither
// names may hold a "#"): tokens (N, after the last take), atNs (N, when they were counted, Unix
// nanoseconds), version (N), expiresAt (N, Unix seconds: when the bucket is full again, so that
// DynamoDB's TTL removes it, and a key's bucket lasts no longer than its key is busy; a bucket
// read back as missing is a full one).
package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Rate is a bucket's refill: PerSecond tokens a second, up to Burst.
type Rate struct {
	PerSecond float64
	Burst     int
}

type dynamoAPI interface {
	GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(context.Context, *dynamodb.PutItemInput, ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
}

// Buckets are the types' token buckets in one table.
type Buckets struct {
	db    dynamoAPI
	table string
	// Now is the clock (time.Now when nil). Starters' clocks may differ a little: a bucket never
	// counts time backwards, so a taker behind another's clock gains nothing from it.
	Now func() time.Time
}

// New returns the buckets of table.
func New(db dynamoAPI, table string) *Buckets { return &Buckets{db: db, table: table} }

// ExpiryMargin is how long past the moment a bucket is full again (at the rate of its last take) its
// item expires: a rate lowered meanwhile refills it more slowly.
const ExpiryMargin = 7 * 24 * time.Hour

// maxRounds bounds how often Take reads again after losing a race for the bucket.
const maxRounds = 5

// contended is the wait Take asks for after losing maxRounds races in a row.
const contended = 100 * time.Millisecond

// Take takes a token from typ's bucket. It returns 0 when it took one, else how long until one is
// due: the caller waits that long and asks again (nothing is reserved meanwhile).
func (b *Buckets) Take(ctx context.Context, typ string, r Rate) (time.Duration, error) {
	return b.take(ctx, "TYPE#"+typ, "type "+typ, r)
}

// TakeKey takes a token from the bucket of typ's key (the default key "" has one too), as Take.
func (b *Buckets) TakeKey(ctx context.Context, typ, key string, r Rate) (time.Duration, error) {
	return b.take(ctx, "KEY#"+typ+"#"+key, fmt.Sprintf("type %s key %q", typ, key), r)
}

func (b *Buckets) take(ctx context.Context, sk, what string, r Rate) (time.Duration, error) {
	if r.PerSecond <= 0 || r.Burst < 1 {
		return 0, fmt.Errorf("rate of %s: %v per second, burst %d: nothing to take from", what, r.PerSecond, r.Burst)
	}
	key := map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: "RATE"}, "sk": &types.AttributeValueMemberS{Value: sk},
	}
	for range maxRounds {
		out, err := b.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &b.table, Key: key, ConsistentRead: aws.Bool(true)})
		if err != nil {
			return 0, fmt.Errorf("read start rate bucket of %s: %w", what, err)
		}
		now := b.now()
		tokens, at, version := float64(r.Burst), now, int64(0)
		if out.Item != nil {
			tokens, at, version = num(out.Item, "tokens"), time.Unix(0, integer(out.Item, "atNs")), integer(out.Item, "version")
			if now.After(at) {
				tokens += now.Sub(at).Seconds() * r.PerSecond
				at = now
			}
			tokens = min(tokens, float64(r.Burst))
		}
		if tokens < 1 {
			return time.Duration(math.Ceil((1 - tokens) / r.PerSecond * float64(time.Second))), nil
		}
		item := map[string]types.AttributeValue{
			"pk": key["pk"], "sk": key["sk"],
			"tokens": &types.AttributeValueMemberN{Value: strconv.FormatFloat(tokens-1, 'f', -1, 64)},
			// The exact instant the tokens were counted at: a time cut to the millisecond would
			// count the rest of that millisecond again at the next take (at 2000/s the bucket would
			// refill at every take).
			"atNs":    &types.AttributeValueMemberN{Value: strconv.FormatInt(at.UnixNano(), 10)},
			"version": &types.AttributeValueMemberN{Value: strconv.FormatInt(version+1, 10)},
			// Full again by then, at this rate, and a week more: a bucket gone reads as a full one,
			// and an operator may lower the rate meanwhile (refilling a bucket at the lowest rate
			// takes longer than the week only for a burst over 600 tokens).
			"expiresAt": &types.AttributeValueMemberN{Value: strconv.FormatInt(at.Add(time.Duration((float64(r.Burst)-(tokens-1))/r.PerSecond*float64(time.Second))+ExpiryMargin).Unix()+1, 10)},
		}
		_, err = b.db.PutItem(ctx, &dynamodb.PutItemInput{
			TableName: &b.table, Item: item,
			ConditionExpression: aws.String("attribute_not_exists(pk) OR version = :v"),
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":v": &types.AttributeValueMemberN{Value: strconv.FormatInt(version, 10)},
			},
		})
		var ccf *types.ConditionalCheckFailedException
		if errors.As(err, &ccf) {
			continue // another start took from the bucket since the read
		}
		if err != nil {
			return 0, fmt.Errorf("take a start token of %s: %w", what, err)
		}
		return 0, nil
	}
	return contended, nil
}

func (b *Buckets) now() time.Time {
	if b.Now != nil {
		return b.Now()
	}
	return time.Now()
}

func integer(it map[string]types.AttributeValue, k string) int64 {
	if v, ok := it[k].(*types.AttributeValueMemberN); ok {
		n, _ := strconv.ParseInt(v.Value, 10, 64)
		return n
	}
	return 0
}

func num(it map[string]types.AttributeValue, k string) float64 {
	if v, ok := it[k].(*types.AttributeValueMemberN); ok {
		f, _ := strconv.ParseFloat(v.Value, 64)
		return f
	}
	return 0
}

// Refund gives back a token taken from typ's bucket by a start that did not happen (its bind found
// no lane after all, or its other bucket had no token): at most up to the burst. A refund that
// loses its race for the bucket maxRounds times is dropped: a token lost, never one too many.
func (b *Buckets) Refund(ctx context.Context, typ string, r Rate) error {
	return b.refund(ctx, "TYPE#"+typ, "type "+typ, r)
}

// RefundKey is Refund for the bucket of typ's key.
func (b *Buckets) RefundKey(ctx context.Context, typ, key string, r Rate) error {
	return b.refund(ctx, "KEY#"+typ+"#"+key, fmt.Sprintf("type %s key %q", typ, key), r)
}

func (b *Buckets) refund(ctx context.Context, sk, what string, r Rate) error {
	if r.PerSecond <= 0 || r.Burst < 1 {
		return nil
	}
	key := map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: "RATE"}, "sk": &types.AttributeValueMemberS{Value: sk},
	}
	// The refund's own mark: a refund DynamoDB applied but answered as failed (the SDK's retry then
	// fails its condition) is found on the item, and not made twice.
	id := strconv.FormatUint(rand.Uint64(), 36)
	for range maxRounds {
		out, err := b.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &b.table, Key: key, ConsistentRead: aws.Bool(true)})
		if err != nil {
			return fmt.Errorf("read start rate bucket of %s to refund a token: %w", what, err)
		}
		if out.Item == nil {
			return nil // gone: a missing bucket is a full one
		}
		if s, ok := out.Item["refundId"].(*types.AttributeValueMemberS); ok && s.Value == id {
			return nil // ours, applied
		}
		// Counted as of the last take, its time kept: the refill since is counted by the next take.
		tokens, version := num(out.Item, "tokens"), integer(out.Item, "version")
		item := maps.Clone(out.Item)
		item["tokens"] = &types.AttributeValueMemberN{Value: strconv.FormatFloat(min(tokens+1, float64(r.Burst)), 'f', -1, 64)}
		item["version"] = &types.AttributeValueMemberN{Value: strconv.FormatInt(version+1, 10)}
		item["refundId"] = &types.AttributeValueMemberS{Value: id}
		_, err = b.db.PutItem(ctx, &dynamodb.PutItemInput{
			TableName: &b.table, Item: item,
			ConditionExpression: aws.String("version = :v"),
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":v": &types.AttributeValueMemberN{Value: strconv.FormatInt(version, 10)},
			},
		})
		var ccf *types.ConditionalCheckFailedException
		if errors.As(err, &ccf) {
			continue
		}
		if err != nil {
			return fmt.Errorf("refund a start token of %s: %w", what, err)
		}
		return nil
	}
	return nil
}
