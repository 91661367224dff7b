package simworld

import (
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// DedupWindow is SQS's deduplication interval: a FIFO message whose deduplication id was sent in
// the last 5 minutes is accepted and not enqueued, even when the first was deleted since (SQS
// Developer Guide, "Exactly-once processing").
const DedupWindow = 5 * time.Minute

// msg is one SQS message.
type msg struct {
	id, body, group, dedup string
	sender                 string // the SenderId SQS gives it (World.senderOf)
	attrs                  map[string]sqstypes.MessageAttributeValue
	seq                    uint64
	sentAt, firstRecv      time.Time
	visibleAt              time.Time
	receives               int
	handle                 string // the latest receipt handle ("" before the first receive)
	inFlight               bool   // received and not deleted; visibility not yet expired (see visible)
	deleted                bool
}

// queue is one SQS queue, standard or FIFO, following the SQS Developer Guide:
//   - FIFO: messages of a group are handed out in order, and none while one of the group is in
//     flight (received, not deleted, visibility not expired); a receive takes as many messages of
//     one group as it can. Deduplication ids are remembered for DedupWindow from the send, per
//     queue or per message group (DeduplicationScope=messageGroup).
//   - Visibility: a received message is hidden for the queue's timeout, or what
//     ChangeMessageVisibility sets; when it expires the message is received again with a new
//     receipt handle and ApproximateReceiveCount+1.
//   - Receipt handles: only the latest one acts. On a FIFO queue DeleteMessage with an older one
//     succeeds and deletes nothing; ChangeMessageVisibility with it fails (ReceiptHandleIsInvalid),
//     as it does on a message not in flight (MessageNotInflight).
//   - Redrive: a message received maxReceiveCount times goes to the dead-letter queue instead of
//     being received again.
type queue struct {
	w          *World
	name, url  string
	fifo       bool
	groupDedup bool
	visibility time.Duration
	maxRecv    int
	dlq        *queue
	msgs       []*msg
	dedup      map[string]dedupEntry
	// onVisible is called when a message may have become receivable (a send, a visibility change).
	onVisible func()
}

type dedupEntry struct {
	at time.Time
	id string
}

func (q *queue) live() []*msg {
	out := q.msgs[:0]
	for _, m := range q.msgs {
		if !m.deleted {
			out = append(out, m)
		}
	}
	q.msgs = out
	return out
}

func (q *queue) send(body, group, dedup string, attrs map[string]sqstypes.MessageAttributeValue, delay time.Duration, sender string) (string, bool) {
	now := q.w.now()
	if q.fifo {
		k := dedup
		if q.groupDedup {
			k = group + "\x00" + dedup
		}
		if e, ok := q.dedup[k]; ok && now.Sub(e.at) < DedupWindow {
			return e.id, false
		}
		q.w.msgSeq++
		id := fmt.Sprintf("m%06d-%s", q.w.msgSeq, q.name)
		q.dedup[k] = dedupEntry{at: now, id: id}
		q.enqueue(id, body, group, dedup, attrs, now).sender = sender
		return id, true
	}
	q.w.msgSeq++
	id := fmt.Sprintf("m%06d-%s", q.w.msgSeq, q.name)
	m := q.enqueue(id, body, group, dedup, attrs, now)
	m.visibleAt, m.sender = now.Add(delay), sender
	return id, true
}

func (q *queue) enqueue(id, body, group, dedup string, attrs map[string]sqstypes.MessageAttributeValue, now time.Time) *msg {
	q.w.msgSeq++
	m := &msg{id: id, body: body, group: group, dedup: dedup, attrs: attrs, seq: q.w.msgSeq, sentAt: now, visibleAt: now}
	q.msgs = append(q.msgs, m)
	q.w.trace(group, "sqs.send %s %s group=%s dedup=%s", q.name, id, group, dedup)
	if q == q.w.dlq {
		q.w.check.deadLettered(m)
	}
	if q.onVisible != nil {
		q.onVisible()
	}
	return m
}

// visible says whether m can be received now.
func (m *msg) visible(now time.Time) bool { return !m.deleted && !m.visibleAt.After(now) }

// receive takes up to n messages, as ReceiveMessage does.
func (q *queue) receive(n int) []*msg {
	now := q.w.now()
	var out []*msg
	live := q.live()
	if q.fifo {
		busy := map[string]bool{}
		hidden := 0
		for _, m := range live {
			if !m.visible(now) {
				busy[m.group] = true
				hidden++
			}
		}
		taken := map[string]bool{}
		var order []string
		for _, m := range live {
			if busy[m.group] && !taken[m.group] {
				continue
			}
			if !taken[m.group] {
				if len(out) >= n {
					break
				}
				taken[m.group] = true
				order = append(order, m.group)
			}
			if len(out) < n && q.take(m, now) {
				out = append(out, m)
			}
		}
		if a := q.w.aws; a != nil && q == q.w.lanes {
			a.PeakInFlight = max(a.PeakInFlight, hidden+len(out))
			a.PeakGroups = max(a.PeakGroups, len(busy)+len(order))
		}
		return out
	}
	// Standard: any visible messages, in an order the seed decides.
	var vis []*msg
	for _, m := range live {
		if m.visible(now) {
			vis = append(vis, m)
		}
	}
	q.w.rng.Shuffle(len(vis), func(i, j int) { vis[i], vis[j] = vis[j], vis[i] })
	for _, m := range vis {
		if len(out) >= n {
			break
		}
		if q.take(m, now) {
			out = append(out, m)
		}
	}
	return out
}

// take receives m, or moves it to the dead-letter queue when it was received maxReceiveCount
// times already.
func (q *queue) take(m *msg, now time.Time) bool {
	if q.maxRecv > 0 && m.receives >= q.maxRecv && q.dlq != nil {
		m.deleted = true
		q.dlq.enqueue(m.id, m.body, m.group, m.dedup, m.attrs, now)
		q.w.trace(m.group, "sqs.redrive %s %s to %s after %d receives", q.name, m.id, q.dlq.name, m.receives)
		return false
	}
	m.receives++
	if m.receives == 1 {
		m.firstRecv = now
	}
	m.handle = fmt.Sprintf("rh-%s-%d", m.id, m.receives)
	m.visibleAt = now.Add(q.visibility)
	m.inFlight = true
	q.w.trace(m.group, "sqs.receive %s %s group=%s #%d", q.name, m.id, m.group, m.receives)
	return true
}

func (q *queue) byHandle(h string) (*msg, bool) {
	for _, m := range q.msgs {
		if !m.deleted && m.handle != "" && m.handle == h {
			return m, true
		}
	}
	return nil, false
}

// remove deletes the message whose latest handle is h. An older handle deletes nothing (and
// answers success, as SQS does).
func (q *queue) remove(h string) {
	if m, ok := q.byHandle(h); ok {
		m.deleted = true
		q.w.trace(m.group, "sqs.delete %s %s", q.name, m.id)
		// A FIFO group whose message is gone hands out its next one: long-polling event
		// sources see it at once.
		if q.onVisible != nil {
			q.onVisible()
		}
	}
}

// changeVisibility sets the visibility of the message whose latest handle is h.
func (q *queue) changeVisibility(h string, d time.Duration) error {
	m, ok := q.byHandle(h)
	now := q.w.now()
	if !ok {
		return &sqstypes.ReceiptHandleIsInvalid{Message: aws.String("The receipt handle has expired")}
	}
	if m.visible(now) {
		return &sqstypes.MessageNotInflight{Message: aws.String("Message is not in flight")}
	}
	m.visibleAt = now.Add(d)
	if q != q.w.dlq {
		// Not traced on the dead-letter queue: dlq redrive makes its messages visible again in
		// the order of a Go map (ops.DLQ.release), and a trace must replay bit for bit.
		q.w.trace(m.group, "sqs.visibility %s %s %s", q.name, m.id, d)
	}
	if d == 0 && q.onVisible != nil {
		q.onVisible()
	}
	return nil
}

// nextVisible is when the next hidden message becomes receivable (zero: none hidden).
func (q *queue) nextVisible() time.Time {
	now := q.w.now()
	var t time.Time
	for _, m := range q.msgs {
		if !m.deleted && m.visibleAt.After(now) && (t.IsZero() || m.visibleAt.Before(t)) {
			t = m.visibleAt
		}
	}
	return t
}

// event is the Lambda SQS record of m.
func (q *queue) record(m *msg) events.SQSMessage {
	attrs := map[string]string{
		"ApproximateReceiveCount":          strconv.Itoa(m.receives),
		"SentTimestamp":                    strconv.FormatInt(m.sentAt.UnixMilli(), 10),
		"ApproximateFirstReceiveTimestamp": strconv.FormatInt(m.firstRecv.UnixMilli(), 10),
		"SenderId":                         m.sender,
	}
	if q.fifo {
		attrs["MessageGroupId"] = m.group
		attrs["MessageDeduplicationId"] = m.dedup
		attrs["SequenceNumber"] = strconv.FormatUint(m.seq, 10)
	}
	ma := map[string]events.SQSMessageAttribute{}
	for k, v := range m.attrs {
		ma[k] = events.SQSMessageAttribute{StringValue: v.StringValue, DataType: aws.ToString(v.DataType)}
	}
	return events.SQSMessage{
		MessageId: m.id, ReceiptHandle: m.handle, Body: m.body, Attributes: attrs, MessageAttributes: ma,
		EventSource: "aws:sqs", EventSourceARN: "arn:aws:sqs:us-east-1:123456789012:" + q.name, AWSRegion: "us-east-1",
	}
}
