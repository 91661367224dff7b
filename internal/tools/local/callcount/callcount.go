// Package callcount counts AWS API calls by service and operation with SDK middleware, so the demo can
// turn the calls the limiter made into a cost per job at AWS list prices.
package callcount

import (
	"context"
	"sort"
	"sync"

	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go/middleware"
)

// Key is one API operation.
type Key struct{ Service, Operation string }

// Counter counts calls; it is safe for concurrent use.
type Counter struct {
	mu    sync.Mutex
	n     map[Key]int64
	items map[Key]int64
}

// New returns an empty counter.
func New() *Counter { return &Counter{n: map[Key]int64{}, items: map[Key]int64{}} }

// Option installs the counter on an SDK client: append it to aws.Config.APIOptions.
func (c *Counter) Option(stack *middleware.Stack) error {
	return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("sfnlimitCallCount",
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			k := Key{awsmiddleware.GetServiceID(ctx), awsmiddleware.GetOperationName(ctx)}
			c.mu.Lock()
			c.n[k]++
			if tx, ok := in.Parameters.(*dynamodb.TransactWriteItemsInput); ok {
				c.items[k] += int64(len(tx.TransactItems))
			}
			c.mu.Unlock()
			return next.HandleInitialize(ctx, in)
		}), middleware.After)
}

// Row is one counted operation.
type Row struct {
	Key
	Calls int64
	// Items is the items written by the calls, for DynamoDB's TransactWriteItems (each item costs
	// two write units); 0 for other operations.
	Items int64
}

// Snapshot returns the counts, sorted by service and operation.
func (c *Counter) Snapshot() []Row {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]Row, 0, len(c.n))
	for k, v := range c.n {
		out = append(out, Row{k, v, c.items[k]})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Service != out[j].Service {
			return out[i].Service < out[j].Service
		}
		return out[i].Operation < out[j].Operation
	})
	return out
}

// Reset forgets every count.
func (c *Counter) Reset() {
	c.mu.Lock()
	c.n = map[Key]int64{}
	c.items = map[Key]int64{}
	c.mu.Unlock()
}
