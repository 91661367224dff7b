// Package deadletter puts refused and exhausted jobs on the dead-letter queue. The body is the job as a
// producer would submit it, so a redrive can send it back unchanged; why it is there travels in message
// attributes (reason, source, type, jobId, key, sender, attempt, error, cause, batch).
package deadletter

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sfnlimit/sfnlimit/internal/lambda/sqsbatch"
)

// Attribute names on dead-letter messages.
const (
	AttrReason = "reason"
	AttrSource = "source"
	AttrType   = "type"
	AttrJobID  = "jobId"
	AttrKey    = "key"
	// AttrSender is the job's sender (job.Job.Sender), part of its identity. Only a dead letter
	// the limiter sent (its SenderId is one of the limiter's roles) is trusted to carry it: one
	// SQS moved from the general queue carries its producer's own attributes.
	AttrSender  = "sender"
	AttrAttempt = "attempt"
	AttrError   = "error"
	AttrCause   = "cause"
	AttrBatch   = "batch"
)

// Reasons set by the limiter itself (the router's refusals use job.Reason values).
const (
	ReasonAttemptsExhausted = "attempts_exhausted"
)

// maxAttr keeps a free-text attribute well inside SQS's message size.
const maxAttr = 4096

// maxAttrs is the most message attributes SQS takes on one message (SendMessage reference).
const maxAttrs = 10

// Entry is one dead letter.
type Entry struct {
	Reason string
	Source string // router, starter or releaser
	Type   string
	JobID  string
	// Key is the job's key ("" the default key): a job is its type, key and id.
	Key string
	// Sender is the job's sender ("" none): a job is its type, sender, key and id.
	Sender  string
	Attempt int
	Error   string
	Cause   string
	Body    string
	// Batch is the job's batch ("" none), sent as an attribute so that a batch's dead letters can
	// be told apart; Redrive is the job's redrive generation that ended here (the body carries
	// the next one, for a redrive).
	Batch   string
	Redrive int
	// Refused says the job was refused as bad input rather than failed: its batch counts it so.
	Refused bool
	// BatchRecorded says the sender recorded the job's end in its batch already (before a step
	// that must not fail after it), so batchend.DeadLetters does not record it again.
	BatchRecorded bool
}

type sendAPI interface {
	SendMessage(context.Context, *sqs.SendMessageInput, ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
}

// Queue sends dead letters to one queue.
type Queue struct {
	client sendAPI
	url    string
}

// New returns a dead-letter sender for the queue at url.
func New(client sendAPI, url string) *Queue { return &Queue{client: client, url: url} }

// Send puts e on the dead-letter queue.
func (q *Queue) Send(ctx context.Context, e Entry) error {
	attrs := map[string]types.MessageAttributeValue{}
	add := func(k, v string) {
		if v == "" {
			return
		}
		v = clean(v, maxAttr)
		attrs[k] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
	}
	add(AttrReason, e.Reason)
	add(AttrSource, e.Source)
	add(AttrType, e.Type)
	add(AttrJobID, e.JobID)
	add(AttrKey, e.Key)
	add(AttrSender, e.Sender)
	if e.Attempt > 0 {
		add(AttrAttempt, strconv.Itoa(e.Attempt))
	}
	add(AttrError, e.Error)
	add(AttrCause, e.Cause)
	add(AttrBatch, e.Batch)
	body := e.Body
	if body == "" {
		body = "{}" // SQS refuses an empty body; the attributes carry what is known
	}
	// SQS counts the attributes (names, types and values) in the message's 1 MiB. A job refused
	// near that size (input_too_large) would not fit beside its reason, and a failed send would
	// leave it to SQS's redrive, which moves it without one: its body is cut to fit, and says so.
	if room := sqsbatch.MaxMessageBytes - attrBytes(attrs) - attrBytes(truncationAttr(len(body))); len(body)+attrBytes(attrs) > sqsbatch.MaxMessageBytes {
		if len(attrs) >= maxAttrs {
			// SQS takes at most 10 attributes. Only a router refusal is cut (the others' bodies
			// hold at most an execution input), and its error is its reason, kept as such.
			delete(attrs, AttrError)
		}
		maps.Copy(attrs, truncationAttr(len(body)))
		body = clean(body, room)
	}
	if _, err := q.client.SendMessage(ctx, &sqs.SendMessageInput{
		QueueUrl: &q.url, MessageBody: &body, MessageAttributes: attrs,
	}); err != nil {
		return fmt.Errorf("dead-letter job %q (%s): %w", e.JobID, e.Reason, err)
	}
	return nil
}

// AttrBodyTruncatedFrom, on a dead letter whose body was cut to fit SQS's message size, is the
// job's size in bytes: the body is its first bytes, not a job that can be redriven.
const AttrBodyTruncatedFrom = "bodyTruncatedFrom"

func truncationAttr(size int) map[string]types.MessageAttributeValue {
	return map[string]types.MessageAttributeValue{AttrBodyTruncatedFrom: {DataType: aws.String("String"), StringValue: aws.String(strconv.Itoa(size))}}
}

// attrBytes is what attributes count toward a message's size: each one's name, type and value.
func attrBytes(attrs map[string]types.MessageAttributeValue) int {
	n := 0
	for k, v := range attrs {
		n += len(k) + len(aws.ToString(v.DataType)) + len(aws.ToString(v.StringValue))
	}
	return n
}

// clean keeps what SQS accepts in a message attribute (#x9 #xA #xD #x20-#xD7FF #xE000-#xFFFD
// #x10000-#x10FFFF), replacing anything else with U+FFFD, and cuts it to at most n bytes on a
// character boundary.
func clean(v string, n int) string {
	v = strings.Map(func(r rune) rune {
		switch {
		case r == 0x9 || r == 0xA || r == 0xD, r >= 0x20 && r <= 0xD7FF, r >= 0xE000 && r <= 0xFFFD, r >= 0x10000 && r <= 0x10FFFF:
			return r
		}
		return utf8.RuneError
	}, strings.ToValidUTF8(v, string(utf8.RuneError)))
	if len(v) <= n {
		return v
	}
	for n > 0 && !utf8.RuneStart(v[n]) {
		n--
	}
	return v[:n]
}
