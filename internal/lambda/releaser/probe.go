package releaser

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
)

// laneSender sends messages to the lanes queue.
type laneSender interface {
	SendMessage(context.Context, *sqs.SendMessageInput, ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
}

// probe sends a probe of stale bound lease l to its lane's group (job.Probe), and reports whether it
// went. Its copy may still be queued there, behind a lanes queue the starter has not caught up
// with: the copy of a bind is never in flight before its first delivery, so the visibility timeout
// bounds nothing about it. The probe reaches the starter after every message sent to the group
// before it, and the starter takes the lease back only if it is still as read here. Sweeps that
// find the same lease stale send one probe per SQS deduplication interval (5 minutes).
func (h *Handler) probe(ctx context.Context, l lease.Lease) bool {
	p := job.Probe{JobID: l.JobID, UpdatedAt: l.UpdatedAt.UnixNano()}
	_, err := h.Probes.SendMessage(ctx, &sqs.SendMessageInput{
		QueueUrl: &h.Service.QueueURL, MessageBody: aws.String(job.ProbeBody(p)),
		MessageGroupId: aws.String(job.GroupID(l.Type, l.Lane)), MessageDeduplicationId: aws.String(job.ProbeDedupID(l.Type, l.Lane, p)),
	})
	log := h.Log.With("jobId", l.JobID, "type", l.Type, "lane", l.Lane)
	if err != nil {
		log.WarnContext(ctx, "sweep: stale bound lease not probed; the next sweep tries again", "error", err)
		return false
	}
	log.InfoContext(ctx, "sweep probed a bound lane whose lease nothing had touched for too long", "updatedAt", l.UpdatedAt)
	return true
}
