// Package releaser frees a lane when its job's execution ends: on success it deletes the job's message
// with the latest receipt handle; on failure it makes the message visible again for another attempt,
// or, when attempts are exhausted, dead-letters the job and deletes the message. The lease goes last.
// A release is idempotent: a second release of the same job attempt finds nothing left to do.
package releaser

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sfn"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"

	"github.com/sfnlimit/sfnlimit/internal/lambda/batch"
	"github.com/sfnlimit/sfnlimit/internal/lambda/batchend"
	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/lambda/deadletter"
	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
	"github.com/sfnlimit/sfnlimit/internal/lambda/metrics"
	"github.com/sfnlimit/sfnlimit/internal/lambda/waitroom"
)

// Outcome is how an attempt ended.
type Outcome string

const (
	Succeeded Outcome = "succeeded"
	Failed    Outcome = "failed"
	// Aborted is an execution stopped from outside: an operator's decision, so it is not retried.
	Aborted Outcome = "aborted"
)

// Reasons on dead letters written by the releaser.
const (
	ReasonAborted = "aborted"
)

// Request asks to release one job attempt's lane.
type Request struct {
	Key   lease.Key
	JobID string
	// JobKey is the job's key ("" the default key): a job is its type, key and id, and a release
	// of one key's job never frees another key's job of the same id.
	JobKey string
	// JobSender is the job's sender ("" for a job routed before senders were part of a job's
	// identity): a release of one sender's job never frees another's of the same type, key and id.
	JobSender string
	Redrive   int
	Attempt   int
	Outcome   Outcome
	Error     string
	Cause     string
	Source    string // workflow, status-event, sweep, starter
	// ExecutionArn is the execution that ended, when the caller has it from outside the lease (a
	// status event, or the workflow's Release step, which sends $$.Execution.Id): a lease that names
	// another execution of the job's attempt is not released. Any execution whose input carries the
	// job's metadata sends status events, and may call the releaser, such as a nested workflow the
	// job's workflow starts with its own input, while the job's own execution runs.
	ExecutionArn string
	// MessageID is the lanes-queue message that started the execution, from its input ("" when the
	// caller has no input, or the execution's starter was older): a claim of the same attempt by
	// another message is a duplicate copy's (its job bound twice), whose outcome the first copy's
	// release acted on already.
	MessageID string
}

// Result says what a release did.
type Result string

const (
	Deleted      Result = "deleted"       // succeeded: message and lease removed
	Retried      Result = "retried"       // failed with attempts left: message visible again
	DeadLettered Result = "dead-lettered" // failed for good: job on the dead-letter queue
	Noop         Result = "noop"          // nothing to release (already released, or another attempt holds the lane)
)

type leaseStore interface {
	Get(ctx context.Context, k lease.Key) (*lease.Lease, error)
	// ListType reads a type's leases (consistently): a wake-up counts each key's running jobs.
	ListType(ctx context.Context, typ string) ([]lease.Lease, error)
	Put(ctx context.Context, next lease.Lease, prev *lease.Lease) (lease.Lease, error)
	Delete(ctx context.Context, prev lease.Lease) error
}

type queueAPI interface {
	DeleteMessage(context.Context, *sqs.DeleteMessageInput, ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error)
	ChangeMessageVisibility(context.Context, *sqs.ChangeMessageVisibilityInput, ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error)
}

type describer interface {
	DescribeExecution(context.Context, *sfn.DescribeExecutionInput, ...func(*sfn.Options)) (*sfn.DescribeExecutionOutput, error)
}

type configGetter interface {
	Get(ctx context.Context, typ string) (config.TypeConfig, error)
	All(ctx context.Context) ([]config.TypeConfig, error)
	MaxAttempts(ctx context.Context, typ string) (int, error)
	// Members are the types of a pool: a release in a pool wakes any member's parked jobs.
	Members(ctx context.Context, pool string) ([]config.TypeConfig, error)
}

type deadLetterer interface {
	Send(ctx context.Context, e deadletter.Entry) error
}

