// Package batchend connects the limiter's functions to the batch ledger (internal/lambda/batch):
// the router opens a job's batch, whoever ends a job (a release, a dead letter, a refusal) records it,
// and the record that closes the batch sends the one "sfnlimit Batch Completed" event to
// EventBridge's default bus, then marks the batch announced.
//
// Order of writes: a job is recorded, and the batch it closes announced, before its end takes effect
// (its message deleted, its dead letter sent). A crash in between leaves the job to end again on its
// redelivery (or next release), which the ledger answers as a duplicate, or, for the closing job
// while the event is unsent, as closing again: never an ended job without a record, never a closed
// batch without its event. The price: the event may reach a rule a few milliseconds before the last
// job's dead letter reaches the queue. Two ends of the closing job at once both find the batch
// closed by it; the first to claim the announcement on the batch item sends, the other waits for it
// (Ledger.ClaimAnnouncement), so the event goes out once unless a sender crashes after sending, or
// DynamoDB refuses to mark the batch announced for half the claim's time after the send (the
// write is tried again until then). The close also lists the batch as pending on the ledger, until
// it is announced: the sweep sends the event of a batch pending too long (AnnouncePending), so an
// end whose retries are bounded (a refusal's, DeadLetters) may take effect without it.
package batchend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"

	"github.com/sfnlimit/sfnlimit/internal/lambda/batch"
	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
)

// The completion event, as EventBridge rules match it.
const (
	Source     = "sfnlimit"
	DetailType = "sfnlimit Batch Completed"
)

type ledger interface {
	OpenBy(ctx context.Context, id string, expected int, owner string, at time.Time) error
	Owner(ctx context.Context, id string) (string, error)
	Record(ctx context.Context, id, jobID string, redrive int, outcome batch.Outcome, at time.Time) (batch.Recorded, error)
	Announced(ctx context.Context, id string) error
	ClaimAnnouncement(ctx context.Context, id, holder string, at time.Time, ttl time.Duration) (bool, error)
	ReleaseAnnouncement(ctx context.Context, id, holder string) error
	Size(ctx context.Context, id string) (int, error)
	Pending(ctx context.Context, closedBefore time.Time) ([]string, error)
	Show(ctx context.Context, id string, withJobs bool) (batch.Summary, []batch.Job, error)
}

type publisher interface {
	PutEvents(context.Context, *eventbridge.PutEventsInput, ...func(*eventbridge.Options)) (*eventbridge.PutEventsOutput, error)
}

// Tracker opens batches and records their jobs' ends. A nil *Tracker tracks nothing.
type Tracker struct {
	Ledger ledger
	Events publisher
	// Stack names the stack in the completion event, so that rules can tell two stacks' batches
	// apart on the account's one default bus.
	Stack string
	Log   *slog.Logger
	Now   func() time.Time
	// AnnounceWait is how long an end of the closing job that finds another one sending the
	// completion event waits for it to be announced before it fails, to be retried (default 2 s).
	AnnounceWait time.Duration
	// ClaimFor is how long a sender holds the announcement: another end may send after it only
	// when the holder crashed (default 30 s, more than a PutEvents with the SDK's retries takes).
	ClaimFor time.Duration
	// Jitter returns a random number in [0, n) for the pauses between tries to mark a batch
	// announced (nil: math/rand; the simulation draws it from its seed).
	Jitter func(n int64) int64

	mu     sync.Mutex
	opened map[string]opened // batches this process saw open
}

// opened is a batch's size and owner, which never change once it is open.
type opened struct {
	size  int
	owner string
}

// New returns a tracker of l that publishes with events.
func New(l ledger, events publisher, stack string, log *slog.Logger) *Tracker {
	return &Tracker{Ledger: l, Events: events, Stack: stack, Log: log}
}

func (t *Tracker) jitter(n int64) int64 {
	if t.Jitter != nil {
		return t.Jitter(n)
	}
	return rand.Int64N(n)
}

func (t *Tracker) now() time.Time {
	if t.Now != nil {
		return t.Now()
	}
	return time.Now()
}

// InvalidType stands for the type of a job refused for its type, in its batch's record.
const InvalidType = "-"

// ErrNotOpen: the job's batch has not been opened (by a job carrying batchSize, or by the CLI).
var ErrNotOpen = batch.ErrNotOpen

