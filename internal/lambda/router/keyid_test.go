package router_test

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/lambda/router"
)

// A job is its type, key and id: two keys' jobs with one id go to the lanes queue under different
// deduplication ids (SQS would drop the second as a copy of the first for five minutes), while a
// job sent twice by its own key keeps one, and a job without a key keeps the id it always had.
func TestHandleSameIDOfTwoKeysIsNotDeduplicated(t *testing.T) {
	sender := &fakeSender{}
	r := newRouter(&fakeConfig{limits: limits}, sender, &fakeDLQ{}, nil)
	bodies := []string{
		`{"type":"payments","id":"order-1","key":"acme","input":{}}`,
		`{"type":"payments","id":"order-1","key":"beta","input":{}}`,
		`{"type":"payments","id":"order-1","key":"acme","input":{}}`,
		`{"type":"payments","id":"order-1","input":{}}`,
		`{"type":"payments","id":"order-1","key":"acme","input":{},"redrive":1}`,
	}
	for i, body := range bodies {
		ev := events.SQSEvent{Records: []events.SQSMessage{{MessageId: "m-" + strconv.Itoa(i), Body: body}}}
		if resp, err := r.Handle(context.Background(), ev); err != nil || len(resp.BatchItemFailures) != 0 {
			t.Fatalf("Handle(%s) = %+v, %v, want no failures", body, resp, err)
		}
	}
	got := sender.entries()
	if len(got) != len(bodies) {
		t.Fatalf("sent %d entries, want %d", len(got), len(bodies))
	}
	d := make([]string, len(got))
	for i, e := range got {
		d[i] = aws.ToString(e.MessageDeduplicationId)
		if len(d[i]) == 0 || len(d[i]) > 128 {
			t.Errorf("%s: MessageDeduplicationId = %q, want 1-128 characters", bodies[i], d[i])
		}
	}
	if d[0] == d[1] {
		t.Errorf("acme's and beta's order-1 share MessageDeduplicationId %q, want one each", d[0])
	}
	if d[0] != d[2] {
		t.Errorf("acme's order-1 sent twice: MessageDeduplicationId %q then %q, want the same (one job)", d[0], d[2])
	}
	if d[3] != "payments-order-1" || d[0] == d[3] || d[1] == d[3] {
		t.Errorf("order-1 without a key: MessageDeduplicationId %q (acme %q, beta %q), want payments-order-1, as before keys, and no key's", d[3], d[0], d[1])
	}
	if d[4] == d[0] || d[4] == "payments-order-1~g1" {
		t.Errorf("acme's order-1 redriven: MessageDeduplicationId %q, want its own (not the first run's %q, not the keyless job's)", d[4], d[0])
	}
}

// A producer affects only its own jobs (Producer trust model), yet a job's identity is its type,
// key and id, all three chosen by whoever sends it: a key is not bound to a principal. Another
// producer that sends a job with acme's key and one of acme's ids (order numbers are guessable)
// gets the same deduplication id (SQS drops acme's job for five minutes as a copy) and the same
// execution names (the starter drops acme's later message as a duplicate of the other's execution
// for the 90 days Step Functions keeps names), so acme's job never runs with its own input and, in a
// batch, is never counted: the batch never closes. Two principals' jobs must not be one job.
func TestHandleSameKeyAndIDOfTwoSendersAreTwoJobs(t *testing.T) {
	sender := &fakeSender{}
	r := newRouter(&fakeConfig{limits: limits}, sender, &fakeDLQ{}, nil)
	body := `{"type":"payments","id":"order-1","key":"acme","input":{}}`
	for i, from := range []string{"AROAACMEPRODUCER:acme-api", "AROAMALLORY:mallory"} {
		ev := events.SQSEvent{Records: []events.SQSMessage{{MessageId: "m-" + strconv.Itoa(i), Body: body,
			Attributes: map[string]string{"SenderId": from, "SentTimestamp": "1709978500000"}}}}
		if resp, err := r.Handle(context.Background(), ev); err != nil || len(resp.BatchItemFailures) != 0 {
			t.Fatalf("Handle from %s = %+v, %v, want no failures", from, resp, err)
		}
	}
	got := sender.entries()
	if len(got) != 2 {
		t.Fatalf("sent %d entries, want 2", len(got))
	}
	if a, m := aws.ToString(got[0].MessageDeduplicationId), aws.ToString(got[1].MessageDeduplicationId); a == m {
		t.Errorf("acme's order-1 and mallory's job naming acme's key and id share MessageDeduplicationId %q: SQS drops whichever comes second", a)
	}
}

