package router

import (
	"context"
	"fmt"
	"sort"
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
// top of the lanes of every type (Lanes), never more than HardBound - ShareRoom.
//
// The bound is shared (backlog share): SQS gives no depth per group or type, so once it is
// reached the container holds only the types it sees flooding. Each container counts the jobs of
// each type it routed since the last reading; over the bound a type may still route while that
// count stays within ShareJobs, and a type that asks for more is held as flooding for HoldFor
// (the time its held jobs stay away), or until a reading finds the queue under the bound. A light
// type (at most ShareJobs jobs per reading per container) thus goes on routing while a heavy one
// floods, into the ShareRoom messages between the bound and HardBound; at HardBound every type is
// held. The approximation: a container sees only its own batches, so a flooding type is caught
// per container, after at most ShareJobs of its jobs in each; a type spread so thin that no
// container sees more than ShareJobs of it per reading counts as light; and a flooding type whose
// own jobs have drained is not told apart from one still flooding, so it waits out its HoldFor
// while light types keep the queue over the bound. Worst case, with C router containers: a
// flooding type routes at most C*ShareJobs jobs over the bound per HoldFor, each light type at
// most C*ShareJobs per reading; once the share room is used up every type waits, as every type
// did before the share, and the lanes queue never passes HardBound (plus one batch per container
// between readings).
type Backlog struct {
	Queue queueAttributesAPI
	URL   string
	// Max is how many messages may wait beyond the lanes' own (0: no bound).
	Max int
	// Lanes returns the sum of the types' limits, read with each depth reading (nil: 0).
	Lanes func(ctx context.Context) (int, error)
	Now   func() time.Time
	// HoldFor is how long a type found flooding is held (0: DefaultHoldFor), as its held jobs are.
	HoldFor time.Duration

	mu     sync.Mutex
	readAt time.Time
	depth  int // as read
	sent   int // routed by this container since the reading
	bound  int // Max + Lanes, at most HardBound - ShareRoom, as of the reading
	// byType counts sent per type; flooding are the types held over the bound, each until when
	// (or until a reading finds the queue under it).
	byType   map[string]int
	flooding map[string]time.Time
}

// HardBound is the most messages the router lets the lanes queue hold: 10,000 under SQS's
// 120,000, for overshoot between readings and for the approximation of SQS's counts.
const HardBound = 110000

// ShareRoom is the room between the bound and HardBound that types not flooding share.
const ShareRoom = 10000

// ShareJobs is how many jobs of a type a container routes over the bound per reading before it
// holds the type as flooding: one general-queue batch.
const ShareJobs = 10

// Reserve reports which types of n (jobs per type) may not go to the lanes queue now (held), and
// counts the others' jobs; it returns the depth it estimates. On an error every type may go.
func (b *Backlog) Reserve(ctx context.Context, n map[string]int) (map[string]bool, int, error) {
	if b == nil || b.Max <= 0 {
		return nil, 0, nil
	}
	now := time.Now
	if b.Now != nil {
		now = b.Now
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.readAt.IsZero() || now().Sub(b.readAt) >= BacklogTTL {
		if err := b.read(ctx, now()); err != nil {
			return nil, b.depth + b.sent, err
		}
	}
	names := make([]string, 0, len(n))
	for t := range n {
		names = append(names, t)
	}
	sort.Strings(names)
	var held map[string]bool
	for _, t := range names {
		est := b.depth + b.sent
		over := est >= b.bound
		if over && (est >= HardBound || b.flooding[t].After(now()) || b.byType[t]+n[t] > ShareJobs) {
			if held == nil {
				held = map[string]bool{}
			}
			held[t] = true
			if est < HardBound && !b.flooding[t].After(now()) {
				holdFor := b.HoldFor
				if holdFor <= 0 {
					holdFor = DefaultHoldFor
				}
				b.flooding[t] = now().Add(holdFor)
			}
			continue
		}
		b.sent += n[t]
		b.byType[t] += n[t]
	}
	return held, b.depth + b.sent, nil
}

// read takes a new reading of the depth and of the bound; a reading under the bound ends every
// type's flooding.
func (b *Backlog) read(ctx context.Context, now time.Time) error {
	out, err := b.Queue.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: &b.URL,
		AttributeNames: []types.QueueAttributeName{
			types.QueueAttributeNameApproximateNumberOfMessages,
			types.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
			types.QueueAttributeNameApproximateNumberOfMessagesDelayed,
		},
	})
	if err != nil {
		return fmt.Errorf("read the lanes queue's depth: %w", err)
	}
	depth := 0
	for _, v := range out.Attributes {
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("read the lanes queue's depth: %q is not a count", v)
		}
		depth += n
	}
	lanes := 0
	if b.Lanes != nil {
		if lanes, err = b.Lanes(ctx); err != nil {
			return fmt.Errorf("read the types' limits: %w", err)
		}
	}
	b.depth, b.sent, b.readAt, b.bound = depth, 0, now, min(b.Max+lanes, HardBound-ShareRoom)
	b.byType = map[string]int{}
	if b.flooding == nil || depth < b.bound {
		b.flooding = map[string]time.Time{}
	}
	return nil
}
