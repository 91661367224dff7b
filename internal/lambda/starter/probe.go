package starter

import (
	"context"
	"errors"

	"github.com/aws/aws-lambda-go/events"

	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
	"github.com/sfnlimit/sfnlimit/internal/lambda/metrics"
)

// probe handles the sweep's probe of lane k's bound lease (job.Probe), sent when the lease had sat
// untouched past StaleAfter. FIFO handed out every message sent to the lane's group before the
// probe, so a lease still bound as the sweep saw it (nothing has written it since) has no copy left
// to come: it goes, and the lane is free (Releaser.Free gives back what its bind took and wakes a
// parked group for the lane). A lease changed since (its copy claimed it, or a copy of its job
// handed it a count) is left alone. A copy that waits behind a busy queue for longer than
// StaleAfter so keeps its lane: taken back under it, the lane would be bound again, and the new
// copy would queue behind it in the same group.
func (s *Starter) probe(ctx context.Context, m events.SQSMessage, k lease.Key, p job.Probe) verdict {
	log := s.Log.With("type", k.Type, "lane", k.Lane, "probedJobId", p.JobID, "messageId", m.MessageId)
	l, err := s.Leases.Get(ctx, k)
	if err != nil {
		log.ErrorContext(ctx, "lane's lease not read for the sweep's probe; trying again shortly", "error", err)
		return s.backoff(ctx, m)
	}
	if l == nil || l.Status != lease.Bound || l.JobID != p.JobID || l.UpdatedAt.UnixNano() != p.UpdatedAt {
		log.InfoContext(ctx, "the probed bound lease was claimed or changed; nothing to take back")
		return ack
	}
	if l.KeyToken || l.TypeToken {
		log = log.With("keyToken", l.KeyToken, "typeToken", l.TypeToken) // given back (Releaser.Free)
	}
	if err := s.freeLane(ctx, *l); errors.Is(err, lease.ErrConflict) {
		return ack // changed since the read: claimed, or taken back by another
	} else if err != nil {
		log.ErrorContext(ctx, "stale bound lease not taken back; trying again shortly", "error", err)
		return s.backoff(ctx, m)
	}
	log.WarnContext(ctx, "took back a bound lane: no copy of its job was queued ahead of the sweep's probe", "updatedAt", l.UpdatedAt)
	s.Metrics.Add(k.Type, metrics.LeasesSwept, 1)
	return ack
}
