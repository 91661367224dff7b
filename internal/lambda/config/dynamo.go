package config

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

const (
	configPK   = "CONFIG"
	typePrefix = "TYPE#"
	// A pool's live cap is the item "POOL#{name}" (limit).
	poolItemPrefix = "POOL#"
)

// dynamoAPI is the part of the DynamoDB client the override store uses.
type dynamoAPI interface {
	Query(context.Context, *dynamodb.QueryInput, ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	PutItem(context.Context, *dynamodb.PutItemInput, ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	DeleteItem(context.Context, *dynamodb.DeleteItemInput, ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
}

// DynamoStore keeps live overrides as items (pk "CONFIG", sk "TYPE#{type}") in the limiter's table.
type DynamoStore struct {
	db    dynamoAPI
	table string
}

// NewDynamoStore returns an override store on table.
func NewDynamoStore(db dynamoAPI, table string) *DynamoStore {
	return &DynamoStore{db: db, table: table}
}

type overrideItem struct {
	PK              string         `dynamodbav:"pk"`
	SK              string         `dynamodbav:"sk"`
	Limit           int            `dynamodbav:"limit,omitempty"`
	MaxAttempts     int            `dynamodbav:"maxAttempts,omitempty"`
	StateMachineArn string         `dynamodbav:"stateMachineArn,omitempty"`
	Strategy        string         `dynamodbav:"strategy,omitempty"`
	Release         string         `dynamodbav:"release,omitempty"`
	KeyLimit        int            `dynamodbav:"keyLimit,omitempty"`
	KeyLimits       map[string]int `dynamodbav:"keyLimits,omitempty"`
	// A pause: pausedAt (RFC 3339) says the type is paused, pauseReason why.
	PausedAt    string `dynamodbav:"pausedAt,omitempty"`
	PauseReason string `dynamodbav:"pauseReason,omitempty"`
	// A start rate: rate per second and burst; noRate removes the deployment's.
	Rate   float64 `dynamodbav:"rate,omitempty"`
	Burst  int     `dynamodbav:"burst,omitempty"`
	NoRate bool    `dynamodbav:"noRate,omitempty"`
	// Key rates, as Rate.String writes them ("5:10"): every key's, and keys' own.
	KeyRate  string            `dynamodbav:"keyRate,omitempty"`
	KeyRates map[string]string `dynamodbav:"keyRates,omitempty"`
	// Pools, as "a+b"; noPools takes the type out of the deployment's; share in them.
	Pools   string `dynamodbav:"pools,omitempty"`
	NoPools bool   `dynamodbav:"noPools,omitempty"`
	Share   int    `dynamodbav:"share,omitempty"`
	// The overflow rule (OverflowRules).
	Overflow string `dynamodbav:"overflow,omitempty"`
}

// ListOverrides reads every live override (one Query).
func (s *DynamoStore) ListOverrides(ctx context.Context) ([]Override, error) {
	var out []Override
	p := dynamodb.NewQueryPaginator(s.db, &dynamodb.QueryInput{
		TableName:                 &s.table,
		KeyConditionExpression:    aws.String("pk = :pk"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": &types.AttributeValueMemberS{Value: configPK}},
		// Strongly consistent: a read past the cache (Resolver.Fresh) must see a pause or resume
		// written a moment ago; it costs a read unit per 4 KB instead of half of one, once per cache
		// period per function container.
		ConsistentRead: aws.Bool(true),
	})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("query config items in table %s: %w", s.table, err)
		}
		for _, it := range page.Items {
			var oi overrideItem
			if err := attributevalue.UnmarshalMap(it, &oi); err != nil {
				return nil, fmt.Errorf("decode config item: %w", err)
			}
			if name, ok := strings.CutPrefix(oi.SK, poolItemPrefix); ok {
				out = append(out, Override{Pool: name, Limit: oi.Limit})
				continue
			}
			o := Override{
				Type:            strings.TrimPrefix(oi.SK, typePrefix),
				Limit:           oi.Limit,
				MaxAttempts:     oi.MaxAttempts,
				StateMachineArn: oi.StateMachineArn,
				Strategy:        oi.Strategy,
				Release:         oi.Release,
				KeyLimit:        oi.KeyLimit,
				KeyLimits:       oi.KeyLimits,
				Rate:            Rate{PerSecond: oi.Rate, Burst: oi.Burst},
				NoRate:          oi.NoRate,
				KeyRate:         storedRate(oi.KeyRate),
				NoPools:         oi.NoPools,
				Share:           oi.Share,
				Overflow:        oi.Overflow,
			}
			if oi.Pools != "" {
				o.Pools = strings.Split(oi.Pools, "+")
			}
			if len(oi.KeyRates) > 0 {
				o.KeyRates = make(map[string]Rate, len(oi.KeyRates))
				for k, v := range oi.KeyRates {
					o.KeyRates[k] = storedRate(v)
				}
			}
			if oi.PausedAt != "" {
				since, err := time.Parse(time.RFC3339Nano, oi.PausedAt)
				if err != nil {
					return nil, fmt.Errorf("config item of type %s: pausedAt %q: %w", o.Type, oi.PausedAt, err)
				}
				o.Pause = &Pause{Reason: oi.PauseReason, Since: since}
			}
			out = append(out, o)
		}
	}
	return out, nil
}

// SetOverride validates and writes a type's live override, replacing any earlier one.
func (s *DynamoStore) SetOverride(ctx context.Context, o Override) error {
	if err := o.Validate(); err != nil {
		return err
	}
	oi := overrideItem{
		PK: configPK, SK: typePrefix + o.Type, Limit: o.Limit, MaxAttempts: o.MaxAttempts, StateMachineArn: o.StateMachineArn,
		Strategy: o.Strategy, Release: o.Release, KeyLimit: o.KeyLimit, KeyLimits: o.KeyLimits,
		Rate: o.Rate.PerSecond, Burst: o.Rate.Burst, NoRate: o.NoRate, KeyRate: o.KeyRate.String(),
		Pools: strings.Join(o.Pools, "+"), NoPools: o.NoPools, Share: o.Share, Overflow: o.Overflow,
	}
	if o.Pool != "" {
		oi = overrideItem{PK: configPK, SK: poolItemPrefix + o.Pool, Limit: o.Limit}
	}
	if len(o.KeyRates) > 0 {
		oi.KeyRates = make(map[string]string, len(o.KeyRates))
		for k, r := range o.KeyRates {
			oi.KeyRates[k] = r.String()
		}
	}
	if o.Pause != nil {
		oi.PausedAt, oi.PauseReason = o.Pause.Since.UTC().Format(time.RFC3339Nano), o.Pause.Reason
	}
	item, err := attributevalue.MarshalMap(oi)
	if err != nil {
		return fmt.Errorf("encode override of %s: %w", o.name(), err)
	}
	if _, err := s.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &s.table, Item: item}); err != nil {
		return fmt.Errorf("write override of %s: %w", o.name(), err)
	}
	return nil
}