// Service releases lanes.
type Service struct {
	Leases   leaseStore
	Queue    queueAPI
	QueueURL string
	SFN      describer
	Config   configGetter
	DLQ      deadLetterer
	// WaitRoom holds first-free jobs parked while every lane was taken: a release that frees a
	// lane wakes the oldest.
	WaitRoom parkedJobs
	// Pools reads the slots of shared pools: a release of a pooled type's job frees its slots (by
	// deleting its lease) and wakes the pool's members fairly (wakePool); the sweep gives a slot to
	// a running job that holds none (adoptRunning).
	Pools slotTaker
	Log   *slog.Logger
	// Now is the clock leases are judged by (time.Now when nil).
	Now func() time.Time
	// Metrics receives JobsSucceeded, JobsRetried and JobsDeadLettered per type (nil: none). Whoever
	// invokes the service flushes it.
	Metrics *metrics.Recorder
	// PriorityAging is how long a parked head waits before it ranks one priority higher
	// (config.DefaultPriorityAging when 0): the bound on starvation by higher priorities.
	PriorityAging time.Duration
	// Batches records a succeeded job in its batch (nil: not tracked). Dead letters are recorded
	// by the DLQ sender (batchend.DeadLetters).
	Batches batchEnder
	// Rates takes back the start tokens of a bound lease freed before its copy claimed it (nil:
	// none; refund.go).
	Rates tokenRefunder
}

// batchEnder records a job's end in its batch (internal/lambda/batchend).
type batchEnder interface {
	EndedAs(ctx context.Context, e batchend.End) (batch.Outcome, error)
}

// BatchEnded records in its batch the end of the job l names (type, key, id, batch, redrive): a release's,
// or one found by someone else than a release, such as the starter acknowledging a message whose last
// attempt succeeded after its lease was gone. A duplicate of an end already recorded changes nothing.
func (s *Service) BatchEnded(ctx context.Context, l lease.Lease, outcome batch.Outcome) error {
	_, err := s.batchEnded(ctx, l, outcome)
	return err
}

// batchEnded is BatchEnded, and says which outcome the batch counts the job with ("" when it has no
// batch): outcome, or the one an earlier end of it was counted with, which stands.
func (s *Service) batchEnded(ctx context.Context, l lease.Lease, outcome batch.Outcome) (batch.Outcome, error) {
	if s.Batches == nil || l.Batch == "" {
		return "", nil
	}
	return s.Batches.EndedAs(ctx, batchend.End{Batch: l.Batch, Type: l.Type, Key: l.JobKey, ID: l.JobID, Redrive: l.Redrive, Outcome: outcome})
}

// parkedJobs are the parked waiting groups of a type (internal/lambda/waitroom): a wake-up lists
// them and claims the one it wakes, removing its record, which it puts back if the head was not
// made visible.
type parkedJobs interface {
	List(ctx context.Context, typ string) ([]waitroom.Waiter, error)
	Claim(ctx context.Context, w waitroom.Waiter) (bool, error)
	Restore(ctx context.Context, w waitroom.Waiter) error
}

// maxRounds bounds how often a release re-reads a lease that changed under it (the starter refreshing
// the receipt handle of a redelivered message).
const maxRounds = 5

