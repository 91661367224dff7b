package starter

import (
	"context"
	"errors"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"
	"github.com/aws/smithy-go"

	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
	"github.com/sfnlimit/sfnlimit/internal/lambda/metrics"
)

// cancelOlder carries out the overflow rule cancel (config.OverflowCancel) for a waiting job whose
// key is at its cap: it stops the oldest running execution of the key that was submitted before this
// job, by the same sender, with job.ErrorCancelled. The job then parks like any job at its key's cap;
// the stop ends that execution ABORTED, its release ends the job "cancelled" (not retried, not
// dead-lettered) and frees its lane, and the release's wake-up brings this job back to bind.
//
// What it never stops: another sender's job (a producer ends only its own), a job submitted at the
// same time or after this one (a redelivered older job never stops a newer one), the job itself
// (another copy of it). An older job of the sender's key that holds a lane without running (bound,
// its start not made yet, retrying) cannot be stopped yet: soon is true when there is such a job and
// none to stop, and the caller looks again shortly rather than park for a release that may be long.
//
// The stop is idempotent: a look that stops an execution already stopped changes nothing. A failed
// stop is logged and left to the job's next look.
func (s *Starter) cancelOlder(ctx context.Context, x *msg, leases []lease.Lease) (soon bool) {
	var victim *lease.Lease
	for i, l := range leases {
		if l.Holds(x.job.Sender, x.job.Key, x.job.ID, x.job.Redrive) {
			// Its own lease: a move back to this group not finished yet (a moving lease) counts the
			// key, not an older job's. It goes soon: look again then.
			return true
		}
		switch {
		case l.JobKey != x.job.Key || l.JobSender != x.job.Sender,
			l.Holds(x.job.Sender, x.job.Key, x.job.ID, l.Redrive),
			l.SubmittedAt.IsZero() || !l.SubmittedAt.Before(x.job.SubmittedAt):
			continue
		case l.Status != lease.Starting || l.ExecutionArn == "":
			soon = soon || l.Status == lease.Bound || l.Status == lease.Starting || l.Status == lease.Retrying
			continue
		}
		if victim == nil || l.SubmittedAt.Before(victim.SubmittedAt) {
			victim = &leases[i]
		}
	}
	if victim == nil {
		return soon
	}
	log := x.log.With("cancels", victim.JobID, "cancelsLane", victim.Lane, "executionArn", victim.ExecutionArn)
	// The leases were read for the whole batch, a while ago: a job whose release freed its lease
	// since (in step mode the workflow's Release step frees it just before the execution ends)
	// has done its work, and a stop now would end it ABORTED after it was counted a success. Its
	// lease is read again, and a job no longer running its attempt in its lane is left alone: the
	// look after parking reads the lanes afresh, and a release wakes the job.
	cur, err := s.Leases.Get(ctx, victim.Key())
	if err != nil {
		log.WarnContext(ctx, "key at its cap; its oldest job's lease not read, the next look tries again", "error", err)
		return true
	}
	if cur == nil || !cur.Holds(victim.JobSender, victim.JobKey, victim.JobID, victim.Redrive) || cur.Attempt != victim.Attempt || cur.Status != lease.Starting {
		log.InfoContext(ctx, "key at its cap; its oldest job left its lane since the leases were read, nothing to stop")
		return false
	}
	in := &sfn.StopExecutionInput{ExecutionArn: &victim.ExecutionArn, Error: aws.String(job.ErrorCancelled), Cause: aws.String(job.CancelCause(x.job.ID))}
	_, err = s.SFN.StopExecution(ctx, in)
	switch {
	case err == nil:
		log.InfoContext(ctx, "key at its cap; stopped its oldest running job (overflow rule cancel)")
		s.Metrics.Add(x.key.Type, metrics.CancelsSent, 1)
		return false
	case isErr[*sfntypes.ExecutionDoesNotExist](err):
		// A claim whose start is not made yet: not running yet. Its start is near (or its claim
		// is dropped): look again shortly.
		log.InfoContext(ctx, "key at its cap; its oldest job's execution is not started yet, looking again shortly")
		return true
	case refusedStop(err):
		// Refused as the caller's fault (AccessDenied: a role without states:StopExecution;
		// KmsAccessDeniedException: a workflow encrypted with a key the starter may not use):
		// every try would be refused alike, so the job parks, as under the rule queue.
		log.ErrorContext(ctx, "key at its cap; the stop of its oldest running job was refused, the job waits for it to end", "error", err)
		return false
	default:
		log.WarnContext(ctx, "key at its cap; stopping its oldest running job failed, the next look tries again", "error", err)
		return true
	}
}

// refusedStop says a StopExecution was refused for a reason a retry does not change: a client
// fault other than throttling.
func refusedStop(err error) bool {
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		return false
	}
	return ae.ErrorFault() == smithy.FaultClient && !strings.HasSuffix(ae.ErrorCode(), "ThrottlingException")
}

// maxQuickLooks bounds the quick looks of a job waiting for an older job of its key to run (about
// 5-10 s each, Starter.backoff): past them, it parks like any job at its key's cap, and looks again
// when a release wakes it or its park ends (an older job bound for long: a copy the sweep must
// probe, a rate's token).
const maxQuickLooks = 12
