package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"

	"github.com/sfnlimit/sfnlimit/internal/tools/emulator"
)

const testRole = "arn:aws:iam::123456789012:role/test"

// stack is a gateway in front of a moto whose interpreter calls the gateway.
type stack struct {
	gw   *Gateway
	moto *emulator.Process
	sfn  *sfn.Client // through the gateway
}

func newStack(t *testing.T) *stack {
	t.Helper()
	ctx := context.Background()
	gw, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := gw.Start(ctx, "127.0.0.1:0"); err != nil {
		t.Fatalf("Start() = %v", err)
	}
	t.Cleanup(func() { _ = gw.Close() })
	moto, err := emulator.StartMoto(ctx, emulator.MotoOptions{InterpreterEndpoint: gw.URL()})
	if err != nil {
		t.Fatalf("StartMoto() = %v (moto %s must be importable by python3; it is preinstalled on these machines)", err, emulator.MotoVersion)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("moto's last output:\n%s", moto.Logs(40))
		}
		if err := moto.Stop(); err != nil {
			t.Errorf("moto Stop() = %v", err)
		}
	})
	if err := gw.SetMotoURL(moto.Endpoint()); err != nil {
		t.Fatal(err)
	}
	return &stack{gw: gw, moto: moto, sfn: sfnClient(gw.URL())}
}

func loopbackConfig() aws.Config {
	return aws.Config{
		Region:      "us-east-1",
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
	}
}

func sfnClient(endpoint string) *sfn.Client {
	return sfn.NewFromConfig(loopbackConfig(), func(o *sfn.Options) {
		o.BaseEndpoint = aws.String(endpoint)
		o.RetryMaxAttempts = 1
	})
}

func sqsClient(endpoint string) *sqs.Client {
	return sqs.NewFromConfig(loopbackConfig(), func(o *sqs.Options) {
		o.BaseEndpoint = aws.String(endpoint)
		o.RetryMaxAttempts = 1
	})
}

func (s *stack) createStateMachine(t *testing.T, name string, definition string) string {
	t.Helper()
	out, err := s.sfn.CreateStateMachine(context.Background(), &sfn.CreateStateMachineInput{
		Name: aws.String(name), Definition: aws.String(definition), RoleArn: aws.String(testRole),
	})
	if err != nil {
		t.Fatalf("CreateStateMachine(%s) = %v", name, err)
	}
	return aws.ToString(out.StateMachineArn)
}

func (s *stack) start(t *testing.T, smArn, name, input string) string {
	t.Helper()
	out, err := s.sfn.StartExecution(context.Background(), &sfn.StartExecutionInput{
		StateMachineArn: aws.String(smArn), Name: aws.String(name), Input: aws.String(input),
	})
	if err != nil {
		t.Fatalf("StartExecution(%s) = %v", name, err)
	}
	return aws.ToString(out.ExecutionArn)
}

