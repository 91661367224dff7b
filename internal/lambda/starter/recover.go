package starter

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/lambda/deadletter"
	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
	"github.com/sfnlimit/sfnlimit/internal/lambda/metrics"
	"github.com/sfnlimit/sfnlimit/internal/lambda/releaser"
)

// DescribeSettle is how long after a claim a DescribeExecution that does not find its execution is
// not believed (releaser.DescribeSettle: the sweep follows it too).
const DescribeSettle = releaser.DescribeSettle

// maxOwnAttempts bounds how many attempts lastOwnAttempt looks at.
const maxOwnAttempts = 100

// lastOwnAttempt returns the last of the attempts from, from+1, ... whose executions on the state
// machine sm this message started in this lane, one after another; 0 when from has none.
func (s *Starter) lastOwnAttempt(ctx context.Context, x *msg, sm string, from int) (int, *sfn.DescribeExecutionOutput, error) {
	last, lastD := 0, (*sfn.DescribeExecutionOutput)(nil)
	for a := from; a < from+maxOwnAttempts; a++ {
		arn := job.ExecutionArn(sm, job.RunName(x.key.Type, x.job.Sender, x.job.Key, x.job.ID, x.job.Redrive, a))
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
			!sameJob(in.Job, x) {
			return last, lastD, nil
		}
		last, lastD = a, d
	}
	return last, lastD, nil
}

// adopt writes this delivery's receipt handle into the lease of an attempt already made, so its
// release deletes (or makes visible) the message as it is now; arn names the execution when the lease
// did not ("": as it is).
func (s *Starter) adopt(ctx context.Context, x *msg, l lease.Lease, arn string) (lease.Lease, error) {
	next := l
	next.ReceiptHandle, next.MessageID, next.Receives = x.ReceiptHandle, x.MessageId, x.receives()
	next.Reclaimed = next.Reclaimed || x.leaseless
	if arn != "" {
		next.ExecutionArn = arn
	}
	return s.Leases.Put(ctx, next, &l)
}

// confirm looks up the execution of an unconfirmed claim. decided is false when it does not exist
// (the start never went through), so the caller may go on as if the lane were free of it.
func (s *Starter) confirm(ctx context.Context, x *msg, l lease.Lease) (v verdict, err error, decided bool) {
	return s.confirmSince(ctx, x, l, l.UpdatedAt)
}

// confirmSince is confirm for a claim whose start may have been tried as early as since: an
// execution not found is believed missing only DescribeSettle after it.
func (s *Starter) confirmSince(ctx context.Context, x *msg, l lease.Lease, since time.Time) (v verdict, err error, decided bool) {
	name := job.RunName(l.Type, l.JobSender, l.JobKey, l.JobID, l.Redrive, l.Attempt)
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
	var in job.ExecutionInput
	_ = json.Unmarshal([]byte(aws.ToString(d.Input)), &in)
	if in.Job.Lane != x.key.Lane || (in.Job.MessageID != "" && in.Job.MessageID != x.MessageId) {
		// Another copy of the job started this attempt, in another lane or from another message (a
		// waiting message bound again after its first copy ran): that copy's lane and release act on
		// it. This copy is a duplicate, and its claim goes.
		s.Metrics.Add(x.key.Type, metrics.DuplicatesDropped, 1)
		x.log.WarnContext(ctx, "duplicate job: its unconfirmed start is another copy's execution; dropping this copy",
			"execution", name, "status", d.Status, "executionLane", in.Job.Lane)
		if err := s.dropLease(ctx, x, l, &l); err != nil {
			return hold, err, true
		}
		return ack, nil, true
	}
	if _, closed := releaser.OutcomeOf(string(d.Status)); closed && x.recovering && d.StopDate != nil && d.StopDate.Before(l.UpdatedAt) {
		// It had ended before this delivery claimed it, though the look that led to the claim
		// (eventually consistent) saw it running: the release that freed its lease counted it.
		x.leaseless = true
	}
	written, err := s.adopt(ctx, x, l, arn)
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
	// With no lease, the release that freed it counted the attempt's end, even one still running:
	// a workflow's release step frees the lease before the execution ends (or the lease was deleted
	// by hand, whose count alone may be lost). Under a lease, only an ended one: a running attempt's
	// own release counts it.
	if l == nil {
		// No lease tells this delivery from a twin of one that has since moved the job on (its count
		// in the moved copy) and deleted this message, its attempt still running (a workflow's release
		// step frees the lease first) or read so. Its claim would name a message that is gone, and
		// the moved copy, finding the job's lane claimed, would drop itself: the job lost. So it
		// checks before it writes (seed 411 of races).
		if gone, err := s.goneSinceItRan(ctx, x, attempt, "a lane the job must leave"); err != nil || gone {
			return hold, err, true
		}
	}
	_, x.leaseless = releaser.OutcomeOf(string(d.Status))
	x.leaseless = x.leaseless || l == nil
	x.recovering = true
	claimed, err := s.claim(ctx, x, l, attempt, cfg.StateMachineArn, s.now())
	if err != nil {
		return hold, err, true
	}
	x.log.InfoContext(ctx, "lane the job must leave holds an attempt of this message; going on from it", "attempt", attempt)
	return s.confirm(ctx, x, claimed)
}

