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
	"github.com/sfnlimit/sfnlimit/internal/lambda/unlisted"
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
	// Self is the router's own principal (ROUTER_ROLE_ID: its role's unique id, as SQS puts it in
	// the SenderId of what the router sends): only its messages' SubmittedAtAttribute and
	// SenderAttribute are trusted ("": none are).
	Self string
	// Unlisted bounds the types that run on the fallback limit (nil: no bound): a job of such a
	// type routes only once its type holds a slot, and is refused when other types hold them all.
	Unlisted slotTaker
}

type slotTaker interface {
	// Take makes sure typ holds an unlisted type's slot, taken for sender when new;
	// unlisted.ErrFull when none is free, or sender holds its share.
	Take(ctx context.Context, typ, sender string) error
}

type batchAdmitter interface {
	// Admit opens or checks j's batch for sender (the principal that sent j): a *job.Error refuses
	// the job (job.ReasonBatchNotOwned: the batch is another sender's), batchend.ErrNotOpen says its
	// batch is not open (yet).
	Admit(ctx context.Context, j job.Job, sender string) error
}

// BatchWaitReceives is the delivery of a job at which the router stops waiting for its batch to be
// opened and refuses it (job.ReasonBatchNotOpen): below the general queue's maxReceiveCount
// (template.yaml), after which SQS would move the job to the dead-letter queue without a reason.
// Until then each delivery of a job whose batch is not open is reported failed, and comes back
// after the general queue's visibility timeout: the job that opens the batch (batchSize) may
// simply have been delivered later.
const BatchWaitReceives = 3

type backlogGauge interface {
	// Reserve says which types of n (jobs per type) may not go to the lanes queue now (held;
	// the others' jobs are counted), with the depth it estimates; on an error every type may go.
	Reserve(ctx context.Context, n map[string]int) (held map[string]bool, depth int, err error)
}

