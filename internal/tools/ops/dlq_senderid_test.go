package ops

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sfnlimit/sfnlimit/internal/lambda/deadletter"
	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/lambda/router"
)

// A job is its type, sender, key and id: two producers' dead letters of one type, key and id are
// two jobs, both redriven in one run, each sent on behalf of its own producer (the router then
// names each "{caller}>{producer}", so the two stay apart once the operator sends them).
func TestDLQRedriveTwoSendersOfOneJob(t *testing.T) {
	t.Parallel()
	c := sqsClient(t)
	url, general := queues(t, c)
	b := `{"type":"payments","id":"o-1","key":"acme","input":{},"redrive":1}`
	for _, s := range []string{"AROAACME", "AROAMALLORY", "AIDAOPS>AROAACME"} {
		deadLetter(t, c, url, deadletter.Entry{Reason: "attempts_exhausted", Source: "releaser", Type: "payments", JobID: "o-1", Key: "acme", Sender: s, Body: b})
	}
	res, err := DLQ{SQS: c, URL: url, General: general, Caller: "AIDAOPS"}.Redrive(t.Context(), Filter{}, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	// AROAACME's and AIDAOPS>AROAACME's are two jobs (one already AIDAOPS's redrive on acme's
	// behalf), both sent by AIDAOPS on AROAACME's behalf: the router names them by their senders,
	// the caller's.
	if res.Redriven != 3 || res.Returned != 0 {
		t.Errorf("Redrive() = %+v, want all 3 redriven (two senders' jobs, and a redrive's), none returned", res)
	}
	var named []string
	for {
		out, err := c.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: &general, MaxNumberOfMessages: 10, VisibilityTimeout: 300,
			WaitTimeSeconds: 1, MessageAttributeNames: []string{"All"}})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Messages) == 0 {
			break
		}
		for _, m := range out.Messages {
			named = append(named, aws.ToString(m.MessageAttributes[router.SenderAttribute].StringValue))
		}
	}
	slices.Sort(named)
	if want := []string{"AROAACME", "AROAACME", "AROAMALLORY"}; !slices.Equal(named, want) {
		t.Errorf("general queue's %s attributes = %v, want %v (each on behalf of its producer)", router.SenderAttribute, named, want)
	}
}

// A dead letter the limiter sent names its job's sender in its sender attribute; a message SQS moved
// from the general queue is its producer's (its SenderId's principal), whatever sender attribute
// its producer gave it.
func TestDeadLetterSender(t *testing.T) {
	limiters := types.Message{
		MessageId: aws.String("dl-1"), ReceiptHandle: aws.String("r"), Body: aws.String(`{"type":"payments","id":"o-1","input":{}}`),
		Attributes:        map[string]string{"SenderId": "AROARELEASER:sfnlimit-Releaser", "SentTimestamp": "1709978500000"},
		MessageAttributes: map[string]types.MessageAttributeValue{deadletter.AttrSender: strAttr("AROAACME"), deadletter.AttrJobID: strAttr("o-1"), deadletter.AttrType: strAttr("payments")},
	}
	if d := decode(limiters, "AROAROUTER"); d.Sender != "AROAACME" {
		t.Errorf("the limiter's dead letter's sender = %q, want AROAACME (its sender attribute)", d.Sender)
	}
	moved := types.Message{
		MessageId: aws.String("moved-1"), ReceiptHandle: aws.String("r"), Body: aws.String(`{"type":"payments","id":"o-1","input":{}}`),
		Attributes: map[string]string{"DeadLetterQueueSourceArn": "arn:aws:sqs:eu-west-1:123456789012:sfnlimit-GeneralQueue-abc",
			"SenderId": "AROAMALLORY:tenant-b", "SentTimestamp": "1709978500000"},
		MessageAttributes: map[string]types.MessageAttributeValue{deadletter.AttrSender: strAttr("AROAACME")},
	}
	if d := decode(moved, "AROAROUTER"); d.Sender != "AROAMALLORY" {
		t.Errorf("a moved message's sender = %q, want AROAMALLORY (its SenderId's, not its producer's attribute)", d.Sender)
	}
	for _, tt := range []struct{ sender, caller, want string }{
		{"AROAACME", "AIDAOPS", "AROAACME"},
		{"AIDAOPS>AROAACME", "AIDAOPS", "AROAACME"},                   // the caller's own redrive keeps its producer
		{"AIDAOPS>AROAACME", "AIDAOTHER", hashed("AIDAOPS>AROAACME")}, // another's job on AROAACME's behalf stays its own
		{"AIDAOPS>AROAACME", "", hashed("AIDAOPS>AROAACME")},
		{"", "AIDAOPS", ""},
	} {
		got := ""
		if a, ok := behalfOf(DeadLetter{Sender: tt.sender}, tt.caller)[SenderAttribute]; ok {
			got = aws.ToString(a.StringValue)
		}
		if got != tt.want {
			t.Errorf("redrive by %q of a dead letter of sender %q names %q, want %q", tt.caller, tt.sender, got, tt.want)
		}
	}
	if SenderAttribute != router.SenderAttribute {
		t.Errorf("ops.SenderAttribute = %q, router.SenderAttribute = %q: a redrive must name the producer as the router reads it", SenderAttribute, router.SenderAttribute)
	}
}

