package ratelimit_test

import (
	"context"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sfnlimit/sfnlimit/internal/lambda/ratelimit"
	"github.com/sfnlimit/sfnlimit/internal/tools/fakes"
	"github.com/sfnlimit/sfnlimit/internal/tools/testmoto"
)

var moto *dynamodb.Client

func TestMain(m *testing.M) { os.Exit(testmoto.RunDynamoDB(m, &moto)) }

type db interface {
	GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(context.Context, *dynamodb.PutItemInput, ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
}

// forBoth runs f on moto and on the in-memory table the starter's tests use.
func forBoth(t *testing.T, f func(t *testing.T, b *ratelimit.Buckets, clock *fakes.Clock)) {
	t.Run("dynamodb", func(t *testing.T) {
		clock := fakes.NewClock(time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC))
		b := ratelimit.New(moto, testmoto.Table(t, moto, "rate"))
		b.Now = clock.Now
		f(t, b, clock)
	})
	t.Run("fake", func(t *testing.T) {
		clock := fakes.NewClock(time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC))
		var d db = fakes.NewDynamoDB("t")
		b := ratelimit.New(d, "t")
		b.Now = clock.Now
		f(t, b, clock)
	})
}

// A full bucket gives its burst at once, then one token per 1/rate; a taker told to wait is told
// how long until its token, and the types' buckets are apart.
func TestTakeRefillsAtTheRate(t *testing.T) {
	forBoth(t, func(t *testing.T, b *ratelimit.Buckets, clock *fakes.Clock) {
		ctx := context.Background()
		r := ratelimit.Rate{PerSecond: 2, Burst: 3}
		take := func() time.Duration {
			t.Helper()
			w, err := b.Take(ctx, "partner", r)
			if err != nil {
				t.Fatal(err)
			}
			return w
		}
		for i := range 3 {
			if w := take(); w != 0 {
				t.Fatalf("take %d of a full bucket of 3 = wait %v, want a token", i+1, w)
			}
		}
		if w := take(); w != 500*time.Millisecond {
			t.Errorf("take from an empty bucket = wait %v, want 500ms (1 token at 2/s)", w)
		}
		clock.Advance(250 * time.Millisecond)
		if w := take(); w != 250*time.Millisecond {
			t.Errorf("take 250ms later = wait %v, want 250ms", w)
		}
		clock.Advance(250 * time.Millisecond)
		if w := take(); w != 0 {
			t.Errorf("take once a token is due = wait %v, want it", w)
		}
		if w, err := b.Take(ctx, "other", r); err != nil || w != 0 {
			t.Errorf("another type's bucket = %v, %v; want a token from its own full bucket", w, err)
		}
		clock.Advance(time.Hour) // refills to the burst, no more
		for i := range 4 {
			if w := take(); (w == 0) != (i < 3) {
				t.Errorf("take %d after an hour = wait %v; want the burst of 3, then a wait", i+1, w)
			}
		}
	})
}

// Concurrent takers never spend more than the bucket holds: of 20 racing for a bucket of 5 at a
// fixed moment, 5 get a token, however the races fall.
func TestConcurrentTakersNeverOverspend(t *testing.T) {
	forBoth(t, func(t *testing.T, b *ratelimit.Buckets, _ *fakes.Clock) {
		var got atomic.Int32
		var wg sync.WaitGroup
		for range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					w, err := b.Take(context.Background(), "partner", ratelimit.Rate{PerSecond: 0.001, Burst: 5})
					if err != nil {
						t.Error(err)
						return
					}
					if w == 0 {
						got.Add(1)
						return
					}
					if w > time.Second { // empty: no more tokens at this moment
						return
					}
				}
			}()
		}
		wg.Wait()
		if n := got.Load(); n != 5 {
			t.Errorf("tokens taken by 20 racing takers = %d, want the burst of 5", n)
		}
	})
}

// A taker whose clock is behind the bucket's last take gains nothing from the difference.
func TestClockBehindGainsNothing(t *testing.T) {
	forBoth(t, func(t *testing.T, b *ratelimit.Buckets, clock *fakes.Clock) {
		ctx := context.Background()
		r := ratelimit.Rate{PerSecond: 1, Burst: 1}
		if w, _ := b.Take(ctx, "p", r); w != 0 {
			t.Fatalf("first take = wait %v", w)
		}
		clock.Advance(-2 * time.Second)
		if w, _ := b.Take(ctx, "p", r); w != time.Second {
			t.Errorf("take by a clock 2 s behind = wait %v, want 1s (no token from the skew)", w)
		}
	})
}

// "In any interval of T seconds at most B + R x T tokens are taken" (docs/design.md). The defect
// this guards against: starters' clocks have sub-millisecond precision, but the bucket stored atMs
// truncated to the millisecond while its tokens were counted up to the exact instant, so every take
// credited the next one with the lost fraction of a millisecond again, and at high rates the bucket
// handed out far more than R + B in one second.
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

// A key's bucket is its own: a noisy key that spends its tokens leaves its type's bucket and every
// other key's as they were.
func TestKeyBucketsAreApartFromTheTypesAndEachOther(t *testing.T) {
	forBoth(t, func(t *testing.T, b *ratelimit.Buckets, _ *fakes.Clock) {
		ctx := context.Background()
		r := ratelimit.Rate{PerSecond: 1, Burst: 2}
		for i := range 3 {
			w, err := b.TakeKey(ctx, "llm", "noisy", r)
			if err != nil || (w == 0) != (i < 2) {
				t.Fatalf("take %d from key noisy = %v, %v; want its burst of 2, then a wait", i+1, w, err)
			}
		}
		for _, other := range []struct{ typ, key string }{{"llm", "quiet"}, {"llm", ""}, {"other", "noisy"}} {
			if w, err := b.TakeKey(ctx, other.typ, other.key, r); err != nil || w != 0 {
				t.Errorf("key %s/%q after noisy spent its tokens = %v, %v; want a token from its own bucket", other.typ, other.key, w, err)
			}
		}
		if w, err := b.Take(ctx, "llm", r); err != nil || w != 0 {
			t.Errorf("type llm's bucket = %v, %v; want a token: a key's takes are not its type's", w, err)
		}
	})
}

