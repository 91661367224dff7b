package starter

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sfnlimit/sfnlimit/internal/lambda/admission"
	"github.com/sfnlimit/sfnlimit/internal/lambda/batch"
	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
	"github.com/sfnlimit/sfnlimit/internal/lambda/metrics"
)

// fates decides, once, whether a job of a type with the overflow rule skip runs or is skipped
// (admission.Store): whichever is written first stands.
type fates interface {
	Admit(ctx context.Context, j admission.Job, now time.Time) error
	Skip(ctx context.Context, j admission.Job, behind string, now time.Time) (skipped, first bool, err error)
}

func submission(x *msg) admission.Job {
	j := x.job
	return admission.Job{Type: j.Type, Sender: j.Sender, Key: j.Key, ID: j.ID, Redrive: j.Redrive, SubmittedAt: j.SubmittedAt}
}

// skipBehind carries out the overflow rule skip (config.OverflowSkip) for a waiting job whose key is
// at its cap: when an older job of its key from the same sender holds a lane (bound, starting or
// retrying), the job ends "skipped". It never runs, uses no attempt and is not dead-lettered; its
// batch counts it skipped and its message goes. A key at its cap with other senders' jobs only:
// the job waits, as under the rule queue (one producer's jobs never end another's).
//
// The skip is written first (admission.Store.Skip), then counted, then the message acknowledged.
// A job already admitted (another copy of this message bound it, or a delivery of it did before it
// was given back) is not skipped: it waits like any job at its key's cap. A skip written whose
// message stays (a failure after the write) ends on the message's next delivery, here or in
// sendAdmitted, whatever its key then holds.
func (s *Starter) skipBehind(ctx context.Context, x *msg, cfg config.TypeConfig) (v verdict, skipped bool, err error) {
	if x.job.Attempts > 0 {
		return hold, false, nil // it has run: admitted, whether or not its fate is still found
	}
	// The batch's read of the leases is old (other jobs ended since), and holds the batch's own binds
	// without their jobs: the key's cap and its older job are read afresh.
	leases, err := x.view.read(ctx, s.Leases, x.key.Type, true)
	if err != nil {
		return hold, false, err
	}
	if holding(leases, x.job) != nil {
		return hold, false, nil // bound since the batch's read (a twin's bind): it holds a lane, and goes on from it
	}
	var behind *lease.Lease
	ofKey := 0
	for i, l := range leases {
		if l.JobKey == x.job.Key {
			ofKey++
		}
		switch {
		case l.JobKey != x.job.Key || l.JobSender != x.job.Sender,
			l.Holds(x.job.Sender, x.job.Key, x.job.ID, l.Redrive), // the job itself, of any generation
			l.SubmittedAt.IsZero() || !l.SubmittedAt.Before(x.job.SubmittedAt),
			l.Status != lease.Bound && l.Status != lease.Starting && l.Status != lease.Retrying:
			continue
		}
		if behind == nil || l.SubmittedAt.Before(behind.SubmittedAt) {
			behind = &leases[i]
		}
	}
	if behind == nil || ofKey < cfg.KeyCap(x.job.Key) {
		return hold, false, nil
	}
	ok, first, err := s.Fates.Skip(ctx, submission(x), behind.JobID, s.now())
	if err != nil {
		return hold, false, err
	}
	if !ok {
		x.log.InfoContext(ctx, "key at its cap; the job was admitted to run before, so it waits (overflow rule skip)", "behind", behind.JobID)
		return hold, false, nil
	}
	if first {
		// Counted by the call that wrote the skip, before anything can fail: a twin delivery, or a
		// delivery after a failure, finds the skip written and counts nothing. A skip answered as
		// failed and written again by the SDK is not counted.
		s.Metrics.Add(x.key.Type, metrics.JobsSkipped, 1)
	}
	v, err = s.endSkipped(ctx, x)
	if err == nil {
		x.log.InfoContext(ctx, "key at its cap with an older job of the sender; job skipped (overflow rule skip)", "behind", behind.JobID, "behindLane", behind.Lane)
	}
	return v, true, err
}

// endSkipped counts a skipped job in its batch and acknowledges its message.
func (s *Starter) endSkipped(ctx context.Context, x *msg) (verdict, error) {
	j := x.job
	if err := s.Releaser.BatchEnded(ctx, lease.Lease{Type: j.Type, JobID: j.ID, JobKey: j.Key, JobSender: j.Sender, Batch: j.Batch, Redrive: j.Redrive}, batch.Skipped); err != nil {
		return hold, err
	}
	return ack, nil
}

// sendAdmitted sends the job of lease b, bound to a lane for it, to that lane (sendBound), unless
// the job was skipped: then it gives the lane back and ends skipped. A job of a type with key caps is
// admitted first (admit), whatever the type's rule: it may have been skip when another copy of the
// message, or an earlier delivery that stopped before its message went, skipped the job.
func (s *Starter) sendAdmitted(ctx context.Context, x *msg, b lease.Lease, cfg config.TypeConfig) (verdict, error) {
	err := s.admit(ctx, x, cfg)
	if !errors.Is(err, admission.ErrSkipped) {
		if err != nil {
			return hold, err
		}
		return s.sendBound(ctx, x, b)
	}
	if ferr := s.freeLane(ctx, b); ferr != nil && !errors.Is(ferr, lease.ErrConflict) {
		return hold, fmt.Errorf("give back lane %d bound for a skipped job: %w", b.Lane, ferr)
	}
	x.log.InfoContext(ctx, "the job was skipped before (overflow rule skip); lane given back", "toLane", b.Lane)
	return s.endSkipped(ctx, x)
}

// admit writes the admitted fate of a job of a type with key caps (the rule skip acts only at a
// key's cap), once per delivery; it fails with admission.ErrSkipped when the job was skipped. The
// write is made whatever the type's rule is now: the rule may have been skip when the job was
// skipped, and a live change reaches the functions at different times (their config caches), so a
// twin delivery may read skip while this one reads queue. Types without key caps write nothing.
func (s *Starter) admit(ctx context.Context, x *msg, cfg config.TypeConfig) error {
	if x.admitted || !cfg.CapsKeys() {
		return nil
	}
	if err := s.Fates.Admit(ctx, submission(x), s.now()); err != nil {
		return err
	}
	x.admitted = true
	return nil
}