// A job the router held back (lanes queue full) is a new general-queue message sent by the router,
// its producer kept in sfnlimitSender (router.SenderAttribute). When SQS moves such a copy here
// after maxReceiveCount (a router outage while the lanes queue is full), its SenderId is the
// router's role: read as that principal's, every producer's held jobs are one sender's, so producer
// B's held job of A's type, key and id is the same job as A's (jobKey: the second is left as
// "returned"), and a redrive sends both on behalf of the router ("{caller}>{router}"), under one
// deduplication id and one execution name: SQS or the starter drops one as the other's copy.
func TestDeadLetterSenderOfHeldCopyMovedBySQS(t *testing.T) {
	held := func(id, producer string) DeadLetter {
		return decode(types.Message{
			MessageId: aws.String(id), ReceiptHandle: aws.String("r"),
			Body: aws.String(`{"type":"payments","id":"o-1","key":"acme","input":{}}`),
			Attributes: map[string]string{
				"DeadLetterQueueSourceArn": "arn:aws:sqs:eu-west-1:123456789012:sfnlimit-GeneralQueue-abc",
				"SenderId":                 "AROAROUTER:sfnlimit-Router", "SentTimestamp": "1709978500000", "ApproximateReceiveCount": "5",
			},
			MessageAttributes: map[string]types.MessageAttributeValue{
				router.SenderAttribute:      strAttr(producer),
				router.SubmittedAtAttribute: {DataType: aws.String("Number"), StringValue: aws.String("1709978400000")},
			},
		}, "AROAROUTER")
	}
	a, b := held("held-a", "AROAACME"), held("held-b", "AROAMALLORY")
	if jobKey(a) == jobKey(b) {
		t.Errorf("held copies of AROAACME's and AROAMALLORY's payments/acme/o-1 are one job (sender %q, %q): a redrive moves one and leaves the other as its copy", a.Sender, b.Sender)
	}
	for _, d := range []DeadLetter{a, b} {
		if got := aws.ToString(behalfOf(d, "AIDAOPS")[SenderAttribute].StringValue); got == "AROAROUTER" || got == "" {
			t.Errorf("redrive of a held copy (%s) names %q as its producer, want the producer its copy kept", d.MessageID, got)
		}
	}
}

// Any producer may name another in sfnlimitSender: producer B (AROAMALLORY) sending A's
// (AROAACME's) type, key and id on A's behalf sends a job of its own, "AROAMALLORY>AROAACME". Once
// it is a dead letter (B makes its own job fail, and sets its body's redrive to match A's), an
// operator's redrive names the part after ">" as the producer: B's job is sent on A's behalf, and
// the router names it "{operator}>AROAACME", exactly as it names the operator's redrive of A's own
// dead letter. The two are then one job: one deduplication id (SQS drops whichever comes second
// within five minutes) and one execution name (the starter takes B's execution, run on B's input,
// for A's job's): B's job replaces A's.
func TestDLQRedriveKeepsAProducersBehalfClaimItsOwn(t *testing.T) {
	const operator = "AIDAOPS"
	routed := func(d DeadLetter) string {
		named := ""
		if a, ok := behalfOf(d, operator)[SenderAttribute]; ok {
			named = aws.ToString(a.StringValue)
		}
		return job.Sender(operator, named) // what the router makes of the redriven message (router.origin)
	}
	acme := DeadLetter{MessageID: "dl-a", Type: "payments", JobID: "o-1", Key: "acme", Sender: "AROAACME"}
	mallory := DeadLetter{MessageID: "dl-b", Type: "payments", JobID: "o-1", Key: "acme", Sender: "AROAMALLORY>AROAACME"}
	if a, b := routed(acme), routed(mallory); a == b {
		t.Errorf("redriven by %s, AROAACME's dead letter and AROAMALLORY's job named on AROAACME's behalf are both sender %q: "+
			"one job (one dedup id %s, one execution name), so B's run stands for A's", operator, a, job.DedupID("payments", a, "acme", "o-1", 1))
	}
}

