// Package starter turns lanes-queue messages into Step Functions executions. For each message group
// in a batch it claims the lane's lease, starts the type's workflow under a deterministic name, and
// reports the message as a batch item failure so it stays in flight and keeps its lane blocked until
// the releaser deletes it.
package starter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

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
	// Wake wakes a parked waiting group of a type for a lane the starter freed.
	Wake(ctx context.Context, typ string)
	// BatchEnded records a job's end in its batch when no release will (its lease is gone).
	BatchEnded(ctx context.Context, l lease.Lease, outcome batch.Outcome) error
}

// clockSkew is how far Step Functions' clock (an execution's startDate, in milliseconds) may be from
// the starter's: an execution whose start date is earlier than its claim by more than this was not
// started by that claim.
const clockSkew = time.Second

// DescribeSettle is how long after a claim a DescribeExecution that does not find its execution is
// not believed (releaser.DescribeSettle: the sweep follows it too).
const DescribeSettle = releaser.DescribeSettle

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
	// RetryDelay is how long a message whose start failed stays invisible (jittered up to 2x).
	RetryDelay time.Duration
	// StaleAfter is how long another job's unconfirmed lease may sit untouched before the lane is
	// taken back: longer than the lanes queue's visibility timeout, after which its message, if it
	// still existed, would have been delivered again and refreshed the lease.
	StaleAfter time.Duration
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
		if json.Unmarshal([]byte(m.Body), &j) == nil && l.Holds(j.ID, j.Redrive) {
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
	// bound is the bound lease this delivery's claim replaced (a first-free job's copy claiming the
	// lane its bind reserved), given back if the start is refused for now.
	bound *lease.Lease
}

// receives is the delivery's ApproximateReceiveCount (0 when SQS did not say).
func (x *msg) receives() int {
	n, _ := strconv.Atoi(x.Attributes["ApproximateReceiveCount"])
	return n
}

func (s *Starter) process(ctx context.Context, m events.SQSMessage) verdict {
	return s.processIn(ctx, m, &leaseView{})
}