// Admit checks, as the router takes a job sent by sender (a principal: batch.Principal of the
// message's SenderId), that its batch can count it. A job carrying batchSize opens its batch, owned
// by sender; any other job's batch must be open (ErrNotOpen otherwise, which the caller may wait
// out). A batch owned by another principal refuses the job (job.ReasonBatchNotOwned), whatever size
// it gives, before any size check; an open batch of another size refuses it too
// (job.ReasonInvalidBatch).
func (t *Tracker) Admit(ctx context.Context, j job.Job, sender string) error {
	if t == nil || j.Batch == "" {
		return nil
	}
	t.mu.Lock()
	o, seen := t.opened[j.Batch]
	t.mu.Unlock()
	if seen && !batch.Owns(o.owner, sender) {
		return notOwned(j, sender)
	}
	if seen && (j.BatchSize == 0 || j.BatchSize == o.size) {
		return nil
	}
	if j.BatchSize > 0 {
		err := t.Ledger.OpenBy(ctx, j.Batch, j.BatchSize, sender, t.now())
		if errors.Is(err, batch.ErrNotOwned) {
			return notOwned(j, sender)
		}
		if errors.Is(err, batch.ErrSizeMismatch) || errors.Is(err, batch.ErrExpired) {
			return &job.Error{Reason: job.ReasonInvalidBatch, Detail: err.Error()}
		}
		if err != nil {
			return fmt.Errorf("open batch %s of job %s: %w", j.Batch, j.ID, err)
		}
		// The owner is sender's unless the batch was open already without one.
		owner, err := t.Ledger.Owner(ctx, j.Batch)
		if err != nil {
			return fmt.Errorf("batch %s of job %s: %w", j.Batch, j.ID, err)
		}
		t.remember(j.Batch, opened{j.BatchSize, owner})
		return nil
	}
	size, err := t.Ledger.Size(ctx, j.Batch)
	if err != nil {
		return fmt.Errorf("batch %s of job %s: %w", j.Batch, j.ID, err)
	}
	owner, err := t.Ledger.Owner(ctx, j.Batch)
	if err != nil {
		return fmt.Errorf("batch %s of job %s: %w", j.Batch, j.ID, err)
	}
	t.remember(j.Batch, opened{size, owner})
	if !batch.Owns(owner, sender) {
		return notOwned(j, sender)
	}
	return nil
}

func notOwned(j job.Job, sender string) error {
	if sender == "" {
		sender = "an unknown sender"
	}
	return &job.Error{Reason: job.ReasonBatchNotOwned, Detail: fmt.Sprintf(
		"batch %q was opened by another sender than %s: only its opener's jobs may name it (send from the principal that opened it, or use a batch id of your own)", j.Batch, sender)}
}

func (t *Tracker) remember(id string, o opened) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.opened == nil || len(t.opened) > 10_000 {
		t.opened = map[string]opened{}
	}
	t.opened[id] = o
}

// End is one job's end.
type End struct {
	// A job is its type, key ("" the default key) and id: two keys' jobs with one id are counted
	// as two (job.BatchJobID).
	Batch, Type, Key, ID string
	Redrive              int
	Outcome              batch.Outcome
}

// ErrAnnouncementPending: the job's end was recorded and closed its batch, but the completion
// event was not sent (or not marked sent). The batch is on the ledger's pending list, written with
// the close: the closing job's retry sends the event, or else the sweep (AnnouncePending).
var ErrAnnouncementPending = errors.New("batch closed; its completion event is pending")

// Ended records e in its batch, once however often it is called, and when the record closes the
// batch, sends the completion event and marks the batch announced. The caller makes the job's end
// take effect (its message deleted, its dead letter sent) only after Ended returned nil, and retries
// the whole on an error: a retry of the closing job's end finds the batch closed by it and not yet
// announced, and sends the event again. An error wrapping ErrAnnouncementPending says the end is
// recorded and only the event is left: a caller whose retries are bounded (the router's, by the
// general queue's maxReceiveCount) may let the end take effect and leave the event to the sweep.
func (t *Tracker) Ended(ctx context.Context, e End) error {
	_, err := t.EndedAs(ctx, e)
	return err
}

// EndedAs is Ended, and says which outcome the batch counts the job with: e's, or the one an earlier
// end of the job was counted with first, which stands ("" when the job is not counted: no batch,
// outside the contract, or late).
func (t *Tracker) EndedAs(ctx context.Context, e End) (batch.Outcome, error) {
	closed, counted, err := t.record(ctx, e)
	if err != nil || closed == nil {
		return counted, err
	}
	log := t.logOf(e)
	if err := t.announce(ctx, log, closed); err != nil {
		log.WarnContext(ctx, "batch closed, its completion event not sent: the closing job's retry or the sweep sends it", "error", err)
		return counted, fmt.Errorf("%w: %w", ErrAnnouncementPending, err)
	}
	return counted, nil
}

