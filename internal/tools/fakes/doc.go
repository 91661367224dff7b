// Package fakes holds in-memory twins of the AWS services and stores the limiter uses, for tests only:
// a lease store with the same version-conditional semantics as lease.Store, a DynamoDB table that
// evaluates condition expressions by DynamoDB's grammar (internal/tools/ddbexpr), an SQS queue that records calls, and
// a Step Functions service with name idempotency as AWS has it. Each fake is safe for concurrent use
// and can be told to fail (hooks and programmable errors) so tests can reach the failure paths.
package fakes

import "github.com/aws/smithy-go"

// APIError returns an error shaped like the one an AWS service answers with code (for example
// "ThrottlingException", "ReceiptHandleIsInvalid", "MessageNotInflight").
func APIError(code, message string) error {
	fault := smithy.FaultClient
	if code == "ServiceUnavailable" || code == "InternalServerError" || code == "InternalFailure" {
		fault = smithy.FaultServer
	}
	return &smithy.GenericAPIError{Code: code, Message: message, Fault: fault}
}
