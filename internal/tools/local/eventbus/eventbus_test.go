package eventbus_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"

	"github.com/sfnlimit/sfnlimit/internal/lambda/releaser"
	"github.com/sfnlimit/sfnlimit/internal/tools/cfntemplate"
	"github.com/sfnlimit/sfnlimit/internal/tools/local/eventbus"
)

const (
	account = "123456789012"
	region  = "us-east-1"
	smA     = "arn:aws:states:us-east-1:123456789012:stateMachine:sfnlimit-sample"
	smBare  = "arn:aws:states:us-east-1:123456789012:stateMachine:sfnlimit-bare"
	smB     = "arn:aws:states:us-east-1:123456789012:stateMachine:mine"
	smOther = "arn:aws:states:us-east-1:123456789012:stateMachine:not-watched"
)

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// failures is a rule like the template's StatusChange rule, for the given state machines.
func failures(sms ...string) eventbus.Rule {
	return eventbus.Rule{Name: "StatusChange", StateMachineArns: sms, Statuses: []sfntypes.ExecutionStatus{"FAILED", "TIMED_OUT", "ABORTED"}}
}

type execution struct {
	sm, name, status, input string
}

func (e execution) arn() string {
	return "arn:aws:states:us-east-1:123456789012:execution:" + e.sm[len("arn:aws:states:us-east-1:123456789012:stateMachine:"):] + ":" + e.name
}

// fakeSFN lists and describes executions, a few per page, and counts what it was asked.
type fakeSFN struct {
	mu       sync.Mutex
	execs    []execution
	pageSize int
	// failDescribe and failList make the next so many calls fail (per execution ARN / per call).
	failDescribe map[string]int
	failList     int
	polls        int // ListExecutions calls without a token for pollSM and pollStatus: one per poll
	pollSM       string
	pollStatus   sfntypes.ExecutionStatus
	describes    map[string]int
}

func newFake(execs ...execution) *fakeSFN {
	return &fakeSFN{execs: execs, pageSize: 2, failDescribe: map[string]int{}, describes: map[string]int{}, pollSM: smA, pollStatus: sfntypes.ExecutionStatusFailed}
}

func (f *fakeSFN) setStatus(name, status string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range f.execs {
		if f.execs[i].name == name {
			f.execs[i].status = status
		}
	}
}

func (f *fakeSFN) pollCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.polls
}

func (f *fakeSFN) ListExecutions(_ context.Context, in *sfn.ListExecutionsInput, _ ...func(*sfn.Options)) (*sfn.ListExecutionsOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if in.NextToken == nil && in.StatusFilter == f.pollStatus && aws.ToString(in.StateMachineArn) == f.pollSM {
		f.polls++
	}
	if f.failList > 0 {
		f.failList--
		return nil, errors.New("ThrottlingException")
	}
	var match []execution
	for _, e := range f.execs {
		if e.sm == aws.ToString(in.StateMachineArn) && (in.StatusFilter == "" || string(in.StatusFilter) == e.status) {
			match = append(match, e)
		}
	}
	start := 0
	if in.NextToken != nil {
		start, _ = strconv.Atoi(*in.NextToken)
	}
	end := min(start+f.pageSize, len(match))
	out := &sfn.ListExecutionsOutput{}
	for _, e := range match[start:end] {
		out.Executions = append(out.Executions, sfntypes.ExecutionListItem{
			ExecutionArn: aws.String(e.arn()), StateMachineArn: aws.String(e.sm), Name: aws.String(e.name),
			Status: sfntypes.ExecutionStatus(e.status), StartDate: aws.Time(time.UnixMilli(1_700_000_000_000)),
		})
	}
	if end < len(match) {
		out.NextToken = aws.String(strconv.Itoa(end))
	}
	return out, nil
}

func (f *fakeSFN) DescribeExecution(_ context.Context, in *sfn.DescribeExecutionInput, _ ...func(*sfn.Options)) (*sfn.DescribeExecutionOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	arn := aws.ToString(in.ExecutionArn)
	f.describes[arn]++
	if f.failDescribe[arn] > 0 {
		f.failDescribe[arn]--
		return nil, errors.New("ServiceUnavailable")
	}
	for _, e := range f.execs {
		if e.arn() != arn {
			continue
		}
		out := &sfn.DescribeExecutionOutput{
			ExecutionArn: aws.String(arn), StateMachineArn: aws.String(e.sm), Name: aws.String(e.name),
			Status: sfntypes.ExecutionStatus(e.status), Input: aws.String(e.input),
			StartDate: aws.Time(time.UnixMilli(1_700_000_000_000)),
		}
		if e.status != string(sfntypes.ExecutionStatusRunning) {
			out.StopDate = aws.Time(time.UnixMilli(1_700_000_060_000))
		}
		if e.status == string(sfntypes.ExecutionStatusFailed) {
			out.Error, out.Cause = aws.String("States.TaskFailed"), aws.String("it broke")
		}
		return out, nil
	}
	return nil, fmt.Errorf("ExecutionDoesNotExist: %s", arn)
}