// Release carries out req. It returns an error only when the release could not be completed and
// should be retried by its caller.
func (s *Service) Release(ctx context.Context, req Request) (Result, error) {
	log := s.Log.With("jobId", req.JobID, "type", req.Key.Type, "lane", req.Key.Lane, "attempt", req.Attempt, "source", req.Source)
	dead := false // the dead letter is sent at most once per call, however often the lease moves under us
	for round := 0; round < maxRounds; round++ {
		l, err := s.Leases.Get(ctx, req.Key)
		if err != nil {
			return "", err
		}
		// A bound lease has no execution yet, nor has a moving one left: a release that finds one is
		// a late one of an attempt made before the job came back to wait (or went back to it).
		if l == nil || !l.Holds(req.JobSender, req.JobKey, req.JobID, req.Redrive) || l.Attempt != req.Attempt || l.Status == lease.Bound || l.Status == lease.Moving {
			log.InfoContext(ctx, "nothing to release")
			return Noop, nil
		}
		if named := namedExecution(*l); req.ExecutionArn != "" && named != "" && named != req.ExecutionArn {
			log.InfoContext(ctx, "release of another execution than the lease's (a nested workflow with the job's input); nothing to release", "executionArn", req.ExecutionArn, "leaseExecutionArn", named)
			return Noop, nil
		}
		var res Result
		if req.MessageID != "" && l.MessageID != req.MessageID && l.Status == lease.Starting {
			res, err = s.dropDuplicate(ctx, log, *l)
		} else {
			res, err = s.releaseLease(ctx, log, req, *l, &dead)
		}
		if errors.Is(err, lease.ErrConflict) || errors.Is(err, errStaleHandle) {
			log.InfoContext(ctx, "lease changed during release; reading it again", "round", round+1)
			continue
		}
		if err != nil {
			return "", err
		}
		log.InfoContext(ctx, "released", "result", res, "outcome", req.Outcome, "key", l.JobKey)
		return res, nil
	}
	return "", fmt.Errorf("release job %s in lane %s: lease kept changing after %d rounds", req.JobID, req.Key, maxRounds)
}

var errStaleHandle = errors.New("receipt handle is stale")

// dropDuplicate frees the claim of a duplicate copy of a job, whose attempt another message ran: the
// copy's message and lease go, and the attempt's outcome is left to that message's own release,
// which acted on it (or acts on it: it is not this lane's).
func (s *Service) dropDuplicate(ctx context.Context, log *slog.Logger, l lease.Lease) (Result, error) {
	if err := s.deleteMessage(ctx, l); err != nil {
		return "", err
	}
	if err := s.Free(ctx, l); err != nil {
		return "", err
	}
	log.WarnContext(ctx, "the lane's claim is a duplicate copy's of an attempt another message ran; dropped it", "messageId", l.MessageID)
	s.Metrics.Add(l.Type, metrics.DuplicatesDropped, 1)
	return Deleted, nil
}

// Free deletes a lease whose job ended or is gone, gives back the start tokens of a bound lease's
// bind (refundBind), and wakes the oldest parked waiting group of its type for the lane: the one way
// a lane is given back, whoever gives it (a release, the sweep taking a stale lease back, the starter
// dropping a claim or dead-lettering a job it refused).
func (s *Service) Free(ctx context.Context, l lease.Lease) error {
	if err := s.Leases.Delete(ctx, l); err != nil {
		return err
	}
	log := s.Log.With("type", l.Type, "lane", l.Lane, "freedFor", l.JobID)
	s.refundBind(ctx, log, l)
	s.wakeFreed(ctx, log, l)
	return nil
}

