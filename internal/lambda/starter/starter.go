// Package starter turns lanes-queue messages into Step Functions executions. For each message group
// in a batch it claims the lane's lease, starts the type's workflow under a deterministic name, and
// reports the message as a batch item failure so it stays in flight and keeps its lane blocked until
// the releaser deletes it.
package starter

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sfnlimit/sfnlimit/internal/lambda/batch"
	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/lambda/deadletter"
	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lane"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
	"github.com/sfnlimit/sfnlimit/internal/lambda/metrics"
	"github.com/sfnlimit/sfnlimit/internal/lambda/releaser"
	"github.com/sfnlimit/sfnlimit/internal/lambda/waitroom"
)

// Reasons on dead letters written by the starter.
const (
	ReasonBadMessage   = "bad_lanes_message"
	ReasonStartRefused = "start_refused"
	ReasonNameTaken    = "execution_name_taken"
)

type configGetter interface {
	Get(ctx context.Context, typ string) (config.TypeConfig, error)
}

type leaseStore interface {
	Get(ctx context.Context, k lease.Key) (*lease.Lease, error)
	Put(ctx context.Context, next lease.Lease, prev *lease.Lease) (lease.Lease, error)
	Delete(ctx context.Context, prev lease.Lease) error
	ListType(ctx context.Context, typ string) ([]lease.Lease, error)
}

type sfnAPI interface {
	StartExecution(context.Context, *sfn.StartExecutionInput, ...func(*sfn.Options)) (*sfn.StartExecutionOutput, error)
	DescribeExecution(context.Context, *sfn.DescribeExecutionInput, ...func(*sfn.Options)) (*sfn.DescribeExecutionOutput, error)
	// StopExecution stops an older job of a key at its cap (the overflow rule cancel: cancel.go).
	StopExecution(context.Context, *sfn.StopExecutionInput, ...func(*sfn.Options)) (*sfn.StopExecutionOutput, error)
}

type queueAPI interface {
	SendMessage(context.Context, *sqs.SendMessageInput, ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
	DeleteMessage(context.Context, *sqs.DeleteMessageInput, ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error)
	ChangeMessageVisibility(context.Context, *sqs.ChangeMessageVisibilityInput, ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error)
	ChangeMessageVisibilityBatch(context.Context, *sqs.ChangeMessageVisibilityBatchInput, ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error)
}

type deadLetterer interface {
	Send(ctx context.Context, e deadletter.Entry) error
}

// waitRoom records the waiting groups of first-free types parked while every lane is taken
// (internal/lambda/waitroom).
type waitRoom interface {
	Park(ctx context.Context, w waitroom.Waiter) error
	Unpark(ctx context.Context, w waitroom.Waiter) error
}

type releaseFunc interface {
	Release(ctx context.Context, req releaser.Request) (releaser.Result, error)
	ExecutionArnOf(ctx context.Context, l lease.Lease) string
	// Free deletes a lease and wakes a parked waiting group of its type for the lane.
	Free(ctx context.Context, l lease.Lease) error
	// BatchEnded records a job's end in its batch when no release will (its lease is gone).
	BatchEnded(ctx context.Context, l lease.Lease, outcome batch.Outcome) error
}

// Starter handles lanes-queue batches.
type Starter struct {
	Config   configGetter
	Leases   leaseStore
	SFN      sfnAPI
	Queue    queueAPI
	QueueURL string
	DLQ      deadLetterer
	Releaser releaseFunc
	// Lanes chooses the lanes of jobs of types on the random strategy.
	Lanes lane.Chooser
	// WaitRoom parks first-free waiting groups that find no free lane, for a release to wake.
	WaitRoom waitRoom
	// Fates decides whether each job of a type with the overflow rule skip runs or is skipped.
	Fates fates
	// RetryDelay is how long a message whose start failed stays invisible (jittered up to 2x).
	RetryDelay time.Duration
	// StaleAfter is how long another job's unconfirmed lease may sit untouched before the lane is
	// taken back: longer than the lanes queue's visibility timeout, after which its message, if it
	// still existed, would have been delivered again and refreshed the lease.
	StaleAfter time.Duration
	// Visibility is the lanes queue's visibility timeout: how long a received message stays in
	// flight (0: releaseGrace).
	Visibility time.Duration
	// HandoverWait is how long a message whose lane is still leased by a running job waits for
	// that lease to go before backing off (0: back off at once).
	HandoverWait time.Duration
	// Concurrency bounds how many groups of one batch are worked on at once.
	Concurrency int
	Now         func() time.Time
	Log         *slog.Logger
	// Metrics receives the starter's counts per type (nil: none).
	Metrics *metrics.Recorder
	// Rates holds the types' start-rate buckets (nil: rates are not enforced).
	Rates rateTaker
	// Pools holds the slots of shared pools, which a bind of a pooled type's job takes.
	Pools slotStore
	// Sleep waits for a start token due within maxRateSleep (nil: the message is put back instead).
	Sleep func(ctx context.Context, d time.Duration) error
	// Jitter returns a random number in [0, n) for the back-off and rate-wait jitter (nil:
	// math/rand). The deterministic simulation gives it a seeded source.
	Jitter func(n int64) int64
}

func (s *Starter) jitter(n int64) int64 {
	if s.Jitter != nil {
		return s.Jitter(n)
	}
	return rand.Int64N(n)
}

// verdict is what becomes of one message.
type verdict int

const (
	hold verdict = iota // report as failure: stays in flight (or was made visible again)
	ack                 // report as success: Lambda deletes it (or it was already moved or deleted)
)

// Handle processes a batch: one message per message group; the rest of a group go back at once.
func (s *Starter) Handle(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	defer func() {
		if err := s.Metrics.Flush(); err != nil {
			s.Log.WarnContext(ctx, "metrics not written", "error", err)
		}
	}()
	var (
		resp   events.SQSEventResponse
		order  []string
		groups = map[string][]events.SQSMessage{}
	)
	for _, m := range ev.Records {
		g := m.Attributes["MessageGroupId"]
		if _, ok := groups[g]; !ok {
			order = append(order, g)
		}
		groups[g] = append(groups[g], m)
	}
	held := make([][]string, len(order))
	var wg sync.WaitGroup
	sem := make(chan struct{}, max(s.Concurrency, 1))
	for i, g := range order {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			held[i] = s.processGroup(ctx, groups[g])
		}()
	}
	wg.Wait()
	for _, ids := range held {
		for _, id := range ids {
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: id})
		}
	}
	return resp, nil
}

