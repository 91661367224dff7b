package releaser

import (
	"context"
	"log/slog"

	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
	"github.com/sfnlimit/sfnlimit/internal/lambda/ratelimit"
)

// tokenRefunder gives start tokens back to the types' and keys' buckets (ratelimit.Buckets).
type tokenRefunder interface {
	Refund(ctx context.Context, typ string, r ratelimit.Rate) error
	RefundKey(ctx context.Context, typ, key string, r ratelimit.Rate) error
}

// refundBind gives back the start tokens the bind of l took (lease.Lease.KeyToken, TypeToken), l
// being a bound lease Free has just deleted. The copy's claim replaces a bound lease with a
// conditional write, as the delete is one: a lease deleted while bound was never claimed, and no
// start used its tokens; a claim that came first made the delete fail, and a copy that comes after
// finds no lease and takes tokens of its own. Only the delete that removed the lease gets here, so
// two sweeps that read it give back once; each refund carries its own mark, so one answered as
// failed is not made twice (ratelimit.Buckets.Refund). A delete applied but answered as failed is
// reported as a conflict (lease.Store.Delete), and its tokens, like those of a refund that fails or
// of a type whose config cannot be read, are lost: the rate is not reached for a moment, never
// exceeded. Each goes back up to the bucket's burst at its current rate, and not to a bucket
// whose rate is gone.
func (s *Service) refundBind(ctx context.Context, log *slog.Logger, l lease.Lease) {
	if l.Status != lease.Bound || (!l.KeyToken && !l.TypeToken) || s.Rates == nil {
		return
	}
	cfg, err := s.Config.Get(ctx, l.Type)
	if err != nil {
		log.WarnContext(ctx, "start tokens of a bind never claimed not given back: config not read", "error", err)
		return
	}
	if r := cfg.KeyRateOf(l.JobKey); l.KeyToken && r.IsSet() {
		if err := s.Rates.RefundKey(ctx, l.Type, l.JobKey, ratelimit.Rate{PerSecond: r.PerSecond, Burst: r.Burst}); err != nil {
			log.WarnContext(ctx, "key's start token of a bind never claimed not given back", "error", err)
		}
	}
	if l.TypeToken && cfg.Rate.IsSet() {
		if err := s.Rates.Refund(ctx, l.Type, ratelimit.Rate{PerSecond: cfg.Rate.PerSecond, Burst: cfg.Rate.Burst}); err != nil {
			log.WarnContext(ctx, "type's start token of a bind never claimed not given back", "error", err)
		}
	}
	log.InfoContext(ctx, "gave back the start tokens of a bind never claimed", "key", l.JobKey, "keyToken", l.KeyToken, "typeToken", l.TypeToken)
}