// processIn works on one message; a waiting message binds from view, the leases its batch read.
func (s *Starter) processIn(ctx context.Context, m events.SQSMessage, view *leaseView) verdict {
	typ, ln, gerr := job.ParseGroupID(m.Attributes["MessageGroupId"])
	var j job.Job
	jerr := json.Unmarshal([]byte(m.Body), &j)
	badPriority := j.Priority != 0 && (j.Priority < job.MinPriority || j.Priority > job.MaxPriority)
	if gerr != nil || jerr != nil || j.Type != typ || job.ValidateID(j.ID) != nil || job.ValidateKey(j.Key) != nil || badPriority ||
		job.ValidateBatch(j.Batch, j.BatchSize) != nil {
		detail := fmt.Sprintf("group %q, body not a job for it", m.Attributes["MessageGroupId"])
		s.Log.WarnContext(ctx, "lanes-queue message is not a job; dead-lettering it", "messageId", m.MessageId, "detail", detail)
		if err := s.DLQ.Send(ctx, deadletter.Entry{Reason: ReasonBadMessage, Source: "starter", Type: typ, JobID: j.ID, Cause: detail, Body: m.Body,
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

func (s *Starter) claimAndStart(ctx context.Context, x *msg) (verdict, error) {
	for round := 0; round < 3; round++ {
		l, err := s.Leases.Get(ctx, x.key)
		if err != nil {
			return hold, err
		}
		v, err := s.withLease(ctx, x, l)
		if errors.Is(err, lease.ErrConflict) {
			continue // someone changed the lane meanwhile: look again
		}
		return v, err
	}
	return hold, fmt.Errorf("lease of lane %s kept changing", x.key)
}

func (s *Starter) withLease(ctx context.Context, x *msg, l *lease.Lease) (verdict, error) {
	x.bound = nil
	if l != nil && !l.Holds(x.job.ID, x.job.Redrive) {
		return s.laneHeld(ctx, x, *l)
	}
	if l != nil && l.MessageID == x.MessageId && x.receives() < l.Receives {
		// A late copy of an earlier delivery (Lambda may hand a batch over twice): the lease holds
		// the handle of a later receive, the only one SQS still honours, and that delivery does the
		// work. Writing this one's handle would make the release's DeleteMessage a silent no-op, and
		// the message would hold its lane for a whole visibility timeout after its job ended.
		x.log.InfoContext(ctx, "late copy of an earlier delivery; the lease keeps the newer receipt handle",
			"receives", x.receives(), "leaseReceives", l.Receives)
		return hold, nil
	}
	if l != nil && (l.Status == lease.Running || l.Status == lease.DeadLettering) {
		// Confirmed running (a lease written by an earlier version, or confirmed by a redelivery),
		// or ended and being dead-lettered: never started again.
		return s.redelivered(ctx, x, *l)
	}

	cfg, err := s.Config.Get(ctx, x.key.Type)
	if errors.Is(err, config.ErrUnknownType) {
		if l != nil && l.Status == lease.Starting {
			// A claim is most often a running job (its message came back after the visibility
			// timeout): a type removed from the config must not dead-letter, and free the lane of,
			// a job whose execution still runs.
			if v, err, decided := s.confirm(ctx, x, *l); decided {
				return v, err
			}
		}
		return s.refuse(ctx, x, l, string(job.ReasonUnknownType), err.Error())
	}
	if err != nil {
		return hold, err
	}
	if x.key.Lane > cfg.Limit {
		if l != nil && l.Status == lease.Starting {
			// An unconfirmed start may have gone through: never move a job that may be running.
			if v, err, decided := s.confirm(ctx, x, *l); decided {
				return v, err
			}
		}
		if (l == nil && x.Attributes["ApproximateReceiveCount"] != "1") || (l != nil && l.Status == lease.Retrying) {
			// The lease may have been deleted by hand: an attempt this message already made goes on
			// here, not in a copy that would take it for a duplicate's. (A message received for the
			// first time has made none: no look-up for the many fresh jobs a lowered limit moves.)
			if v, err, decided := s.ownAttempt(ctx, x, l, cfg); decided {
				return v, err
			}
		}
		return s.move(ctx, x, l, cfg, "lane above the type's limit; job moved")
	}
	if cfg.Paused() && (l == nil || l.Status == lease.Bound || l.Status == lease.Retrying) {
		// No new start while the type is paused. The job keeps its place: parked in its lane (a
		// bound lane stays bound to it, a retry keeps its lease), for the resume to wake. A claim
		// (starting) goes on: it is a running job's, or the same attempt again.
		if l != nil {
			held, err := s.holdLease(ctx, x, *l, PausedParkFor)
			if err != nil {
				return hold, err
			}
			l = &held
		}
		resumed, v, err := s.parkInLane(ctx, x)
		if resumed == nil {
			return v, err
		}
		cfg = *resumed
	}
	if l == nil && cfg.CapsKeys() {
		// A job in a free lane it was not bound to: routed straight to a lane before its type
		// capped keys (the random strategy routes its whole backlog so), or a copy whose bind was
		// taken back. Only a bind counts its key's running jobs (bindFree): started here, it could
		// take its key over its cap. It waits in its key's group first, with the attempts it made.
		if x.Attributes["ApproximateReceiveCount"] != "1" {
			if v, err, decided := s.ownAttempt(ctx, x, l, cfg); decided {
				return v, err
			}
		}
		return s.move(ctx, x, l, cfg, "job not bound in a type that caps keys; job moved to its key's group")
	}

	if l == nil || l.Status == lease.Bound || l.Status == lease.Retrying {
		// A new attempt starts only with a start token of its type's rate; waiting for one uses
		// no attempt.
		wait, err := s.takeToken(ctx, x, cfg)
		if err != nil {
			return hold, err
		}
		if wait > 0 {
			if l != nil && s.StaleAfter > 0 && l.Idle(s.now())+wait > s.StaleAfter/2 {
				if _, err := s.holdLease(ctx, x, *l, wait); err != nil {
					return hold, err
				}
			}
			return s.waitForToken(ctx, x, cfg, wait), nil
		}
	}
	claimedAt := s.now()
	attempt := x.job.Attempts + 1
	stateMachine := cfg.StateMachineArn
	startedAt := claimedAt
	fresh := l // the lease the claim goes on from: none for a lane bound to this job
	switch {
	case l == nil:
	case l.Status == lease.Bound:
		// Bound to this job from its waiting group: the claim replaces the bound lease and goes on
		// as on a free lane (a start refused for now gives the bind back: giveBack).
		fresh, x.bound = nil, l
	case l.Status == lease.Starting:
		// This attempt's claim: its execution runs (the message came back after the visibility
		// timeout), or its start was not confirmed. Either way the same attempt is started again:
		// Step Functions answers a running execution's name and input with that execution, and a
		// closed one's with ExecutionAlreadyExists.
		attempt = l.Attempt
		if l.StateMachineArn != "" {
			// ...on the state machine it was tried on: a config change since then must not start
			// the same attempt a second time on another one.
			stateMachine = l.StateMachineArn
		}
		if !l.StartedAt.IsZero() {
			startedAt = l.StartedAt // the attempt's, not this delivery's: status shows how long it runs
		}
	case l.Status == lease.Retrying:
		attempt = l.Attempt + 1
	}
	// The execution's ARN goes in the claim before the start is tried: its name is deterministic,
	// so whoever reads the lease next (a release, the sweep, a dead letter) finds the execution.
	// The claim is the only write of a start: a claim whose execution exists is a running job, and
	// every reader of a lease takes it for one (docs/design.md, "Lease status").
	claim := lease.Lease{
		Type: x.key.Type, Lane: x.key.Lane, JobID: x.job.ID, JobKey: x.job.Key, Batch: x.job.Batch, MessageID: x.MessageId, ReceiptHandle: x.ReceiptHandle, Receives: x.receives(),
		Attempt: attempt, Redrive: x.job.Redrive, Status: lease.Starting, StartedAt: startedAt, SubmittedAt: x.job.SubmittedAt,
		StateMachineArn: stateMachine, ExecutionArn: job.ExecutionArn(stateMachine, job.RunName(x.key.Type, x.job.ID, x.job.Redrive, attempt)),
	}
	claimed, err := s.Leases.Put(ctx, claim, l)
	if err != nil {
		return hold, err
	}
	return s.start(ctx, x, claimed, fresh, claimedAt)
}

// start starts the claimed attempt. The claim already names the execution, so a confirmed start
// writes nothing more. claimedAt is when this delivery claimed the lane: an execution started
// before it was not started by this delivery.
func (s *Starter) start(ctx context.Context, x *msg, claimed lease.Lease, prev *lease.Lease, claimedAt time.Time) (verdict, error) {
	in := x.job.ExecutionInput(x.key.Lane, claimed.Attempt)
	in.Job.MessageID, in.Job.Receive = x.MessageId, x.receives()
	name := in.Job.ExecutionName()
	input := string(in.MustJSON())
	log := x.log.With("attempt", claimed.Attempt, "execution", name)
	out, err := s.SFN.StartExecution(ctx, &sfn.StartExecutionInput{StateMachineArn: &claimed.StateMachineArn, Name: &name, Input: &input})
	switch {
	case err == nil:
		// A second copy of the delivery whose claim this one replaced (Lambda may hand a batch over
		// twice; same receipt handle): that copy started the execution and counted it, maybe less
		// than clockSkew ago. (Were it to have stopped before its start, this one's start is not
		// counted: a count lost, never a job.)
		again := prev != nil && prev.Status == lease.Starting && prev.ReceiptHandle == x.ReceiptHandle
		if again || (out.StartDate != nil && out.StartDate.Before(claimedAt.Add(-clockSkew))) {
			// Step Functions answered with an execution started before this claim: same name and
			// input while it runs, so this message's own attempt.
			return s.alreadyRunning(ctx, x, claimed, prev, aws.ToString(out.ExecutionArn))
		}
	case isErr[*sfntypes.ExecutionAlreadyExists](err):
		return s.alreadyExists(ctx, x, claimed, prev, name)
	case permanentStartError(err):
		if prev != nil && prev.Status == lease.Starting {
			// This attempt was claimed before, so its execution may run: most often this is the
			// redelivery of a running job, and a refusal for good (StateMachineDeleting: a Standard
			// execution in a Wait state or a long task outlives its state machine's deletion until its
			// next transition) says nothing of that execution. Never dead-letter, and free the lane
			// of, a job that may be running. The claim this delivery just wrote is no measure of how
			// long ago the attempt was started: its first claim (StartedAt, kept by every claim of
			// the attempt) is.
			if v, err, decided := s.confirmSince(ctx, x, claimed, claimed.StartedAt); decided {
				return v, err
			}
		}
		log.ErrorContext(ctx, "state machine refused the start", "error", err)
		return s.refuse(ctx, x, &claimed, ReasonStartRefused, err.Error())
	case notStarted(err):
		s.giveBack(ctx, x, claimed, prev)
		return hold, fmt.Errorf("start execution %s: %w", name, err)
	default:
		// The start may have gone through (a timeout, a reset connection, a server error): keep the
		// claim unconfirmed, so the next delivery starts the same name and finds the execution.
		return hold, fmt.Errorf("start execution %s (outcome unknown; the claim is kept): %w", name, err)
	}
	waited := s.now().Sub(x.job.SubmittedAt)
	log.InfoContext(ctx, "started", "executionArn", aws.ToString(out.ExecutionArn), "waitedMs", waited.Milliseconds())
	s.Metrics.Add(x.key.Type, metrics.JobsStarted, 1)
	if claimed.Attempt == 1 { // from submission to the first start: the wait users feel
		s.Metrics.Observe(x.key.Type, metrics.StartLatency, float64(waited.Milliseconds()))
	}
	return hold, nil
}

// alreadyRunning handles a start answered with this message's execution, running since before the
// claim (or started by another copy of this delivery). With a lease before the claim (this attempt's
// own), it is the common redelivery of a job that outlived the queue's visibility timeout: the claim
// stored the new receipt handle, and that is all there is to do. (It is also how a start whose
// answer was lost but went through is found: the lease cannot tell the two apart without a write
// after every start, so that start is counted as held again, not as started.) Without one, no lease held the running attempt: the claim adopts it,
// unless this is a stale delivery (Lambda may hand a batch over twice) of a message whose release
// already deleted it while the execution was finishing: such a claim would hold the lane until the
// sweep.
func (s *Starter) alreadyRunning(ctx context.Context, x *msg, claimed lease.Lease, prev *lease.Lease, arn string) (verdict, error) {
	log := x.log.With("attempt", claimed.Attempt, "executionArn", arn)
	if prev != nil {
		if prev.ReceiptHandle == x.ReceiptHandle {
			log.InfoContext(ctx, "another copy of this delivery started the job (a batch handed over twice); holding its lane")
		} else {
			log.InfoContext(ctx, "job still running; holding its lane again with the new receipt handle")
		}
		s.Metrics.Add(x.key.Type, metrics.JobsHeldAgain, 1)
		return hold, nil
	}
	current, err := s.holdsMessage(ctx, x)
	if err != nil {
		return hold, err
	}
	if !current {
		return s.dropStale(ctx, x, claimed)
	}
	log.InfoContext(ctx, "execution was already running; holding the lane")
	return hold, nil
}

// alreadyExists handles a start whose name is taken: our own earlier start, or a duplicate job.
func (s *Starter) alreadyExists(ctx context.Context, x *msg, claimed lease.Lease, prev *lease.Lease, name string) (verdict, error) {
	if prev == nil {
		// The attempt ran, yet no lease held it: a duplicate message, a lease deleted by hand, or a
		// stale delivery of a message its release already deleted (Lambda may hand a batch over
		// twice). The last must not keep the claim it just wrote: no later delivery of a deleted
		// message would ever take it back, and the lane would wait for the sweep.
		current, err := s.holdsMessage(ctx, x)
		if err != nil {
			return hold, err
		}
		if !current {
			return s.dropStale(ctx, x, claimed)
		}
	}
	arn := job.ExecutionArn(claimed.StateMachineArn, name)
	d, err := s.SFN.DescribeExecution(ctx, &sfn.DescribeExecutionInput{ExecutionArn: &arn})
	if err != nil {
		// The claim stays unconfirmed: the next delivery looks again.
		return hold, fmt.Errorf("describe existing execution %s: %w", name, err)
	}
	var in job.ExecutionInput
	_ = json.Unmarshal([]byte(aws.ToString(d.Input)), &in)
	if in.Job.ID != x.job.ID || in.Job.Type != x.key.Type || in.Job.Redrive != x.job.Redrive {
		// Job names are built so that different jobs never share one; never drop a job for another's.
		x.log.ErrorContext(ctx, "execution name taken by another job", "execution", name, "holderJobId", in.Job.ID, "holderType", in.Job.Type)
		return s.refuse(ctx, x, &claimed, ReasonNameTaken, "execution "+name+" belongs to job "+in.Job.Type+"/"+in.Job.ID)
	}
	_, closed := releaser.OutcomeOf(string(d.Status))
	sameLane := in.Job.Lane == x.key.Lane
	// This message's own attempt: Step Functions keeps which message started it, so this holds
	// even when the lane's lease was deleted by hand after the attempt ended.
	sameMessage := in.Job.MessageID != "" && in.Job.MessageID == x.MessageId
	// Ours: still running in this lane (a start that answered with an error but went through), or
	// started by this very message. An execution that does not say which message started it (one
	// started by an older version) is also ours when it ended after a start this lane had claimed
	// but not confirmed. Anything else is a duplicate: above all an ended attempt another message
	// started, even when this message's own claim is left from a look that failed (a second copy
	// of a job bound twice by a duplicate delivery of its waiting message), which must never be
	// released a second time.
	unconfirmed := prev != nil && prev.Status == lease.Starting && in.Job.MessageID == ""
	ours := sameLane && (!closed || sameMessage || unconfirmed)
	if !ours {
		// Another message already ran (or runs) this job attempt: this one is a duplicate.
		s.Metrics.Add(x.key.Type, metrics.DuplicatesDropped, 1)
		x.log.WarnContext(ctx, "duplicate job: its execution already exists; dropping this copy",
			"execution", name, "status", d.Status, "executionLane", in.Job.Lane)
		if err := s.dropLease(ctx, x, claimed, prev); err != nil {
			return hold, err
		}
		return ack, nil
	}
	if closed && sameMessage {
		// This message's attempt ended without its lease (deleted by hand): later attempts of this
		// message may have run since, and the last of them decides, not this one (with maxAttempts
		// lowered meanwhile, this one could dead-letter the job while a later one still runs).
		last, _, err := s.lastOwnAttempt(ctx, x, claimed.StateMachineArn, claimed.Attempt+1)
		if err != nil {
			return hold, err
		}
		if last > 0 {
			later := claimed
			later.Attempt = last
			later.ExecutionArn = job.ExecutionArn(claimed.StateMachineArn, job.RunName(x.key.Type, x.job.ID, x.job.Redrive, last))
			written, err := s.Leases.Put(ctx, later, &claimed)
			if err != nil {
				return hold, err
			}
			x.log.InfoContext(ctx, "later attempts of this message ran; going on from the last", "attempt", last)
			v, err, _ := s.confirm(ctx, x, written)
			return v, err
		}
	}
	// The claim names this execution already (arn is its deterministic name): nothing to write.
	if outcome, closed := releaser.OutcomeOf(string(d.Status)); closed {
		return s.releaseEnded(ctx, x, claimed, outcome, d)
	}
	if prev != nil && prev.Status == lease.Starting {
		// This attempt's claim: a redelivery of a running job (Step Functions took its input
		// for another's: an emulator without StartExecution's idempotency, say).
		x.log.InfoContext(ctx, "job still running; holding its lane again with the new receipt handle", "execution", name)
		s.Metrics.Add(x.key.Type, metrics.JobsHeldAgain, 1)
		return hold, nil
	}
	x.log.InfoContext(ctx, "execution was already running; holding the lane", "execution", name, "executionArn", arn)
	return hold, nil
}

// maxOwnAttempts bounds how many attempts lastOwnAttempt looks at.
const maxOwnAttempts = 100

// lastOwnAttempt returns the last of the attempts from, from+1, ... whose executions on the state
// machine sm this message started in this lane, one after another; 0 when from has none.
func (s *Starter) lastOwnAttempt(ctx context.Context, x *msg, sm string, from int) (int, *sfn.DescribeExecutionOutput, error) {
	last, lastD := 0, (*sfn.DescribeExecutionOutput)(nil)
	for a := from; a < from+maxOwnAttempts; a++ {
		arn := job.ExecutionArn(sm, job.RunName(x.key.Type, x.job.ID, x.job.Redrive, a))
		d, err := s.SFN.DescribeExecution(ctx, &sfn.DescribeExecutionInput{ExecutionArn: &arn})
		if isErr[*sfntypes.ExecutionDoesNotExist](err) {
			return last, lastD, nil
		}
		if err != nil {
			return 0, nil, fmt.Errorf("describe execution %s of an earlier attempt: %w", arn, err)
		}
		var in job.ExecutionInput
		_ = json.Unmarshal([]byte(aws.ToString(d.Input)), &in)
		if in.Job.MessageID == "" || in.Job.MessageID != x.MessageId || in.Job.Lane != x.key.Lane ||
			in.Job.ID != x.job.ID || in.Job.Type != x.key.Type || in.Job.Redrive != x.job.Redrive {
			return last, lastD, nil
		}
		last, lastD = a, d
	}
	return last, lastD, nil
}

// confirm looks up the execution of an unconfirmed claim. decided is false when it does not exist
// (the start never went through), so the caller may go on as if the lane were free of it.
func (s *Starter) confirm(ctx context.Context, x *msg, l lease.Lease) (v verdict, err error, decided bool) {
	return s.confirmSince(ctx, x, l, l.UpdatedAt)
}

// confirmSince is confirm for a claim whose start may have been tried as early as since: an
// execution not found is believed missing only DescribeSettle after it.
func (s *Starter) confirmSince(ctx context.Context, x *msg, l lease.Lease, since time.Time) (v verdict, err error, decided bool) {
	name := job.RunName(l.Type, l.JobID, l.Redrive, l.Attempt)
	arn := s.Releaser.ExecutionArnOf(ctx, l)
	d, err := s.SFN.DescribeExecution(ctx, &sfn.DescribeExecutionInput{ExecutionArn: &arn})
	if isErr[*sfntypes.ExecutionDoesNotExist](err) {
		if age := s.now().Sub(since); age < DescribeSettle {
			// DescribeExecution is eventually consistent: an execution started a moment ago may not
			// be found yet. Look again later rather than take it for a start that never happened.
			x.log.InfoContext(ctx, "unconfirmed start not found yet; looking again shortly", "execution", name, "claimAgeMs", age.Milliseconds())
			return s.backoff(ctx, x.SQSMessage), nil, true
		}
		return hold, nil, false
	}
	if err != nil {
		return hold, fmt.Errorf("describe unconfirmed execution %s: %w", name, err), true
	}
	running := l
	running.Status, running.ExecutionArn = lease.Running, arn
	running.ReceiptHandle, running.MessageID, running.Receives = x.ReceiptHandle, x.MessageId, x.receives()
	written, err := s.Leases.Put(ctx, running, &l)
	if err != nil {
		return hold, err, true
	}
	if outcome, closed := releaser.OutcomeOf(string(d.Status)); closed {
		v, err := s.releaseEnded(ctx, x, written, outcome, d)
		return v, err, true
	}
	x.log.InfoContext(ctx, "unconfirmed start was running; holding its lane", "execution", name)
	return hold, nil, true
}

// ownAttempt looks, before a job leaves its lane (above its type's limit, or not bound in a type that
// caps keys), for the execution of its next attempt started by this very message in this lane. A
// lease deleted by hand leaves the job's attempts only in Step Functions (and the message's body
// counts none of them): a moved copy, a new message in another lane, would find that attempt and drop
// itself as a duplicate, so the job would be neither retried nor dead-lettered. Such an attempt is
// claimed again here and goes on from its outcome, one attempt per delivery, as in the job's own
// lane. decided is false when there is none: move the job.
func (s *Starter) ownAttempt(ctx context.Context, x *msg, l *lease.Lease, cfg config.TypeConfig) (v verdict, err error, decided bool) {
	next := x.job.Attempts + 1
	if l != nil {
		next = l.Attempt + 1
	}
	// The last of them decides: with maxAttempts lowered meanwhile, an earlier one could dead-letter
	// the job while a later one still runs.
	attempt, d, err := s.lastOwnAttempt(ctx, x, cfg.StateMachineArn, next)
	if err != nil {
		return hold, err, true
	}
	if attempt == 0 {
		return hold, nil, false // none (another message's is the moved copy's duplicate): move
	}
	if outcome, closed := releaser.OutcomeOf(string(d.Status)); closed && outcome == releaser.Failed && attempt < cfg.MaxAttempts {
		// Failed with attempts left: its retry is a new start, which the job may make only where it
		// goes (its key's group counts its cap), so it moves, with the attempts it made. Retried
		// here, a lane it is not bound to would run it over its key's cap (issue 22, defect 2).
		x.job.Attempts = attempt
		return hold, nil, false
	}
	arn := job.ExecutionArn(cfg.StateMachineArn, job.RunName(x.key.Type, x.job.ID, x.job.Redrive, attempt))
	claim := lease.Lease{
		Type: x.key.Type, Lane: x.key.Lane, JobID: x.job.ID, JobKey: x.job.Key, Batch: x.job.Batch, MessageID: x.MessageId, ReceiptHandle: x.ReceiptHandle, Receives: x.receives(),
		Attempt: attempt, Redrive: x.job.Redrive, Status: lease.Starting, StartedAt: s.now(), SubmittedAt: x.job.SubmittedAt,
		StateMachineArn: cfg.StateMachineArn, ExecutionArn: arn,
	}
	claimed, err := s.Leases.Put(ctx, claim, l)
	if err != nil {
		return hold, err, true
	}
	x.log.InfoContext(ctx, "lane the job must leave holds an attempt of this message; going on from it", "attempt", attempt)
	return s.confirm(ctx, x, claimed)
}

// redelivered handles a message that came back while its execution runs (it outlived the
// visibility timeout) or after it ended without a release.
func (s *Starter) redelivered(ctx context.Context, x *msg, l lease.Lease) (verdict, error) {
	fresh := l
	fresh.ReceiptHandle, fresh.MessageID, fresh.Receives = x.ReceiptHandle, x.MessageId, x.receives()
	written, err := s.Leases.Put(ctx, fresh, &l)
	if err != nil {
		return hold, err
	}
	arn := s.Releaser.ExecutionArnOf(ctx, l)
	d, err := s.SFN.DescribeExecution(ctx, &sfn.DescribeExecutionInput{ExecutionArn: &arn})
	if err != nil {
		return hold, fmt.Errorf("describe execution %s: %w", arn, err)
	}
	if outcome, closed := releaser.OutcomeOf(string(d.Status)); closed {
		return s.releaseEnded(ctx, x, written, outcome, d)
	}
	x.log.InfoContext(ctx, "job still running; holding its lane again with the new receipt handle", "attempt", l.Attempt)
	s.Metrics.Add(x.key.Type, metrics.JobsHeldAgain, 1)
	return hold, nil
}

func (s *Starter) releaseEnded(ctx context.Context, x *msg, l lease.Lease, outcome releaser.Outcome, d *sfn.DescribeExecutionOutput) (verdict, error) {
	current, err := s.holdsMessage(ctx, x)
	if err != nil {
		return hold, err
	}
	if !current {
		// Acting on the attempt would count its outcome twice, or leave a retrying lease for a
		// message that no longer exists, holding the lane for good.
		return s.dropStale(ctx, x, l)
	}
	res, err := s.Releaser.Release(ctx, releaser.Request{
		Key: l.Key(), JobID: l.JobID, Redrive: l.Redrive, Attempt: l.Attempt, Outcome: outcome,
		Error: aws.ToString(d.Error), Cause: aws.ToString(d.Cause), Source: "starter",
	})
	if err != nil {
		return hold, err
	}
	x.log.InfoContext(ctx, "execution had ended without a release; released it", "status", d.Status, "result", res)
	if res == releaser.Retried {
		return hold, nil // visible again already; reporting it keeps Lambda from deleting it
	}
	return ack, nil
}

// laneHeld handles a message whose lane another job's lease holds. On AWS the FIFO group makes this
// rare (a release interrupted between deleting its message and its lease); the check is what keeps
// the limit when a queue hands out two messages of one group.
func (s *Starter) laneHeld(ctx context.Context, x *msg, other lease.Lease) (verdict, error) {
	if other.Status == lease.Bound && !s.stale(other) {
		// The lane is bound to another job, whose copy is behind this message in the lane's group:
		// this one must not block it. It goes back to wait (a job routed here before its type moved
		// to first-free, or a copy whose bind was taken back).
		return s.rewait(ctx, x)
	}
	// A claim (starting) names its execution and is most often a running job: it is looked up like
	// a running lease, never taken back while its execution runs.
	started := other.Status == lease.Starting || other.Status == lease.Running || other.Status == lease.DeadLettering
	if started && other.ExecutionArn != "" {
		d, err := s.SFN.DescribeExecution(ctx, &sfn.DescribeExecutionInput{ExecutionArn: &other.ExecutionArn})
		switch {
		case other.Status == lease.Starting && isErr[*sfntypes.ExecutionDoesNotExist](err):
			// The claim's start never went through, or went through a moment ago and is not
			// visible yet (DescribeExecution is eventually consistent): only a claim older than
			// both StaleAfter and DescribeSettle has no message left to come back for it.
			if s.stale(other) && s.now().Sub(other.UpdatedAt) >= DescribeSettle {
				return s.takeBack(ctx, x, other)
			}
		case err != nil:
			return hold, fmt.Errorf("describe execution %s holding lane %s: %w", other.ExecutionArn, x.key, err)
		default:
			if outcome, closed := releaser.OutcomeOf(string(d.Status)); closed {
				if _, err := s.Releaser.Release(ctx, releaser.Request{
					Key: other.Key(), JobID: other.JobID, Redrive: other.Redrive, Attempt: other.Attempt, Outcome: outcome,
					Error: aws.ToString(d.Error), Cause: aws.ToString(d.Cause), Source: "starter",
				}); err != nil {
					return hold, err
				}
				return hold, lease.ErrConflict // look at the lane again
			}
		}
	} else if s.stale(other) {
		return s.takeBack(ctx, x, other)
	}
	if s.HandoverWait > 0 && (other.Status == lease.Running || other.Status == lease.Starting) {
		// On AWS the lane's next message is delivered the moment the release deletes the message
		// before it, and the release deletes that job's lease a round trip later: wait for it
		// briefly rather than back off for seconds.
		if s.awaitHandover(ctx, x, other) {
			return hold, lease.ErrConflict // look at the lane again
		}
	}
	x.log.InfoContext(ctx, "lane held by another job; trying again shortly", "holder", other.JobID)
	return s.backoff(ctx, x.SQSMessage), nil
}

// takeBack deletes another job's stale lease, and has the lane looked at again.
func (s *Starter) takeBack(ctx context.Context, x *msg, other lease.Lease) (verdict, error) {
	x.log.WarnContext(ctx, "taking back a lane left by a job whose message is gone", "staleJobId", other.JobID, "status", other.Status)
	if err := s.Leases.Delete(ctx, other); err != nil {
		return hold, err
	}
	return hold, lease.ErrConflict
}

// stale reports whether another job's lease without a running execution has sat untouched for longer
// than StaleAfter: its message, if it still existed, would have come back and refreshed it.
func (s *Starter) stale(l lease.Lease) bool {
	return l.Stale(s.now(), s.StaleAfter)
}

// rewait sends a job that reached a lane bound to another job back to its type's waiting group.
func (s *Starter) rewait(ctx context.Context, x *msg) (verdict, error) {
	cfg, err := s.Config.Get(ctx, x.key.Type)
	if errors.Is(err, config.ErrUnknownType) {
		return s.refuse(ctx, x, nil, string(job.ReasonUnknownType), err.Error())
	}
	if err != nil {
		return hold, err
	}
	j := x.job
	if x.receives() != 1 {
		// Received before: this message may have made attempts in this lane whose lease was taken
		// back (its deliveries stopped for longer than the sweep's StaleAfter). They live in Step
		// Functions only; the job goes on from the last, never from its body's count, which would
		// take its own earlier attempt for a duplicate's and drop the job.
		last, d, err := s.lastOwnAttempt(ctx, x, cfg.StateMachineArn, j.Attempts+1)
		if err != nil {
			return hold, err
		}
		if last > 0 {
			outcome, closed := releaser.OutcomeOf(string(d.Status))
			switch {
			case !closed:
				x.log.WarnContext(ctx, "an attempt of this message still runs in a lane bound to another job; trying again shortly", "attempt", last)
				return s.backoff(ctx, x.SQSMessage), nil
			case outcome == releaser.Succeeded:
				// Its success is counted by the release (or the sweep) that ended its lease; this
				// is most often a stale copy of a delivery that release already acted on.
				// No lease of it is left, so no release counts it in its batch: count it here, before
				// its message goes (a duplicate if a release did).
				if err := s.Releaser.BatchEnded(ctx, lease.Lease{Type: x.key.Type, JobID: j.ID, Batch: j.Batch, Redrive: j.Redrive}, batch.Succeeded); err != nil {
					return hold, err
				}
				x.log.InfoContext(ctx, "this message's last attempt succeeded; nothing left to run", "attempt", last)
				return ack, nil
			}
			j.Attempts = last
		}
	}
	v, err := s.sendTo(ctx, x, j, job.WaitingLane, cfg)
	if err != nil {
		return v, err
	}
	x.log.InfoContext(ctx, "lane bound to another job; this one waits again for a free lane", "attempts", j.Attempts)
	s.Metrics.Add(x.key.Type, metrics.JobsMoved, 1)
	return v, nil
}

// awaitHandover re-reads a lane's lease for up to HandoverWait and reports whether it changed.
func (s *Starter) awaitHandover(ctx context.Context, x *msg, other lease.Lease) bool {
	deadline := time.Now().Add(s.HandoverWait)
	for {
		wait := min(50*time.Millisecond, time.Until(deadline))
		if wait <= 0 {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(wait):
		}
		cur, err := s.Leases.Get(ctx, x.key)
		if err != nil {
			return false
		}
		if cur == nil || cur.Version != other.Version {
			x.log.InfoContext(ctx, "the lane's holder released it while we waited", "holder", other.JobID)
			return true
		}
	}
}

// move sends a job waiting in a lane above its type's limit (the limit was lowered) back to its
// type's waiting group (first-free) or to a lane within the limit (random): the job's lease here
// first, then the copy, then the original, so the job is never lost. The lease goes before the copy
// exists: a waiting copy that finds its job's lease takes itself for a duplicate and is dropped (a
// copy is delivered as soon as it is sent, and a move may stop after the send). A move that stops
// after the lease went leaves the original, which comes back to a free lane and finds the attempts it
// made in Step Functions (ownAttempt), as after a lease deleted by hand.
func (s *Starter) move(ctx context.Context, x *msg, l *lease.Lease, cfg config.TypeConfig, why string) (verdict, error) {
	j := x.job
	if l != nil {
		made := l.Attempt // attempts made so far travel with the job (a bound lease's are the job's)
		if l.Status == lease.Starting {
			made-- // confirm found no execution of this claim: the attempt was never made
		}
		j.Attempts = max(j.Attempts, made) // the body's count may be ownAttempt's, from Step Functions
	}
	to := job.WaitingLane
	if cfg.Strategy != lane.FirstFree {
		var err error
		if to, err = s.Lanes.Choose(ctx, j, cfg.Limit); err != nil {
			return hold, err
		}
	}
	if l != nil {
		if err := s.Leases.Delete(ctx, *l); err != nil {
			return hold, err // changed meanwhile (read it again) or not deleted (try again shortly)
		}
	}
	if _, err := s.sendTo(ctx, x, j, to, cfg); err != nil {
		return hold, fmt.Errorf("move job: %w", err)
	}
	if _, err := s.Queue.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: &s.QueueURL, ReceiptHandle: &x.ReceiptHandle}); err != nil {
		x.log.WarnContext(ctx, "moved job's original message not deleted; the copy is a duplicate the starter will drop", "error", err)
	}
	x.log.InfoContext(ctx, why, "toLane", to, "limit", cfg.Limit)
	s.Metrics.Add(x.key.Type, metrics.JobsMoved, 1)
	return ack, nil
}

// refuse dead-letters a job that can never start, then frees its lease. The dead letter carries the
// next redrive generation, as the releaser's do: the job may have started executions under this
// generation's names (attempts before a config reset, a start whose answer was lost), and a redrive
// must neither find them nor be dropped by SQS as a copy of this run (docs/design.md, "Redrive").
func (s *Starter) refuse(ctx context.Context, x *msg, l *lease.Lease, reason, cause string) (verdict, error) {
	body, _ := json.Marshal(x.job.Resubmission(x.job.Redrive + 1))
	if err := s.DLQ.Send(ctx, deadletter.Entry{Reason: reason, Source: "starter", Type: x.job.Type, JobID: x.job.ID, Cause: cause, Body: string(body),
		Batch: x.job.Batch, Redrive: x.job.Redrive}); err != nil {
		return hold, err
	}
	x.log.WarnContext(ctx, "job dead-lettered", "reason", reason, "cause", cause)
	if l != nil {
		if err := s.freeLane(ctx, *l); err != nil && !errors.Is(err, lease.ErrConflict) {
			return ack, err
		}
	}
	return ack, nil
}

// freeLane deletes a lease and wakes a parked waiting group of its type, as a release does: a group
// parked while the lane was taken would otherwise wait out its park with the lane free.
func (s *Starter) freeLane(ctx context.Context, l lease.Lease) error {
	if err := s.Leases.Delete(ctx, l); err != nil {
		return err
	}
	s.Releaser.Wake(ctx, l.Type)
	return nil
}

// giveBack undoes a claim after a failed start: a fresh claim is deleted, an earlier lease restored.
// A claim of a bound lane restores the bind: the lane stays this job's while it backs off, rather
// than go to the next waiting job and send this one back to the end of its waiting group.
func (s *Starter) giveBack(ctx context.Context, x *msg, claimed lease.Lease, prev *lease.Lease) {
	var err error
	switch {
	case prev == nil && x.bound != nil:
		_, err = s.Leases.Put(ctx, *x.bound, &claimed)
	case prev == nil:
		err = s.Leases.Delete(ctx, claimed)
	default:
		back := *prev
		// The lease goes on with this delivery's handle, and so with its receive count: a late copy
		// of an earlier delivery must find the lease newer than itself (withLease), not put back a
		// handle SQS no longer honours.
		back.ReceiptHandle, back.MessageID, back.Receives = claimed.ReceiptHandle, claimed.MessageID, claimed.Receives
		_, err = s.Leases.Put(ctx, back, &claimed)
	}
	if err != nil {
		x.log.WarnContext(ctx, "could not give the lease back; the next delivery takes it over", "error", err)
	}
}

// dropLease removes the claim of a duplicate message, which is acknowledged: a fresh claim goes, and
// so does an earlier claim of this same message (nothing would ever release it once the message is
// deleted); another message's lease of the same job stays as it was.
func (s *Starter) dropLease(ctx context.Context, x *msg, claimed lease.Lease, prev *lease.Lease) error {
	if prev != nil && prev.MessageID != x.MessageId {
		_, err := s.Leases.Put(ctx, *prev, &claimed)
		return err
	}
	return s.freeLane(ctx, claimed)
}

// backoff makes a message visible again after a short, jittered delay and holds it meanwhile.
func (s *Starter) backoff(ctx context.Context, m events.SQSMessage) verdict {
	d := s.RetryDelay
	if d <= 0 {
		d = 5 * time.Second
	}
	d += time.Duration(s.jitter(int64(d))) // jitter up to 2x, so throttled starts spread out
	s.setVisibility(ctx, m, int32(d.Round(time.Second)/time.Second))
	return hold
}

// returnAll makes messages visible again at once, ten to a call.
func (s *Starter) returnAll(ctx context.Context, ms []events.SQSMessage) {
	for start := 0; start < len(ms); start += 10 {
		chunk := ms[start:min(start+10, len(ms))]
		entries := make([]sqstypes.ChangeMessageVisibilityBatchRequestEntry, len(chunk))
		for i, m := range chunk {
			entries[i] = sqstypes.ChangeMessageVisibilityBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(m.ReceiptHandle)}
		}
		out, err := s.Queue.ChangeMessageVisibilityBatch(ctx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: &s.QueueURL, Entries: entries})
		if err == nil && len(out.Failed) > 0 {
			err = fmt.Errorf("%d of %d failed: %s", len(out.Failed), len(entries), aws.ToString(out.Failed[0].Message))
		}
		if err != nil {
			s.Log.WarnContext(ctx, "could not return later messages of a group; they return after the queue's visibility timeout", "error", err)
		}
		for _, m := range chunk {
			s.Log.InfoContext(ctx, "later message of a group in one batch; returned to the queue",
				"messageId", m.MessageId, "group", m.Attributes["MessageGroupId"])
		}
	}
}

