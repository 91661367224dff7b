package observe_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"
	"github.com/aws/smithy-go"

	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/tools/local/observe"
)

var t0 = time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)

func at(sec float64) time.Time { return t0.Add(time.Duration(sec * float64(time.Second))) }

// x is a work interval of a type from start to end seconds after t0; end < 0 means still working.
func x(typ string, start, end float64) observe.Execution {
	e := observe.Execution{Job: job.Meta{Type: typ}, Start: at(start)}
	if end >= 0 {
		e.WorkEnd = at(end)
	}
	return e
}

func TestPeaks(t *testing.T) {
	tests := []struct {
		name    string
		give    []observe.Execution
		giveNow float64
		want    map[string]observe.Peak
	}{
		{name: "none", give: nil, giveNow: 100, want: map[string]observe.Peak{}},
		{name: "one", give: []observe.Execution{x("a", 0, 10)}, giveNow: 100,
			want: map[string]observe.Peak{"a": {Type: "a", Max: 1, At: at(0)}}},
		{name: "two overlapping", give: []observe.Execution{x("a", 0, 10), x("a", 5, 15)}, giveNow: 100,
			want: map[string]observe.Peak{"a": {Type: "a", Max: 2, At: at(5)}}},
		{name: "back to back is one lane handed over", give: []observe.Execution{x("a", 0, 10), x("a", 10, 20), x("a", 20, 30)}, giveNow: 100,
			want: map[string]observe.Peak{"a": {Type: "a", Max: 1, At: at(0)}}},
		{name: "back to back given in any order", give: []observe.Execution{x("a", 20, 30), x("a", 10, 20), x("a", 0, 10)}, giveNow: 100,
			want: map[string]observe.Peak{"a": {Type: "a", Max: 1, At: at(0)}}},
		{name: "two lanes handing over at the same instant", give: []observe.Execution{x("a", 0, 10), x("a", 0, 10), x("a", 10, 20), x("a", 10, 20)}, giveNow: 100,
			want: map[string]observe.Peak{"a": {Type: "a", Max: 2, At: at(0)}}},
		{name: "one millisecond of overlap counts", give: []observe.Execution{x("a", 0, 10.001), x("a", 10, 20)}, giveNow: 100,
			want: map[string]observe.Peak{"a": {Type: "a", Max: 2, At: at(10)}}},
		{name: "nested", give: []observe.Execution{x("a", 0, 100), x("a", 10, 20), x("a", 15, 35), x("a", 30, 40)}, giveNow: 200,
			want: map[string]observe.Peak{"a": {Type: "a", Max: 3, At: at(15)}}},
		{name: "still working counts to now", give: []observe.Execution{x("a", 0, -1), x("a", 50, 60)}, giveNow: 100,
			want: map[string]observe.Peak{"a": {Type: "a", Max: 2, At: at(50)}}},
		{name: "still working ends at now", give: []observe.Execution{x("a", 0, -1), x("a", 100, 110)}, giveNow: 100,
			want: map[string]observe.Peak{"a": {Type: "a", Max: 1, At: at(0)}}},
		{name: "several types apart", give: []observe.Execution{
			x("a", 0, 10), x("b", 0, 10), x("b", 5, 15), x("c", 1, -1), x("c", 2, -1), x("c", 3, -1), x("a", 10, 20),
		}, giveNow: 50, want: map[string]observe.Peak{
			"a": {Type: "a", Max: 1, At: at(0)},
			"b": {Type: "b", Max: 2, At: at(5)},
			"c": {Type: "c", Max: 3, At: at(3)},
		}},
		{name: "empty interval adds nothing", give: []observe.Execution{x("a", 0, 10), x("a", 5, 5), x("a", 5, 8)}, giveNow: 100,
			want: map[string]observe.Peak{"a": {Type: "a", Max: 2, At: at(5)}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := observe.Peaks(tt.give, at(tt.giveNow))
			if !maps.EqualFunc(got, tt.want, func(a, b observe.Peak) bool { return a.Type == b.Type && a.Max == b.Max && a.At.Equal(b.At) }) {
				t.Errorf("Peaks(%s) = %v, want %v", tt.name, got, tt.want)
			}
		})
	}
}

