package esm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

const fakeURL = "http://sqs.local/123456789012/lanes.fifo"

// fakeSQS is an sqsAPI whose receives are scripted: each call takes the next scripted answer; a
// scripted answer may block until its gate is closed. Past the script, receives return nothing.
type fakeSQS struct {
	mu       sync.Mutex
	script   []receive
	receives []*sqs.ReceiveMessageInput
	deletes  []*sqs.DeleteMessageBatchInput
	changes  []*sqs.ChangeMessageVisibilityBatchInput
	// receiving gets a value each time a scripted receive starts.
	receiving chan struct{}
}

type receive struct {
	gate chan struct{} // nil: answer at once
	msgs []types.Message
	err  error
}

func (f *fakeSQS) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, _ ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	f.mu.Lock()
	f.receives = append(f.receives, in)
	if len(f.script) == 0 {
		f.mu.Unlock()
		select { // an empty long poll, cut short when the caller gives up
		case <-ctx.Done():
		case <-time.After(5 * time.Millisecond):
		}
		return &sqs.ReceiveMessageOutput{}, nil
	}
	r := f.script[0]
	f.script = f.script[1:]
	f.mu.Unlock()
	if f.receiving != nil {
		f.receiving <- struct{}{}
	}
	if r.gate != nil {
		select {
		case <-r.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if r.err != nil {
		return nil, r.err
	}
	return &sqs.ReceiveMessageOutput{Messages: r.msgs}, nil
}

func (f *fakeSQS) DeleteMessageBatch(_ context.Context, in *sqs.DeleteMessageBatchInput, _ ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deletes = append(f.deletes, in)
	out := &sqs.DeleteMessageBatchOutput{}
	for _, e := range in.Entries {
		out.Successful = append(out.Successful, types.DeleteMessageBatchResultEntry{Id: e.Id})
	}
	return out, nil
}

func (f *fakeSQS) ChangeMessageVisibilityBatch(_ context.Context, in *sqs.ChangeMessageVisibilityBatchInput, _ ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.changes = append(f.changes, in)
	out := &sqs.ChangeMessageVisibilityBatchOutput{}
	for _, e := range in.Entries {
		out.Successful = append(out.Successful, types.ChangeMessageVisibilityBatchResultEntry{Id: e.Id})
	}
	return out, nil
}

func messages(prefix string, n int) []types.Message {
	var out []types.Message
	for i := range n {
		out = append(out, types.Message{
			MessageId:     aws.String(fmt.Sprintf("%s-id-%d", prefix, i)),
			ReceiptHandle: aws.String(fmt.Sprintf("%s-rh-%d", prefix, i)),
			Body:          aws.String(fmt.Sprintf("%s-body-%d", prefix, i)),
			Attributes:    map[string]string{"MessageGroupId": prefix},
		})
	}
	return out
}

func handles(ms []types.Message) []string {
	var out []string
	for _, m := range ms {
		out = append(out, aws.ToString(m.ReceiptHandle))
	}
	slices.Sort(out)
	return out
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// TestShutdownReturnsUnhandledMessages: messages whose receive completes after shutdown began are
// never handed to the handler and are made visible again at once (visibility 0), not left
// invisible for a whole visibility timeout.
func TestShutdownReturnsUnhandledMessages(t *testing.T) {
	tests := []struct {
		name        string
		givePollers int
		givePerPoll int
		giveErr     error // what the blocked receives end with instead of messages
		giveWait    time.Duration
	}{
		{name: "one poller, one message", givePollers: 1, givePerPoll: 1, giveWait: 20 * time.Second},
		{name: "one poller, a full batch", givePollers: 1, givePerPoll: 10, giveWait: 20 * time.Second},
		{name: "three pollers", givePollers: 3, givePerPoll: 2, giveWait: 20 * time.Second},
		{name: "short polling", givePollers: 2, givePerPoll: 4},
		{name: "receive fails during shutdown", givePollers: 2, givePerPoll: 0, giveErr: errors.New("connection reset"), giveWait: 20 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gate := make(chan struct{})
			f := &fakeSQS{receiving: make(chan struct{}, tt.givePollers)}
			var want []types.Message
			for i := range tt.givePollers {
				ms := messages(fmt.Sprintf("p%d", i), tt.givePerPoll)
				want = append(want, ms...)
				f.script = append(f.script, receive{gate: gate, msgs: ms, err: tt.giveErr})
			}
			var handled sync.Mutex
			var calls int
			p := &Poller{
				Client: f, QueueURL: fakeURL, BatchSize: 10, Wait: tt.giveWait, Concurrency: tt.givePollers,
				Handler: func(context.Context, events.SQSEvent) (events.SQSEventResponse, error) {
					handled.Lock()
					calls++
					handled.Unlock()
					return events.SQSEventResponse{}, nil
				},
				Log: quiet(),
			}
			ctx, cancel := context.WithCancel(context.Background())
			returned := make(chan struct{})
			go func() {
				defer close(returned)
				p.Run(ctx)
			}()
			for range tt.givePollers {
				select {
				case <-f.receiving:
				case <-time.After(time.Minute): // bounds stuck pollers only
					t.Fatal("pollers did not all start receiving")
				}
			}
			cancel()
			// The receives in flight are not cut short by the shutdown: the queue answers them.
			select {
			case <-returned:
				t.Fatal("Run returned while its receives were still in progress (their messages would be lost for a visibility timeout)")
			case <-time.After(50 * time.Millisecond):
			}
			close(gate)
			select {
			case <-returned:
			case <-time.After(30 * time.Second): // bounds a stuck Run only
				t.Fatal("Run did not return within 30 s of the receives completing after cancel")
			}

			handled.Lock()
			defer handled.Unlock()
			if calls != 0 {
				t.Errorf("handler calls = %d, want 0 (shutdown had begun when the messages arrived)", calls)
			}
			if len(f.deletes) != 0 {
				t.Errorf("DeleteMessageBatch calls = %d, want 0", len(f.deletes))
			}
			var got []types.ChangeMessageVisibilityBatchRequestEntry
			for _, c := range f.changes {
				if aws.ToString(c.QueueUrl) != fakeURL {
					t.Errorf("ChangeMessageVisibilityBatch queue = %q, want %q", aws.ToString(c.QueueUrl), fakeURL)
				}
				if len(c.Entries) > 10 {
					t.Errorf("ChangeMessageVisibilityBatch with %d entries, want at most 10", len(c.Entries))
				}
				ids := map[string]bool{}
				for _, e := range c.Entries {
					if ids[aws.ToString(e.Id)] {
						t.Errorf("ChangeMessageVisibilityBatch entry id %q repeated in one call", aws.ToString(e.Id))
					}
					ids[aws.ToString(e.Id)] = true
				}
				got = append(got, c.Entries...)
			}
			var gotHandles []string
			for _, e := range got {
				if e.VisibilityTimeout != 0 {
					t.Errorf("visibility of %s = %d, want 0 (visible again at once)", aws.ToString(e.ReceiptHandle), e.VisibilityTimeout)
				}
				gotHandles = append(gotHandles, aws.ToString(e.ReceiptHandle))
			}
			slices.Sort(gotHandles)
			if wantHandles := handles(want); !slices.Equal(gotHandles, wantHandles) {
				t.Errorf("receipt handles made visible = %v, want %v", gotHandles, wantHandles)
			}
			if st := p.Stats(); st != (Stats{}) {
				t.Errorf("Stats() = %+v, want zero", st)
			}
		})
	}
}

// TestSettlement checks, call by call, what the poller asks of SQS after an invocation, and what
// it asks for in its receives.
func TestSettlement(t *testing.T) {
	tests := []struct {
		name        string
		give        int      // messages in the batch
		giveFail    []int    // indexes reported as batch item failures
		giveErr     error    // the handler's error
		wantDeleted []string // receipt handles deleted
	}{
		{name: "all succeed", give: 3, wantDeleted: []string{"b-rh-0", "b-rh-1", "b-rh-2"}},
		{name: "one reported", give: 3, giveFail: []int{1}, wantDeleted: []string{"b-rh-0", "b-rh-2"}},
		{name: "all reported", give: 2, giveFail: []int{0, 1}},
		{name: "handler error", give: 3, giveFail: []int{0}, giveErr: errors.New("boom")},
		{name: "full batch", give: 10, giveFail: []int{9}, wantDeleted: handles(messages("b", 9))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msgs := messages("b", tt.give)
			f := &fakeSQS{script: []receive{{msgs: msgs}}}
			var (
				mu   sync.Mutex
				seen []events.SQSEvent
				done = make(chan struct{})
			)
			p := &Poller{
				Client: f, QueueURL: fakeURL, QueueARN: "arn:aws:sqs:us-east-1:123456789012:lanes.fifo", Region: "us-east-1",
				BatchSize: 10, Wait: 3 * time.Second, Concurrency: 1, Log: quiet(),
				Handler: func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
					mu.Lock()
					seen = append(seen, ev)
					mu.Unlock()
					defer close(done)
					var resp events.SQSEventResponse
					for _, i := range tt.giveFail {
						resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: ev.Records[i].MessageId})
					}
					time.Sleep(10 * time.Millisecond)
					return resp, tt.giveErr
				},
			}
			ctx, cancel := context.WithCancel(context.Background())
			returned := make(chan struct{})
			go func() {
				defer close(returned)
				p.Run(ctx)
			}()
			select {
			case <-done:
			case <-time.After(time.Minute): // bounds a stuck poller only
				t.Fatal("handler was not called")
			}
			cancel()
			select {
			case <-returned:
			case <-time.After(30 * time.Second):
				t.Fatal("Run did not return within 30 s of cancel")
			}

			f.mu.Lock()
			defer f.mu.Unlock()
			in := f.receives[0]
			if in.MaxNumberOfMessages != 10 || in.WaitTimeSeconds != 3 || aws.ToString(in.QueueUrl) != fakeURL {
				t.Errorf("ReceiveMessage(%s, max %d, wait %d), want (%s, max 10, wait 3)", aws.ToString(in.QueueUrl), in.MaxNumberOfMessages, in.WaitTimeSeconds, fakeURL)
			}
			if !slices.Contains(in.MessageSystemAttributeNames, types.MessageSystemAttributeNameAll) || !slices.Contains(in.MessageAttributeNames, "All") {
				t.Errorf("ReceiveMessage asks for attributes %v and message attributes %v, want All of both", in.MessageSystemAttributeNames, in.MessageAttributeNames)
			}
			if len(seen) != 1 || len(seen[0].Records) != tt.give {
				t.Fatalf("handler events = %d, want 1 event of %d records", len(seen), tt.give)
			}
			for i, r := range seen[0].Records {
				if r.MessageId != aws.ToString(msgs[i].MessageId) || r.ReceiptHandle != aws.ToString(msgs[i].ReceiptHandle) || r.Body != aws.ToString(msgs[i].Body) ||
					r.Attributes["MessageGroupId"] != "b" || r.EventSource != "aws:sqs" || r.EventSourceARN != p.QueueARN || r.AWSRegion != "us-east-1" {
					t.Errorf("record %d = %+v, want message %s of the batch from %s", i, r, aws.ToString(msgs[i].MessageId), p.QueueARN)
				}
			}
			var deleted []string
			for _, d := range f.deletes {
				for _, e := range d.Entries {
					deleted = append(deleted, aws.ToString(e.ReceiptHandle))
				}
			}
			slices.Sort(deleted)
			if !slices.Equal(deleted, tt.wantDeleted) {
				t.Errorf("deleted %v, want %v", deleted, tt.wantDeleted)
			}
			if len(f.changes) != 0 {
				t.Errorf("ChangeMessageVisibilityBatch calls = %d, want 0 (reported messages wait out their visibility timeout)", len(f.changes))
			}
			wantErrs := 0
			if tt.giveErr != nil {
				wantErrs = 1
			}
			if st := p.Stats(); st.Invocations != 1 || st.Messages != tt.give || st.Errors != wantErrs || st.Busy < 10*time.Millisecond {
				t.Errorf("Stats() = %+v, want 1 invocation, %d messages, %d errors, busy at least 10ms", st, tt.give, wantErrs)
			}
		})
	}
}