func (s *stack) wait(t *testing.T, arn string) *sfn.DescribeExecutionOutput {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, err := s.sfn.DescribeExecution(context.Background(), &sfn.DescribeExecutionInput{ExecutionArn: aws.String(arn)})
		if err != nil {
			t.Fatalf("DescribeExecution(%s) = %v", arn, err)
		}
		if out.Status != sfntypes.ExecutionStatusRunning {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("execution %s still RUNNING after 20 s", arn)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

func (s *stack) enteredStates(t *testing.T, arn string) []string {
	t.Helper()
	out, err := s.sfn.GetExecutionHistory(context.Background(), &sfn.GetExecutionHistoryInput{ExecutionArn: aws.String(arn)})
	if err != nil {
		t.Fatalf("GetExecutionHistory(%s) = %v", arn, err)
	}
	var names []string
	for _, e := range out.Events {
		if e.StateEnteredEventDetails != nil {
			names = append(names, aws.ToString(e.StateEnteredEventDetails.Name))
		}
	}
	return names
}

func TestLambdaInvokeFromWorkflow(t *testing.T) {
	t.Parallel()
	s := newStack(t)

	type got struct {
		payload   map[string]any
		requestID string
		arn       string
		returned  time.Time
	}
	var mu sync.Mutex
	calls := map[string]got{} // by executionArn
	s.gw.Register("worker", func(ctx context.Context, payload []byte) ([]byte, error) {
		var p map[string]any
		if err := json.Unmarshal(payload, &p); err != nil {
			return nil, err
		}
		lc, _ := lambdacontext.FromContext(ctx)
		arn, _ := p["executionArn"].(string)
		mu.Lock()
		defer mu.Unlock()
		g := got{payload: p}
		if lc != nil {
			g.requestID, g.arn = lc.AwsRequestID, lc.InvokedFunctionArn
		}
		g.returned = time.Now()
		calls[arn] = g
		return json.Marshal(map[string]any{"done": p["job"]})
	})

	sm := s.createStateMachine(t, "lambda-invoke", `{
	  "StartAt": "Work",
	  "States": {
	    "Work": {
	      "Type": "Task",
	      "Resource": "arn:aws:states:::lambda:invoke",
	      "Parameters": {
	        "FunctionName": "arn:aws:lambda:us-east-1:123456789012:function:worker",
	        "Payload": {"executionArn.$": "$$.Execution.Id", "job.$": "$$.Execution.Input.job"}
	      },
	      "OutputPath": "$.Payload",
	      "End": true
	    }
	  }
	}`)

	jobs := map[string]string{} // executionArn -> job id
	for i := range 3 {
		id := fmt.Sprintf("job-%d", i)
		arn := s.start(t, sm, id, fmt.Sprintf(`{"job":{"id":%q,"type":"reports","lane":%d},"input":{"n":%d}}`, id, i, i))
		jobs[arn] = id
	}
	for arn, id := range jobs {
		d := s.wait(t, arn)
		if d.Status != sfntypes.ExecutionStatusSucceeded {
			t.Fatalf("execution %s status = %s, want SUCCEEDED (error %s, cause %s)", arn, d.Status, aws.ToString(d.Error), aws.ToString(d.Cause))
		}
		mu.Lock()
		c, ok := calls[arn]
		mu.Unlock()
		if !ok {
			t.Fatalf("worker never received executionArn %s (got %v)", arn, calls)
		}
		job, _ := c.payload["job"].(map[string]any)
		if job["id"] != id || job["type"] != "reports" {
			t.Errorf("worker payload job = %v, want id %s and type reports", job, id)
		}
		if _, hasInput := c.payload["input"]; hasInput {
			t.Errorf("worker payload = %v, want only executionArn and job", c.payload)
		}
		if want := FunctionARN("worker"); c.arn != want || c.requestID == "" {
			t.Errorf("lambda context = (%q, %q), want the invoked ARN %s and a request id", c.arn, c.requestID, want)
		}
		var out map[string]any
		if err := json.Unmarshal([]byte(aws.ToString(d.Output)), &out); err != nil {
			t.Fatalf("execution output %q: %v", aws.ToString(d.Output), err)
		}
		if done, _ := out["done"].(map[string]any); done["id"] != id {
			t.Errorf("execution output = %v, want the function's result for %s", out, id)
		}
		t.Logf("%s: started %s, function returned +%v, stopDate +%v", id, d.StartDate.Format(time.RFC3339Nano),
			c.returned.Sub(*d.StartDate).Round(time.Millisecond), d.StopDate.Sub(*d.StartDate).Round(time.Millisecond))
	}
	if got := s.gw.Calls()[Call{Service: "lambda", Operation: "Invoke"}]; got != 3 {
		t.Errorf("Calls()[lambda:Invoke] = %d, want 3", got)
	}
}

func TestFunctionErrorIsTaskFailure(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	var mu sync.Mutex
	attempts := 0
	s.gw.Register("fails", func(ctx context.Context, payload []byte) ([]byte, error) {
		mu.Lock()
		attempts++
		mu.Unlock()
		return nil, errors.New("boom")
	})
	panics := 0
	s.gw.Register("panics", func(ctx context.Context, payload []byte) ([]byte, error) {
		mu.Lock()
		panics++
		mu.Unlock()
		panic("kaboom")
	})

	tests := []struct {
		name         string
		function     string
		resource     string
		wantError    string
		wantCause    string
		wantAttempts func() int
	}{
		{
			name: "error, lambda:invoke", function: "fails", resource: "arn:aws:states:::lambda:invoke",
			wantError: "errorString", wantCause: "boom", wantAttempts: func() int { return attempts },
		},
		{
			name: "panic, function ARN as resource", function: "panics",
			resource:  "arn:aws:lambda:us-east-1:123456789012:function:panics",
			wantError: "string", wantCause: "kaboom", wantAttempts: func() int { return panics },
		},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			params := fmt.Sprintf(`"Parameters": {"FunctionName": %q, "Payload": {"x": 1}},`, FunctionARN(tt.function))
			if !strings.HasPrefix(tt.resource, "arn:aws:states:") {
				params = `"Parameters": {"x": 1},`
			}
			// Retry sees the error by its type (one retry), then Catch on States.ALL routes to Handled.
			sm := s.createStateMachine(t, fmt.Sprintf("catch-%d", i), fmt.Sprintf(`{
			  "StartAt": "Work",
			  "States": {
			    "Work": {
			      "Type": "Task", "Resource": %q, %s
			      "Retry": [{"ErrorEquals": [%q], "IntervalSeconds": 1, "MaxAttempts": 1}],
			      "Catch": [{"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": "Handled"}],
			      "Next": "Unreached"
			    },
			    "Unreached": {"Type": "Succeed"},
			    "Handled": {"Type": "Pass", "End": true}
			  }
			}`, tt.resource, params, tt.wantError))
			arn := s.start(t, sm, "run", `{"job":{"id":"j"}}`)
			d := s.wait(t, arn)
			if d.Status != sfntypes.ExecutionStatusSucceeded {
				t.Fatalf("status = %s, want SUCCEEDED through the Catch (error %s, cause %s)", d.Status, aws.ToString(d.Error), aws.ToString(d.Cause))
			}
			var out struct {
				Error struct{ Error, Cause string } `json:"error"`
			}
			if err := json.Unmarshal([]byte(aws.ToString(d.Output)), &out); err != nil {
				t.Fatalf("output %q: %v", aws.ToString(d.Output), err)
			}
			if out.Error.Error != tt.wantError {
				t.Errorf("caught Error = %q, want %q", out.Error.Error, tt.wantError)
			}
			var cause struct{ ErrorMessage, ErrorType string }
			if err := json.Unmarshal([]byte(out.Error.Cause), &cause); err != nil || cause.ErrorMessage != tt.wantCause || cause.ErrorType != tt.wantError {
				t.Errorf("caught Cause = %q, want the function error document with message %q", out.Error.Cause, tt.wantCause)
			}
			if got, want := strings.Join(s.enteredStates(t, arn), ","), "Work,Handled"; got != want {
				t.Errorf("states entered = %s, want %s", got, want)
			}
			mu.Lock()
			got := tt.wantAttempts()
			mu.Unlock()
			if got != 2 {
				t.Errorf("function called %d times, want 2 (the Retry matched the error type)", got)
			}
		})
	}
}

