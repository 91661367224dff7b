package ops

import (
	"fmt"
	"slices"
	"strings"

	"github.com/sfnlimit/sfnlimit/internal/lambda/deadletter"
	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/lambda/releaser"
	"github.com/sfnlimit/sfnlimit/internal/lambda/starter"
)

// Reasons are every reason a dead letter can carry, from the constants of the functions that write
// them (the router's job.Reason values, the starter's, the releaser's, deadletter's own), and
// ReasonRedrivenBySQS for a message SQS moved without one. TestReasonsAreEveryConstant keeps the
// list complete.
var Reasons = []string{
	string(job.ReasonNotJSON), string(job.ReasonMissingType), string(job.ReasonInvalidType),
	string(job.ReasonInvalidID), string(job.ReasonInvalidKey), string(job.ReasonInvalidPriority), string(job.ReasonUnknownType), string(job.ReasonInputTooLong),
	string(job.ReasonInvalidBatch), string(job.ReasonBatchNotOpen), string(job.ReasonBatchNotOwned),
	string(job.ReasonUnlistedTypes),
	deadletter.ReasonAttemptsExhausted,
	starter.ReasonBadMessage, starter.ReasonStartRefused, starter.ReasonNameTaken,
	releaser.ReasonAborted,
	ReasonRedrivenBySQS,
}

// ValidateReasons refuses a reason no dead letter can carry (a typo would match nothing, and a list
// or redrive would silently find no dead letters).
func ValidateReasons(reasons []string) error {
	for _, r := range reasons {
		if !slices.Contains(Reasons, r) {
			known := slices.Clone(Reasons)
			slices.Sort(known)
			return UsageError{fmt.Errorf("--reason %q is not a reason a dead letter can have; the reasons are: %s", r, strings.Join(known, ", "))}
		}
	}
	return nil
}
