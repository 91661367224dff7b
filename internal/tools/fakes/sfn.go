package fakes

import (
	"context"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"

	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
)

// Execution is one execution the fake Step Functions knows.
type Execution struct {
	Arn             string
	StateMachineArn string
	Name            string
	Status          sfntypes.ExecutionStatus
	Input           string
	Error           string
	Cause           string
	StartDate       time.Time
	// StopDate is when a closed execution stopped; zero leaves it out of DescribeExecution.
	StopDate time.Time
	// StartedWith is the ARN StartExecution was given when it named a version or alias; a
	// ListExecutions of that version or alias lists the execution (StateMachineArn stays the
	// state machine's own, as AWS reports it).
	StartedWith string
}

// StartCall is one StartExecution call.
type StartCall struct {
	StateMachineArn string
	Name            string
	Input           string
	Err             error
}

// SFN is an in-memory Step Functions with the name idempotency of Standard workflows: starting a name
// that is RUNNING with the same input returns its ARN; a closed execution or a different input gives
// *types.ExecutionAlreadyExists. Executions do not run: tests set their status.
type SFN struct {
	// OnStart runs before a start; a non-nil error is returned and nothing is started
	// (ThrottlingException, *types.StateMachineDoesNotExist, ...).
	OnStart func(in *sfn.StartExecutionInput) error
	// AfterStart runs after a start created (or found) its execution; a non-nil error is returned
	// although the execution exists: a start whose answer was lost.
	AfterStart func(in *sfn.StartExecutionInput, arn string) error
	// OnDescribe runs before a describe; a non-nil error is returned.
	OnDescribe func(arn string) error
	// OnList runs before a ListExecutions page; a non-nil error is returned.
	OnList func(in *sfn.ListExecutionsInput) error
	// OnStop runs before a StopExecution; a non-nil error is returned and nothing is stopped.
	OnStop func(in *sfn.StopExecutionInput) error
	// Now dates new executions (time.Now when nil).
	Now func() time.Time

	mu        sync.Mutex
	execs     map[string]Execution
	starts    []StartCall
	stops     []sfn.StopExecutionInput
	describes []string
	lists     int
}

// NewSFN returns a Step Functions with no executions.
func NewSFN(now func() time.Time) *SFN {
	return &SFN{Now: now, execs: map[string]Execution{}}
}

// ExecutionArn is the ARN of the execution name of the state machine stateMachineArn.
//
// As on AWS, an execution started through a version or alias ARN (...:stateMachine:NAME:3 or
// ...:stateMachine:NAME:prod) is named under the state machine itself, without the qualifier.
func ExecutionArn(stateMachineArn, name string) string {
	return strings.Replace(job.UnqualifiedStateMachine(stateMachineArn), ":stateMachine:", ":execution:", 1) + ":" + name
}

func (f *SFN) now() time.Time {
	if f.Now != nil {
		return f.Now().UTC()
	}
	return time.Now().UTC()
}

// StartExecution starts (records) an execution under its name.
func (f *SFN) StartExecution(_ context.Context, in *sfn.StartExecutionInput, _ ...func(*sfn.Options)) (*sfn.StartExecutionOutput, error) {
	call := StartCall{StateMachineArn: aws.ToString(in.StateMachineArn), Name: aws.ToString(in.Name), Input: aws.ToString(in.Input)}
	record := func(err error) {
		f.mu.Lock()
		call.Err = err
		f.starts = append(f.starts, call)
		f.mu.Unlock()
	}
	if f.OnStart != nil {
		if err := f.OnStart(in); err != nil {
			record(err)
			return nil, err
		}
	}
	arn := ExecutionArn(call.StateMachineArn, call.Name)
	f.mu.Lock()
	e, exists := f.execs[arn]
	switch {
	case exists && (e.Status != sfntypes.ExecutionStatusRunning || e.Input != call.Input):
		f.mu.Unlock()
		err := &sfntypes.ExecutionAlreadyExists{Message: aws.String("Execution Already Exists: '" + arn + "'")}
		record(err)
		return nil, err
	case !exists:
		e = Execution{Arn: arn, StateMachineArn: job.UnqualifiedStateMachine(call.StateMachineArn), StartedWith: call.StateMachineArn,
			Name: call.Name, Status: sfntypes.ExecutionStatusRunning, Input: call.Input, StartDate: f.now()}
		f.execs[arn] = e
	}
	f.mu.Unlock()
	if f.AfterStart != nil {
		if err := f.AfterStart(in, arn); err != nil {
			record(err)
			return nil, err
		}
	}
	record(nil)
	return &sfn.StartExecutionOutput{ExecutionArn: aws.String(arn), StartDate: aws.Time(e.StartDate)}, nil
}