// TestInvocationTimeout: the handler's context carries the poller's Timeout, like a function's.
func TestInvocationTimeout(t *testing.T) {
	tests := []struct {
		name string
		give time.Duration
		want time.Duration
	}{
		{name: "set", give: 2 * time.Second, want: 2 * time.Second},
		{name: "unset is 30 s", give: 0, want: 30 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeSQS{script: []receive{{msgs: messages("t", 1)}}}
			left := make(chan time.Duration, 1)
			// The deadline was set between began and the handler's call: the time left is at
			// most the timeout and at least the timeout less the time that passed, however slow
			// the machine.
			var passed time.Duration
			began := time.Now()
			p := &Poller{
				Client: f, QueueURL: fakeURL, BatchSize: 1, Concurrency: 1, Timeout: tt.give, Log: quiet(),
				Handler: func(ctx context.Context, _ events.SQSEvent) (events.SQSEventResponse, error) {
					d, ok := ctx.Deadline()
					passed = time.Since(began)
					if !ok {
						left <- -1
					} else {
						left <- time.Until(d)
					}
					return events.SQSEventResponse{}, nil
				},
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			returned := make(chan struct{})
			go func() {
				defer close(returned)
				p.Run(ctx)
			}()
			var got time.Duration
			select {
			case got = <-left:
			case <-time.After(time.Minute):
				t.Fatal("handler was not called")
			}
			cancel()
			<-returned
			if got > tt.want || got < tt.want-passed {
				t.Errorf("handler deadline in %v, want %v less at most the %v that passed", got, tt.want, passed)
			}
		})
	}
}

