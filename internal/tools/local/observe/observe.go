// Package observe measures what the limiter did from Step Functions' own records, independently of
// the limiter's bookkeeping: each execution's work interval (from its start to the moment it entered
// a release state, or to its stop when it never got there) and the highest number of work intervals
// of a type that overlapped at any instant.
package observe

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"
	"github.com/aws/smithy-go"

	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
)

type sfnAPI interface {
	ListExecutions(context.Context, *sfn.ListExecutionsInput, ...func(*sfn.Options)) (*sfn.ListExecutionsOutput, error)
	DescribeExecution(context.Context, *sfn.DescribeExecutionInput, ...func(*sfn.Options)) (*sfn.DescribeExecutionOutput, error)
	GetExecutionHistory(context.Context, *sfn.GetExecutionHistoryInput, ...func(*sfn.Options)) (*sfn.GetExecutionHistoryOutput, error)
}

// ReleaseStates are the states that end a job's work in the sample workflow.
var ReleaseStates = map[string]bool{"Release": true, "ReleaseFailed": true}

// Execution is one execution as Step Functions recorded it.
type Execution struct {
	Arn, Name string
	Job       job.Meta
	Status    string
	Start     time.Time
	// WorkEnd is when the execution entered a release state, or its stop date when it never did;
	// zero while it still works.
	WorkEnd time.Time
	Stop    time.Time
	// Error and Cause are what the execution failed or was stopped with ("" when none): a stop by
	// the overflow rule cancel gives job.ErrorCancelled and a cause naming the newer job.
	Error, Cause string
	// Transitions counts the states the execution entered (what Step Functions bills for);
	// ReleaseTransitions counts those that were release states (the limiter's own overhead).
	Transitions, ReleaseTransitions int
}

// Collect lists every execution of the state machines and reads when each entered its release state.
func Collect(ctx context.Context, c sfnAPI, stateMachineArns []string) ([]Execution, error) {
	var arns []sfntypes.ExecutionListItem
	for _, sm := range stateMachineArns {
		p := sfn.NewListExecutionsPaginator(c, &sfn.ListExecutionsInput{StateMachineArn: aws.String(sm)})
		for p.HasMorePages() {
			page, err := p.NextPage(ctx)
			if err != nil {
				return nil, fmt.Errorf("list executions of %s: %w", sm, err)
			}
			arns = append(arns, page.Executions...)
		}
	}
	out := make([]Execution, len(arns))
	errs := make([]error, len(arns))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i, e := range arns {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			out[i], errs[i] = describeAgainIfCutShort(ctx, c, e)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Start.Before(out[j].Start) })
	return out, nil
}

// cutShortTries bounds the reads of one execution whose answer cannot be decoded.
const cutShortTries = 4

// describeAgainIfCutShort is describe, read again when an answer cannot be decoded (a body cut
// short: moto did so once under an end-to-end run's load). The SDK retries throttles and broken
// connections, not a reply it could not decode. Any other error is returned at once.
func describeAgainIfCutShort(ctx context.Context, c sfnAPI, e sfntypes.ExecutionListItem) (Execution, error) {
	for try := 1; ; try++ {
		x, err := describe(ctx, c, e)
		var cut *smithy.DeserializationError
		if err == nil || !errors.As(err, &cut) || try == cutShortTries {
			return x, err
		}
		select {
		case <-ctx.Done():
			return x, err
		case <-time.After(time.Duration(try) * 100 * time.Millisecond):
		}
	}
}

