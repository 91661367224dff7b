package gateway

import (
	"context"
	"crypto/md5"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/tools/emulator"
)

// dedupBackend is an SQS emulator behind a gateway.
type dedupBackend struct {
	name   string
	url    string // the gateway's SQS URL for it ("" is moto)
	direct string // its own endpoint
}

// dedupStack starts a gateway with moto and fauxqs behind it.
func dedupStack(t *testing.T) (*Gateway, []dedupBackend) {
	t.Helper()
	ctx := context.Background()
	gw, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := gw.Start(ctx, "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gw.Close() })
	moto, err := emulator.StartMoto(ctx, emulator.MotoOptions{InterpreterEndpoint: gw.URL()})
	if err != nil {
		t.Fatalf("StartMoto() = %v (moto %s must be importable by python3)", err, emulator.MotoVersion)
	}
	t.Cleanup(func() { _ = moto.Stop() })
	if err := gw.SetMotoURL(moto.Endpoint()); err != nil {
		t.Fatal(err)
	}
	fq := startFauxqs(t)
	return gw, []dedupBackend{
		{name: "moto", url: "", direct: moto.Endpoint()},
		{name: "fauxqs", url: fq.Endpoint(), direct: fq.Endpoint()},
	}
}

func createFIFO(t *testing.T, c *sqs.Client, name string, attrs map[string]string) string {
	t.Helper()
	all := map[string]string{"FifoQueue": "true", "VisibilityTimeout": "30"}
	for k, v := range attrs {
		all[k] = v
	}
	out, err := c.CreateQueue(context.Background(), &sqs.CreateQueueInput{QueueName: aws.String(name + ".fifo"), Attributes: all})
	if err != nil {
		t.Fatalf("CreateQueue %s = %v", name, err)
	}
	return aws.ToString(out.QueueUrl)
}

func send(t *testing.T, c *sqs.Client, url, group, dedup, body string) string {
	t.Helper()
	in := &sqs.SendMessageInput{QueueUrl: &url, MessageGroupId: &group, MessageBody: &body}
	if dedup != "" {
		in.MessageDeduplicationId = &dedup
	}
	out, err := c.SendMessage(context.Background(), in)
	if err != nil {
		t.Fatalf("SendMessage %s/%s = %v", group, dedup, err)
	}
	if aws.ToString(out.MessageId) == "" {
		t.Errorf("SendMessage %s/%s answered no MessageId", group, dedup)
	}
	return aws.ToString(out.MessageId)
}

// drain receives and deletes every message the queue hands out until a receive waits a second for
// nothing, and returns their bodies, sorted.
func drain(t *testing.T, c *sqs.Client, url string) []string {
	t.Helper()
	ctx := context.Background()
	var bodies []string
	for range 20 {
		out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
		if err != nil {
			t.Fatalf("ReceiveMessage = %v", err)
		}
		if len(out.Messages) == 0 {
			break
		}
		for _, m := range out.Messages {
			bodies = append(bodies, aws.ToString(m.Body))
			if _, err := c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: &url, ReceiptHandle: m.ReceiptHandle}); err != nil {
				t.Fatalf("DeleteMessage = %v", err)
			}
		}
	}
	sort.Strings(bodies)
	return bodies
}

func wantBodies(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	sort.Strings(want)
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("%s: queue held %q, want %q", what, got, want)
	}
}