// AnnouncePending sends the completion events of the batches that closed more than minAge ago and
// are still not announced (the sweep calls it): their closer's send failed and its end took effect
// anyway, or it crashed and its retries ran out. It returns how many it sent.
func (t *Tracker) AnnouncePending(ctx context.Context, minAge time.Duration) (int, error) {
	if t == nil {
		return 0, nil
	}
	ids, err := t.Ledger.Pending(ctx, t.now().Add(-minAge))
	if err != nil {
		return 0, fmt.Errorf("list batches pending announcement: %w", err)
	}
	sent := 0
	var errs []error
	for _, id := range ids {
		ok, err := t.announcePending(ctx, id)
		if ok && err == nil {
			sent++
		}
		errs = append(errs, err)
	}
	return sent, errors.Join(errs...)
}

// announcePending announces one pending batch; false when it was announced already (it only
// leaves the list).
func (t *Tracker) announcePending(ctx context.Context, id string) (bool, error) {
	sum, _, err := t.Ledger.Show(ctx, id, false)
	if err != nil {
		return false, fmt.Errorf("read batch %s pending announcement: %w", id, err)
	}
	if sum.Announced {
		return false, t.Ledger.Announced(ctx, id)
	}
	log := t.Log.With("batch", id, "closedBy", sum.ClosedBy)
	log.WarnContext(ctx, "batch closed without its completion event; sending it now")
	return true, t.announce(ctx, log, &sum)
}

// record records e; it returns the batch's summary when the record closed it.
func (t *Tracker) record(ctx context.Context, e End) (*batch.Summary, batch.Outcome, error) {
	if t == nil || e.Batch == "" {
		return nil, "", nil
	}
	log := t.logOf(e)
	if job.ValidateBatch(e.Batch, 0) != nil || job.ValidateID(e.ID) != nil {
		// A refusal of a job whose own batch or id is out of the contract: the ledger's keys
		// cannot name it, so it is not counted (its dead letter says why it was refused).
		log.WarnContext(ctx, "job ended outside the batch contract; not counted in its batch")
		return nil, "", nil
	}
	typ := e.Type
	if job.ValidateType(typ) != nil {
		typ = InvalidType // refused for its type: no type has a "-"
	}
	rec, err := t.Ledger.Record(ctx, e.Batch, job.BatchJobID(typ, e.Key, e.ID), e.Redrive, e.Outcome, t.now())
	if errors.Is(err, batch.ErrNotOpen) {
		// Only a job that bypassed the router (a lanes-queue message sent by hand) meets a batch
		// never opened: counting it is impossible, and holding its lane for it would leak the lane.
		log.ErrorContext(ctx, "job's batch was never opened; not counted", "error", err)
		return nil, "", nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("record job %s in batch %s: %w", e.ID, e.Batch, err)
	}
	switch rec.Result {
	case batch.Closed:
		if rec.Summary == nil {
			return nil, "", fmt.Errorf("batch %s closed without a summary", e.Batch)
		}
		return rec.Summary, rec.Counted, nil
	case batch.AfterClose:
		log.WarnContext(ctx, "job ended after its batch closed; listed as late, not counted")
	case batch.Duplicate:
		log.InfoContext(ctx, "job's end was recorded already", "counted", rec.Counted)
	}
	return nil, rec.Counted, nil
}

func (t *Tracker) logOf(e End) *slog.Logger {
	return t.Log.With("batch", e.Batch, "jobId", e.ID, "type", e.Type, "outcome", e.Outcome)
}

// Detail is the completion event's detail.
type Detail struct {
	Batch    string         `json:"batch"`
	Stack    string         `json:"stack,omitempty"`
	Expected int            `json:"expected"`
	Counts   map[string]int `json:"counts"`
	OpenedAt time.Time      `json:"openedAt"`
	// FirstEndedAt and LastEndedAt are the first and last end of a job of the batch.
	FirstEndedAt time.Time `json:"firstEndedAt"`
	LastEndedAt  time.Time `json:"lastEndedAt"`
	ClosedAt     time.Time `json:"closedAt"`
	// DeadLettered lists up to batch.MaxListed "{type}/{id}" of jobs dead-lettered or refused;
	// DeadLetteredMore says there are more, DeadLetteredWhere where to find them all.
	DeadLettered      []string `json:"deadLettered"`
	DeadLetteredMore  bool     `json:"deadLetteredMore,omitempty"`
	DeadLetteredWhere string   `json:"deadLetteredWhere,omitempty"`
}

// DetailOf is the completion event's detail for a closed batch's summary.
func DetailOf(sum batch.Summary, stack string) Detail {
	d := Detail{
		Batch: sum.Batch, Stack: stack, Expected: sum.Expected, Counts: map[string]int{},
		OpenedAt: sum.OpenedAt, FirstEndedAt: sum.First, LastEndedAt: sum.Last, ClosedAt: sum.ClosedAt,
		DeadLettered: append([]string{}, sum.DeadLetteredIDs...), DeadLetteredMore: sum.DeadLetteredMore,
	}
	for _, o := range batch.Outcomes {
		d.Counts[string(o)] = sum.Counts[o]
	}
	if d.DeadLetteredMore {
		d.DeadLetteredWhere = sum.DeadLetteredWhere
	}
	return d
}

