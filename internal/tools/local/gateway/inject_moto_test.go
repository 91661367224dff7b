package gateway

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"

	"github.com/sfnlimit/sfnlimit/internal/tools/testmoto"
)

// ddbClient is a DynamoDB client through the gateway, without SDK retries; observer clients carry
// ObserverAppID.
func ddbClient(endpoint string, observer bool) *dynamodb.Client {
	cfg := loopbackConfig()
	if observer {
		cfg.AppID = ObserverAppID
	}
	return dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
		o.BaseEndpoint = aws.String(endpoint)
		o.RetryMaxAttempts = 1
	})
}

func observerSFN(endpoint string) *sfn.Client {
	cfg := loopbackConfig()
	cfg.AppID = ObserverAppID
	return sfn.NewFromConfig(cfg, func(o *sfn.Options) {
		o.BaseEndpoint = aws.String(endpoint)
		o.RetryMaxAttempts = 1
	})
}

func put(table, sk string) ddbtypes.TransactWriteItem {
	return ddbtypes.TransactWriteItem{Put: &ddbtypes.Put{TableName: aws.String(table), Item: map[string]ddbtypes.AttributeValue{
		"pk": &ddbtypes.AttributeValueMemberS{Value: "p"}, "sk": &ddbtypes.AttributeValueMemberS{Value: sk},
	}}}
}

// A conflict is what the SDK makes of DynamoDB's answer: TransactionCanceledException with one reason
// per item, TransactionConflict on one of them; nothing is written; an observer
// is never faulted; and the rate is the share of calls faulted.
func TestInjectedTransactionConflict(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	ctx := context.Background()
	db, observer := ddbClient(s.gw.URL(), false), ddbClient(s.gw.URL(), true)
	table := testmoto.Table(t, observer, "inject")

	s.gw.InjectFaults(&Faults{TransactionConflict: 1})
	_, err := db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []ddbtypes.TransactWriteItem{put(table, "a"), put(table, "b"), put(table, "c")}})
	var tc *ddbtypes.TransactionCanceledException
	if !errors.As(err, &tc) {
		t.Fatalf("TransactWriteItems with conflicts injected = %v, want TransactionCanceledException", err)
	}
	var codes []string
	for _, r := range tc.CancellationReasons {
		codes = append(codes, aws.ToString(r.Code))
	}
	if len(codes) != 3 || strings.Count(strings.Join(codes, ","), "TransactionConflict") != 1 || strings.Count(strings.Join(codes, ","), "None") != 2 {
		t.Errorf("cancellation reasons = %v, want one TransactionConflict and None for the other 2 items", codes)
	}
	got, err := observer.GetItem(ctx, &dynamodb.GetItemInput{TableName: &table, Key: map[string]ddbtypes.AttributeValue{
		"pk": &ddbtypes.AttributeValueMemberS{Value: "p"}, "sk": &ddbtypes.AttributeValueMemberS{Value: "a"},
	}})
	if err != nil || len(got.Item) != 0 {
		t.Errorf("GetItem after a cancelled transaction = %v, %v; want no item", got, err)
	}
	if _, err := observer.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []ddbtypes.TransactWriteItem{put(table, "o")}}); err != nil {
		t.Errorf("an observer's TransactWriteItems = %v, want it never faulted", err)
	}

	const calls, rate = 200, 0.3
	s.gw.InjectFaults(&Faults{TransactionConflict: rate, Seed: 7})
	before := s.gw.Injected()[InjectedTransactionConflict]
	failed := 0
	for i := range calls {
		_, err := db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []ddbtypes.TransactWriteItem{put(table, fmt.Sprint(i))}})
		if err != nil {
			failed++
		}
	}
	injected := s.gw.Injected()[InjectedTransactionConflict] - before
	t.Logf("rate %.1f: %d of %d transactions cancelled", rate, failed, calls)
	if int64(failed) != injected || failed < calls*rate/2 || failed > calls*rate*3/2 {
		t.Errorf("rate %.1f: %d of %d transactions failed, %d faults counted; want the two equal and about %d", rate, failed, calls, injected, int(calls*rate))
	}
	s.gw.InjectFaults(nil)
	if _, err := db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []ddbtypes.TransactWriteItem{put(table, "after")}}); err != nil {
		t.Errorf("TransactWriteItems after InjectFaults(nil) = %v", err)
	}
}

