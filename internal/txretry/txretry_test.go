package txretry

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// cancelled is the error DynamoDB returns for a cancelled transaction, one reason per item.
func cancelled(codes ...string) error {
	tc := &types.TransactionCanceledException{Message: aws.String("Transaction cancelled, please refer cancellation reasons for specific reasons")}
	for _, c := range codes {
		tc.CancellationReasons = append(tc.CancellationReasons, types.CancellationReason{Code: aws.String(c)})
	}
	return tc
}

// script answers each call with the next error (nil: success), then succeeds.
type script struct {
	errs  []error
	calls int
}

func (s *script) TransactWriteItems(context.Context, *dynamodb.TransactWriteItemsInput, ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	s.calls++
	if s.calls <= len(s.errs) && s.errs[s.calls-1] != nil {
		return nil, s.errs[s.calls-1]
	}
	return &dynamodb.TransactWriteItemsOutput{}, nil
}

// fakeTime is a clock that moves only when the policy sleeps.
type fakeTime struct {
	now   time.Time
	waits []time.Duration
}

func (f *fakeTime) policy(p Policy) Policy {
	p.now = func() time.Time { return f.now }
	p.sleep = func(_ context.Context, d time.Duration) error {
		f.waits = append(f.waits, d)
		f.now = f.now.Add(d)
		return nil
	}
	p.jitter = func(d time.Duration) time.Duration { return d } // the longest wait jitter can draw
	return p
}

func repeat(err error, n int) []error {
	out := make([]error, n)
	for i := range out {
		out[i] = err
	}
	return out
}

const ms = time.Millisecond

func TestWrite(t *testing.T) {
	conflict := cancelled("None", "TransactionConflict")
	for _, tc := range []struct {
		name      string
		errs      []error
		policy    Policy
		wantCalls int
		wantErr   string // "" for success; else a part of the error
		wantWaits []time.Duration
	}{
		{name: "conflict 3 times then success", errs: repeat(conflict, 3), policy: Default, wantCalls: 4,
			wantWaits: []time.Duration{25 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond}},
		{name: "throughput reasons are contention too", errs: []error{cancelled("ProvisionedThroughputExceeded", "None"), cancelled("ThrottlingError")},
			policy: Default, wantCalls: 3, wantWaits: []time.Duration{25 * time.Millisecond, 50 * time.Millisecond}},
		{name: "a failed condition is an answer", errs: []error{cancelled("ConditionalCheckFailed", "None")}, policy: Default,
			wantCalls: 1, wantErr: "TransactionCanceledException"},
		{name: "a failed condition beside a conflict is still an answer", errs: []error{cancelled("ConditionalCheckFailed", "TransactionConflict")},
			policy: Default, wantCalls: 1, wantErr: "TransactionCanceledException"},
		{name: "a validation error is not retried", errs: []error{cancelled("ValidationError", "None")}, policy: Default, wantCalls: 1, wantErr: "TransactionCanceled"},
		{name: "no reason at all is not retried", errs: []error{cancelled("None", "None")}, policy: Default, wantCalls: 1, wantErr: "TransactionCanceled"},
		{name: "other errors are the SDK retryer's", errs: []error{errors.New("connection reset")}, policy: Default, wantCalls: 1, wantErr: "connection reset"},
		{name: "attempts bound the retries", errs: repeat(conflict, 20), policy: Default, wantCalls: 8, wantErr: "cancelled by contention 8 times",
			wantWaits: []time.Duration{25 * ms, 50 * ms, 100 * ms, 200 * ms, 400 * ms, 500 * ms, 500 * ms}},
		{name: "the budget bounds the retries", errs: repeat(conflict, 20), policy: Policy{Attempts: 100, Base: time.Second, Max: 4 * time.Second, Budget: 10 * time.Second},
			wantCalls: 4, wantErr: "cancelled by contention 4 times", wantWaits: []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := &script{errs: tc.errs}
			clock := &fakeTime{now: time.Date(2026, 11, 24, 11, 0, 0, 0, time.UTC)}
			_, err := clock.policy(tc.policy).Write(context.Background(), db, &dynamodb.TransactWriteItemsInput{})
			if db.calls != tc.wantCalls {
				t.Errorf("calls = %d, want %d", db.calls, tc.wantCalls)
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("Write() = %v, want success", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("Write() = %v, want an error with %q", err, tc.wantErr)
			}
			if tc.wantErr != "" && len(tc.errs) > 0 && !errors.Is(err, tc.errs[0]) && !errors.As(err, new(*types.TransactionCanceledException)) {
				t.Errorf("Write() = %v: the caller can no longer see DynamoDB's error", err)
			}
			want := tc.wantWaits
			if len(clock.waits) != len(want) {
				t.Fatalf("waits = %v, want %v", clock.waits, want)
			}
			for i := range want {
				if clock.waits[i] != want[i] {
					t.Errorf("waits = %v, want %v", clock.waits, want)
					break
				}
			}
		})
	}
}

// The caller's context ends the waits: a Lambda function about to time out stops retrying.
func TestWriteStopsWithItsContext(t *testing.T) {
	db := &script{errs: repeat(cancelled("TransactionConflict"), 20)}
	ctx, cancel := context.WithCancel(context.Background())
	p := Default
	p.sleep = func(ctx context.Context, d time.Duration) error { cancel(); return ctx.Err() }
	_, err := p.Write(ctx, db, &dynamodb.TransactWriteItemsInput{})
	if db.calls != 1 || !errors.Is(err, context.Canceled) || !Retryable(err) {
		t.Errorf("Write() = %v after %d calls, want context.Canceled joined with the cancellation after 1 call", err, db.calls)
	}
}

// The real jitter stays within its bound and is not constant.
func TestJitterIsFull(t *testing.T) {
	p := Policy{}.withDefaults()
	seen := map[time.Duration]bool{}
	for range 200 {
		d := p.jitter(100 * time.Millisecond)
		if d < 0 || d >= 100*time.Millisecond {
			t.Fatalf("jitter(100ms) = %v, want within [0, 100ms)", d)
		}
		seen[d] = true
	}
	if len(seen) < 10 {
		t.Errorf("jitter drew %d distinct waits of 200, want them spread", len(seen))
	}
}
