package gateway

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"
)

// A stopped execution keeps the error and cause its StopExecution gave, as Step Functions keeps them:
// DescribeExecution returns them (moto 5.2.1 drops both). A stop of an execution already closed
// changes nothing, and another execution's description is left as moto gives it.
func TestStopExecutionKeepsErrorAndCause(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	ctx := context.Background()
	sm := s.createStateMachine(t, "stops", `{"StartAt":"W","States":{"W":{"Type":"Wait","Seconds":60,"End":true}}}`)
	quick := s.createStateMachine(t, "quick", `{"StartAt":"P","States":{"P":{"Type":"Pass","End":true}}}`)

	stopped := s.start(t, sm, "stopped", `{}`)
	bare := s.start(t, sm, "bare", `{}`)
	done := s.start(t, quick, "done", `{}`)
	if d := s.wait(t, done); d.Status != sfntypes.ExecutionStatusSucceeded {
		t.Fatalf("quick execution = %s, want SUCCEEDED", d.Status)
	}
	time.Sleep(200 * time.Millisecond) // let the Wait state begin
	for _, c := range []struct{ arn, err, cause string }{
		{stopped, "sfnlimit.Cancelled", "superseded by job j2"},
		{bare, "", ""},
		{done, "late.Error", "too late"},
	} {
		in := &sfn.StopExecutionInput{ExecutionArn: aws.String(c.arn)}
		if c.err != "" {
			in.Error, in.Cause = aws.String(c.err), aws.String(c.cause)
		}
		if _, err := s.sfn.StopExecution(ctx, in); err != nil {
			t.Fatalf("StopExecution(%s) = %v", c.arn, err)
		}
	}
	for _, c := range []struct {
		arn        string
		status     sfntypes.ExecutionStatus
		err, cause string
	}{
		{stopped, sfntypes.ExecutionStatusAborted, "sfnlimit.Cancelled", "superseded by job j2"},
		{bare, sfntypes.ExecutionStatusAborted, "", ""},
		{done, sfntypes.ExecutionStatusSucceeded, "", ""},
	} {
		d := s.wait(t, c.arn)
		if d.Status != c.status || aws.ToString(d.Error) != c.err || aws.ToString(d.Cause) != c.cause {
			t.Errorf("DescribeExecution(%s) = %s error %q cause %q, want %s error %q cause %q", c.arn,
				d.Status, aws.ToString(d.Error), aws.ToString(d.Cause), c.status, c.err, c.cause)
		}
	}
}

// An execution an operator stopped without an error or cause stays so: a later stop of the closed
// execution (the overflow rule cancel's, with its error) changes nothing, as in Step Functions, so
// that the release still tells the operator's stop (dead-lettered) from the rule's (cancelled).
func TestStopExecutionOfAStoppedExecutionChangesNothing(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	ctx := context.Background()
	sm := s.createStateMachine(t, "stops", `{"StartAt":"W","States":{"W":{"Type":"Wait","Seconds":60,"End":true}}}`)
	arn := s.start(t, sm, "operator", `{}`)
	time.Sleep(200 * time.Millisecond) // let the Wait state begin
	if _, err := s.sfn.StopExecution(ctx, &sfn.StopExecutionInput{ExecutionArn: aws.String(arn)}); err != nil {
		t.Fatalf("operator's StopExecution = %v", err)
	}
	if d := s.wait(t, arn); d.Status != sfntypes.ExecutionStatusAborted {
		t.Fatalf("after the operator's stop: %s, want ABORTED", d.Status)
	}
	late := &sfn.StopExecutionInput{ExecutionArn: aws.String(arn), Error: aws.String("sfnlimit.Cancelled"), Cause: aws.String("superseded by job j2")}
	if _, err := s.sfn.StopExecution(ctx, late); err != nil {
		t.Fatalf("late StopExecution = %v", err)
	}
	if d := s.wait(t, arn); d.Status != sfntypes.ExecutionStatusAborted || aws.ToString(d.Error) != "" || aws.ToString(d.Cause) != "" {
		t.Errorf("DescribeExecution = %s error %q cause %q, want ABORTED with the operator's empty error and cause", d.Status, aws.ToString(d.Error), aws.ToString(d.Cause))
	}
}
