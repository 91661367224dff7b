package starter_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"

	"github.com/sfnlimit/sfnlimit/internal/lambda/lane"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
	"github.com/sfnlimit/sfnlimit/internal/lambda/metrics"
)

// A duplicate delivery of a waiting message whose job was already bound, ran and released binds the
// job a second time and sends a second copy to the lane (the copy must come, to free the lane its
// bind took). That copy's claim finds the job's execution ended, started by the first copy. If its
// first look fails (DescribeExecution answered ExecutionDoesNotExist, as it may for a moment), its
// claim is left behind, and the next delivery must still take the copy for the duplicate it is: drop
// it and free the lane, and never release the job's attempt a second time (found by CI's fault
// scenario: the job's success was counted twice).
func TestSecondCopyOfAReleasedJobIsADuplicateAfterAFailedLook(t *testing.T) {
	for _, status := range []sfntypes.ExecutionStatus{sfntypes.ExecutionStatusSucceeded, sfntypes.ExecutionStatusFailed} {
		t.Run(string(status), func(t *testing.T) {
			r := newRigStrategy(t, nil, lane.FirstFree)
			var emf bytes.Buffer
			r.st.Metrics = metrics.New(&emf, "sfnlimit")
			r.rel.Metrics = r.st.Metrics // the starter releases through the releaser's service
			first := execution("reports", 1, "r-1", 1, status, "", "")
			first.Input = withMessageID(t, first.Input, "msg-first-copy")
			r.sfn.Put(first)
			r.leases.Set(boundLease("reports", 1, "r-1"))

			m := jobMessage(t, "reports", 1, "r-1", 0, 1) // the second copy, msg-r-1
			fail := true
			r.sfn.OnDescribe = func(string) error {
				if fail {
					fail = false
					return &sfntypes.ExecutionDoesNotExist{Message: aws.String("not visible yet")}
				}
				return nil
			}
			if _, err := r.st.Handle(context.Background(), events.SQSEvent{Records: []events.SQSMessage{m}}); err != nil {
				t.Fatal(err)
			}
			r.clock.Advance(2 * retryDelay)
			resp, err := r.st.Handle(context.Background(), events.SQSEvent{Records: []events.SQSMessage{jobMessage(t, "reports", 1, "r-1", 0, 2)}})
			if err != nil {
				t.Fatal(err)
			}
			if len(resp.BatchItemFailures) != 0 {
				t.Errorf("second copy held (%v), want it dropped as a duplicate", resp.BatchItemFailures)
			}
			if l, ok := r.leases.Lease(lease.Key{Type: "reports", Lane: 1}); ok {
				t.Errorf("lane 1 keeps lease %+v, want it free", l)
			}
			for _, name := range []string{metrics.JobsSucceeded, metrics.JobsRetried, metrics.JobsDeadLettered} {
				if strings.Contains(emf.String(), name) {
					t.Errorf("metrics = %s, want no %s: the first copy's release already counted the attempt", emf.String(), name)
				}
			}
			if n := len(r.sqs.Sent(dlqURL)); n != 0 {
				t.Errorf("dead letters = %d, want 0", n)
			}
			if len(r.sfn.Executions()) != 1 {
				t.Errorf("executions = %d, want the first copy's only", len(r.sfn.Executions()))
			}
		})
	}
}