// Per key: each key of a type is counted apart, the default key ("") as one more; keys of two types
// are never mixed.
func TestPeaksByTypeKey(t *testing.T) {
	k := func(typ, key string, start, end float64) observe.Execution {
		e := x(typ, start, end)
		e.Job.Key = key
		return e
	}
	give := []observe.Execution{
		k("llm", "acme", 0, 10), k("llm", "acme", 5, 15), k("llm", "acme", 15, 20),
		k("llm", "", 0, 10), k("llm", "beta", 2, 12), k("llm", "", 3, 4),
		k("ocr", "acme", 1, 9),
	}
	got := observe.PeaksBy(give, at(100), observe.TypeKey)
	want := map[string]observe.Peak{
		"llm#acme": {Type: "llm#acme", Max: 2, At: at(5)},
		"llm#":     {Type: "llm#", Max: 2, At: at(3)},
		"llm#beta": {Type: "llm#beta", Max: 1, At: at(2)},
		"ocr#acme": {Type: "ocr#acme", Max: 1, At: at(1)},
	}
	if !maps.EqualFunc(got, want, func(a, b observe.Peak) bool { return a.Type == b.Type && a.Max == b.Max && a.At.Equal(b.At) }) {
		t.Errorf("PeaksBy(TypeKey) = %v, want %v", got, want)
	}
	if p := observe.Peaks(give, at(100))["llm"]; p.Max != 4 {
		t.Errorf("Peaks()[llm] = %+v, want 4 across its keys", p)
	}
}