// TestDuplicateDelivery: with SetDuplicates a batch reaches the handler twice, records and receipt
// handles alike, and each invocation is settled; without it, once. A copy still waiting for its
// delay when the poller stops is never delivered, and Run does not wait for the delay.
func TestDuplicateDelivery(t *testing.T) {
	tests := []struct {
		name        string
		rate        float64
		within      time.Duration
		stopAfter   int // handler calls to wait for before stopping
		wantCalls   int
		wantDups    int
		wantDeletes int
	}{
		{name: "off", rate: 0, stopAfter: 1, wantCalls: 1, wantDeletes: 1},
		{name: "every batch twice", rate: 1, within: 50 * time.Millisecond, stopAfter: 2, wantCalls: 2, wantDups: 1, wantDeletes: 2},
		{name: "copy pending at shutdown", rate: 1, within: time.Hour, stopAfter: 1, wantCalls: 1, wantDups: 1, wantDeletes: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msgs := messages("d", 3)
			f := &fakeSQS{script: []receive{{msgs: msgs}}}
			var (
				mu    sync.Mutex
				seen  []events.SQSEvent
				calls = make(chan struct{}, 4)
			)
			p := &Poller{
				Client: f, QueueURL: fakeURL, QueueARN: "arn:aws:sqs:us-east-1:123456789012:lanes.fifo", Region: "us-east-1",
				BatchSize: 10, Concurrency: 1, Log: quiet(),
				Handler: func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
					mu.Lock()
					seen = append(seen, ev)
					mu.Unlock()
					calls <- struct{}{}
					return events.SQSEventResponse{BatchItemFailures: []events.SQSBatchItemFailure{{ItemIdentifier: ev.Records[1].MessageId}}}, nil
				},
			}
			p.SetDuplicates(tt.rate, tt.within)
			p.dupJitter = func(within time.Duration) time.Duration { return within } // the longest delay
			ctx, cancel := context.WithCancel(context.Background())
			returned := make(chan struct{})
			go func() {
				defer close(returned)
				p.Run(ctx)
			}()
			for i := range tt.stopAfter {
				select {
				case <-calls:
				case <-time.After(10 * time.Second):
					t.Fatalf("handler called %d times, want %d", i, tt.stopAfter)
				}
			}
			cancel()
			select {
			case <-returned:
			case <-time.After(5 * time.Second):
				t.Fatal("Run did not return within 5 s of cancel")
			}
			mu.Lock()
			defer mu.Unlock()
			if len(seen) != tt.wantCalls {
				t.Fatalf("handler calls = %d, want %d", len(seen), tt.wantCalls)
			}
			for _, ev := range seen {
				for i, r := range ev.Records {
					if r.MessageId != aws.ToString(msgs[i].MessageId) || r.ReceiptHandle != aws.ToString(msgs[i].ReceiptHandle) {
						t.Errorf("record %d = %s/%s, want message %s with its receipt handle", i, r.MessageId, r.ReceiptHandle, aws.ToString(msgs[i].MessageId))
					}
				}
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			if len(f.deletes) != tt.wantDeletes {
				t.Errorf("DeleteMessageBatch calls = %d, want %d (each invocation settled)", len(f.deletes), tt.wantDeletes)
			}
			for _, d := range f.deletes {
				var got []string
				for _, e := range d.Entries {
					got = append(got, aws.ToString(e.ReceiptHandle))
				}
				if want := []string{"d-rh-0", "d-rh-2"}; !slices.Equal(got, want) {
					t.Errorf("deleted %v, want %v (the reported record stays in flight)", got, want)
				}
			}
			if st := p.Stats(); st.Duplicates != tt.wantDups || st.Invocations != tt.wantCalls {
				t.Errorf("Stats() = %+v, want %d duplicates, %d invocations", st, tt.wantDups, tt.wantCalls)
			}
		})
	}
}