// target records delivered events; fail decides whether a delivery fails.
type target struct {
	mu     sync.Mutex
	events []json.RawMessage
	calls  map[string]int // by executionArn
	fail   func(arn string, call int) bool
}

func (tg *target) deliver(_ context.Context, ev json.RawMessage) error {
	var e struct {
		Detail struct {
			ExecutionArn string `json:"executionArn"`
		} `json:"detail"`
	}
	if err := json.Unmarshal(ev, &e); err != nil {
		return err
	}
	tg.mu.Lock()
	defer tg.mu.Unlock()
	if tg.calls == nil {
		tg.calls = map[string]int{}
	}
	tg.calls[e.Detail.ExecutionArn]++
	if tg.fail != nil && tg.fail(e.Detail.ExecutionArn, tg.calls[e.Detail.ExecutionArn]) {
		return errors.New("function error")
	}
	tg.events = append(tg.events, slices.Clone(ev))
	return nil
}

// delivered returns the delivered events by execution ARN; an ARN delivered twice fails the test.
func (tg *target) delivered(t *testing.T) map[string]map[string]any {
	t.Helper()
	tg.mu.Lock()
	defer tg.mu.Unlock()
	out := map[string]map[string]any{}
	for _, raw := range tg.events {
		var ev map[string]any
		if err := json.Unmarshal(raw, &ev); err != nil {
			t.Fatalf("event %s is not a JSON object: %v", raw, err)
		}
		arn, _ := ev["detail"].(map[string]any)["executionArn"].(string)
		if _, dup := out[arn]; dup {
			t.Errorf("execution %s delivered twice", arn)
		}
		out[arn] = ev
	}
	return out
}

// runUntil runs s until cond holds (or 5 s pass) and then at least two more polls have happened,
// then stops it; Run must return within a second of its cancel.
func runUntil(t *testing.T, s *eventbus.StatusEvents, f *fakeSFN, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		s.Run(ctx)
	}()
	// Bounds for a poller that stopped, not figures: a passing run never waits for them.
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			cancel()
			<-returned
			t.Fatalf("condition not met in a minute (polls %d)", f.pollCount())
		}
		time.Sleep(5 * time.Millisecond)
	}
	for want := f.pollCount() + 2; f.pollCount() < want; {
		if time.Now().After(deadline) {
			t.Fatal("no more polls happened")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	select {
	case <-returned:
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return within 30 s of its context's cancel")
	}
}

func jobInput(id string) string {
	return fmt.Sprintf(`{"job":{"id":%q,"type":"demo","lane":2,"attempt":1,"submittedAt":"2024-01-02T03:04:05Z"},"input":{"n":1}}`, id)
}

func TestStatusEventsDeliverFailures(t *testing.T) {
	tests := []struct {
		name     string
		give     []execution
		giveSMs  []string
		wantArns []string
	}{
		{
			name: "one of each status",
			give: []execution{
				{smA, "failed", "FAILED", jobInput("1")},
				{smA, "timedout", "TIMED_OUT", jobInput("2")},
				{smA, "aborted", "ABORTED", jobInput("3")},
				{smA, "succeeded", "SUCCEEDED", jobInput("4")},
				{smA, "running", "RUNNING", jobInput("5")},
			},
			giveSMs:  []string{smA},
			wantArns: []string{execution{smA, "failed", "", ""}.arn(), execution{smA, "timedout", "", ""}.arn(), execution{smA, "aborted", "", ""}.arn()},
		},
		{
			name:    "several pages",
			give:    []execution{{smA, "f1", "FAILED", jobInput("1")}, {smA, "f2", "FAILED", jobInput("2")}, {smA, "f3", "FAILED", jobInput("3")}, {smA, "f4", "FAILED", jobInput("4")}, {smA, "f5", "FAILED", jobInput("5")}},
			giveSMs: []string{smA},
			wantArns: []string{
				execution{smA, "f1", "", ""}.arn(), execution{smA, "f2", "", ""}.arn(), execution{smA, "f3", "", ""}.arn(),
				execution{smA, "f4", "", ""}.arn(), execution{smA, "f5", "", ""}.arn(),
			},
		},
		{
			name:     "only watched state machines",
			give:     []execution{{smA, "a", "FAILED", jobInput("1")}, {smB, "b", "ABORTED", jobInput("2")}, {smOther, "c", "FAILED", jobInput("3")}},
			giveSMs:  []string{smA, smB},
			wantArns: []string{execution{smA, "a", "", ""}.arn(), execution{smB, "b", "", ""}.arn()},
		},
		{
			name:    "no failures",
			give:    []execution{{smA, "ok", "SUCCEEDED", jobInput("1")}, {smA, "busy", "RUNNING", jobInput("2")}},
			giveSMs: []string{smA},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(tt.give...)
			tg := &target{}
			s := &eventbus.StatusEvents{
				SFN: f, Rules: []eventbus.Rule{failures(tt.giveSMs...)}, Region: region, Account: account,
				Every: 10 * time.Millisecond, Target: tg.deliver, Log: discard(),
			}
			runUntil(t, s, f, func() bool { return len(tg.delivered(t)) >= len(tt.wantArns) && f.pollCount() >= 2 })
			got := tg.delivered(t)
			if gotArns := slices.Sorted(maps.Keys(got)); !slices.Equal(gotArns, slices.Sorted(slices.Values(tt.wantArns))) {
				t.Errorf("delivered %v, want %v", gotArns, slices.Sorted(slices.Values(tt.wantArns)))
			}
			if delivered, dropped := s.Counts(); delivered != len(tt.wantArns) || dropped != 0 {
				t.Errorf("Counts() = %d, %d, want %d, 0", delivered, dropped, len(tt.wantArns))
			}
			for _, e := range tt.give {
				ev, ok := got[e.arn()]
				if !ok {
					continue
				}
				checkStatusEvent(t, ev, e)
			}
		})
	}
}

