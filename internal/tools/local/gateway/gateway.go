// Package gateway is the local stack's front door on a loopback port. moto's Step Functions interpreter
// (and, if they like, the stack's own clients) send every AWS call here:
//
//   - Lambda Invoke (POST /2015-03-31/functions/{name or ARN}/invocations) runs a registered Go function
//     and answers as Lambda does, function errors included;
//   - SQS calls go to a configurable SQS emulator (moto or fauxqs);
//   - EventBridge PutEvents is answered by the gateway, which keeps the events (events.go);
//   - everything else goes to moto.
//
// It also injects faults (an AWS error instead of forwarding: SetFaults for a test's own rule,
// InjectFaults for AWS's occasional failures at random rates, inject.go), refuses SQS sends over
// SQS's size limits as SQS does (sqslimits.go), and counts calls per service and operation.
package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Options configures a Gateway. Both URLs can be set or changed later (SetMotoURL, SetSQSURL), which
// lets a gateway start before the moto whose interpreter must call it.
type Options struct {
	// MotoURL receives every request that is neither a Lambda Invoke nor an SQS call.
	MotoURL string
	// SQSURL receives SQS calls; empty means MotoURL.
	SQSURL string
	// Logger records proxy errors and async invocation errors (default: discard).
	Logger *slog.Logger
}

// Call names one API operation of one service, e.g. {"states", "StartExecution"}. Service is the SigV4
// signing name (states, sqs, dynamodb, lambda, ...).
type Call struct {
	Service   string
	Operation string
}

func (c Call) String() string { return c.Service + ":" + c.Operation }

// Fault is an AWS error that the gateway answers with instead of forwarding a request.
type Fault struct {
	// Status is the HTTP status (default 400).
	Status int
	// Code is the AWS error code, e.g. "ThrottlingException".
	Code string
	// Message is the error message, e.g. "Rate exceeded".
	Message string
}

// FaultFunc decides, for each request, whether to fail it: it returns nil to forward the request. target
// is the request's X-Amz-Target for JSON-protocol calls ("AWSStepFunctions.StartExecution",
// "AmazonSQS.ReceiveMessage", "DynamoDB_20120810.PutItem", "AWSEvents.PutEvents"), "AmazonSQS.<Action>" for SQS's query
// protocol, and "Lambda.Invoke" for Lambda Invoke. Other requests are never failed. It is called
// concurrently.
type FaultFunc func(target string) *Fault

// Gateway routes AWS calls; see the package documentation. Its methods are safe for concurrent use.
type Gateway struct {
	logger *slog.Logger

	moto atomic.Pointer[upstream]
	sqs  atomic.Pointer[upstream] // nil: use moto

	faults atomic.Pointer[FaultFunc]
	inject injector // inject.go

	sqsLimits atomic.Pointer[SQSLimits] // nil: AWSSQSLimits (sqslimits.go)

	dedup fifoDedup // SQS FIFO deduplication as AWS applies it (fifodedup.go)

	events eventLog // events accepted from PutEvents (events.go)

	stops sfnStops // StopExecution's error and cause, which moto drops (sfnstop.go)

	funcsMu sync.RWMutex
	funcs   map[string]Func

	callsMu sync.Mutex
	calls   map[Call]int64

	srvMu  sync.Mutex
	srv    *http.Server
	ln     net.Listener
	closed chan struct{}
}

type upstream struct {
	url   *url.URL
	proxy *httputil.ReverseProxy
}

