package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/lambda/messages"
)

func TestFunctionName(t *testing.T) {
	tests := []struct {
		name string
		give string
		want string
	}{
		{name: "bare", give: "releaser", want: "releaser"},
		{name: "qualified", give: "releaser:live", want: "releaser"},
		{name: "partial ARN", give: "123456789012:function:releaser", want: "releaser"},
		{name: "ARN", give: "arn:aws:lambda:us-east-1:123456789012:function:releaser", want: "releaser"},
		{name: "qualified ARN", give: "arn:aws:lambda:eu-west-1:123456789012:function:releaser:$LATEST", want: "releaser"},
		{name: "other partition", give: "arn:aws-cn:lambda:cn-north-1:123456789012:function:releaser", want: "releaser"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := functionName(tt.give); got != tt.want {
				t.Errorf("functionName(%q) = %q, want %q", tt.give, got, tt.want)
			}
		})
	}
}

func TestSigningService(t *testing.T) {
	tests := []struct {
		name string
		give string
		want string
	}{
		{name: "sqs", give: "AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/sqs/aws4_request, SignedHeaders=host, Signature=x", want: "sqs"},
		{name: "states", give: "AWS4-HMAC-SHA256 Credential=ak/20260101/us-east-1/states/aws4_request,SignedHeaders=host,Signature=x", want: "states"},
		{name: "none", give: "", want: ""},
		{name: "malformed", give: "AWS4-HMAC-SHA256 Credential=ak/x", want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := signingService(tt.give); got != tt.want {
				t.Errorf("signingService(%q) = %q, want %q", tt.give, got, tt.want)
			}
		})
	}
}

type customErr struct{}

func (customErr) Error() string { return "custom" }

func TestInvoke(t *testing.T) {
	g, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	var events atomic.Int32
	eventDone := make(chan struct{}, 1)
	g.Register("echo", func(ctx context.Context, p []byte) ([]byte, error) { return p, nil })
	g.Register("empty", func(ctx context.Context, p []byte) ([]byte, error) { return nil, nil })
	g.Register("plain", func(ctx context.Context, p []byte) ([]byte, error) { return nil, errors.New("boom") })
	g.Register("wrapped", func(ctx context.Context, p []byte) ([]byte, error) {
		return nil, fmt.Errorf("outer: %w", customErr{})
	})
	g.Register("typed", func(ctx context.Context, p []byte) ([]byte, error) {
		return nil, fmt.Errorf("release: %w", messages.InvokeResponse_Error{Type: "LeaseLost", Message: "lease taken"})
	})
	g.Register("event", func(ctx context.Context, p []byte) ([]byte, error) {
		events.Add(1)
		eventDone <- struct{}{}
		return nil, nil
	})
	g.Register("removed", func(ctx context.Context, p []byte) ([]byte, error) { return nil, nil })
	g.Register("removed", nil)

	tests := []struct {
		name          string
		function      string
		body          string
		invokeType    string
		wantStatus    int
		wantBody      string
		wantFuncError string
		wantErrorType string
	}{
		{name: "result", function: "echo", body: `{"a":1}`, wantStatus: 200, wantBody: `{"a":1}`},
		{name: "by ARN", function: url.PathEscape(FunctionARN("echo") + ":live"), body: `{"a":2}`, wantStatus: 200, wantBody: `{"a":2}`},
		{name: "no result", function: "empty", wantStatus: 200, wantBody: `null`},
		{name: "error", function: "plain", wantStatus: 200, wantFuncError: "Unhandled",
			wantBody: `{"errorMessage":"boom","errorType":"errorString"}`},
		{name: "wrapped error", function: "wrapped", wantStatus: 200, wantFuncError: "Unhandled",
			wantBody: `{"errorMessage":"outer: custom","errorType":"wrapError"}`},
		{name: "typed error", function: "typed", wantStatus: 200, wantFuncError: "Unhandled",
			wantBody: `{"errorMessage":"lease taken","errorType":"LeaseLost"}`},
		{name: "unknown", function: "nope", wantStatus: 404, wantErrorType: "ResourceNotFoundException"},
		{name: "unregistered", function: "removed", wantStatus: 404, wantErrorType: "ResourceNotFoundException"},
		{name: "dry run", function: "echo", invokeType: "DryRun", wantStatus: 204},
		{name: "event", function: "event", invokeType: "Event", wantStatus: 202},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodPost, "/2015-03-31/functions/"+tt.function+"/invocations", strings.NewReader(tt.body))
			if tt.invokeType != "" {
				req.Header.Set("X-Amz-Invocation-Type", tt.invokeType)
			}
			rec := httptest.NewRecorder()
			g.ServeHTTP(rec, req)
			if rec.Code != tt.wantStatus {
				t.Fatalf("status = %d, want %d (body %s)", rec.Code, tt.wantStatus, rec.Body)
			}
			if tt.wantBody != "" && compact(t, rec.Body.String()) != compact(t, tt.wantBody) {
				t.Errorf("body = %s, want %s", rec.Body, tt.wantBody)
			}
			if got := rec.Header().Get("X-Amz-Function-Error"); got != tt.wantFuncError {
				t.Errorf("X-Amz-Function-Error = %q, want %q", got, tt.wantFuncError)
			}
			if got := rec.Header().Get("X-Amzn-ErrorType"); got != tt.wantErrorType {
				t.Errorf("X-Amzn-ErrorType = %q, want %q", got, tt.wantErrorType)
			}
		})
	}
	select {
	case <-eventDone:
	case <-time.After(5 * time.Second):
		t.Fatal("Event invocation never ran its function")
	}
	if got := g.Calls()[Call{Service: "lambda", Operation: "Invoke"}]; got != int64(len(tests)) {
		t.Errorf("Calls()[lambda:Invoke] = %d, want %d", got, len(tests))
	}
}

