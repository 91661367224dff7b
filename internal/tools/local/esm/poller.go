// Package esm emulates Lambda's SQS event-source mapping for the local stack: it long-polls a queue,
// hands batches to a handler with a bounded number of concurrent invocations, and applies
// ReportBatchItemFailures (reported messages stay in flight, the others are deleted; a handler error
// leaves the whole batch in flight). On shutdown it stops receiving at once and makes messages it
// received but did not hand to a handler visible again immediately.
//
// It can also deliver batches twice (SetDuplicates), as Lambda's event source mappings may: "Lambda
// event source mappings process each event at least once, and duplicate processing of records can
// occur" (Lambda developer guide, "How Lambda processes records from stream and queue-based event
// sources").
package esm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

type sqsAPI interface {
	ReceiveMessage(context.Context, *sqs.ReceiveMessageInput, ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	DeleteMessageBatch(context.Context, *sqs.DeleteMessageBatchInput, ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error)
	ChangeMessageVisibilityBatch(context.Context, *sqs.ChangeMessageVisibilityBatchInput, ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error)
}

// Handler is a Lambda SQS handler.
type Handler func(context.Context, events.SQSEvent) (events.SQSEventResponse, error)

// Poller feeds one queue to one handler.
type Poller struct {
	Client   sqsAPI
	QueueURL string
	QueueARN string
	Region   string
	// BatchSize is the event source's BatchSize (1..10).
	BatchSize int32
	// Wait is the long-poll wait per receive (0 = short polling with Idle pauses).
	Wait time.Duration
	// Idle is the pause after an empty short-polling receive.
	Idle time.Duration
	// Concurrency is how many invocations may run at once (Lambda's pollers / MaximumConcurrency).
	Concurrency int
	// Timeout bounds one invocation, like a function timeout.
	Timeout time.Duration
	Handler Handler
	Log     *slog.Logger

	mu          sync.Mutex
	invocations int
	errors      int
	timeouts    int
	failedItems int
	messages    int
	busy        time.Duration
	dupRate     float64
	dupDelay    time.Duration
	dupJitter   func(within time.Duration) time.Duration // the copy's delay (tests set it)
	duplicates  int
	dupWG       sync.WaitGroup
}

// Stats are counts of what the poller did.
type Stats struct {
	Invocations int
	// Errors counts invocations that returned an error (their whole batch stays in flight until
	// its visibility timeout); Timeouts those of them that ran out of the poller's Timeout.
	Errors   int
	Timeouts int
	// FailedItems counts messages a handler reported as batch item failures (each is received
	// again after its visibility timeout).
	FailedItems int
	Messages    int
	// Busy is the handlers' total run time.
	Busy time.Duration
	// Duplicates counts batches delivered a second time (SetDuplicates); their invocations are
	// counted in Invocations too.
	Duplicates int
}

// Stats returns the counts so far.
func (p *Poller) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return Stats{Invocations: p.invocations, Errors: p.errors, Timeouts: p.timeouts, FailedItems: p.failedItems, Messages: p.messages, Busy: p.busy, Duplicates: p.duplicates}
}

// SetDuplicates makes the poller hand a share rate of its batches to the handler a second time: the
// same records, receipt handles included, after a random delay in [0, within), so the copy may run
// while the first invocation still does or after it settled. Each invocation is settled as any other
// (the records it does not report as failures are deleted). This stands in for the at-least-once
// delivery of Lambda's event source mappings (a batch whose first invocation Lambda lost track of is
// invoked again). A rate of 0 turns it off; it may be changed while the poller runs.
func (p *Poller) SetDuplicates(rate float64, within time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dupRate, p.dupDelay = rate, within
}

// Run polls until ctx is cancelled, then returns once every invocation in progress has finished.
func (p *Poller) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for range max(p.Concurrency, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.loop(ctx)
		}()
	}
	wg.Wait()
	p.dupWG.Wait()
}

func (p *Poller) loop(ctx context.Context) {
	for ctx.Err() == nil {
		// The receive itself is not cancelled by shutdown: cancelling it could lose a response that
		// the queue already sent, leaving those messages invisible for a whole visibility timeout.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.Wait+10*time.Second)
		out, err := p.Client.ReceiveMessage(rctx, &sqs.ReceiveMessageInput{
			QueueUrl:                    &p.QueueURL,
			MaxNumberOfMessages:         max(p.BatchSize, 1),
			WaitTimeSeconds:             int32(p.Wait / time.Second),
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
			MessageAttributeNames:       []string{"All"},
		})
		cancel()
		if err != nil {
			p.Log.Warn("receive failed", "queue", p.QueueURL, "error", err)
			sleep(ctx, time.Second)
			continue
		}
		if len(out.Messages) == 0 {
			sleep(ctx, p.Idle)
			continue
		}
		if ctx.Err() != nil {
			p.release(out.Messages)
			return
		}
		p.invoke(ctx, out.Messages)
	}
}

