package iampolicy_test

import (
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sfnlimit/sfnlimit/internal/tools/iampolicy"
)

const table = "arn:aws:dynamodb:us-east-1:123456789012:table/t"

var acct = iampolicy.Account{Partition: "aws", Region: "us-east-1", ID: "123456789012", PartitionKey: "pk"}

func s(v string) ddbtypes.AttributeValue { return &ddbtypes.AttributeValueMemberS{Value: v} }

// The router's role as template.yaml writes it, resolved.
func routerPolicy(t *testing.T, countActions ...any) []iampolicy.Policy {
	t.Helper()
	if len(countActions) == 0 {
		countActions = []any{"dynamodb:PutItem"}
	}
	doc := map[string]any{"Statement": []any{
		map[string]any{"Sid": "Send", "Effect": "Allow", "Action": "sqs:SendMessage", "Resource": []any{"arn:aws:sqs:us-east-1:123456789012:lanes.fifo"}},
		map[string]any{"Sid": "ReadConfig", "Effect": "Allow", "Action": []any{"dynamodb:GetItem", "dynamodb:Query"}, "Resource": table,
			"Condition": map[string]any{"ForAllValues:StringLike": map[string]any{"dynamodb:LeadingKeys": []any{"CONFIG", "OCC#*"}}}},
		map[string]any{"Sid": "CountLanes", "Effect": "Allow", "Action": countActions, "Resource": table,
			"Condition": map[string]any{"ForAllValues:StringLike": map[string]any{"dynamodb:LeadingKeys": []any{"OCC#*"}}}},
	}}
	p, err := iampolicy.Parse("router", doc)
	if err != nil {
		t.Fatal(err)
	}
	return []iampolicy.Policy{p}
}

func TestDecide(t *testing.T) {
	txn := &dynamodb.TransactWriteItemsInput{TransactItems: []ddbtypes.TransactWriteItem{
		{Delete: &ddbtypes.Delete{TableName: aws.String("t"), Key: map[string]ddbtypes.AttributeValue{"pk": s("OCC#ll"), "sk": s("JOB#1")}}},
		{Update: &ddbtypes.Update{TableName: aws.String("t"), Key: map[string]ddbtypes.AttributeValue{"pk": s("OCC#ll"), "sk": s("LANE#1")}}},
	}}
	cases := []struct {
		name    string
		actions []any
		input   any
		want    []bool // per authorization of the call
	}{
		{"a Delete in a transaction needs DeleteItem", []any{"dynamodb:PutItem", "dynamodb:UpdateItem"}, txn, []bool{false, true}},
		{"with DeleteItem the transaction passes", []any{"dynamodb:DeleteItem", "dynamodb:PutItem", "dynamodb:UpdateItem"}, txn, []bool{true, true}},
		{"an action wildcard", []any{"dynamodb:*Item"}, txn, []bool{true, true}},
		{"a key outside the leading keys is refused", []any{"dynamodb:GetItem"},
			&dynamodb.GetItemInput{TableName: aws.String("t"), Key: map[string]ddbtypes.AttributeValue{"pk": s("LEASE#ll")}}, []bool{false}},
		{"a query of CONFIG is allowed", nil,
			&dynamodb.QueryInput{TableName: aws.String("t"), KeyConditionExpression: aws.String("pk = :pk AND sk BETWEEN :a AND :b"),
				ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":pk": s("CONFIG")}}, []bool{true}},
		{"a query of leases is refused", nil,
			&dynamodb.QueryInput{TableName: aws.String("t"), KeyConditionExpression: aws.String("#p = :pk"),
				ExpressionAttributeNames: map[string]string{"#p": "pk"}, ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":pk": s("LEASE#x")}}, []bool{false}},
		{"a batch send needs SendMessage on its queue", nil,
			&sqs.SendMessageBatchInput{QueueUrl: aws.String("http://127.0.0.1:4566/123456789012/lanes.fifo")}, []bool{true}},
		{"a send to another queue is refused", nil,
			&sqs.SendMessageInput{QueueUrl: aws.String("https://sqs.us-east-1.amazonaws.com/123456789012/general")}, []bool{false}},
		{"DeleteMessage is not SendMessage", nil,
			&sqs.DeleteMessageInput{QueueUrl: aws.String("https://sqs.us-east-1.amazonaws.com/123456789012/lanes.fifo")}, []bool{false}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			reqs, err := iampolicy.Requests(acct, c.input)
			if err != nil {
				t.Fatal(err)
			}
			if len(reqs) != len(c.want) {
				t.Fatalf("Requests() = %v, want %d", reqs, len(c.want))
			}
			for i, r := range reqs {
				d, err := iampolicy.Decide(routerPolicy(t, c.actions...), r)
				if err != nil {
					t.Fatal(err)
				}
				if d.Allowed != c.want[i] {
					t.Errorf("%s: allowed %v (by %q), want %v", r, d.Allowed, d.By, c.want[i])
				}
			}
		})
	}
}

