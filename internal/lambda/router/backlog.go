package router

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// DefaultHoldFor is how long a job held back by a full lanes queue stays in the general queue
// before the router looks at it again (its DelaySeconds; BACKLOG_HOLD_SECONDS). Each look costs
// a receive, a send and a delete of the held job (batched by ten) and a router invocation per ten:
// about 2 USD an hour per million held jobs at 300 s, at SQS and Lambda list prices.
const DefaultHoldFor = 5 * time.Minute

// BacklogTTL is how long the router trusts one reading of the lanes queue's depth.
const BacklogTTL = 10 * time.Second

// SubmittedAtAttribute is the message attribute a held job carries back to the general queue: its
// submission time (Unix milliseconds), which its new SentTimestamp would otherwise replace.
const SubmittedAtAttribute = "sfnlimitSubmittedAt"

type queueAttributesAPI interface {
	GetQueueAttributes(context.Context, *sqs.GetQueueAttributesInput, ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
}

// Backlog tells whether the lanes queue holds too many messages to take more. An SQS FIFO queue
// looks only at its first 120,000 messages to find groups to serve: a deeper backlog of waiting
// jobs (one key's, say) would hide every message sent after it, the lane copies of bound jobs
// among them. So the router stops moving jobs in at Max messages and the backlog stays in the
// general queue, which holds any number. The depth is SQS's approximate count of visible,
// in-flight and delayed messages, read at most every BacklogTTL per container, plus what this
// container routed since (Reserve): between two readings each container may overshoot by at most
// one batch. Running jobs' messages are in the queue too, so the bound is Max waiting messages on
// top of the lanes of every type (Lanes), never more than HardBound.
type Backlog struct {
	Queue queueAttributesAPI
	URL   string
	// Max is how many messages may wait beyond the lanes' own (0: no bound).
	Max int
	// Lanes returns the sum of the types' limits, read with each depth reading (nil: 0).
	Lanes func(ctx context.Context) (int, error)
	Now   func() time.Time

	mu     sync.Mutex
	readAt time.Time
	depth  int // as read
	sent   int // routed by this container since the reading
	bound  int // Max + Lanes, at most HardBound, as of the reading
}

// HardBound is the most messages the router lets the lanes queue hold: 10,000 under SQS's
// 120,000, for overshoot between readings and for the approximation of SQS's counts.
const HardBound = 110000

// Reserve reports whether n more jobs may go to the lanes queue, and counts them if so; else the
// queue is at or over Max. It returns the depth it estimates.
func (b *Backlog) Reserve(ctx context.Context, n int) (bool, int, error) {
	if b == nil || b.Max <= 0 {
		return true, 0, nil
	}
	now := time.Now
	if b.Now != nil {
		now = b.Now
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.readAt.IsZero() || now().Sub(b.readAt) >= BacklogTTL {
		out, err := b.Queue.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
			QueueUrl: &b.URL,
			AttributeNames: []types.QueueAttributeName{
				types.QueueAttributeNameApproximateNumberOfMessages,
				types.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
				types.QueueAttributeNameApproximateNumberOfMessagesDelayed,
			},
		})
		if err != nil {
			return true, b.depth + b.sent, fmt.Errorf("read the lanes queue's depth: %w", err)
		}
		depth := 0
		for _, v := range out.Attributes {
			n, err := strconv.Atoi(v)
			if err != nil {
				return true, b.depth + b.sent, fmt.Errorf("read the lanes queue's depth: %q is not a count", v)
			}
			depth += n
		}
		lanes := 0
		if b.Lanes != nil {
			if lanes, err = b.Lanes(ctx); err != nil {
				return true, depth, fmt.Errorf("read the types' limits: %w", err)
			}
		}
		b.depth, b.sent, b.readAt, b.bound = depth, 0, now(), min(b.Max+lanes, HardBound)
	}
	if b.depth+b.sent >= b.bound {
		return false, b.depth + b.sent, nil
	}
	b.sent += n
	return true, b.depth + b.sent, nil
}