func TestSeries(t *testing.T) {
	tests := []struct {
		name      string
		give      []observe.Execution
		giveStart float64
		giveEnd   float64
		giveStep  time.Duration
		wantTimes int
		want      map[string][]int
	}{
		{name: "none", giveStart: 0, giveEnd: 2, giveStep: time.Second, wantTimes: 3, want: map[string][]int{}},
		{name: "one interval, start inclusive, end exclusive", give: []observe.Execution{x("a", 1, 3)},
			giveStart: 0, giveEnd: 4, giveStep: time.Second, wantTimes: 5, want: map[string][]int{"a": {0, 1, 1, 0, 0}}},
		{name: "back to back", give: []observe.Execution{x("a", 0, 2), x("a", 2, 4)},
			giveStart: 0, giveEnd: 4, giveStep: time.Second, wantTimes: 5, want: map[string][]int{"a": {1, 1, 1, 1, 0}}},
		{name: "overlap and types", give: []observe.Execution{x("a", 0, 3), x("a", 1, 2), x("b", 0.5, 1.5)},
			giveStart: 0, giveEnd: 3, giveStep: 500 * time.Millisecond, wantTimes: 7,
			want: map[string][]int{"a": {1, 1, 2, 2, 1, 1, 0}, "b": {0, 1, 1, 0, 0, 0, 0}}},
		{name: "still working until the end", give: []observe.Execution{x("a", 1, -1)},
			giveStart: 0, giveEnd: 3, giveStep: time.Second, wantTimes: 4, want: map[string][]int{"a": {0, 1, 1, 0}}},
		{name: "outside the window", give: []observe.Execution{x("a", 10, 12)},
			giveStart: 0, giveEnd: 2, giveStep: time.Second, wantTimes: 3, want: map[string][]int{"a": {0, 0, 0}}},
		{name: "step not dividing the window", give: []observe.Execution{x("a", 0, 10)},
			giveStart: 0, giveEnd: 1, giveStep: 400 * time.Millisecond, wantTimes: 3, want: map[string][]int{"a": {1, 1, 1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			times, got := observe.Series(tt.give, at(tt.giveStart), at(tt.giveEnd), tt.giveStep)
			if len(times) != tt.wantTimes {
				t.Fatalf("Series times = %d, want %d", len(times), tt.wantTimes)
			}
			for i, tm := range times {
				if want := at(tt.giveStart).Add(time.Duration(i) * tt.giveStep); !tm.Equal(want) {
					t.Errorf("Series time %d = %v, want %v", i, tm, want)
				}
				if tm.After(at(tt.giveEnd)) {
					t.Errorf("Series time %d = %v, after the end %v", i, tm, at(tt.giveEnd))
				}
			}
			if !maps.EqualFunc(got, tt.want, slices.Equal[[]int]) {
				t.Errorf("Series counts = %v, want %v", got, tt.want)
			}
		})
	}
}

// history is one execution as the fake Step Functions holds it.
type history struct {
	sm, name string
	status   sfntypes.ExecutionStatus
	input    string
	start    float64
	stop     float64 // < 0: no stop date
	events   []sfntypes.HistoryEvent
}

func (h history) arn() string { return h.sm + ":" + h.name }

func entered(name string, sec float64) sfntypes.HistoryEvent {
	return sfntypes.HistoryEvent{
		Type: sfntypes.HistoryEventTypeTaskStateEntered, Timestamp: aws.Time(at(sec)),
		StateEnteredEventDetails: &sfntypes.StateEnteredEventDetails{Name: aws.String(name)},
	}
}

func event(typ sfntypes.HistoryEventType, sec float64) sfntypes.HistoryEvent {
	return sfntypes.HistoryEvent{Type: typ, Timestamp: aws.Time(at(sec))}
}

// fakeSFN serves executions and their histories in pages of two.
type fakeSFN struct {
	mu          sync.Mutex
	execs       []history
	failList    bool
	failHistory string // ARN whose history cannot be read
	cutShort    int    // describes answered with a body cut short, as an emulator under load may
	describes   int
	// stops are the error and cause a stopped execution was given, by name.
	stops map[string][2]string
}

func page[T any](items []T, token *string) ([]T, *string) {
	start := 0
	if token != nil {
		start, _ = strconv.Atoi(*token)
	}
	end := min(start+2, len(items))
	if end < len(items) {
		return items[start:end], aws.String(strconv.Itoa(end))
	}
	return items[start:end], nil
}

func (f *fakeSFN) ListExecutions(_ context.Context, in *sfn.ListExecutionsInput, _ ...func(*sfn.Options)) (*sfn.ListExecutionsOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failList {
		return nil, errors.New("AccessDenied")
	}
	var items []sfntypes.ExecutionListItem
	for _, h := range f.execs {
		if h.sm == aws.ToString(in.StateMachineArn) {
			items = append(items, sfntypes.ExecutionListItem{ExecutionArn: aws.String(h.arn()), Name: aws.String(h.name), Status: h.status})
		}
	}
	got, next := page(items, in.NextToken)
	return &sfn.ListExecutionsOutput{Executions: got, NextToken: next}, nil
}

func (f *fakeSFN) find(arn string) (history, bool) {
	for _, h := range f.execs {
		if h.arn() == arn {
			return h, true
		}
	}
	return history{}, false
}

func (f *fakeSFN) DescribeExecution(_ context.Context, in *sfn.DescribeExecutionInput, _ ...func(*sfn.Options)) (*sfn.DescribeExecutionOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.describes++
	if f.cutShort > 0 {
		f.cutShort--
		return nil, &smithy.DeserializationError{Err: io.ErrUnexpectedEOF}
	}
	h, ok := f.find(aws.ToString(in.ExecutionArn))
	if !ok {
		return nil, errors.New("ExecutionDoesNotExist")
	}
	out := &sfn.DescribeExecutionOutput{
		ExecutionArn: aws.String(h.arn()), Name: aws.String(h.name), Status: h.status,
		StartDate: aws.Time(at(h.start)), Input: aws.String(h.input),
	}
	if h.stop >= 0 {
		out.StopDate = aws.Time(at(h.stop))
	}
	if why, ok := f.stops[h.name]; ok {
		out.Error, out.Cause = aws.String(why[0]), aws.String(why[1])
	}
	return out, nil
}

func (f *fakeSFN) GetExecutionHistory(_ context.Context, in *sfn.GetExecutionHistoryInput, _ ...func(*sfn.Options)) (*sfn.GetExecutionHistoryOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if aws.ToString(in.ExecutionArn) == f.failHistory {
		return nil, errors.New("ThrottlingException")
	}
	h, ok := f.find(aws.ToString(in.ExecutionArn))
	if !ok {
		return nil, errors.New("ExecutionDoesNotExist")
	}
	got, next := page(h.events, in.NextToken)
	return &sfn.GetExecutionHistoryOutput{Events: got, NextToken: next}, nil
}

const (
	smA = "arn:aws:states:us-east-1:123456789012:stateMachine:sample"
	smB = "arn:aws:states:us-east-1:123456789012:stateMachine:mine"
)

func input(typ, id string, lane, attempt int) string {
	return fmt.Sprintf(`{"job":{"id":%q,"type":%q,"lane":%d,"attempt":%d,"submittedAt":"2024-05-01T11:59:00Z"},"input":{"secret":"not read"}}`, id, typ, lane, attempt)
}

func TestCollect(t *testing.T) {
	type want struct {
		status                          string
		start, workEnd, stop            float64 // < 0: zero time
		transitions, releaseTransitions int
		jobType, jobID                  string
		lane, attempt                   int
		err, cause                      string
	}
	tests := []struct {
		name string
		give history
		want want
	}{
		{
			name: "succeeded through Release",
			give: history{smA, "ok", sfntypes.ExecutionStatusSucceeded, input("demo", "j1", 2, 1), 0, 7, []sfntypes.HistoryEvent{
				event(sfntypes.HistoryEventTypeExecutionStarted, 0), entered("Work", 0.1),
				event(sfntypes.HistoryEventTypeTaskStateExited, 4), entered("Release", 5),
				event(sfntypes.HistoryEventTypeTaskStateExited, 6), event(sfntypes.HistoryEventTypeExecutionSucceeded, 7),
			}},
			want: want{status: "SUCCEEDED", start: 0, workEnd: 5, stop: 7, transitions: 2, releaseTransitions: 1, jobType: "demo", jobID: "j1", lane: 2, attempt: 1},
		},
		{
			name: "failed through ReleaseFailed",
			give: history{smA, "bad", sfntypes.ExecutionStatusFailed, input("demo", "j2", 1, 2), 1, 9, []sfntypes.HistoryEvent{
				event(sfntypes.HistoryEventTypeExecutionStarted, 1), entered("Work", 1.5), entered("Wait", 2),
				entered("ReleaseFailed", 3), event(sfntypes.HistoryEventTypeExecutionFailed, 9),
			}},
			want: want{status: "FAILED", start: 1, workEnd: 3, stop: 9, transitions: 3, releaseTransitions: 1, jobType: "demo", jobID: "j2", lane: 1, attempt: 2},
		},
		{
			name: "stopped by a newer job of its key",
			give: history{smA, "aborted", sfntypes.ExecutionStatusAborted, input("pay", "j3", 3, 1), 2, 4, []sfntypes.HistoryEvent{
				event(sfntypes.HistoryEventTypeExecutionStarted, 2), entered("Work", 2.5), event(sfntypes.HistoryEventTypeExecutionAborted, 4),
			}},
			want: want{status: "ABORTED", start: 2, workEnd: 4, stop: 4, transitions: 1, jobType: "pay", jobID: "j3", lane: 3, attempt: 1,
				err: job.ErrorCancelled, cause: job.CancelCause("j9")},
		},
		{
			name: "timed out without a stop date (moto)",
			give: history{smA, "late", sfntypes.ExecutionStatusTimedOut, input("pay", "j4", 1, 1), 3, -1, []sfntypes.HistoryEvent{
				event(sfntypes.HistoryEventTypeExecutionStarted, 3), entered("Work", 3.1), event(sfntypes.HistoryEventTypeExecutionTimedOut, 8),
			}},
			want: want{status: "TIMED_OUT", start: 3, workEnd: 8, stop: 8, transitions: 1, jobType: "pay", jobID: "j4", lane: 1, attempt: 1},
		},
		{
			name: "still working",
			give: history{smA, "busy", sfntypes.ExecutionStatusRunning, input("demo", "j5", 4, 1), 4, -1, []sfntypes.HistoryEvent{
				event(sfntypes.HistoryEventTypeExecutionStarted, 4), entered("Work", 4.2),
			}},
			want: want{status: "RUNNING", start: 4, workEnd: -1, stop: -1, transitions: 1, jobType: "demo", jobID: "j5", lane: 4, attempt: 1},
		},
		{
			name: "releasing while still running",
			give: history{smA, "releasing", sfntypes.ExecutionStatusRunning, input("demo", "j6", 5, 1), 5, -1, []sfntypes.HistoryEvent{
				event(sfntypes.HistoryEventTypeExecutionStarted, 5), entered("Work", 5.1), entered("Release", 6),
			}},
			want: want{status: "RUNNING", start: 5, workEnd: 6, stop: -1, transitions: 2, releaseTransitions: 1, jobType: "demo", jobID: "j6", lane: 5, attempt: 1},
		},
		{
			name: "release entered twice: the first ends the work",
			give: history{smB, "twice", sfntypes.ExecutionStatusSucceeded, input("demo", "j7", 1, 3), 6, 12, []sfntypes.HistoryEvent{
				event(sfntypes.HistoryEventTypeExecutionStarted, 6), entered("Work", 6.5), entered("Release", 8),
				entered("Retry", 9), entered("Release", 10), event(sfntypes.HistoryEventTypeExecutionSucceeded, 12),
			}},
			want: want{status: "SUCCEEDED", start: 6, workEnd: 8, stop: 12, transitions: 4, releaseTransitions: 2, jobType: "demo", jobID: "j7", lane: 1, attempt: 3},
		},
		{
			name: "not a limiter job",
			give: history{smB, "other", sfntypes.ExecutionStatusSucceeded, `{"hello":"world"}`, 7, 8, []sfntypes.HistoryEvent{
				event(sfntypes.HistoryEventTypeExecutionStarted, 7), entered("Pass", 7.5), event(sfntypes.HistoryEventTypeExecutionSucceeded, 8),
			}},
			want: want{status: "SUCCEEDED", start: 7, workEnd: 8, stop: 8, transitions: 1},
		},
	}
	f := &fakeSFN{stops: map[string][2]string{"aborted": {job.ErrorCancelled, job.CancelCause("j9")}}}
	for _, tt := range tests {
		f.execs = append(f.execs, tt.give)
	}
	// Listed newest first, as Step Functions lists them; Collect sorts by start.
	slices.Reverse(f.execs)
	got, err := observe.Collect(context.Background(), f, []string{smA, smB})
	if err != nil {
		t.Fatalf("Collect error: %v", err)
	}
	if len(got) != len(tests) {
		t.Fatalf("Collect returned %d executions, want %d", len(got), len(tests))
	}
	if !slices.IsSortedFunc(got, func(a, b observe.Execution) int { return a.Start.Compare(b.Start) }) {
		t.Errorf("Collect result is not sorted by start")
	}
	byArn := map[string]observe.Execution{}
	for _, e := range got {
		byArn[e.Arn] = e
	}
	tm := func(sec float64) time.Time {
		if sec < 0 {
			return time.Time{}
		}
		return at(sec)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, ok := byArn[tt.give.arn()]
			if !ok {
				t.Fatalf("Collect has no %s", tt.give.arn())
			}
			w := tt.want
			if e.Name != tt.give.name || e.Status != w.status || !e.Start.Equal(tm(w.start)) || !e.WorkEnd.Equal(tm(w.workEnd)) || !e.Stop.Equal(tm(w.stop)) {
				t.Errorf("Collect %s = name %s, status %s, start %v, work end %v, stop %v, want %s, %s, %v, %v, %v",
					tt.give.name, e.Name, e.Status, e.Start, e.WorkEnd, e.Stop, tt.give.name, w.status, tm(w.start), tm(w.workEnd), tm(w.stop))
			}
			if e.Transitions != w.transitions || e.ReleaseTransitions != w.releaseTransitions {
				t.Errorf("Collect %s transitions = %d (release %d), want %d (release %d)", tt.give.name, e.Transitions, e.ReleaseTransitions, w.transitions, w.releaseTransitions)
			}
			if e.Job.Type != w.jobType || e.Job.ID != w.jobID || e.Job.Lane != w.lane || e.Job.Attempt != w.attempt {
				t.Errorf("Collect %s job = %+v, want type %q id %q lane %d attempt %d", tt.give.name, e.Job, w.jobType, w.jobID, w.lane, w.attempt)
			}
			if e.Error != w.err || e.Cause != w.cause {
				t.Errorf("Collect %s error %q cause %q, want %q, %q", tt.give.name, e.Error, e.Cause, w.err, w.cause)
			}
		})
	}
}

