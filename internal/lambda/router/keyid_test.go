package router_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
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
