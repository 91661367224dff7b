package ops

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
	"github.com/sfnlimit/sfnlimit/internal/lambda/pool"
	"github.com/sfnlimit/sfnlimit/internal/lambda/releaser"
	"github.com/sfnlimit/sfnlimit/internal/lambda/waitroom"
)

// LanesRetention is how long the lanes queue keeps a message (its MessageRetentionPeriod in
// template.yaml): a job paused for longer than this since it was submitted is lost.
const LanesRetention = 14 * 24 * time.Hour

// PauseResult is what a pause did.
type PauseResult struct {
	Type  string    `json:"type"`
	Pause PauseView `json:"pause"`
	// Already says the type was paused before: the pause keeps the time it began, and
	// PreviousReason is the reason it had.
	Already        bool   `json:"already,omitempty"`
	PreviousReason string `json:"previousReason,omitempty"`
	// CacheSeconds is how long the functions may take to see the pause (ConfigCacheSeconds).
	CacheSeconds float64 `json:"cacheSeconds"`
}

// Pause pauses a type: its live override gets a pause (config.Pause) beginning now, with reason
// (nil: none, or the reason it had when it was paused already). A type paused already keeps the
// time its pause began, so status and the paused alarm count from the first pause. A type without
// a limit starts nothing, and is refused.
func (e ConfigEditor) Pause(ctx context.Context, typ string, reason *string) (PauseResult, error) {
	if err := ValidateTypeArg(typ); err != nil {
		return PauseResult{}, err
	}
	now := e.now()
	if reason != nil {
		if err := ValidatePauseReason(typ, *reason); err != nil {
			return PauseResult{}, err
		}
	}
	ovs, err := e.Store.ListOverrides(ctx)
	if err != nil {
		return PauseResult{}, err
	}
	if err := e.checkLimit(ctx, ovs, typ, "pause"); err != nil {
		return PauseResult{}, err
	}
	o, rest := splitOverrides(ovs, typ)
	res := PauseResult{Type: typ, CacheSeconds: e.CacheAge.Seconds()}
	p := config.Pause{Since: now}
	if o.Pause != nil {
		p, res.Already, res.PreviousReason = *o.Pause, true, o.Pause.Reason
	}
	if reason != nil {
		p.Reason = *reason
	}
	o.Pause = &p
	if err := o.Validate(); err != nil {
		// Only a stored item written by hand gets here: the pause itself was checked.
		return PauseResult{}, fmt.Errorf("%w (the stored override of type %s keeps its other fields: set them right, or config reset it)", err, typ)
	}
	if err := e.checkSet(ctx, append(rest, o)); err != nil {
		return PauseResult{}, err
	}
	if err := e.Store.SetOverride(ctx, o); err != nil {
		return PauseResult{}, err
	}
	res.Pause = *pauseView(&p, now)
	return res, nil
}

// ValidatePauseReason checks a pause's reason with the functions' own rule and words
// (config.Override.Validate: at most config.MaxPauseReason characters, none a control character);
// a bad one is a usage error.
func ValidatePauseReason(typ, reason string) error {
	if err := (config.Override{Type: typ, Pause: &config.Pause{Reason: reason, Since: time.Now()}}).Validate(); err != nil {
		return UsageError{fmt.Errorf("--reason: %w", err)}
	}
	return nil
}

// checkLimit refuses to pause or resume a type that has no limit with the overrides ovs: none of
// its jobs start, paused or not.
func (e ConfigEditor) checkLimit(ctx context.Context, ovs []config.Override, typ, what string) error {
	r, err := config.NewResolver(e.Defaults, staticStore(ovs), time.Second)
	if err != nil {
		return err
	}
	if _, err := r.Get(ctx, typ); errors.Is(err, config.ErrUnknownType) {
		if near := closest(typ, e.knownTypes(ovs)); near != "" {
			return usagef("type %s has no limit, so none of its jobs start (unknown_type): nothing to %s. Did you mean %s?", typ, what, near)
		}
		return usagef("type %s has no limit, so none of its jobs start (unknown_type): nothing to %s; config set %s --limit N gives it one", typ, what, typ)
	} else if err != nil {
		return err
	}
	return nil
}

// WriteTable prints a pause for people: what it does, and what it does not.
func (r PauseResult) WriteTable(w io.Writer) error {
	p := r.Pause
	if r.Already {
		fmt.Fprintf(w, "type %s was paused already, for %s since %s: the pause keeps the time it began.\n", r.Type, p.age(), p.Since.Format(time.RFC3339))
		if r.PreviousReason != p.Reason {
			fmt.Fprintf(w, "reason: %s -> %s\n", (&PauseView{Reason: r.PreviousReason}).reasonText(), p.reasonText())
		} else {
			fmt.Fprintf(w, "reason: %s (unchanged)\n", p.reasonText())
		}
	} else {
		fmt.Fprintf(w, "type %s paused at %s: %s\n", r.Type, p.Since.Format(time.RFC3339), p.reasonText())
	}
	_, err := fmt.Fprintf(w, `Within %s (ConfigCacheSeconds) no new execution of type %s starts. Its running executions finish
and release their lanes as usual. Its waiting jobs wait in their queue, in order: none is
dead-lettered, and none expires unless it waits longer than the lanes queue's retention (%s
since it was submitted). Run "sfnlimit resume %s" to start them again; status shows how long it
has been paused.
`, time.Duration(r.CacheSeconds*float64(time.Second)), r.Type, Age(LanesRetention), r.Type)
	return err
}

// laneQueueAPI is the lanes queue as a wake-up uses it (releaser.Service's queue: the sqs client).
type laneQueueAPI interface {
	DeleteMessage(context.Context, *sqs.DeleteMessageInput, ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error)
	ChangeMessageVisibility(context.Context, *sqs.ChangeMessageVisibilityInput, ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error)
}

