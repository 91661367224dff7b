package starter

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
	"github.com/sfnlimit/sfnlimit/internal/lambda/metrics"
	"github.com/sfnlimit/sfnlimit/internal/lambda/ratelimit"
	"github.com/sfnlimit/sfnlimit/internal/lambda/waitroom"
)

// Flow control (issue 14): a paused type starts nothing new, and a type with a rate starts at most
// that many jobs per second.

// PausedParkFor is how long the head of a paused type's waiting group stays invisible before it
// looks at the config again by itself. A resume wakes it at once (sfnlimit resume, and every sweep
// after); this is only the bound on a resume nobody woke. While a type is paused its queue is not
// handed out over and over: each waiting group costs one receive, one visibility change and one
// park record per PausedParkFor, whatever the number of jobs queued behind its head (FIFO hands out
// none of them).
const PausedParkFor = 15 * time.Minute

// maxRateSleep is the longest a start waits for its token in the invocation; a longer wait puts the
// message back for that long instead (its lane stays bound to it; no attempt is used).
const maxRateSleep = 2 * time.Second

// rateTaker takes start tokens from the types' buckets (internal/lambda/ratelimit).
type rateTaker interface {
	Take(ctx context.Context, typ string, r ratelimit.Rate) (time.Duration, error)
	TakeKey(ctx context.Context, typ, key string, r ratelimit.Rate) (time.Duration, error)
	Refund(ctx context.Context, typ string, r ratelimit.Rate) error
	RefundKey(ctx context.Context, typ, key string, r ratelimit.Rate) error
}

// typeRegistry registers the types the sweep looks at (lease.Store).
type typeRegistry interface {
	RegisterType(ctx context.Context, typ string) error
}

// freshConfig is a config getter that can read past its cache.
type freshConfig interface {
	Fresh(ctx context.Context, typ string) (config.TypeConfig, error)
}

// fresh reads the type's config past the cache when the getter can.
func (s *Starter) fresh(ctx context.Context, typ string) (config.TypeConfig, error) {
	if f, ok := s.Config.(freshConfig); ok {
		return f.Fresh(ctx, typ)
	}
	return s.Config.Get(ctx, typ)
}

// parkPaused parks the waiting group of a paused type: its head stays in flight for PausedParkFor
// (FIFO holds the jobs behind it) with a park record marked paused, for the resume to wake. The
// record is written before the config is read again past its cache, so a resume either shows in
// that read, or comes after the record and finds it. It returns the fresh config when the type
// turned out to be resumed (the record is removed and the bind goes on), else the verdict.
func (s *Starter) parkPaused(ctx context.Context, x *msg, w waitroom.Waiter) (v verdict, parked bool, resumed *config.TypeConfig, err error) {
	current, err := s.holdsMessageFor(ctx, x, int32(PausedParkFor.Seconds()))
	if err != nil {
		return hold, false, nil, fmt.Errorf("park waiting message of a paused type: %w", err)
	}
	if !current {
		x.log.InfoContext(ctx, "stale delivery of a waiting message; not parking it")
		return hold, true, nil, nil
	}
	w.Paused, w.Until = true, w.ParkedAt.Add(PausedParkFor)
	if r, ok := s.Leases.(typeRegistry); ok {
		// The sweep wakes a resumed type's parked groups if the resume's own wake-up was cut
		// short: it must know the type even if it never held a lease (one write per container).
		if err := r.RegisterType(ctx, x.key.Type); err != nil {
			return hold, false, nil, err
		}
	}
	if err := s.WaitRoom.Park(ctx, w); errors.Is(err, waitroom.ErrGroupParked) {
		x.log.InfoContext(ctx, "another message of the waiting group is parked; looking again shortly")
		return s.backoff(ctx, x.SQSMessage), true, nil, nil
	} else if err != nil {
		return hold, false, nil, err
	}
	cfg, err := s.fresh(ctx, x.key.Type)
	if err != nil || cfg.Paused() {
		if err != nil {
			x.log.WarnContext(ctx, "config not read again after parking; the parked group waits for a resume", "error", err)
		} else {
			x.log.InfoContext(ctx, "type paused; parked until it is resumed", "group", w.Group,
				"pausedSinceMs", cfg.Pause.Since.UnixMilli(), "reason", cfg.Pause.Reason)
		}
		s.Metrics.Add(x.key.Type, metrics.JobsPaused, 1)
		return hold, true, nil, nil
	}
	if err := s.WaitRoom.Unpark(ctx, w); err != nil {
		x.log.WarnContext(ctx, "parked record not removed; the sweep wakes this group for nothing", "error", err)
	}
	// Resumed: the job goes on now, and its message gets the queue's visibility timeout back. Left
	// invisible for PausedParkFor, it would hold its group that long if this invocation stopped
	// before acknowledging it (killed at its timeout, or a call failing after the bind).
	s.setVisibility(ctx, x.SQSMessage, s.visibilitySeconds())
	return hold, false, &cfg, nil
}

