package deadletter_test

import (
	"context"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sfnlimit/sfnlimit/internal/lambda/deadletter"
)

const dlqURL = "https://sqs.us-east-1.amazonaws.com/123456789012/sfnlimit-dlq"

// fakeSQS records SendMessage calls and answers with err.
type fakeSQS struct {
	sent []*sqs.SendMessageInput
	err  error
}

func (f *fakeSQS) SendMessage(_ context.Context, in *sqs.SendMessageInput, _ ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	f.sent = append(f.sent, in)
	if f.err != nil {
		return nil, f.err
	}
	return &sqs.SendMessageOutput{MessageId: aws.String("dlq-1")}, nil
}

// attrs flattens String message attributes to their values.
func attrs(t *testing.T, m map[string]types.MessageAttributeValue) map[string]string {
	t.Helper()
	out := map[string]string{}
	for k, v := range m {
		if aws.ToString(v.DataType) != "String" {
			t.Errorf("attribute %s DataType = %q, want String", k, aws.ToString(v.DataType))
		}
		out[k] = aws.ToString(v.StringValue)
	}
	return out
}

func TestSend(t *testing.T) {
	longCause := strings.Repeat("States.TaskFailed at step Work; ", 200) // 6400 characters
	tests := []struct {
		name      string
		give      deadletter.Entry
		wantBody  string
		wantAttrs map[string]string
	}{
		{
			name: "every field",
			give: deadletter.Entry{
				Reason: deadletter.ReasonAttemptsExhausted, Source: "releaser", Type: "payments", JobID: "order-1",
				Attempt: 3, Error: "States.TaskFailed", Cause: "card declined",
				Body: `{"type":"payments","id":"order-1","input":{"amount":10}}`,
			},
			wantBody: `{"type":"payments","id":"order-1","input":{"amount":10}}`,
			wantAttrs: map[string]string{
				"reason": "attempts_exhausted", "source": "releaser", "type": "payments", "jobId": "order-1",
				"attempt": "3", "error": "States.TaskFailed", "cause": "card declined",
			},
		},
		{
			// A job is its type, sender, key and id: its dead letter names all four, within SQS's 10
			// attributes.
			name: "every field of a keyed job of a batch, with its sender",
			give: deadletter.Entry{
				Reason: deadletter.ReasonAttemptsExhausted, Source: "releaser", Type: "payments", JobID: "order-1", Key: "acme",
				Sender: "AROAACME", Attempt: 3, Error: "States.TaskFailed", Cause: "card declined", Batch: "b-1",
				Body: `{"type":"payments","id":"order-1","key":"acme","input":{}}`,
			},
			wantBody: `{"type":"payments","id":"order-1","key":"acme","input":{}}`,
			wantAttrs: map[string]string{
				"reason": "attempts_exhausted", "source": "releaser", "type": "payments", "jobId": "order-1", "key": "acme",
				"sender": "AROAACME", "attempt": "3", "error": "States.TaskFailed", "cause": "card declined", "batch": "b-1",
			},
		},
		{
			name:      "router refusal of a body that is not JSON",
			give:      deadletter.Entry{Reason: "not_json", Source: "router", Error: "not_json", Cause: "invalid character 'h'", Body: "hello"},
			wantBody:  "hello",
			wantAttrs: map[string]string{"reason": "not_json", "source": "router", "error": "not_json", "cause": "invalid character 'h'"},
		},
		{
			name:      "empty body becomes {}",
			give:      deadletter.Entry{Reason: "missing_type", Source: "router"},
			wantBody:  "{}",
			wantAttrs: map[string]string{"reason": "missing_type", "source": "router"},
		},
		{
			name:      "attempt 0 is left out",
			give:      deadletter.Entry{Reason: "unknown_type", Source: "router", Type: "nope", JobID: "j", Body: `{"type":"nope"}`},
			wantBody:  `{"type":"nope"}`,
			wantAttrs: map[string]string{"reason": "unknown_type", "source": "router", "type": "nope", "jobId": "j"},
		},
		{
			name:      "long cause truncated to 4096",
			give:      deadletter.Entry{Reason: "attempts_exhausted", Source: "releaser", Cause: longCause, Error: strings.Repeat("E", 5000), Body: "{}"},
			wantBody:  "{}",
			wantAttrs: map[string]string{"reason": "attempts_exhausted", "source": "releaser", "cause": longCause[:4096], "error": strings.Repeat("E", 4096)},
		},
		{
			name:      "cause of exactly 4096 kept whole",
			give:      deadletter.Entry{Reason: "attempts_exhausted", Cause: strings.Repeat("c", 4096), Body: "{}"},
			wantBody:  "{}",
			wantAttrs: map[string]string{"reason": "attempts_exhausted", "cause": strings.Repeat("c", 4096)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := &fakeSQS{}
			if err := deadletter.New(fake, dlqURL).Send(context.Background(), tt.give); err != nil {
				t.Fatalf("Send(%+v) error = %v", tt.give, err)
			}
			if len(fake.sent) != 1 {
				t.Fatalf("Send made %d SendMessage calls, want 1", len(fake.sent))
			}
			in := fake.sent[0]
			if got := aws.ToString(in.QueueUrl); got != dlqURL {
				t.Errorf("QueueUrl = %q, want %q", got, dlqURL)
			}
			if got := aws.ToString(in.MessageBody); got != tt.wantBody {
				t.Errorf("MessageBody = %.80q, want %.80q", got, tt.wantBody)
			}
			if got := attrs(t, in.MessageAttributes); !reflect.DeepEqual(got, tt.wantAttrs) {
				t.Errorf("MessageAttributes = %v, want %v", got, tt.wantAttrs)
			}
			if n := len(in.MessageAttributes); n > 10 {
				t.Errorf("%d message attributes, SQS allows 10", n)
			}
		})
	}
}