// The gateway applies SQS FIFO deduplication as AWS does, on both emulators: a message whose
// deduplication id (explicit, or the body's SHA-256 with content-based deduplication) was accepted
// by its queue (or its message group, with DeduplicationScope messageGroup) within the last five
// minutes is accepted and not enqueued, even though the first copy was received and deleted.
func TestFIFODeduplication(t *testing.T) {
	t.Parallel()
	gw, backends := dedupStack(t)
	ctx := context.Background()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			if err := gw.SetSQSURL(b.url); err != nil {
				t.Fatal(err)
			}
			c := sqsClient(gw.URL())

			// What the emulator itself does with a copy sent after the first was deleted.
			direct := sqsClient(b.direct)
			raw := createFIFO(t, direct, "raw-"+b.name, nil)
			send(t, direct, raw, "g", "d1", "first")
			send(t, direct, raw, "g", "d1", "copy while the first is queued")
			first := drain(t, direct, raw)
			send(t, direct, raw, "g", "d1", "copy after the first was deleted")
			after := drain(t, direct, raw)
			t.Logf("%s alone: a copy sent while the first is queued: %d enqueued in all %q; a copy sent after the first was deleted: %q",
				b.name, len(first), first, after)

			scoped := createFIFO(t, c, "scoped-"+b.name, map[string]string{"ContentBasedDeduplication": "false", "DeduplicationScope": "messageGroup", "FifoThroughputLimit": "perMessageGroupId"})
			id1 := send(t, c, scoped, "g1", "d1", "one")
			wantBodies(t, "first send", drain(t, c, scoped), "one")
			if id := send(t, c, scoped, "g1", "d1", "one again"); id != id1 {
				t.Errorf("duplicate's MessageId = %s, want the first's %s", id, id1)
			}
			wantBodies(t, "copy sent after the first was deleted", drain(t, c, scoped))
			send(t, c, scoped, "g2", "d1", "other group")
			wantBodies(t, "same id in another group (scope messageGroup)", drain(t, c, scoped), "other group")

			// Another group while the first is still queued: the emulators compare ids across groups.
			send(t, c, scoped, "g1", "d4", "queued in g1")
			send(t, c, scoped, "g2", "d4", "queued in g2")
			wantBodies(t, "same id in two groups, both queued (scope messageGroup)", drain(t, c, scoped), "queued in g1", "queued in g2")

			// A copy's answer carries its own checksums, as the emulator's answer to the first did.
			attrs := map[string]sqstypes.MessageAttributeValue{
				"reason": {DataType: aws.String("String"), StringValue: aws.String("unknown_type")},
				"count":  {DataType: aws.String("Number"), StringValue: aws.String("3")},
				"blob":   {DataType: aws.String("Binary"), BinaryValue: []byte{0, 1, 2, 250}},
			}
			firstOut, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &scoped, MessageGroupId: aws.String("g1"),
				MessageDeduplicationId: aws.String("d-attrs"), MessageBody: aws.String("with attributes"), MessageAttributes: attrs})
			if err != nil {
				t.Fatalf("SendMessage with attributes = %v", err)
			}
			copyOut, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &scoped, MessageGroupId: aws.String("g1"),
				MessageDeduplicationId: aws.String("d-attrs"), MessageBody: aws.String("with attributes"), MessageAttributes: attrs})
			if err != nil {
				t.Fatalf("SendMessage of a copy with attributes = %v", err)
			}
			if m1, m2 := aws.ToString(firstOut.MD5OfMessageAttributes), aws.ToString(copyOut.MD5OfMessageAttributes); m1 != m2 || m1 == "" {
				t.Errorf("MD5OfMessageAttributes: %s's answer %q, the gateway's to the copy %q; want equal", b.name, m1, m2)
			}
			wantBodies(t, "message with attributes and its copy", drain(t, c, scoped), "with attributes")

			out, err := c.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: &scoped, Entries: []sqstypes.SendMessageBatchRequestEntry{
				{Id: aws.String("a"), MessageGroupId: aws.String("g1"), MessageDeduplicationId: aws.String("d1"), MessageBody: aws.String("dup of an earlier send")},
				{Id: aws.String("b"), MessageGroupId: aws.String("g1"), MessageDeduplicationId: aws.String("d2"), MessageBody: aws.String("two")},
				{Id: aws.String("c"), MessageGroupId: aws.String("g1"), MessageDeduplicationId: aws.String("d2"), MessageBody: aws.String("dup in the batch")},
				{Id: aws.String("d"), MessageGroupId: aws.String("g1"), MessageDeduplicationId: aws.String("d3"), MessageBody: aws.String("three")},
			}})
			if err != nil {
				t.Fatalf("SendMessageBatch = %v", err)
			}
			if len(out.Successful) != 4 || len(out.Failed) != 0 {
				t.Errorf("SendMessageBatch: %d successful, %d failed, want 4 and 0", len(out.Successful), len(out.Failed))
			}
			wantBodies(t, "batch with duplicates", drain(t, c, scoped), "two", "three")

			content := createFIFO(t, c, "content-"+b.name, map[string]string{"ContentBasedDeduplication": "true"})
			send(t, c, content, "g1", "", "same body")
			send(t, c, content, "g2", "", "same body")
			send(t, c, content, "g1", "explicit", "same body")
			wantBodies(t, "content-based, queue scope", drain(t, c, content), "same body", "same body")
			send(t, c, content, "g1", "", "same body")
			wantBodies(t, "content-based copy after the first was deleted", drain(t, c, content))

			// A redriven job (internal/lambda/job: its generation is part of the id) is enqueued
			// within the window; before the fix its id was its first run's, which SQS drops.
			lanes := createFIFO(t, c, "lanes-"+b.name, map[string]string{"ContentBasedDeduplication": "false", "DeduplicationScope": "messageGroup"})
			send(t, c, lanes, "llm-1", job.DedupID("llm", "", "", "j1", 0), "run 0")
			wantBodies(t, "job's first run", drain(t, c, lanes), "run 0")
			send(t, c, lanes, "llm-1", job.DedupID("llm", "", "", "j1", 1), "run 1")
			wantBodies(t, "redriven job within the window", drain(t, c, lanes), "run 1")
			send(t, c, lanes, "llm-1", job.DedupID("llm", "", "", "j1", 0), "run 1 under its first run's id")
			wantBodies(t, "redriven job under its first run's id (before the fix)", drain(t, c, lanes))
		})
	}
	_ = gw.SetSQSURL("")
}