// name says what an override is of: "type T" or "pool P".
func (o Override) name() string {
	if o.Pool != "" {
		return "pool " + o.Pool
	}
	return "type " + o.Type
}

// DeletePool removes a pool's live cap, so the deployment's applies again (none: the pool caps
// nothing).
func (s *DynamoStore) DeletePool(ctx context.Context, name string) error {
	_, err := s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName: &s.table,
		Key: map[string]types.AttributeValue{
			"pk": &types.AttributeValueMemberS{Value: configPK},
			"sk": &types.AttributeValueMemberS{Value: poolItemPrefix + name},
		},
	})
	if err != nil {
		return fmt.Errorf("delete live cap of pool %s: %w", name, err)
	}
	return nil
}

// DeleteOverride removes a type's live override, so its defaults apply again.
func (s *DynamoStore) DeleteOverride(ctx context.Context, typ string) error {
	_, err := s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName: &s.table,
		Key: map[string]types.AttributeValue{
			"pk": &types.AttributeValueMemberS{Value: configPK},
			"sk": &types.AttributeValueMemberS{Value: typePrefix + typ},
		},
	})
	if err != nil {
		return fmt.Errorf("delete override of type %s: %w", typ, err)
	}
	return nil
}

// storedRate reads a rate as SetOverride stores it ("" is none). One that does not parse reads as
// an invalid rate, so that the override fails Validate and is ignored, as any invalid item is.
func storedRate(s string) Rate {
	if s == "" {
		return Rate{}
	}
	// Read as written (Rate.String: any rate Validate accepts), not as an operator types one
	// (ParseRate: 3 decimals at most).
	rs, bs, ok := strings.Cut(s, ":")
	perSecond, err := strconv.ParseFloat(rs, 64)
	burst, berr := strconv.Atoi(bs)
	if !ok || err != nil || berr != nil {
		return Rate{PerSecond: -1}
	}
	return Rate{PerSecond: perSecond, Burst: burst}
}