// TestCollectThenPeaks: a lane whose job entered its release state exactly when the next job of the
// lane started holds one execution at work, though the first is still RUNNING in Step Functions.
func TestCollectThenPeaks(t *testing.T) {
	f := &fakeSFN{execs: []history{
		{smA, "first", sfntypes.ExecutionStatusSucceeded, input("demo", "a", 1, 1), 0, 12, []sfntypes.HistoryEvent{
			event(sfntypes.HistoryEventTypeExecutionStarted, 0), entered("Work", 0), entered("Release", 10),
			event(sfntypes.HistoryEventTypeExecutionSucceeded, 12),
		}},
		{smA, "second", sfntypes.ExecutionStatusRunning, input("demo", "b", 1, 1), 10, -1, []sfntypes.HistoryEvent{
			event(sfntypes.HistoryEventTypeExecutionStarted, 10), entered("Work", 10),
		}},
		{smA, "other-type", sfntypes.ExecutionStatusRunning, input("pay", "c", 1, 1), 11, -1, []sfntypes.HistoryEvent{
			event(sfntypes.HistoryEventTypeExecutionStarted, 11), entered("Work", 11),
		}},
	}}
	xs, err := observe.Collect(context.Background(), f, []string{smA})
	if err != nil {
		t.Fatalf("Collect error: %v", err)
	}
	got := observe.Peaks(xs, at(20))
	if got["demo"].Max != 1 || got["pay"].Max != 1 || len(got) != 2 {
		t.Errorf("Peaks(Collect) = %v, want demo 1 and pay 1 (the stop date 2 s after the release does not count)", got)
	}
}

