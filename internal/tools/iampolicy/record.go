package iampolicy

import (
	"context"
	"sort"
	"sync"

	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/smithy-go/middleware"
)

// Call is one SDK call as a Recorder saw it: the service and operation, and the typed input.
type Call struct {
	Service, Operation string
	Input              any
}

// Recorder records the calls made through SDK clients, before they are sent (so refused and failed
// calls are recorded too). It is safe for concurrent use.
type Recorder struct {
	mu    sync.Mutex
	calls []Call
}

// Option installs the recorder on an SDK client: append it to aws.Config.APIOptions.
func (r *Recorder) Option(stack *middleware.Stack) error {
	return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("sfnlimitIAMRecord",
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			r.mu.Lock()
			r.calls = append(r.calls, Call{Service: awsmiddleware.GetServiceID(ctx), Operation: awsmiddleware.GetOperationName(ctx), Input: in.Parameters})
			r.mu.Unlock()
			return next.HandleInitialize(ctx, in)
		}), middleware.After)
}

// Calls returns the calls recorded so far, in order.
func (r *Recorder) Calls() []Call {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Call(nil), r.calls...)
}

// Operations returns the distinct "Service.Operation" names recorded, sorted.
func (r *Recorder) Operations() []string {
	seen := map[string]bool{}
	for _, c := range r.Calls() {
		seen[c.Service+"."+c.Operation] = true
	}
	out := make([]string, 0, len(seen))
	for k := range seen {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
