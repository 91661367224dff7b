package esm_test

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sfnlimit/sfnlimit/internal/tools/emulator"
	"github.com/sfnlimit/sfnlimit/internal/tools/local/esm"
)

const region = "us-east-1"

// backend is an SQS emulator, started on first use and stopped by TestMain.
type backend struct {
	name  string
	start func(context.Context) (*emulator.Process, error)

	once sync.Once
	proc *emulator.Process
	err  error
}

var (
	fauxqs = &backend{name: "fauxqs", start: func(ctx context.Context) (*emulator.Process, error) {
		return emulator.StartFauxqs(ctx, emulator.FauxqsOptions{})
	}}
	moto = &backend{name: "moto", start: func(ctx context.Context) (*emulator.Process, error) {
		return emulator.StartMoto(ctx, emulator.MotoOptions{})
	}}
)

func TestMain(m *testing.M) {
	code := m.Run()
	for _, b := range []*backend{fauxqs, moto} {
		if b.proc != nil {
			if err := b.proc.Stop(); err != nil {
				fmt.Fprintf(os.Stderr, "stop %s: %v\n", b.name, err)
			}
		}
	}
	os.Exit(code)
}

// client starts the backend if need be and returns an SQS client for it.
func (b *backend) client(t *testing.T) *sqs.Client {
	t.Helper()
	b.once.Do(func() { b.proc, b.err = b.start(context.Background()) })
	if b.err != nil {
		t.Fatalf("start %s: %v (fauxqs needs `npm ci` at the repository root; moto is preinstalled)", b.name, b.err)
	}
	return sqs.NewFromConfig(aws.Config{
		Region:      region,
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
	}, func(o *sqs.Options) { o.BaseEndpoint = aws.String(b.proc.Endpoint()) })
}

var queueSeq atomic.Int64

// newQueue creates a queue named after the test and returns its URL and ARN.
func newQueue(t *testing.T, c *sqs.Client, fifo bool, visibility int) (url, arn string) {
	t.Helper()
	ctx := context.Background()
	name := regexp.MustCompile(`[^A-Za-z0-9_-]+`).ReplaceAllString(t.Name(), "-")
	name = fmt.Sprintf("%.60s-%d", name, queueSeq.Add(1))
	attrs := map[string]string{"VisibilityTimeout": strconv.Itoa(visibility)}
	if fifo {
		name += ".fifo"
		attrs["FifoQueue"] = "true"
	}
	out, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
	if err != nil {
		t.Fatalf("CreateQueue(%s) error: %v", name, err)
	}
	a, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: out.QueueUrl, AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn},
	})
	if err != nil {
		t.Fatalf("GetQueueAttributes(%s) error: %v", name, err)
	}
	return aws.ToString(out.QueueUrl), a.Attributes[string(sqstypes.QueueAttributeNameQueueArn)]
}

// send sends bodies; on a FIFO queue each body is its own message group (so that a message held in
// flight blocks no other) unless group is set.
func send(t *testing.T, c *sqs.Client, url string, fifo bool, group string, bodies ...string) map[string]string {
	t.Helper()
	ids := map[string]string{} // body -> message id
	for i, b := range bodies {
		in := &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(b)}
		if fifo {
			g := group
			if g == "" {
				g = "g-" + b
			}
			in.MessageGroupId = aws.String(g)
			in.MessageDeduplicationId = aws.String(fmt.Sprintf("d-%d-%s", i, b))
		}
		out, err := c.SendMessage(context.Background(), in)
		if err != nil {
			t.Fatalf("SendMessage(%s) error: %v", b, err)
		}
		ids[b] = aws.ToString(out.MessageId)
	}
	return ids
}

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// run runs p until done reports true (or 15 s pass), then cancels it; it fails the test if Run does
// not return within bound of the cancel.
func run(t *testing.T, p *esm.Poller, done func() bool, bound time.Duration) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		p.Run(ctx)
	}()
	// Only bounds a poller that stopped making progress: a passing run never waits for it.
	deadline := time.Now().Add(2 * time.Minute)
	for !done() {
		if time.Now().After(deadline) {
			cancel()
			<-returned
			t.Fatalf("poller did not get there in 2 minutes; stats %+v", p.Stats())
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	select {
	case <-returned:
	case <-time.After(bound):
		t.Fatalf("Run did not return within %v of its context's cancel", bound)
		<-returned
	}
}

// receiveTime is the longest of three empty short-poll receives from url: how long the emulator
// takes to answer in this run.
func receiveTime(t *testing.T, c *sqs.Client, url string) time.Duration {
	t.Helper()
	var worst time.Duration
	for range 3 {
		began := time.Now()
		if _, err := c.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: &url, WaitTimeSeconds: 0}); err != nil {
			t.Fatal(err)
		}
		worst = max(worst, time.Since(began))
	}
	return worst
}