func describe(ctx context.Context, c sfnAPI, e sfntypes.ExecutionListItem) (Execution, error) {
	arn := aws.ToString(e.ExecutionArn)
	d, err := c.DescribeExecution(ctx, &sfn.DescribeExecutionInput{ExecutionArn: &arn})
	if err != nil {
		return Execution{}, fmt.Errorf("describe %s: %w", arn, err)
	}
	x := Execution{Arn: arn, Name: aws.ToString(d.Name), Status: string(d.Status), Start: aws.ToTime(d.StartDate), Stop: aws.ToTime(d.StopDate),
		Error: aws.ToString(d.Error), Cause: aws.ToString(d.Cause)}
	var in job.ExecutionInput
	_ = json.Unmarshal([]byte(aws.ToString(d.Input)), &in)
	x.Job = in.Job
	p := sfn.NewGetExecutionHistoryPaginator(c, &sfn.GetExecutionHistoryInput{ExecutionArn: &arn})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return Execution{}, fmt.Errorf("history of %s: %w", arn, err)
		}
		for _, ev := range page.Events {
			if closing[ev.Type] && x.Stop.IsZero() {
				// moto 5.2.1 gives a TIMED_OUT execution no stop date; its closing event has the time.
				x.Stop = aws.ToTime(ev.Timestamp)
			}
			if ev.StateEnteredEventDetails == nil {
				continue
			}
			x.Transitions++
			if ReleaseStates[aws.ToString(ev.StateEnteredEventDetails.Name)] {
				x.ReleaseTransitions++
				if x.WorkEnd.IsZero() {
					x.WorkEnd = aws.ToTime(ev.Timestamp)
				}
			}
		}
	}
	if x.WorkEnd.IsZero() && !x.Stop.IsZero() {
		x.WorkEnd = x.Stop
	}
	return x, nil
}

// closing are the history events that end an execution.
var closing = map[sfntypes.HistoryEventType]bool{
	sfntypes.HistoryEventTypeExecutionSucceeded: true,
	sfntypes.HistoryEventTypeExecutionFailed:    true,
	sfntypes.HistoryEventTypeExecutionAborted:   true,
	sfntypes.HistoryEventTypeExecutionTimedOut:  true,
}

// Peak is the highest overlap of one type's work intervals.
type Peak struct {
	Type string
	Max  int
	At   time.Time
}

// Peaks returns, per type, the most executions working at the same instant. An interval is
// [Start, WorkEnd); one still working counts until now.
func Peaks(xs []Execution, now time.Time) map[string]Peak {
	return PeaksBy(xs, now, func(x Execution) string { return x.Job.Type })
}

// TypeKey names an execution's type and concurrency key, "type#key" ("type#" for the default key):
// with PeaksBy, the most jobs of each key that worked at once, from the key in the execution input.
func TypeKey(x Execution) string { return x.Job.Type + "#" + x.Job.Key }

// PeaksBy is Peaks over the groups that group puts the executions in, such as TypeKey; each Peak's
// Type is its group's name.
func PeaksBy(xs []Execution, now time.Time, group func(Execution) string) map[string]Peak {
	type edge struct {
		t time.Time
		d int
	}
	byType := map[string][]edge{}
	for _, x := range xs {
		end := x.WorkEnd
		if end.IsZero() {
			end = now
		}
		g := group(x)
		byType[g] = append(byType[g], edge{x.Start, +1}, edge{end, -1})
	}
	out := map[string]Peak{}
	for typ, es := range byType {
		// Ends sort before starts at the same instant: a lane handed over is not an overlap.
		sort.Slice(es, func(i, j int) bool {
			if es[i].t.Equal(es[j].t) {
				return es[i].d < es[j].d
			}
			return es[i].t.Before(es[j].t)
		})
		cur, p := 0, Peak{Type: typ}
		for _, e := range es {
			cur += e.d
			if cur > p.Max {
				p.Max, p.At = cur, e.t
			}
		}
		out[typ] = p
	}
	return out
}

// Series samples, per type, how many executions were working at each step from start to end.
func Series(xs []Execution, start, end time.Time, step time.Duration) (times []time.Time, counts map[string][]int) {
	counts = map[string][]int{}
	if step <= 0 {
		return nil, counts
	}
	for t := start; !t.After(end); t = t.Add(step) {
		times = append(times, t)
	}
	for _, x := range xs {
		if _, ok := counts[x.Job.Type]; !ok {
			counts[x.Job.Type] = make([]int, len(times))
		}
		we := x.WorkEnd
		if we.IsZero() {
			we = end
		}
		for i, t := range times {
			if !t.Before(x.Start) && t.Before(we) {
				counts[x.Job.Type][i]++
			}
		}
	}
	return times, counts
}
