package fakes

import (
	"context"
	"fmt"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// SQS records SendMessage, DeleteMessage and ChangeMessageVisibility calls. It keeps no queue: it is
// what the handlers asked SQS to do that tests look at. Each On* hook, when set, decides the call's
// error (nil lets it succeed); failed calls are recorded too, with their error.
type SQS struct {
	OnSend             func(in *sqs.SendMessageInput) error
	OnDelete           func(in *sqs.DeleteMessageInput) error
	OnChangeVisibility func(in *sqs.ChangeMessageVisibilityInput) error

	mu       sync.Mutex
	sends    []SentMessage
	deletes  []Deletion
	visibles []VisibilityChange
	nextID   int
}

// SentMessage is one SendMessage call.
type SentMessage struct {
	QueueURL               string
	Body                   string
	MessageGroupID         string
	MessageDeduplicationID string
	Attributes             map[string]string // string message attributes
	Err                    error
}

// Deletion is one DeleteMessage call.
type Deletion struct {
	QueueURL      string
	ReceiptHandle string
	Err           error
}

// VisibilityChange is one ChangeMessageVisibility call.
type VisibilityChange struct {
	QueueURL      string
	ReceiptHandle string
	Timeout       int32
	Err           error
}

// SendMessage records the message.
func (q *SQS) SendMessage(_ context.Context, in *sqs.SendMessageInput, _ ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	var err error
	if q.OnSend != nil {
		err = q.OnSend(in)
	}
	attrs := map[string]string{}
	for k, v := range in.MessageAttributes {
		if v.StringValue != nil {
			attrs[k] = *v.StringValue
		}
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.sends = append(q.sends, SentMessage{
		QueueURL: aws.ToString(in.QueueUrl), Body: aws.ToString(in.MessageBody),
		MessageGroupID: aws.ToString(in.MessageGroupId), MessageDeduplicationID: aws.ToString(in.MessageDeduplicationId),
		Attributes: attrs, Err: err,
	})
	if err != nil {
		return nil, err
	}
	q.nextID++
	return &sqs.SendMessageOutput{MessageId: aws.String(fmt.Sprintf("fake-%06d", q.nextID))}, nil
}

// DeleteMessage records the deletion.
func (q *SQS) DeleteMessage(_ context.Context, in *sqs.DeleteMessageInput, _ ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error) {
	var err error
	if q.OnDelete != nil {
		err = q.OnDelete(in)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.deletes = append(q.deletes, Deletion{QueueURL: aws.ToString(in.QueueUrl), ReceiptHandle: aws.ToString(in.ReceiptHandle), Err: err})
	if err != nil {
		return nil, err
	}
	return &sqs.DeleteMessageOutput{}, nil
}

// ChangeMessageVisibility records the change.
func (q *SQS) ChangeMessageVisibility(_ context.Context, in *sqs.ChangeMessageVisibilityInput, _ ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error) {
	var err error
	if q.OnChangeVisibility != nil {
		err = q.OnChangeVisibility(in)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.visibles = append(q.visibles, VisibilityChange{
		QueueURL: aws.ToString(in.QueueUrl), ReceiptHandle: aws.ToString(in.ReceiptHandle), Timeout: in.VisibilityTimeout, Err: err,
	})
	if err != nil {
		return nil, err
	}
	return &sqs.ChangeMessageVisibilityOutput{}, nil
}

// ChangeMessageVisibilityBatch records each entry as one change; OnChangeVisibility's error for an
// entry makes that entry fail.
func (q *SQS) ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, _ ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	out := &sqs.ChangeMessageVisibilityBatchOutput{}
	for _, e := range in.Entries {
		_, err := q.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: in.QueueUrl, ReceiptHandle: e.ReceiptHandle, VisibilityTimeout: e.VisibilityTimeout})
		if err != nil {
			out.Failed = append(out.Failed, sqstypes.BatchResultErrorEntry{Id: e.Id, Code: aws.String("Failed"), Message: aws.String(err.Error())})
			continue
		}
		out.Successful = append(out.Successful, sqstypes.ChangeMessageVisibilityBatchResultEntry{Id: e.Id})
	}
	return out, nil
}

// Sent returns the messages sent to queueURL, failed sends included.
func (q *SQS) Sent(queueURL string) []SentMessage {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []SentMessage
	for _, m := range q.sends {
		if m.QueueURL == queueURL {
			out = append(out, m)
		}
	}
	return out
}

// Deletes returns every DeleteMessage call in order.
func (q *SQS) Deletes() []Deletion {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]Deletion(nil), q.deletes...)
}

// VisibilityChanges returns every ChangeMessageVisibility call in order.
func (q *SQS) VisibilityChanges() []VisibilityChange {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]VisibilityChange(nil), q.visibles...)
}

// Calls returns how many calls of any kind were made.
func (q *SQS) Calls() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.sends) + len(q.deletes) + len(q.visibles)
}