func TestExplicitDenyWins(t *testing.T) {
	p, err := iampolicy.Parse("p", map[string]any{"Statement": []any{
		map[string]any{"Effect": "Allow", "Action": "states:*", "Resource": "*"},
		map[string]any{"Sid": "NoStop", "Effect": "Deny", "Action": "states:StopExecution", "Resource": "arn:aws:states:*:*:execution:sm:*"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for in, want := range map[any]bool{
		&sfn.StopExecutionInput{ExecutionArn: aws.String("arn:aws:states:us-east-1:123456789012:execution:sm:x")}:      false,
		&sfn.DescribeExecutionInput{ExecutionArn: aws.String("arn:aws:states:us-east-1:123456789012:execution:sm:x")}:  true,
		&sfn.StartExecutionInput{StateMachineArn: aws.String("arn:aws:states:us-east-1:123456789012:stateMachine:sm")}: true,
		&sfn.ListExecutionsInput{StateMachineArn: aws.String("arn:aws:states:us-east-1:123456789012:stateMachine:sm")}: true,
	} {
		reqs, err := iampolicy.Requests(acct, in)
		if err != nil {
			t.Fatal(err)
		}
		d, err := iampolicy.Decide([]iampolicy.Policy{p}, reqs[0])
		if err != nil || d.Allowed != want {
			t.Errorf("%s: %+v, %v; want allowed %v", reqs[0], d, err, want)
		}
	}
}

// What iampolicy cannot judge is an error, never a silent answer.
func TestUnknownIsAnError(t *testing.T) {
	if _, err := iampolicy.Requests(acct, &dynamodb.BatchWriteItemInput{}); err == nil || !strings.Contains(err.Error(), "no IAM mapping") {
		t.Errorf("Requests(BatchWriteItem) error = %v, want no IAM mapping", err)
	}
	p, err := iampolicy.Parse("p", map[string]any{"Statement": map[string]any{"Effect": "Allow", "Action": "sqs:*", "Resource": "*",
		"Condition": map[string]any{"IpAddress": map[string]any{"aws:SourceIp": "10.0.0.0/8"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := iampolicy.Decide([]iampolicy.Policy{p}, iampolicy.Request{Action: "sqs:SendMessage", Resource: "arn:aws:sqs:us-east-1:1:q"}); err == nil {
		t.Error("Decide with an IpAddress condition = no error, want one")
	}
	if _, err := iampolicy.Parse("p", map[string]any{"Statement": []any{map[string]any{"Effect": "Allow", "Action": "sqs:*"}}}); err == nil {
		t.Error("Parse of a statement without Resource = no error, want one")
	}
}

// A grant no call needs is reported: an action of a statement whose resource or leading keys no
// request matched is unused even when another statement allows the same action.
func TestUnused(t *testing.T) {
	getConfig := &dynamodb.GetItemInput{TableName: aws.String("t"), Key: map[string]ddbtypes.AttributeValue{"pk": s("CONFIG")}}
	queryConfig := &dynamodb.QueryInput{TableName: aws.String("t"), KeyConditionExpression: aws.String("pk = :pk"),
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":pk": s("CONFIG")}}
	putCount := &dynamodb.PutItemInput{TableName: aws.String("t"), Item: map[string]ddbtypes.AttributeValue{"pk": s("OCC#ll")}}
	send := &sqs.SendMessageInput{QueueUrl: aws.String("https://sqs.us-east-1.amazonaws.com/123456789012/lanes.fifo")}
	cases := []struct {
		name  string
		calls []any
		want  []string
	}{
		{"every grant used", []any{send, getConfig, queryConfig, putCount}, nil},
		{"a query alone leaves GetItem unused", []any{send, queryConfig, putCount}, []string{"router/ReadConfig dynamodb:GetItem"}},
		{"nothing called", nil, []string{"router/Send sqs:SendMessage", "router/ReadConfig dynamodb:GetItem", "router/ReadConfig dynamodb:Query", "router/CountLanes dynamodb:PutItem"}},
		{"a count's PutItem does not use ReadConfig's actions", []any{putCount},
			[]string{"router/Send sqs:SendMessage", "router/ReadConfig dynamodb:GetItem", "router/ReadConfig dynamodb:Query"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var reqs []iampolicy.Request
			for _, in := range c.calls {
				rs, err := iampolicy.Requests(acct, in)
				if err != nil {
					t.Fatal(err)
				}
				reqs = append(reqs, rs...)
			}
			unused, err := iampolicy.Unused(routerPolicy(t), reqs)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, g := range unused {
				got = append(got, g.String())
			}
			if strings.Join(got, "; ") != strings.Join(c.want, "; ") {
				t.Errorf("Unused() = %q, want %q", got, c.want)
			}
		})
	}
}