// claim takes the announcement of a closed batch for this call (Ledger.ClaimAnnouncement): another
// end of the closing job may be sending the event right now (a status event and the sweep
// releasing one execution at once, a batch delivered twice), and the ledger answers both
// "closed". It waits up to AnnounceWait for that one's announcement; claimed is false, without an
// error, when the batch was announced meanwhile (nothing left to send).
func (t *Tracker) claim(ctx context.Context, id, holder string) (claimed bool, err error) {
	wait, ttl := t.AnnounceWait, t.ClaimFor
	if wait <= 0 {
		wait = 2 * time.Second
	}
	if ttl <= 0 {
		ttl = 30 * time.Second
	}
	deadline := time.Now().Add(wait)
	for {
		claimed, err := t.Ledger.ClaimAnnouncement(ctx, id, holder, t.now(), ttl)
		if !errors.Is(err, batch.ErrAnnouncing) || time.Now().After(deadline) {
			return claimed, err
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// markAnnounced marks a batch whose event was sent. A failure is tried again here, with growing
// pauses for up to half the claim's time: the event is out, and an error would have the closing
// job's retry send it a second time once the claim expires.
func (t *Tracker) markAnnounced(ctx context.Context, id string) error {
	ttl := t.ClaimFor
	if ttl <= 0 {
		ttl = 30 * time.Second
	}
	deadline := time.Now().Add(ttl / 2)
	pause := 50 * time.Millisecond
	for {
		err := t.Ledger.Announced(ctx, id)
		if err == nil || ctx.Err() != nil || time.Now().Add(pause).After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(pause + time.Duration(t.jitter(int64(pause)))):
		}
		pause = min(2*pause, 2*time.Second)
	}
}

func (t *Tracker) announce(ctx context.Context, log *slog.Logger, sum *batch.Summary) error {
	if sum == nil {
		return fmt.Errorf("batch closed without a summary")
	}
	detail, err := json.Marshal(DetailOf(*sum, t.Stack))
	if err != nil {
		return fmt.Errorf("encode completion of batch %s: %w", sum.Batch, err)
	}
	holder := fmt.Sprintf("%x", rand.Uint64())
	claimed, err := t.claim(ctx, sum.Batch, holder)
	if err != nil {
		return fmt.Errorf("send completion of batch %s: %w", sum.Batch, err)
	}
	if !claimed {
		log.InfoContext(ctx, "batch's completion event was sent by another end of its closing job")
		return nil
	}
	sent := false
	defer func() {
		if !sent {
			// Give the claim back, so that the closing job's retry sends at once.
			if err := t.Ledger.ReleaseAnnouncement(context.WithoutCancel(ctx), sum.Batch, holder); err != nil {
				log.WarnContext(ctx, "could not give back the batch's announcement; its retry waits for the claim to expire", "error", err)
			}
		}
	}()
	out, err := t.Events.PutEvents(ctx, &eventbridge.PutEventsInput{Entries: []ebtypes.PutEventsRequestEntry{{
		Source: aws.String(Source), DetailType: aws.String(DetailType), Detail: aws.String(string(detail)),
		Time: aws.Time(sum.ClosedAt),
	}}})
	if err != nil {
		return fmt.Errorf("send completion of batch %s: %w", sum.Batch, err)
	}
	if out.FailedEntryCount > 0 {
		code, msg := "", ""
		if len(out.Entries) > 0 {
			code, msg = aws.ToString(out.Entries[0].ErrorCode), aws.ToString(out.Entries[0].ErrorMessage)
		}
		return fmt.Errorf("send completion of batch %s: EventBridge refused it: %s %s", sum.Batch, code, msg)
	}
	sent = true // sent: whatever happens next, a retry must not find the claim free before it expires
	if err := t.markAnnounced(ctx, sum.Batch); err != nil {
		// The event went out: a retry of the closing job sends it again once the claim expires.
		log.ErrorContext(ctx, "batch's completion event was sent but not marked so; it may be sent again", "error", err)
		return fmt.Errorf("mark batch %s announced: %w", sum.Batch, err)
	}
	log.InfoContext(ctx, "batch completed", "expected", sum.Expected, "succeeded", sum.Counts[batch.Succeeded],
		"deadLettered", sum.Counts[batch.DeadLettered], "refused", sum.Counts[batch.Refused],
		"cancelled", sum.Counts[batch.Cancelled], "skipped", sum.Counts[batch.Skipped],
		"seconds", sum.ClosedAt.Sub(sum.OpenedAt).Seconds())
	return nil
}