// redelivered handles a message that came back while its execution runs (it outlived the
// visibility timeout) or after it ended without a release.
func (s *Starter) redelivered(ctx context.Context, x *msg, l lease.Lease) (verdict, error) {
	written, err := s.adopt(ctx, x, l, "")
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
		Key: l.Key(), JobID: l.JobID, JobKey: l.JobKey, JobSender: l.JobSender, Redrive: l.Redrive, Attempt: l.Attempt, Outcome: outcome,
		Error: aws.ToString(d.Error), Cause: aws.ToString(d.Cause), Source: "starter",
	})
	if err != nil {
		return hold, err
	}
	x.log.InfoContext(ctx, "execution had ended without a release; released it", "status", d.Status, "result", res)
	if res == releaser.Retried {
		return hold, nil // visible again already; reporting it keeps Lambda from deleting it
	}
	if res == releaser.Noop {
		// Another release acted on the attempt first. If it retried it, the message is the retry's,
		// and a twin of this delivery (same receipt handle) may have claimed the next attempt on it
		// since: acknowledged, the message would be deleted under that attempt, which could then
		// never be retried (seed 61164 of races). (A lease being dead-lettered is another matter:
		// its release deletes the message, or the sweep takes it over once this one is gone.)
		now, err := s.Leases.Get(ctx, l.Key())
		if err != nil {
			return hold, err
		}
		if now != nil && now.MessageID == x.MessageId && now.Holds(l.JobSender, l.JobKey, l.JobID, l.Redrive) &&
			(now.Attempt > l.Attempt || (now.Attempt == l.Attempt && now.Status == lease.Retrying)) {
			x.log.InfoContext(ctx, "the message backs a later claim of its job; leaving it to that claim", "attempt", now.Attempt, "status", now.Status)
			return hold, nil
		}
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
	started := other.Status == lease.Starting || other.Status == lease.DeadLettering
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
				// The execution's input names the message that started it: a claim another copy of
				// its job made is dropped, not released a second time (releaser.Request.MessageID).
				var in job.ExecutionInput
				_ = json.Unmarshal([]byte(aws.ToString(d.Input)), &in)
				if _, err := s.Releaser.Release(ctx, releaser.Request{
					Key: other.Key(), JobID: other.JobID, JobKey: other.JobKey, JobSender: other.JobSender, Redrive: other.Redrive, Attempt: other.Attempt, Outcome: outcome,
					Error: aws.ToString(d.Error), Cause: aws.ToString(d.Cause), Source: "starter", MessageID: in.Job.MessageID,
				}); err != nil {
					return hold, err
				}
				return hold, lease.ErrConflict // look at the lane again
			}
		}
	} else if s.stale(other) {
		return s.takeBack(ctx, x, other)
	}
	if s.HandoverWait > 0 && other.Status == lease.Starting {
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
	if err := s.freeLane(ctx, other); err != nil {
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
			case releaser.JobEnd(outcome, aws.ToString(d.Error)) != "":
				// Its end is counted by the release (or the sweep) that ended its lease; this
				// is most often a stale copy of a delivery that release already acted on.
				// No lease of it is left, so no release counts it in its batch: count it here, before
				// its message goes (a duplicate if a release did).
				ended := releaser.JobEnd(outcome, aws.ToString(d.Error)) // succeeded, or cancelled by a newer job of its key
				if err := s.Releaser.BatchEnded(ctx, lease.Lease{Type: x.key.Type, JobID: j.ID, JobKey: j.Key, JobSender: j.Sender, Batch: j.Batch, Redrive: j.Redrive}, ended); err != nil {
					return hold, err
				}
				x.log.InfoContext(ctx, "this message's last attempt ended; nothing left to run", "attempt", last, "outcome", ended)
				return ack, nil
			case outcome == releaser.Aborted || last >= cfg.MaxAttempts:
				// Ended for good, and no lease is left for a release to dead-letter it: sent back
				// to wait, the job would run another attempt (past its maxAttempts, or after it
				// was stopped). It is dead-lettered here, as its release would have.
				reason := deadletter.ReasonAttemptsExhausted
				if outcome == releaser.Aborted {
					reason = releaser.ReasonAborted
				}
				current, err := s.holdsMessage(ctx, x)
				if err != nil {
					return hold, err
				}
				if !current {
					// Most often a stale copy of a delivery whose release dead-lettered the job.
					x.log.InfoContext(ctx, "stale delivery of a job whose last attempt ended for good; nothing to do", "attempt", last)
					return hold, nil
				}
				// The job may go on elsewhere: moved from here with a count from before maxAttempts
				// was lowered, this message left behind by a delete that failed. Its lane's release
				// decides then; this message is a copy of it, acknowledged as a bind would.
				ls, err := s.Leases.ListType(ctx, x.key.Type)
				if err != nil {
					return hold, err
				}
				if own := holding(ls, j); own != nil {
					x.log.WarnContext(ctx, "duplicate job: it already holds a lane; dropping this copy", "heldLane", own.Lane, "status", own.Status)
					s.Metrics.Add(x.key.Type, metrics.DuplicatesDropped, 1)
					return ack, nil
				}
				x.log.WarnContext(ctx, "this message's last attempt ended for good without a release; dead-lettering the job", "attempt", last, "status", d.Status)
				// Its release may have dead-lettered it already, and deleted the message with a
				// receipt handle a later receive had replaced (SQS then deletes nothing): the dead
				// letter must then be that one again, body for body (a redrive of either is one
				// generation), so it is made as the release makes it, from the execution's input.
				var in job.ExecutionInput
				if json.Unmarshal([]byte(aws.ToString(d.Input)), &in) == nil {
					x.job.Key, x.job.Sender, x.job.Priority, x.job.Input = in.Job.Key, in.Job.Sender, in.Job.Priority, in.Input
				}
				x.job.BatchSize = 0
				return s.refuse(ctx, x, nil, reason, cmp.Or(aws.ToString(d.Cause), aws.ToString(d.Error), string(d.Status)))
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
