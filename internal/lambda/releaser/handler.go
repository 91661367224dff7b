package releaser

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
	"github.com/sfnlimit/sfnlimit/internal/lambda/metrics"
)

// WorkflowEvent is what a workflow's Release step sends.
type WorkflowEvent struct {
	Source       string   `json:"source"`
	Outcome      Outcome  `json:"outcome"`
	Job          job.Meta `json:"job"`
	ExecutionArn string   `json:"executionArn"`
	Error        string   `json:"error,omitempty"`
	Cause        string   `json:"cause,omitempty"`
}

// StatusDetail is the detail of an EventBridge "Step Functions Execution Status Change" event.
type StatusDetail struct {
	ExecutionArn    string  `json:"executionArn"`
	StateMachineArn string  `json:"stateMachineArn"`
	Name            string  `json:"name"`
	Status          string  `json:"status"`
	Input           *string `json:"input"`
	Error           *string `json:"error"`
	Cause           *string `json:"cause"`
}

type envelope struct {
	Source     string          `json:"source"`
	DetailType string          `json:"detail-type"`
	Detail     json.RawMessage `json:"detail"`
}

// Response is what the releaser function returns.
type Response struct {
	Result  Result `json:"result,omitempty"`
	Swept   int    `json:"swept,omitempty"`
	Checked int    `json:"checked,omitempty"`
}

// Handler is the releaser function: one entry point for the workflow's Release step, EventBridge
// status-change events and the sweep schedule.
type Handler struct {
	Service *Service
	// Leases is read type by type: the sweep never scans the table (lease.ListTypes).
	Leases lease.TypeLister
	// SweepMinAge skips leases changed more recently than this (they are being worked on), and
	// executions that stopped more recently than this (their own release is on its way).
	SweepMinAge time.Duration
	// SweepMaxDescribes bounds DescribeExecution calls per sweep (Step Functions' quota is shared).
	SweepMaxDescribes int
	// SweepConcurrency bounds parallel DescribeExecution calls.
	SweepConcurrency int
	// StaleAfter is how long a lease without a running execution may sit untouched before the
	// sweep takes the lane back: a bound lease whose copy never claimed it, a retrying lease, or an
	// unconfirmed claim whose execution does not exist. Each is refreshed by every delivery of its
	// message, which comes back within the lanes queue's visibility timeout while it exists; longer
	// than that, the message is gone (purged, expired) and nothing else would free the lane, since
	// first-free binds only lanes without a lease (0: never). A bound lease's copy is not in
	// flight but queued, for as long as the lanes queue is behind: with Probes, the sweep takes it
	// back only through the lane's group (probe).
	StaleAfter time.Duration
	// Probes sends the sweep's probes to the lanes queue (Service.QueueURL): a stale bound lease
	// is taken back by the starter when the probe reaches it with no copy of its job queued ahead
	// (job.Probe). Without it the sweep takes a stale bound lease back itself.
	Probes laneSender
	// Running lists a state machine's running executions, so that the sweep describes only the
	// leases whose executions are not among them (nil: it describes every due lease).
	Running runningLister
	// Legacy deletes, type by type, the lane counts the retired least-loaded strategy left in the
	// table (internal/lambda/legacy; nil: none).
	Legacy legacyCleaner
	// Batches sends the completion events of batches closed and left unannounced (nil: none).
	Batches pendingAnnouncer
	Now     func() time.Time
	Log     *slog.Logger
}

// pendingAnnouncer sends the completion events a batch's closer could not (batchend.Tracker).
type pendingAnnouncer interface {
	AnnouncePending(ctx context.Context, minAge time.Duration) (int, error)
}

// legacyCleaner deletes a type's items left by a retired version (internal/lambda/legacy).
type legacyCleaner interface {
	Clean(ctx context.Context, typ string) (int, error)
}

