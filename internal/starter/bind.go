package starter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sfnlimit/sfnlimit/internal/config"
	"github.com/sfnlimit/sfnlimit/internal/job"
	"github.com/sfnlimit/sfnlimit/internal/lane"
	"github.com/sfnlimit/sfnlimit/internal/metrics"
	"github.com/sfnlimit/sfnlimit/internal/occupancy"
	"github.com/sfnlimit/sfnlimit/internal/waitroom"
)

// bind moves a job from its type's waiting group to a free lane (the first-free strategy): it takes
// a lane whose count is 0 with a conditional join, sends the job there and acknowledges the waiting
// message. When every lane is taken it parks the message, in flight, for a release to wake.
func (s *Starter) bind(ctx context.Context, x *msg) (v verdict, err error) {
	if s.Occupancy == nil || s.WaitRoom == nil {
		return hold, errors.New("the starter has no occupancy store or wait room to bind first-free jobs")
	}
	w := waitroom.Waiter{Type: x.key.Type, MessageID: x.MessageId, ReceiptHandle: x.ReceiptHandle, JobID: x.job.ID, ParkedAt: s.now()}
	parked := false
	if x.Attributes["ApproximateReceiveCount"] != "1" {
		// Parked on an earlier receive, perhaps: unless it parks again, its record goes, so no
		// release spends a wake-up on it.
		defer func() {
			if !parked {
				if err := s.WaitRoom.Unpark(ctx, w); err != nil {
					x.log.WarnContext(ctx, "parked record not removed; a release may wake this message for nothing", "error", err)
				}
			}
		}()
	}
	oj := occupancy.JobOf(x.job)
	m, err := s.Occupancy.Get(ctx, oj)
	if err != nil {
		return hold, err
	}
	if m != nil && !m.Left && m.Lane >= 1 {
		// Bound before: this message came back after the bind (its send failed, or its
		// acknowledgement was lost). The copy goes again with the same deduplication id, which SQS
		// drops within five minutes; whatever becomes of the job happens in its lane.
		return s.sendBound(ctx, x, m.Lane, true)
	}
	cfg, err := s.Config.Get(ctx, x.key.Type)
	if errors.Is(err, config.ErrUnknownType) {
		return s.refuse(ctx, x, nil, string(job.ReasonUnknownType), err.Error())
	}
	if err != nil {
		return hold, err
	}
	if cfg.Strategy != lane.FirstFree {
		// The type left first-free while the job waited: route it as its strategy does now.
		return s.reroute(ctx, x, cfg)
	}
	for look := range 2 {
		got, err := s.bindFree(ctx, x, cfg)
		if err != nil {
			return hold, err
		}
		if got.Lane > 0 {
			if look == 1 {
				if err := s.WaitRoom.Unpark(ctx, w); err != nil {
					x.log.WarnContext(ctx, "parked record not removed; a release may wake this message for nothing", "error", err)
				}
			}
			// Counted is false only for a copy of a job that left its lane moments ago (SQS drops
			// the copy within five minutes of the first): it goes where the first went, uncounted.
			return s.sendBound(ctx, x, got.Lane, got.Counted)
		}
		if look == 0 {
			// Park first, then look again: a release that freed a lane after the first look either
			// sees the parked record and wakes it, or freed the lane before the second look.
			if err := s.WaitRoom.Park(ctx, w); err != nil {
				return hold, err
			}
		}
	}
	parked = true
	s.setVisibility(ctx, x.SQSMessage, int32(waitroom.ParkFor.Seconds()))
	x.log.InfoContext(ctx, "every lane taken; job parked until a release wakes it", "limit", cfg.Limit)
	s.Metrics.Add(x.key.Type, metrics.JobsParked, 1)
	return hold, nil
}

// bindFree binds the job to a lane of count 0, starting from the one lane.Least picks (ties by a
// hash of the job, so concurrent binders spread); lane 0 when every lane is taken.
func (s *Starter) bindFree(ctx context.Context, x *msg, cfg config.TypeConfig) (occupancy.Joined, error) {
	counts, err := s.Occupancy.Counts(ctx, x.key.Type, cfg.Limit)
	if err != nil {
		return occupancy.Joined{}, err
	}
	first, err := lane.Least(x.job, counts)
	if err != nil || counts[first-1] > 0 {
		return occupancy.Joined{}, err
	}
	order := []int{first}
	for i, c := range counts {
		if c == 0 && i+1 != first {
			order = append(order, i+1)
		}
	}
	for _, ln := range order {
		got, err := s.Occupancy.JoinEmpty(ctx, occupancy.JobOf(x.job), ln)
		if errors.Is(err, occupancy.ErrLaneBusy) {
			continue // taken since the counts were read
		}
		return got, err
	}
	return occupancy.Joined{}, nil
}

// reroute sends a waiting job of a type no longer on first-free to a lane as the type's strategy
// chooses now.
func (s *Starter) reroute(ctx context.Context, x *msg, cfg config.TypeConfig) (verdict, error) {
	if cfg.Strategy != lane.LeastLoaded {
		to, err := s.Lanes.Choose(ctx, x.job, cfg.Limit)
		if err != nil {
			return hold, err
		}
		return s.sendBound(ctx, x, to, false)
	}
	counts, err := s.Occupancy.Counts(ctx, x.key.Type, cfg.Limit)
	if err != nil {
		return hold, err
	}
	to, err := lane.Least(x.job, counts)
	if err != nil {
		return hold, err
	}
	got, err := s.Occupancy.Join(ctx, occupancy.JobOf(x.job), to)
	if err != nil {
		return hold, err
	}
	return s.sendBound(ctx, x, got.Lane, got.Counted)
}

// sendBound sends the waiting job to lane to and acknowledges the waiting message. The copy's
// deduplication id names the lane, so a bind retried to the same lane is dropped by SQS.
func (s *Starter) sendBound(ctx context.Context, x *msg, to int, counted bool) (verdict, error) {
	j := x.job
	j.Counted = counted
	body, err := json.Marshal(j)
	if err != nil {
		return hold, fmt.Errorf("encode job: %w", err)
	}
	dedup := job.BoundDedupID(j.Type, j.ID, j.Redrive, to)
	if _, err := s.Queue.SendMessage(ctx, &sqs.SendMessageInput{
		QueueUrl: &s.QueueURL, MessageBody: aws.String(string(body)),
		MessageGroupId: aws.String(job.GroupID(j.Type, to)), MessageDeduplicationId: &dedup,
	}); err != nil {
		return hold, fmt.Errorf("send job to lane %d: %w", to, err)
	}
	x.log.InfoContext(ctx, "bound to a free lane", "toLane", to, "waitedMs", s.now().Sub(j.SubmittedAt).Milliseconds())
	s.Metrics.Add(x.key.Type, metrics.JobsBound, 1)
	return ack, nil
}
