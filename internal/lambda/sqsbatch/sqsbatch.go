// Package sqsbatch sends messages with SendMessageBatch, in batches SQS accepts (at most ten entries
// and 1 MiB in all, see size.go), and retries the entries SQS reports as failed with exponential
// backoff and jitter, a bounded number of times. A batch call that fails as a whole is retried the
// same way, except one SQS refuses as too long (BatchRequestTooLong): its entries are sent one at a
// time with SendMessage, so that no entry fails for its neighbours' size. What still fails is
// returned, never dropped.
package sqsbatch

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
	"github.com/cenkalti/backoff/v5"
)

type sendAPI interface {
	SendMessageBatch(context.Context, *sqs.SendMessageBatchInput, ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error)
	SendMessage(context.Context, *sqs.SendMessageInput, ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
}

// Sender sends batches to one queue.
type Sender struct {
	client   sendAPI
	queueURL string
	// Attempts is how many times an entry is tried in all (default 5).
	Attempts int
	// MaxBytes is the most a batch's entries may add up to, by Size (default MaxBatchBytes).
	MaxBytes int
	// NewBackOff makes the delay policy between tries (default: exponential from 100 ms, jitter 0.5).
	NewBackOff func() backoff.BackOff
	// Sleep waits between tries; tests replace it.
	Sleep func(context.Context, time.Duration) error
}

// NewSender returns a Sender for queueURL with the default retry policy.
func NewSender(client sendAPI, queueURL string) *Sender {
	return &Sender{client: client, queueURL: queueURL, Attempts: 5, MaxBytes: MaxBatchBytes, NewBackOff: defaultBackOff, Sleep: sleep}
}

func defaultBackOff() backoff.BackOff {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = 100 * time.Millisecond
	b.RandomizationFactor = 0.5
	b.Multiplier = 2
	b.MaxInterval = 2 * time.Second
	b.Reset()
	return b
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Failure is an entry that could not be sent after every try.
type Failure struct {
	ID      string
	Code    string
	Message string
}

// Send sends entries (any number; Ids must be unique among them), in order, in the batches Split
// makes, and returns those that still failed. The error is only for a cancelled context; entries not
// sent then are in the failures too.
func (s *Sender) Send(ctx context.Context, entries []types.SendMessageBatchRequestEntry) ([]Failure, error) {
	var failed []Failure
	batches := Split(entries, s.MaxBytes)
	for i, b := range batches {
		f, err := s.sendBatch(ctx, b)
		failed = append(failed, f...)
		if err != nil {
			for _, rest := range batches[i+1:] {
				failed = append(failed, cancelled(rest, err)...)
			}
			return failed, err
		}
	}
	return failed, nil
}

func cancelled(entries []types.SendMessageBatchRequestEntry, err error) []Failure {
	out := make([]Failure, 0, len(entries))
	for _, e := range entries {
		out = append(out, Failure{ID: *e.Id, Code: "Cancelled", Message: err.Error()})
	}
	return out
}

func (s *Sender) sendBatch(ctx context.Context, pending []types.SendMessageBatchRequestEntry) ([]Failure, error) {
	b := s.NewBackOff()
	var last map[string]Failure
	for try := 1; ; try++ {
		out, err := s.client.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: &s.queueURL, Entries: pending})
		if tooLong(err) {
			// The same batch would be refused again: send its entries one at a time.
			return s.sendEach(ctx, pending)
		}
		last = map[string]Failure{}
		if err != nil {
			for _, e := range pending {
				last[*e.Id] = Failure{ID: *e.Id, Code: "RequestFailed", Message: err.Error()}
			}
		} else {
			for _, f := range out.Failed {
				last[aws.ToString(f.Id)] = Failure{ID: aws.ToString(f.Id), Code: aws.ToString(f.Code), Message: aws.ToString(f.Message)}
			}
		}
		retry := pending[:0:0]
		for _, e := range pending {
			if _, bad := last[*e.Id]; bad {
				retry = append(retry, e)
			}
		}
		if len(retry) == 0 {
			return nil, nil
		}
		if try >= s.Attempts || (err == nil && !anyRetryable(out.Failed)) {
			return failures(retry, last), nil
		}
		d := b.NextBackOff()
		if d == backoff.Stop {
			return failures(retry, last), nil
		}
		if err := s.Sleep(ctx, d); err != nil {
			return failures(retry, last), fmt.Errorf("send batch to %s: %w", s.queueURL, err)
		}
		pending = retry
	}
}

