package starter_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/sfn"

	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
	"github.com/sfnlimit/sfnlimit/internal/lambda/metrics"
)

// A stale copy of a batch can make a message visible again while the delivery that received it next
// is starting its job; a third delivery then claims the same attempt a moment later, and Step
// Functions answers its start with the execution the second delivery started, dated less than
// clockSkew before the claim. That start is the second delivery's: counted once, not twice (found
// by CI's fault scenario on moto: JobsStarted 62 for 60 executions). A claim left long ago by a
// start that never went through is still this delivery's own start.
func TestStartFoundRunningAfterARecentClaimIsNotCountedAgain(t *testing.T) {
	tests := []struct {
		name string
		// started: the second delivery (receive 2) claimed the attempt and started it; else its
		// claim is left by a start that never went through.
		started     bool
		gap         time.Duration // from the second delivery's claim to the third's
		wantStarted float64       // by the third delivery
	}{
		{name: "second delivery started it 150 ms before", started: true, gap: 150 * time.Millisecond, wantStarted: 0},
		{name: "second delivery started it 20 minutes before", started: true, gap: 20 * time.Minute, wantStarted: 0},
		{name: "second delivery's start never went through, 20 minutes before", gap: 20 * time.Minute, wantStarted: 1},
		{name: "second delivery's start never went through, 150 ms before", gap: 150 * time.Millisecond, wantStarted: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, nil)
			ctx := context.Background()
			if !tt.started {
				r.sfn.OnStart = func(*sfn.StartExecutionInput) error {
					return errors.New("request send failed: read tcp: connection reset by peer")
				}
			}
			_, _ = r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{jobMessage(t, "reports", 1, "r-1001", 0, 2)}})
			r.sfn.OnStart = nil
			var emf bytes.Buffer
			r.st.Metrics = metrics.New(&emf, "sfnlimit")
			r.clock.Advance(tt.gap)
			resp, err := r.st.Handle(context.Background(), events.SQSEvent{Records: []events.SQSMessage{jobMessage(t, "reports", 1, "r-1001", 0, 3)}})
			if err != nil {
				t.Fatal(err)
			}
			if got := failures(resp); !equal(got, []string{"msg-r-1001"}) {
				t.Errorf("batch item failures = %q, want the message held", got)
			}
			if n := len(r.sfn.Executions()); n != 1 {
				t.Errorf("executions = %d, want 1", n)
			}
			if got := count(t, &emf, metrics.JobsStarted); got != tt.wantStarted {
				t.Errorf("JobsStarted = %v, want %v", got, tt.wantStarted)
			}
		})
	}
}

// Two deliveries of a retried job's message race to start its next attempt (two releases of the
// failed attempt each made the message visible, found by CI on moto): the later delivery's claim
// replaces the earlier's and its start goes first; the earlier delivery's start then reaches Step
// Functions. Only the start that created the execution counts: the other is told
// ExecutionAlreadyExists (each delivery's input records its receive) and holds the lane.
func TestRacingDeliveriesOfARetryCountOneStart(t *testing.T) {
	r := newRig(t, nil)
	var emf bytes.Buffer
	r.st.Metrics = metrics.New(&emf, "sfnlimit")
	r.rel.Metrics = r.st.Metrics
	r.leases.Set(leaseOf("reports", 1, "r-1001", 1, lease.Retrying, 1))
	ctx := context.Background()
	raced := false
	r.sfn.OnStart = func(*sfn.StartExecutionInput) error {
		if !raced {
			raced = true // the later delivery runs whole while the earlier one is about to start
			if _, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{jobMessage(t, "reports", 1, "r-1001", 0, 3)}}); err != nil {
				t.Error(err)
			}
		}
		return nil
	}
	resp, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{jobMessage(t, "reports", 1, "r-1001", 0, 2)}})
	if err != nil {
		t.Fatal(err)
	}
	if got := failures(resp); !equal(got, []string{"msg-r-1001"}) {
		t.Errorf("batch item failures = %q, want the message held", got)
	}
	if n := len(r.sfn.Executions()); n != 1 {
		t.Errorf("executions = %d, want 1", n)
	}
	if err := r.st.Metrics.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := count(t, &emf, metrics.JobsStarted); got != 1 {
		t.Errorf("JobsStarted = %v, want 1", got)
	}
}