// A message SQS moved here from the general queue is read as the router read it (router.origin):
// a producer that is not the router and names another principal in sfnlimitSender sent a job of
// sender "{principal}>{named}". Its dead letter, read as the bare principal's, is another job: a
// job AIDAOPS redrove on AROAACME's behalf ("AIDAOPS>AROAACME") that SQS then moved here (a router
// outage) lists as AIDAOPS's own, and AIDAOPS's next redrive names AIDAOPS (behalfOf), so the
// router makes it "AIDAOPS": AROAACME's job becomes the operator's own job of that type, key and id.
func TestDeadLetterSenderOfNamedMessageMovedBySQS(t *testing.T) {
	moved := types.Message{
		MessageId: aws.String("moved-1"), ReceiptHandle: aws.String("r"), Body: aws.String(`{"type":"payments","id":"o-1","key":"acme","input":{},"redrive":1}`),
		Attributes: map[string]string{"DeadLetterQueueSourceArn": "arn:aws:sqs:eu-west-1:123456789012:sfnlimit-GeneralQueue-abc",
			"SenderId": "AIDAOPS", "SentTimestamp": "1709978500000", "ApproximateReceiveCount": "5"},
		MessageAttributes: map[string]types.MessageAttributeValue{router.SenderAttribute: strAttr("AROAACME")},
	}
	d := decode(moved, "AROAROUTER")
	if want := job.Sender("AIDAOPS", "AROAACME"); d.Sender != want {
		t.Errorf("a moved message of SenderId AIDAOPS naming AROAACME has sender %q, want %q (its job's sender, as the router named it)", d.Sender, want)
	}
	// AIDAOPS's redrive must send it again as the same job, not as AIDAOPS's own.
	named := aws.ToString(behalfOf(d, "AIDAOPS")[SenderAttribute].StringValue)
	if got, want := job.Sender("AIDAOPS", named), job.Sender("AIDAOPS", "AROAACME"); got != want {
		t.Errorf("AIDAOPS's redrive of it makes the router name it %q, want %q", got, want)
	}
}

// Any producer may name another: a gateway principal sending its tenants' jobs names each tenant
// (AROAGATEWAY>AROAACME, AROAGATEWAY>AROAMALLORY), two jobs of one type, key and id. Redriven by an
// operator that is not the gateway, behalfOf names the gateway for both, and the router makes both
// "AIDAOPS>AROAGATEWAY" (also what the gateway's own dead letter becomes): one deduplication id and
// one execution name, so Mallory's failed job (her input) stands for Acme's, or drops it as a copy.
func TestDLQRedriveByAnotherKeepsTwoBehalfJobsApart(t *testing.T) {
	const operator = "AIDAOPS"
	routed := func(d DeadLetter) string {
		named := ""
		if a, ok := behalfOf(d, operator)[SenderAttribute]; ok {
			named = aws.ToString(a.StringValue)
		}
		return job.Sender(operator, named) // router.origin of the redriven message
	}
	acme := DeadLetter{MessageID: "dl-a", Type: "payments", JobID: "o-1", Key: "acme", Sender: "AROAGATEWAY>AROAACME"}
	mallory := DeadLetter{MessageID: "dl-b", Type: "payments", JobID: "o-1", Key: "acme", Sender: "AROAGATEWAY>AROAMALLORY"}
	if jobKey(acme) == jobKey(mallory) {
		t.Fatalf("two jobs already one before the redrive")
	}
	if a, b := routed(acme), routed(mallory); a == b {
		t.Errorf("redriven by %s, AROAGATEWAY's jobs on behalf of AROAACME and of AROAMALLORY are both sender %q: one job (dedup id %s)",
			operator, a, job.DedupID("payments", a, "acme", "o-1", 1))
	}
}