// invoke runs the handler on one batch and settles the batch as Lambda does; it delivers the batch
// again as SetDuplicates asks.
func (p *Poller) invoke(ctx context.Context, msgs []types.Message) {
	p.duplicate(ctx, msgs)
	p.handle(ctx, msgs)
}

// duplicate delivers msgs again, after a random delay, when the duplicate rate draws it. The copy
// is not delivered if the poller stops before its delay is over.
func (p *Poller) duplicate(ctx context.Context, msgs []types.Message) {
	p.mu.Lock()
	rate, within := p.dupRate, p.dupDelay
	if rate <= 0 || rand.Float64() >= rate {
		p.mu.Unlock()
		return
	}
	p.duplicates++
	p.dupWG.Add(1)
	p.mu.Unlock()
	delay := time.Duration(0)
	switch {
	case p.dupJitter != nil:
		delay = p.dupJitter(within)
	case within > 0:
		delay = rand.N(within)
	}
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = aws.ToString(m.MessageId)
	}
	go func() {
		defer p.dupWG.Done()
		sleep(ctx, delay)
		if ctx.Err() != nil {
			return
		}
		p.Log.Info("delivering a batch again (injected duplicate delivery)", "queue", p.QueueURL, "messageIds", ids, "delayMs", delay.Milliseconds())
		p.handle(ctx, msgs)
	}()
}

// handle runs the handler on one batch and settles the batch as Lambda does.
func (p *Poller) handle(ctx context.Context, msgs []types.Message) {
	ev := events.SQSEvent{Records: make([]events.SQSMessage, len(msgs))}
	for i, m := range msgs {
		ev.Records[i] = p.toEvent(m)
	}
	// An invocation in progress runs to its end on shutdown, as Lambda's would.
	ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.timeout())
	began := time.Now()
	resp, err := p.Handler(ictx, ev)
	took := time.Since(began)
	timedOut := errors.Is(ictx.Err(), context.DeadlineExceeded)
	cancel()
	p.mu.Lock()
	p.invocations++
	p.messages += len(msgs)
	p.busy += took
	if err != nil {
		p.errors++
		if timedOut {
			p.timeouts++
		}
	} else {
		p.failedItems += len(resp.BatchItemFailures)
	}
	p.mu.Unlock()
	if err != nil {
		p.Log.Warn("handler failed; the batch stays in flight until its visibility timeout", "queue", p.QueueURL, "error", err)
		return
	}
	failed := map[string]bool{}
	for _, f := range resp.BatchItemFailures {
		failed[f.ItemIdentifier] = true
	}
	var del []types.DeleteMessageBatchRequestEntry
	for i, m := range msgs {
		if !failed[aws.ToString(m.MessageId)] {
			del = append(del, types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle})
		}
	}
	if len(del) == 0 {
		return
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	out, err := p.Client.DeleteMessageBatch(dctx, &sqs.DeleteMessageBatchInput{QueueUrl: &p.QueueURL, Entries: del})
	if err == nil && len(out.Failed) > 0 {
		err = fmt.Errorf("%d of %d deletes failed: %s", len(out.Failed), len(del), aws.ToString(out.Failed[0].Message))
	}
	if err != nil {
		p.Log.Warn("delete of processed messages failed", "queue", p.QueueURL, "error", err)
	}
}

// release makes messages visible again at once (received during shutdown, never handled).
func (p *Poller) release(msgs []types.Message) {
	entries := make([]types.ChangeMessageVisibilityBatchRequestEntry, len(msgs))
	for i, m := range msgs {
		entries[i] = types.ChangeMessageVisibilityBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := p.Client.ChangeMessageVisibilityBatch(ctx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: &p.QueueURL, Entries: entries}); err != nil {
		p.Log.Warn("could not return unhandled messages on shutdown", "queue", p.QueueURL, "error", err)
	}
}

func (p *Poller) timeout() time.Duration {
	if p.Timeout > 0 {
		return p.Timeout
	}
	return 30 * time.Second
}

func (p *Poller) toEvent(m types.Message) events.SQSMessage {
	attrs := map[string]string{}
	for k, v := range m.Attributes {
		attrs[k] = v
	}
	mattrs := map[string]events.SQSMessageAttribute{}
	for k, v := range m.MessageAttributes {
		mattrs[k] = events.SQSMessageAttribute{StringValue: v.StringValue, BinaryValue: v.BinaryValue, DataType: aws.ToString(v.DataType)}
	}
	return events.SQSMessage{
		MessageId: aws.ToString(m.MessageId), ReceiptHandle: aws.ToString(m.ReceiptHandle), Body: aws.ToString(m.Body),
		Md5OfBody: aws.ToString(m.MD5OfBody), Attributes: attrs, MessageAttributes: mattrs,
		EventSource: "aws:sqs", EventSourceARN: p.QueueARN, AWSRegion: p.Region,
	}
}

func sleep(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
