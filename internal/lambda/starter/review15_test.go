package starter_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"

	"github.com/sfnlimit/sfnlimit/internal/lambda/batch"
	"github.com/sfnlimit/sfnlimit/internal/lambda/batchend"
	"github.com/sfnlimit/sfnlimit/internal/lambda/deadletter"
	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lane"
	"github.com/sfnlimit/sfnlimit/internal/tools/fakes"
)

// A job's lease was deleted by hand while its attempt ran (docs/design.md: "Deleting a lease by hand
// therefore loses no attempt"); the attempt then succeeded, and its release found no lease to act on
// (nothing recorded). Meanwhile the free lane was bound to another job. The job's message comes back
// to that lane: the starter finds that this message's last attempt succeeded and acknowledges it:
// the job has ended, so it must be counted in its batch, or the batch never closes.
func TestJobEndedAtALaneBoundToAnotherIsCounted(t *testing.T) {
	ctx := context.Background()
	r := newRigStrategy(t, nil, lane.FirstFree)
	ledger := batch.New(fakes.NewDynamoDB("t"), "t")
	tracker := batchend.New(ledger, nopBus{}, "s", fakes.Logger(t))
	r.rel.Batches = tracker
	r.st.DLQ = batchend.DeadLetters{Next: deadletter.New(r.sqs, dlqURL), Tracker: tracker}
	r.rel.DLQ = r.st.DLQ
	if err := ledger.Open(ctx, "up", 1, t0); err != nil {
		t.Fatal(err)
	}
	r.leases.Set(boundLease("reports", 2, "other"))
	j := job.Job{Type: "reports", ID: "r-1", Batch: "up", Input: json.RawMessage(`{}`), SubmittedAt: submitted}
	in := j.ExecutionInput(2, 1)
	in.Job.MessageID = "msg-r-1" // started by this very message, in lane 2
	r.sfn.Put(fakes.Execution{StateMachineArn: smArn, Name: execName("reports", "r-1", 1), Status: sfntypes.ExecutionStatusSucceeded, Input: string(in.MustJSON())})
	body, _ := json.Marshal(j)
	resp, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{message(t, "reports-2", "r-1", string(body), 2)}})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.BatchItemFailures) != 0 {
		t.Fatalf("failures %v, want r-1's message acknowledged (its last attempt succeeded)", failures(resp))
	}
	sum, _, err := ledger.Show(ctx, "up", false)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Recorded != 1 || !sum.Closed {
		t.Errorf("batch up: %d recorded, closed %v; want r-1's success counted and the batch closed", sum.Recorded, sum.Closed)
	}
}
