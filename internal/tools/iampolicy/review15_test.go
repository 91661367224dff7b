package iampolicy_test

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"

	"github.com/sfnlimit/sfnlimit/internal/tools/iampolicy"
)

// The functions send batches' completion events (internal/lambda/batchend): PutEvents is authorized
// on the event bus, with the entry's source as events:source (EventBridge User Guide, "Using IAM
// policy conditions in Amazon EventBridge"). Without a mapping the local IAM check refuses every
// completion event, and the end of a batch's last job fails on the local stack forever.
func TestPutEventsIsAuthorizedOnTheBusWithItsSource(t *testing.T) {
	p, err := iampolicy.Parse("p", map[string]any{"Statement": []any{map[string]any{
		"Effect": "Allow", "Action": "events:PutEvents", "Resource": "arn:aws:events:us-east-1:123456789012:event-bus/default",
		"Condition": map[string]any{"StringEquals": map[string]any{"events:source": "sfnlimit"}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	put := func(source, bus string) *eventbridge.PutEventsInput {
		e := ebtypes.PutEventsRequestEntry{Source: aws.String(source), DetailType: aws.String("sfnlimit Batch Completed"), Detail: aws.String("{}")}
		if bus != "" {
			e.EventBusName = aws.String(bus)
		}
		return &eventbridge.PutEventsInput{Entries: []ebtypes.PutEventsRequestEntry{e}}
	}
	cases := []struct {
		name string
		in   *eventbridge.PutEventsInput
		want bool
	}{
		{"the default bus, source sfnlimit", put("sfnlimit", ""), true},
		{"another source", put("aws.states", ""), false},
		{"another bus", put("sfnlimit", "other"), false},
	}
	for _, c := range cases {
		reqs, err := iampolicy.Requests(acct, c.in)
		if err != nil {
			t.Errorf("%s: Requests() = %v", c.name, err)
			continue
		}
		if len(reqs) != 1 {
			t.Errorf("%s: Requests() = %v, want one authorization", c.name, reqs)
			continue
		}
		d, err := iampolicy.Decide([]iampolicy.Policy{p}, reqs[0])
		if err != nil || d.Allowed != c.want {
			t.Errorf("%s: %s: allowed %v, %v; want %v", c.name, reqs[0], d.Allowed, err, c.want)
		}
	}
}
