package iampolicy

import (
	"context"
	"fmt"

	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"
)

// Enforcer refuses, before it is sent, every SDK call its policies do not allow, with the error AWS
// answers (AccessDeniedException). The local stack installs one on each function's clients with the
// function's role from template.yaml, because its emulators do not check IAM as AWS does
// (docs/emulators.md, "IAM"): so a role missing an action fails the end-to-end suite the way it
// would fail on AWS. A call Requests cannot map is refused too, with a message saying so.
type Enforcer struct {
	// Principal names the caller in error messages (the role's logical id).
	Principal string
	Policies  []Policy
	Account   Account
}

// Option installs the enforcer on an SDK client: append it to aws.Config.APIOptions.
func (e *Enforcer) Option(stack *middleware.Stack) error {
	return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("sfnlimitIAMEnforce",
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			if err := e.Authorize(in.Parameters); err != nil {
				return middleware.InitializeOutput{}, middleware.Metadata{}, err
			}
			return next.HandleInitialize(ctx, in)
		}), middleware.After)
}

// Authorize returns nil if every authorization of the call is allowed, else an AccessDeniedException.
func (e *Enforcer) Authorize(input any) error {
	reqs, err := Requests(e.Account, input)
	if err != nil {
		return &smithy.GenericAPIError{Code: "AccessDeniedException", Fault: smithy.FaultClient,
			Message: fmt.Sprintf("%s: the local IAM check cannot authorize this call: %v", e.Principal, err)}
	}
	for _, r := range reqs {
		d, err := Decide(e.Policies, r)
		if err != nil {
			return &smithy.GenericAPIError{Code: "AccessDeniedException", Fault: smithy.FaultClient,
				Message: fmt.Sprintf("%s: the local IAM check cannot evaluate %s: %v", e.Principal, r, err)}
		}
		if !d.Allowed {
			by := "no identity-based policy allows the action"
			if d.By != "" {
				by = "explicitly denied by " + d.By
			}
			return &smithy.GenericAPIError{Code: "AccessDeniedException", Fault: smithy.FaultClient,
				Message: fmt.Sprintf("%s is not authorized to perform: %s on resource: %s because %s (local IAM check)", e.Principal, r.Action, r.Resource, by)}
		}
	}
	return nil
}