// recorder is a handler that keeps every event it was given.
type recorder struct {
	mu     sync.Mutex
	events []events.SQSEvent
	// respond decides the handler's answer to one event.
	respond func(events.SQSEvent) (events.SQSEventResponse, error)
}

func (r *recorder) handle(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	r.mu.Lock()
	r.events = append(r.events, ev)
	r.mu.Unlock()
	if r.respond == nil {
		return events.SQSEventResponse{}, nil
	}
	return r.respond(ev)
}

func (r *recorder) records() []events.SQSMessage {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []events.SQSMessage
	for _, ev := range r.events {
		out = append(out, ev.Records...)
	}
	return out
}

// distinct returns how many different messages the handler saw.
func (r *recorder) distinct() int {
	seen := map[string]bool{}
	for _, m := range r.records() {
		seen[m.MessageId] = true
	}
	return len(seen)
}

func queueCounts(t *testing.T, c *sqs.Client, url string) (visible, inFlight int) {
	t.Helper()
	out, err := c.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url),
		AttributeNames: []sqstypes.QueueAttributeName{
			sqstypes.QueueAttributeNameApproximateNumberOfMessages,
			sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
		},
	})
	if err != nil {
		t.Fatalf("GetQueueAttributes(%s) error: %v", url, err)
	}
	v, err1 := strconv.Atoi(out.Attributes[string(sqstypes.QueueAttributeNameApproximateNumberOfMessages)])
	n, err2 := strconv.Atoi(out.Attributes[string(sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible)])
	if err := errors.Join(err1, err2); err != nil {
		t.Fatalf("GetQueueAttributes(%s) = %v: %v", url, out.Attributes, err)
	}
	return v, n
}

func receiveAll(t *testing.T, c *sqs.Client, url string, wait int32) []sqstypes.Message {
	t.Helper()
	out, err := c.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
		QueueUrl: aws.String(url), MaxNumberOfMessages: 10, WaitTimeSeconds: wait,
		MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{sqstypes.MessageSystemAttributeNameAll},
	})
	if err != nil {
		t.Fatalf("ReceiveMessage(%s) error: %v", url, err)
	}
	return out.Messages
}

func bodiesOf(ms []sqstypes.Message) []string {
	var out []string
	for _, m := range ms {
		out = append(out, aws.ToString(m.Body))
	}
	slices.Sort(out)
	return out
}

