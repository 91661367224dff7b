package emulator

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// SQS never has two messages of one FIFO group in flight, however many consumers long-poll the queue
// at once: that is what makes a lane's group its concurrency limit. moto 5.2.1 alone breaks this
// under concurrent long polls; the launcher must keep it, for the local event source mappings
// long-poll as Lambda's do.
func TestMotoFIFOGroupsStayBlockedUnderConcurrentLongPolls(t *testing.T) {
	t.Parallel()
	p := startMoto(t, MotoOptions{})
	c := sqsClient(p.Endpoint())
	// A message that never comes back fails the test below instead of holding it until go test's
	// timeout.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	q, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{
		QueueName:  aws.String("groups.fifo"),
		Attributes: map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true", "VisibilityTimeout": "30"},
	})
	if err != nil {
		t.Fatalf("CreateQueue = %v", err)
	}
	const groups, perGroup, consumers = 3, 10, 8
	send := func() {
		// One message at a time into an empty queue, while the consumers' long polls wait: a long
		// poll that read the groups in flight before it waited must not hand out a group taken since.
		for i := range perGroup {
			for g := range groups {
				body := fmt.Sprintf("g%d-%d", g, i)
				if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String(body), MessageGroupId: aws.String(fmt.Sprintf("g%d", g))}); err != nil {
					t.Errorf("SendMessage = %v", err)
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
	}
	var (
		mu       sync.Mutex
		inFlight = map[string]int{} // group -> consumer holding it
		done     int
		broken   []string
		wg       sync.WaitGroup
	)
	for w := range consumers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				finished := done >= groups*perGroup // more would be a message delivered twice: reported below
				mu.Unlock()
				if finished || ctx.Err() != nil {
					return
				}
				out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
				if err != nil {
					if ctx.Err() == nil {
						t.Errorf("ReceiveMessage = %v", err)
					}
					return
				}
				mine := map[string]bool{}
				mu.Lock()
				for _, m := range out.Messages {
					g, _, _ := strings.Cut(aws.ToString(m.Body), "-")
					if holder, ok := inFlight[g]; ok && holder != w {
						broken = append(broken, fmt.Sprintf("%s handed to consumer %d while consumer %d held group %s", aws.ToString(m.Body), w, holder, g))
					}
					inFlight[g], mine[g] = w, true
				}
				mu.Unlock()
				time.Sleep(50 * time.Millisecond) // the job's work: its group stays in flight meanwhile
				// The group is let go before its messages are deleted: a delivery of it before the
				// delete is a broken block; one after it is not.
				mu.Lock()
				for g := range mine {
					if inFlight[g] == w {
						delete(inFlight, g)
					}
				}
				mu.Unlock()
				for _, m := range out.Messages {
					if _, err := c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: q.QueueUrl, ReceiptHandle: m.ReceiptHandle}); err != nil {
						t.Errorf("DeleteMessage = %v", err)
					}
				}
				mu.Lock()
				done += len(out.Messages)
				mu.Unlock()
			}
		}()
	}
	send()
	wg.Wait()
	if len(broken) > 0 {
		t.Fatalf("%d deliveries broke FIFO group blocking, first: %s", len(broken), broken[0])
	}
	if done != groups*perGroup {
		t.Fatalf("received %d messages, want %d", done, groups*perGroup)
	}
}

// A FIFO message's receipt handle expires when the message is received again: a visibility change
// with the earlier handle fails (SQS: "The receipt handle has expired") and leaves the message with
// its current receiver.
func TestMotoFIFOEarlierReceiptHandleExpires(t *testing.T) {
	t.Parallel()
	p := startMoto(t, MotoOptions{})
	c := sqsClient(p.Endpoint())
	ctx := context.Background()
	q, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{
		QueueName:  aws.String("handles.fifo"),
		Attributes: map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true", "VisibilityTimeout": "30"},
	})
	if err != nil {
		t.Fatalf("CreateQueue = %v", err)
	}
	if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String("m"), MessageGroupId: aws.String("g")}); err != nil {
		t.Fatalf("SendMessage = %v", err)
	}
	receive := func() string {
		t.Helper()
		out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, WaitTimeSeconds: 1})
		if err != nil || len(out.Messages) != 1 {
			t.Fatalf("ReceiveMessage = %v, %v; want the message", out, err)
		}
		return aws.ToString(out.Messages[0].ReceiptHandle)
	}
	first := receive()
	if _, err := c.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: q.QueueUrl, ReceiptHandle: &first, VisibilityTimeout: 0}); err != nil {
		t.Fatalf("ChangeMessageVisibility(current handle) = %v", err)
	}
	second := receive()
	if _, err := c.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: q.QueueUrl, ReceiptHandle: &first, VisibilityTimeout: 0}); err == nil {
		t.Fatal("ChangeMessageVisibility(earlier handle) = nil, want an error: the handle expired with the second receive")
	}
	out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: q.QueueUrl})
	if err != nil || len(out.Messages) != 0 {
		t.Fatalf("ReceiveMessage while the second receiver holds it = %v, %v; want nothing", out.Messages, err)
	}
	if _, err := c.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: q.QueueUrl, ReceiptHandle: &second, VisibilityTimeout: 0}); err != nil {
		t.Fatalf("ChangeMessageVisibility(current handle) = %v", err)
	}
}