// dropStale drops a stale delivery: Lambda's event source may hand a batch over twice, and this
// message was deleted (its job released) or received again since, or it is visible again. The lease
// this delivery wrote goes (unless changed since); a current delivery, if there is one, finds the
// attempt in Step Functions as it would after any deleted lease. The delivery is held, never
// acknowledged (see holdsMessage): a deleted message stays deleted, one still in the queue is
// received again and goes on.
func (s *Starter) dropStale(ctx context.Context, x *msg, written lease.Lease) (verdict, error) {
	if written.Status == lease.DeadLettering {
		// The job still owes its one dead letter, and this lease is its only record: the release
		// that wrote it sends it, or the sweep takes it over (releaser.DeadLetterTakeover).
		x.log.InfoContext(ctx, "stale delivery of a job being dead-lettered; its lease is left to the release", "attempt", written.Attempt)
		return hold, nil
	}
	if err := s.freeLane(ctx, written); err != nil && !errors.Is(err, lease.ErrConflict) {
		return hold, err
	}
	x.log.InfoContext(ctx, "stale delivery of a message already released, received again or visible again; dropped", "attempt", written.Attempt)
	s.Metrics.Add(x.key.Type, metrics.DuplicatesDropped, 1)
	return hold, nil
}

// releaseGrace is how long, in seconds, a message whose delivery acts on an ended attempt stays
// invisible while that release runs: the release deletes it or makes it visible at once, and if it
// stops midway the message comes back after this and the release is tried again.
const releaseGrace = 60

