// Package eventbus plays EventBridge's part in the local stack: it delivers "Step Functions Execution
// Status Change" events (the emulator emits none) for exactly the executions the template's rules
// match, and fires the releaser's schedule. Like EventBridge, delivery is at least once and best
// effort: with DropRate some events are never delivered, which the sweep must make up for, and with
// DupRate some are delivered twice, the second time late.
package eventbus

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sort"
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

// Status-change events as EventBridge names them.
const (
	statusSource     = "aws.states"
	statusDetailType = "Step Functions Execution Status Change"
)

// closedStatuses are the statuses the bus can send events for: an execution that has closed is
// listed with its status for good (ListExecutions' status filter), so the bus finds it by polling.
var closedStatuses = []sfntypes.ExecutionStatus{
	sfntypes.ExecutionStatusSucceeded, sfntypes.ExecutionStatusFailed,
	sfntypes.ExecutionStatusTimedOut, sfntypes.ExecutionStatusAborted,
}

// Rule is what the bus plays of one EventBridge rule: the status-change events of the listed state
// machines' executions that closed with one of the listed statuses.
type Rule struct {
	Name             string
	StateMachineArns []string
	Statuses         []sfntypes.ExecutionStatus
}

// StatusRule reads a rule's resolved event pattern (cfntemplate.EventRule.Pattern). ok is false
// for a pattern that matches no Step Functions status change (the bus sends no other events). A
// status-change pattern the bus cannot play exactly is an error, so that the local stack never
// delivers other events than EventBridge would: it must list detail.status (closed statuses) and
// detail.stateMachineArn as exact values, and match on nothing else.
func StatusRule(name string, pattern json.RawMessage) (rule Rule, ok bool, err error) {
	var p map[string]any
	if err := json.Unmarshal(pattern, &p); err != nil {
		return Rule{}, false, fmt.Errorf("rule %s: pattern is not a JSON object: %w", name, err)
	}
	for _, f := range []struct{ field, value string }{{"source", statusSource}, {"detail-type", statusDetailType}} {
		values, err := exactValues(p, f.field)
		if err != nil {
			return Rule{}, false, fmt.Errorf("rule %s: %w", name, err)
		}
		if !slices.Contains(values, f.value) {
			return Rule{}, false, nil
		}
	}
	for k := range p {
		if k != "source" && k != "detail-type" && k != "detail" {
			return Rule{}, false, fmt.Errorf("rule %s matches on %s: the local bus plays only source, detail-type, detail.status and detail.stateMachineArn", name, k)
		}
	}
	detail, isMap := p["detail"].(map[string]any)
	if !isMap {
		return Rule{}, false, fmt.Errorf("rule %s has no detail object: it would match every status change, RUNNING included, which the local bus does not play", name)
	}
	for k := range detail {
		if k != "status" && k != "stateMachineArn" {
			return Rule{}, false, fmt.Errorf("rule %s matches on detail.%s: the local bus plays only detail.status and detail.stateMachineArn", name, k)
		}
	}
	statuses, err := exactValues(detail, "status")
	if err != nil {
		return Rule{}, false, fmt.Errorf("rule %s: detail.%w", name, err)
	}
	arns, err := exactValues(detail, "stateMachineArn")
	if err != nil {
		return Rule{}, false, fmt.Errorf("rule %s: detail.%w", name, err)
	}
	rule = Rule{Name: name, StateMachineArns: arns}
	for _, st := range statuses {
		if !slices.Contains(closedStatuses, sfntypes.ExecutionStatus(st)) {
			return Rule{}, false, fmt.Errorf("rule %s matches status %s: the local bus sends events of closed executions only (%v)", name, st, closedStatuses)
		}
		rule.Statuses = append(rule.Statuses, sfntypes.ExecutionStatus(st))
	}
	return rule, true, nil
}

// exactValues reads a pattern field that lists exact string values, sorted and without repeats.
func exactValues(m map[string]any, field string) ([]string, error) {
	v, present := m[field]
	if !present {
		return nil, fmt.Errorf("%s is not in the pattern (it would match any value)", field)
	}
	list, isList := v.([]any)
	if !isList || len(list) == 0 {
		return nil, fmt.Errorf("%s = %v, want a non-empty list of values", field, v)
	}
	out := make([]string, 0, len(list))
	for _, e := range list {
		s, isString := e.(string)
		if !isString {
			return nil, fmt.Errorf("%s has %v: content filters (prefix, anything-but, ...) are not played locally", field, e)
		}
		out = append(out, s)
	}
	sort.Strings(out)
	return slices.Compact(out), nil
}