// routed is a job of the batch on its way to a lane.
type routed struct {
	m   events.SQSMessage
	j   job.Job
	cfg config.TypeConfig
	// lane is the job's lane (random), or job.WaitingLane (first-free), whose group is group.
	lane  int
	group string
	// sender is the principal that sent the job first (origin).
	sender string
	// uncounted: the job's batch was never seen open and its sender's, so its refusal is not
	// recorded there (its dead letter still names it).
	uncounted bool
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
			bj := batchJob(x.j)
			berr := r.admitBatch(ctx, m, bj, x.sender)
			if job.ReasonOf(berr) == job.ReasonBatchNotOpen {
				// The check found no owner: the batch may have been opened since, by anyone, and
				// a refusal recorded there would count in it whoever sent it. Look again: the
				// batch counts the job only once it is seen open and its sender's.
				switch again := r.Batches.Admit(ctx, bj, x.sender); {
				case again == nil:
					berr = nil // opened meanwhile by its sender
				case job.ReasonOf(again) != "":
					berr = again // another sender's (batch_not_owned)
				default:
					x.uncounted = true // still not open: refused, not counted
				}
			}
			if berr != nil && job.ReasonOf(berr) == "" {
				r.Log.WarnContext(ctx, "job's batch not ready; the general queue will deliver the job again",
					"messageId", m.MessageId, "type", x.j.Type, "jobId", x.j.ID, "batch", x.j.Batch, "error", berr)
				fail(m)
				continue
			} else if err == nil && x.j.Redrive > 0 && job.ReasonOf(berr) == job.ReasonBatchNotOwned {
				// A redrive by another principal than the batch's owner (an operator's dlq redrive):
				// the job runs again, outside the batch, which counted its first end already.
				r.Log.InfoContext(ctx, "redriven job runs outside its batch, which its sender does not own",
					"type", x.j.Type, "jobId", x.j.ID, "batch", x.j.Batch, "redrive", x.j.Redrive)
				x.j.Batch, x.j.BatchSize = "", 0
			} else if berr != nil && (err == nil || job.ReasonOf(berr) == job.ReasonBatchNotOwned) {
				// Another sender's job is refused as such, and never counted in the batch.
				err = berr
			}
		}
		if err != nil {
			if reason := job.ReasonOf(err); reason != "" {
				if dlErr := r.reject(ctx, m, x.j, reason, err, x.uncounted); dlErr != nil {
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
		n := map[string]int{}
		for _, x := range jobs {
			n[x.j.Type]++
		}
		held, depth, err := r.Backlog.Reserve(ctx, n)
		if err != nil {
			// Route as if the lanes queue had room: holding every job on a failed read would
			// stop the limiter for nothing; the next reading decides again.
			r.Log.WarnContext(ctx, "lanes queue depth not read; routing", "error", err)
		}
		if len(held) > 0 {
			// Only the held types' jobs wait: a type flooding the backlog holds back no other.
			var hold, route []*routed
			for _, x := range jobs {
				if held[x.j.Type] {
					hold = append(hold, x)
				} else {
					route = append(route, x)
				}
			}
			r.hold(ctx, hold, depth, fail)
			jobs = route
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
			MessageDeduplicationId: aws.String(job.DedupID(x.j.Type, x.j.Sender, x.j.Key, x.j.ID, x.j.Redrive)),
		})
		byEntry[id] = x
		r.Log.InfoContext(ctx, "routed", "jobId", x.j.ID, "type", x.j.Type, "key", x.j.Key, "sender", x.j.Sender, "lane", x.lane, "group", x.group, "strategy", x.cfg.Strategy)
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
			MessageGroupId:    aws.String(group),
			MessageAttributes: heldAttributes(x),
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

// heldAttributes keep a held job's submission time and first sender, which the router trusts on
// its own messages only (origin).
func heldAttributes(x *routed) map[string]types.MessageAttributeValue {
	attrs := map[string]types.MessageAttributeValue{SubmittedAtAttribute: {
		DataType: aws.String("Number"), StringValue: aws.String(strconv.FormatInt(x.j.SubmittedAt.UnixMilli(), 10)),
	}}
	if x.j.Sender != "" {
		attrs[SenderAttribute] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(x.j.Sender)}
	}
	return attrs
}

// admitBatch opens or checks the batch of j (a job or a refusal's known fields). An error with a
// job.Reason refuses the job; any other asks for the job again later.
func (r *Router) admitBatch(ctx context.Context, m events.SQSMessage, j job.Job, sender string) error {
	if r.Batches == nil || j.Batch == "" || job.ValidateBatch(j.Batch, j.BatchSize) != nil {
		return nil // no batch, or a batch id the refusal names invalid: not counted
	}
	err := r.Batches.Admit(ctx, j, sender)
	if errors.Is(err, batch.ErrNotOpen) {
		if receives(m) >= BatchWaitReceives {
			return &job.Error{Reason: job.ReasonBatchNotOpen, Detail: fmt.Sprintf(
				"batch %q is not open after %d deliveries: give the batch's jobs batchSize, or open it first (sfnlimit batch open)", j.Batch, receives(m))}
		}
	}
	return err
}

// batchJob is j as its batch is admitted: a batchSize out of the contract opens nothing, but a
// refusal that names a valid batch id is counted there (reject), so the batch is still checked for
// its owner, as for any other refusal: another sender's is batch_not_owned and never counted.
func batchJob(j job.Job) job.Job {
	if job.ValidateBatch(j.Batch, 0) == nil && job.ValidateBatch(j.Batch, j.BatchSize) != nil {
		j.BatchSize = 0
	}
	return j
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
	at, principal, sender := r.origin(m)
	j, err := job.Parse([]byte(m.Body), m.MessageId, at)
	j.Sender = sender // the router's to say, never the body's
	x := &routed{m: m, j: j, sender: principal}
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
	if cfg.Source == config.SourceFallback && r.Unlisted != nil {
		err := r.Unlisted.Take(ctx, j.Type, shareOf(x.sender))
		if errors.Is(err, unlisted.ErrFull) {
			return x, &job.Error{Reason: job.ReasonUnlistedTypes, Detail: fmt.Sprintf(
				"type %s has no limit of its own and runs on the default limit, and as many other such types "+
					"as UnlistedTypesLimit allows hold lanes, or this sender's hold its share, half (%v): list the type (TypeLimits, or sfnlimit config set) "+
					"and redrive the job", j.Type, err)}
		}
		if err != nil {
			return x, err
		}
	}
	x.cfg = cfg
	return x, nil
}

func (r *Router) reject(ctx context.Context, m events.SQSMessage, j job.Job, reason job.Reason, cause error, uncounted bool) error {
	r.Metrics.Add(j.Type, metrics.JobsRejected, 1)
	r.Log.WarnContext(ctx, "job refused", "messageId", m.MessageId, "type", j.Type, "jobId", j.ID, "reason", reason, "error", cause)
	body, batchID := m.Body, j.Batch
	if reason == job.ReasonBatchNotOwned {
		batchID = "" // not the sender's batch: its dead letter is not counted there
	}
	if batchID != "" && j.ID == m.MessageId {
		// A batch's job without an id is named by its first message's id, in its batch too: its
		// dead letter names it, so that a redrive (a new message) is the same job, counted once.
		body = withID(body, j.ID)
	}
	return r.DLQ.Send(ctx, deadletter.Entry{
		Reason: string(reason), Source: "router", Type: j.Type, JobID: j.ID, Key: j.Key, Sender: j.Sender, Error: string(reason), Cause: cause.Error(), Body: body,
		Batch: batchID, Redrive: j.Redrive, Refused: true,
		BatchRecorded: uncounted, // not to be recorded: its batch is not (known to be) its sender's
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