func compact(t *testing.T, s string) string {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("bad JSON %q: %v", s, err)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// recorder is a fake upstream that records what reaches it.
type recorder struct {
	name string
	mu   sync.Mutex
	got  []string // "target|action|body"
}

func (r *recorder) server(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.got = append(r.got, req.Header.Get("X-Amz-Target")+"|"+string(body))
		r.mu.Unlock()
		w.Header().Set("X-Upstream", r.name)
		_, _ = io.WriteString(w, "{}")
	}))
	t.Cleanup(srv.Close)
	return srv
}

func sigv4(service string) string {
	return "AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/" + service + "/aws4_request, SignedHeaders=host, Signature=x"
}

func TestRouting(t *testing.T) {
	moto, sqs := &recorder{name: "moto"}, &recorder{name: "sqs"}
	motoSrv, sqsSrv := moto.server(t), sqs.server(t)
	g, err := New(Options{MotoURL: motoSrv.URL, SQSURL: sqsSrv.URL})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name        string
		target      string
		auth        string
		contentType string
		body        string
		want        string
		wantCall    Call
	}{
		{name: "sqs json", target: "AmazonSQS.ReceiveMessage", auth: sigv4("sqs"), body: `{"QueueUrl":"q"}`,
			want: "sqs", wantCall: Call{"sqs", "ReceiveMessage"}},
		{name: "sqs json unsigned", target: "AmazonSQS.DeleteMessage", body: `{}`, want: "sqs", wantCall: Call{"sqs", "DeleteMessage"}},
		{name: "sqs query", auth: sigv4("sqs"), contentType: "application/x-www-form-urlencoded; charset=utf-8",
			body: "Action=SendMessage&MessageBody=hi", want: "sqs", wantCall: Call{"sqs", "SendMessage"}},
		{name: "states", target: "AWSStepFunctions.StartExecution", auth: sigv4("states"), body: `{}`,
			want: "moto", wantCall: Call{"states", "StartExecution"}},
		{name: "dynamodb", target: "DynamoDB_20120810.PutItem", auth: sigv4("dynamodb"), body: `{}`,
			want: "moto", wantCall: Call{"dynamodb", "PutItem"}},
		{name: "lambda other than invoke", auth: sigv4("lambda"), want: "moto", wantCall: Call{"lambda", "POST /"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(tt.body))
			if tt.target != "" {
				req.Header.Set("X-Amz-Target", tt.target)
			}
			if tt.auth != "" {
				req.Header.Set("Authorization", tt.auth)
			}
			if tt.contentType != "" {
				req.Header.Set("Content-Type", tt.contentType)
			}
			before := g.Calls()[tt.wantCall]
			rec := httptest.NewRecorder()
			g.ServeHTTP(rec, req)
			if got := rec.Header().Get("X-Upstream"); got != tt.want {
				t.Fatalf("routed to %q, want %q (status %d, body %s)", got, tt.want, rec.Code, rec.Body)
			}
			up := map[string]*recorder{"moto": moto, "sqs": sqs}[tt.want]
			up.mu.Lock()
			last := up.got[len(up.got)-1]
			up.mu.Unlock()
			if want := tt.target + "|" + tt.body; last != want {
				t.Errorf("upstream received %q, want %q (body intact)", last, want)
			}
			if got := g.Calls()[tt.wantCall] - before; got != 1 {
				t.Errorf("Calls()[%v] grew by %d, want 1 (calls %v)", tt.wantCall, got, g.Calls())
			}
		})
	}

	t.Run("sqs to moto when no SQS URL", func(t *testing.T) {
		if err := g.SetSQSURL(""); err != nil {
			t.Fatal(err)
		}
		req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(`{}`))
		req.Header.Set("X-Amz-Target", "AmazonSQS.SendMessage")
		rec := httptest.NewRecorder()
		g.ServeHTTP(rec, req)
		if got := rec.Header().Get("X-Upstream"); got != "moto" {
			t.Errorf("routed to %q, want moto", got)
		}
	})
}

