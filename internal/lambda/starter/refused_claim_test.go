package starter_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"

	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
	"github.com/sfnlimit/sfnlimit/internal/lambda/starter"
)

// A running job's claim (starting: a confirmed start writes nothing more) is delivered again after
// the visibility timeout, and its start of the same name is refused for good: its state machine is
// being deleted (StateMachineDeleting), which a Standard execution waiting in a Wait state or a long
// task outlives until its next transition. The refusal says nothing of the execution the claim
// names: the job must not be dead-lettered, nor its lane freed, while that execution runs; and a
// claim whose start never went through is still refused.
func TestRedeliveredClaimStartRefusedForGood(t *testing.T) {
	deleting := func(*sfn.StartExecutionInput) error {
		return &sfntypes.StateMachineDeleting{Message: aws.String("State Machine is being deleted: '" + smArn + "'")}
	}
	tests := []struct {
		name string
		// exec is the status of the claim's execution when the message comes back ("": none).
		exec sfntypes.ExecutionStatus
		// claimAge is how long before the delivery the attempt was first claimed.
		claimAge time.Duration
		wantDLQ  []dead
		// wantLease: the lane stays the job's (status, receipt handle); nil: freed.
		wantLease    *wantLease
		wantDeleted  []string
		wantFailures []string
		wantVis      []visibility
	}{
		{
			name: "execution still runs: held, not dead-lettered", exec: sfntypes.ExecutionStatusRunning, claimAge: visibilityTimeout,
			wantLease:    &wantLease{"r-1001", lease.Starting, 1, handle("r-1001", 2), execArn("reports", "r-1001", 1)},
			wantFailures: []string{"msg-r-1001"},
		},
		{
			name: "execution ended: released as it ended", exec: sfntypes.ExecutionStatusSucceeded, claimAge: visibilityTimeout,
			wantDeleted: []string{handle("r-1001", 2)},
			wantVis:     []visibility{grace(handle("r-1001", 2))},
		},
		{
			name: "no execution, claimed long ago: refused for good", claimAge: visibilityTimeout,
			wantDLQ: []dead{{starter.ReasonStartRefused, "r-1001"}},
		},
		{
			// DescribeExecution is eventually consistent: a start made a moment ago (its answer
			// lost) may not be found yet.
			name: "no execution, claimed a moment ago: looked at again shortly", claimAge: 10 * time.Second,
			wantLease:    &wantLease{"r-1001", lease.Starting, 1, handle("r-1001", 2), execArn("reports", "r-1001", 1)},
			wantFailures: []string{"msg-r-1001"},
			wantVis:      []visibility{{Handle: handle("r-1001", 2), Min: int32(retryDelay / time.Second), Max: int32(2 * retryDelay / time.Second)}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, nil)
			claim := leaseOf("reports", 1, "r-1001", 1, lease.Starting, 1)
			claim.StartedAt, claim.UpdatedAt = t0.Add(-tt.claimAge), t0.Add(-tt.claimAge)
			claim.StateMachineArn = smArn
			r.leases.Set(claim)
			if tt.exec != "" {
				r.sfn.Put(startedBy(t, execution("reports", 1, "r-1001", 1, tt.exec, "", ""), claim.MessageID))
			}
			r.sfn.OnStart = deleting
			resp, err := r.st.Handle(context.Background(), events.SQSEvent{Records: []events.SQSMessage{jobMessage(t, "reports", 1, "r-1001", 0, 2)}})
			if err != nil {
				t.Fatal(err)
			}
			if got, want := failures(resp), sorted(tt.wantFailures...); !equal(got, want) {
				t.Errorf("batch item failures = %q, want %q", got, want)
			}
			checkDLQ(t, r.sqs, tt.wantDLQ)
			want := map[lease.Key]wantLease{}
			if tt.wantLease != nil {
				want[reports1] = *tt.wantLease
			}
			checkLeases(t, r.leases, want)
			if got, want := deleted(r.sqs), sorted(tt.wantDeleted...); !equal(got, want) {
				t.Errorf("DeleteMessage handles = %q, want %q", got, want)
			}
			checkVisibility(t, r.sqs, tt.wantVis)
		})
	}
}

// A running job's claim is delivered again (receive 2) and its start of the same name is throttled:
// the claim is given back with the new receipt handle, the only one SQS still honours. A late copy of
// the earlier delivery (receive 1; Lambda may hand a batch over twice) must then find the lease newer
// than itself and leave it alone: had the given-back lease kept the earlier receive count, the copy
// would put its expired handle back, and the release's DeleteMessage would not delete the message.
func TestThrottledRedeliveryKeepsTheNewerReceiveCount(t *testing.T) {
	r := newRig(t, nil)
	ctx := context.Background()
	if _, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{jobMessage(t, "reports", 1, "r-1001", 0, 1)}}); err != nil {
		t.Fatal(err)
	}
	r.clock.Advance(visibilityTimeout)
	r.sfn.OnStart = throttled
	if _, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{jobMessage(t, "reports", 1, "r-1001", 0, 2)}}); err != nil {
		t.Fatal(err)
	}
	r.sfn.OnStart = nil
	if _, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{jobMessage(t, "reports", 1, "r-1001", 0, 1)}}); err != nil {
		t.Fatal(err)
	}
	checkLeases(t, r.leases, map[lease.Key]wantLease{
		reports1: {"r-1001", lease.Starting, 1, handle("r-1001", 2), execArn("reports", "r-1001", 1)},
	})
	if l, _ := r.leases.Lease(reports1); l.Receives != 2 {
		t.Errorf("lease receives = %d, want 2 (the delivery whose handle it holds)", l.Receives)
	}
}
