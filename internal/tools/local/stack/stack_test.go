package stack

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/tools/emulator"
	"github.com/sfnlimit/sfnlimit/internal/tools/local/gateway"
)

// A parameter out of range is reported as such (it used to panic in Close on a nil stack).
func TestStartReportsAParameterOutOfRange(t *testing.T) {
	s, err := Start(t.Context(), Options{Parameters: map[string]string{"FifoVisibilityTimeout": "1"}})
	if err == nil {
		s.Close()
		t.Fatal("Start(FifoVisibilityTimeout=1) = nil error, want the parameter's error")
	}
	if s != nil || !strings.Contains(err.Error(), "FifoVisibilityTimeout") {
		t.Errorf("Start(FifoVisibilityTimeout=1) = %v, %v; want nil and an error naming the parameter", s, err)
	}
}

// An error once the emulators run (here: the state machine's definition file is missing) stops them.
func TestStartStopsTheEmulatorsOnError(t *testing.T) {
	root, err := emulator.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	tpl, err := os.ReadFile(filepath.Join(root, "template.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	broken := t.TempDir() // template.yaml without statemachine/
	if err := os.WriteFile(filepath.Join(broken, "template.yaml"), tpl, 0o644); err != nil {
		t.Fatal(err)
	}
	var started []*emulator.Process
	emulatorStarted = func(p *emulator.Process) { started = append(started, p) }
	t.Cleanup(func() { emulatorStarted = func(*emulator.Process) {} })

	s, err := Start(t.Context(), Options{Root: broken})
	if err == nil {
		s.Close()
		t.Fatal("Start without the state machine's definition = nil error, want one")
	}
	if len(started) == 0 {
		t.Fatalf("Start failed before any emulator started (%v): the test does not reach its case", err)
	}
	for _, p := range started {
		select {
		case <-p.Done():
		case <-time.After(30 * time.Second):
			_ = p.Stop()
			t.Errorf("emulator (pid %d) still runs after Start failed with %v", p.PID(), err)
		}
	}
}

// A job whose work succeeded keeps its success when every release by its workflow fails (the
// releaser throttled): the Release step's Catch ends the execution SUCCEEDED, and the sweep then
// releases the lane as a success. The job runs once, is not retried and is not dead-lettered.
// Runs the sample workflow on moto with every Lambda invoke of the workflow refused.
func TestFailedReleaseKeepsTheSuccess(t *testing.T) {
	ctx := t.Context()
	s, err := Start(ctx, Options{
		Parameters:  map[string]string{"TypeLimits": "t=1"},
		FunctionEnv: map[string]string{"SWEEP_MIN_AGE_SECONDS": "0"},
		SweepEvery:  2 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	s.Gateway().SetFaults(func(target string) *gateway.Fault {
		if target == "Lambda.Invoke" {
			return &gateway.Fault{Status: 429, Code: "TooManyRequestsException", Message: "Rate exceeded"}
		}
		return nil
	})
	if err := s.StartRuntime(ctx); err != nil {
		t.Fatal(err)
	}
	c := s.Clients()
	if _, err := c.SQS.SendMessage(ctx, &sqs.SendMessageInput{
		QueueUrl: aws.String(s.Info().Output("GeneralQueueUrl")), MessageBody: aws.String(`{"type":"t","id":"ok-1","input":{}}`),
	}); err != nil {
		t.Fatal(err)
	}
	smArn := s.Info().Output("SampleStateMachineArn")
	table := s.Info().Output("TableName")
	deadline := time.Now().Add(4 * time.Minute) // Release retries 6 times with backoff before its Catch
	var execs []sfntypes.ExecutionListItem
	for {
		out, err := c.SFN.ListExecutions(ctx, &sfn.ListExecutionsInput{StateMachineArn: &smArn})
		if err != nil {
			t.Fatal(err)
		}
		execs = out.Executions
		lease, err := c.DDB.GetItem(ctx, &dynamodb.GetItemInput{TableName: &table, ConsistentRead: aws.Bool(true), Key: map[string]ddbtypes.AttributeValue{
			"pk": &ddbtypes.AttributeValueMemberS{Value: "LEASE#t"}, "sk": &ddbtypes.AttributeValueMemberS{Value: "LANE#000001"},
		}})
		if err != nil {
			t.Fatal(err)
		}
		if len(execs) == 1 && execs[0].Status == sfntypes.ExecutionStatusSucceeded && len(lease.Item) == 0 {
			break
		}
		if len(execs) > 1 || len(execs) == 1 && execs[0].Status == sfntypes.ExecutionStatusFailed {
			t.Fatalf("executions %s: want one, SUCCEEDED (a failed release failed the job's execution)", summary(execs))
		}
		if time.Now().After(deadline) {
			t.Fatalf("executions %s, lease %v: want one SUCCEEDED execution and its lease released", summary(execs), lease.Item)
		}
		time.Sleep(time.Second)
	}
	hist, err := c.SFN.GetExecutionHistory(ctx, &sfn.GetExecutionHistoryInput{ExecutionArn: execs[0].ExecutionArn, MaxResults: 1000})
	if err != nil {
		t.Fatal(err)
	}
	caught := false
	for _, e := range hist.Events {
		if e.StateEnteredEventDetails != nil && aws.ToString(e.StateEnteredEventDetails.Name) == "DoneReleasePending" {
			caught = true
		}
	}
	if !caught {
		t.Error("the execution did not end through the Release step's Catch (DoneReleasePending): the fault did not reach it")
	}
	for name, url := range map[string]string{"lanes": s.Info().Output("LanesQueueUrl"), "dead-letter": s.Info().Output("DeadLetterQueueUrl")} {
		out, err := c.SQS.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: &url, AttributeNames: []sqstypes.QueueAttributeName{"All"}})
		if err != nil {
			t.Fatal(err)
		}
		if v, nv := out.Attributes["ApproximateNumberOfMessages"], out.Attributes["ApproximateNumberOfMessagesNotVisible"]; v != "0" || nv != "0" {
			t.Errorf("%s queue holds %s visible and %s in flight, want none (released as a success)", name, v, nv)
		}
	}
}

func summary(execs []sfntypes.ExecutionListItem) string {
	var parts []string
	for _, e := range execs {
		parts = append(parts, aws.ToString(e.Name)+" "+string(e.Status))
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// A job of a type that runs the bare workflow (no release state) is released by its execution's
// SUCCEEDED status event: the local bus delivers the event the template's Succeeded rule matches to
// the releaser, which frees the lane, and the type's next job starts in it. The sweep never runs,
// so no other path frees the lane; the starter may start the bare workflow under its template role.
func TestBareWorkflowIsReleasedByItsSucceededEvent(t *testing.T) {
	ctx := t.Context()
	s, err := Start(ctx, Options{
		Parameters:  map[string]string{"TypeLimits": "b=1"},
		FunctionEnv: map[string]string{"CONFIG_CACHE_SECONDS": "0"},
		SweepEvery:  time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	c := s.Clients()
	bare, table := s.Info().Output("BareStateMachineArn"), s.Info().Output("TableName")
	if bare == "" {
		t.Fatalf("no BareStateMachineArn output: %v", s.Info().Outputs)
	}
	if err := config.NewDynamoStore(c.DDB, table).SetOverride(ctx, config.Override{Type: "b", StateMachineArn: bare, Release: config.ReleaseEvents}); err != nil {
		t.Fatal(err)
	}
	if err := s.StartRuntime(ctx); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"ok-1", "ok-2"} {
		if _, err := c.SQS.SendMessage(ctx, &sqs.SendMessageInput{
			QueueUrl: aws.String(s.Info().Output("GeneralQueueUrl")), MessageBody: aws.String(`{"type":"b","id":"` + id + `","input":{"seconds":1}}`),
		}); err != nil {
			t.Fatal(err)
		}
	}
	// A bound for a stack that stopped releasing, not a figure: a passing run takes seconds.
	deadline := time.Now().Add(2 * time.Minute)
	var execs []sfntypes.ExecutionListItem
	for {
		out, err := c.SFN.ListExecutions(ctx, &sfn.ListExecutionsInput{StateMachineArn: &bare})
		if err != nil {
			t.Fatal(err)
		}
		execs = out.Executions
		lease, err := c.DDB.GetItem(ctx, &dynamodb.GetItemInput{TableName: &table, ConsistentRead: aws.Bool(true), Key: map[string]ddbtypes.AttributeValue{
			"pk": &ddbtypes.AttributeValueMemberS{Value: "LEASE#b"}, "sk": &ddbtypes.AttributeValueMemberS{Value: "LANE#000001"},
		}})
		if err != nil {
			t.Fatal(err)
		}
		done := len(execs) == 2 && len(lease.Item) == 0
		for _, e := range execs {
			done = done && e.Status == sfntypes.ExecutionStatusSucceeded
		}
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("bare executions %s, lane 1 leased: %v; want both jobs SUCCEEDED, one after the other, and the lane released", summary(execs), len(lease.Item) > 0)
		}
		time.Sleep(500 * time.Millisecond)
	}
	// Limit 1: the second job started only once the first one's event had released the lane.
	first, second := execs[1], execs[0] // newest first
	d1, err := c.SFN.DescribeExecution(ctx, &sfn.DescribeExecutionInput{ExecutionArn: first.ExecutionArn})
	if err != nil {
		t.Fatal(err)
	}
	if second.StartDate.Before(*d1.StopDate) {
		t.Errorf("second execution started at %v, before the first stopped at %v: the limit of 1 was exceeded", second.StartDate, d1.StopDate)
	}
	rt := s.Runtime()
	// The bus counts an event, and the runtime an invocation, once the releaser has returned: the
	// lease it deleted can be seen a moment before. Wait for the counts to settle (a bound for a
	// stack that stopped, not a figure).
	for settle := time.Now().Add(30 * time.Second); time.Now().Before(settle); time.Sleep(100 * time.Millisecond) {
		n, _, _ := rt.Invokes["releaser"].Snapshot()
		if rt.Status.Stats().Delivered >= 2 && n >= 2 {
			break
		}
	}
	if st := rt.Status.Stats(); st.Delivered != 2 || st.Dropped != 0 {
		t.Errorf("status events %+v, want the 2 SUCCEEDED events delivered", st)
	}
	if n, fails, _ := rt.Invokes["releaser"].Snapshot(); n != 2 || fails != 0 {
		t.Errorf("releaser invoked %d times (%d failed), want twice, once per event (the bare workflow calls nothing)", n, fails)
	}
	if out, err := c.SFN.ListExecutions(ctx, &sfn.ListExecutionsInput{StateMachineArn: aws.String(s.Info().Output("SampleStateMachineArn"))}); err != nil || len(out.Executions) != 0 {
		t.Errorf("sample executions %v (%v), want none: the type runs the bare workflow", out, err)
	}
	for name, url := range map[string]string{"lanes": s.Info().Output("LanesQueueUrl"), "dead-letter": s.Info().Output("DeadLetterQueueUrl")} {
		out, err := c.SQS.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: &url, AttributeNames: []sqstypes.QueueAttributeName{"All"}})
		if err != nil {
			t.Fatal(err)
		}
		if v, nv := out.Attributes["ApproximateNumberOfMessages"], out.Attributes["ApproximateNumberOfMessagesNotVisible"]; v != "0" || nv != "0" {
			t.Errorf("%s queue holds %s visible and %s in flight, want none (both released as successes)", name, v, nv)
		}
	}
}