func (s *Service) releaseLease(ctx context.Context, log *slog.Logger, req Request, l lease.Lease, dead *bool) (Result, error) {
	if l.Status == lease.DeadLettering {
		// The attempt's failure was decided, whatever this release saw: a workflow may end SUCCEEDED
		// after its ReleaseFailed step, and an execution may be redriven to success by hand.
		if !*dead && s.now().Sub(l.UpdatedAt) < DeadLetterTakeover {
			// Another release of this attempt (workflow, status event, sweep, starter) won the
			// dead-lettering and sends the dead letter: one dead letter, not two.
			log.InfoContext(ctx, "another release is dead-lettering this job")
			return Noop, nil
		}
		// Ours, re-read after the lease moved under us; or left by a release that stopped before it
		// finished, which may or may not have sent the dead letter: finish it (at least once). No
		// other release would: every later one of an execution that ended SUCCEEDED is a success.
		return s.deadLetter(ctx, log, req, l, dead, "", false)
	}
	ended := JobEnd(req.Outcome, req.Error)
	if ended != "" && l.Status == lease.Retrying {
		return Noop, nil // a failure of this attempt was already acted on
	}
	if ended != "" {
		// Counted in its batch before its message goes: a crash between leaves the lease for the
		// next release, which the batch takes for a duplicate. Once the message is gone, a later
		// copy of the job in the lane is delivered and may take the running attempt over, and the
		// next release drops its claim as a duplicate's (dropDuplicate), counting nothing: the
		// count must already be made.
		counted, err := s.batchEnded(ctx, l, ended)
		if err != nil {
			return "", err
		}
		// An earlier release of the attempt counted it otherwise and stopped before it acted (its
		// completion event unsent, say): that count stands, and the job ends as it says. A
		// workflow's Release step that decided the last attempt failed, then a newer job's stop
		// (the overflow rule cancel) or an execution ending SUCCEEDED after its failed Release step:
		// the job is dead-lettered, as the batch and its completion event say.
		switch counted {
		case "", batch.Succeeded, batch.Cancelled:
			ended = cmp.Or(counted, ended)
		default:
			ended = "" // dead-lettered
		}
	}
	if ended != "" {
		if err := s.deleteMessage(ctx, l); err != nil {
			return "", err
		}
		if err := s.Free(ctx, l); err != nil {
			return "", err
		}
		if !l.Reclaimed { // counted by the release that freed its lease before (lease.Lease.Reclaimed)
			s.Metrics.Add(req.Key.Type, endMetric[ended], 1)
		}
		if ended == batch.Cancelled {
			log.InfoContext(ctx, "job cancelled by a newer job of its key (overflow rule cancel)", "key", l.JobKey, "cause", req.Cause)
		}
		return Deleted, nil
	}

	if l.Status == lease.Retrying {
		// Decided before, perhaps interrupted before the message was made visible: finish it.
		return Retried, s.makeVisible(ctx, l)
	}
	maxAttempts := 0
	if req.Outcome == Failed {
		var err error
		if maxAttempts, err = s.Config.MaxAttempts(ctx, req.Key.Type); err != nil {
			// Never read the type's attempts (a cold container, the table throttled): retried,
			// not decided on the deployment's count, which an override may have raised.
			return "", err
		}
	}
	// The attempt's fate is one conditional write: retrying (failed with attempts left) or
	// dead-lettering (attempts exhausted, or aborted). Several releases of one attempt may race (the
	// workflow's step, the status event, the sweep, the starter): the write elects the one that acts;
	// the others find the new status when they read the lease again.
	retry := req.Outcome == Failed && l.Attempt < maxAttempts
	next := l
	next.Status = lease.Retrying
	body := ""
	if retry {
		next.ExecutionArn = ""
	} else {
		// The dead letter's body is read first: it comes from the execution's input, and
		// DescribeExecution may fail (it is eventually consistent, and throttled like any call).
		// Failing before the status changes leaves the lease as it was, so this release's retry, or
		// any other, goes on at once; failing after it would leave a dead-lettering lease every
		// other release must leave alone until DeadLetterTakeover, with the lane held that long.
		var err error
		if body, err = s.submission(ctx, l); err != nil {
			return "", err
		}
		// Likewise the job's end in its batch, and the batch's completion event when it closes it:
		// they can fail (EventBridge, the ledger's own contention), so they come before the status
		// change, and the dead letter does not record the job again.
		if err := s.BatchEnded(ctx, l, batch.DeadLettered); err != nil {
			return "", err
		}
		next.Status = lease.DeadLettering
	}
	written, err := s.Leases.Put(ctx, next, &l)
	if err != nil {
		return "", err
	}
	if retry {
		log.InfoContext(ctx, "attempt failed; job will run again", "error", req.Error, "maxAttempts", maxAttempts)
		s.Metrics.Add(req.Key.Type, metrics.JobsRetried, 1)
		return Retried, s.makeVisible(ctx, written)
	}
	return s.deadLetter(ctx, log, req, written, dead, body, true)
}

// JobEnd says whether an attempt that ended with outcome and error errName ends its job without a
// retry or a dead letter, and as what: succeeded, or cancelled when a newer job of its key stopped it
// (job.ErrorCancelled, the overflow rule cancel); "" otherwise.
func JobEnd(outcome Outcome, errName string) batch.Outcome {
	switch {
	case outcome == Succeeded:
		return batch.Succeeded
	case outcome == Aborted && errName == job.ErrorCancelled:
		return batch.Cancelled
	}
	return ""
}