// checkStatusEvent checks an event against what EventBridge sends for a closed execution, and that
// the releaser reads it back.
func checkStatusEvent(t *testing.T, ev map[string]any, e execution) {
	t.Helper()
	for k, want := range map[string]any{
		"detail-type": "Step Functions Execution Status Change",
		"source":      "aws.states",
		"account":     account,
		"region":      region,
		"version":     "0",
	} {
		if ev[k] != want {
			t.Errorf("%s event %s = %v, want %v", e.name, k, ev[k], want)
		}
	}
	if rs, _ := ev["resources"].([]any); len(rs) != 1 || rs[0] != e.arn() {
		t.Errorf("%s event resources = %v, want [%s]", e.name, ev["resources"], e.arn())
	}
	if _, err := time.Parse(time.RFC3339, fmt.Sprint(ev["time"])); err != nil {
		t.Errorf("%s event time = %v, want RFC 3339", e.name, ev["time"])
	}
	d, _ := ev["detail"].(map[string]any)
	for k, want := range map[string]any{
		"executionArn": e.arn(), "stateMachineArn": e.sm, "name": e.name, "status": e.status,
		"input": e.input, // a JSON string, as EventBridge sends it
	} {
		if d[k] != want {
			t.Errorf("%s event detail.%s = %#v, want %#v", e.name, k, d[k], want)
		}
	}
	if _, ok := d["stopDate"].(float64); !ok {
		t.Errorf("%s event detail.stopDate = %v, want epoch milliseconds", e.name, d["stopDate"])
	}
	raw, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	var back struct {
		DetailType string                `json:"detail-type"`
		Detail     releaser.StatusDetail `json:"detail"`
	}
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatalf("%s event does not decode as the releaser's StatusDetail: %v", e.name, err)
	}
	if back.Detail.Input == nil || *back.Detail.Input != e.input || back.Detail.Status != e.status || back.Detail.ExecutionArn != e.arn() {
		t.Errorf("%s event as the releaser reads it = %+v, want input %s, status %s", e.name, back.Detail, e.input, e.status)
	}
	if !matchesTemplate(t, ev) {
		t.Errorf("%s event %v matches none of template.yaml's rules of the releaser", e.name, ev)
	}
}

var (
	patternOnce sync.Once
	patternTpl  *cfntemplate.Template
	patternErr  error
)

// templateRules returns the releaser's event rules from template.yaml, resolved with smA as the
// sample, smBare as the bare sample and smB as an extra state machine.
func templateRules(t *testing.T) []cfntemplate.EventRule {
	t.Helper()
	patternOnce.Do(func() {
		patternTpl, patternErr = cfntemplate.Load(filepath.Join("..", "..", "..", "..", "template.yaml"))
	})
	if patternErr != nil {
		t.Fatalf("Load(template.yaml) error: %v", patternErr)
	}
	sms := map[string]string{"SampleStateMachine": smA, "BareStateMachine": smBare}
	// Any other resource's attributes do not reach the patterns: made-up values do.
	attr := func(id, attribute string) (string, bool) {
		if arn, ok := sms[id]; ok && attribute == cfntemplate.Ref {
			return arn, true
		}
		return "made-up-" + id + "-" + attribute, true
	}
	r, err := patternTpl.Resolver(cfntemplate.Env{Parameters: map[string]string{"ExtraStateMachineArns": smB}, Attr: attr})
	if err != nil {
		t.Fatalf("Resolver error: %v", err)
	}
	for _, f := range patternTpl.Functions() {
		cfg, err := r.Function(f)
		if err != nil {
			t.Fatalf("Function(%s) error: %v", f.LogicalID, err)
		}
		if f.LogicalID == "ReleaserFunction" {
			return cfg.EventRules
		}
	}
	t.Fatal("template.yaml has no ReleaserFunction")
	return nil
}

