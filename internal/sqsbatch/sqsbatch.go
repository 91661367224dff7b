// Package sqsbatch sends messages with SendMessageBatch, ten at a time, and retries the entries SQS
// reports as failed with exponential backoff and jitter, a bounded number of times. A batch call that
// fails as a whole is retried the same way. What still fails is returned, never dropped.
package sqsbatch

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/cenkalti/backoff/v5"
)

// MaxBatch is SQS's limit on entries per SendMessageBatch.
const MaxBatch = 10

type sendAPI interface {
	SendMessageBatch(context.Context, *sqs.SendMessageBatchInput, ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error)
}

// Sender sends batches to one queue.
type Sender struct {
	client   sendAPI
	queueURL string
	// Attempts is how many times an entry is tried in all (default 5).
	Attempts int
	// NewBackOff makes the delay policy between tries (default: exponential from 100 ms, jitter 0.5).
	NewBackOff func() backoff.BackOff
	// Sleep waits between tries; tests replace it.
	Sleep func(context.Context, time.Duration) error
}

// NewSender returns a Sender for queueURL with the default retry policy.
func NewSender(client sendAPI, queueURL string) *Sender {
	return &Sender{client: client, queueURL: queueURL, Attempts: 5, NewBackOff: defaultBackOff, Sleep: sleep}
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

// Send sends entries (any number; Ids must be unique among them) and returns those that still failed.
// The error is only for a cancelled context; entries not sent then are in the failures too.
func (s *Sender) Send(ctx context.Context, entries []types.SendMessageBatchRequestEntry) ([]Failure, error) {
	var failed []Failure
	for start := 0; start < len(entries); start += MaxBatch {
		end := min(start+MaxBatch, len(entries))
		f, err := s.sendBatch(ctx, entries[start:end])
		failed = append(failed, f...)
		if err != nil {
			for _, e := range entries[end:] {
				failed = append(failed, Failure{ID: *e.Id, Code: "Cancelled", Message: err.Error()})
			}
			return failed, err
		}
	}
	return failed, nil
}

func (s *Sender) sendBatch(ctx context.Context, pending []types.SendMessageBatchRequestEntry) ([]Failure, error) {
	b := s.NewBackOff()
	var last map[string]Failure
	for try := 1; ; try++ {
		out, err := s.client.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: &s.queueURL, Entries: pending})
		last = map[string]Failure{}
		if err != nil {
			for _, e := range pending {
				last[*e.Id] = Failure{ID: *e.Id, Code: "RequestFailed", Message: err.Error()}
			}
		} else {
			for _, f := range out.Failed {
				last[deref(f.Id)] = Failure{ID: deref(f.Id), Code: deref(f.Code), Message: deref(f.Message)}
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

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
