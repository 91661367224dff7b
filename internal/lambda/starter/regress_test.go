package starter_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"

	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lane"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
	"github.com/sfnlimit/sfnlimit/internal/lambda/releaser"
)

// A StartExecution that answers with a network error may still have started the execution. The
// claim must survive, so the attempt's end is acted on, never taken for a duplicate's.
func TestAmbiguousStartErrorKeepsTheJob(t *testing.T) {
	tests := []struct {
		name        string
		prev        *lease.Lease
		attempt     int
		receive     int
		closeAs     sfntypes.ExecutionStatus
		wantOutcome releaser.Outcome
	}{
		{name: "fresh job, execution failed", attempt: 1, receive: 1, closeAs: sfntypes.ExecutionStatusFailed, wantOutcome: releaser.Failed},
		{name: "fresh job, execution aborted", attempt: 1, receive: 1, closeAs: sfntypes.ExecutionStatusAborted, wantOutcome: releaser.Aborted},
		{name: "retrying job, execution failed", prev: ptr(leaseOf("reports", 1, "r-1001", 1, lease.Retrying, 1)), attempt: 2, receive: 2, closeAs: sfntypes.ExecutionStatusFailed, wantOutcome: releaser.Failed},
		{name: "retrying job, execution succeeded", prev: ptr(leaseOf("reports", 1, "r-1001", 1, lease.Retrying, 1)), attempt: 2, receive: 2, closeAs: sfntypes.ExecutionStatusSucceeded, wantOutcome: releaser.Succeeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, nil)
			if tt.prev != nil {
				r.leases.Set(*tt.prev)
			}
			ctx := context.Background()
			r.sfn.AfterStart = func(*sfn.StartExecutionInput, string) error {
				return errors.New("request send failed: read tcp: connection reset by peer")
			}
			if _, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{jobMessage(t, "reports", 1, "r-1001", 0, tt.receive)}}); err != nil {
				t.Fatal(err)
			}
			r.sfn.AfterStart = nil
			r.sfn.Close(execArn("reports", "r-1001", tt.attempt), tt.closeAs, "JobFailed", "boom")
			r.clock.Advance(retryDelay * 2)
			resp, _ := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{jobMessage(t, "reports", 1, "r-1001", 0, tt.receive+1)}})
			acked := len(resp.BatchItemFailures) == 0
			l, leased := r.leases.Lease(reports1)
			switch tt.wantOutcome {
			case releaser.Failed:
				if acked || !leased || l.Status != lease.Retrying {
					t.Errorf("failed attempt %d: acknowledged %v, lease %+v (leased %v); want held and retrying", tt.attempt, acked, l, leased)
				}
			case releaser.Aborted:
				if n := len(r.sqs.Sent(dlqURL)); n != 1 {
					t.Errorf("aborted job: dead letters = %d, want 1", n)
				}
			case releaser.Succeeded:
				if leased {
					t.Errorf("succeeded job's lane keeps lease %+v", l)
				}
			}
		})
	}
}

// A claim whose start was never confirmed may be running: lowering the limit must not move it and
// start it a second time in another lane.
func TestUnconfirmedStartIsNotMoved(t *testing.T) {
	r := newRig(t, nil) // reports=3
	r.leases.Set(leaseOf("reports", 7, "r-1001", 1, lease.Starting, 1))
	r.sfn.Put(execution("reports", 7, "r-1001", 1, sfntypes.ExecutionStatusRunning, "", ""))
	ctx := context.Background()
	resp, _ := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{jobMessage(t, "reports", 7, "r-1001", 0, 2)}})
	if len(resp.BatchItemFailures) != 1 {
		t.Errorf("running unconfirmed job: batch item failures = %d, want 1 (held)", len(resp.BatchItemFailures))
	}
	if n := len(r.sqs.Sent(lanesURL)); n != 0 {
		t.Errorf("running unconfirmed job was moved: %d messages sent to the lanes queue, want 0", n)
	}
	if l, ok := r.leases.Lease(lease.Key{Type: "reports", Lane: 7}); !ok || l.Status != lease.Running {
		t.Errorf("lease = %+v (found %v), want running", l, ok)
	}
}

// A job dead-lettered after its attempts and redriven as its dead letter's body runs again, under
// names its first run did not take.
func TestRedrivenDeadLetterRunsAgain(t *testing.T) {
	r := newRig(t, nil)
	ctx := context.Background()
	for a := 1; a <= 3; a++ {
		r.sfn.Put(execution("reports", 1, "r-1001", a, sfntypes.ExecutionStatusFailed, "JobFailed", "boom"))
	}
	r.leases.Set(leaseOf("reports", 1, "r-1001", 3, lease.Running, 3))
	r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{jobMessage(t, "reports", 1, "r-1001", 0, 4)}}) // dead-lettered
	dead := r.sqs.Sent(dlqURL)
	if len(dead) != 1 {
		t.Fatalf("dead letters = %d, want 1", len(dead))
	}
	j, err := job.Parse([]byte(dead[0].Body), "redrive-msg", submitted) // redrive through the router
	if err != nil {
		t.Fatalf("dead letter body %s does not parse as a job: %v", dead[0].Body, err)
	}
	ln, _ := lane.Hashed{}.Choose(ctx, j, 3)
	body, _ := json.Marshal(j)
	before := len(r.sfn.Executions())
	r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{message(t, job.GroupID("reports", ln), "r-1001", string(body), 1)}})
	if got := len(r.sfn.Executions()); got != before+1 {
		t.Errorf("redriven job: executions %d -> %d, want one new execution", before, got)
	}
}

// When a batch holds several messages of one group and one of them is the job that holds the lane
// (being retried), that one runs: the lane's holder never waits behind the jobs it blocks, even if
// the queue hands the group out of order.
func TestLaneHolderRunsFirstInItsGroup(t *testing.T) {
	r := newRig(t, nil)
	r.leases.Set(leaseOf("reports", 1, "r-1001", 1, lease.Retrying, 1))
	ev := events.SQSEvent{Records: []events.SQSMessage{
		jobMessage(t, "reports", 1, "r-2002", 0, 1),
		jobMessage(t, "reports", 1, "r-1001", 0, 2),
	}}
	resp, err := r.st.Handle(context.Background(), ev)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.BatchItemFailures) != 2 {
		t.Errorf("batch item failures = %d, want 2 (the holder held, the other returned)", len(resp.BatchItemFailures))
	}
	l, _ := r.leases.Lease(reports1)
	if l.JobID != "r-1001" || l.Attempt != 2 || l.Status != lease.Starting {
		t.Errorf("lease = %s attempt %d %s, want r-1001 attempt 2 claimed (starting)", l.JobID, l.Attempt, l.Status)
	}
	checkVisibility(t, r.sqs, []visibility{{ev.Records[0].ReceiptHandle, 0, 0}})
}
