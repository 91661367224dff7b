package starter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/lambda/deadletter"
	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lane"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
	"github.com/sfnlimit/sfnlimit/internal/lambda/metrics"
)

// move sends a job waiting in a lane above its type's limit (the limit was lowered) back to its
// type's waiting group (first-free) or to a lane within the limit (random), so that the job is never
// lost nor started twice: its lane's lease becomes a moving one first (written over the job's lease,
// or on a lane without one), then the copy goes, then the original message, then the moving lease.
//   - The moving lease is what a twin delivery of the message (Lambda may hand a batch over twice)
//     finds instead of a free lane: it finishes the move, never starts the job, which would then run
//     with no message left for its release to retry. The write is conditional, so a twin's claim and
//     this move cannot both win.
//   - A waiting copy does not take a moving lease for its job holding a lane (holding), so the copy
//     may be delivered as soon as it is sent.
//   - A move that stops midway leaves the message, which comes back to its moving lease and
//     finishes the move (the copy's deduplication id names the message: SQS drops a copy sent again
//     within five minutes, and a later one is the job's duplicate, dropped as one); a move whose
//     message was not deleted (its DeleteMessage failed, or it stopped) leaves the moving lease until
//     the message comes back or, once the message is gone, the sweep takes the lease back as stale.
func (s *Starter) move(ctx context.Context, x *msg, l *lease.Lease, cfg config.TypeConfig, why string) (verdict, error) {
	j := x.job
	if l != nil {
		made := l.Attempt // attempts made so far travel with the job (a bound lease's are the job's)
		if l.Status == lease.Starting {
			made-- // confirm found no execution of this claim: the attempt was never made
		}
		j.Attempts = max(j.Attempts, made) // the body's count may be ownAttempt's, from Step Functions
	}
	to, group := job.WaitingLane, ""
	if l != nil && l.Status == lease.Moving && l.MovedTo != "" {
		// Finishing a move: its copy goes where the move sent it (a config read since may choose
		// another group, where SQS would not deduplicate it).
		group = l.MovedTo
		if _, ln, err := job.ParseGroupID(group); err == nil {
			to = ln
		}
	} else {
		if cfg.Strategy != lane.FirstFree {
			var err error
			if to, err = s.Lanes.Choose(ctx, j, cfg.Limit); err != nil {
				return hold, err
			}
		}
		group = destination(j, to, cfg)
	}
	if l == nil {
		// No lease holds the lane for the job: nothing tells a twin delivery (Lambda may hand a
		// batch over twice) whose move already ended (moving lease and message both deleted) from
		// the first. Its moving lease would hold a free lane for a job that has left it, with no
		// message left to come back and finish the move, until the sweep took it back as stale
		// (1.5 visibility timeouts) if its delete failed (seed 15 of races: lane 2 of gamma for 8.5
		// minutes, a DeleteItem throttled). Only a delivery that still holds its message moves.
		holds, err := s.holdsMessage(ctx, x)
		if err != nil {
			return hold, err
		}
		if !holds {
			x.log.InfoContext(ctx, "stale delivery of a message leaving its lane: deleted, received again or visible again; dropped")
			s.Metrics.Add(x.key.Type, metrics.DuplicatesDropped, 1)
			return hold, nil
		}
	}
	if l == nil || l.Status != lease.Moving || l.Receives < x.receives() {
		// The moving lease names this receive: a late copy of an earlier one (withLease) leaves the
		// move to it, since SQS deletes nothing with an earlier receipt handle.
		next := lease.Lease{
			Type: x.key.Type, Lane: x.key.Lane, JobID: j.ID, JobKey: j.Key, JobSender: j.Sender, Batch: j.Batch, Redrive: j.Redrive,
			MessageID: x.MessageId, ReceiptHandle: x.ReceiptHandle, Receives: x.receives(), Attempt: j.Attempts,
			Status: lease.Moving, StartedAt: s.now(), SubmittedAt: j.SubmittedAt, MovedTo: group,
		}
		if l != nil {
			next.StartedAt = l.StartedAt
		}
		written, err := s.Leases.Put(ctx, next, l)
		if err != nil {
			return hold, err // changed meanwhile (read it again) or not written (try again shortly)
		}
		if l != nil && l.Status == lease.Bound {
			// The tokens its bind took (the lease records which), for a start this lane never
			// makes, go back, once (the moving lease's write is conditional on the bound lease),
			// and the job takes them again when it binds.
			s.refundTokens(ctx, x, cfg, l.KeyToken, l.TypeToken)
		}
		l = &written
	}
	if _, err := s.sendToGroup(ctx, x, j, to, group); err != nil {
		return hold, fmt.Errorf("move job: %w", err)
	}
	if _, err := s.Queue.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: &s.QueueURL, ReceiptHandle: &x.ReceiptHandle}); err != nil {
		// Lambda deletes it when this delivery is acknowledged, or it comes back to its moving
		// lease: until either, the lease keeps a twin from starting the job.
		x.log.WarnContext(ctx, "moved job's original message not deleted; its moving lease stays until it is", "error", err)
		s.Metrics.Add(x.key.Type, metrics.JobsMoved, 1)
		return ack, nil
	}
	if err := s.freeLane(ctx, *l); err != nil && !errors.Is(err, lease.ErrConflict) {
		x.log.WarnContext(ctx, "moving lease not deleted; the sweep takes it back", "error", err)
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
	if err := s.DLQ.Send(ctx, deadletter.Entry{Reason: reason, Source: "starter", Type: x.job.Type, JobID: x.job.ID, Key: x.job.Key, Sender: x.job.Sender, Cause: cause, Body: string(body),
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
	return s.Releaser.Free(ctx, l)
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
