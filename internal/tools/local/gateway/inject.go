package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Faults are failures that real AWS produces now and then and the emulators never do, injected by the
// gateway at random (docs/emulators.md, "Injected faults", says what each stands for and where AWS
// documents it). A zero rate injects nothing of that kind.
type Faults struct {
	// TransactionConflict is the share of DynamoDB TransactWriteItems calls cancelled as DynamoDB
	// cancels a transaction that meets another one on an item: TransactionCanceledException, with
	// reason TransactionConflict on one item and None on the others, nothing applied.
	TransactionConflict float64
	// StaleDescribe is the share of Step Functions DescribeExecution calls for an execution started
	// less than StaleDescribeFor ago answered ExecutionDoesNotExist: DescribeExecution is eventually
	// consistent. An execution counts as started when the gateway forwards its StartExecution.
	StaleDescribe    float64
	StaleDescribeFor time.Duration
	// InvokeThrottle is the share of Lambda Invoke calls answered 429 TooManyRequestsException (the
	// function's reserved concurrency, or the account's, is used up), without running the function.
	// In the local stack only the workflow's tasks invoke through the gateway: the releaser.
	InvokeThrottle float64
	// ThrottleInvoke, when set, throttles every Invoke it returns true for, whatever the rate: a
	// function kept throttled for one job, to see what a Release step whose retries all fail does.
	ThrottleInvoke func(function string, payload []byte) bool
	// PutEventsFailure is the share of EventBridge PutEvents entries that fail with the retryable
	// InternalFailure in the answer (PutEventsResultEntry, counted in FailedEntryCount) while the
	// call succeeds: EventBridge documents this partial failure, which a sender must check for.
	PutEventsFailure float64
	// Seed makes the random draws repeatable; 0 picks a random seed.
	Seed uint64
}

// Kinds of injected faults, the keys of Injected.
const (
	InjectedTransactionConflict = "dynamodb:TransactionConflict"
	InjectedStaleDescribe       = "states:ExecutionDoesNotExist"
	InjectedInvokeThrottle      = "lambda:TooManyRequestsException"
	InjectedPutEventsFailure    = "events:InternalFailure"
)

// ObserverAppID is an SDK AppID (aws.Config.AppID, sent in the User-Agent as "app/ID") that exempts
// a client from injected faults: a test's own observation of the stack stands outside the system
// under test. SetFaults faults apply to it as to any caller.
const ObserverAppID = "sfnlimit-observer"

// injector holds the installed Faults and what they did.
type injector struct {
	mu       sync.Mutex
	faults   *Faults
	rng      *rand.Rand
	started  map[string]time.Time // execution ARN -> when its StartExecution was forwarded
	injected map[string]int64
}

// InjectFaults installs f, replacing earlier Faults (nil removes them). Counts of what was injected
// so far are kept.
func (g *Gateway) InjectFaults(f *Faults) {
	in := &g.inject
	in.mu.Lock()
	defer in.mu.Unlock()
	if f == nil {
		in.faults = nil
		return
	}
	c := *f
	in.faults = &c
	seed := c.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	in.rng = rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	if in.started == nil {
		in.started = map[string]time.Time{}
	}
	if in.injected == nil {
		in.injected = map[string]int64{}
	}
}

// Injected returns how many faults of each kind (InjectedTransactionConflict, ...) were injected.
func (g *Gateway) Injected() map[string]int64 {
	in := &g.inject
	in.mu.Lock()
	defer in.mu.Unlock()
	out := make(map[string]int64, len(in.injected))
	for k, v := range in.injected {
		out[k] = v
	}
	return out
}

// injectFault answers r with an injected fault when the installed Faults draw one for it, and
// reports whether it did. target is as for FaultFunc; function is the bare function name of a
// Lambda Invoke. It reads the request body when it needs it and leaves it readable.
func (g *Gateway) injectFault(w http.ResponseWriter, r *http.Request, target, function string) bool {
	in := &g.inject
	in.mu.Lock()
	f := in.faults
	in.mu.Unlock()
	if f == nil {
		return false
	}
	if strings.Contains(r.Header.Get("User-Agent"), "app/"+ObserverAppID) {
		return false
	}
	switch target {
	case "DynamoDB_20120810.TransactWriteItems":
		if f.TransactionConflict <= 0 || !in.draw(f.TransactionConflict) {
			return false
		}
		var req struct{ TransactItems []json.RawMessage }
		_ = json.Unmarshal(peekBody(r), &req)
		writeTransactionConflict(w, len(req.TransactItems), in.intN(len(req.TransactItems)))
		in.count(InjectedTransactionConflict)
		return true
	case "AWSStepFunctions.StartExecution":
		if f.StaleDescribe > 0 {
			var req struct{ StateMachineArn, Name string }
			if json.Unmarshal(peekBody(r), &req) == nil && req.Name != "" {
				in.start(executionARN(req.StateMachineArn, req.Name))
			}
		}
		return false
	case "AWSStepFunctions.DescribeExecution":
		if f.StaleDescribe <= 0 {
			return false
		}
		var req struct{ ExecutionArn string }
		_ = json.Unmarshal(peekBody(r), &req)
		if !in.young(req.ExecutionArn, f.StaleDescribeFor) || !in.draw(f.StaleDescribe) {
			return false
		}
		writeJSONError(w, http.StatusBadRequest, "ExecutionDoesNotExist", "Execution Does Not Exist: '"+req.ExecutionArn+"'", "application/x-amz-json-1.0")
		in.count(InjectedStaleDescribe)
		return true
	case "Lambda.Invoke":
		forced := f.ThrottleInvoke != nil && f.ThrottleInvoke(function, peekBody(r))
		if !forced && (f.InvokeThrottle <= 0 || !in.draw(f.InvokeThrottle)) {
			return false
		}
		writeInvokeThrottled(w)
		in.count(InjectedInvokeThrottle)
		return true
	}
	return false
}

