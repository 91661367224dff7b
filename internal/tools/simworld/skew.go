package simworld

import (
	"time"

	"github.com/sfnlimit/sfnlimit/internal/lambda/batchend"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
	"github.com/sfnlimit/sfnlimit/internal/lambda/ratelimit"
	"github.com/sfnlimit/sfnlimit/internal/lambda/releaser"
	"github.com/sfnlimit/sfnlimit/internal/lambda/starter"
)

// Clock skew between functions (Faults.Skew). Each simulated Lambda container gets a clock of its
// own, off true time (the simulated services' clock: SQS's SentTimestamp, Step Functions' start
// dates) by an offset drawn from the seed when the container starts, uniform in [-Skew, +Skew].
//
// The bound: Lambda hosts keep time with the Amazon Time Sync Service (NTP over the link-local
// 169.254.169.123), whose error on EC2 is documented in the microseconds to low milliseconds. One
// second is far above that, on purpose, and it is the bound the starter itself assumes between its
// clock and Step Functions' (starter.clockSkew): a wider skew would break the code's own documented
// assumption rather than find a defect. Two containers may then differ by up to 2 s.
//
// The offset reaches every clock seam a handler has: starter.Starter.Now, the lease stores'
// UpdatedAt stamps (lease.Store.SetClock), the start-rate buckets (ratelimit.Buckets.Now), the
// releaser's and the sweep's judgement of lease ages (releaser.Service.Now, releaser.Handler.Now)
// and the releasers' batch trackers. The router reads no clock that matters here (a job's
// submission time is SQS's SentTimestamp), and the configuration cache only measures its own age,
// which an offset does not change. Timers, sleeps and context deadlines are durations, unaffected.
// Routers draw no offset: their one clock seam, their batch tracker's Now, has nothing to judge
// while the workload has no batches; once it has, a router container should get its own offset
// too (which moves every seed of a profile with skew, and so the pinned ones).

// clockOffset draws a new container's clock offset (0 when skew is off, with no draw, so seeds
// without skew replay as before).
func (w *World) clockOffset() time.Duration {
	b := w.cfg.Faults.Skew
	if b <= 0 {
		return 0
	}
	return time.Duration(w.rng.Int64N(int64(2*b)+1)) - b
}

// skewedClock is true (virtual) time plus off.
func skewedClock(off time.Duration) func() time.Time {
	return func() time.Time { return time.Now().Add(off) }
}

// skewStarter gives a starter container, and the releaser service it carries, one skewed clock.
func (w *World) skewStarter(s *starter.Starter) {
	off := w.clockOffset()
	if off == 0 {
		return
	}
	now := skewedClock(off)
	s.Now = now
	if l, ok := s.Leases.(*lease.Store); ok {
		l.SetClock(now)
	}
	if b, ok := s.Rates.(*ratelimit.Buckets); ok {
		b.Now = now
	}
	if svc, ok := s.Releaser.(*releaser.Service); ok {
		skewService(svc, now)
	}
	w.trace("skew", "starter container clock offset %s", off)
}

// skewReleaser gives a releaser container (release step, status events, sweep) one skewed clock.
func (w *World) skewReleaser(h *releaser.Handler) {
	off := w.clockOffset()
	if off == 0 {
		return
	}
	now := skewedClock(off)
	h.Now = now
	if l, ok := h.Leases.(*lease.Store); ok {
		l.SetClock(now)
	}
	skewService(h.Service, now)
	w.trace("skew", "releaser container clock offset %s", off)
}

func skewService(svc *releaser.Service, now func() time.Time) {
	svc.Now = now
	if l, ok := svc.Leases.(*lease.Store); ok {
		l.SetClock(now)
	}
	if t, ok := svc.Batches.(*batchend.Tracker); ok {
		t.Now = now
	}
}