// parkInLane parks a job in its lane while its type is paused: its message stays in flight for
// PausedParkFor, with a park record (keyed by the lane's group, marked paused) for the resume to
// wake, so the job keeps its place: a bound lane stays bound to it, a retry keeps its lease, and a
// random-strategy lane keeps its order. As for a waiting group, the config is read again past its
// cache after the record is written; a type resumed meanwhile goes on at once (resumed is its
// config).
func (s *Starter) parkInLane(ctx context.Context, x *msg) (resumed *config.TypeConfig, v verdict, err error) {
	if s.WaitRoom == nil {
		return nil, s.backoff(ctx, x.SQSMessage), nil
	}
	w := waitroom.Waiter{Type: x.key.Type, Group: x.Attributes["MessageGroupId"], MessageID: x.MessageId, ReceiptHandle: x.ReceiptHandle,
		Receives: x.receives(), JobID: x.job.ID, Key: x.job.Key, Priority: x.job.EffectivePriority(), SubmittedAt: x.job.SubmittedAt, ParkedAt: s.now()}
	v, _, cfg, err := s.parkPaused(ctx, x, w)
	if cfg == nil || err != nil {
		return nil, v, err
	}
	return cfg, hold, nil
}

// holdLease keeps a lane's bound or retrying lease (or a claim whose start never went through) for a
// job whose message goes away for d (parked for a pause, waiting for a start token): the lease says
// when the message is due back, so neither the sweep nor another job's delivery takes it for stale
// meanwhile. A lease taken back while its job waits would let the binder fill the job's key to its
// cap, and the job's next delivery would then start one more (issue 22, defect 2). One write per
// wait, and none for the many short waits that end well before the lease could go stale.
//
// With giveUpTokens, a bound lease gives up the tokens its bind took (the caller gives them back):
// it takes new ones at its start (claim.go).
func (s *Starter) holdLease(ctx context.Context, x *msg, l lease.Lease, d time.Duration, giveUpTokens bool) (lease.Lease, error) {
	next := l
	next.HeldUntil = s.now().Add(d)
	if giveUpTokens {
		next.KeyToken, next.TypeToken = false, false
	}
	written, err := s.Leases.Put(ctx, next, &l)
	if err != nil {
		return l, fmt.Errorf("hold lane %s for the job while it waits: %w", x.key, err)
	}
	return written, nil
}

// takeToken takes the start tokens of a new attempt: its key's first, when its key has a rate, then
// its type's, when its type has one. It returns 0 with them, else how long until the next is due.
// The key's comes first: a noisy key waiting for its own spends none of its type's. (A key token
// whose type's is not due is spent: the key then starts below its rate, never above.) A bind takes
// them (bindFree), so that a job waiting for a token waits in its group, holding no lane; a retry,
// or a job in a lane it was not bound to, takes them in its lane.
func (s *Starter) takeToken(ctx context.Context, x *msg, cfg config.TypeConfig) (time.Duration, error) {
	if wait, err := s.takeKeyToken(ctx, x, cfg); err != nil || wait > 0 {
		return wait, err
	}
	wait, err := s.takeTypeToken(ctx, x, cfg)
	if err != nil || wait > 0 {
		s.refundTokens(ctx, x, cfg, true, false) // the key's goes back: the job comes back for both
	}
	return wait, err
}

