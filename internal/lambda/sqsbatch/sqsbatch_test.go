package sqsbatch_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sfnlimit/sfnlimit/internal/lambda/sqsbatch"
)

const queueURL = "https://sqs.us-east-1.amazonaws.com/123456789012/sfnlimit-lanes.fifo"

// verdict is what the fake SQS does with one entry of one call.
type verdict int

const (
	ok        verdict = iota
	failRetry         // reported in Failed, SenderFault false (SQS's fault: worth retrying)
	failFault         // reported in Failed, SenderFault true (the request's fault)
)

// fakeSQS answers SendMessageBatch with a script: callErr makes a call fail as a whole, decide says
// what happens to each entry. It records every call and how many times each entry was accepted.
type fakeSQS struct {
	mu       sync.Mutex
	calls    [][]string
	accepted map[string]int
	callErr  func(call int) error
	decide   func(call int, id string) verdict
	// maxBatchBytes, if not 0, refuses a whole SendMessageBatch whose messages add up to more, as
	// SQS does (BatchRequestTooLong).
	maxBatchBytes int
	// singles records the entry ids of SendMessage calls, in order; singleErr fails some.
	singles   []string
	singleErr func(try int, id string) error
}

// awsSize is a message's size as the SQS docs count it: the body and each message attribute's name,
// type and value.
func awsSize(body string, attrs map[string]types.MessageAttributeValue) int {
	n := len(body)
	for k, v := range attrs {
		n += len(k) + len(aws.ToString(v.DataType)) + len(aws.ToString(v.StringValue)) + len(v.BinaryValue)
	}
	return n
}

// SendMessage accepts one message; the fake knows it by its body's entry id, passed as the
// deduplication id's suffix or the body itself (see entries and bigEntries).
func (f *fakeSQS) SendMessage(ctx context.Context, in *sqs.SendMessageInput, _ ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	id := idOf(aws.ToString(in.MessageDeduplicationId))
	try := 0
	for _, s := range f.singles {
		if s == id {
			try++
		}
	}
	f.singles = append(f.singles, id)
	if f.singleErr != nil {
		if err := f.singleErr(try, id); err != nil {
			return nil, err
		}
	}
	if f.accepted == nil {
		f.accepted = map[string]int{}
	}
	f.accepted[id]++
	return &sqs.SendMessageOutput{MessageId: aws.String("m-" + id)}, nil
}

// idOf is the entry id at the end of a deduplication id ("payments-job-7" is entry 7).
func idOf(dedup string) string {
	return dedup[strings.LastIndex(dedup, "-")+1:]
}

func (f *fakeSQS) SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, _ ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, err // as the SDK does with a done context
	}
	if aws.ToString(in.QueueUrl) != queueURL {
		return nil, fmt.Errorf("QueueUrl = %q, want %q", aws.ToString(in.QueueUrl), queueURL)
	}
	if len(in.Entries) > 10 {
		return nil, errors.New("AWS.SimpleQueueService.TooManyEntriesInBatchRequest")
	}
	call := len(f.calls)
	var ids []string
	total := 0
	for _, e := range in.Entries {
		ids = append(ids, aws.ToString(e.Id))
		total += awsSize(aws.ToString(e.MessageBody), e.MessageAttributes)
	}
	f.calls = append(f.calls, ids)
	if f.maxBatchBytes > 0 && total > f.maxBatchBytes {
		return nil, &types.BatchRequestTooLong{Message: aws.String(fmt.Sprintf(
			"Batch requests cannot be longer than %d bytes. You have sent %d bytes.", f.maxBatchBytes, total))}
	}
	if f.callErr != nil {
		if err := f.callErr(call); err != nil {
			return nil, err
		}
	}
	out := &sqs.SendMessageBatchOutput{}
	for _, id := range ids {
		v := ok
		if f.decide != nil {
			v = f.decide(call, id)
		}
		switch v {
		case ok:
			if f.accepted == nil {
				f.accepted = map[string]int{}
			}
			f.accepted[id]++
			out.Successful = append(out.Successful, types.SendMessageBatchResultEntry{Id: aws.String(id), MessageId: aws.String("m-" + id)})
		case failRetry:
			out.Failed = append(out.Failed, types.BatchResultErrorEntry{Id: aws.String(id), Code: aws.String("InternalError"), Message: aws.String("try again"), SenderFault: false})
		case failFault:
			out.Failed = append(out.Failed, types.BatchResultErrorEntry{Id: aws.String(id), Code: aws.String("InvalidParameterValue"), Message: aws.String("bad group id"), SenderFault: true})
		}
	}
	return out, nil
}

