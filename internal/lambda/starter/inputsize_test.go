package starter_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
)

// The router's size check (job.Parse) sizes the execution input the starter builds at its widest.
// Since each delivery's input records its receive count, that count is part of it: a job the router
// accepted, with the longest message id SQS documents, delivered again and again (a long job outlives
// the visibility timeout many times; a job behind a held lane backs off every few seconds for up to
// the queue's 14-day retention), must still fit Step Functions' 256 KiB, or its start is refused for
// good and the accepted job is dead-lettered without ever running.
func TestLargestAcceptedJobFitsAtEveryReceive(t *testing.T) {
	in := largestAccepted(t, "reports", "r-1001")
	body, _ := json.Marshal(job.Job{Type: "reports", ID: "r-1001", Input: in, SubmittedAt: submitted})
	for _, receive := range []int{1, 7, 250000, 1<<31 - 1} {
		r := newRig(t, nil)
		m := message(t, "reports-1", "r-1001", string(body), receive)
		m.MessageId = strings.Repeat("f", job.MaxMessageIDLen)
		if _, err := r.st.Handle(context.Background(), events.SQSEvent{Records: []events.SQSMessage{m}}); err != nil {
			t.Fatal(err)
		}
		starts := r.sfn.Starts()
		if len(starts) != 1 {
			t.Fatalf("receive %d: starts = %d, want 1", receive, len(starts))
		}
		if n := len(starts[0].Input); n > job.MaxExecutionInput {
			t.Errorf("receive %d: execution input of the largest accepted job = %d bytes, over Step Functions' %d", receive, n, job.MaxExecutionInput)
		}
	}
}
