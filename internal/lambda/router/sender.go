package router

import (
	"strconv"
	"strings"
	"time"

	"github.com/sfnlimit/sfnlimit/internal/lambda/batch"
	"github.com/sfnlimit/sfnlimit/internal/lambda/job"

	"github.com/aws/aws-lambda-go/events"
)

// SenderAttribute is the message attribute a held job carries back to the general queue: the
// job's sender (job.Job.Sender) as the router named it first, whose principal (batch.Principal of
// the producer's SenderId) the copy's SenderId, the router's own, would otherwise replace. Its batch
// belongs to that producer or to nobody.
//
// On any other sender's message it says on whose behalf the message was sent (an operator's dlq
// redrive names the dead letter's sender): the job's sender is then "{principal}>{named}"
// (job.Sender), a sender of the principal's own that no other principal can send as.
const SenderAttribute = "sfnlimitSender"

// origin is when a message's job was first sent, by which principal (whose batches it may be
// in), and its sender (job.Job.Sender, part of its identity): the message's own SentTimestamp and
// SenderId, or, for a job the router itself held back (the message's SenderId is the router's
// role, r.Self), the attributes it kept them in (SubmittedAtAttribute, SenderAttribute). On any
// other sender's message a SubmittedAtAttribute is ignored and a SenderAttribute only makes the
// sender the principal's "{principal}>{named}": a producer cannot make its job older than it is
// (priority ageing reads its age) nor send in another's name.
func (r *Router) origin(m events.SQSMessage) (at time.Time, principal, sender string) {
	at, principal = sentAt(m), batch.Principal(m.Attributes["SenderId"])
	named := ""
	if a, ok := m.MessageAttributes[SenderAttribute]; ok && a.StringValue != nil {
		named = *a.StringValue
	}
	if r.Self == "" || principal != batch.Principal(r.Self) {
		return at, principal, job.Sender(principal, named)
	}
	if a, ok := m.MessageAttributes[SubmittedAtAttribute]; ok && a.StringValue != nil {
		if ms, err := strconv.ParseInt(*a.StringValue, 10, 64); err == nil {
			at = time.UnixMilli(ms).UTC()
		}
	}
	if named == "" {
		return at, principal, job.Sender(principal, "")
	}
	// The router's own copy: named is the job's sender as the router named it, or (a copy sent
	// before senders were part of a job's identity) its producer's principal.
	p, behalf, _ := strings.Cut(named, ">")
	principal = batch.Principal(p)
	return at, principal, job.Sender(principal, behalf)
}

// sentAt is when the message was sent (SQS's SentTimestamp, milliseconds since the epoch).
func sentAt(m events.SQSMessage) time.Time {
	if ms, err := strconv.ParseInt(m.Attributes["SentTimestamp"], 10, 64); err == nil {
		return time.UnixMilli(ms).UTC()
	}
	return time.Now().UTC()
}

// shareOf is whose share of a shared resource (the unlisted types' slots) a principal's jobs take:
// the principal, except for a federated user ("{account}:{name}", batch.Principal), whose name is
// chosen by whoever called sts:GetFederationToken, so that one producer with that right could be
// any number of principals: the federated users of an account (and its root user) share its one
// share. A job's identity and its batches stay the principal's own.
func shareOf(principal string) string {
	if account, _, federated := strings.Cut(principal, ":"); federated && len(account) == 12 && strings.Trim(account, "0123456789") == "" {
		return account
	}
	return principal
}
