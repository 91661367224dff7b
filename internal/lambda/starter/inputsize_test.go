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

// largestAccepted returns the largest input job.Parse accepts for a job of typ and id: an object
// {"s":"xxx..."} found by bisection.
func largestAccepted(t *testing.T, typ, id string) json.RawMessage {
	t.Helper()
	mk := func(n int) string { return `{"s":"` + strings.Repeat("x", n) + `"}` }
	lo, hi := 0, job.MaxExecutionInput // lo accepted, hi refused
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		if _, err := job.Parse([]byte(`{"type":"`+typ+`","id":"`+id+`","input":`+mk(mid)+`}`), "m", submitted); err == nil {
			lo = mid
		} else {
			hi = mid
		}
	}
	return json.RawMessage(mk(lo))
}

// A job the router accepts starts: the execution input the starter builds, message id included
// (SQS message ids are up to 100 characters; today they are 36-character UUIDs), fits Step
// Functions' 256 KiB. Were it over, StartExecution would refuse it as a client error on every
// delivery: the job would never run nor be dead-lettered, and its lane would stay blocked.
func TestLargestAcceptedJobFitsStepFunctionsInput(t *testing.T) {
	r := newRig(t, nil)
	in := largestAccepted(t, "reports", "r-1001")
	body, _ := json.Marshal(job.Job{Type: "reports", ID: "r-1001", Input: in, SubmittedAt: submitted})
	m := message(t, "reports-1", "r-1001", string(body), 1)
	m.MessageId = "4f1c7b9e-8e1a-4c4d-9a51-0d2f7c1b2a10" // as SQS gives them
	if _, err := r.st.Handle(context.Background(), events.SQSEvent{Records: []events.SQSMessage{m}}); err != nil {
		t.Fatal(err)
	}
	starts := r.sfn.Starts()
	if len(starts) != 1 {
		t.Fatalf("starts = %d, want 1", len(starts))
	}
	if n := len(starts[0].Input); n > job.MaxExecutionInput {
		t.Errorf("execution input of the largest accepted job = %d bytes, over Step Functions' %d", n, job.MaxExecutionInput)
	}
}
