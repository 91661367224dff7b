package resources

import (
	"errors"
	"net"
	"strings"
	"syscall"

	"github.com/aws/smithy-go"
)

func apiError(err error) (code, message string) {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode(), ae.ErrorMessage()
	}
	return "", ""
}

// Hint says what to do about a failure of an AWS call, for the kinds of failure an operator can fix
// (credentials, permissions, region, a stopped local stack); "" when it has nothing to add.
func (t *Target) Hint(err error) string {
	if err == nil {
		return ""
	}
	code, _ := apiError(err)
	switch code {
	case "ExpiredToken", "ExpiredTokenException", "RequestExpired":
		return "the AWS credentials have expired: refresh them (for SSO: aws sso login)"
	case "UnrecognizedClientException", "InvalidClientTokenId", "InvalidSignatureException", "SignatureDoesNotMatch", "IncompleteSignature":
		return "AWS did not accept the credentials: check --profile, AWS_PROFILE or AWS_ACCESS_KEY_ID"
	case "AccessDenied", "AccessDeniedException", "AuthorizationError", "AuthorizationErrorException":
		return "the credentials are not allowed this call: use a role with access to the stack's queues, table, state machines and starter function"
	case "AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist", "ResourceNotFoundException":
		if t != nil && t.Kind == Stack {
			return "a resource of " + t.String() + " was not found: is the region right (--region)?"
		}
		return "a resource of the local stack was not found: is the info file from the running `sfnlimit local up`?"
	}
	var ne *net.OpError
	if errors.Is(err, syscall.ECONNREFUSED) || (errors.As(err, &ne) && strings.Contains(ne.Error(), "refused")) {
		if t != nil && t.Kind == Local {
			return "nothing answers at the local stack's endpoint: is `sfnlimit local up` still running?"
		}
		return "nothing answers at the endpoint: check AWS_ENDPOINT_URL"
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return "the endpoint's host is not known: check --region and AWS_ENDPOINT_URL, and the network"
	}
	return ""
}