// Handle dispatches on the event's shape.
func (h *Handler) Handle(ctx context.Context, raw json.RawMessage) (Response, error) {
	defer func() {
		if err := h.Service.Metrics.Flush(); err != nil {
			h.Log.WarnContext(ctx, "metrics not written", "error", err)
		}
	}()
	var env envelope
	if err := json.Unmarshal(raw, &env); err != nil {
		return Response{}, fmt.Errorf("releaser event is not a JSON object: %w", err)
	}
	switch {
	case env.Source == "workflow":
		var ev WorkflowEvent
		if err := json.Unmarshal(raw, &ev); err != nil {
			return Response{}, fmt.Errorf("decode workflow release event: %w", err)
		}
		return h.workflow(ctx, ev)
	case env.DetailType == "Step Functions Execution Status Change":
		var d StatusDetail
		if err := json.Unmarshal(env.Detail, &d); err != nil {
			return Response{}, fmt.Errorf("decode status change event: %w", err)
		}
		return h.statusChange(ctx, d)
	case env.DetailType == "Scheduled Event":
		return h.Sweep(ctx)
	}
	return Response{}, fmt.Errorf("releaser cannot tell what event this is (source %q, detail-type %q)", env.Source, env.DetailType)
}

func (h *Handler) workflow(ctx context.Context, ev WorkflowEvent) (Response, error) {
	if ev.Outcome != Succeeded && ev.Outcome != Failed {
		return Response{}, fmt.Errorf("workflow release event has outcome %q: want succeeded or failed", ev.Outcome)
	}
	if ev.Job.ID == "" || ev.Job.Type == "" || ev.Job.Lane < 1 || ev.Job.Attempt < 1 {
		return Response{}, fmt.Errorf("workflow release event lacks job metadata (id, type, lane, attempt): pass $$.Execution.Input.job")
	}
	// The calling execution ($$.Execution.Id) must be the lease's: a child workflow started with the
	// job's input carries the job's metadata, and its own Release step must not free the lane its
	// parent still runs in (Release ignores a request naming another execution). A payload without
	// executionArn, from a Release step written without it, is released as before: it cannot be told
	// from the lease's own, and refusing it would hold every lane of such a workflow until the sweep.
	if ev.ExecutionArn == "" {
		h.Log.WarnContext(ctx, "workflow release without executionArn: not checked against the lease's execution; pass $$.Execution.Id",
			"jobId", ev.Job.ID, "type", ev.Job.Type, "lane", ev.Job.Lane, "attempt", ev.Job.Attempt)
	}
	res, err := h.Service.Release(ctx, Request{
		Key: lease.Key{Type: ev.Job.Type, Lane: ev.Job.Lane}, JobID: ev.Job.ID, JobKey: ev.Job.Key, JobSender: ev.Job.Sender, Redrive: ev.Job.Redrive, Attempt: ev.Job.Attempt,
		Outcome: ev.Outcome, Error: ev.Error, Cause: ev.Cause, Source: "workflow", ExecutionArn: ev.ExecutionArn, MessageID: ev.Job.MessageID,
	})
	return Response{Result: res}, err
}

func (h *Handler) statusChange(ctx context.Context, d StatusDetail) (Response, error) {
	outcome, closed := OutcomeOf(d.Status)
	if !closed {
		return Response{Result: Noop}, nil
	}
	// Any closed status releases, SUCCEEDED included. The template's Succeeded rule sends
	// SUCCEEDED events only for the state machines that may run in events release mode (the bare
	// sample and ExtraStateMachineArns), whose workflows need no Release step: this is their
	// release. It sends none for the sample (one per job would double the releaser's invocations
	// for nothing): the sample's Release step releases its successes, and when that step failed
	// (its Catch ends the execution in success) the sweep releases the lane as the success it was.
	// A success whose workflow still has a Release step finds nothing left to do here.
	in, err := h.executionInput(ctx, d)
	if err != nil {
		return Response{}, err
	}
	if in == nil {
		h.Log.InfoContext(ctx, "status change of an execution that is not a limiter job", "executionArn", d.ExecutionArn)
		return Response{Result: Noop}, nil
	}
	res, err := h.Service.Release(ctx, Request{
		Key: lease.Key{Type: in.Job.Type, Lane: in.Job.Lane}, JobID: in.Job.ID, JobKey: in.Job.Key, JobSender: in.Job.Sender, Redrive: in.Job.Redrive, Attempt: in.Job.Attempt,
		Outcome: outcome, Error: orDefault(d.Error, "States."+d.Status), Cause: orDefault(d.Cause, ""), Source: "status-event",
		ExecutionArn: d.ExecutionArn, MessageID: in.Job.MessageID,
	})
	return Response{Result: res}, err
}