// holdsMessage reports whether this delivery's receipt handle is still its message's current one:
// the message was neither deleted nor received again since. SQS refuses ChangeMessageVisibility with
// any other handle ("The receipt handle has expired", MessageNotInflight).
//
// A refusal does not say the message is gone: MessageNotInflight also answers a message whose
// visibility timeout ran out during this invocation and that no receive has taken yet ("the
// specified message isn't in flight", SQS API reference, ChangeMessageVisibility; FifoVisibilityTimeout
// may be as short as the starter's timeout). Its handle is then still the latest, so a delivery
// that does not hold its message is never acknowledged: Lambda's event source would delete the
// message with it, and a failed attempt would be neither retried nor dead-lettered.
func (s *Starter) holdsMessage(ctx context.Context, x *msg) (bool, error) {
	return s.holdsMessageFor(ctx, x, releaseGrace)
}

// holdsMessageFor is holdsMessage, leaving the message invisible for seconds when it holds it.
func (s *Starter) holdsMessageFor(ctx context.Context, x *msg, seconds int32) (bool, error) {
	_, err := s.Queue.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
		QueueUrl: &s.QueueURL, ReceiptHandle: &x.ReceiptHandle, VisibilityTimeout: seconds,
	})
	switch {
	case err == nil:
		return true, nil
	case releaser.IsStaleHandle(err):
		return false, nil
	}
	return false, fmt.Errorf("check that message %s is still this delivery's: %w", x.MessageId, err)
}