// StatusEvents delivers the status-change events its rules match, by polling the state machines'
// executions. Each rule delivers an event to Target once per execution it matches, as each
// EventBridge rule invokes its targets.
type StatusEvents struct {
	SFN             sfnAPI
	Rules           []Rule
	Region, Account string
	Every           time.Duration
	// DropRate is the share of events never delivered (0..1), to exercise the sweep.
	DropRate float64
	// DupRate is the share of delivered events delivered a second time (0..1), one poll later:
	// EventBridge delivers at least once, and a duplicate can come after the lane went to the
	// next job.
	DupRate float64
	Target  Target
	Log     *slog.Logger

	mu    sync.Mutex
	seen  map[delivery]bool
	dups  []json.RawMessage // delivered events to deliver again on the next poll
	stats Stats
}

// delivery is one rule's event for one execution.
type delivery struct{ rule, executionArn string }

// Stats count events: delivered (first deliveries), dropped (never delivered) and duplicated
// (delivered a second time).
type Stats struct {
	Delivered, Dropped, Duplicated int
}

// Counts returns how many events were delivered and dropped.
func (s *StatusEvents) Counts() (delivered, dropped int) {
	st := s.Stats()
	return st.Delivered, st.Dropped
}

// Stats returns the counts of events so far.
func (s *StatusEvents) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// Run delivers events until ctx is cancelled.
func (s *StatusEvents) Run(ctx context.Context) {
	s.mu.Lock()
	if s.seen == nil {
		s.seen = map[delivery]bool{}
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

// query is one listing: a state machine's executions of one status, and the rules that match them.
type query struct {
	sm     string
	status sfntypes.ExecutionStatus
	rules  []string
}

// queries lists each state machine and status once, however many rules match them.
func (s *StatusEvents) queries() []query {
	var out []query
	index := map[[2]string]int{}
	for _, r := range s.Rules {
		for _, sm := range r.StateMachineArns {
			for _, st := range r.Statuses {
				k := [2]string{sm, string(st)}
				i, ok := index[k]
				if !ok {
					i = len(out)
					index[k] = i
					out = append(out, query{sm: sm, status: st})
				}
				out[i].rules = append(out[i].rules, r.Name)
			}
		}
	}
	return out
}

func (s *StatusEvents) poll(ctx context.Context) {
	s.deliverDuplicates(ctx)
	for _, q := range s.queries() {
		p := sfn.NewListExecutionsPaginator(s.SFN, &sfn.ListExecutionsInput{StateMachineArn: aws.String(q.sm), StatusFilter: q.status})
		for p.HasMorePages() {
			page, err := p.NextPage(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				// One state machine that cannot be listed must not stop events of the others.
				s.Log.Warn("list executions failed", "stateMachineArn", q.sm, "status", q.status, "error", err)
				break
			}
			for _, e := range page.Executions {
				for _, rule := range q.rules {
					s.deliver(ctx, rule, q.sm, aws.ToString(e.ExecutionArn))
				}
			}
		}
	}
}

func (s *StatusEvents) deliver(ctx context.Context, rule, sm, arn string) {
	key := delivery{rule, arn}
	s.mu.Lock()
	done := s.seen[key]
	s.mu.Unlock()
	if done {
		return
	}
	if s.DropRate > 0 && rand.Float64() < s.DropRate {
		s.mu.Lock()
		s.seen[key], s.stats.Dropped = true, s.stats.Dropped+1
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
		s.Log.Warn("target failed; event delivery retried", "rule", rule, "executionArn", arn, "error", err)
		return
	}
	dup := s.DupRate > 0 && rand.Float64() < s.DupRate
	s.mu.Lock()
	s.seen[key], s.stats.Delivered = true, s.stats.Delivered+1
	if dup {
		s.dups = append(s.dups, ev)
	}
	s.mu.Unlock()
}

// deliverDuplicates delivers again the events chosen for a duplicate since the last poll. A
// duplicate that fails is not retried: the event was delivered once already.
func (s *StatusEvents) deliverDuplicates(ctx context.Context) {
	s.mu.Lock()
	dups := s.dups
	s.dups = nil
	s.mu.Unlock()
	for _, ev := range dups {
		err := s.Target(ctx, ev)
		if err != nil && ctx.Err() == nil {
			s.Log.Warn("target failed on a duplicate event; not retried", "error", err)
		}
		if err != nil {
			continue
		}
		s.mu.Lock()
		s.stats.Duplicated++
		s.mu.Unlock()
	}
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
		"detail-type": statusDetailType,
		"source":      statusSource,
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