// parkedClaimer reads and claims a type's parked waiting groups (waitroom.Store), and puts back a
// record claimed for a head not made visible.
type parkedClaimer interface {
	List(ctx context.Context, typ string) ([]waitroom.Waiter, error)
	Claim(ctx context.Context, w waitroom.Waiter) (bool, error)
	Restore(ctx context.Context, w waitroom.Waiter) error
}

// Waker wakes parked waiting groups as the releaser does (releaser.Service.WakeResumed for a resume,
// WakePool for a raised pool cap), on the lanes queue and the wait room of the limiter's table. A
// zero Waker wakes nobody.
type Waker struct {
	Queue    laneQueueAPI
	QueueURL string
	WaitRoom parkedClaimer
	// Leases are the type's lane leases: groups parked for a lane are woken as many as the lanes
	// free (nil: only the groups parked by the pause).
	Leases *lease.Store
	// Pools are the pools' slots: a raised cap wakes as many groups as it freed slots (nil: none
	// woken by a pool change).
	Pools *pool.Store
	// PriorityAging orders the groups woken (config.DefaultPriorityAging when 0; the starter binds
	// them in the order it receives them anyway).
	PriorityAging time.Duration
}

// service is the releaser's wake-up on w, judging types by the overrides ovs (as just written: the
// table's config Query is eventually consistent, and a read that still saw the old value would wake
// nobody).
func (w Waker) service(e ConfigEditor, ovs []config.Override) (*releaser.Service, error) {
	cfg, err := config.NewResolver(e.Defaults, staticStore(ovs), 0)
	if err != nil {
		return nil, err
	}
	svc := &releaser.Service{
		Queue: w.Queue, QueueURL: w.QueueURL, WaitRoom: w.WaitRoom, Config: cfg, PriorityAging: w.PriorityAging,
		Now: e.Now, Log: slog.New(slog.DiscardHandler),
	}
	if w.Leases != nil {
		svc.Leases = w.Leases
	}
	if w.Pools != nil {
		svc.Pools = w.Pools
	}
	return svc, nil
}

// ResumeResult is what a resume did.
type ResumeResult struct {
	Type string `json:"type"`
	// Pause is the pause lifted; nil when the type was not paused.
	Pause *PauseView `json:"pause,omitempty"`
	// Woken counts the waiting groups parked by the pause made visible again: their first jobs are
	// received again at once, and those behind them follow in their groups' order.
	Woken int `json:"woken"`
	// WakeError says why the parked groups were not all woken (the sweep wakes them).
	WakeError    string  `json:"wakeError,omitempty"`
	CacheSeconds float64 `json:"cacheSeconds"`
}

// Resume lifts a type's pause and wakes its waiting groups parked by it at once, rather than after
// their park (15 minutes). The pause is removed from the live override (the item goes when nothing
// else is left in it). A type not paused is left as it is, but its groups still parked by an
// earlier pause are woken: a resume cut short is finished by running it again. A wake-up that
// fails after the pause is lifted is returned as an error with the result: the releaser's sweep
// wakes those groups within a minute.
func (e ConfigEditor) Resume(ctx context.Context, typ string, w Waker) (ResumeResult, error) {
	if err := ValidateTypeArg(typ); err != nil {
		return ResumeResult{}, err
	}
	ovs, err := e.Store.ListOverrides(ctx)
	if err != nil {
		return ResumeResult{}, err
	}
	if err := e.checkLimit(ctx, ovs, typ, "resume"); err != nil {
		return ResumeResult{}, err
	}
	res := ResumeResult{Type: typ, CacheSeconds: e.CacheAge.Seconds()}
	o, rest := splitOverrides(ovs, typ)
	next := ovs
	if o.Pause != nil {
		res.Pause = pauseView(o.Pause, e.now())
		o.Pause = nil
		next = rest
		if reflect.DeepEqual(o, config.Override{Type: typ}) {
			err = e.Store.DeleteOverride(ctx, typ) // the item held the pause alone
		} else {
			next = append(next, o)
			err = e.Store.SetOverride(ctx, o)
		}
		if err != nil {
			return ResumeResult{}, err
		}
	}
	if w.Queue == nil {
		return res, nil
	}
	svc, err := w.service(e, next)
	if err != nil {
		return res, err
	}
	res.Woken, err = svc.WakeResumed(ctx, typ)
	if err != nil {
		res.WakeError = err.Error()
		return res, fmt.Errorf("type %s is resumed, but waking its groups parked by the pause stopped after %d: %w; the releaser's sweep wakes the others within a minute, or run resume again",
			typ, res.Woken, err)
	}
	return res, nil
}

// WriteTable prints a resume for people.
func (r ResumeResult) WriteTable(w io.Writer) error {
	cache := time.Duration(r.CacheSeconds * float64(time.Second))
	if p := r.Pause; p != nil {
		fmt.Fprintf(w, "type %s resumed: it was paused for %s, since %s (%s).\n", r.Type, p.age(), p.Since.Format(time.RFC3339), p.reasonText())
	} else {
		fmt.Fprintf(w, "type %s is not paused: nothing to resume.\n", r.Type)
	}
	switch {
	case r.Woken > 0:
		fmt.Fprintf(w, "Woke %s parked by the pause: their jobs bind to free lanes again, higher priority and older first;\nthe jobs behind them follow in their groups' order.\n",
			plural(r.Woken, "waiting group", "waiting groups"))
	case r.Pause != nil:
		fmt.Fprintln(w, "No waiting group was parked by the pause.")
	}
	if r.Pause != nil {
		fmt.Fprintf(w, "Functions that read the config in the last %s (ConfigCacheSeconds) start its new jobs once they read it again.\n", cache)
	}
	return nil
}
