package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"runtime/debug"
	"strings"

	"github.com/aws/aws-lambda-go/lambda/messages"
	"github.com/aws/aws-lambda-go/lambdacontext"
)

// Func is a Lambda function's handler: the invocation payload in, the response payload out. An error is
// returned to the caller as a function error (X-Amz-Function-Error: Unhandled), as Lambda's Go runtime
// does: errorType is the error's type name, or the Type of a messages.InvokeResponse_Error. The context
// carries a lambdacontext.LambdaContext with the request id and the invoked function's ARN.
type Func func(ctx context.Context, payload []byte) ([]byte, error)

const (
	invokePrefix = "/2015-03-31/functions/"
	invokeSuffix = "/invocations"
	// Region and account of the ARNs the gateway reports (moto's defaults).
	region  = "us-east-1"
	account = "123456789012"
)

// Register makes fn answer invocations of the function called name (a bare name: "releaser"). Invoke
// accepts the function as a name, name:qualifier, ACCOUNT:function:NAME or a full ARN, with or without
// a qualifier. Registering a name again replaces its function; a nil fn removes it.
func (g *Gateway) Register(name string, fn Func) {
	g.funcsMu.Lock()
	defer g.funcsMu.Unlock()
	if fn == nil {
		delete(g.funcs, name)
		return
	}
	g.funcs[name] = fn
}

// FunctionARN returns the ARN the gateway reports for a function name.
func FunctionARN(name string) string {
	return "arn:aws:lambda:" + region + ":" + account + ":function:" + name
}

// invokePath returns the function of a Lambda Invoke request.
func invokePath(r *http.Request) (string, bool) {
	if r.Method != http.MethodPost || !strings.HasPrefix(r.URL.Path, invokePrefix) || !strings.HasSuffix(r.URL.Path, invokeSuffix) {
		return "", false
	}
	fn := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, invokePrefix), invokeSuffix)
	if fn == "" || strings.Contains(fn, "/") {
		return "", false
	}
	return fn, true
}

// functionName returns the bare name of a FunctionName parameter: NAME, NAME:QUALIFIER,
// ACCOUNT:function:NAME[:QUALIFIER] or arn:PARTITION:lambda:REGION:ACCOUNT:function:NAME[:QUALIFIER].
func functionName(fn string) string {
	parts := strings.Split(fn, ":")
	switch {
	case len(parts) >= 7 && parts[0] == "arn" && parts[2] == "lambda" && parts[5] == "function":
		return parts[6]
	case len(parts) >= 3 && parts[1] == "function":
		return parts[2]
	default:
		return parts[0]
	}
}

func (g *Gateway) invoke(w http.ResponseWriter, r *http.Request, fnParam string) {
	name := functionName(fnParam)
	g.funcsMu.RLock()
	fn := g.funcs[name]
	g.funcsMu.RUnlock()
	if fn == nil {
		writeLambdaError(w, http.StatusNotFound, "ResourceNotFoundException", "Function not found: "+FunctionARN(name))
		return
	}
	payload, err := io.ReadAll(r.Body)
	if err != nil {
		writeLambdaError(w, http.StatusBadRequest, "InvalidRequestContentException", "could not read the request body: "+err.Error())
		return
	}
	if len(payload) == 0 {
		payload = []byte("{}")
	}
	requestID := newRequestID()
	lc := &lambdacontext.LambdaContext{AwsRequestID: requestID, InvokedFunctionArn: invokedARN(fnParam, name)}
	w.Header().Set("X-Amzn-Requestid", requestID)

	switch r.Header.Get("X-Amz-Invocation-Type") {
	case "DryRun":
		w.WriteHeader(http.StatusNoContent)
		return
	case "Event":
		ctx := lambdacontext.NewContext(context.WithoutCancel(r.Context()), lc)
		go func() {
			if _, err := g.call(ctx, name, fn, payload); err != nil {
				g.logger.Error("asynchronous invocation failed", "function", name, "requestId", requestID, "error", err.Message)
			}
		}()
		w.WriteHeader(http.StatusAccepted)
		return
	}

	out, ferr := g.call(lambdacontext.NewContext(r.Context(), lc), name, fn, payload)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Amz-Executed-Version", "$LATEST")
	if ferr != nil {
		body, _ := json.Marshal(ferr)
		w.Header().Set("X-Amz-Function-Error", "Unhandled")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(body)
		return
	}
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(out)
}

// call runs fn as Lambda's Go runtime would: an error or a panic becomes the function error document.
func (g *Gateway) call(ctx context.Context, name string, fn Func, payload []byte) (out []byte, ferr *messages.InvokeResponse_Error) {
	defer func() {
		if v := recover(); v != nil {
			g.logger.Error("function panicked", "function", name, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			ferr = &messages.InvokeResponse_Error{Message: fmt.Sprint(v), Type: typeName(v)}
		}
	}()
	out, err := fn(ctx, payload)
	if err != nil {
		return nil, functionError(err)
	}
	if len(out) == 0 {
		out = []byte("null") // what Lambda returns for a handler with no result
	}
	return out, nil
}

// functionError is the document Lambda's Go runtime returns for a handler error.
func functionError(err error) *messages.InvokeResponse_Error {
	var v messages.InvokeResponse_Error
	if errors.As(err, &v) {
		return &v
	}
	var p *messages.InvokeResponse_Error
	if errors.As(err, &p) && p != nil {
		return p
	}
	return &messages.InvokeResponse_Error{Message: err.Error(), Type: typeName(err)}
}

func typeName(v any) string {
	t := reflect.TypeOf(v)
	if t == nil {
		return "nil"
	}
	if t.Kind() == reflect.Pointer {
		return t.Elem().Name()
	}
	return t.Name()
}

// invokedARN is the ARN the caller invoked, qualifier included.
func invokedARN(param, name string) string {
	if strings.HasPrefix(param, "arn:") {
		return param
	}
	arn := FunctionARN(name)
	if parts := strings.Split(param, ":"); len(parts) == 2 || len(parts) == 4 {
		arn += ":" + parts[len(parts)-1]
	}
	return arn
}

func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// writeLambdaError writes a Lambda (REST-JSON) service error.
func writeLambdaError(w http.ResponseWriter, status int, code, message string) {
	body, _ := json.Marshal(map[string]string{"Type": "User", "message": message})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Amzn-Errortype", code)
	w.Header().Set("X-Amzn-Requestid", newRequestID())
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// writeJSONError writes an AWS JSON-protocol error.
func writeJSONError(w http.ResponseWriter, status int, code, message, contentType string) {
	body, _ := json.Marshal(map[string]string{"__type": code, "message": message})
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("X-Amzn-Requestid", newRequestID())
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// writeQueryError writes an AWS query-protocol (XML) error.
func writeQueryError(w http.ResponseWriter, status int, code, message string) {
	type errorBody struct {
		Type    string `xml:"Type"`
		Code    string `xml:"Code"`
		Message string `xml:"Message"`
	}
	doc := struct {
		XMLName   xml.Name  `xml:"ErrorResponse"`
		Error     errorBody `xml:"Error"`
		RequestID string    `xml:"RequestId"`
	}{Error: errorBody{Type: "Sender", Code: code, Message: message}, RequestID: newRequestID()}
	if status >= 500 {
		doc.Error.Type = "Receiver"
	}
	body, _ := xml.Marshal(doc)
	w.Header().Set("Content-Type", "text/xml")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
