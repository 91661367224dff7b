package router_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sfnlimit/sfnlimit/internal/lambda/lane"
	"github.com/sfnlimit/sfnlimit/internal/lambda/router"
	"github.com/sfnlimit/sfnlimit/internal/lambda/sqsbatch"
	"github.com/sfnlimit/sfnlimit/internal/tools/emulator"
	"github.com/sfnlimit/sfnlimit/internal/tools/local/gateway"
)

// lanesQueue is a FIFO queue on moto behind the local stack's gateway, which refuses SQS requests
// over SQS's size limits as SQS does.
func lanesQueue(t *testing.T) (*sqs.Client, string, *gateway.Gateway) {
	t.Helper()
	ctx := context.Background()
	gw, err := gateway.New(gateway.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := gw.Start(ctx, "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gw.Close() })
	moto, err := emulator.StartMoto(ctx, emulator.MotoOptions{})
	if err != nil {
		t.Fatalf("StartMoto() = %v (moto %s is preinstalled on these machines)", err, emulator.MotoVersion)
	}
	t.Cleanup(func() { _ = moto.Stop() })
	if err := gw.SetMotoURL(moto.Endpoint()); err != nil {
		t.Fatal(err)
	}
	c := sqs.NewFromConfig(aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("test", "test", "")},
		func(o *sqs.Options) { o.BaseEndpoint = aws.String(gw.URL()) })
	q, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{
		QueueName:  aws.String("lanes.fifo"),
		Attributes: map[string]string{"FifoQueue": "true"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return c, aws.ToString(q.QueueUrl), gw
}

// A batch of ten jobs, each near Step Functions' 256 KiB input limit, is routed whole: 2.5 MiB is
// more than one SendMessageBatch may hold (1 MiB), and a refused batch used to fail every job of it
// on every delivery until the general queue dead-lettered them all without a reason.
func TestRoutesJobsNearTheInputLimit(t *testing.T) {
	t.Parallel()
	c, url, gw := lanesQueue(t)
	ev := events.SQSEvent{}
	var want []string
	for i := range 10 {
		id := fmt.Sprint("big-", i)
		want = append(want, id)
		ev.Records = append(ev.Records, events.SQSMessage{
			MessageId:  fmt.Sprintf("b1000000-0000-4000-8000-%012d", i),
			Body:       fmt.Sprintf(`{"type":"payments","id":%q,"input":{"data":%q}}`, id, strings.Repeat("x", 250*1024)),
			Attributes: map[string]string{"SentTimestamp": fmt.Sprint(time.Now().UnixMilli())},
		})
	}
	dlq := &fakeDLQ{}
	r := &router.Router{Config: &fakeConfig{limits: limits}, Lanes: lane.Hashed{}, Lanesq: sqsbatch.NewSender(c, url), DLQ: dlq, Log: slog.New(slog.DiscardHandler)}
	resp, err := r.Handle(t.Context(), ev)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.BatchItemFailures) != 0 || len(dlq.sent) != 0 {
		t.Fatalf("Handle() failed %d jobs and dead-lettered %d, want every job routed", len(resp.BatchItemFailures), len(dlq.sent))
	}
	var got []string
	for {
		out, err := c.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Messages) == 0 {
			break
		}
		for _, m := range out.Messages {
			var b struct{ ID string }
			if err := json.Unmarshal([]byte(aws.ToString(m.Body)), &b); err != nil {
				t.Fatal(err)
			}
			got = append(got, b.ID)
			if _, err := c.DeleteMessage(t.Context(), &sqs.DeleteMessageInput{QueueUrl: &url, ReceiptHandle: m.ReceiptHandle}); err != nil {
				t.Fatal(err)
			}
		}
	}
	sort.Strings(got)
	if !slices.Equal(got, want) {
		t.Errorf("lanes queue holds %v, want %v", got, want)
	}
	calls := gw.Calls()
	if n := calls[gateway.Call{Service: "sqs", Operation: "SendMessageBatch"}]; n < 3 {
		t.Errorf("%d SendMessageBatch calls, want at least 3 for 2.5 MiB", n)
	}
}