// matchesTemplate reports whether one of the template's rules matches ev.
func matchesTemplate(t *testing.T, ev map[string]any) bool {
	t.Helper()
	for _, rule := range templateRules(t) {
		var p map[string]any
		if err := json.Unmarshal(rule.Pattern, &p); err != nil {
			t.Fatalf("rule %s pattern: %v", rule.Name, err)
		}
		if matches(t, p, ev) {
			return true
		}
	}
	return false
}

// matches applies the parts of EventBridge pattern matching the template uses: a list of values
// matches a field equal to one of them; a map matches a nested object.
func matches(t *testing.T, pattern map[string]any, ev map[string]any) bool {
	t.Helper()
	for k, p := range pattern {
		switch p := p.(type) {
		case []any:
			if !slices.Contains(p, ev[k]) {
				return false
			}
		case map[string]any:
			sub, ok := ev[k].(map[string]any)
			if !ok || !matches(t, p, sub) {
				return false
			}
		default:
			t.Fatalf("pattern field %s = %v: not a list or object", k, p)
		}
	}
	return true
}

func TestStatusEventsDeliverOnce(t *testing.T) {
	tests := []struct {
		name          string
		giveFail      func(arn string, call int) bool // target failures
		giveDescribe  int                             // failing DescribeExecution calls
		giveList      int                             // failing ListExecutions calls
		wantCalls     int                             // target calls for the execution
		wantDescribes int
	}{
		{name: "delivered at first", wantCalls: 1, wantDescribes: 1},
		{name: "target fails twice", giveFail: func(_ string, call int) bool { return call <= 2 }, wantCalls: 3, wantDescribes: 3},
		{name: "describe fails once", giveDescribe: 1, wantCalls: 1, wantDescribes: 2},
		{name: "list fails twice", giveList: 2, wantCalls: 1, wantDescribes: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := execution{smA, "job-1", "FAILED", jobInput("job-1")}
			f := newFake(e, execution{smA, "job-2", "SUCCEEDED", jobInput("job-2")})
			f.failDescribe[e.arn()] = tt.giveDescribe
			f.failList = tt.giveList
			tg := &target{fail: tt.giveFail}
			s := &eventbus.StatusEvents{
				SFN: f, Rules: []eventbus.Rule{failures(smA)}, Region: region, Account: account,
				Every: 10 * time.Millisecond, Target: tg.deliver, Log: discard(),
			}
			runUntil(t, s, f, func() bool { return len(tg.delivered(t)) == 1 })
			tg.mu.Lock()
			calls := tg.calls[e.arn()]
			tg.mu.Unlock()
			if calls != tt.wantCalls {
				t.Errorf("target calls for %s = %d, want %d (retried on each poll until delivered, then never again)", e.name, calls, tt.wantCalls)
			}
			f.mu.Lock()
			describes := f.describes[e.arn()]
			f.mu.Unlock()
			if describes != tt.wantDescribes {
				t.Errorf("DescribeExecution calls for %s = %d, want %d", e.name, describes, tt.wantDescribes)
			}
			if delivered, dropped := s.Counts(); delivered != 1 || dropped != 0 {
				t.Errorf("Counts() = %d, %d, want 1, 0", delivered, dropped)
			}
		})
	}
}

func TestStatusEventsExecutionThatFailsLater(t *testing.T) {
	tests := []struct {
		name       string
		giveStatus string
		wantEvent  bool
	}{
		{name: "fails", giveStatus: "FAILED", wantEvent: true},
		{name: "times out", giveStatus: "TIMED_OUT", wantEvent: true},
		{name: "succeeds", giveStatus: "SUCCEEDED", wantEvent: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := execution{smA, "late", "RUNNING", jobInput("late")}
			f := newFake(e)
			tg := &target{}
			s := &eventbus.StatusEvents{
				SFN: f, Rules: []eventbus.Rule{failures(smA)}, Region: region, Account: account,
				Every: 10 * time.Millisecond, Target: tg.deliver, Log: discard(),
			}
			runUntil(t, s, f, func() bool {
				if f.pollCount() >= 3 {
					f.setStatus("late", tt.giveStatus)
				}
				return f.pollCount() >= 6
			})
			got := tg.delivered(t)
			if _, ok := got[e.arn()]; ok != tt.wantEvent {
				t.Fatalf("event for an execution that became %s delivered = %v, want %v", tt.giveStatus, ok, tt.wantEvent)
			}
			if tt.wantEvent {
				e.status = tt.giveStatus
				checkStatusEvent(t, got[e.arn()], e)
			}
		})
	}
}