func TestSendError(t *testing.T) {
	errDenied := errors.New("AccessDenied")
	fake := &fakeSQS{err: errDenied}
	err := deadletter.New(fake, dlqURL).Send(context.Background(), deadletter.Entry{Reason: "not_json", JobID: "order-1", Body: "x"})
	if !errors.Is(err, errDenied) {
		t.Fatalf("Send error = %v, want it to wrap %v", err, errDenied)
	}
	if !strings.Contains(err.Error(), "order-1") || !strings.Contains(err.Error(), "not_json") {
		t.Errorf("Send error = %q, want it to name the job and the reason", err)
	}
}

// SQS refuses attribute values that are not valid characters: truncation must not split one, and
// control characters in an error's cause must not make the dead letter fail.
func TestSendKeepsAttributesValid(t *testing.T) {
	for _, give := range []string{
		strings.Repeat("a", 4095) + "é" + strings.Repeat("b", 100),
		strings.Repeat("€", 2000),
		strings.Repeat("🚀", 1500),
		"stack:\x00\x1b[31m" + string([]byte{0xff, 0xfe}) + "end",
	} {
		fake := &fakeSQS{}
		if err := deadletter.New(fake, dlqURL).Send(context.Background(), deadletter.Entry{Reason: "attempts_exhausted", Cause: give, Body: "{}"}); err != nil {
			t.Fatalf("Send error = %v", err)
		}
		got := aws.ToString(fake.sent[0].MessageAttributes["cause"].StringValue)
		if len(got) > 4096 || !utf8.ValidString(got) || len(got) < 4 {
			t.Errorf("cause attribute = %d bytes, valid UTF-8 %v, want valid text of at most 4096 bytes", len(got), utf8.ValidString(got))
		}
		for _, r := range got {
			if r < 0x20 && r != 0x9 && r != 0xA && r != 0xD {
				t.Errorf("cause attribute has control character %U, which SQS refuses", r)
			}
		}
	}
}

// sizedSQS refuses, as SQS does, a message whose body and attributes (names, types and values)
// add up to more than 1 MiB.
type sizedSQS struct{ fakeSQS }