// endMetric is the metric each end of JobEnd counts under.
var endMetric = map[batch.Outcome]string{batch.Succeeded: metrics.JobsSucceeded, batch.Cancelled: metrics.JobsCancelled}

// DeadLetterTakeover is how long a dead-lettering lease belongs to the release that wrote it: the
// releaser function's timeout (template.yaml, Mappings.Timeouts.ReleaserFunction), after which that
// invocation cannot still be running.
const DeadLetterTakeover = 120 * time.Second

func (s *Service) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// deadLetter sends the dead letter of a lease in status dead-lettering (unless this call sent it
// already), then deletes the job's message and the lease. body is the dead letter's body when the
// caller has read it ("": read it here); recorded says the caller recorded the job's end in its batch
// (a lease found dead-lettering is recorded again: its writer may have been an older version).
func (s *Service) deadLetter(ctx context.Context, log *slog.Logger, req Request, l lease.Lease, dead *bool, body string, recorded bool) (Result, error) {
	if !*dead {
		reason := deadletter.ReasonAttemptsExhausted
		if req.Outcome == Aborted {
			reason = ReasonAborted
		}
		if body == "" {
			var err error
			if body, err = s.submission(ctx, l); err != nil {
				return "", err
			}
		}
		if err := s.DLQ.Send(ctx, deadletter.Entry{
			Reason: reason, Source: "releaser", Type: l.Type, JobID: l.JobID, Key: l.JobKey, Sender: l.JobSender, Attempt: l.Attempt,
			Error: req.Error, Cause: req.Cause, Body: body, Batch: l.Batch, Redrive: l.Redrive, BatchRecorded: recorded,
		}); err != nil {
			return "", err
		}
		*dead = true
		if !l.Reclaimed { // counted by the release that freed its lease before (lease.Lease.Reclaimed)
			s.Metrics.Add(l.Type, metrics.JobsDeadLettered, 1)
		}
		log.WarnContext(ctx, "job dead-lettered", "reason", reason, "error", req.Error)
	}
	if err := s.deleteMessage(ctx, l); err != nil {
		return "", err
	}
	return DeadLettered, s.Free(ctx, l)
}

// ExecutionArnOf returns the ARN of the execution a lease's attempt runs (or ran, or would run):
// the lease's own, or, for a lease written before claims recorded it, the one its deterministic
// name gives on the state machine of the claim or else of the type's config. It is "" only when
// neither is known (the type is no longer configured).
func (s *Service) ExecutionArnOf(ctx context.Context, l lease.Lease) string {
	arn, _ := s.executionArnOf(ctx, l)
	return arn
}

// executionArnOf is ExecutionArnOf, with the error of a config that could not be read (throttled):
// "" and no error only when the type is no longer configured.
func (s *Service) executionArnOf(ctx context.Context, l lease.Lease) (string, error) {
	if l.ExecutionArn != "" {
		return l.ExecutionArn, nil
	}
	sm := l.StateMachineArn
	if sm == "" {
		c, err := s.Config.Get(ctx, l.Type)
		if errors.Is(err, config.ErrUnknownType) {
			return "", nil
		}
		if err != nil {
			return "", err
		}
		sm = c.StateMachineArn
	}
	return job.ExecutionArn(sm, job.RunName(l.Type, l.JobSender, l.JobKey, l.JobID, l.Redrive, l.Attempt)), nil
}

// namedExecution is the execution a lease's attempt runs as the lease itself records it: its ARN, or
// the attempt's name on the state machine its claim named (a retrying lease keeps only that); ""
// when the lease names neither (one written before claims recorded them).
func namedExecution(l lease.Lease) string {
	switch {
	case l.ExecutionArn != "":
		return l.ExecutionArn
	case l.StateMachineArn != "":
		return job.ExecutionArn(l.StateMachineArn, job.RunName(l.Type, l.JobSender, l.JobKey, l.JobID, l.Redrive, l.Attempt))
	}
	return ""
}

