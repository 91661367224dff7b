package simworld

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// The SQS calls only the operator's commands make (dlq redrive reads the dead-letter queue).

// ReceiveMessage takes up to MaxNumberOfMessages (1-10) visible messages and hides them for the
// request's VisibilityTimeout (the queue's when 0), as SQS does; it never waits (a long poll of an
// empty queue answers empty once its wait is over, which changes nothing here).
func (s sqsClient) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, _ ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	c, err := s.w.gate(ctx, "sqs.ReceiveMessage", aws.ToString(in.QueueUrl))
	if err != nil {
		return nil, err
	}
	q, err := s.q(in.QueueUrl)
	if err != nil {
		return nil, err
	}
	n := int(in.MaxNumberOfMessages)
	if n < 1 || n > 10 {
		if n != 0 {
			return after(c, (*sqs.ReceiveMessageOutput)(nil), apiError("InvalidParameterValue", "MaxNumberOfMessages must be 1 to 10"))
		}
		n = 1
	}
	now := s.w.now()
	out := &sqs.ReceiveMessageOutput{}
	for _, m := range q.receive(n) {
		if in.VisibilityTimeout > 0 {
			m.visibleAt = now.Add(time.Duration(in.VisibilityTimeout) * time.Second)
		}
		out.Messages = append(out.Messages, sqstypes.Message{
			MessageId: aws.String(m.id), ReceiptHandle: aws.String(m.handle), Body: aws.String(m.body), MessageAttributes: m.attrs,
			Attributes: map[string]string{
				string(sqstypes.MessageSystemAttributeNameSentTimestamp):           strconv.FormatInt(m.sentAt.UnixMilli(), 10),
				string(sqstypes.MessageSystemAttributeNameApproximateReceiveCount): strconv.Itoa(m.receives),
				string(sqstypes.MessageSystemAttributeNameSenderId):                m.sender,
			},
		})
	}
	return after(c, out, nil)
}

// DeleteMessageBatch deletes each entry's message by its receipt handle (1-10 entries); an older
// handle deletes nothing and succeeds, as DeleteMessage.
func (s sqsClient) DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, _ ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	var key strings.Builder
	key.WriteString(aws.ToString(in.QueueUrl))
	for _, e := range in.Entries {
		key.WriteString(" " + aws.ToString(e.ReceiptHandle))
	}
	c, err := s.w.gate(ctx, "sqs.DeleteMessageBatch", key.String())
	if err != nil {
		return nil, err
	}
	q, err := s.q(in.QueueUrl)
	if err != nil {
		return nil, err
	}
	if len(in.Entries) == 0 || len(in.Entries) > 10 {
		return after(c, (*sqs.DeleteMessageBatchOutput)(nil), &sqstypes.TooManyEntriesInBatchRequest{Message: aws.String("a batch takes 1 to 10 entries")})
	}
	out := &sqs.DeleteMessageBatchOutput{}
	for _, e := range in.Entries {
		q.remove(aws.ToString(e.ReceiptHandle))
		out.Successful = append(out.Successful, sqstypes.DeleteMessageBatchResultEntry{Id: e.Id})
	}
	return after(c, out, nil)
}