// TestBatchItemFailures checks ReportBatchItemFailures as Lambda applies it: messages not reported are
// deleted, reported ones stay in flight until their visibility timeout, and a handler error leaves
// the whole batch in flight.
func TestBatchItemFailures(t *testing.T) {
	tests := []struct {
		name         string
		give         []string
		giveErr      bool // the handler returns an error
		wantInFlight []string
	}{
		{name: "all succeed", give: []string{"ok1", "ok2", "ok3", "ok4"}, wantInFlight: nil},
		{name: "some reported", give: []string{"ok1", "fail1", "ok2", "fail2"}, wantInFlight: []string{"fail1", "fail2"}},
		{name: "all reported", give: []string{"fail1", "fail2", "fail3"}, wantInFlight: []string{"fail1", "fail2", "fail3"}},
		{name: "handler error", give: []string{"ok1", "ok2", "ok3"}, giveErr: true, wantInFlight: []string{"ok1", "ok2", "ok3"}},
	}
	queues := []struct {
		backend *backend
		fifo    bool
	}{{fauxqs, false}, {fauxqs, true}, {moto, false}, {moto, true}}
	for _, q := range queues {
		for _, tt := range tests {
			t.Run(fmt.Sprintf("%s/fifo=%v/%s", q.backend.name, q.fifo, tt.name), func(t *testing.T) {
				t.Parallel()
				c := q.backend.client(t)
				url, arn := newQueue(t, c, q.fifo, 30)
				send(t, c, url, q.fifo, "", tt.give...)
				rec := &recorder{respond: func(ev events.SQSEvent) (events.SQSEventResponse, error) {
					if tt.giveErr {
						return events.SQSEventResponse{}, errors.New("handler failed")
					}
					var resp events.SQSEventResponse
					for _, m := range ev.Records {
						if strings.HasPrefix(m.Body, "fail") {
							resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: m.MessageId})
						}
					}
					return resp, nil
				}}
				p := &esm.Poller{
					Client: c, QueueURL: url, QueueARN: arn, Region: region,
					BatchSize: 10, Idle: 20 * time.Millisecond, Concurrency: 1, Handler: rec.handle, Log: discard(),
				}
				run(t, p, func() bool { return rec.distinct() == len(tt.give) }, 3*time.Second)

				if got := len(rec.records()); got != len(tt.give) {
					t.Errorf("handler saw %d records, want %d (a message in flight is not delivered again)", got, len(tt.give))
				}
				st := p.Stats()
				if st.Messages != len(tt.give) || st.Invocations != len(rec.events) {
					t.Errorf("Stats() = %+v, want Messages %d, Invocations %d", st, len(tt.give), len(rec.events))
				}
				if wantErrs := map[bool]int{true: st.Invocations, false: 0}[tt.giveErr]; st.Errors != wantErrs {
					t.Errorf("Stats().Errors = %d, want %d", st.Errors, wantErrs)
				}

				// Reported messages are still in flight: nothing to receive before the timeout.
				if got := receiveAll(t, c, url, 0); len(got) != 0 {
					t.Errorf("receive right after the batch = %v, want nothing before the visibility timeout", bodiesOf(got))
				}
				if visible, inFlight := queueCounts(t, c, url); visible != 0 || inFlight != len(tt.wantInFlight) {
					t.Errorf("queue visible, in flight = %d, %d, want 0, %d", visible, inFlight, len(tt.wantInFlight))
				}
				// They are in flight, not gone: their receipt handles still work, and once made
				// visible they, and only they, are there to receive.
				for _, m := range rec.records() {
					if !slices.Contains(tt.wantInFlight, m.Body) {
						continue
					}
					if _, err := c.ChangeMessageVisibility(context.Background(), &sqs.ChangeMessageVisibilityInput{
						QueueUrl: aws.String(url), ReceiptHandle: aws.String(m.ReceiptHandle), VisibilityTimeout: 0,
					}); err != nil {
						t.Errorf("ChangeMessageVisibility(%s) error: %v, want the message still in flight", m.Body, err)
					}
				}
				var again []sqstypes.Message
				for range 5 {
					if len(again) >= len(tt.wantInFlight) {
						break
					}
					again = append(again, receiveAll(t, c, url, 1)...)
				}
				if got := bodiesOf(again); !slices.Equal(got, tt.wantInFlight) {
					t.Errorf("messages left in the queue = %v, want %v", got, tt.wantInFlight)
				}
				for _, m := range again {
					if got := m.Attributes[string(sqstypes.MessageSystemAttributeNameApproximateReceiveCount)]; got != "2" {
						t.Errorf("%s ApproximateReceiveCount = %q, want 2", aws.ToString(m.Body), got)
					}
				}
			})
		}
	}
}

func TestBatchSize(t *testing.T) {
	tests := []struct {
		name      string
		giveBatch int32
		giveCount int
	}{
		{name: "one", giveBatch: 1, giveCount: 7},
		{name: "three", giveBatch: 3, giveCount: 20},
		{name: "ten", giveBatch: 10, giveCount: 25},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := fauxqs.client(t)
			url, arn := newQueue(t, c, false, 30)
			var bodies []string
			for i := range tt.giveCount {
				bodies = append(bodies, fmt.Sprintf("m%02d", i))
			}
			send(t, c, url, false, "", bodies...)
			rec := &recorder{}
			p := &esm.Poller{
				Client: c, QueueURL: url, QueueARN: arn, Region: region,
				BatchSize: tt.giveBatch, Idle: 20 * time.Millisecond, Concurrency: 2, Handler: rec.handle, Log: discard(),
			}
			run(t, p, func() bool { return rec.distinct() == tt.giveCount }, 3*time.Second)
			rec.mu.Lock()
			evs := slices.Clone(rec.events)
			rec.mu.Unlock()
			for i, ev := range evs {
				if len(ev.Records) == 0 || len(ev.Records) > int(tt.giveBatch) {
					t.Errorf("event %d has %d records, want 1..%d", i, len(ev.Records), tt.giveBatch)
				}
			}
			if got := len(rec.records()); got != tt.giveCount {
				t.Errorf("handler saw %d records, want %d", got, tt.giveCount)
			}
			if st := p.Stats(); st.Invocations != len(evs) || st.Messages != tt.giveCount || st.Errors != 0 {
				t.Errorf("Stats() = %+v, want Invocations %d, Messages %d, Errors 0", st, len(evs), tt.giveCount)
			}
			if visible, inFlight := queueCounts(t, c, url); visible != 0 || inFlight != 0 {
				t.Errorf("queue visible, in flight = %d, %d, want 0, 0 (all handled and deleted)", visible, inFlight)
			}
		})
	}
}