// The lanes message carries the job's sender as the router names it (job.Sender), never as a body
// says: a producer's own principal; a message of another principal naming a sender
// (SenderAttribute, an operator's dlq redrive) is that principal's "{principal}>{named}"; the
// router's own held copy keeps the sender it was first routed with; a message without a SenderId
// has none, and keeps the names of jobs routed before senders were part of a job's identity.
func TestLanesMessageCarriesTheSender(t *testing.T) {
	named := func(s string) map[string]events.SQSMessageAttribute {
		return map[string]events.SQSMessageAttribute{router.SenderAttribute: {DataType: "String", StringValue: aws.String(s)}}
	}
	for _, tt := range []struct {
		name, senderID string
		attrs          map[string]events.SQSMessageAttribute
		want           string
	}{
		{"producer", "AROAACMEPRODUCER:acme-api", nil, "AROAACMEPRODUCER"},
		{"federated user", "123456789012:bob", nil, "123456789012:bob"},
		{"a producer naming another", "AROAMALLORY:mallory", named("AROAACMEPRODUCER"), "AROAMALLORY>AROAACMEPRODUCER"},
		{"a producer naming a sender on behalf of another", "AROAMALLORY:mallory", named("AROAOPS>AROAACMEPRODUCER"), "AROAMALLORY"},
		{"an operator's redrive", "AIDAOPERATOR", named("AROAACMEPRODUCER"), "AIDAOPERATOR>AROAACMEPRODUCER"},
		{"the router's held copy", "AROAROUTERROLE:sfnlimit-RouterFunction-abc", named("AROAACMEPRODUCER"), "AROAACMEPRODUCER"},
		{"the router's held copy of a redrive", "AROAROUTERROLE:sfnlimit-RouterFunction-abc", named("AIDAOPERATOR>AROAACMEPRODUCER"), "AIDAOPERATOR>AROAACMEPRODUCER"},
		{"no SenderId", "", nil, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			sender := &fakeSender{}
			r := newRouter(&fakeConfig{limits: limits}, sender, &fakeDLQ{}, nil)
			r.Self = "AROAROUTERROLE"
			m := events.SQSMessage{MessageId: "m-1", Body: `{"type":"payments","id":"order-1","key":"acme","sender":"AROAACMEPRODUCER","input":{}}`,
				Attributes: map[string]string{"SentTimestamp": "1709978500000"}, MessageAttributes: tt.attrs}
			if tt.senderID != "" {
				m.Attributes["SenderId"] = tt.senderID
			}
			if resp, err := r.Handle(context.Background(), events.SQSEvent{Records: []events.SQSMessage{m}}); err != nil || len(resp.BatchItemFailures) != 0 {
				t.Fatalf("Handle = %+v, %v, want no failures", resp, err)
			}
			got := sender.entries()
			if len(got) != 1 {
				t.Fatalf("sent %d entries, want 1", len(got))
			}
			var j job.Job
			if err := json.Unmarshal([]byte(aws.ToString(got[0].MessageBody)), &j); err != nil {
				t.Fatal(err)
			}
			if j.Sender != tt.want {
				t.Errorf("lanes message's sender = %q, want %q", j.Sender, tt.want)
			}
			if d, want := aws.ToString(got[0].MessageDeduplicationId), job.DedupID("payments", tt.want, "acme", "order-1", 0); d != want {
				t.Errorf("MessageDeduplicationId = %q, want %q", d, want)
			}
		})
	}
}

// A refused job's dead letter names its sender (deadletter.AttrSender), so `dlq redrive` sends it on
// behalf of its own producer and two producers' refused jobs of one type, key and id stay two.
func TestDeadLetterNamesTheSender(t *testing.T) {
	dlq := &fakeDLQ{}
	r := newRouter(&fakeConfig{limits: limits}, &fakeSender{}, dlq, nil)
	m := events.SQSMessage{MessageId: "m-1", Body: `{"type":"nosuch","id":"order-1","key":"acme","input":{}}`,
		Attributes: map[string]string{"SenderId": "AROAACMEPRODUCER:acme-api", "SentTimestamp": "1709978500000"}}
	if _, err := r.Handle(context.Background(), events.SQSEvent{Records: []events.SQSMessage{m}}); err != nil {
		t.Fatal(err)
	}
	if len(dlq.sent) != 1 || dlq.sent[0].Sender != "AROAACMEPRODUCER" {
		t.Fatalf("dead letters = %+v, want one naming sender AROAACMEPRODUCER", dlq.sent)
	}
}
