package gateway

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
)

const kib = 1024

// limitsGateway is a gateway in front of an SQS emulator stand-in that answers every request with
// 200 and counts them.
func limitsGateway(t *testing.T) (*Gateway, *httptest.Server, *atomic.Int64) {
	t.Helper()
	var forwarded atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		forwarded.Add(1)
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		_, _ = w.Write([]byte(`{}`))
	}))
	t.Cleanup(up.Close)
	g, err := New(Options{MotoURL: up.URL})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	return g, srv, &forwarded
}

type msg struct {
	body  string
	attrs map[string]sqsAttr
}

func jsonSend(op string, msgs ...msg) string {
	enc := func(m msg) map[string]any {
		out := map[string]any{"MessageBody": m.body}
		if m.attrs != nil {
			out["MessageAttributes"] = m.attrs
		}
		return out
	}
	in := map[string]any{"QueueUrl": "http://127.0.0.1/123456789012/q"}
	if op == "SendMessage" {
		for k, v := range enc(msgs[0]) {
			in[k] = v
		}
	} else {
		var entries []map[string]any
		for i, m := range msgs {
			e := enc(m)
			e["Id"] = fmt.Sprint(i)
			entries = append(entries, e)
		}
		in["Entries"] = entries
	}
	b, _ := json.Marshal(in)
	return string(b)
}

func querySend(op string, msgs ...msg) string {
	v := url.Values{"Action": {op}, "QueueUrl": {"http://127.0.0.1/123456789012/q"}}
	for i, m := range msgs {
		prefix := ""
		if op == "SendMessageBatch" {
			prefix = fmt.Sprintf("SendMessageBatchRequestEntry.%d.", i+1)
			v.Set(prefix+"Id", fmt.Sprint(i))
		}
		v.Set(prefix+"MessageBody", m.body)
		n := 0
		for name, a := range m.attrs {
			n++
			p := fmt.Sprintf("%sMessageAttribute.%d.", prefix, n)
			v.Set(p+"Name", name)
			v.Set(p+"Value.DataType", a.DataType)
			if a.StringValue != "" {
				v.Set(p+"Value.StringValue", a.StringValue)
			}
			if a.BinaryValue != nil {
				v.Set(p+"Value.BinaryValue", base64.StdEncoding.EncodeToString(a.BinaryValue))
			}
		}
	}
	return v.Encode()
}

func repeatMsg(n, size int) []msg {
	out := make([]msg, n)
	for i := range out {
		out[i] = msg{body: strings.Repeat("x", size)}
	}
	return out
}