func TestStatusEventsDropRate(t *testing.T) {
	tests := []struct {
		name     string
		giveRate float64
		give     int // failed executions
	}{
		{name: "drop all", giveRate: 1, give: 5},
		{name: "drop some", giveRate: 0.5, give: 20},
		{name: "drop none", giveRate: 0, give: 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var execs []execution
			for i := range tt.give {
				execs = append(execs, execution{smA, fmt.Sprintf("f%d", i), "ABORTED", jobInput(strconv.Itoa(i))})
			}
			f := newFake(execs...)
			tg := &target{}
			s := &eventbus.StatusEvents{
				SFN: f, Rules: []eventbus.Rule{failures(smA)}, Region: region, Account: account,
				Every: 10 * time.Millisecond, DropRate: tt.giveRate, Target: tg.deliver, Log: discard(),
			}
			runUntil(t, s, f, func() bool {
				d, x := s.Counts()
				return d+x == tt.give
			})
			delivered, dropped := s.Counts()
			if delivered+dropped != tt.give {
				t.Errorf("Counts() = %d, %d, want them to add up to %d (each execution delivered or dropped, once)", delivered, dropped, tt.give)
			}
			if got := len(tg.delivered(t)); got != delivered {
				t.Errorf("target received %d events, Counts() says %d delivered", got, delivered)
			}
			switch tt.giveRate {
			case 1:
				if delivered != 0 || dropped != tt.give {
					t.Errorf("Counts() with DropRate 1 = %d, %d, want 0, %d", delivered, dropped, tt.give)
				}
				f.mu.Lock()
				if n := len(f.describes); n != 0 {
					t.Errorf("DescribeExecution calls with DropRate 1 = %d, want 0", n)
				}
				f.mu.Unlock()
			case 0:
				if delivered != tt.give || dropped != 0 {
					t.Errorf("Counts() with DropRate 0 = %d, %d, want %d, 0", delivered, dropped, tt.give)
				}
			}
		})
	}
}

func TestScheduleFiresAtItsRate(t *testing.T) {
	tests := []struct {
		name      string
		giveEvery time.Duration
		wantCount int
	}{
		{name: "every 20ms", giveEvery: 20 * time.Millisecond, wantCount: 4},
		{name: "every 50ms", giveEvery: 50 * time.Millisecond, wantCount: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var (
				mu    sync.Mutex
				times []time.Time
				evs   []json.RawMessage
			)
			s := &eventbus.Schedule{
				Every: tt.giveEvery, Region: region, Account: account, Log: discard(),
				Target: func(_ context.Context, ev json.RawMessage) error {
					mu.Lock()
					defer mu.Unlock()
					times = append(times, time.Now())
					evs = append(evs, slices.Clone(ev))
					if len(evs)%2 == 0 {
						return errors.New("a failing target does not stop the schedule")
					}
					return nil
				},
			}
			ctx, cancel := context.WithCancel(context.Background())
			began := time.Now()
			returned := make(chan struct{})
			go func() {
				defer close(returned)
				s.Run(ctx)
			}()
			count := func() int { mu.Lock(); defer mu.Unlock(); return len(times) }
			// The deadlines only bound a schedule that stopped: a busy machine may be slow to
			// run its ticks, never early (checked below).
			deadline := time.Now().Add(time.Minute)
			for count() < tt.wantCount {
				if time.Now().After(deadline) {
					cancel()
					<-returned
					t.Fatalf("%d scheduled events in a minute, want %d at one per %v", count(), tt.wantCount, tt.giveEvery)
				}
				time.Sleep(2 * time.Millisecond)
			}
			cancel()
			select {
			case <-returned:
			case <-time.After(30 * time.Second):
				t.Fatal("Run did not return within 30 s of its context's cancel")
			}
			stopped := count()
			time.Sleep(2 * tt.giveEvery)
			if got := count(); got != stopped {
				t.Errorf("events after Run returned: %d, want none", got-stopped)
			}

			mu.Lock()
			defer mu.Unlock()
			if first := times[0].Sub(began); first < tt.giveEvery-5*time.Millisecond {
				t.Errorf("first event %v after start, want one period (%v) later, as a rate schedule fires", first, tt.giveEvery)
			}
			// n events take at least n-1 periods (a ticker never fires early; a slow one may skip).
			n := tt.wantCount
			if span := times[n-1].Sub(times[0]); span < time.Duration(n-1)*tt.giveEvery-10*time.Millisecond {
				t.Errorf("%d events within %v, want at least %v apart on average", n, span, tt.giveEvery)
			}
			for i, raw := range evs {
				var ev map[string]any
				if err := json.Unmarshal(raw, &ev); err != nil {
					t.Fatalf("event %d %s: %v", i, raw, err)
				}
				for k, want := range map[string]any{"detail-type": "Scheduled Event", "source": "aws.events", "account": account, "region": region, "version": "0"} {
					if ev[k] != want {
						t.Errorf("event %d %s = %v, want %v", i, k, ev[k], want)
					}
				}
				if d, ok := ev["detail"].(map[string]any); !ok || len(d) != 0 {
					t.Errorf("event %d detail = %v, want {}", i, ev["detail"])
				}
				if _, err := time.Parse(time.RFC3339, fmt.Sprint(ev["time"])); err != nil {
					t.Errorf("event %d time = %v, want RFC 3339", i, ev["time"])
				}
			}
		})
	}
}

