package starter_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"

	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
)

// keyedIn is the receive-th delivery of job id of key in lane ln of reports: its own message (the
// message id and receipt handle name the key too, as two producers' messages would differ).
func keyedIn(t *testing.T, ln int, key, id string, receive int) events.SQSMessage {
	t.Helper()
	b, _ := json.Marshal(job.Job{Type: "reports", ID: id, Key: key, Input: json.RawMessage(`{}`), SubmittedAt: submitted})
	m := message(t, job.GroupID("reports", ln), id, string(b), receive)
	m.MessageId += "-" + key
	m.ReceiptHandle = handle(id+key, receive)
	return m
}

// A job is its type, key and id: two keys' jobs with one id both start, each under its own
// execution name, and each ends on its own execution's outcome; neither is taken for a duplicate of
// the other.
func TestSameIDOfTwoKeysBothStartAndEnd(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, nil)
	resp, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{
		keyedIn(t, 1, "acme", "r-1", 1), keyedIn(t, 2, "beta", "r-1", 1),
	}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := failures(resp), sorted("msg-r-1-acme", "msg-r-1-beta"); !equal(got, want) {
		t.Errorf("batch item failures = %v, want %v (both started and held)", got, want)
	}
	var names []string
	for _, s := range r.sfn.Starts() {
		if s.Err != nil {
			t.Errorf("start %s: %v, want both keys' jobs started", s.Name, s.Err)
			continue
		}
		names = append(names, s.Name)
	}
	if len(names) != 2 || names[0] == names[1] {
		t.Fatalf("started executions = %v, want two, one per key", names)
	}
	checkDLQ(t, r.sqs, nil)
	keys := map[string]string{}
	for _, l := range r.leases.Leases() {
		keys[l.JobKey] = l.ExecutionArn
	}
	if len(keys) != 2 || keys["acme"] == "" || keys["beta"] == "" || keys["acme"] == keys["beta"] {
		t.Fatalf("leases by key = %v, want acme and beta each holding a lane with its own execution", keys)
	}
	// beta's job fails for good; acme's succeeds. Each redelivery ends its own job.
	r.sfn.Close(keys["acme"], sfntypes.ExecutionStatusSucceeded, "", "")
	r.sfn.Close(keys["beta"], sfntypes.ExecutionStatusAborted, "", "")
	if _, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{
		keyedIn(t, 1, "acme", "r-1", 2), keyedIn(t, 2, "beta", "r-1", 2),
	}}); err != nil {
		t.Fatal(err)
	}
	if ls := r.leases.Leases(); len(ls) != 0 {
		t.Errorf("leases = %+v, want both lanes free", ls)
	}
	if got, want := deleted(r.sqs), sorted(handle("r-1acme", 2), handle("r-1beta", 2)); !equal(got, want) {
		t.Errorf("deleted = %v, want %v (both messages ended)", got, want)
	}
	checkDLQ(t, r.sqs, []dead{{"aborted", "r-1"}})
	if dl := r.sqs.Sent(dlqURL); len(dl) == 1 && !json.Valid([]byte(dl[0].Body)) {
		t.Errorf("dead letter body %q is not JSON", dl[0].Body)
	}
}