// processGroup works on one message of a group and returns the others to the queue at once (a FIFO
// receive can return several messages of one group, and only one may start). It returns the ids of
// the messages to report as failures.
func (s *Starter) processGroup(ctx context.Context, ms []events.SQSMessage) []string {
	if _, ln, err := job.ParseGroupID(ms[0].Attributes["MessageGroupId"]); err == nil && ln == job.WaitingLane {
		return s.processWaiting(ctx, ms)
	}
	first := s.pick(ctx, ms)
	var rest []events.SQSMessage
	var held []string
	for i, m := range ms {
		if i != first {
			rest = append(rest, m)
			held = append(held, m.MessageId)
		}
	}
	s.returnAll(ctx, rest)
	if s.process(ctx, ms[first]) == hold {
		held = append(held, ms[first].MessageId)
	}
	return held
}

// processWaiting binds the jobs of a waiting group to free lanes in FIFO order, and stops at the
// first that must wait: it stays parked (or backs off) and the ones after it go back at once, to be
// delivered after it.
func (s *Starter) processWaiting(ctx context.Context, ms []events.SQSMessage) []string {
	view := &leaseView{} // the type's leases, read once for the batch
	for i, m := range ms {
		if s.processIn(ctx, m, view) == hold {
			var held []string
			for _, r := range ms[i:] {
				held = append(held, r.MessageId)
			}
			s.returnAll(ctx, ms[i+1:])
			return held
		}
	}
	return nil
}

// pick chooses which message of a group to work on: the one whose job holds the lane's lease when
// it is in the batch (a job being retried must not wait behind the jobs its lane blocks), else the
// first, as FIFO order has it.
func (s *Starter) pick(ctx context.Context, ms []events.SQSMessage) int {
	if len(ms) < 2 {
		return 0
	}
	typ, ln, err := job.ParseGroupID(ms[0].Attributes["MessageGroupId"])
	if err != nil {
		return 0
	}
	l, err := s.Leases.Get(ctx, lease.Key{Type: typ, Lane: ln})
	if err != nil || l == nil {
		return 0
	}
	for i, m := range ms {
		var j job.Job
		if json.Unmarshal([]byte(m.Body), &j) == nil && l.Holds(j.Sender, j.Key, j.ID, j.Redrive) {
			return i
		}
	}
	return 0
}

