package starter

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/sfnlimit/sfnlimit/internal/lambda/metrics"
	"github.com/sfnlimit/sfnlimit/internal/lambda/releaser"
)

// backoff makes a message visible again after a short, jittered delay and holds it meanwhile.
func (s *Starter) backoff(ctx context.Context, m events.SQSMessage) verdict {
	d := s.RetryDelay
	if d <= 0 {
		d = 5 * time.Second
	}
	d += time.Duration(s.jitter(int64(d))) // jitter up to 2x, so throttled starts spread out
	s.setVisibility(ctx, m, int32(d.Round(time.Second)/time.Second))
	return hold
}

// returnAll makes messages visible again at once, ten to a call.
func (s *Starter) returnAll(ctx context.Context, ms []events.SQSMessage) {
	for start := 0; start < len(ms); start += 10 {
		chunk := ms[start:min(start+10, len(ms))]
		entries := make([]sqstypes.ChangeMessageVisibilityBatchRequestEntry, len(chunk))
		for i, m := range chunk {
			entries[i] = sqstypes.ChangeMessageVisibilityBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(m.ReceiptHandle)}
		}
		out, err := s.Queue.ChangeMessageVisibilityBatch(ctx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: &s.QueueURL, Entries: entries})
		if err == nil && len(out.Failed) > 0 {
			err = fmt.Errorf("%d of %d failed: %s", len(out.Failed), len(entries), aws.ToString(out.Failed[0].Message))
		}
		if err != nil {
			s.Log.WarnContext(ctx, "could not return later messages of a group; they return after the queue's visibility timeout", "error", err)
		}
		for _, m := range chunk {
			s.Log.InfoContext(ctx, "later message of a group in one batch; returned to the queue",
				"messageId", m.MessageId, "group", m.Attributes["MessageGroupId"])
		}
	}
}

// releaseGrace is how long, in seconds, a message whose delivery acts on an ended attempt stays
// invisible while that release runs: the release deletes it or makes it visible at once, and if it
// stops midway the message comes back after this and the release is tried again.
const releaseGrace = 60

// holdsMessage reports whether this delivery's receipt handle is still its message's current one:
// the message was neither deleted nor received again since. SQS refuses ChangeMessageVisibility with
// any other handle ("The receipt handle has expired", MessageNotInflight).
//
// A refusal does not say the message is gone: MessageNotInflight also answers a message whose
// visibility timeout ran out during this invocation and that no receive has taken yet ("the
// specified message isn't in flight", SQS API reference, ChangeMessageVisibility; FifoVisibilityTimeout
// may be as short as the starter's timeout). Its handle is then still the latest, so a delivery
// that does not hold its message is never acknowledged: Lambda's event source would delete the
// message with it, and a failed attempt would be neither retried nor dead-lettered.
func (s *Starter) holdsMessage(ctx context.Context, x *msg) (bool, error) {
	return s.holdsMessageFor(ctx, x, releaseGrace)
}

// holdsMessageFor is holdsMessage, leaving the message invisible for seconds when it holds it.
func (s *Starter) holdsMessageFor(ctx context.Context, x *msg, seconds int32) (bool, error) {
	_, err := s.Queue.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
		QueueUrl: &s.QueueURL, ReceiptHandle: &x.ReceiptHandle, VisibilityTimeout: seconds,
	})
	switch {
	case err == nil:
		return true, nil
	case releaser.IsStaleHandle(err):
		return false, nil
	}
	return false, fmt.Errorf("check that message %s is still this delivery's: %w", x.MessageId, err)
}

// droppedIfStale asks holdsMessage and, when this delivery no longer holds its message, logs why it
// is dropped (held, writing nothing) and counts it as a duplicate.
func (s *Starter) droppedIfStale(ctx context.Context, x *msg, why string, attrs ...any) (bool, error) {
	current, err := s.holdsMessageFor(ctx, x, s.visibilitySeconds())
	if err != nil || current {
		return false, err
	}
	x.log.InfoContext(ctx, why, attrs...)
	s.Metrics.Add(x.key.Type, metrics.DuplicatesDropped, 1)
	return true, nil
}

// goneSinceItRan is droppedIfStale before a delivery claims back attempt, an attempt its message
// ran: a twin (Lambda may hand a batch over twice) of a delivery that has since moved the job on and
// deleted the message. found says what it found, for the log.
func (s *Starter) goneSinceItRan(ctx context.Context, x *msg, attempt int, found string) (bool, error) {
	return s.droppedIfStale(ctx, x, "stale delivery of a message gone since its attempt ran; dropped before any claim", "attempt", attempt, "found", found)
}

// visibilitySeconds is the lanes queue's visibility timeout in seconds: what a receive leaves a
// message in flight for.
func (s *Starter) visibilitySeconds() int32 {
	if s.Visibility <= 0 {
		return releaseGrace
	}
	return int32(s.Visibility / time.Second)
}

func (s *Starter) setVisibility(ctx context.Context, m events.SQSMessage, seconds int32) {
	if _, err := s.Queue.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
		QueueUrl: &s.QueueURL, ReceiptHandle: &m.ReceiptHandle, VisibilityTimeout: seconds,
	}); err != nil {
		s.Log.WarnContext(ctx, "could not change message visibility; it returns after the queue's visibility timeout",
			"messageId", m.MessageId, "error", err)
	}
}

// notStarted reports errors after which the execution certainly does not exist: throttling and
// other requests refused as the caller's fault.
func notStarted(err error) bool {
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		return false
	}
	return ae.ErrorFault() == smithy.FaultClient || ae.ErrorCode() == "ThrottlingException"
}

func permanentStartError(err error) bool {
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		return false
	}
	switch ae.ErrorCode() {
	// ValidationException: a field failed its constraints (the input over 256 KiB, say); the same
	// request is refused the same way on every try.
	case "InvalidArn", "InvalidName", "InvalidExecutionInput", "StateMachineDoesNotExist", "StateMachineDeleting", "ValidationException":
		return true
	}
	return false
}

func isErr[T error](err error) bool {
	var t T
	return errors.As(err, &t)
}
