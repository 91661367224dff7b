package starter_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
)

// A keyed job the starter dead-letters (here its type lost its limit while it waited: unknown_type,
// which `config reset` advises to redrive once the type has a limit again) must keep its key in the
// dead letter's body, which is redriven unchanged: without it the job comes back under the default
// key, outside its tenant's cap.
func TestStarterDeadLetterKeepsTheJobsKey(t *testing.T) {
	r := newKeyRig(t)
	b, _ := json.Marshal(job.Job{Type: "gone", ID: "g-1", Key: "acme", Input: json.RawMessage(`{}`), SubmittedAt: submitted})
	m := message(t, job.KeyGroupID("gone", "acme"), "g-1", string(b), 1)
	if _, err := r.st.Handle(context.Background(), events.SQSEvent{Records: []events.SQSMessage{m}}); err != nil {
		t.Fatal(err)
	}
	checkDLQ(t, r.sqs, []dead{{Reason: string(job.ReasonUnknownType), JobID: "g-1"}})
	got := r.sqs.Sent(dlqURL)
	if len(got) != 1 {
		t.Fatalf("dead letters = %+v", got)
	}
	var s job.Submission
	if err := json.Unmarshal([]byte(got[0].Body), &s); err != nil || s.Key != "acme" {
		t.Errorf("dead letter body = %s, want it to keep the job's key \"acme\"", got[0].Body)
	}
}