func TestCollectErrors(t *testing.T) {
	tests := []struct {
		name     string
		giveList bool
		giveHist string
		wantErr  string
	}{
		{name: "list fails", giveList: true, wantErr: smA},
		{name: "history fails", giveHist: smA + ":b", wantErr: smA + ":b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeSFN{failList: tt.giveList, failHistory: tt.giveHist, execs: []history{
				{smA, "a", sfntypes.ExecutionStatusSucceeded, input("demo", "a", 1, 1), 0, 1, []sfntypes.HistoryEvent{entered("Work", 0)}},
				{smA, "b", sfntypes.ExecutionStatusSucceeded, input("demo", "b", 1, 1), 1, 2, []sfntypes.HistoryEvent{entered("Work", 1)}},
			}}
			got, err := observe.Collect(context.Background(), f, []string{smA})
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Collect = %v, %v, want an error naming %s", got, err, tt.wantErr)
			}
		})
	}
}

// A describe whose answer is cut short (moto answered one with a truncated body during an
// end-to-end run under load) is read again: the measurement is of the limiter, not of one reply.
func TestCollectReadsACutShortDescribeAgain(t *testing.T) {
	f := &fakeSFN{cutShort: 2, execs: []history{
		{smA, "a", sfntypes.ExecutionStatusSucceeded, input("demo", "a", 1, 1), 0, 1, []sfntypes.HistoryEvent{entered("Work", 0)}},
	}}
	got, err := observe.Collect(context.Background(), f, []string{smA})
	if err != nil || len(got) != 1 || got[0].Name != "a" {
		t.Fatalf("Collect = %v, %v, want execution a after two replies cut short", got, err)
	}
}