// After the window a copy is enqueued again; the window is short here so the test need not wait
// five minutes (only its lower bound matters: the copy is sent at least a window after the first).
func TestFIFODeduplicationWindow(t *testing.T) {
	t.Parallel()
	gw, backends := dedupStack(t)
	if got := gw.DedupWindow(); got != 5*time.Minute {
		t.Errorf("default window = %v, want SQS's 5 minutes", got)
	}
	const window = time.Second
	gw.SetDedupWindow(window)
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			if err := gw.SetSQSURL(b.url); err != nil {
				t.Fatal(err)
			}
			c := sqsClient(gw.URL())
			q := createFIFO(t, c, fmt.Sprintf("window-%s", b.name), nil)
			send(t, c, q, "g", "d", "first")
			wantBodies(t, "first send", drain(t, c, q), "first")
			time.Sleep(window + window/2)
			send(t, c, q, "g", "d", "after the window")
			wantBodies(t, "copy sent after the window", drain(t, c, q), "after the window")
		})
	}
	_ = gw.SetSQSURL("")
}

// Copies sent at the same moment are one send: exactly one reaches the emulator, and every copy is
// answered with its MessageId. A failed first send lets the next copy through.
func TestFIFODeduplicationConcurrentCopies(t *testing.T) {
	var (
		mu        sync.Mutex
		forwarded int
		failNext  bool
	)
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if failNext {
			failNext = false
			writeJSONError(w, http.StatusInternalServerError, "InternalError", "try again", jsonType)
			return
		}
		forwarded++
		time.Sleep(20 * time.Millisecond) // the copies arrive while the first is in flight
		fmt.Fprintf(w, `{"MessageId":"m-%d","MD5OfMessageBody":"%x"}`, forwarded, md5.Sum([]byte("body")))
	}))
	t.Cleanup(upstream.Close)
	gw, err := New(Options{MotoURL: upstream.URL})
	if err != nil {
		t.Fatal(err)
	}
	if err := gw.Start(context.Background(), ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gw.Close() })
	c := sqsClient(gw.URL())
	url := "http://" + strings.TrimPrefix(gw.URL(), "http://") + "/123456789012/q.fifo"

	const copies = 16
	ids := make([]string, copies)
	var wg sync.WaitGroup
	for i := range copies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := c.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: &url, MessageBody: aws.String("body"),
				MessageGroupId: aws.String("g"), MessageDeduplicationId: aws.String("same")})
			if err != nil {
				t.Errorf("copy %d: SendMessage = %v", i, err)
				return
			}
			ids[i] = aws.ToString(out.MessageId)
		}()
	}
	wg.Wait()
	if forwarded != 1 {
		t.Errorf("%d copies reached the emulator, want 1", forwarded)
	}
	for i, id := range ids {
		if id != "m-1" {
			t.Errorf("copy %d answered MessageId %q, want the first's m-1", i, id)
		}
	}

	mu.Lock()
	failNext = true
	mu.Unlock()
	in := &sqs.SendMessageInput{QueueUrl: &url, MessageBody: aws.String("body"), MessageGroupId: aws.String("g"), MessageDeduplicationId: aws.String("other")}
	if _, err := c.SendMessage(context.Background(), in); err == nil {
		t.Fatal("SendMessage = nil, want the emulator's error")
	}
	out, err := c.SendMessage(context.Background(), in)
	if err != nil || aws.ToString(out.MessageId) != "m-2" || forwarded != 2 {
		t.Errorf("copy after a failed send: %v, %v, %d forwarded; want it sent (m-2, 2 forwarded)", out, err, forwarded)
	}
}
