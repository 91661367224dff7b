package starter

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"

	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
	"github.com/sfnlimit/sfnlimit/internal/lambda/metrics"
	"github.com/sfnlimit/sfnlimit/internal/lambda/releaser"
)

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
	default:
		// Refused for now (throttled), or the start may have gone through (a timeout, a reset
		// connection, a server error): either way the claim stays, so the next delivery starts the
		// same attempt under the same name and finds the execution if there is one. The lane stays
		// this job's meanwhile, as its group's head holds it anyway (FIFO delivers nothing behind an
		// in-flight message), and the attempt keeps the start token it took.
		if notStarted(err) {
			return hold, fmt.Errorf("start execution %s (refused for now; the claim is kept): %w", name, err)
		}
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
	if !sameJob(in.Job, x) {
		// Job names are built so that different jobs never share one; never drop a job for another's.
		x.log.ErrorContext(ctx, "execution name taken by another job", "execution", name, "holderJobId", in.Job.ID, "holderType", in.Job.Type, "holderKey", in.Job.Key)
		return s.refuse(ctx, x, &claimed, ReasonNameTaken, "execution "+name+" belongs to job "+job.BatchJobID(in.Job.Type, in.Job.Key, in.Job.ID))
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
	x.leaseless = closed && prev == nil
	if closed && sameMessage {
		// This message's attempt ended without its lease (freed by a release whose delete of the
		// message used a stale receipt handle, or deleted by hand): later attempts of this
		// message may have run since, and the last of them decides, not this one (with maxAttempts
		// lowered meanwhile, this one could dead-letter the job while a later one still runs).
		last, lastD, err := s.lastOwnAttempt(ctx, x, claimed.StateMachineArn, claimed.Attempt+1)
		if err != nil {
			return hold, err
		}
		if last > 0 {
			// Reclaimed as that attempt is: a running one's end is counted by its release, unless
			// its lease is gone too (a release step frees it before the execution ends: a reclaim).
			_, x.leaseless = releaser.OutcomeOf(string(lastD.Status))
			x.leaseless = x.leaseless || prev == nil
			written, err := s.claim(ctx, x, &claimed, last, claimed.StateMachineArn, claimed.StartedAt)
			if err != nil {
				return hold, err
			}
			x.log.InfoContext(ctx, "later attempts of this message ran; going on from the last", "attempt", last)
			v, err, _ := s.confirm(ctx, x, written)
			return v, err
		}
	}
	// The claim names this execution already (arn is its deterministic name): nothing to write,
	// but that it was claimed after its lease was gone, which its release must know.
	if outcome, closed := releaser.OutcomeOf(string(d.Status)); closed {
		if x.leaseless {
			if claimed, err = s.claim(ctx, x, &claimed, claimed.Attempt, claimed.StateMachineArn, claimed.StartedAt); err != nil {
				return hold, err
			}
		}
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