// tooLong reports whether SQS refused a whole SendMessageBatch for its total size. The SDK returns
// *types.BatchRequestTooLong (its ErrorCode is the query-compatible code,
// AWS.SimpleQueueService.BatchRequestTooLong); an emulator may answer with either code.
func tooLong(err error) bool {
	if err == nil {
		return false
	}
	var typed *types.BatchRequestTooLong
	if errors.As(err, &typed) {
		return true
	}
	var api smithy.APIError
	return errors.As(err, &api) && strings.HasSuffix(api.ErrorCode(), "BatchRequestTooLong")
}

// sendEach sends entries one at a time with SendMessage, in order, each with the batch's retry
// policy, and returns those that still failed.
func (s *Sender) sendEach(ctx context.Context, entries []types.SendMessageBatchRequestEntry) ([]Failure, error) {
	var failed []Failure
	for i, e := range entries {
		f, err := s.sendOne(ctx, e)
		if f != nil {
			failed = append(failed, *f)
		}
		if err != nil {
			return append(failed, cancelled(entries[i+1:], err)...), err
		}
	}
	return failed, nil
}

func (s *Sender) sendOne(ctx context.Context, e types.SendMessageBatchRequestEntry) (*Failure, error) {
	in := &sqs.SendMessageInput{
		QueueUrl:                &s.queueURL,
		MessageBody:             e.MessageBody,
		MessageAttributes:       e.MessageAttributes,
		MessageSystemAttributes: e.MessageSystemAttributes,
		MessageGroupId:          e.MessageGroupId,
		MessageDeduplicationId:  e.MessageDeduplicationId,
		DelaySeconds:            e.DelaySeconds,
	}
	b := s.NewBackOff()
	for try := 1; ; try++ {
		_, err := s.client.SendMessage(ctx, in)
		if err == nil {
			return nil, nil
		}
		f := &Failure{ID: aws.ToString(e.Id), Code: "RequestFailed", Message: err.Error()}
		var api smithy.APIError
		permanent := false
		if errors.As(err, &api) {
			f.Code, f.Message = api.ErrorCode(), api.ErrorMessage()
			// A client fault (a message SQS refuses, such as one over its size limit) fails again;
			// throttling is the exception.
			permanent = api.ErrorFault() == smithy.FaultClient && !strings.Contains(api.ErrorCode(), "Throttl")
		}
		if ctx.Err() != nil {
			return f, fmt.Errorf("send to %s: %w", s.queueURL, ctx.Err())
		}
		if permanent || try >= s.Attempts {
			return f, nil
		}
		d := b.NextBackOff()
		if d == backoff.Stop {
			return f, nil
		}
		if err := s.Sleep(ctx, d); err != nil {
			return f, fmt.Errorf("send to %s: %w", s.queueURL, err)
		}
	}
}

// anyRetryable reports whether some failed entry is worth retrying: SQS marks client errors
// (SenderFault) such as an invalid attribute, which would fail again.
func anyRetryable(failed []types.BatchResultErrorEntry) bool {
	for _, f := range failed {
		if !f.SenderFault {
			return true
		}
	}
	return false
}

func failures(entries []types.SendMessageBatchRequestEntry, by map[string]Failure) []Failure {
	out := make([]Failure, 0, len(entries))
	for _, e := range entries {
		out = append(out, by[*e.Id])
	}
	return out
}