func entries(n int) []types.SendMessageBatchRequestEntry {
	out := make([]types.SendMessageBatchRequestEntry, n)
	for i := range out {
		id := strconv.Itoa(i)
		out[i] = types.SendMessageBatchRequestEntry{
			Id:                     aws.String(id),
			MessageBody:            aws.String(`{"type":"payments","id":"job-` + id + `"}`),
			MessageGroupId:         aws.String("payments-1"),
			MessageDeduplicationId: aws.String("payments-job-" + id),
		}
	}
	return out
}

func ids(from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, strconv.Itoa(i))
	}
	return out
}

// sleeps records the delays a Sender waits, without waiting.
type sleeps struct {
	mu sync.Mutex
	d  []time.Duration
}

func (s *sleeps) Sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.d = append(s.d, d)
	return ctx.Err()
}

func failureIDs(fs []sqsbatch.Failure) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.ID)
	}
	sort.Slice(out, func(i, j int) bool {
		a, _ := strconv.Atoi(out[i])
		b, _ := strconv.Atoi(out[j])
		return a < b
	})
	return out
}

// checkNoLossNoDouble checks that every entry was accepted exactly once or reported failed, never both.
func checkNoLossNoDouble(t *testing.T, n int, fake *fakeSQS, failed []sqsbatch.Failure) {
	t.Helper()
	isFailed := map[string]bool{}
	for _, f := range failed {
		if isFailed[f.ID] {
			t.Errorf("entry %s reported failed twice", f.ID)
		}
		isFailed[f.ID] = true
	}
	for _, id := range ids(0, n) {
		switch got := fake.accepted[id]; {
		case isFailed[id] && got != 0:
			t.Errorf("entry %s accepted %d times and reported failed", id, got)
		case !isFailed[id] && got != 1:
			t.Errorf("entry %s accepted %d times, want exactly 1", id, got)
		}
	}
}

func TestSendSplitsIntoBatchesOfTen(t *testing.T) {
	tests := []struct {
		name      string
		give      int
		wantSizes []int
	}{
		{name: "none", give: 0, wantSizes: nil},
		{name: "one", give: 1, wantSizes: []int{1}},
		{name: "ten", give: 10, wantSizes: []int{10}},
		{name: "eleven", give: 11, wantSizes: []int{10, 1}},
		{name: "twenty-five", give: 25, wantSizes: []int{10, 10, 5}},
		{name: "thirty", give: 30, wantSizes: []int{10, 10, 10}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := &fakeSQS{}
			s := sqsbatch.NewSender(fake, queueURL)
			sl := &sleeps{}
			s.Sleep = sl.Sleep
			failed, err := s.Send(context.Background(), entries(tt.give))
			if err != nil || len(failed) != 0 {
				t.Fatalf("Send(%d entries) = %v, %v, want no failures", tt.give, failed, err)
			}
			var sizes []int
			var sent []string
			for _, c := range fake.calls {
				sizes = append(sizes, len(c))
				sent = append(sent, c...)
			}
			if !reflect.DeepEqual(sizes, tt.wantSizes) {
				t.Errorf("Send(%d entries) made calls of %v entries, want %v", tt.give, sizes, tt.wantSizes)
			}
			if !slices.Equal(sent, ids(0, tt.give)) {
				t.Errorf("Send(%d entries) sent %v, want each entry once in order", tt.give, sent)
			}
			if len(sl.d) != 0 {
				t.Errorf("Send(%d entries) slept %v, want no sleep", tt.give, sl.d)
			}
			checkNoLossNoDouble(t, tt.give, fake, failed)
		})
	}
}

