package ratelimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/sfnlimit/sfnlimit/internal/lambda/ratelimit"
	"github.com/sfnlimit/sfnlimit/internal/tools/fakes"
)

// Review of issue 14: "In any interval of T seconds at most B + R x T tokens are taken"
// (docs/design.md). Starters' clocks have sub-millisecond precision, but the bucket stores atMs
// truncated to the millisecond while its tokens were counted up to the exact instant: every take
// credits the next one with the lost fraction of a millisecond again. At high rates the bucket
// hands out far more than R + B in one second.
// The bucket's arithmetic is the point, so it runs on the in-memory table only: 80,000 takes on moto
// would take minutes.
func TestTakeNeverGivesMoreThanRatePlusBurstInOneSecond(t *testing.T) {
	func(f func(t *testing.T, b *ratelimit.Buckets, clock *fakes.Clock)) {
		clock := fakes.NewClock(time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC))
		b := ratelimit.New(fakes.NewDynamoDB("t"), "t")
		b.Now = clock.Now
		f(t, b, clock)
	}(func(t *testing.T, b *ratelimit.Buckets, clock *fakes.Clock) {
		ctx := context.Background()
		for _, r := range []ratelimit.Rate{{PerSecond: 100, Burst: 1}, {PerSecond: 1000, Burst: 1}, {PerSecond: 2000, Burst: 1}} {
			typ := "t" + time.Duration(r.PerSecond).String()
			clock.Advance(900 * time.Microsecond) // starters' clocks are not on whole milliseconds
			// Starters asking all the time (every 37 µs), so a token is taken soon after it is due
			// at any fraction of a millisecond, as with concurrent starters on real clocks.
			step := 37 * time.Microsecond
			start, took := clock.Now(), 0
			for clock.Now().Sub(start) <= time.Second {
				w, err := b.Take(ctx, typ, r)
				if err != nil {
					t.Fatal(err)
				}
				if w == 0 {
					took++
				}
				clock.Advance(step)
			}
			t.Logf("rate %v burst %d: took %d", r.PerSecond, r.Burst, took)
			if limit := int(r.PerSecond) + r.Burst; took > limit {
				t.Errorf("rate %v/s burst %d: %d tokens taken in one second, more than R+B = %d", r.PerSecond, r.Burst, took, limit)
			}
		}
	})
}
