package router

import (
	"strconv"
	"time"

	"github.com/sfnlimit/sfnlimit/internal/lambda/batch"

	"github.com/aws/aws-lambda-go/events"
)

// SenderAttribute is the message attribute a held job carries back to the general queue: the
// principal (batch.Principal) of the producer that sent it first, which the copy's SenderId, the
// router's own, would otherwise replace. Its batch belongs to that producer or to nobody.
const SenderAttribute = "sfnlimitSender"

// origin is when a message's job was first sent and by which principal: the message's own
// SentTimestamp and SenderId, or, for a job the router itself held back (the message's SenderId
// is the router's role, r.Self), the attributes it kept them in (SubmittedAtAttribute,
// SenderAttribute). Those attributes on any other sender's message are ignored: a producer cannot
// make its job older than it is (priority ageing reads its age) nor send in another's name.
func (r *Router) origin(m events.SQSMessage) (time.Time, string) {
	at, sender := sentAt(m), batch.Principal(m.Attributes["SenderId"])
	if r.Self == "" || sender != batch.Principal(r.Self) {
		return at, sender
	}
	if a, ok := m.MessageAttributes[SubmittedAtAttribute]; ok && a.StringValue != nil {
		if ms, err := strconv.ParseInt(*a.StringValue, 10, 64); err == nil {
			at = time.UnixMilli(ms).UTC()
		}
	}
	if a, ok := m.MessageAttributes[SenderAttribute]; ok && a.StringValue != nil {
		sender = batch.Principal(*a.StringValue)
	}
	return at, sender
}

// sentAt is when the message was sent (SQS's SentTimestamp, milliseconds since the epoch).
func sentAt(m events.SQSMessage) time.Time {
	if ms, err := strconv.ParseInt(m.Attributes["SentTimestamp"], 10, 64); err == nil {
		return time.UnixMilli(ms).UTC()
	}
	return time.Now().UTC()
}