// executionInput reads the job metadata from the event, or from the execution when the event left
// its input out. It returns nil for executions that carry no job metadata.
func (h *Handler) executionInput(ctx context.Context, d StatusDetail) (*job.ExecutionInput, error) {
	raw := d.Input
	if raw == nil {
		out, err := h.Service.SFN.DescribeExecution(ctx, &sfn.DescribeExecutionInput{ExecutionArn: &d.ExecutionArn})
		if err != nil {
			return nil, fmt.Errorf("read input of execution %s: %w", d.ExecutionArn, err)
		}
		raw = out.Input
	}
	var in job.ExecutionInput
	if raw == nil || json.Unmarshal([]byte(*raw), &in) != nil || in.Job.ID == "" || in.Job.Lane < 1 {
		return nil, nil
	}
	return &in, nil
}

// Sweep releases the leases of executions that closed without a release (status events are best
// effort, and a workflow whose Release step failed ends SUCCEEDED with its lease held). It checks
// running leases older than SweepMinAge, oldest first, at most SweepMaxDescribes. A type whose
// leases cannot be read is reported and the others are swept.
func (h *Handler) Sweep(ctx context.Context) (Response, error) {
	all, listErr := h.sweepLeases(ctx)
	now := h.now
	h.gauges(ctx, all)
	var due []lease.Lease
	freed, probed := 0, 0
	for _, l := range all {
		if (l.Status == lease.Bound || l.Status == lease.Retrying || l.Status == lease.Moving) && l.Stale(now(), h.StaleAfter) {
			if l.Status == lease.Bound && h.Probes != nil {
				if h.probe(ctx, l) {
					probed++
				}
				continue
			}
			if h.takeBack(ctx, l) {
				freed++
			}
			continue
		}
		// A dead-lettering lease whose release stopped before it finished is taken over (Release),
		// and a claim (the lease of a started job: a start writes nothing after it) whose execution
		// ended is released like a running one.
		busy := l.Status == lease.DeadLettering || l.Status == lease.Starting
		if busy && now().Sub(l.UpdatedAt) >= h.SweepMinAge {
			due = append(due, l)
		}
	}
	due = h.withoutRunning(ctx, due)
	sort.Slice(due, func(i, j int) bool { return due[i].UpdatedAt.Before(due[j].UpdatedAt) })
	if h.SweepMaxDescribes > 0 && len(due) > h.SweepMaxDescribes {
		h.Log.WarnContext(ctx, "sweep budget reached; the rest wait for the next sweep", "due", len(due), "budget", h.SweepMaxDescribes)
		due = due[:h.SweepMaxDescribes]
	}
	var (
		mu       sync.Mutex
		swept    int
		firstErr error
		wg       sync.WaitGroup
		sem      = make(chan struct{}, max(h.SweepConcurrency, 1))
	)
	for _, l := range due {
		wg.Add(1)
		sem <- struct{}{}
		go func(l lease.Lease) {
			defer func() { <-sem; wg.Done() }()
			fixed, err := h.sweepOne(ctx, l)
			mu.Lock()
			defer mu.Unlock()
			if fixed {
				swept++
			}
			if err != nil && firstErr == nil {
				firstErr = err
			}
		}(l)
	}
	wg.Wait()
	cs, cfgErr := h.Service.Config.All(ctx)
	if cfgErr == nil {
		h.Service.adoptRunning(ctx, all, cs, now(), h.SweepMinAge)
	}
	h.cleanLegacy(ctx, all)
	h.wakeResumed(ctx, all)
	if cfgErr == nil {
		h.Service.sweepPools(ctx, cs)
	}
	h.announceBatches(ctx)
	h.Log.InfoContext(ctx, "sweep done", "leases", len(all), "checked", len(due), "released", swept, "boundTakenBack", freed, "boundProbed", probed)
	return Response{Swept: swept + freed, Checked: len(due)}, errors.Join(listErr, firstErr)
}

// announceBatches sends the completion events of the batches that closed more than SweepMinAge ago
// without one (their closer is given that long to send it itself).
func (h *Handler) announceBatches(ctx context.Context) {
	if h.Batches == nil {
		return
	}
	n, err := h.Batches.AnnouncePending(ctx, h.SweepMinAge)
	if err != nil {
		h.Log.WarnContext(ctx, "sweep: batches left unannounced; the next sweep tries again", "sent", n, "error", err)
	} else if n > 0 {
		h.Log.InfoContext(ctx, "sweep: sent the completion events of batches left unannounced", "sent", n)
	}
}