// DescribeExecution returns what is known of an execution, or *types.ExecutionDoesNotExist.
func (f *SFN) DescribeExecution(_ context.Context, in *sfn.DescribeExecutionInput, _ ...func(*sfn.Options)) (*sfn.DescribeExecutionOutput, error) {
	arn := aws.ToString(in.ExecutionArn)
	f.mu.Lock()
	f.describes = append(f.describes, arn)
	f.mu.Unlock()
	if f.OnDescribe != nil {
		if err := f.OnDescribe(arn); err != nil {
			return nil, err
		}
	}
	f.mu.Lock()
	e, ok := f.execs[arn]
	f.mu.Unlock()
	if !ok {
		return nil, &sfntypes.ExecutionDoesNotExist{Message: aws.String("Execution Does Not Exist: '" + arn + "'")}
	}
	out := &sfn.DescribeExecutionOutput{
		ExecutionArn: aws.String(e.Arn), StateMachineArn: aws.String(e.StateMachineArn), Name: aws.String(e.Name),
		Status: e.Status, StartDate: aws.Time(e.StartDate), Input: aws.String(e.Input),
		InputDetails: &sfntypes.CloudWatchEventsExecutionDataDetails{Included: true},
	}
	if !e.StopDate.IsZero() {
		out.StopDate = aws.Time(e.StopDate)
	}
	if e.Error != "" {
		out.Error = aws.String(e.Error)
	}
	if e.Cause != "" {
		out.Cause = aws.String(e.Cause)
	}
	return out, nil
}

// StopExecution ends a RUNNING execution ABORTED with the call's error and cause. As on AWS, an
// unknown ARN is *types.ExecutionDoesNotExist, and a stop of an execution already closed changes
// nothing.
func (f *SFN) StopExecution(_ context.Context, in *sfn.StopExecutionInput, _ ...func(*sfn.Options)) (*sfn.StopExecutionOutput, error) {
	f.mu.Lock()
	f.stops = append(f.stops, *in)
	f.mu.Unlock()
	if f.OnStop != nil {
		if err := f.OnStop(in); err != nil {
			return nil, err
		}
	}
	arn := aws.ToString(in.ExecutionArn)
	f.mu.Lock()
	defer f.mu.Unlock()
	e, ok := f.execs[arn]
	if !ok {
		return nil, &sfntypes.ExecutionDoesNotExist{Message: aws.String("Execution Does Not Exist: '" + arn + "'")}
	}
	if e.Status == sfntypes.ExecutionStatusRunning {
		e.Status, e.Error, e.Cause, e.StopDate = sfntypes.ExecutionStatusAborted, aws.ToString(in.Error), aws.ToString(in.Cause), f.now()
		f.execs[arn] = e
	}
	stop := e.StopDate
	if stop.IsZero() {
		stop = f.now()
	}
	return &sfn.StopExecutionOutput{StopDate: aws.Time(stop)}, nil
}

// Stops returns the StopExecution calls made so far.
func (f *SFN) Stops() []sfn.StopExecutionInput {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]sfn.StopExecutionInput(nil), f.stops...)
}