// entryFailures draws which of a PutEvents call's n entries fail (Faults.PutEventsFailure).
func (in *injector) entryFailures(r *http.Request, n int) []bool {
	out := make([]bool, n)
	in.mu.Lock()
	f := in.faults
	in.mu.Unlock()
	if f == nil || f.PutEventsFailure <= 0 || strings.Contains(r.Header.Get("User-Agent"), "app/"+ObserverAppID) {
		return out
	}
	for i := range out {
		if in.draw(f.PutEventsFailure) {
			out[i] = true
			in.count(InjectedPutEventsFailure)
		}
	}
	return out
}

func (in *injector) draw(rate float64) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.rng.Float64() < rate
}

func (in *injector) intN(n int) int {
	if n <= 1 {
		return 0
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.rng.IntN(n)
}

func (in *injector) count(kind string) {
	in.mu.Lock()
	in.injected[kind]++
	in.mu.Unlock()
}

// start records when an execution was started, the first time only (a retried start of a running
// execution does not make it younger).
func (in *injector) start(arn string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if _, ok := in.started[arn]; !ok {
		in.started[arn] = time.Now()
	}
}

func (in *injector) young(arn string, within time.Duration) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	at, ok := in.started[arn]
	return ok && time.Since(at) < within
}

// executionARN is the ARN Step Functions gives execution name of a state machine:
// arn:PARTITION:states:REGION:ACCOUNT:execution:STATE_MACHINE:NAME.
func executionARN(stateMachineARN, name string) string {
	return strings.Replace(stateMachineARN, ":stateMachine:", ":execution:", 1) + ":" + name
}

// peekBody returns the request body and puts it back for the proxy.
func peekBody(r *http.Request) []byte {
	if r.Body == nil {
		return nil
	}
	body, err := io.ReadAll(r.Body)
	r.Body.Close()
	r.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil {
		return nil
	}
	return body
}

// writeTransactionConflict answers a TransactWriteItems of n items as DynamoDB does when item i
// conflicts with another transaction (API reference, TransactionCanceledException and
// CancellationReason): one reason per item, in request order.
func writeTransactionConflict(w http.ResponseWriter, n, i int) {
	reasons := make([]map[string]string, max(n, 1))
	codes := make([]string, len(reasons))
	for k := range reasons {
		reasons[k], codes[k] = map[string]string{"Code": "None"}, "None"
	}
	reasons[i] = map[string]string{"Code": "TransactionConflict", "Message": "Transaction is ongoing for the item."}
	codes[i] = "TransactionConflict"
	body, _ := json.Marshal(map[string]any{
		"__type":              "com.amazonaws.dynamodb.v20120810#TransactionCanceledException",
		"Message":             fmt.Sprintf("Transaction cancelled, please refer cancellation reasons for specific reasons [%s]", strings.Join(codes, ", ")),
		"CancellationReasons": reasons,
	})
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.Header().Set("X-Amzn-Requestid", newRequestID())
	w.WriteHeader(http.StatusBadRequest)
	_, _ = w.Write(body)
}

// writeInvokeThrottled answers a Lambda Invoke as Lambda does when the function's reserved
// concurrency is used up (API reference, Invoke: TooManyRequestsException, HTTP 429).
func writeInvokeThrottled(w http.ResponseWriter) {
	body, _ := json.Marshal(map[string]string{
		"Type": "User", "message": "Rate Exceeded.", "Reason": "ReservedFunctionConcurrentInvocationLimitExceeded",
	})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Amzn-Errortype", "TooManyRequestsException")
	w.Header().Set("X-Amzn-Requestid", newRequestID())
	w.WriteHeader(http.StatusTooManyRequests)
	_, _ = w.Write(body)
}