// The gateway refuses SQS sends over SQS's limits as SQS does, counting body and message attributes
// in bytes, and lets everything else through.
func TestSQSLimits(t *testing.T) {
	const limit = 1024 * kib
	attr := func(name, value string) map[string]sqsAttr {
		return map[string]sqsAttr{name: {DataType: "String", StringValue: value}}
	}
	tests := []struct {
		name      string
		query     bool // query protocol instead of JSON
		op        string
		msgs      []msg
		limits    *SQSLimits // nil: AWS's
		wantCode  string     // "": forwarded
		wantBytes int        // in BatchRequestTooLong's message
	}{
		{name: "batch at the total", op: "SendMessageBatch", msgs: repeatMsg(4, 256*kib)},
		{name: "batch one byte over", op: "SendMessageBatch", msgs: append(repeatMsg(3, 256*kib), msg{body: strings.Repeat("x", 256*kib+1)}),
			wantCode: "AWS.SimpleQueueService.BatchRequestTooLong", wantBytes: limit + 1},
		{name: "ten jobs near Step Functions' input limit", op: "SendMessageBatch", msgs: repeatMsg(10, 250*kib),
			wantCode: "AWS.SimpleQueueService.BatchRequestTooLong", wantBytes: 2500 * kib},
		{name: "attributes count: name, type and value", op: "SendMessageBatch",
			msgs:     append(repeatMsg(3, 256*kib), msg{body: strings.Repeat("x", 256*kib-len("rString")-1), attrs: attr("r", "vv")}),
			wantCode: "AWS.SimpleQueueService.BatchRequestTooLong", wantBytes: limit + 1},
		{name: "binary attributes count decoded", op: "SendMessageBatch",
			msgs: append(repeatMsg(3, 256*kib), msg{body: strings.Repeat("x", 256*kib-len("bBinary")-3),
				attrs: map[string]sqsAttr{"b": {DataType: "Binary", BinaryValue: []byte{1, 2, 3}}}})},
		{name: "message at the limit", op: "SendMessage", msgs: repeatMsg(1, limit)},
		{name: "message one byte over", op: "SendMessage", msgs: repeatMsg(1, limit+1), wantCode: "InvalidParameterValue"},
		{name: "bytes, not characters", op: "SendMessage", msgs: []msg{{body: strings.Repeat("é", limit/2+1)}}, wantCode: "InvalidParameterValue"},
		{name: "message attributes tip a message over", op: "SendMessage", msgs: []msg{{body: strings.Repeat("x", limit-5), attrs: attr("k", "v")}},
			wantCode: "InvalidParameterValue"},
		{name: "query protocol batch over", query: true, op: "SendMessageBatch", msgs: repeatMsg(5, 256*kib),
			wantCode: "AWS.SimpleQueueService.BatchRequestTooLong", wantBytes: 1280 * kib},
		{name: "query protocol attributes count", query: true, op: "SendMessage", msgs: []msg{{body: strings.Repeat("x", limit-5), attrs: attr("k", "v")}},
			wantCode: "InvalidParameterValue"},
		{name: "query protocol at the total", query: true, op: "SendMessageBatch", msgs: repeatMsg(4, 256*kib)},
		{name: "the former 256 KiB limit", op: "SendMessageBatch", msgs: repeatMsg(2, 200*kib), limits: &SQSLimits{MaxMessageBytes: 256 * kib, MaxBatchBytes: 256 * kib},
			wantCode: "AWS.SimpleQueueService.BatchRequestTooLong", wantBytes: 400 * kib},
		{name: "checks off", op: "SendMessageBatch", msgs: repeatMsg(10, 250*kib), limits: &SQSLimits{}},
		{name: "other calls pass", op: "ReceiveMessage", msgs: repeatMsg(1, 2*limit)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, srv, forwarded := limitsGateway(t)
			if tt.limits != nil {
				g.SetSQSLimits(*tt.limits)
			}
			var req *http.Request
			if tt.query {
				req, _ = http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(querySend(tt.op, tt.msgs...)))
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/sqs/aws4_request, SignedHeaders=host, Signature=x")
			} else {
				req, _ = http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(jsonSend(tt.op, tt.msgs...)))
				req.Header.Set("Content-Type", "application/x-amz-json-1.0")
				req.Header.Set("X-Amz-Target", "AmazonSQS."+tt.op)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if tt.wantCode == "" {
				if resp.StatusCode != http.StatusOK || forwarded.Load() != 1 {
					t.Fatalf("status %d, forwarded %d, want the request forwarded (body %s)", resp.StatusCode, forwarded.Load(), body)
				}
				return
			}
			if resp.StatusCode != http.StatusBadRequest || forwarded.Load() != 0 {
				t.Fatalf("status %d, forwarded %d, want 400 and not forwarded", resp.StatusCode, forwarded.Load())
			}
			var msg string
			if tt.query {
				if !strings.Contains(string(body), "<Code>"+tt.wantCode+"</Code>") || !strings.Contains(string(body), "<Type>Sender</Type>") {
					t.Errorf("body = %s, want an ErrorResponse with code %s, type Sender", body, tt.wantCode)
				}
				msg = string(body)
			} else {
				if got := resp.Header.Get("X-Amzn-Query-Error"); got != tt.wantCode+";Sender" {
					t.Errorf("x-amzn-query-error = %q, want %q", got, tt.wantCode+";Sender")
				}
				var e struct {
					Type    string `json:"__type"`
					Message string `json:"message"`
				}
				if err := json.Unmarshal(body, &e); err != nil {
					t.Fatalf("body %s: %v", body, err)
				}
				wantType := "com.amazonaws.sqs#BatchRequestTooLong"
				if tt.op == "SendMessage" {
					wantType = "com.amazon.coral.service#InvalidParameterValueException"
				}
				if e.Type != wantType {
					t.Errorf("__type = %q, want %q", e.Type, wantType)
				}
				msg = e.Message
			}
			want := "Message must be shorter than"
			if tt.wantBytes > 0 {
				want = fmt.Sprintf("You have sent %d bytes.", tt.wantBytes)
			}
			if !strings.Contains(msg, want) {
				t.Errorf("message = %q, want it to contain %q", msg, want)
			}
		})
	}
}

// The Go SDK reads the gateway's refusals as it reads SQS's: a typed BatchRequestTooLong whose code
// is the query-compatible one, and a client-fault InvalidParameterValue.
func TestSQSLimitsSDKErrors(t *testing.T) {
	_, srv, _ := limitsGateway(t)
	c := sqsClient(srv.URL)
	ctx := context.Background()
	q := aws.String("http://127.0.0.1/123456789012/q")
	var entries []types.SendMessageBatchRequestEntry
	for i := range 5 {
		entries = append(entries, types.SendMessageBatchRequestEntry{Id: aws.String(fmt.Sprint(i)), MessageBody: aws.String(strings.Repeat("x", 250*kib))})
	}
	_, err := c.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: q, Entries: entries})
	var tooLong *types.BatchRequestTooLong
	if !errors.As(err, &tooLong) || tooLong.ErrorCode() != "AWS.SimpleQueueService.BatchRequestTooLong" || tooLong.ErrorFault() != smithy.FaultClient {
		t.Errorf("SendMessageBatch(1250 KiB) error = %v, want *types.BatchRequestTooLong with code AWS.SimpleQueueService.BatchRequestTooLong", err)
	}
	_, err = c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: q, MessageBody: aws.String(strings.Repeat("x", 1024*kib+1))})
	var api smithy.APIError
	if !errors.As(err, &api) || api.ErrorCode() != "InvalidParameterValue" || api.ErrorFault() != smithy.FaultClient ||
		!strings.Contains(api.ErrorMessage(), "Message must be shorter than 1048576 bytes") {
		t.Errorf("SendMessage(1 MiB + 1) error = %v, want InvalidParameterValue, a client fault", err)
	}
}