// New returns a gateway that is not yet listening (see Start); it can also be used as an http.Handler.
func New(opts Options) (*Gateway, error) {
	g := &Gateway{
		logger: opts.Logger,
		funcs:  map[string]Func{},
		calls:  map[Call]int64{},
	}
	if g.logger == nil {
		g.logger = slog.New(slog.DiscardHandler)
	}
	if opts.MotoURL != "" {
		if err := g.SetMotoURL(opts.MotoURL); err != nil {
			return nil, err
		}
	}
	if opts.SQSURL != "" {
		if err := g.SetSQSURL(opts.SQSURL); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// SetMotoURL sets where requests that are neither Lambda Invoke nor SQS go.
func (g *Gateway) SetMotoURL(raw string) error {
	u, err := g.newUpstream(raw)
	if err != nil {
		return fmt.Errorf("set moto url: %w", err)
	}
	g.moto.Store(u)
	return nil
}

// SetSQSURL sets where SQS calls go; an empty URL sends them to moto.
func (g *Gateway) SetSQSURL(raw string) error {
	if raw == "" {
		g.sqs.Store(nil)
		return nil
	}
	u, err := g.newUpstream(raw)
	if err != nil {
		return fmt.Errorf("set sqs url: %w", err)
	}
	g.sqs.Store(u)
	return nil
}

// SetFaults installs f (nil removes fault injection). It takes effect for the next request.
func (g *Gateway) SetFaults(f FaultFunc) {
	if f == nil {
		g.faults.Store(nil)
		return
	}
	g.faults.Store(&f)
}

// Calls returns a snapshot of the number of requests received per service and operation, faulted ones
// included.
func (g *Gateway) Calls() map[Call]int64 {
	g.callsMu.Lock()
	defer g.callsMu.Unlock()
	out := make(map[Call]int64, len(g.calls))
	for k, v := range g.calls {
		out[k] = v
	}
	return out
}

// Start listens on addr, a loopback host:port ("127.0.0.1:0" when empty picks a free port), and serves
// in the background until Close is called or ctx is done.
func (g *Gateway) Start(ctx context.Context, addr string) error {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("start gateway: %w", err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("start gateway: %s is not a loopback address", addr)
	}
	g.srvMu.Lock()
	defer g.srvMu.Unlock()
	if g.srv != nil {
		return errors.New("start gateway: already started")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("start gateway: %w", err)
	}
	srv := &http.Server{Handler: g, ReadHeaderTimeout: 10 * time.Second}
	g.srv, g.ln, g.closed = srv, ln, make(chan struct{})
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			g.logger.Error("gateway stopped serving", "error", err)
		}
	}()
	closed := g.closed
	go func() {
		select {
		case <-ctx.Done():
			_ = g.Close()
		case <-closed:
		}
	}()
	return nil
}

// URL returns the gateway's base URL, http://HOST:PORT, once started.
func (g *Gateway) URL() string {
	g.srvMu.Lock()
	defer g.srvMu.Unlock()
	if g.ln == nil {
		return ""
	}
	return "http://" + g.ln.Addr().String()
}

// Port returns the port the gateway listens on, once started.
func (g *Gateway) Port() int {
	g.srvMu.Lock()
	defer g.srvMu.Unlock()
	if g.ln == nil {
		return 0
	}
	return g.ln.Addr().(*net.TCPAddr).Port
}

// Close stops listening and closes open connections (in-flight requests are cut). It is safe to call
// more than once.
func (g *Gateway) Close() error {
	g.srvMu.Lock()
	defer g.srvMu.Unlock()
	if g.srv == nil {
		return nil
	}
	select {
	case <-g.closed:
		return nil
	default:
	}
	close(g.closed)
	if err := g.srv.Close(); err != nil {
		return fmt.Errorf("close gateway: %w", err)
	}
	return nil
}

// ServeHTTP routes one request.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if name, ok := invokePath(r); ok {
		g.count(Call{Service: "lambda", Operation: "Invoke"})
		if g.fault(w, "Lambda.Invoke", lambdaProtocol) || g.injectFault(w, r, "Lambda.Invoke", functionName(name)) {
			return
		}
		g.invoke(w, r, name)
		return
	}

	req, err := classify(r)
	if err != nil {
		writeJSONError(w, http.StatusBadRequest, "SerializationException", err.Error(), "application/x-amz-json-1.0")
		return
	}
	g.count(Call{Service: req.service, Operation: req.operation})
	if req.target != "" && (g.fault(w, req.target, req.protocol) || g.injectFault(w, r, req.target, "")) {
		return
	}
	if req.service == "sqs" && g.sqsLimit(w, r, req) { // SQS's request sizes (sqslimits.go)
		return
	}
	if req.target == "AWSEvents.PutEvents" {
		g.putEvents(w, r)
		return
	}
	up := g.moto.Load()
	if req.service == "sqs" {
		if s := g.sqs.Load(); s != nil {
			up = s
		}
	}
	if up == nil {
		writeJSONError(w, http.StatusServiceUnavailable, "ServiceUnavailable", "gateway has no moto URL yet", "application/x-amz-json-1.0")
		return
	}
	if req.service == "sqs" && req.protocol == jsonProtocol && g.dedup.serve(w, r, req.operation, up) {
		return
	}
	if req.service == "states" && req.protocol == jsonProtocol && g.stops.serve(w, r, req.operation, up) {
		return
	}
	up.proxy.ServeHTTP(w, r)
}

