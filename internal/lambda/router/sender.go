package router

import (
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"
)

// SenderAttribute is the message attribute a held job carries back to the general queue: the
// principal (Principal) of the producer that sent it first, which the copy's SenderId, the
// router's own, would otherwise replace. Its batch belongs to that producer or to nobody.
const SenderAttribute = "sfnlimitSender"

// Principal is the part of an SQS SenderId (or an STS GetCallerIdentity UserId, of the same form)
// before its first ':': an IAM user's unique id ("AIDA…"), or a role's ("AROA…") without the
// session name that follows it for an assumed role ("AROA…:session"; a Lambda function's role has
// the function's name there). Two sessions of one role are one principal: a role is the unit an
// operator grants sqs:SendMessage to, and a session name is chosen by whoever assumes the role.
func Principal(senderID string) string {
	p, _, _ := strings.Cut(strings.TrimSpace(senderID), ":")
	return p
}

// origin is when a message's job was first sent and by which principal: the message's own
// SentTimestamp and SenderId, or, for a job the router itself held back (the message's SenderId
// is the router's role, r.Self), the attributes it kept them in (SubmittedAtAttribute,
// SenderAttribute). Those attributes on any other sender's message are ignored: a producer cannot
// make its job older than it is (priority ageing reads its age) nor send in another's name.
func (r *Router) origin(m events.SQSMessage) (time.Time, string) {
	at, sender := sentAt(m), Principal(m.Attributes["SenderId"])
	if r.Self == "" || sender != Principal(r.Self) {
		return at, sender
	}
	if a, ok := m.MessageAttributes[SubmittedAtAttribute]; ok && a.StringValue != nil {
		if ms, err := strconv.ParseInt(*a.StringValue, 10, 64); err == nil {
			at = time.UnixMilli(ms).UTC()
		}
	}
	if a, ok := m.MessageAttributes[SenderAttribute]; ok && a.StringValue != nil {
		sender = Principal(*a.StringValue)
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