func (f *sizedSQS) SendMessage(ctx context.Context, in *sqs.SendMessageInput, o ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	n := len(aws.ToString(in.MessageBody))
	for k, v := range in.MessageAttributes {
		n += len(k) + len(aws.ToString(v.DataType)) + len(aws.ToString(v.StringValue))
	}
	if n > 1<<20 {
		return nil, errors.New("InvalidParameterValue: One or more parameters are invalid. Reason: Message must be shorter than 1048576 bytes")
	}
	return f.fakeSQS.SendMessage(ctx, in, o...)
}

// A job refused near SQS's 1 MiB (input_too_large) still reaches the dead-letter queue with its
// reason: its body is cut to fit beside the attributes, and says so, rather than the send failing
// and SQS's own redrive moving the job later without a reason.
func TestSendKeepsTheReasonOfABodyNearTheSizeLimit(t *testing.T) {
	tests := []struct {
		name          string
		bodyBytes     int
		wantTruncated bool
	}{
		{name: "a small body is sent whole", bodyBytes: 1000},
		{name: "a body that fits with its attributes is sent whole", bodyBytes: 1<<20 - 200},
		{name: "a body of 1 MiB less 8 bytes is cut", bodyBytes: 1<<20 - 8, wantTruncated: true},
		{name: "a body of 1 MiB is cut", bodyBytes: 1 << 20, wantTruncated: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := `{"type":"reports","id":"big-1","input":"` + strings.Repeat("é", (tt.bodyBytes-50)/2) + `"}`
			body += strings.Repeat(" ", tt.bodyBytes-len(body))
			f := &sizedSQS{}
			err := deadletter.New(f, dlqURL).Send(context.Background(), deadletter.Entry{
				Reason: "input_too_large", Source: "router", Type: "reports", JobID: "big-1", Body: body,
			})
			if err != nil {
				t.Fatalf("Send() error = %v, want the dead letter sent", err)
			}
			got := f.sent[len(f.sent)-1]
			a := attrs(t, got.MessageAttributes)
			if a["reason"] != "input_too_large" || a["jobId"] != "big-1" {
				t.Errorf("attributes = %v, want the reason and the job", a)
			}
			sent := aws.ToString(got.MessageBody)
			if !utf8.ValidString(sent) {
				t.Errorf("body cut inside a character")
			}
			if tt.wantTruncated {
				if want := strconv.Itoa(len(body)); a["bodyTruncatedFrom"] != want {
					t.Errorf("bodyTruncatedFrom = %q, want %s", a["bodyTruncatedFrom"], want)
				}
				if len(sent) >= len(body) || !strings.HasPrefix(body, sent) {
					t.Errorf("body %d bytes, want a prefix of the job's %d", len(sent), len(body))
				}
			} else if sent != body || a["bodyTruncatedFrom"] != "" {
				t.Errorf("body %d bytes (truncated from %q), want the job's %d whole", len(sent), a["bodyTruncatedFrom"], len(body))
			}
		})
	}
}

// A router refusal near SQS's 1 MiB of a keyed job of a batch, with its sender, has every attribute
// but attempt: with the truncation's it stays within SQS's 10, its error (its reason) left out.
func TestCutRefusalKeepsTenAttributes(t *testing.T) {
	body := `{"type":"reports","id":"big-1","input":"` + strings.Repeat("x", 1<<20) + `"}`
	f := &sizedSQS{}
	err := deadletter.New(f, dlqURL).Send(context.Background(), deadletter.Entry{
		Reason: "input_too_large", Source: "router", Type: "reports", JobID: "big-1", Key: "acme", Sender: "AROAACME",
		Error: "input_too_large", Cause: "execution input would be too large", Batch: "b-1", Body: body,
	})
	if err != nil {
		t.Fatalf("Send() error = %v, want the dead letter sent", err)
	}
	a := attrs(t, f.sent[len(f.sent)-1].MessageAttributes)
	if len(a) > 10 || a["reason"] != "input_too_large" || a["sender"] != "AROAACME" || a["bodyTruncatedFrom"] == "" {
		t.Errorf("attributes = %v (%d), want at most 10 with the reason, the sender and the truncation", a, len(a))
	}
}
