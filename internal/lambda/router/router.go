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

	"github.com/sfnlimit/sfnlimit/internal/lambda/batch"
	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/lambda/deadletter"
	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lane"
	"github.com/sfnlimit/sfnlimit/internal/lambda/metrics"
	"github.com/sfnlimit/sfnlimit/internal/lambda/sqsbatch"
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
	// Lanes is the choice of types on the random strategy.
	Lanes  lane.Chooser
	Lanesq batchSender
	DLQ    deadLetterer
	Log    *slog.Logger
	// Metrics receives JobsRouted and JobsRejected per type (nil: none).
	Metrics *metrics.Recorder
	// Backlog says when the lanes queue is too deep to take more jobs (nil: never); the jobs are
	// then sent back to the general queue through Hold, delayed by HoldFor (0: DefaultHoldFor; at
	// most 15 minutes, SQS's longest delay).
	Backlog backlogGauge
	Hold    batchSender
	HoldFor time.Duration
	// Batches opens the batch of a job carrying batchSize and checks that any other job's batch is
	// open (nil: jobs' batches are not tracked).
	Batches batchAdmitter
}

type batchAdmitter interface {
	// Admit opens or checks j's batch: a *job.Error refuses the job, batchend.ErrNotOpen says its
	// batch is not open (yet).
	Admit(ctx context.Context, j job.Job) error
}

// BatchWaitReceives is the delivery of a job at which the router stops waiting for its batch to be
// opened and refuses it (job.ReasonBatchNotOpen): below the general queue's maxReceiveCount
// (template.yaml), after which SQS would move the job to the dead-letter queue without a reason.
// Until then each delivery of a job whose batch is not open is reported failed, and comes back
// after the general queue's visibility timeout: the job that opens the batch (batchSize) may
// simply have been delivered later.
const BatchWaitReceives = 3

type backlogGauge interface {
	// Reserve says whether n more jobs may go to the lanes queue (and counts them), with the
	// depth it estimates; on an error the jobs may go (ok is true).
	Reserve(ctx context.Context, n int) (ok bool, depth int, err error)
}

// routed is a job of the batch on its way to a lane.
type routed struct {
	m   events.SQSMessage
	j   job.Job
	cfg config.TypeConfig
	// lane is the job's lane (random), or job.WaitingLane (first-free), whose group is group.
	lane  int
	group string
}