// refundTokens gives back the tokens taken for a start that is not made now: the key's when withKey
// (and the key has a rate), the type's when withType. A refund that fails loses the token: the rate is then not
// reached for a moment, never exceeded.
func (s *Starter) refundTokens(ctx context.Context, x *msg, cfg config.TypeConfig, withKey, withType bool) {
	if s.Rates == nil {
		return
	}
	if r := cfg.KeyRateOf(x.job.Key); withKey && r.IsSet() {
		if err := s.Rates.RefundKey(ctx, x.key.Type, x.job.Key, ratelimit.Rate{PerSecond: r.PerSecond, Burst: r.Burst}); err != nil {
			x.log.WarnContext(ctx, "key's start token not given back", "error", err)
		}
	}
	if withType && cfg.Rate.IsSet() {
		if err := s.Rates.Refund(ctx, x.key.Type, ratelimit.Rate{PerSecond: cfg.Rate.PerSecond, Burst: cfg.Rate.Burst}); err != nil {
			x.log.WarnContext(ctx, "type's start token not given back", "error", err)
		}
	}
}

// takeTypeToken takes a start token from the bucket of the job's type when the type has a rate (0:
// taken, or none needed; else how long until one is due).
func (s *Starter) takeTypeToken(ctx context.Context, x *msg, cfg config.TypeConfig) (time.Duration, error) {
	if !cfg.Rate.IsSet() || s.Rates == nil {
		return 0, nil
	}
	return s.takeFrom(ctx, x, func() (time.Duration, error) {
		return s.Rates.Take(ctx, x.key.Type, ratelimit.Rate{PerSecond: cfg.Rate.PerSecond, Burst: cfg.Rate.Burst})
	})
}

// takeKeyToken takes a start token from the bucket of the job's key when the key has a rate (0:
// taken, or none needed; else how long until one is due).
func (s *Starter) takeKeyToken(ctx context.Context, x *msg, cfg config.TypeConfig) (time.Duration, error) {
	r := cfg.KeyRateOf(x.job.Key)
	if !r.IsSet() || s.Rates == nil {
		return 0, nil
	}
	return s.takeFrom(ctx, x, func() (time.Duration, error) {
		return s.Rates.TakeKey(ctx, x.key.Type, x.job.Key, ratelimit.Rate{PerSecond: r.PerSecond, Burst: r.Burst})
	})
}

// takeFrom takes a token with take, having waited up to maxRateSleep for it: 0 with one, else how
// long until the next is due.
func (s *Starter) takeFrom(ctx context.Context, x *msg, take func() (time.Duration, error)) (time.Duration, error) {
	slept := time.Duration(0)
	for {
		wait, err := take()
		if err != nil || wait == 0 {
			if err == nil && slept > 0 {
				x.log.InfoContext(ctx, "waited for a start token", "rateWaitMs", slept.Milliseconds())
			}
			return 0, err
		}
		// A little jitter: starters told the same wait do not all come back at once.
		wait += time.Duration(s.jitter(int64(wait/10) + 1))
		if slept+wait > maxRateSleep || s.Sleep == nil {
			return wait, nil
		}
		if err := s.Sleep(ctx, wait); err != nil {
			return 0, err
		}
		slept += wait
	}
}

// waitForToken puts the message back until its token is due: nothing is written, no attempt used,
// and a bound lane stays bound to it.
func (s *Starter) waitForToken(ctx context.Context, x *msg, cfg config.TypeConfig, wait time.Duration) verdict {
	secs := int32((wait + time.Second - 1) / time.Second)
	x.log.InfoContext(ctx, "start rate reached; the job waits for its start token", "rate", cfg.Rate.String(), "keyRate", cfg.KeyRateOf(x.job.Key).String(), "waitSeconds", secs)
	s.Metrics.Add(x.key.Type, metrics.JobsRateLimited, 1)
	s.setVisibility(ctx, x.SQSMessage, secs)
	return hold
}

// SleepContext waits d, or until ctx ends.
func SleepContext(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