func TestFaultInjection(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	ctx := context.Background()
	sm := s.createStateMachine(t, "faults", `{"StartAt":"P","States":{"P":{"Type":"Pass","End":true}}}`)

	s.gw.SetFaults(func(target string) *Fault {
		if target == "AWSStepFunctions.StartExecution" {
			return &Fault{Status: 400, Code: "ThrottlingException", Message: "Rate exceeded"}
		}
		return nil
	})
	_, err := s.sfn.StartExecution(ctx, &sfn.StartExecutionInput{StateMachineArn: aws.String(sm), Name: aws.String("e1")})
	var apiErr smithy.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode() != "ThrottlingException" || apiErr.ErrorMessage() != "Rate exceeded" {
		t.Fatalf("StartExecution with a fault = %v, want ThrottlingException: Rate exceeded", err)
	}
	if _, err := s.sfn.DescribeStateMachine(ctx, &sfn.DescribeStateMachineInput{StateMachineArn: aws.String(sm)}); err != nil {
		t.Errorf("DescribeStateMachine with a StartExecution fault = %v, want success", err)
	}

	s.gw.SetFaults(nil)
	if _, err := s.sfn.StartExecution(ctx, &sfn.StartExecutionInput{StateMachineArn: aws.String(sm), Name: aws.String("e1")}); err != nil {
		t.Fatalf("StartExecution after the fault is removed = %v", err)
	}
	calls := s.gw.Calls()
	if got := calls[Call{Service: "states", Operation: "StartExecution"}]; got != 2 {
		t.Errorf("Calls()[states:StartExecution] = %d, want 2 (faulted ones count)", got)
	}
	if got := calls[Call{Service: "states", Operation: "DescribeStateMachine"}]; got != 1 {
		t.Errorf("Calls()[states:DescribeStateMachine] = %d, want 1", got)
	}

	// A fault on the interpreter's own Lambda call is a Lambda service error to the workflow.
	s.gw.Register("worker", func(ctx context.Context, p []byte) ([]byte, error) { return p, nil })
	s.gw.SetFaults(func(target string) *Fault {
		if target == "Lambda.Invoke" {
			return &Fault{Status: 429, Code: "TooManyRequestsException", Message: "Rate Exceeded."}
		}
		return nil
	})
	defer s.gw.SetFaults(nil)
	caught := s.createStateMachine(t, "lambda-throttled", `{
	  "StartAt": "Work",
	  "States": {
	    "Work": {
	      "Type": "Task", "Resource": "arn:aws:states:::lambda:invoke",
	      "Parameters": {"FunctionName": "worker", "Payload": {}},
	      "Catch": [{"ErrorEquals": ["Lambda.TooManyRequestsException"], "ResultPath": "$.error", "Next": "Throttled"}],
	      "End": true
	    },
	    "Throttled": {"Type": "Pass", "End": true}
	  }
	}`)
	arn := s.start(t, caught, "throttled", `{}`)
	if d := s.wait(t, arn); d.Status != sfntypes.ExecutionStatusSucceeded {
		t.Fatalf("status = %s, want SUCCEEDED through the Catch (error %s, cause %s)", d.Status, aws.ToString(d.Error), aws.ToString(d.Cause))
	}
	if got, want := strings.Join(s.enteredStates(t, arn), ","), "Work,Throttled"; got != want {
		t.Errorf("states entered = %s, want %s", got, want)
	}
}