// DescribeExecution of an execution started less than StaleDescribeFor ago answers
// ExecutionDoesNotExist, as an eventually consistent read may; once it is older, the truth.
func TestInjectedStaleDescribe(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	ctx := context.Background()
	sm := s.createStateMachine(t, "stale", `{"StartAt":"W","States":{"W":{"Type":"Wait","Seconds":30,"End":true}}}`)
	const window = 2 * time.Second
	s.gw.InjectFaults(&Faults{StaleDescribe: 1, StaleDescribeFor: window})
	// The gateway notes the start between these two instants.
	before := time.Now()
	arn := s.start(t, sm, "young", `{}`)
	after := time.Now()
	_, err := s.sfn.DescribeExecution(ctx, &sfn.DescribeExecutionInput{ExecutionArn: &arn})
	young := time.Since(before) < window // surely inside the window (a busy machine may take longer)
	var notYet *sfntypes.ExecutionDoesNotExist
	if young && !errors.As(err, &notYet) {
		t.Errorf("DescribeExecution right after the start = %v, want ExecutionDoesNotExist", err)
	}
	if _, err := observerSFN(s.gw.URL()).DescribeExecution(ctx, &sfn.DescribeExecutionInput{ExecutionArn: &arn}); err != nil {
		t.Errorf("an observer's DescribeExecution = %v, want it never faulted", err)
	}
	// Other executions, and other calls, are not touched.
	if _, err := s.sfn.DescribeStateMachine(ctx, &sfn.DescribeStateMachineInput{StateMachineArn: &sm}); err != nil {
		t.Errorf("DescribeStateMachine = %v", err)
	}
	time.Sleep(time.Until(after.Add(window)))
	d, err := s.sfn.DescribeExecution(ctx, &sfn.DescribeExecutionInput{ExecutionArn: &arn})
	if err != nil || d.Status != sfntypes.ExecutionStatusRunning {
		t.Errorf("DescribeExecution after the window = %v, %v; want RUNNING", d, err)
	}
	if n := s.gw.Injected()[InjectedStaleDescribe]; young && n != 1 {
		t.Errorf("Injected()[%s] = %d, want 1", InjectedStaleDescribe, n)
	}
	// A start again of the same running execution (StartExecution is idempotent by name) does not
	// make it young again.
	s.start(t, sm, "young", `{}`)
	if _, err := s.sfn.DescribeExecution(ctx, &sfn.DescribeExecutionInput{ExecutionArn: &arn}); err != nil {
		t.Errorf("DescribeExecution after a repeated start = %v, want the execution", err)
	}
	_, _ = s.sfn.StopExecution(ctx, &sfn.StopExecutionInput{ExecutionArn: &arn})
}

// A throttled Invoke reaches the workflow as Lambda.TooManyRequestsException, the function does not
// run, and the task's Retry sees it; ThrottleInvoke throttles the invokes it picks whatever the rate.
func TestInjectedInvokeThrottle(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	var ran atomic.Int32
	s.gw.Register("releaser", func(ctx context.Context, p []byte) ([]byte, error) { ran.Add(1); return p, nil })
	sm := s.createStateMachine(t, "throttled", `{
	  "StartAt": "Release",
	  "States": {
	    "Release": {
	      "Type": "Task", "Resource": "arn:aws:states:::lambda:invoke",
	      "Parameters": {"FunctionName": "releaser", "Payload": {"id.$": "$.id"}},
	      "Retry": [{"ErrorEquals": ["Lambda.TooManyRequestsException"], "IntervalSeconds": 1, "MaxAttempts": 2}],
	      "Catch": [{"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": "Throttled"}],
	      "End": true
	    },
	    "Throttled": {"Type": "Pass", "End": true}
	  }
	}`)
	s.gw.InjectFaults(&Faults{ThrottleInvoke: func(fn string, payload []byte) bool {
		return fn == "releaser" && strings.Contains(string(payload), `"stuck"`)
	}})
	stuck := s.start(t, sm, "stuck", `{"id":"stuck"}`)
	free := s.start(t, sm, "free", `{"id":"free"}`)
	if d := s.wait(t, free); d.Status != sfntypes.ExecutionStatusSucceeded || strings.Join(s.enteredStates(t, free), ",") != "Release" {
		t.Errorf("execution free: %s through %v, want SUCCEEDED through Release alone", d.Status, s.enteredStates(t, free))
	}
	if d := s.wait(t, stuck); d.Status != sfntypes.ExecutionStatusSucceeded || strings.Join(s.enteredStates(t, stuck), ",") != "Release,Throttled" {
		t.Errorf("execution stuck: %s through %v, want SUCCEEDED through the Catch", d.Status, s.enteredStates(t, stuck))
	}
	if n, want := s.gw.Injected()[InjectedInvokeThrottle], int64(3); n != want || ran.Load() != 1 {
		t.Errorf("%d invokes throttled, releaser ran %d times; want %d throttled (1 call, 2 retries) and 1 run (execution free)", n, ran.Load(), want)
	}
}

func TestExecutionARN(t *testing.T) {
	for give, want := range map[[2]string]string{
		{"arn:aws:states:us-east-1:123456789012:stateMachine:sample", "job-1"}: "arn:aws:states:us-east-1:123456789012:execution:sample:job-1",
		{"arn:aws-cn:states:cn-north-1:123456789012:stateMachine:s", "x"}:      "arn:aws-cn:states:cn-north-1:123456789012:execution:s:x",
	} {
		if got := executionARN(give[0], give[1]); got != want {
			t.Errorf("executionARN(%q, %q) = %q, want %q", give[0], give[1], got, want)
		}
	}
}