func TestSendRetries(t *testing.T) {
	errNet := errors.New("connection reset by peer")
	tests := []struct {
		name      string
		give      int
		callErr   func(call int) error
		decide    func(call int, id string) verdict
		wantCalls [][]string
		wantFail  []string
		wantCode  map[string]string
	}{
		{
			name: "failed entries succeed on retry",
			give: 10,
			decide: func(call int, id string) verdict {
				if call == 0 && (id == "3" || id == "7") {
					return failRetry
				}
				return ok
			},
			wantCalls: [][]string{ids(0, 10), {"3", "7"}},
		},
		{
			name: "retried over several tries, successes never resent",
			give: 10,
			decide: func(call int, id string) verdict {
				switch {
				case call == 0 && id != "0":
					return failRetry
				case call == 1 && (id == "4" || id == "5"):
					return failRetry
				case call == 2 && id == "5":
					return failRetry
				}
				return ok
			},
			wantCalls: [][]string{ids(0, 10), ids(1, 10), {"4", "5"}, {"5"}},
		},
		{
			name: "an entry that keeps failing is tried Attempts times, then returned",
			give: 4,
			decide: func(call int, id string) verdict {
				if id == "2" {
					return failRetry
				}
				return ok
			},
			wantCalls: [][]string{ids(0, 4), {"2"}, {"2"}, {"2"}, {"2"}},
			wantFail:  []string{"2"},
			wantCode:  map[string]string{"2": "InternalError"},
		},
		{
			name: "sender faults only: not retried",
			give: 5,
			decide: func(call int, id string) verdict {
				if id == "1" || id == "4" {
					return failFault
				}
				return ok
			},
			wantCalls: [][]string{ids(0, 5)},
			wantFail:  []string{"1", "4"},
			wantCode:  map[string]string{"1": "InvalidParameterValue", "4": "InvalidParameterValue"},
		},
		{
			name: "sender fault beside a retryable failure: only the sender fault is returned",
			give: 5,
			decide: func(call int, id string) verdict {
				switch {
				case id == "1":
					return failFault
				case call == 0 && id == "2":
					return failRetry
				}
				return ok
			},
			wantFail: []string{"1"},
			wantCode: map[string]string{"1": "InvalidParameterValue"},
		},
		{
			name: "whole call fails once, then succeeds",
			give: 3,
			callErr: func(call int) error {
				if call == 0 {
					return errNet
				}
				return nil
			},
			wantCalls: [][]string{ids(0, 3), ids(0, 3)},
		},
		{
			name:      "whole call always fails: every entry returned after Attempts",
			give:      3,
			callErr:   func(int) error { return errNet },
			wantCalls: [][]string{ids(0, 3), ids(0, 3), ids(0, 3), ids(0, 3), ids(0, 3)},
			wantFail:  ids(0, 3),
		},
		{
			name: "second batch fails as a whole, first batch not resent",
			give: 15,
			callErr: func(call int) error {
				if call == 1 {
					return errNet
				}
				return nil
			},
			wantCalls: [][]string{ids(0, 10), ids(10, 15), ids(10, 15)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := &fakeSQS{callErr: tt.callErr, decide: tt.decide}
			s := sqsbatch.NewSender(fake, queueURL)
			sl := &sleeps{}
			s.Sleep = sl.Sleep
			failed, err := s.Send(context.Background(), entries(tt.give))
			if err != nil {
				t.Fatalf("Send(%d entries) error = %v, want nil (the context is not cancelled)", tt.give, err)
			}
			if got := failureIDs(failed); !slices.Equal(got, tt.wantFail) {
				t.Errorf("Send(%d entries) failures = %v, want %v", tt.give, got, tt.wantFail)
			}
			for _, f := range failed {
				if want, ok := tt.wantCode[f.ID]; ok && f.Code != want {
					t.Errorf("failure %s Code = %q, want %q", f.ID, f.Code, want)
				}
				if f.Message == "" {
					t.Errorf("failure %s has no Message, want the reason SQS or the client gave", f.ID)
				}
			}
			if tt.wantCalls != nil && !reflect.DeepEqual(fake.calls, tt.wantCalls) {
				t.Errorf("Send(%d entries) calls = %v, want %v", tt.give, fake.calls, tt.wantCalls)
			}
			if want := len(fake.calls) - (tt.give+9)/10; len(sl.d) != want {
				t.Errorf("Send(%d entries) slept %d times for %d retries, want one sleep before each retry", tt.give, len(sl.d), want)
			}
			checkNoLossNoDouble(t, tt.give, fake, failed)
		})
	}
}

func TestSendWholeCallFailureMessage(t *testing.T) {
	fake := &fakeSQS{callErr: func(int) error { return errors.New("connection reset by peer") }}
	s := sqsbatch.NewSender(fake, queueURL)
	s.Sleep = (&sleeps{}).Sleep
	failed, err := s.Send(context.Background(), entries(2))
	if err != nil || len(failed) != 2 {
		t.Fatalf("Send(2 entries) = %v, %v, want 2 failures and no error", failed, err)
	}
	for _, f := range failed {
		if !strings.Contains(f.Message, "connection reset by peer") {
			t.Errorf("failure %s Message = %q, want the client's error", f.ID, f.Message)
		}
	}
}