// sweepLeases reads the leases of every type that may hold one, a Query per type: the types in the
// config (TypeLimits and live items) and every type that has ever held a lease (the registry, which
// keeps a type whose config was removed while its leases live). A Scan would also read the lane
// counts of every recent job, millions a day, and not finish in the releaser's timeout.
func (h *Handler) sweepLeases(ctx context.Context) ([]lease.Lease, error) {
	var types []string
	cs, cfgErr := h.Service.Config.All(ctx)
	for _, c := range cs {
		types = append(types, c.Type)
	}
	all, err := lease.ListTypes(ctx, h.Leases, types, h.SweepConcurrency)
	if cfgErr != nil {
		err = errors.Join(fmt.Errorf("read config: %w", cfgErr), err)
	}
	if err != nil {
		err = fmt.Errorf("sweep: %w", err)
	}
	return all, err
}

// cleanLegacy deletes the retired lane counts of every type with a lease or a config. A failure is
// logged: the next sweep tries again.
func (h *Handler) cleanLegacy(ctx context.Context, all []lease.Lease) {
	if h.Legacy == nil {
		return
	}
	types := map[string]bool{}
	for _, l := range all {
		types[l.Type] = true
	}
	if cs, err := h.Service.Config.All(ctx); err == nil {
		for _, c := range cs {
			types[c.Type] = true
		}
	}
	if registered, err := h.Leases.Types(ctx); err == nil {
		for _, t := range registered {
			types[t] = true
		}
	}
	for _, t := range slices.Sorted(maps.Keys(types)) {
		n, err := h.Legacy.Clean(ctx, t)
		if err != nil {
			h.Log.WarnContext(ctx, "retired lane counts not deleted; the next sweep tries again", "type", t, "error", err)
			continue
		}
		if n > 0 {
			h.Log.InfoContext(ctx, "deleted lane counts of the retired least-loaded strategy", "type", t, "items", n)
		}
	}
}

// takeBack deletes a stale lease without a running execution and wakes a parked waiting group for
// the lane. A message of its job that still arrives finds the lane free (and claims it, going on from
// its attempts in Step Functions) or bound again (and waits again, carrying them).
func (h *Handler) takeBack(ctx context.Context, l lease.Lease) bool {
	log := h.Log.With("jobId", l.JobID, "type", l.Type, "lane", l.Lane, "status", l.Status)
	if l.KeyToken || l.TypeToken {
		log = log.With("keyToken", l.KeyToken, "typeToken", l.TypeToken) // given back (refundBind)
	}
	if err := h.Service.Free(ctx, l); err != nil {
		log.WarnContext(ctx, "sweep: stale lease not taken back", "error", err)
		return false
	}
	log.WarnContext(ctx, "sweep took back a lane whose lease nothing had touched for too long", "updatedAt", l.UpdatedAt)
	h.Service.Metrics.Add(l.Type, metrics.LeasesSwept, 1)
	return true
}

// DescribeSettle is how long after a claim a DescribeExecution that does not find its execution is
// not believed: DescribeExecution is eventually consistent ("may not reflect very recent updates"),
// so an execution just started can briefly look as if it did not exist.
const DescribeSettle = 60 * time.Second

func (h *Handler) sweepOne(ctx context.Context, l lease.Lease) (bool, error) {
	arn := h.Service.ExecutionArnOf(ctx, l)
	if arn == "" {
		h.Log.WarnContext(ctx, "sweep: no state machine known for the lease's type; its message's next delivery releases it",
			"jobId", l.JobID, "type", l.Type, "lane", l.Lane, "status", l.Status)
		return false, nil
	}
	out, err := h.Service.SFN.DescribeExecution(ctx, &sfn.DescribeExecutionInput{ExecutionArn: &arn})
	if l.Status == lease.Starting && isErr[*sfntypes.ExecutionDoesNotExist](err) {
		// The start never went through (or is not visible yet): the claim's message comes back and
		// the starter tries again; there is nothing to release. A claim untouched for StaleAfter has
		// no message left to come back.
		if l.Stale(h.now(), h.StaleAfter) && h.now().Sub(l.UpdatedAt) >= DescribeSettle {
			return h.takeBack(ctx, l), nil
		}
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("sweep: describe execution %s of job %s: %w", arn, l.JobID, err)
	}
	outcome, closed := OutcomeOf(string(out.Status))
	if !closed {
		return false, nil
	}
	if out.StopDate != nil && h.now().Sub(*out.StopDate) < h.SweepMinAge {
		// Its own release is on its way: the Release step runs before the stop, the status event
		// comes after it. The sweep is for releases that were missed, and counts them as such.
		return false, nil
	}
	var in job.ExecutionInput
	_ = json.Unmarshal([]byte(aws.ToString(out.Input)), &in)
	res, err := h.Service.Release(ctx, Request{
		Key: l.Key(), JobID: l.JobID, JobKey: l.JobKey, JobSender: l.JobSender, Redrive: l.Redrive, Attempt: l.Attempt, Outcome: outcome,
		Error: orDefault(out.Error, "States."+string(out.Status)), Cause: orDefault(out.Cause, ""), Source: "sweep", MessageID: in.Job.MessageID,
	})
	if err != nil {
		return false, err
	}
	if res != Noop {
		h.Service.Metrics.Add(l.Type, metrics.LeasesSwept, 1)
		h.Log.WarnContext(ctx, "sweep released a lane its execution left behind",
			"jobId", l.JobID, "type", l.Type, "lane", l.Lane, "attempt", l.Attempt, "status", out.Status, "result", res)
	}
	return res != Noop, nil
}