// msg is one message being worked on.
type msg struct {
	events.SQSMessage
	job job.Job
	key lease.Key
	log *slog.Logger
	// view is the type's leases as its waiting group's batch last read them (waiting messages only).
	view *leaseView
	// leaseless is set when this delivery claims an attempt no lease held (ownAttempt,
	// alreadyExists): one its release already freed, or one whose lease was deleted by hand. Its
	// claim says so (lease.Lease.Reclaimed).
	leaseless bool
	// recovering is set when this delivery claims an attempt of its message that no lease held
	// (ownAttempt): one a DescribeExecution, eventually consistent, may have shown running though it
	// had ended and been released (confirmSince looks again).
	recovering bool
	// freed is the attempt (0: none) of this message whose claim this delivery read and then found
	// gone: freed by a release, which counted its end. Its claim says so (lease.Lease.Reclaimed).
	freed int
	// admitted is set once this delivery wrote (or found) the job's admitted fate (overflow rule
	// skip): it may run.
	admitted bool
}

// receives is the delivery's ApproximateReceiveCount (0 when SQS did not say).
func (x *msg) receives() int {
	n, _ := strconv.Atoi(x.Attributes["ApproximateReceiveCount"])
	return n
}

// copyOf reports whether this delivery is the copy that the bind which wrote bound lease l sent to
// its lane: its deduplication id names the bind's message and time (job.BoundDedupID).
func (x *msg) copyOf(l lease.Lease) bool {
	return x.Attributes["MessageDeduplicationId"] == job.BoundDedupID(x.job.Type, x.job.Sender, x.job.Key, x.job.ID, x.job.Redrive, l.Lane, l.MessageID, l.StartedAt.UnixNano())
}

func (s *Starter) process(ctx context.Context, m events.SQSMessage) verdict {
	return s.processIn(ctx, m, &leaseView{})
}

// processIn works on one message; a waiting message binds from view, the leases its batch read.
func (s *Starter) processIn(ctx context.Context, m events.SQSMessage, view *leaseView) verdict {
	typ, ln, gerr := job.ParseGroupID(m.Attributes["MessageGroupId"])
	if p, ok := job.ParseProbe(m.Body); ok && gerr == nil && ln != job.WaitingLane {
		return s.probe(ctx, m, lease.Key{Type: typ, Lane: ln}, p)
	}
	var j job.Job
	jerr := json.Unmarshal([]byte(m.Body), &j)
	badPriority := j.Priority != 0 && (j.Priority < job.MinPriority || j.Priority > job.MaxPriority)
	if gerr != nil || jerr != nil || j.Type != typ || job.ValidateID(j.ID) != nil || job.ValidateKey(j.Key) != nil || job.ValidateSender(j.Sender) != nil || badPriority ||
		job.ValidateBatch(j.Batch, j.BatchSize) != nil {
		detail := fmt.Sprintf("group %q, body not a job for it", m.Attributes["MessageGroupId"])
		s.Log.WarnContext(ctx, "lanes-queue message is not a job; dead-lettering it", "messageId", m.MessageId, "detail", detail)
		if err := s.DLQ.Send(ctx, deadletter.Entry{Reason: ReasonBadMessage, Source: "starter", Type: typ, JobID: j.ID, Key: j.Key, Sender: j.Sender, Cause: detail, Body: m.Body,
			Batch: j.Batch, Redrive: j.Redrive, Refused: true}); err != nil {
			s.Log.ErrorContext(ctx, "dead-letter failed", "messageId", m.MessageId, "error", err)
			return s.backoff(ctx, m)
		}
		return ack
	}
	if len(j.Input) == 0 {
		j.Input = json.RawMessage(`{}`)
	}
	x := &msg{SQSMessage: m, job: j, key: lease.Key{Type: typ, Lane: ln},
		log: s.Log.With("jobId", j.ID, "type", typ, "key", j.Key, "lane", ln, "messageId", m.MessageId), view: view}
	var v verdict
	var err error
	if ln == job.WaitingLane {
		v, err = s.bind(ctx, x)
	} else {
		v, err = s.claimAndStart(ctx, x)
	}
	if err != nil {
		x.log.ErrorContext(ctx, "start failed; the job will be tried again shortly", "error", err)
		s.Metrics.Add(typ, metrics.StartsFailed, 1)
		return s.backoff(ctx, m)
	}
	return v
}

func (s *Starter) now() time.Time {
	if s.Now != nil {
		return s.Now().UTC()
	}
	return time.Now().UTC()
}