// TestTemplateRules reads the releaser's rules as the local bus does and holds them, and the events
// the bus builds, to EventBridge's matching of the same patterns: the bus delivers an event exactly
// when the template's rules would send it.
func TestTemplateRules(t *testing.T) {
	var rules []eventbus.Rule
	for _, r := range templateRules(t) {
		rule, ok, err := eventbus.StatusRule(r.Name, r.Pattern)
		if err != nil || !ok {
			t.Fatalf("StatusRule(%s, %s) = %v, %v; want a status rule", r.Name, r.Pattern, ok, err)
		}
		rules = append(rules, rule)
	}
	want := []eventbus.Rule{
		{Name: "StatusChange", StateMachineArns: sorted(smA, smBare, smB), Statuses: []sfntypes.ExecutionStatus{"ABORTED", "FAILED", "TIMED_OUT"}},
		{Name: "Succeeded", StateMachineArns: sorted(smBare, smB), Statuses: []sfntypes.ExecutionStatus{"SUCCEEDED"}},
	}
	if !reflect.DeepEqual(rules, want) {
		t.Errorf("the template's rules as the bus reads them =\n%+v\nwant\n%+v", rules, want)
	}
	played := func(sm string, st sfntypes.ExecutionStatus) bool {
		for _, r := range rules {
			if slices.Contains(r.StateMachineArns, sm) && slices.Contains(r.Statuses, st) {
				return true
			}
		}
		return false
	}

	tests := []struct {
		name       string
		giveStatus sfntypes.ExecutionStatus
		giveSM     string
		want       bool
	}{
		{name: "sample failed", giveStatus: sfntypes.ExecutionStatusFailed, giveSM: smA, want: true},
		{name: "sample timed out", giveStatus: sfntypes.ExecutionStatusTimedOut, giveSM: smA, want: true},
		{name: "sample aborted", giveStatus: sfntypes.ExecutionStatusAborted, giveSM: smA, want: true},
		{name: "sample succeeded: its Release step releases it", giveStatus: sfntypes.ExecutionStatusSucceeded, giveSM: smA, want: false},
		{name: "sample running", giveStatus: sfntypes.ExecutionStatusRunning, giveSM: smA, want: false},
		{name: "bare failed", giveStatus: sfntypes.ExecutionStatusFailed, giveSM: smBare, want: true},
		{name: "bare timed out", giveStatus: sfntypes.ExecutionStatusTimedOut, giveSM: smBare, want: true},
		{name: "bare aborted", giveStatus: sfntypes.ExecutionStatusAborted, giveSM: smBare, want: true},
		{name: "bare succeeded", giveStatus: sfntypes.ExecutionStatusSucceeded, giveSM: smBare, want: true},
		{name: "bare running", giveStatus: sfntypes.ExecutionStatusRunning, giveSM: smBare, want: false},
		{name: "extra aborted", giveStatus: sfntypes.ExecutionStatusAborted, giveSM: smB, want: true},
		{name: "extra succeeded", giveStatus: sfntypes.ExecutionStatusSucceeded, giveSM: smB, want: true},
		{name: "another state machine failed", giveStatus: sfntypes.ExecutionStatusFailed, giveSM: smOther, want: false},
		{name: "another state machine succeeded", giveStatus: sfntypes.ExecutionStatusSucceeded, giveSM: smOther, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := execution{tt.giveSM, "x", string(tt.giveStatus), jobInput("x")}
			raw := eventbus.StatusChangeEvent(&sfn.DescribeExecutionOutput{
				ExecutionArn: aws.String(e.arn()), StateMachineArn: aws.String(e.sm), Name: aws.String(e.name),
				Status: tt.giveStatus, Input: aws.String(e.input), StartDate: aws.Time(time.Now()),
			}, e.sm, region, account)
			var ev map[string]any
			if err := json.Unmarshal(raw, &ev); err != nil {
				t.Fatalf("StatusChangeEvent = %s: %v", raw, err)
			}
			if got := matchesTemplate(t, ev); got != tt.want {
				t.Errorf("the template's rules match a %s event of %s = %v, want %v", tt.giveStatus, tt.giveSM, got, tt.want)
			}
			if got := played(tt.giveSM, tt.giveStatus); got != tt.want {
				t.Errorf("the bus plays a %s event of %s = %v, want %v", tt.giveStatus, tt.giveSM, got, tt.want)
			}
		})
	}
}