// heldCopiesSQS is a dead-letter queue holding two held copies SQS moved from the general queue
// (SenderId the router's role), of two producers' jobs of one type, key and id; it records what
// a redrive sends.
type heldCopiesSQS struct {
	dlqAPI
	received bool
	sent     []types.SendMessageBatchRequestEntry
}

func (s *heldCopiesSQS) ReceiveMessage(context.Context, *sqs.ReceiveMessageInput, ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	if s.received {
		return &sqs.ReceiveMessageOutput{}, nil
	}
	s.received = true
	var out sqs.ReceiveMessageOutput
	for i, producer := range []string{"AROAACME", "AROAMALLORY"} {
		out.Messages = append(out.Messages, types.Message{
			MessageId: aws.String(fmt.Sprintf("held-%d", i)), ReceiptHandle: aws.String(fmt.Sprintf("r-%d", i)),
			Body: aws.String(`{"type":"payments","id":"o-1","key":"acme","input":{}}`),
			Attributes: map[string]string{"DeadLetterQueueSourceArn": "arn:aws:sqs:eu-west-1:123456789012:sfnlimit-GeneralQueue-abc",
				"SenderId": "AROAROUTER:sfnlimit-Router", "SentTimestamp": "1709978500000", "ApproximateReceiveCount": "5"},
			MessageAttributes: map[string]types.MessageAttributeValue{
				router.SenderAttribute:      {DataType: aws.String("String"), StringValue: aws.String(producer)},
				router.SubmittedAtAttribute: {DataType: aws.String("Number"), StringValue: aws.String("1709978400000")},
			},
		})
	}
	return &out, nil
}

func (s *heldCopiesSQS) SendMessageBatch(_ context.Context, in *sqs.SendMessageBatchInput, _ ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	s.sent = append(s.sent, in.Entries...)
	var out sqs.SendMessageBatchOutput
	for _, e := range in.Entries {
		out.Successful = append(out.Successful, types.SendMessageBatchResultEntry{Id: e.Id, MessageId: e.Id})
	}
	return &out, nil
}

func (s *heldCopiesSQS) DeleteMessageBatch(_ context.Context, in *sqs.DeleteMessageBatchInput, _ ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	var out sqs.DeleteMessageBatchOutput
	for _, e := range in.Entries {
		out.Successful = append(out.Successful, types.DeleteMessageBatchResultEntry{Id: e.Id})
	}
	return &out, nil
}

func (s *heldCopiesSQS) ChangeMessageVisibilityBatch(_ context.Context, in *sqs.ChangeMessageVisibilityBatchInput, _ ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	var out sqs.ChangeMessageVisibilityBatchOutput
	for _, e := range in.Entries {
		out.Successful = append(out.Successful, types.ChangeMessageVisibilityBatchResultEntry{Id: e.Id})
	}
	return &out, nil
}

// The router's id unknown (a stack deployed between ROUTER_ROLE_ID and the RouterRoleId output, or
// queue URLs given by flag without cloudformation:DescribeStacks: cmd/sfnlimit/dlq.go drops any
// error reading the output), the router's held copies SQS moved are read as the router's: two
// producers' held jobs of one type, key and id are one job, and the redrive sends AROAACME's as
// "{caller}>AROAROUTER", AROAMALLORY's left as its copy (or both under one dedup id). A redrive that
// cannot tell the router's copies apart must not send them on the router's behalf.
func TestDLQRedriveOfHeldCopiesWithoutRouterID(t *testing.T) {
	s := &heldCopiesSQS{}
	res, err := DLQ{SQS: s, URL: "dlq", General: "general", Caller: "AIDAOPS", Wait: time.Millisecond}.Redrive(t.Context(), Filter{}, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range s.sent {
		if named := aws.ToString(e.MessageAttributes[SenderAttribute].StringValue); named == "AROAROUTER" {
			t.Errorf("redrive (%+v) sent a held copy on behalf of the router (%s=%s): every producer's held job of payments/acme/o-1 is one job", res, SenderAttribute, named)
		}
	}
}

// hashed is the principal a redrive by another caller names for a dead letter of sender p>q: "=" and
// a hash of the sender, which no IAM id is.
func hashed(sender string) string {
	sum := sha256.Sum256([]byte(sender))
	return "=" + hex.EncodeToString(sum[:16])
}

// strAttr is a String message attribute.
func strAttr(v string) types.MessageAttributeValue {
	return types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
}