// A bucket's item expires (DynamoDB's TTL) a margin after it is full again: one read back as missing is full,
// so deleting it then changes nothing, and a key's bucket does not stay in the table for good.
func TestBucketExpiresWhenFullAgain(t *testing.T) {
	d := fakes.NewDynamoDB("t")
	b := ratelimit.New(d, "t")
	at := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	b.Now = func() time.Time { return at }
	r := ratelimit.Rate{PerSecond: 0.5, Burst: 4}
	for range 3 { // 1 token left: 3 to refill at 0.5/s, 6 s
		if _, err := b.TakeKey(context.Background(), "llm", "acme", r); err != nil {
			t.Fatal(err)
		}
	}
	out, err := d.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String("t"), Key: map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: "RATE"}, "sk": &types.AttributeValueMemberS{Value: "KEY#llm#acme"},
	}})
	if err != nil || out.Item == nil {
		t.Fatalf("bucket item = %v, %v", out, err)
	}
	exp, _ := out.Item["expiresAt"].(*types.AttributeValueMemberN)
	want := at.Add(6*time.Second + ratelimit.ExpiryMargin).Unix()
	if exp == nil || (exp.Value != strconv.FormatInt(want, 10) && exp.Value != strconv.FormatInt(want+1, 10)) {
		t.Errorf("expiresAt = %v, want about %d (full again 6 s later)", exp, want)
	}
}

// A bucket's expiresAt (DynamoDB's TTL) is when the bucket is full again at the rate of its last
// take, and "a bucket gone is a full one". An operator lowering a key's rate (config set --key K
// --rate) keeps the bucket, whose TTL still says full-at-the-old-rate: once DynamoDB deletes it
// (any time after expiresAt), the key starts a whole burst again long before the lowered rate
// refills it, beyond burst + rate x window.
func TestLoweredRateIsNotRefilledByTheBucketsTTL(t *testing.T) {
	ctx := context.Background()
	clock := fakes.NewClock(time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC))
	d := fakes.NewDynamoDB("t")
	b := ratelimit.New(d, "t")
	b.Now = clock.Now
	fast, slow := ratelimit.Rate{PerSecond: 10, Burst: 10}, ratelimit.Rate{PerSecond: 0.01, Burst: 10}
	for i := 0; i < 10; i++ {
		if w, err := b.TakeKey(ctx, "llm", "noisy", fast); err != nil || w != 0 {
			t.Fatalf("take %d = %v, %v", i, w, err)
		}
	}
	key := map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "RATE"}, "sk": &types.AttributeValueMemberS{Value: "KEY#llm#noisy"}}
	out, err := d.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String("t"), Key: key})
	if err != nil || out.Item == nil {
		t.Fatalf("bucket = %v, %v", out, err)
	}
	exp, _ := strconv.ParseInt(out.Item["expiresAt"].(*types.AttributeValueMemberN).Value, 10, 64)
	// The rate is lowered now; DynamoDB's TTL deletes the item a little after its expiresAt.
	clock.Advance(time.Unix(exp+5, 0).Sub(clock.Now()))
	if _, err := d.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String("t"), Key: key}); err != nil {
		t.Fatal(err)
	}
	starts := 0
	for i := 0; i < 10; i++ {
		if w, err := b.TakeKey(ctx, "llm", "noisy", slow); err == nil && w == 0 {
			starts++
		}
	}
	elapsed := clock.Now().Sub(time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)).Seconds()
	if allowed := slow.PerSecond * elapsed; float64(starts) > allowed+1 {
		t.Errorf("%d tokens %0.fs after the bucket was emptied, with the rate lowered to %v/s: at most %.1f are due (the TTL read the bucket full at the old rate)", starts, elapsed, slow.PerSecond, allowed)
	}
}

// A token given back (a start not made after all) can be taken again, and refunds never fill a
// bucket past its burst.
func TestRefundGivesATokenBackUpToTheBurst(t *testing.T) {
	forBoth(t, func(t *testing.T, b *ratelimit.Buckets, _ *fakes.Clock) {
		ctx := context.Background()
		r := ratelimit.Rate{PerSecond: 0.01, Burst: 2}
		for i := range 2 {
			if w, err := b.TakeKey(ctx, "llm", "acme", r); err != nil || w != 0 {
				t.Fatalf("take %d = %v, %v", i+1, w, err)
			}
		}
		if w, err := b.TakeKey(ctx, "llm", "acme", r); err != nil || w == 0 {
			t.Fatalf("take from an empty bucket = %v, %v; want a wait", w, err)
		}
		for range 5 {
			if err := b.RefundKey(ctx, "llm", "acme", r); err != nil {
				t.Fatal(err)
			}
		}
		got := 0
		for range 4 {
			if w, err := b.TakeKey(ctx, "llm", "acme", r); err == nil && w == 0 {
				got++
			}
		}
		if got != 2 {
			t.Errorf("tokens after 5 refunds = %d, want the burst of 2", got)
		}
		if err := b.Refund(ctx, "never-taken", r); err != nil {
			t.Errorf("refund to a bucket never taken from = %v, want nil (a missing bucket is full)", err)
		}
	})
}