// TestStatsCountFailures: a handler that runs out of its Timeout counts as a failed invocation and a
// timeout; one that reports batch item failures counts those messages.
func TestStatsCountFailures(t *testing.T) {
	tests := []struct {
		name    string
		handler Handler
		want    Stats
	}{
		{
			name: "timed out",
			handler: func(ctx context.Context, _ events.SQSEvent) (events.SQSEventResponse, error) {
				<-ctx.Done()
				return events.SQSEventResponse{}, ctx.Err()
			},
			want: Stats{Invocations: 1, Errors: 1, Timeouts: 1, Messages: 2},
		},
		{
			name: "failed",
			handler: func(context.Context, events.SQSEvent) (events.SQSEventResponse, error) {
				return events.SQSEventResponse{}, errors.New("boom")
			},
			want: Stats{Invocations: 1, Errors: 1, Messages: 2},
		},
		{
			name: "item failures",
			handler: func(_ context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
				return events.SQSEventResponse{BatchItemFailures: []events.SQSBatchItemFailure{{ItemIdentifier: ev.Records[0].MessageId}}}, nil
			},
			want: Stats{Invocations: 1, FailedItems: 1, Messages: 2},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeSQS{script: []receive{{msgs: messages("t", 2)}}}
			p := &Poller{Client: f, QueueURL: fakeURL, BatchSize: 10, Concurrency: 1, Timeout: 50 * time.Millisecond, Log: quiet(), Handler: tt.handler}
			ctx, cancel := context.WithCancel(context.Background())
			returned := make(chan struct{})
			go func() {
				defer close(returned)
				p.Run(ctx)
			}()
			deadline := time.Now().Add(time.Minute)
			for p.Stats().Invocations == 0 && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			cancel()
			<-returned
			got := p.Stats()
			got.Busy = 0
			if got != tt.want {
				t.Errorf("Stats() = %+v, want %+v", got, tt.want)
			}
		})
	}
}