func sorted(s ...string) []string { return slices.Sorted(slices.Values(s)) }

func TestStatusRule(t *testing.T) {
	tests := []struct {
		name    string
		give    string
		want    eventbus.Rule
		wantOK  bool
		wantErr bool
	}{
		{
			name:   "statuses and state machines",
			give:   `{"source":["aws.states"],"detail-type":["Step Functions Execution Status Change"],"detail":{"status":["TIMED_OUT","FAILED"],"stateMachineArn":["` + smB + `","` + smA + `"]}}`,
			want:   eventbus.Rule{Name: "r", StateMachineArns: sorted(smA, smB), Statuses: []sfntypes.ExecutionStatus{"FAILED", "TIMED_OUT"}},
			wantOK: true,
		},
		{
			name:   "repeated values once",
			give:   `{"source":["aws.states"],"detail-type":["Step Functions Execution Status Change"],"detail":{"status":["SUCCEEDED","SUCCEEDED"],"stateMachineArn":["` + smA + `","` + smA + `"]}}`,
			want:   eventbus.Rule{Name: "r", StateMachineArns: []string{smA}, Statuses: []sfntypes.ExecutionStatus{"SUCCEEDED"}},
			wantOK: true,
		},
		{
			name: "another source",
			give: `{"source":["aws.s3"],"detail-type":["Object Created"]}`,
		},
		{
			name: "another detail type",
			give: `{"source":["aws.states"],"detail-type":["Step Functions State Machine Status Change"],"detail":{"status":["FAILED"]}}`,
		},
		{name: "no source", give: `{"detail-type":["Step Functions Execution Status Change"],"detail":{"status":["FAILED"],"stateMachineArn":["` + smA + `"]}}`, wantErr: true},
		{name: "no detail", give: `{"source":["aws.states"],"detail-type":["Step Functions Execution Status Change"]}`, wantErr: true},
		{name: "no status", give: `{"source":["aws.states"],"detail-type":["Step Functions Execution Status Change"],"detail":{"stateMachineArn":["` + smA + `"]}}`, wantErr: true},
		{name: "no state machines", give: `{"source":["aws.states"],"detail-type":["Step Functions Execution Status Change"],"detail":{"status":["FAILED"]}}`, wantErr: true},
		{name: "empty state machines", give: `{"source":["aws.states"],"detail-type":["Step Functions Execution Status Change"],"detail":{"status":["FAILED"],"stateMachineArn":[]}}`, wantErr: true},
		{name: "running", give: `{"source":["aws.states"],"detail-type":["Step Functions Execution Status Change"],"detail":{"status":["RUNNING"],"stateMachineArn":["` + smA + `"]}}`, wantErr: true},
		{name: "content filter", give: `{"source":["aws.states"],"detail-type":["Step Functions Execution Status Change"],"detail":{"status":["FAILED"],"stateMachineArn":[{"prefix":"arn:aws:states:"}]}}`, wantErr: true},
		{name: "another detail field", give: `{"source":["aws.states"],"detail-type":["Step Functions Execution Status Change"],"detail":{"status":["FAILED"],"stateMachineArn":["` + smA + `"],"name":["x"]}}`, wantErr: true},
		{name: "another top-level field", give: `{"source":["aws.states"],"detail-type":["Step Functions Execution Status Change"],"account":["1"],"detail":{"status":["FAILED"],"stateMachineArn":["` + smA + `"]}}`, wantErr: true},
		{name: "not JSON", give: `{`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok, err := eventbus.StatusRule("r", json.RawMessage(tt.give))
			if (err != nil) != tt.wantErr {
				t.Fatalf("StatusRule() error = %v, want error %v", err, tt.wantErr)
			}
			if ok != tt.wantOK || !reflect.DeepEqual(got, tt.want) && tt.wantOK {
				t.Errorf("StatusRule() = %+v, %v; want %+v, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

// The bus delivers what the template's rules match: successes of the bare and extra state machines,
// not of the sample; failures of all three.
func TestStatusEventsFollowTheTemplatesRules(t *testing.T) {
	var rules []eventbus.Rule
	for _, r := range templateRules(t) {
		rule, _, err := eventbus.StatusRule(r.Name, r.Pattern)
		if err != nil {
			t.Fatal(err)
		}
		rules = append(rules, rule)
	}
	give := []execution{
		{smA, "sample-ok", "SUCCEEDED", jobInput("1")},
		{smA, "sample-failed", "FAILED", jobInput("2")},
		{smBare, "bare-ok", "SUCCEEDED", jobInput("3")},
		{smBare, "bare-failed", "FAILED", jobInput("4")},
		{smBare, "bare-running", "RUNNING", jobInput("5")},
		{smB, "extra-ok", "SUCCEEDED", jobInput("6")},
		{smOther, "other-ok", "SUCCEEDED", jobInput("7")},
	}
	wantNames := []string{"bare-failed", "bare-ok", "extra-ok", "sample-failed"}
	f := newFake(give...)
	tg := &target{}
	s := &eventbus.StatusEvents{SFN: f, Rules: rules, Region: region, Account: account, Every: 10 * time.Millisecond, Target: tg.deliver, Log: discard()}
	runUntil(t, s, f, func() bool { return len(tg.delivered(t)) >= len(wantNames) })
	got := tg.delivered(t)
	var names []string
	for _, e := range give {
		if ev, ok := got[e.arn()]; ok {
			names = append(names, e.name)
			checkStatusEvent(t, ev, e)
		}
	}
	if slices.Sort(names); !slices.Equal(names, wantNames) {
		t.Errorf("delivered events of %v, want %v", names, wantNames)
	}
}

// Each rule sends its own event to the target, as each EventBridge rule invokes its targets: an
// execution two rules match is delivered twice, once per rule, and then never again.
func TestStatusEventsOneEventPerRule(t *testing.T) {
	e := execution{smA, "both", "FAILED", jobInput("both")}
	f := newFake(e)
	tg := &target{}
	s := &eventbus.StatusEvents{
		SFN: f, Rules: []eventbus.Rule{failures(smA), {Name: "Other", StateMachineArns: []string{smA}, Statuses: []sfntypes.ExecutionStatus{"FAILED"}}},
		Region: region, Account: account, Every: 10 * time.Millisecond, Target: tg.deliver, Log: discard(),
	}
	runUntil(t, s, f, func() bool { d, _ := s.Counts(); return d >= 2 })
	tg.mu.Lock()
	calls := tg.calls[e.arn()]
	tg.mu.Unlock()
	if st := s.Stats(); calls != 2 || st != (eventbus.Stats{Delivered: 2}) {
		t.Errorf("target calls = %d, Stats() = %+v; want 2 and 2 delivered (one per rule)", calls, st)
	}
	f.mu.Lock()
	lists := f.polls
	f.mu.Unlock()
	if lists < 2 {
		t.Errorf("FAILED executions listed %d times, want once per poll (at least 2)", lists)
	}
}

func TestStatusEventsDupRate(t *testing.T) {
	tests := []struct {
		name     string
		giveRate float64
		give     int
	}{
		{name: "every event twice", giveRate: 1, give: 4},
		{name: "some events twice", giveRate: 0.5, give: 20},
		{name: "no duplicates", giveRate: 0, give: 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var execs []execution
			for i := range tt.give {
				execs = append(execs, execution{smBare, fmt.Sprintf("ok%d", i), "SUCCEEDED", jobInput(strconv.Itoa(i))})
			}
			f := newFake(execs...)
			f.pollSM, f.pollStatus = smBare, sfntypes.ExecutionStatusSucceeded
			tg := &target{}
			s := &eventbus.StatusEvents{
				SFN: f, Rules: []eventbus.Rule{{Name: "Succeeded", StateMachineArns: []string{smBare}, Statuses: []sfntypes.ExecutionStatus{"SUCCEEDED"}}},
				Region: region, Account: account, Every: 10 * time.Millisecond, DupRate: tt.giveRate, Target: tg.deliver, Log: discard(),
			}
			runUntil(t, s, f, func() bool { d, _ := s.Counts(); return d == tt.give })
			st := s.Stats()
			tg.mu.Lock()
			defer tg.mu.Unlock()
			calls, events := 0, map[string][]string{}
			for arn, n := range tg.calls {
				calls += n
				if n > 2 {
					t.Errorf("%s delivered %d times, want at most twice", arn, n)
				}
			}
			for _, raw := range tg.events {
				var ev struct {
					ID string `json:"id"`
				}
				if err := json.Unmarshal(raw, &ev); err != nil {
					t.Fatal(err)
				}
				events[ev.ID] = append(events[ev.ID], string(raw))
			}
			for id, evs := range events {
				if len(evs) == 2 && evs[0] != evs[1] {
					t.Errorf("duplicate of %s differs from the event:\n%s\n%s", id, evs[0], evs[1])
				}
			}
			if st.Delivered != tt.give || calls != st.Delivered+st.Duplicated {
				t.Errorf("Stats() = %+v, target calls %d; want %d delivered and calls = delivered + duplicated", st, calls, tt.give)
			}
			switch tt.giveRate {
			case 1:
				if st.Duplicated != tt.give {
					t.Errorf("duplicated %d with DupRate 1, want %d", st.Duplicated, tt.give)
				}
			case 0:
				if st.Duplicated != 0 {
					t.Errorf("duplicated %d with DupRate 0, want 0", st.Duplicated)
				}
			}
		})
	}
}