// wakeResumed wakes the groups of every type that is no longer paused but whose heads parked while
// it was: the resume wakes them itself, and this catches a resume cut short. It wakes parked groups
// of every type with lanes free too (all is the sweep's read of the leases), as a release would:
// a raised limit wakes no one by itself, nor does a release whose wake-up failed, and a parked head
// looks again by itself only after its park (up to waitroom.MaxParkFor).
func (h *Handler) wakeResumed(ctx context.Context, all []lease.Lease) {
	// The types in the config and every type that has held a lease: a type limited only by
	// DEFAULT_LIMIT whose override held nothing but the pause is in the config no more once
	// resumed (found in review).
	types := map[string]bool{}
	if cs, err := h.Service.Config.All(ctx); err == nil {
		for _, c := range cs {
			types[c.Type] = !c.Paused()
		}
	}
	if registered, err := h.Leases.Types(ctx); err == nil {
		for _, t := range registered {
			if _, seen := types[t]; !seen {
				types[t] = true
			}
		}
	}
	for _, typ := range slices.Sorted(maps.Keys(types)) {
		if !types[typ] {
			continue
		}
		n, err := h.Service.WakePaused(ctx, typ)
		if err != nil && !errors.Is(err, config.ErrUnknownType) {
			h.Log.WarnContext(ctx, "sweep: jobs parked by a pause not woken; the next sweep tries again", "type", typ, "error", err)
		}
		if n > 0 {
			h.Log.InfoContext(ctx, "sweep woke jobs parked while their type was paused", "type", typ, "woken", n)
		}
		h.Service.wakeFree(ctx, typ, all)
	}
}

// gauges records, per type with leases or a configured limit, the running leases and the share of
// the type's lanes they hold. A claim (starting) counts: a confirmed start writes nothing more, so it
// is the lease of almost every running job (and, for a moment, of a start not yet confirmed).
func (h *Handler) gauges(ctx context.Context, all []lease.Lease) {
	running := map[string]int{}
	for _, l := range all {
		if l.Status == lease.Starting {
			running[l.Type]++
		}
	}
	if cs, err := h.Service.Config.All(ctx); err == nil {
		for _, c := range cs {
			if _, ok := running[c.Type]; !ok {
				running[c.Type] = 0
			}
			if c.Paused() {
				h.Service.Metrics.Observe(c.Type, metrics.PausedSeconds, h.now().Sub(c.Pause.Since).Seconds())
			}
		}
	}
	for _, typ := range slices.Sorted(maps.Keys(running)) {
		n := running[typ]
		h.Service.Metrics.Observe(typ, metrics.RunningLeases, float64(n))
		if c, err := h.Service.Config.Get(ctx, typ); err == nil && c.Limit > 0 {
			h.Service.Metrics.Observe(typ, metrics.LaneOccupancy, 100*float64(n)/float64(c.Limit))
		}
	}
}

// now is the sweep's clock: Now, or time.Now when it is nil.
func (h *Handler) now() time.Time {
	if h.Now != nil {
		return h.Now()
	}
	return time.Now()
}

func orDefault(p *string, def string) string {
	if p == nil || *p == "" {
		return def
	}
	return *p
}

func isErr[T error](err error) bool {
	var t T
	return errors.As(err, &t)
}