func (s *Starter) setVisibility(ctx context.Context, m events.SQSMessage, seconds int32) {
	if _, err := s.Queue.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
		QueueUrl: &s.QueueURL, ReceiptHandle: &m.ReceiptHandle, VisibilityTimeout: seconds,
	}); err != nil {
		s.Log.WarnContext(ctx, "could not change message visibility; it returns after the queue's visibility timeout",
			"messageId", m.MessageId, "error", err)
	}
}

func (s *Starter) now() time.Time {
	if s.Now != nil {
		return s.Now().UTC()
	}
	return time.Now().UTC()
}

// notStarted reports errors after which the execution certainly does not exist: throttling and
// other requests refused as the caller's fault.
func notStarted(err error) bool {
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		return false
	}
	return ae.ErrorFault() == smithy.FaultClient || ae.ErrorCode() == "ThrottlingException"
}

func permanentStartError(err error) bool {
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		return false
	}
	switch ae.ErrorCode() {
	// ValidationException: a field failed its constraints (the input over 256 KiB, say); the same
	// request is refused the same way on every try.
	case "InvalidArn", "InvalidName", "InvalidExecutionInput", "StateMachineDoesNotExist", "StateMachineDeleting", "ValidationException":
		return true
	}
	return false
}

func isErr[T error](err error) bool {
	var t T
	return errors.As(err, &t)
}