func TestConcurrencyBoundsInvocations(t *testing.T) {
	tests := []struct {
		name string
		give int
	}{
		{name: "one", give: 1},
		{name: "three", give: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := fauxqs.client(t)
			url, arn := newQueue(t, c, false, 30)
			const n = 9
			var bodies []string
			for i := range n {
				bodies = append(bodies, fmt.Sprintf("m%d", i))
			}
			send(t, c, url, false, "", bodies...)
			var cur, peak, calls atomic.Int64
			h := func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
				now := cur.Add(1)
				for {
					p := peak.Load()
					if now <= p || peak.CompareAndSwap(p, now) {
						break
					}
				}
				time.Sleep(120 * time.Millisecond)
				cur.Add(-1)
				calls.Add(int64(len(ev.Records)))
				return events.SQSEventResponse{}, nil
			}
			p := &esm.Poller{
				Client: c, QueueURL: url, QueueARN: arn, Region: region,
				BatchSize: 1, Idle: 20 * time.Millisecond, Concurrency: tt.give, Handler: h, Log: discard(),
			}
			run(t, p, func() bool { return calls.Load() == n }, 3*time.Second)
			if got := peak.Load(); got != int64(tt.give) {
				t.Errorf("most concurrent invocations = %d, want %d (Concurrency)", got, tt.give)
			}
		})
	}
}

func TestRecordsCarryTheMessage(t *testing.T) {
	tests := []struct {
		backend   *backend
		fifo      bool
		wantGroup string
	}{
		{backend: fauxqs, fifo: false},
		{backend: fauxqs, fifo: true, wantGroup: "demo-000001"},
		{backend: moto, fifo: false},
		{backend: moto, fifo: true, wantGroup: "demo-000001"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/fifo=%v", tt.backend.name, tt.fifo), func(t *testing.T) {
			t.Parallel()
			c := tt.backend.client(t)
			url, arn := newQueue(t, c, tt.fifo, 30)
			body := `{"type":"demo","id":"job-1","input":{"n":1}}`
			in := &sqs.SendMessageInput{
				QueueUrl: aws.String(url), MessageBody: aws.String(body),
				MessageAttributes: map[string]sqstypes.MessageAttributeValue{
					"reason": {DataType: aws.String("String"), StringValue: aws.String("why")},
				},
			}
			if tt.fifo {
				in.MessageGroupId = aws.String(tt.wantGroup)
				in.MessageDeduplicationId = aws.String("demo-job-1")
			}
			sent := time.Now()
			out, err := c.SendMessage(context.Background(), in)
			if err != nil {
				t.Fatalf("SendMessage error: %v", err)
			}
			rec := &recorder{}
			p := &esm.Poller{
				Client: c, QueueURL: url, QueueARN: arn, Region: region,
				BatchSize: 10, Idle: 20 * time.Millisecond, Concurrency: 1, Handler: rec.handle, Log: discard(),
			}
			run(t, p, func() bool { return rec.distinct() == 1 }, 3*time.Second)
			got := rec.records()[0]
			sum := md5.Sum([]byte(body))
			checks := []struct {
				field, got, want string
			}{
				{"messageId", got.MessageId, aws.ToString(out.MessageId)},
				{"body", got.Body, body},
				{"md5OfBody", got.Md5OfBody, hex.EncodeToString(sum[:])},
				{"eventSource", got.EventSource, "aws:sqs"},
				{"eventSourceARN", got.EventSourceARN, arn},
				{"awsRegion", got.AWSRegion, region},
				{"attributes.ApproximateReceiveCount", got.Attributes["ApproximateReceiveCount"], "1"},
				{"attributes.MessageGroupId", got.Attributes["MessageGroupId"], tt.wantGroup},
				{"messageAttributes.reason", aws.ToString(got.MessageAttributes["reason"].StringValue), "why"},
				{"messageAttributes.reason.dataType", got.MessageAttributes["reason"].DataType, "String"},
			}
			for _, ck := range checks {
				if ck.got != ck.want {
					t.Errorf("record %s = %q, want %q", ck.field, ck.got, ck.want)
				}
			}
			if got.ReceiptHandle == "" {
				t.Error("record receiptHandle is empty")
			}
			if !strings.HasPrefix(arn, "arn:aws:sqs:") {
				t.Errorf("queue ARN = %q, want arn:aws:sqs:...", arn)
			}
			ms, err := strconv.ParseInt(got.Attributes["SentTimestamp"], 10, 64)
			if err != nil {
				t.Fatalf("record attributes.SentTimestamp = %q, want epoch milliseconds", got.Attributes["SentTimestamp"])
			}
			if ts := time.UnixMilli(ms); ts.Before(sent.Add(-5*time.Second)) || ts.After(time.Now().Add(5*time.Second)) {
				t.Errorf("record attributes.SentTimestamp = %v, want about %v", ts, sent)
			}
			if _, ok := got.Attributes["ApproximateFirstReceiveTimestamp"]; !ok {
				t.Errorf("record attributes = %v, want ApproximateFirstReceiveTimestamp too", got.Attributes)
			}
		})
	}
}

