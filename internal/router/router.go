// Package router moves jobs from the general queue to the lanes queue: it validates each job, chooses
// a lane within its type's limit and sends it with MessageGroupId "{type}-{lane}". Bad jobs go to the
// dead-letter queue with a reason and are acknowledged; jobs that could not be sent are reported as
// batch item failures so the general queue delivers them again.
package router

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sfnlimit/sfnlimit/internal/config"
	"github.com/sfnlimit/sfnlimit/internal/deadletter"
	"github.com/sfnlimit/sfnlimit/internal/job"
	"github.com/sfnlimit/sfnlimit/internal/lane"
	"github.com/sfnlimit/sfnlimit/internal/metrics"
	"github.com/sfnlimit/sfnlimit/internal/sqsbatch"
)

type configGetter interface {
	Get(ctx context.Context, typ string) (config.TypeConfig, error)
}

type batchSender interface {
	Send(ctx context.Context, entries []types.SendMessageBatchRequestEntry) ([]sqsbatch.Failure, error)
}

type deadLetterer interface {
	Send(ctx context.Context, e deadletter.Entry) error
}

// Router handles general-queue batches.
type Router struct {
	Config configGetter
	Lanes  lane.Chooser
	Lanesq batchSender
	DLQ    deadLetterer
	Log    *slog.Logger
	// Metrics receives JobsRouted and JobsRejected per type (nil: none).
	Metrics *metrics.Recorder
}

// Handle routes one batch of general-queue messages.
func (r *Router) Handle(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	defer r.flush(ctx)
	var (
		resp    events.SQSEventResponse
		entries []types.SendMessageBatchRequestEntry
		byEntry = map[string]events.SQSMessage{}
		typeOf  = map[string]string{}
	)
	fail := func(m events.SQSMessage) {
		resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: m.MessageId})
	}
	for i, m := range ev.Records {
		j, ln, err := r.route(ctx, m)
		if err != nil {
			if reason := job.ReasonOf(err); reason != "" {
				if dlErr := r.reject(ctx, m, j, reason, err); dlErr != nil {
					r.Log.ErrorContext(ctx, "dead-letter failed; the general queue will deliver the job again",
						"messageId", m.MessageId, "reason", reason, "error", dlErr)
					fail(m)
				}
				continue
			}
			r.Log.ErrorContext(ctx, "route failed; the general queue will deliver the job again",
				"messageId", m.MessageId, "type", j.Type, "jobId", j.ID, "error", err)
			fail(m)
			continue
		}
		body, err := json.Marshal(j)
		if err != nil {
			return resp, fmt.Errorf("encode job %s: %w", j.ID, err)
		}
		id := strconv.Itoa(i)
		entries = append(entries, types.SendMessageBatchRequestEntry{
			Id:                     aws.String(id),
			MessageBody:            aws.String(string(body)),
			MessageGroupId:         aws.String(job.GroupID(j.Type, ln)),
			MessageDeduplicationId: aws.String(job.DedupID(j.Type, j.ID)),
		})
		byEntry[id] = m
		r.Log.InfoContext(ctx, "routed", "jobId", j.ID, "type", j.Type, "lane", ln)
		typeOf[id] = j.Type
	}
	if len(entries) == 0 {
		return resp, nil
	}
	failed, err := r.Lanesq.Send(ctx, entries)
	for _, typ := range typeOf {
		r.Metrics.Add(typ, metrics.JobsRouted, 1)
	}
	for _, f := range failed {
		r.Metrics.Add(typeOf[f.ID], metrics.JobsRouted, -1)
		m := byEntry[f.ID]
		r.Log.ErrorContext(ctx, "send to lanes queue failed after retries; the general queue will deliver the job again",
			"messageId", m.MessageId, "code", f.Code, "error", f.Message)
		fail(m)
	}
	if err != nil && len(failed) == 0 {
		return resp, fmt.Errorf("send to lanes queue: %w", err)
	}
	return resp, nil
}

// route validates a message and chooses its lane. A job.Error means the job is refused for good.
func (r *Router) route(ctx context.Context, m events.SQSMessage) (job.Job, int, error) {
	j, err := job.Parse([]byte(m.Body), m.MessageId, sentAt(m))
	if err != nil {
		return j, 0, err
	}
	cfg, err := r.Config.Get(ctx, j.Type)
	if errors.Is(err, config.ErrUnknownType) {
		return j, 0, &job.Error{Reason: job.ReasonUnknownType, Detail: err.Error()}
	}
	if err != nil {
		return j, 0, err
	}
	ln, err := r.Lanes.Choose(ctx, j, cfg.Limit)
	if err != nil {
		return j, 0, fmt.Errorf("choose lane for type %s: %w", j.Type, err)
	}
	return j, ln, nil
}

func (r *Router) reject(ctx context.Context, m events.SQSMessage, j job.Job, reason job.Reason, cause error) error {
	r.Metrics.Add(j.Type, metrics.JobsRejected, 1)
	r.Log.WarnContext(ctx, "job refused", "messageId", m.MessageId, "type", j.Type, "jobId", j.ID, "reason", reason, "error", cause)
	return r.DLQ.Send(ctx, deadletter.Entry{
		Reason: string(reason), Source: "router", Type: j.Type, JobID: j.ID, Error: string(reason), Cause: cause.Error(), Body: m.Body,
	})
}

func (r *Router) flush(ctx context.Context) {
	if err := r.Metrics.Flush(); err != nil {
		r.Log.WarnContext(ctx, "metrics not written", "error", err)
	}
}

// sentAt is when the producer sent the message (SQS's SentTimestamp, milliseconds since the epoch).
func sentAt(m events.SQSMessage) time.Time {
	if ms, err := strconv.ParseInt(m.Attributes["SentTimestamp"], 10, 64); err == nil {
		return time.UnixMilli(ms).UTC()
	}
	return time.Now().UTC()
}