func (g *Gateway) count(c Call) {
	g.callsMu.Lock()
	g.calls[c]++
	g.callsMu.Unlock()
}

func (g *Gateway) newUpstream(raw string) (*upstream, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, err
	}
	if u.Scheme != "http" || u.Host == "" {
		return nil, fmt.Errorf("%q: want http://HOST:PORT", raw)
	}
	if host := u.Hostname(); host != "localhost" {
		if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
			return nil, fmt.Errorf("%q: not a loopback address", raw)
		}
	}
	transport := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConns:        256,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     90 * time.Second,
	}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(u)
			pr.Out.Host = pr.In.Host // keep the signed Host header
		},
		Transport: transport,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			g.logger.Error("gateway could not forward a request", "upstream", u.String(), "path", r.URL.Path, "error", err)
			writeJSONError(w, http.StatusBadGateway, "ServiceUnavailable", "gateway: "+err.Error(), "application/x-amz-json-1.0")
		},
	}
	return &upstream{url: u, proxy: proxy}, nil
}

type protocol int

const (
	jsonProtocol protocol = iota
	queryProtocol
	lambdaProtocol
)

// request is what the gateway needs to know about a forwarded request.
type request struct {
	service   string
	operation string
	target    string // for fault injection; empty: never faulted
	protocol  protocol
}

// targetPrefixes maps X-Amz-Target prefixes to signing names, for unsigned requests.
var targetPrefixes = map[string]string{
	"AWSStepFunctions":  "states",
	"AmazonSQS":         "sqs",
	"DynamoDB_20120810": "dynamodb",
	"AWSEvents":         "events",
}

// classify finds the service and operation of a request other than Lambda Invoke.
func classify(r *http.Request) (request, error) {
	service := signingService(r.Header.Get("Authorization"))
	if target := r.Header.Get("X-Amz-Target"); target != "" {
		prefix, op, _ := strings.Cut(target, ".")
		if service == "" {
			service = targetPrefixes[prefix]
		}
		if service == "" {
			service = strings.ToLower(prefix)
		}
		return request{service: service, operation: op, target: target, protocol: jsonProtocol}, nil
	}

	action := r.URL.Query().Get("Action")
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt == "application/x-www-form-urlencoded" && r.Body != nil {
		body, err := io.ReadAll(r.Body)
		r.Body.Close()
		if err != nil {
			return request{}, fmt.Errorf("read request body: %w", err)
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		if form, err := url.ParseQuery(string(body)); err == nil && form.Get("Action") != "" {
			action = form.Get("Action")
		}
	}
	if action != "" {
		if service == "" && strings.Contains(r.Host, "sqs") {
			service = "sqs"
		}
		req := request{service: service, operation: action, protocol: queryProtocol}
		if service == "sqs" {
			req.target = "AmazonSQS." + action
		}
		if req.service == "" {
			req.service = "unknown"
		}
		return req, nil
	}

	if service == "" {
		service = "unknown"
		if strings.HasPrefix(r.URL.Path, "/moto-api/") {
			service = "moto-api"
		}
	}
	return request{service: service, operation: r.Method + " " + r.URL.Path, protocol: jsonProtocol}, nil
}

// signingService returns the service of a SigV4 Authorization header
// ("AWS4-HMAC-SHA256 Credential=AKID/20260101/us-east-1/sqs/aws4_request, ...").
func signingService(auth string) string {
	_, rest, ok := strings.Cut(auth, "Credential=")
	if !ok {
		return ""
	}
	scope, _, _ := strings.Cut(rest, ",")
	parts := strings.Split(strings.TrimSpace(scope), "/")
	if len(parts) != 5 {
		return ""
	}
	return parts[3]
}

// fault answers the request with the configured fault for target, if any, and reports whether it did.
func (g *Gateway) fault(w http.ResponseWriter, target string, p protocol) bool {
	fp := g.faults.Load()
	if fp == nil {
		return false
	}
	f := (*fp)(target)
	if f == nil {
		return false
	}
	status := f.Status
	if status == 0 {
		status = http.StatusBadRequest
	}
	switch p {
	case queryProtocol:
		writeQueryError(w, status, f.Code, f.Message)
	case lambdaProtocol:
		writeLambdaError(w, status, f.Code, f.Message)
	default:
		writeJSONError(w, status, f.Code, f.Message, "application/x-amz-json-1.0")
	}
	return true
}