func TestFaults(t *testing.T) {
	moto := &recorder{name: "moto"}
	g, err := New(Options{MotoURL: moto.server(t).URL})
	if err != nil {
		t.Fatal(err)
	}
	g.Register("fn", func(ctx context.Context, p []byte) ([]byte, error) { return p, nil })
	g.SetFaults(func(target string) *Fault {
		switch target {
		case "AWSStepFunctions.StartExecution":
			return &Fault{Code: "ThrottlingException", Message: "Rate exceeded"}
		case "AmazonSQS.SendMessage":
			return &Fault{Status: 500, Code: "InternalError", Message: "try again"}
		case "Lambda.Invoke":
			return &Fault{Status: 429, Code: "TooManyRequestsException", Message: "Rate Exceeded."}
		}
		return nil
	})

	tests := []struct {
		name        string
		path        string
		target      string
		contentType string
		body        string
		wantStatus  int
		wantBody    string
		wantHeader  string
	}{
		{name: "json", path: "/", target: "AWSStepFunctions.StartExecution", body: "{}", wantStatus: 400,
			wantBody: `{"__type":"ThrottlingException","message":"Rate exceeded"}`},
		{name: "query", path: "/", contentType: "application/x-www-form-urlencoded", body: "Action=SendMessage",
			wantStatus: 500, wantBody: "<Code>InternalError</Code><Message>try again</Message>"},
		{name: "lambda", path: "/2015-03-31/functions/fn/invocations", body: "{}", wantStatus: 429,
			wantBody: `{"Type":"User","message":"Rate Exceeded."}`, wantHeader: "TooManyRequestsException"},
		{name: "not faulted", path: "/", target: "AWSStepFunctions.DescribeExecution", body: "{}", wantStatus: 200, wantBody: "{}"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodPost, tt.path, strings.NewReader(tt.body))
			req.Header.Set("Authorization", sigv4("sqs"))
			if tt.target != "" {
				req.Header.Set("X-Amz-Target", tt.target)
				req.Header.Set("Authorization", sigv4("states"))
			}
			if tt.contentType != "" {
				req.Header.Set("Content-Type", tt.contentType)
			}
			rec := httptest.NewRecorder()
			g.ServeHTTP(rec, req)
			if rec.Code != tt.wantStatus || !strings.Contains(rec.Body.String(), tt.wantBody) {
				t.Errorf("answer = %d %s, want %d with %s", rec.Code, rec.Body, tt.wantStatus, tt.wantBody)
			}
			if got := rec.Header().Get("X-Amzn-ErrorType"); got != tt.wantHeader {
				t.Errorf("X-Amzn-ErrorType = %q, want %q", got, tt.wantHeader)
			}
		})
	}
}

// TestFaultsChangeWhileServing changes the fault function while requests run (meaningful with -race).
func TestFaultsChangeWhileServing(t *testing.T) {
	moto := &recorder{name: "moto"}
	g, err := New(Options{MotoURL: moto.server(t).URL})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Start(context.Background(), "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	throttle := func(string) *Fault { return &Fault{Code: "ThrottlingException", Message: "Rate exceeded"} }

	var wg sync.WaitGroup
	var ok, throttled atomic.Int32
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 25 {
				req, _ := http.NewRequest(http.MethodPost, g.URL()+"/", strings.NewReader("{}"))
				req.Header.Set("X-Amz-Target", "AWSStepFunctions.StartExecution")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Errorf("request: %v", err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				switch resp.StatusCode {
				case 200:
					ok.Add(1)
				case 400:
					throttled.Add(1)
				}
			}
		}()
		if i%2 == 0 {
			g.SetFaults(throttle)
		} else {
			g.SetFaults(nil)
		}
	}
	wg.Wait()
	if got := ok.Load() + throttled.Load(); got != 200 {
		t.Errorf("answers = %d ok + %d throttled, want 200 in all", ok.Load(), throttled.Load())
	}
	if got := g.Calls()[Call{Service: "states", Operation: "StartExecution"}]; got != 200 {
		t.Errorf("Calls()[states:StartExecution] = %d, want 200", got)
	}
}

func TestStartAndClose(t *testing.T) {
	g, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Start(context.Background(), "0.0.0.0:0"); err == nil {
		t.Fatal("Start(0.0.0.0:0) = nil, want a refusal of a non-loopback address")
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := g.Start(ctx, ""); err != nil {
		t.Fatalf("Start() = %v", err)
	}
	if g.Port() == 0 || !strings.HasPrefix(g.URL(), "http://127.0.0.1:") {
		t.Fatalf("URL() = %q, Port() = %d; want a loopback URL", g.URL(), g.Port())
	}
	// No moto yet: a clear 503 rather than a hang.
	resp, err := http.Post(g.URL()+"/", "application/x-amz-json-1.0", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("status without a moto URL = %d, want 503", resp.StatusCode)
	}
	cancel()
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := http.Post(g.URL()+"/", "application/json", strings.NewReader("{}"))
		if err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("gateway still serving 5 s after its context ended")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := g.Close(); err != nil {
		t.Errorf("Close() after the context ended = %v, want nil", err)
	}
	if err := g.Close(); err != nil {
		t.Errorf("second Close() = %v, want nil", err)
	}
	if _, err := New(Options{MotoURL: "http://10.1.2.3:4566"}); err == nil {
		t.Error("New with a non-loopback moto URL = nil error, want a refusal")
	}
}