func TestSQSRouting(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	ctx := context.Background()
	fq := startFauxqs(t)

	// Both emulators build queue URLs from the request's Host (the gateway, which keeps it); their
	// accounts tell them apart.
	for _, backend := range []struct {
		name    string
		url     string
		port    int
		account string
	}{
		{name: "fauxqs", url: fq.Endpoint(), port: fq.Port(), account: "000000000000"},
		{name: "moto", url: "", port: s.moto.Port(), account: "123456789012"},
	} {
		t.Run(backend.name, func(t *testing.T) {
			if err := s.gw.SetSQSURL(backend.url); err != nil {
				t.Fatal(err)
			}
			before := s.gw.Calls()[Call{Service: "sqs", Operation: "CreateQueue"}]
			c := sqsClient(s.gw.URL())
			q, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("routed-" + backend.name)})
			if err != nil {
				t.Fatalf("CreateQueue through the gateway = %v", err)
			}
			if want := fmt.Sprintf(":%d/%s/", s.gw.Port(), backend.account); !strings.Contains(aws.ToString(q.QueueUrl), want) {
				t.Errorf("queue URL = %s, want one with %s (%s behind the gateway)", aws.ToString(q.QueueUrl), want, backend.name)
			}
			// The queue exists on the backend itself.
			direct := sqsClient("http://127.0.0.1:" + fmt.Sprint(backend.port))
			if _, err := direct.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String("routed-" + backend.name)}); err != nil {
				t.Errorf("GetQueueUrl on %s directly = %v, want the queue created through the gateway", backend.name, err)
			}
			if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String("hello")}); err != nil {
				t.Fatalf("SendMessage = %v", err)
			}
			r, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, WaitTimeSeconds: 1})
			if err != nil || len(r.Messages) != 1 || aws.ToString(r.Messages[0].Body) != "hello" {
				t.Fatalf("ReceiveMessage = %v, %v; want the message sent", r, err)
			}
			if got := s.gw.Calls()[Call{Service: "sqs", Operation: "CreateQueue"}] - before; got != 1 {
				t.Errorf("Calls()[sqs:CreateQueue] grew by %d, want 1", got)
			}
		})
	}
	_ = s.gw.SetSQSURL("")
}

