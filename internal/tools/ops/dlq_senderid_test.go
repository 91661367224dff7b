package ops

import (
	"slices"
	"testing"

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
	str := func(v string) types.MessageAttributeValue {
		return types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
	}
	limiters := types.Message{
		MessageId: aws.String("dl-1"), ReceiptHandle: aws.String("r"), Body: aws.String(`{"type":"payments","id":"o-1","input":{}}`),
		Attributes:        map[string]string{"SenderId": "AROARELEASER:sfnlimit-Releaser", "SentTimestamp": "1709978500000"},
		MessageAttributes: map[string]types.MessageAttributeValue{deadletter.AttrSender: str("AROAACME"), deadletter.AttrJobID: str("o-1"), deadletter.AttrType: str("payments")},
	}
	if d := decode(limiters, "AROAROUTER"); d.Sender != "AROAACME" {
		t.Errorf("the limiter's dead letter's sender = %q, want AROAACME (its sender attribute)", d.Sender)
	}
	moved := types.Message{
		MessageId: aws.String("moved-1"), ReceiptHandle: aws.String("r"), Body: aws.String(`{"type":"payments","id":"o-1","input":{}}`),
		Attributes: map[string]string{"DeadLetterQueueSourceArn": "arn:aws:sqs:eu-west-1:123456789012:sfnlimit-GeneralQueue-abc",
			"SenderId": "AROAMALLORY:tenant-b", "SentTimestamp": "1709978500000"},
		MessageAttributes: map[string]types.MessageAttributeValue{deadletter.AttrSender: str("AROAACME")},
	}
	if d := decode(moved, "AROAROUTER"); d.Sender != "AROAMALLORY" {
		t.Errorf("a moved message's sender = %q, want AROAMALLORY (its SenderId's, not its producer's attribute)", d.Sender)
	}
	for _, tt := range []struct{ sender, caller, want string }{
		{"AROAACME", "AIDAOPS", "AROAACME"},
		{"AIDAOPS>AROAACME", "AIDAOPS", "AROAACME"},  // the caller's own redrive keeps its producer
		{"AIDAOPS>AROAACME", "AIDAOTHER", "AIDAOPS"}, // another's job on AROAACME's behalf stays AIDAOPS's
		{"AIDAOPS>AROAACME", "", "AIDAOPS"},
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
	str := func(v string) types.MessageAttributeValue {
		return types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
	}
	held := func(id, producer string) DeadLetter {
		return decode(types.Message{
			MessageId: aws.String(id), ReceiptHandle: aws.String("r"),
			Body: aws.String(`{"type":"payments","id":"o-1","key":"acme","input":{}}`),
			Attributes: map[string]string{
				"DeadLetterQueueSourceArn": "arn:aws:sqs:eu-west-1:123456789012:sfnlimit-GeneralQueue-abc",
				"SenderId":                 "AROAROUTER:sfnlimit-Router", "SentTimestamp": "1709978500000", "ApproximateReceiveCount": "5",
			},
			MessageAttributes: map[string]types.MessageAttributeValue{
				router.SenderAttribute:      str(producer),
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
