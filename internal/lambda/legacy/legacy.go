// Package legacy deletes what the retired least-loaded lane strategy left in the limiter's table:
// its per-lane job counts and per-job markers, the items under pk OCC#{type}. Nothing reads them any
// more; the sweep calls Clean for each type it visits, so a deployment upgraded from a version that
// counted lanes is left with none of them. Once a type's items are gone, Clean costs one Query of an
// empty partition per sweep.
package legacy

import (
	"context"
	"fmt"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Prefix is the partition key prefix of the retired lane counts.
const Prefix = "OCC#"

// PerCall bounds the items one Clean deletes, so a sweep is not held up by a large leftover.
const PerCall = 100

type dynamoAPI interface {
	Query(context.Context, *dynamodb.QueryInput, ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	DeleteItem(context.Context, *dynamodb.DeleteItemInput, ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
}

// Cleaner deletes the retired lane counts of one table.
type Cleaner struct {
	db    dynamoAPI
	table string
	// clean holds the types found with nothing left: nothing writes such items any more, so they
	// are not looked at again by this process.
	clean sync.Map
}

// NewCleaner returns a cleaner of table.
func NewCleaner(db dynamoAPI, table string) *Cleaner { return &Cleaner{db: db, table: table} }

// Clean deletes up to PerCall of typ's retired lane-count items and returns how many it deleted.
// Once a type has none left, Clean costs nothing more for it in this process.
func (c *Cleaner) Clean(ctx context.Context, typ string) (int, error) {
	if _, done := c.clean.Load(typ); done {
		return 0, nil
	}
	out, err := c.db.Query(ctx, &dynamodb.QueryInput{
		TableName:                 &c.table,
		KeyConditionExpression:    aws.String("pk = :pk"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": &types.AttributeValueMemberS{Value: Prefix + typ}},
		Limit:                     aws.Int32(PerCall),
	})
	if err != nil {
		return 0, fmt.Errorf("read retired lane counts of type %s: %w", typ, err)
	}
	n := 0
	for _, it := range out.Items {
		if _, err := c.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{
			TableName: &c.table, Key: map[string]types.AttributeValue{"pk": it["pk"], "sk": it["sk"]},
		}); err != nil {
			return n, fmt.Errorf("delete a retired lane count of type %s: %w", typ, err)
		}
		n++
	}
	if len(out.Items) == 0 {
		c.clean.Store(typ, true)
	}
	return n, nil
}