// Handle routes one batch of general-queue messages: jobs of first-free types to one of their type's
// waiting groups, jobs of random types to a lane chosen by a hash of the job.
func (r *Router) Handle(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	defer r.flush(ctx)
	var (
		resp events.SQSEventResponse
		jobs []*routed
	)
	fail := func(m events.SQSMessage) {
		resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: m.MessageId})
	}
	for _, m := range ev.Records {
		x, err := r.check(ctx, m)
		if err == nil || job.ReasonOf(err) != "" {
			// A refused job is counted in its batch too, which must be open for it.
			if berr := r.admitBatch(ctx, m, x.j); berr != nil && job.ReasonOf(berr) == "" {
				r.Log.WarnContext(ctx, "job's batch not ready; the general queue will deliver the job again",
					"messageId", m.MessageId, "type", x.j.Type, "jobId", x.j.ID, "batch", x.j.Batch, "error", berr)
				fail(m)
				continue
			} else if berr != nil && err == nil {
				err = berr
			}
		}
		if err != nil {
			if reason := job.ReasonOf(err); reason != "" {
				if dlErr := r.reject(ctx, m, x.j, reason, err); dlErr != nil {
					r.Log.ErrorContext(ctx, "dead-letter failed; the general queue will deliver the job again",
						"messageId", m.MessageId, "reason", reason, "error", dlErr)
					fail(m)
				}
				continue
			}
			r.Log.ErrorContext(ctx, "route failed; the general queue will deliver the job again",
				"messageId", m.MessageId, "type", x.j.Type, "jobId", x.j.ID, "error", err)
			fail(m)
			continue
		}
		switch x.cfg.Strategy {
		case lane.FirstFree:
			// The job waits in its key's group, or one of its type's waiting groups; the starter
			// binds it to the first free lane.
			x.lane, x.group = job.WaitingLane, x.cfg.WaitingGroup(x.j)
		default:
			ln, err := r.Lanes.Choose(ctx, x.j, x.cfg.Limit)
			if err != nil {
				r.Log.ErrorContext(ctx, "choose lane failed; the general queue will deliver the job again",
					"messageId", m.MessageId, "type", x.j.Type, "jobId", x.j.ID, "error", err)
				fail(m)
				continue
			}
			x.lane, x.group = ln, job.GroupID(x.j.Type, ln)
		}
		jobs = append(jobs, x)
	}
	if len(jobs) > 0 && r.Backlog != nil && r.Hold != nil {
		ok, depth, err := r.Backlog.Reserve(ctx, len(jobs))
		if err != nil {
			// Route as if the lanes queue had room: holding every job on a failed read would
			// stop the limiter for nothing; the next reading decides again.
			r.Log.WarnContext(ctx, "lanes queue depth not read; routing", "error", err)
		}
		if !ok {
			r.hold(ctx, jobs, depth, fail)
			return resp, nil
		}
	}
	var (
		entries []types.SendMessageBatchRequestEntry
		byEntry = map[string]*routed{}
	)
	for i, x := range jobs {
		body, err := json.Marshal(x.j)
		if err != nil {
			return resp, fmt.Errorf("encode job %s: %w", x.j.ID, err)
		}
		id := strconv.Itoa(i)
		entries = append(entries, types.SendMessageBatchRequestEntry{
			Id:                     aws.String(id),
			MessageBody:            aws.String(string(body)),
			MessageGroupId:         aws.String(x.group),
			MessageDeduplicationId: aws.String(job.DedupID(x.j.Type, x.j.Key, x.j.ID, x.j.Redrive)),
		})
		byEntry[id] = x
		r.Log.InfoContext(ctx, "routed", "jobId", x.j.ID, "type", x.j.Type, "key", x.j.Key, "lane", x.lane, "group", x.group, "strategy", x.cfg.Strategy)
	}
	if len(entries) == 0 {
		return resp, nil
	}
	failed, err := r.Lanesq.Send(ctx, entries)
	for _, x := range byEntry {
		r.Metrics.Add(x.j.Type, metrics.JobsRouted, 1)
	}
	for _, f := range failed {
		x := byEntry[f.ID]
		r.Metrics.Add(x.j.Type, metrics.JobsRouted, -1)
		r.Log.ErrorContext(ctx, "send to lanes queue failed after retries; the general queue will deliver the job again",
			"messageId", x.m.MessageId, "jobId", x.j.ID, "type", x.j.Type, "lane", x.lane, "code", f.Code, "error", f.Message)
		fail(x.m)
	}
	if err != nil && len(failed) == 0 {
		return resp, fmt.Errorf("send to lanes queue: %w", err)
	}
	return resp, nil
}

// hold sends jobs back to the general queue, delayed by r.HoldFor, while the lanes queue is full. The
// copy names the job's id (a job without one took its first message's id, and must keep it), keeps
// its submission time in a message attribute, and has the job's key (else its type) as its
// MessageGroupId: on a standard queue that makes SQS a fair queue, which serves a quiet key's held
// jobs before a noisy key's backlog once the lanes queue has room again.
func (r *Router) hold(ctx context.Context, jobs []*routed, depth int, fail func(events.SQSMessage)) {
	holdFor := r.HoldFor
	if holdFor <= 0 {
		holdFor = DefaultHoldFor
	}
	holdFor = min(holdFor, 15*time.Minute)
	var entries []types.SendMessageBatchRequestEntry
	byEntry := map[string]*routed{}
	for i, x := range jobs {
		body, err := json.Marshal(x.j.Resubmission(x.j.Redrive)) // with its key and priority
		if err != nil {
			r.Log.ErrorContext(ctx, "encode held job; the general queue will deliver it again", "jobId", x.j.ID, "type", x.j.Type, "error", err)
			fail(x.m)
			continue
		}
		group := x.j.Key
		if group == "" {
			group = x.j.Type
		}
		id := strconv.Itoa(i)
		entries = append(entries, types.SendMessageBatchRequestEntry{
			Id: aws.String(id), MessageBody: aws.String(string(body)), DelaySeconds: int32(holdFor.Seconds()),
			MessageGroupId: aws.String(group),
			MessageAttributes: map[string]types.MessageAttributeValue{SubmittedAtAttribute: {
				DataType: aws.String("Number"), StringValue: aws.String(strconv.FormatInt(x.j.SubmittedAt.UnixMilli(), 10)),
			}},
		})
		byEntry[id] = x
		r.Log.InfoContext(ctx, "lanes queue full; job held in the general queue", "jobId", x.j.ID, "type", x.j.Type, "key", x.j.Key,
			"depth", depth, "holdSeconds", int(holdFor.Seconds()))
	}
	if len(entries) == 0 {
		return
	}
	failed, err := r.Hold.Send(ctx, entries)
	for _, x := range byEntry {
		r.Metrics.Add(x.j.Type, metrics.JobsHeld, 1)
	}
	for _, f := range failed {
		x := byEntry[f.ID]
		r.Metrics.Add(x.j.Type, metrics.JobsHeld, -1)
		r.Log.ErrorContext(ctx, "hold failed; the general queue will deliver the job again", "jobId", x.j.ID, "type", x.j.Type, "code", f.Code, "error", f.Message)
		fail(x.m)
	}
	if err != nil && len(failed) == 0 {
		for _, x := range byEntry {
			fail(x.m)
		}
		r.Log.ErrorContext(ctx, "hold failed; the general queue will deliver the jobs again", "error", err)
	}
}

