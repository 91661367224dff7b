package starter_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"

	"github.com/sfnlimit/sfnlimit/internal/lambda/deadletter"
	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
)

// sentIn is the receive-th delivery of acme's job r-1 as sender routed it, in lane ln of reports:
// its own message (two producers' messages differ).
func sentIn(t *testing.T, ln int, sender string, receive int) events.SQSMessage {
	t.Helper()
	b, _ := json.Marshal(job.Job{Type: "reports", ID: "r-1", Key: "acme", Sender: sender, Input: json.RawMessage(`{}`), SubmittedAt: submitted})
	tag := strings.ReplaceAll(sender, ":", "")
	m := message(t, job.GroupID("reports", ln), "r-1", string(b), receive)
	m.MessageId += "-" + tag
	m.ReceiptHandle = handle("r-1"+tag, receive)
	return m
}

// A job is its type, sender, key and id: another producer's job naming acme's key and id is
// another job. Both start, each under its own execution name, and each ends on its own execution's
// outcome; neither is taken for a duplicate of the other, and the dead letter of one names its
// sender.
func TestSameKeyAndIDOfTwoSendersBothStartAndEnd(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, nil)
	const acme, mallory = "AROAACMEPRODUCER", "AROAMALLORY"
	resp, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{
		sentIn(t, 1, acme, 1), sentIn(t, 2, mallory, 1),
	}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := failures(resp), sorted("msg-r-1-"+acme, "msg-r-1-"+mallory); !equal(got, want) {
		t.Errorf("batch item failures = %v, want %v (both started and held)", got, want)
	}
	var names []string
	for _, s := range r.sfn.Starts() {
		if s.Err != nil {
			t.Errorf("start %s: %v, want both senders' jobs started", s.Name, s.Err)
			continue
		}
		names = append(names, s.Name)
	}
	if len(names) != 2 || names[0] == names[1] {
		t.Fatalf("started executions = %v, want two, one per sender", names)
	}
	for _, n := range names {
		if n == job.RunName("reports", "", "acme", "r-1", 0, 1) {
			t.Errorf("started %s, the name of acme's r-1 without a sender: want every sender's job named apart from jobs routed before senders", n)
		}
	}
	checkDLQ(t, r.sqs, nil)
	senders := map[string]string{}
	for _, l := range r.leases.Leases() {
		senders[l.JobSender] = l.ExecutionArn
	}
	if len(senders) != 2 || senders[acme] == "" || senders[mallory] == "" || senders[acme] == senders[mallory] {
		t.Fatalf("leases by sender = %v, want acme's and mallory's each holding a lane with its own execution", senders)
	}
	// mallory's job fails for good; acme's succeeds. Each redelivery ends its own job.
	r.sfn.Close(senders[acme], sfntypes.ExecutionStatusSucceeded, "", "")
	r.sfn.Close(senders[mallory], sfntypes.ExecutionStatusAborted, "", "")
	if _, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{
		sentIn(t, 1, acme, 2), sentIn(t, 2, mallory, 2),
	}}); err != nil {
		t.Fatal(err)
	}
	if ls := r.leases.Leases(); len(ls) != 0 {
		t.Errorf("leases = %+v, want both lanes free", ls)
	}
	if got, want := deleted(r.sqs), sorted(handle("r-1"+acme, 2), handle("r-1"+mallory, 2)); !equal(got, want) {
		t.Errorf("deleted = %v, want %v (both messages ended)", got, want)
	}
	checkDLQ(t, r.sqs, []dead{{"aborted", "r-1"}})
	if dl := r.sqs.Sent(dlqURL); len(dl) == 1 {
		if a := dl[0].Attributes[deadletter.AttrSender]; a != mallory {
			t.Errorf("dead letter's %s attribute = %q, want %s (the job's sender)", deadletter.AttrSender, a, mallory)
		}
	}
}