// Put adds or replaces an execution; an empty Arn is derived from StateMachineArn and Name.
func (f *SFN) Put(e Execution) Execution {
	if e.Arn == "" {
		e.Arn = ExecutionArn(e.StateMachineArn, e.Name)
	}
	if q := e.StateMachineArn; job.UnqualifiedStateMachine(q) != q {
		e.StateMachineArn, e.StartedWith = job.UnqualifiedStateMachine(q), q
	}
	if e.Status == "" {
		e.Status = sfntypes.ExecutionStatusRunning
	}
	if e.StartDate.IsZero() {
		e.StartDate = f.now()
	}
	f.mu.Lock()
	f.execs[e.Arn] = e
	f.mu.Unlock()
	return e
}

// Close ends a known execution with status, error and cause; ok is false for an unknown ARN.
func (f *SFN) Close(arn string, status sfntypes.ExecutionStatus, errName, cause string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	e, ok := f.execs[arn]
	if !ok {
		return false
	}
	e.Status, e.Error, e.Cause = status, errName, cause
	f.execs[arn] = e
	return true
}

// Execution returns a known execution.
func (f *SFN) Execution(arn string) (Execution, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	e, ok := f.execs[arn]
	return e, ok
}

// Executions returns every known execution, ordered by ARN.
func (f *SFN) Executions() []Execution {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]Execution, 0, len(f.execs))
	for _, e := range f.execs {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Arn < out[j].Arn })
	return out
}

// Starts returns every StartExecution call in order, failed ones included.
func (f *SFN) Starts() []StartCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]StartCall(nil), f.starts...)
}

// Describes returns the ARN of every DescribeExecution call in order.
func (f *SFN) Describes() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.describes...)
}

// ListExecutions lists a state machine's executions, newest first, filtered by status, in pages of
// MaxResults (100 by default, as Step Functions).
func (f *SFN) ListExecutions(_ context.Context, in *sfn.ListExecutionsInput, _ ...func(*sfn.Options)) (*sfn.ListExecutionsOutput, error) {
	f.mu.Lock()
	f.lists++
	f.mu.Unlock()
	if f.OnList != nil {
		if err := f.OnList(in); err != nil {
			return nil, err
		}
	}
	f.mu.Lock()
	var all []Execution
	for _, e := range f.execs {
		// A state machine's ARN lists all its executions; a version's or alias's, those started
		// through it.
		of := aws.ToString(in.StateMachineArn)
		if (e.StateMachineArn == of || (e.StartedWith != "" && e.StartedWith == of)) && (in.StatusFilter == "" || e.Status == in.StatusFilter) {
			all = append(all, e)
		}
	}
	f.mu.Unlock()
	sort.Slice(all, func(i, j int) bool {
		if !all[i].StartDate.Equal(all[j].StartDate) {
			return all[i].StartDate.After(all[j].StartDate)
		}
		return all[i].Arn < all[j].Arn
	})
	size := int(in.MaxResults)
	if size <= 0 {
		size = 100
	}
	from := 0
	if in.NextToken != nil {
		n, err := strconv.Atoi(*in.NextToken)
		if err != nil {
			return nil, &sfntypes.InvalidToken{Message: aws.String("bad token")}
		}
		from = n
	}
	to := min(from+size, len(all))
	out := &sfn.ListExecutionsOutput{}
	for _, e := range all[from:to] {
		out.Executions = append(out.Executions, sfntypes.ExecutionListItem{
			ExecutionArn: aws.String(e.Arn), StateMachineArn: aws.String(e.StateMachineArn), Name: aws.String(e.Name),
			Status: e.Status, StartDate: aws.Time(e.StartDate),
		})
	}
	if to < len(all) {
		out.NextToken = aws.String(strconv.Itoa(to))
	}
	return out, nil
}

// Lists returns how many ListExecutions pages were asked for.
func (f *SFN) Lists() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lists
}
