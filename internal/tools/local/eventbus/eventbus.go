// Package eventbus plays EventBridge's part in the local stack: it delivers "Step Functions Execution
// Status Change" events for executions that ended FAILED, TIMED_OUT or ABORTED (the emulator emits
// none) and fires the releaser's schedule. Like EventBridge, delivery is at least once and, when
// DropRate is set, best effort: some events are never delivered, which the sweep must make up for.
package eventbus

import (
	"context"
	"encoding/json"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"
)

type sfnAPI interface {
	ListExecutions(context.Context, *sfn.ListExecutionsInput, ...func(*sfn.Options)) (*sfn.ListExecutionsOutput, error)
	DescribeExecution(context.Context, *sfn.DescribeExecutionInput, ...func(*sfn.Options)) (*sfn.DescribeExecutionOutput, error)
}

// Target receives an event, as a Lambda function would.
type Target func(ctx context.Context, event json.RawMessage) error

// StatusEvents watches state machines and delivers status-change events for failed executions.
type StatusEvents struct {
	SFN              sfnAPI
	StateMachineArns []string
	Region, Account  string
	Every            time.Duration
	// DropRate is the share of events never delivered (0..1), to exercise the sweep.
	DropRate float64
	Target   Target
	Log      *slog.Logger

	mu        sync.Mutex
	seen      map[string]bool
	delivered int
	dropped   int
}

// Counts returns how many events were delivered and dropped.
func (s *StatusEvents) Counts() (delivered, dropped int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.delivered, s.dropped
}

// Run delivers events until ctx is cancelled.
func (s *StatusEvents) Run(ctx context.Context) {
	s.mu.Lock()
	if s.seen == nil {
		s.seen = map[string]bool{}
	}
	s.mu.Unlock()
	t := time.NewTicker(s.Every)
	defer t.Stop()
	for {
		s.poll(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *StatusEvents) poll(ctx context.Context) {
	for _, sm := range s.StateMachineArns {
		for _, st := range []sfntypes.ExecutionStatus{sfntypes.ExecutionStatusFailed, sfntypes.ExecutionStatusTimedOut, sfntypes.ExecutionStatusAborted} {
			p := sfn.NewListExecutionsPaginator(s.SFN, &sfn.ListExecutionsInput{StateMachineArn: aws.String(sm), StatusFilter: st})
			for p.HasMorePages() {
				page, err := p.NextPage(ctx)
				if err != nil {
					if ctx.Err() != nil {
						return
					}
					// One state machine that cannot be listed must not stop events of the others.
					s.Log.Warn("list executions failed", "stateMachineArn", sm, "error", err)
					break
				}
				for _, e := range page.Executions {
					s.deliver(ctx, sm, aws.ToString(e.ExecutionArn))
				}
			}
		}
	}
}

func (s *StatusEvents) deliver(ctx context.Context, sm, arn string) {
	s.mu.Lock()
	done := s.seen[arn]
	s.mu.Unlock()
	if done {
		return
	}
	if s.DropRate > 0 && rand.Float64() < s.DropRate {
		s.mu.Lock()
		s.seen[arn], s.dropped = true, s.dropped+1
		s.mu.Unlock()
		return
	}
	d, err := s.SFN.DescribeExecution(ctx, &sfn.DescribeExecutionInput{ExecutionArn: &arn})
	if err != nil {
		s.Log.Warn("describe execution failed; event delivery retried", "executionArn", arn, "error", err)
		return
	}
	ev := StatusChangeEvent(d, sm, s.Region, s.Account)
	if err := s.Target(ctx, ev); err != nil {
		s.Log.Warn("target failed; event delivery retried", "executionArn", arn, "error", err)
		return
	}
	s.mu.Lock()
	s.seen[arn], s.delivered = true, s.delivered+1
	s.mu.Unlock()
}

// StatusChangeEvent builds the event EventBridge sends for a closed execution.
func StatusChangeEvent(d *sfn.DescribeExecutionOutput, stateMachineArn, region, account string) json.RawMessage {
	ms := func(t *time.Time) any {
		if t == nil {
			return nil
		}
		return t.UnixMilli()
	}
	ev := map[string]any{
		"version":     "0",
		"id":          aws.ToString(d.ExecutionArn),
		"detail-type": "Step Functions Execution Status Change",
		"source":      "aws.states",
		"account":     account,
		"time":        time.Now().UTC().Format(time.RFC3339),
		"region":      region,
		"resources":   []string{aws.ToString(d.ExecutionArn)},
		"detail": map[string]any{
			"executionArn":    aws.ToString(d.ExecutionArn),
			"stateMachineArn": stateMachineArn,
			"name":            aws.ToString(d.Name),
			"status":          string(d.Status),
			"startDate":       ms(d.StartDate),
			"stopDate":        ms(d.StopDate),
			"input":           d.Input,
			"output":          d.Output,
			"inputDetails":    map[string]bool{"included": true},
			"error":           d.Error,
			"cause":           d.Cause,
		},
	}
	b, _ := json.Marshal(ev)
	return b
}

// Schedule fires a "Scheduled Event" at a fixed rate, like an EventBridge schedule rule.
type Schedule struct {
	Every           time.Duration
	Region, Account string
	Target          Target
	Log             *slog.Logger
}

// Run fires until ctx is cancelled.
func (s *Schedule) Run(ctx context.Context) {
	t := time.NewTicker(s.Every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ev, _ := json.Marshal(map[string]any{
			"version": "0", "id": time.Now().Format(time.RFC3339Nano), "detail-type": "Scheduled Event",
			"source": "aws.events", "account": s.Account, "time": time.Now().UTC().Format(time.RFC3339),
			"region": s.Region, "resources": []string{}, "detail": map[string]any{},
		})
		if err := s.Target(ctx, ev); err != nil && ctx.Err() == nil {
			s.Log.Warn("scheduled target failed", "error", err)
		}
	}
}