// admitBatch opens or checks the batch of j (a job or a refusal's known fields). An error with a
// job.Reason refuses the job; any other asks for the job again later.
func (r *Router) admitBatch(ctx context.Context, m events.SQSMessage, j job.Job) error {
	if r.Batches == nil || j.Batch == "" || job.ValidateBatch(j.Batch, j.BatchSize) != nil {
		return nil // no batch, or one the refusal names invalid: not counted
	}
	err := r.Batches.Admit(ctx, j)
	if errors.Is(err, batch.ErrNotOpen) {
		if receives(m) >= BatchWaitReceives {
			return &job.Error{Reason: job.ReasonBatchNotOpen, Detail: fmt.Sprintf(
				"batch %q is not open after %d deliveries: give the batch's jobs batchSize, or open it first (sfnlimit batch open)", j.Batch, receives(m))}
		}
	}
	return err
}

// receives is the message's ApproximateReceiveCount (1 when unknown).
func receives(m events.SQSMessage) int {
	n, err := strconv.Atoi(m.Attributes["ApproximateReceiveCount"])
	if err != nil || n < 1 {
		return 1
	}
	return n
}

// check validates a message and reads its type's configuration. A job.Error means the job is
// refused for good.
func (r *Router) check(ctx context.Context, m events.SQSMessage) (*routed, error) {
	j, err := job.Parse([]byte(m.Body), m.MessageId, sentAt(m))
	x := &routed{m: m, j: j}
	if err != nil {
		return x, err
	}
	cfg, err := r.Config.Get(ctx, j.Type)
	if errors.Is(err, config.ErrUnknownType) {
		return x, &job.Error{Reason: job.ReasonUnknownType, Detail: err.Error()}
	}
	if err != nil {
		return x, err
	}
	x.cfg = cfg
	return x, nil
}

func (r *Router) reject(ctx context.Context, m events.SQSMessage, j job.Job, reason job.Reason, cause error) error {
	r.Metrics.Add(j.Type, metrics.JobsRejected, 1)
	r.Log.WarnContext(ctx, "job refused", "messageId", m.MessageId, "type", j.Type, "jobId", j.ID, "reason", reason, "error", cause)
	body := m.Body
	if j.Batch != "" && j.ID == m.MessageId {
		// A batch's job without an id is named by its first message's id, in its batch too: its
		// dead letter names it, so that a redrive (a new message) is the same job, counted once.
		body = withID(body, j.ID)
	}
	return r.DLQ.Send(ctx, deadletter.Entry{
		Reason: string(reason), Source: "router", Type: j.Type, JobID: j.ID, Key: j.Key, Error: string(reason), Cause: cause.Error(), Body: body,
		Batch: j.Batch, Redrive: j.Redrive, Refused: true,
	})
}

// withID is a JSON object body with its "id" set to id when it has none; any other body unchanged.
func withID(body, id string) string {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(body), &obj); err != nil || obj == nil {
		return body
	}
	if v, ok := obj["id"]; ok && string(v) != `""` && string(v) != "null" {
		return body
	}
	obj["id"], _ = json.Marshal(id)
	b, err := json.Marshal(obj)
	if err != nil {
		return body
	}
	return string(b)
}

func (r *Router) flush(ctx context.Context) {
	if err := r.Metrics.Flush(); err != nil {
		r.Log.WarnContext(ctx, "metrics not written", "error", err)
	}
}

// sentAt is when the producer sent the message (SQS's SentTimestamp, milliseconds since the epoch),
// or, for a job the router held back, when it was first sent.
func sentAt(m events.SQSMessage) time.Time {
	if a, ok := m.MessageAttributes[SubmittedAtAttribute]; ok && a.StringValue != nil {
		if ms, err := strconv.ParseInt(*a.StringValue, 10, 64); err == nil {
			return time.UnixMilli(ms).UTC()
		}
	}
	if ms, err := strconv.ParseInt(m.Attributes["SentTimestamp"], 10, 64); err == nil {
		return time.UnixMilli(ms).UTC()
	}
	return time.Now().UTC()
}