// TestShutdown checks that cancelling Run's context returns promptly: within the long-poll wait in
// progress, or after the invocation in progress has run to its end (and its batch is settled).
func TestShutdown(t *testing.T) {
	t.Run("idle", func(t *testing.T) {
		t.Parallel()
		tests := []struct {
			name      string
			giveWait  time.Duration
			giveIdle  time.Duration
			giveConc  int
			wantBound time.Duration
		}{
			{name: "short polling", giveIdle: 50 * time.Millisecond, giveConc: 1, wantBound: time.Second},
			{name: "long polling", giveWait: time.Second, giveConc: 1, wantBound: 2500 * time.Millisecond},
			{name: "long polling, several pollers", giveWait: time.Second, giveConc: 4, wantBound: 2500 * time.Millisecond},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				c := fauxqs.client(t)
				url, arn := newQueue(t, c, false, 30)
				rec := &recorder{}
				p := &esm.Poller{
					Client: c, QueueURL: url, QueueARN: arn, Region: region, BatchSize: 10,
					Wait: tt.giveWait, Idle: tt.giveIdle, Concurrency: tt.giveConc, Handler: rec.handle, Log: discard(),
				}
				// The bound's slack grows with the emulator's own answer time in this run, so a
				// busy machine does not fail it; an extra poll cycle (another Wait) still does on
				// a machine that answers in well under a second.
				bound := tt.wantBound + 2*receiveTime(t, c, url)
				began := time.Now()
				run(t, p, func() bool { return time.Since(began) > 300*time.Millisecond }, bound)
				if st := p.Stats(); st.Invocations != 0 {
					t.Errorf("Stats() = %+v, want no invocation on an empty queue", st)
				}
			})
		}
	})

	t.Run("invocation in progress finishes", func(t *testing.T) {
		t.Parallel()
		c := fauxqs.client(t)
		url, arn := newQueue(t, c, false, 30)
		send(t, c, url, false, "", "slow")
		started := make(chan struct{})
		var finished atomic.Bool
		var ctxErr atomic.Value
		h := func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
			close(started)
			time.Sleep(400 * time.Millisecond)
			ctxErr.Store(fmt.Sprint(ctx.Err()))
			finished.Store(true)
			return events.SQSEventResponse{}, nil
		}
		p := &esm.Poller{
			Client: c, QueueURL: url, QueueARN: arn, Region: region, BatchSize: 10,
			Wait: time.Second, Concurrency: 1, Handler: h, Log: discard(),
		}
		run(t, p, func() bool {
			select {
			case <-started:
				return true
			default:
				return false
			}
		}, 3*time.Second)
		if !finished.Load() {
			t.Fatal("Run returned before the invocation in progress finished")
		}
		if got := ctxErr.Load(); got != "<nil>" {
			t.Errorf("handler context error at its end = %v, want nil (shutdown does not cut an invocation short)", got)
		}
		if visible, inFlight := queueCounts(t, c, url); visible != 0 || inFlight != 0 {
			t.Errorf("queue visible, in flight = %d, %d, want 0, 0 (the finished batch is deleted)", visible, inFlight)
		}
	})
}