func TestCollectManyExecutions(t *testing.T) {
	f := &fakeSFN{}
	const n = 50
	for i := range n {
		f.execs = append(f.execs, history{smA, fmt.Sprintf("e%02d", i), sfntypes.ExecutionStatusSucceeded, input("demo", strconv.Itoa(i), i%5+1, 1),
			float64(i), float64(i) + 3, []sfntypes.HistoryEvent{entered("Work", float64(i)), entered("Release", float64(i)+2)}})
	}
	xs, err := observe.Collect(context.Background(), f, []string{smA})
	if err != nil {
		t.Fatalf("Collect error: %v", err)
	}
	if len(xs) != n || f.describes != n {
		t.Fatalf("Collect returned %d executions with %d describes, want %d and %d", len(xs), f.describes, n, n)
	}
	for i, e := range xs {
		if e.Name != fmt.Sprintf("e%02d", i) || !e.WorkEnd.Equal(at(float64(i)+2)) {
			t.Errorf("execution %d = %s ending work %v, want e%02d ending %v", i, e.Name, e.WorkEnd, i, at(float64(i)+2))
		}
	}
	if got := observe.Peaks(xs, at(100))["demo"].Max; got != 2 {
		t.Errorf("Peaks of one start a second, two seconds of work each = %d, want 2", got)
	}
}
