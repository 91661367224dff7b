package stack

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A direct invocation runs to its end when its caller goes away (the runtime's shutdown cancels the
// schedule's context mid-sweep): Lambda does not cut an invocation short for that, and the demo's
// report must not count as failed an invocation that the local stack's own teardown interrupted.
func TestDirectInvocationOutlivesItsCaller(t *testing.T) {
	cases := []struct {
		name      string
		handler   func(ctx context.Context) error
		wantFails int
	}{
		{"caller gone mid-invocation", func(ctx context.Context) error {
			time.Sleep(20 * time.Millisecond) // the caller is cancelled meanwhile
			return ctx.Err()
		}, 0},
		{"handler failing by itself", func(context.Context) error { return errors.New("boom") }, 1},
		{"handler past its timeout", func(ctx context.Context) error {
			<-ctx.Done()
			return ctx.Err()
		}, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var st InvokeStats
			ctx, cancel := context.WithCancel(context.Background())
			go func() { time.Sleep(5 * time.Millisecond); cancel() }()
			defer cancel()
			_ = st.invoke(ctx, 200*time.Millisecond, c.handler)
			if n, fails, _ := st.Snapshot(); n != 1 || fails != c.wantFails {
				t.Fatalf("invocations %d, failed %d; want 1 and %d", n, fails, c.wantFails)
			}
		})
	}
}