// TestAwsSdkSQSDeleteMessageTask records what moto's interpreter does with an aws-sdk:sqs:deleteMessage
// task sent through the gateway, against both SQS emulators.
func TestAwsSdkSQSDeleteMessageTask(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	ctx := context.Background()
	fq := startFauxqs(t)

	sm := s.createStateMachine(t, "delete-message", `{
	  "StartAt": "Delete",
	  "States": {
	    "Delete": {
	      "Type": "Task",
	      "Resource": "arn:aws:states:::aws-sdk:sqs:deleteMessage",
	      "Parameters": {"QueueUrl.$": "$.queueUrl", "ReceiptHandle.$": "$.receiptHandle"},
	      "End": true
	    }
	  }
	}`)

	for _, backend := range []struct{ name, url string }{{"fauxqs", fq.Endpoint()}, {"moto", ""}} {
		t.Run(backend.name, func(t *testing.T) {
			if err := s.gw.SetSQSURL(backend.url); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = s.gw.SetSQSURL("") }()
			c := sqsClient(s.gw.URL())
			q, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{
				QueueName: aws.String("lanes-" + backend.name + ".fifo"),
				Attributes: map[string]string{
					"FifoQueue": "true", "ContentBasedDeduplication": "true", "VisibilityTimeout": "1",
				},
			})
			if err != nil {
				t.Fatalf("CreateQueue = %v", err)
			}
			if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String("job"), MessageGroupId: aws.String("g")}); err != nil {
				t.Fatalf("SendMessage = %v", err)
			}
			r, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: q.QueueUrl})
			if err != nil || len(r.Messages) != 1 {
				t.Fatalf("ReceiveMessage = %v, %v; want one message", r, err)
			}
			before := s.gw.Calls()[Call{Service: "sqs", Operation: "DeleteMessage"}]
			input, _ := json.Marshal(map[string]string{"queueUrl": aws.ToString(q.QueueUrl), "receiptHandle": aws.ToString(r.Messages[0].ReceiptHandle)})
			arn := s.start(t, sm, "delete-"+backend.name, string(input))
			d := s.wait(t, arn)
			t.Logf("aws-sdk:sqs:deleteMessage via the gateway to %s: %s (error %q) in %v", backend.name, d.Status,
				aws.ToString(d.Error), d.StopDate.Sub(*d.StartDate).Round(time.Millisecond))
			if d.Status != sfntypes.ExecutionStatusSucceeded {
				t.Fatalf("status = %s, want SUCCEEDED (error %s, cause %s)", d.Status, aws.ToString(d.Error), aws.ToString(d.Cause))
			}
			if got := s.gw.Calls()[Call{Service: "sqs", Operation: "DeleteMessage"}] - before; got != 1 {
				t.Errorf("the interpreter's DeleteMessage calls through the gateway = %d, want 1", got)
			}
			time.Sleep(1200 * time.Millisecond) // past the visibility timeout: an undeleted message would be back
			again, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: q.QueueUrl})
			if err != nil {
				t.Fatalf("ReceiveMessage = %v", err)
			}
			if len(again.Messages) != 0 {
				t.Errorf("message back after the workflow deleted it: %v", aws.ToString(again.Messages[0].Body))
			}
		})
	}
}

// startFauxqs starts fauxqs for one test and stops it when the test ends.
func startFauxqs(t *testing.T) *emulator.Process {
	t.Helper()
	fq, err := emulator.StartFauxqs(context.Background(), emulator.FauxqsOptions{})
	if err != nil {
		t.Fatalf("StartFauxqs() = %v (run `npm ci` at the repository root)", err)
	}
	t.Cleanup(func() { _ = fq.Stop() })
	return fq
}
