package gateway

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sfnlimit/sfnlimit/internal/lambda/sqsbatch"
)

// sqsbatch sends what SQS accepts through the gateway, on both SQS emulators: with SQS's limits it
// splits ten messages of 256 KiB into batches under 1 MiB; with the former 256 KiB limit the
// gateway refuses those batches and sqsbatch sends their messages one at a time. Nothing is lost,
// nothing is sent twice.
func TestSQSLimitsWithSender(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	ctx := context.Background()
	fq := startFauxqs(t)
	defer func() { _ = s.gw.SetSQSURL("") }()
	defer s.gw.SetSQSLimits(AWSSQSLimits())

	for _, backend := range []struct{ name, url string }{{"fauxqs", fq.Endpoint()}, {"moto", ""}} {
		for _, tt := range []struct {
			name        string
			limits      SQSLimits
			wantBatches int64
			wantSingles int64
		}{
			{name: "SQS's limits", limits: AWSSQSLimits(), wantBatches: 4},
			// Batches of 3 and 1 entries: three refused, then sent alone; the last fits.
			{name: "the former 256 KiB limit", limits: SQSLimits{MaxMessageBytes: 256*1024 + 64, MaxBatchBytes: 256*1024 + 64}, wantBatches: 4, wantSingles: 9},
		} {
			t.Run(backend.name+"/"+tt.name, func(t *testing.T) {
				if err := s.gw.SetSQSURL(backend.url); err != nil {
					t.Fatal(err)
				}
				s.gw.SetSQSLimits(tt.limits)
				c := sqsClient(s.gw.URL())
				q, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{
					QueueName:  aws.String(fmt.Sprintf("limits-%s-%d.fifo", backend.name, tt.wantSingles)),
					Attributes: map[string]string{"FifoQueue": "true"},
				})
				if err != nil {
					t.Fatal(err)
				}
				url := aws.ToString(q.QueueUrl)
				var entries []types.SendMessageBatchRequestEntry
				var want []string
				for i := range 10 {
					body := fmt.Sprintf("%d:%s", i, strings.Repeat("x", 256*1024-2))
					want = append(want, body)
					entries = append(entries, types.SendMessageBatchRequestEntry{
						Id: aws.String(fmt.Sprint(i)), MessageBody: aws.String(body),
						MessageGroupId: aws.String(fmt.Sprint("g", i%3)), MessageDeduplicationId: aws.String(fmt.Sprint("d", i)),
					})
				}
				before := s.gw.Calls()
				failed, err := sqsbatch.NewSender(c, url).Send(ctx, entries)
				if err != nil || len(failed) != 0 {
					t.Fatalf("Send() = %+v, %v, want no failure", failed, err)
				}
				after := s.gw.Calls()
				batches := after[Call{"sqs", "SendMessageBatch"}] - before[Call{"sqs", "SendMessageBatch"}]
				singles := after[Call{"sqs", "SendMessage"}] - before[Call{"sqs", "SendMessage"}]
				if batches != tt.wantBatches || singles != tt.wantSingles {
					t.Errorf("%d SendMessageBatch and %d SendMessage calls, want %d and %d", batches, singles, tt.wantBatches, tt.wantSingles)
				}
				var got []string
				for {
					out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
					if err != nil {
						t.Fatal(err)
					}
					if len(out.Messages) == 0 {
						break
					}
					for _, m := range out.Messages {
						got = append(got, aws.ToString(m.Body))
						if _, err := c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: &url, ReceiptHandle: m.ReceiptHandle}); err != nil {
							t.Fatal(err)
						}
					}
				}
				sort.Strings(got)
				sort.Strings(want)
				if !slices.Equal(got, want) {
					t.Errorf("queue holds %d messages, want the 10 sent, once each", len(got))
				}
			})
		}
	}
}