func TestSendAttempts(t *testing.T) {
	tests := []struct {
		name         string
		giveAttempts int
		wantCalls    int
	}{
		{name: "one", giveAttempts: 1, wantCalls: 1},
		{name: "two", giveAttempts: 2, wantCalls: 2},
		{name: "eight", giveAttempts: 8, wantCalls: 8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := &fakeSQS{decide: func(int, string) verdict { return failRetry }}
			s := sqsbatch.NewSender(fake, queueURL)
			s.Attempts = tt.giveAttempts
			s.Sleep = (&sleeps{}).Sleep
			failed, err := s.Send(context.Background(), entries(1))
			if err != nil || len(failed) != 1 {
				t.Fatalf("Send = %v, %v, want 1 failure", failed, err)
			}
			if len(fake.calls) != tt.wantCalls {
				t.Errorf("Attempts %d: %d calls, want %d", tt.giveAttempts, len(fake.calls), tt.wantCalls)
			}
		})
	}
}

// The default policy waits exponentially longer from 100 ms (at most 2 s), with jitter of half the interval.
func TestSendBackoffGrows(t *testing.T) {
	const attempts = 8
	var firsts []time.Duration
	for run := range 20 {
		fake := &fakeSQS{decide: func(int, string) verdict { return failRetry }}
		s := sqsbatch.NewSender(fake, queueURL)
		s.Attempts = attempts
		sl := &sleeps{}
		s.Sleep = sl.Sleep
		if failed, err := s.Send(context.Background(), entries(3)); err != nil || len(failed) != 3 {
			t.Fatalf("Send = %v, %v, want 3 failures", failed, err)
		}
		if len(sl.d) != attempts-1 {
			t.Fatalf("run %d: slept %d times, want %d", run, len(sl.d), attempts-1)
		}
		for k, d := range sl.d {
			interval := min(100*time.Millisecond<<k, 2*time.Second)
			lo, hi := interval/2, interval+interval/2+time.Millisecond
			if d < lo || d > hi {
				t.Errorf("run %d: delay before retry %d = %v, want %v..%v", run, k+1, d, lo, hi)
			}
		}
		if first, last := sl.d[0], sl.d[len(sl.d)-1]; last <= 4*first {
			t.Errorf("run %d: delays %v do not grow: last %v, first %v", run, sl.d, last, first)
		}
		firsts = append(firsts, sl.d[0])
	}
	slices.Sort(firsts)
	if firsts[0] == firsts[len(firsts)-1] {
		t.Errorf("first delay was %v in all 20 runs, want jitter", firsts[0])
	}
}

func TestSendContextCancelled(t *testing.T) {
	tests := []struct {
		name     string
		give     int
		decide   func(call int, id string) verdict
		wantFail []string
	}{
		{
			name: "during the first batch",
			give: 25,
			decide: func(call int, id string) verdict {
				if id == "3" {
					return failRetry
				}
				return ok
			},
			wantFail: append([]string{"3"}, ids(10, 25)...),
		},
		{
			name: "during the second batch",
			give: 25,
			decide: func(call int, id string) verdict {
				if id == "12" || id == "13" {
					return failRetry
				}
				return ok
			},
			wantFail: append([]string{"12", "13"}, ids(20, 25)...),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			fake := &fakeSQS{decide: tt.decide}
			s := sqsbatch.NewSender(fake, queueURL)
			// The Lambda deadline arrives while the sender waits to retry.
			s.Sleep = func(ctx context.Context, _ time.Duration) error { cancel(); return ctx.Err() }
			failed, err := s.Send(ctx, entries(tt.give))
			if !errors.Is(err, context.Canceled) {
				t.Errorf("Send error = %v, want context.Canceled", err)
			}
			if got := failureIDs(failed); !slices.Equal(got, tt.wantFail) {
				t.Errorf("Send failures = %v, want %v", got, tt.wantFail)
			}
			checkNoLossNoDouble(t, tt.give, fake, failed)
		})
	}
}

// With the real sleep, a done context ends the wait at once and nothing is lost.
func TestSendContextDoneRealSleep(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	fake := &fakeSQS{}
	s := sqsbatch.NewSender(fake, queueURL)
	s.Attempts = 1000
	start := time.Now()
	failed, err := s.Send(ctx, entries(25))
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("Send with a done context took %v, want it to return at once", took)
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Send error = %v, want context.Canceled", err)
	}
	if got := failureIDs(failed); !slices.Equal(got, ids(0, 25)) {
		t.Errorf("Send failures = %v, want every entry", got)
	}
}