// submission rebuilds the job as a producer sent it, from its execution's input, so that a redrive
// from the dead-letter queue runs the same job again.
func (s *Service) submission(ctx context.Context, l lease.Lease) (string, error) {
	arn, err := s.executionArnOf(ctx, l)
	if err != nil {
		// The config cannot be read now (throttled): the release is retried, rather than send a
		// dead letter without the job's input, which would be lost for good.
		return "", fmt.Errorf("read the state machine of job %s to dead-letter it: %w", l.JobID, err)
	}
	if arn == "" {
		// No state machine is known for the type any more: the dead letter names the job, and its
		// input is lost. Only a lease of a type removed from config, written before claims recorded
		// their execution, can get here.
		b, _ := json.Marshal(job.Job{Type: l.Type, ID: l.JobID, Key: l.JobKey, Batch: l.Batch}.Resubmission(l.Redrive + 1))
		return string(b), nil
	}
	// The next redrive generation: a redriven job runs under names its earlier runs did not take.
	fallback, _ := json.Marshal(job.Job{Type: l.Type, ID: l.JobID, Key: l.JobKey, Batch: l.Batch}.Resubmission(l.Redrive + 1))
	out, err := s.SFN.DescribeExecution(ctx, &sfn.DescribeExecutionInput{ExecutionArn: &arn})
	if err != nil {
		return "", fmt.Errorf("read input of execution %s to dead-letter job %s: %w", arn, l.JobID, err)
	}
	var in job.ExecutionInput
	if out.Input == nil || json.Unmarshal([]byte(*out.Input), &in) != nil {
		return string(fallback), nil
	}
	// The key and priority too: a redriven tenant's job stays under its tenant's cap.
	b, err := json.Marshal(job.Job{Type: l.Type, ID: l.JobID, Key: in.Job.Key, Priority: in.Job.Priority, Batch: l.Batch, Input: in.Input}.Resubmission(l.Redrive + 1))
	if err != nil {
		return string(fallback), nil
	}
	return string(b), nil
}

func (s *Service) deleteMessage(ctx context.Context, l lease.Lease) error {
	_, err := s.Queue.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: &s.QueueURL, ReceiptHandle: &l.ReceiptHandle})
	if err != nil && !IsStaleHandle(err) {
		return fmt.Errorf("delete message of job %s: %w", l.JobID, err)
	}
	// A stale handle: either the message is gone or it was received again, in which case the
	// receiver refreshed the lease and the conditional lease delete that follows fails and we retry.
	return nil
}

func (s *Service) makeVisible(ctx context.Context, l lease.Lease) error {
	_, err := s.Queue.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
		QueueUrl: &s.QueueURL, ReceiptHandle: &l.ReceiptHandle, VisibilityTimeout: 0,
	})
	if err == nil {
		return nil
	}
	if IsStaleHandle(err) {
		// Not in flight with this handle: visible already, or received again (then the lease changed).
		cur, gerr := s.Leases.Get(ctx, l.Key())
		if gerr != nil {
			return gerr
		}
		if cur != nil && cur.Version != l.Version && cur.Holds(l.JobSender, l.JobKey, l.JobID, l.Redrive) && cur.Status == lease.Retrying {
			return errStaleHandle
		}
		return nil
	}
	return fmt.Errorf("make message of job %s visible again: %w", l.JobID, err)
}

// IsStaleHandle reports SQS's answers to a receipt handle that is no longer the message's current one.
func IsStaleHandle(err error) bool {
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		return false
	}
	switch ae.ErrorCode() {
	case "ReceiptHandleIsInvalid", "MessageNotInflight", "InvalidParameterValue",
		"AWS.SimpleQueueService.MessageNotInflight", "AWS.SimpleQueueService.ReceiptHandleIsInvalid":
		return true
	}
	return false
}

// OutcomeOf maps a closed execution's status to an outcome; ok is false while it still runs.
func OutcomeOf(status string) (o Outcome, ok bool) {
	switch status {
	case "SUCCEEDED":
		return Succeeded, true
	case "FAILED", "TIMED_OUT":
		return Failed, true
	case "ABORTED":
		return Aborted, true
	}
	return "", false
}
