package ops

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	ledger "github.com/sfnlimit/sfnlimit/internal/lambda/batch"
	"github.com/sfnlimit/sfnlimit/internal/lambda/deadletter"
	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/lambda/sqsbatch"
)

// dlqAPI is what reading and redriving the dead-letter queue needs.
type dlqAPI interface {
	ReceiveMessage(context.Context, *sqs.ReceiveMessageInput, ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	ChangeMessageVisibilityBatch(context.Context, *sqs.ChangeMessageVisibilityBatchInput, ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error)
	DeleteMessageBatch(context.Context, *sqs.DeleteMessageBatchInput, ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error)
	// SendMessageBatch and SendMessage: a redrive sends with sqsbatch, which splits by SQS's count
	// and size limits and sends a batch SQS refuses as too long one message at a time.
	SendMessageBatch(context.Context, *sqs.SendMessageBatchInput, ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error)
	SendMessage(context.Context, *sqs.SendMessageInput, ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
}

// DLQ reads the dead-letter queue without consuming it, and sends dead letters back to the general
// queue.
type DLQ struct {
	SQS     dlqAPI
	URL     string // the dead-letter queue
	General string // the general queue, where redriven jobs go
	// Hold is how long a received message stays invisible while it is looked at (default 60 s). If
	// the command dies, the message is visible again after it.
	Hold time.Duration
	// Wait is the long-poll time of a receive; an empty receive ends the scan (default 1 s).
	Wait time.Duration
	// CheckType, if not nil, says whether a type has a limit: a dead letter whose type has none
	// would be refused again (unknown_type), so a redrive leaves it.
	CheckType TypeChecker
	// Sender adjusts the batch sender of a redrive (tests use it).
	Sender func(*sqsbatch.Sender)
	// DryRun makes Redrive decide every dead letter as it would (filter, limit, once per run, the
	// router's refusals) and move none: those it would send are in RedriveResult.WouldRedrive.
	DryRun bool
	// Caller is the principal (batch.Principal) the redrive sends as ("": unknown). A message SQS
	// moved here from the general queue that names a batch is redriven only when its own sender is
	// the caller: sent again, it counts in its batch as the caller's.
	Caller string
	// Router is the router's own principal (the stack's RouterRoleId output: its role's unique id,
	// "": unknown). A job the router held back is a general-queue message it sent itself, its
	// producer kept in SenderAttribute: moved here by SQS, it is that producer's job, not the
	// router's, as the router reads it (router.origin).
	Router string
}

// DeadLetter is one message of the dead-letter queue and what its attributes say.
type DeadLetter struct {
	MessageID string `json:"messageId"`
	Reason    string `json:"reason,omitempty"` // empty for a general-queue message SQS moved after 5 receives
	Source    string `json:"source,omitempty"`
	Type      string `json:"type,omitempty"`
	JobID     string `json:"jobId,omitempty"`
	// Key is the job's key (its key attribute, else its body's): a job is its type, key and id.
	Key string `json:"key,omitempty"`
	// Sender is the job's sender (job.Job.Sender): its sender attribute on a dead letter the
	// limiter sent, the principal of its SenderId on a message SQS moved from the general queue
	// ("" for a dead letter sent before senders were part of a job's identity). A job is its type,
	// sender, key and id.
	Sender   string    `json:"sender,omitempty"`
	Attempt  int       `json:"attempt,omitempty"`
	Error    string    `json:"error,omitempty"`
	Cause    string    `json:"cause,omitempty"`
	SentAt   time.Time `json:"sentAt"`
	Received int       `json:"receiveCount"`
	Body     string    `json:"body"`
	// Refusal is why a redrive left it: the router would refuse it again.
	Refusal string `json:"refusal,omitempty"`
	receipt string
	// movedBySQS: SQS moved it from the general queue (DeadLetterQueueSourceArn); sender is its
	// SenderId's principal.
	movedBySQS bool
	sender     string
	// named: a message SQS moved names a producer in SenderAttribute (the router's held copies do,
	// and anyone may).
	named bool
}

// Filter picks dead letters; empty lists match everything.
type Filter struct {
	Types   []string
	Reasons []string
	IDs     []string
}

// Match reports whether a dead letter passes the filter. A dead letter without a type attribute is
// matched by the type in its body.
func (f Filter) Match(d DeadLetter) bool {
	typ := d.Type
	if typ == "" {
		if s, err := job.Parse([]byte(d.Body), "x", time.Time{}); err == nil {
			typ = s.Type
		}
	}
	reason := d.Reason
	if reason == "" {
		reason = ReasonRedrivenBySQS
	}
	return (len(f.Types) == 0 || slices.Contains(f.Types, typ)) &&
		(len(f.Reasons) == 0 || slices.Contains(f.Reasons, reason)) &&
		(len(f.IDs) == 0 || slices.Contains(f.IDs, d.JobID))
}

// ReasonRedrivenBySQS stands for the reason of a dead letter that has none: SQS moved it from the
// general queue after the router failed on it 5 times.
const ReasonRedrivenBySQS = "receive_count_exceeded"

func (d DLQ) hold() time.Duration {
	if d.Hold > 0 {
		return d.Hold
	}
	return time.Minute
}

func (d DLQ) receive(ctx context.Context) ([]DeadLetter, error) {
	wait := d.Wait
	if wait <= 0 {
		wait = time.Second
	}
	out, err := d.SQS.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl:              &d.URL,
		MaxNumberOfMessages:   10,
		VisibilityTimeout:     int32(d.hold().Seconds()),
		WaitTimeSeconds:       int32(max(wait.Seconds(), 1)),
		MessageAttributeNames: []string{"All"},
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameSentTimestamp, types.MessageSystemAttributeNameApproximateReceiveCount,
			types.MessageSystemAttributeNameDeadLetterQueueSourceArn, types.MessageSystemAttributeNameSenderId},
	})
	if err != nil {
		return nil, fmt.Errorf("receive from the dead-letter queue: %w", err)
	}
	res := make([]DeadLetter, 0, len(out.Messages))
	for _, m := range out.Messages {
		res = append(res, decode(m, d.Router))
	}
	return res, nil
}

// decode reads a dead letter; router is the router's principal (DLQ.Router).
func decode(m types.Message, router string) DeadLetter {
	// A message SQS moved here (from the general queue, after maxReceiveCount) has the attributes
	// its producer gave it, not the limiter's: its job is read from its body alone, so that no
	// producer can pass its message off as another job's dead letter.
	movedBySQS := m.Attributes[string(types.MessageSystemAttributeNameDeadLetterQueueSourceArn)] != ""
	attr := func(k string) string {
		if movedBySQS {
			return ""
		}
		if v, ok := m.MessageAttributes[k]; ok {
			return aws.ToString(v.StringValue)
		}
		return ""
	}
	d := DeadLetter{
		MessageID: aws.ToString(m.MessageId), Reason: attr(deadletter.AttrReason), Source: attr(deadletter.AttrSource),
		Type: attr(deadletter.AttrType), JobID: attr(deadletter.AttrJobID), Key: attr(deadletter.AttrKey), Error: attr(deadletter.AttrError),
		Cause: attr(deadletter.AttrCause), Body: aws.ToString(m.Body), receipt: aws.ToString(m.ReceiptHandle),
		movedBySQS: movedBySQS, sender: ledger.Principal(m.Attributes[string(types.MessageSystemAttributeNameSenderId)]),
	}
	d.Sender = attr(deadletter.AttrSender)
	if movedBySQS {
		// Its job's sender as the router would have named it (router.origin): the SenderId's
		// principal, "{principal}>{named}" when the message names another, and for a job the router
		// held back, the producer it kept.
		named := ""
		if a, ok := m.MessageAttributes[SenderAttribute]; ok {
			named, d.named = aws.ToString(a.StringValue), true
		}
		d.Sender = job.Sender(d.sender, named)
		if d.named && router != "" && d.sender == ledger.Principal(router) {
			p, behalf, _ := strings.Cut(named, ">")
			if p != "" {
				d.sender = ledger.Principal(p)
				d.Sender = job.Sender(d.sender, behalf)
			}
		}
	}
	d.Attempt, _ = strconv.Atoi(attr(deadletter.AttrAttempt))
	if ms, err := strconv.ParseInt(m.Attributes[string(types.MessageSystemAttributeNameSentTimestamp)], 10, 64); err == nil {
		d.SentAt = time.UnixMilli(ms).UTC()
	}
	d.Received, _ = strconv.Atoi(m.Attributes[string(types.MessageSystemAttributeNameApproximateReceiveCount)])
	if d.JobID == "" || d.Type == "" || d.Key == "" {
		// Dead letters of earlier versions have no key attribute: their bodies have the key.
		if j, err := job.Parse([]byte(d.Body), "", time.Time{}); err == nil || j.Type != "" {
			if d.Type == "" {
				d.Type = j.Type
			}
			if d.JobID == "" {
				d.JobID = j.ID
			}
			if d.Key == "" {
				d.Key = j.Key
			}
		}
	}
	return d
}

// heldSet is the messages a scan received and leaves in the queue, by message id with the latest
// receipt handle (a message received again after Hold has a new one).
type heldSet map[string]DeadLetter

func (h heldSet) add(m DeadLetter) { h[m.MessageID] = m }

// release makes messages visible again at once.
func (d DLQ) release(ctx context.Context, held heldSet) error {
	ls := make([]DeadLetter, 0, len(held))
	for _, m := range held {
		ls = append(ls, m)
	}
	var firstErr error
	for start := 0; start < len(ls); start += 10 {
		var entries []types.ChangeMessageVisibilityBatchRequestEntry
		for i, l := range ls[start:min(start+10, len(ls))] {
			entries = append(entries, types.ChangeMessageVisibilityBatchRequestEntry{
				Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(l.receipt), VisibilityTimeout: 0,
			})
		}
		out, err := d.SQS.ChangeMessageVisibilityBatch(ctx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: &d.URL, Entries: entries})
		if err == nil && len(out.Failed) > 0 {
			err = fmt.Errorf("%s: %s", aws.ToString(out.Failed[0].Code), aws.ToString(out.Failed[0].Message))
		}
		if err != nil && firstErr == nil {
			firstErr = fmt.Errorf("make dead letters visible again (they will be after %s anyway): %w", d.hold(), err)
		}
	}
	return firstErr
}

// List returns up to limit dead letters that match f (limit 0: all), oldest first, without
// consuming them: each is received with a short visibility timeout and made visible again at the
// end. Total counts every message seen.
func (d DLQ) List(ctx context.Context, f Filter, limit int) (list []DeadLetter, total int, err error) {
	held := heldSet{}
	defer func() {
		if rerr := d.release(context.WithoutCancel(ctx), held); rerr != nil && err == nil {
			err = rerr
		}
	}()
	seen := map[string]bool{}
	for limit == 0 || len(list) < limit {
		got, err := d.receive(ctx)
		if err != nil {
			return nil, 0, err
		}
		fresh := 0
		for _, m := range got {
			held.add(m)
			if seen[m.MessageID] {
				continue
			}
			seen[m.MessageID] = true
			fresh++
			total++
			if f.Match(m) && (limit == 0 || len(list) < limit) {
				list = append(list, m)
			}
		}
		if fresh == 0 {
			break
		}
	}
	slices.SortStableFunc(list, func(a, b DeadLetter) int { return a.SentAt.Compare(b.SentAt) })
	return list, total, nil
}

// RedriveResult is what a redrive did.
type RedriveResult struct {
	Redriven int `json:"redriven"`
	// DryRun says nothing was moved: WouldRedrive are the dead letters a redrive would send.
	DryRun       bool         `json:"dryRun,omitempty"`
	WouldRedrive []DeadLetter `json:"wouldRedrive,omitempty"`
	// Moved are the dead letters sent back to the general queue (Redriven counts them).
	Moved []DeadLetter `json:"moved,omitempty"`
	// Skipped counts dead letters that do not match the filter, left where they are.
	Skipped int `json:"skipped"`
	// Max is the most a run moves (--max; 0: all), and HeldBack counts the matching dead letters it
	// looked at and left because Max were chosen already. The scan stops there: those not looked
	// at are not counted.
	Max      int `json:"max,omitempty"`
	HeldBack int `json:"heldBack,omitempty"`
	// Returned counts dead letters of jobs this redrive already sent back, which failed again while
	// it ran: they are left, so that a job is redriven at most once per run.
	Returned int `json:"returned,omitempty"`
	// Refused are matching dead letters whose body the router would refuse again (bad JSON, type
	// or id); they are left in the queue.
	Refused []DeadLetter `json:"refused,omitempty"`
	// SendFailed could not be sent to the general queue: they are left in the dead-letter queue.
	SendFailed []RedriveFailure `json:"sendFailed,omitempty"`
	// DeleteFailed were sent but could not be deleted from the dead-letter queue: they are in both
	// queues, and a later redrive sends them again (their execution names are the same, so an
	// execution that already ran is found rather than run twice).
	DeleteFailed []RedriveFailure `json:"deleteFailed,omitempty"`
}

// RedriveFailure is a dead letter a redrive could not move, and why.
type RedriveFailure struct {
	MessageID string `json:"messageId"`
	Type      string `json:"type,omitempty"`
	JobID     string `json:"jobId,omitempty"`
	Code      string `json:"code"`
	Message   string `json:"message"`
}

// Redrive sends the dead letters that match f (up to limit; 0: all) back to the general queue as
// they are, and deletes each from the dead-letter queue only once its send succeeded, so a failure
// at any point leaves every message in one queue or (after a failed delete) both, never in none.
// Messages it looked at and did not move are made visible again at the end. progress, if not nil,
// is called with the number redriven so far.
func (d DLQ) Redrive(ctx context.Context, f Filter, limit int, progress func(redriven int)) (res RedriveResult, err error) {
	held := heldSet{} // looked at and left: made visible again at the end
	defer func() {
		if rerr := d.release(context.WithoutCancel(ctx), held); rerr != nil && err == nil {
			err = rerr
		}
	}()
	sender := sqsbatch.NewSender(d.SQS, d.General)
	if d.Sender != nil {
		d.Sender(sender)
	}
	seen := map[string]bool{}
	moved := map[string]bool{} // jobs sent back by this run, by type and id, and by body
	res.DryRun, res.Max = d.DryRun, limit
	// chosen counts the dead letters sent, or in a dry run those that would be.
	chosen := func() int { return res.Redriven + len(res.WouldRedrive) }
	for (limit == 0 || chosen() < limit) && ctx.Err() == nil {
		got, err := d.receive(ctx)
		if err != nil {
			return res, err
		}
		fresh := 0
		var move []DeadLetter
		for _, m := range got {
			if seen[m.MessageID] { // came back after Hold: leave it for the release at the end
				if _, ok := held[m.MessageID]; ok {
					held.add(m)
				}
				continue
			}
			seen[m.MessageID] = true
			fresh++
			switch {
			case !f.Match(m):
				res.Skipped++
				held.add(m)
			case limit > 0 && chosen()+len(move) >= limit:
				res.HeldBack++
				held.add(m)
			case moved[jobKey(m)] || moved[bodyKey(m)]:
				res.Returned++
				held.add(m)
			default:
				if rerr := d.refusal(ctx, m); rerr != nil {
					if job.ReasonOf(rerr) == "" {
						for _, x := range got { // received in this round, none sent yet
							held.add(x)
						}
						return res, rerr
					}
					m.Refusal = rerr.Error()
					res.Refused = append(res.Refused, m)
					held.add(m)
					continue
				}
				move = append(move, m)
				moved[jobKey(m)], moved[bodyKey(m)] = true, true
			}
		}
		if len(move) > 0 && d.DryRun {
			res.WouldRedrive = append(res.WouldRedrive, move...)
			for _, m := range move {
				held.add(m)
			}
		} else if len(move) > 0 {
			// A move is finished even if the command is interrupted: send, then delete what was sent.
			mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
			kept := d.move(mctx, sender, move, &res)
			cancel()
			for _, m := range kept {
				held.add(m)
			}
			if progress != nil {
				progress(res.Redriven)
			}
		}
		if fresh == 0 {
			break
		}
	}
	return res, nil
}

// refusal is why the router would refuse a dead letter's body again, or nil.
func (d DLQ) refusal(ctx context.Context, m DeadLetter) error {
	if m.Reason == string(job.ReasonBatchNotOwned) {
		// Another sender's job naming a batch it does not own: redriven by the operator it would
		// reach the router as the operator's, and be counted in that batch if the operator owns it.
		return &job.Error{Reason: job.ReasonBatchNotOwned, Detail: "another sender's job naming a batch it does not own: not redriven"}
	}
	if m.movedBySQS && m.named && d.Router == "" {
		// Perhaps a job the router held back, whose producer is the one it names: with the
		// router's principal unknown (a stack without the RouterRoleId output), it would be sent
		// again as the SenderId's, and every producer's held jobs of one type, key and id would be
		// one job.
		return &job.Error{Reason: reasonProducerUnknown, Detail: "a message SQS moved here that names its producer, with the router's role unknown (the stack has no RouterRoleId output: update it): not redriven"}
	}
	j, err := job.Parse([]byte(m.Body), placeholderID, time.Now())
	if m.movedBySQS && j.Batch != "" && (d.Caller == "" || m.sender != d.Caller) {
		// Its sender's job, never refused by the router: sent again by the caller, it would
		// count in its batch as the caller's.
		return &job.Error{Reason: job.ReasonBatchNotOwned, Detail: fmt.Sprintf(
			"a job of batch %s that SQS moved here from the general queue, sent by %s: only its sender may redrive it", j.Batch, dash(m.sender))}
	}
	if p := job.SenderPrincipal(m.Sender); !m.movedBySQS && m.Source == "router" && p != "" && j.Batch != "" && p != d.Caller {
		// A router refusal names its batch as its sender sent it, perhaps before the batch was
		// open (not counted there): sent again by the caller, the router admits it as the
		// caller's job, counted in the caller's batch of that id, or refused batch_not_owned.
		return &job.Error{Reason: job.ReasonBatchNotOwned, Detail: fmt.Sprintf(
			"a job of batch %s the router refused (%s), sent by %s: only its sender may redrive it", j.Batch, dash(m.Reason), p)}
	}
	if err == nil && d.CheckType != nil {
		err = d.CheckType(ctx, j.Type)
	}
	return err
}

// reasonProducerUnknown is why a redrive leaves a message SQS moved whose producer it cannot tell.
const reasonProducerUnknown job.Reason = "producer_unknown"

// jobKey names a dead letter's job, its type, sender, key and id (two keys' or two senders' jobs
// with one id are two jobs, each redriven); bodyKey its body and sender (a refused job without an
// id has only that).
func jobKey(m DeadLetter) string {
	if m.JobID == "" {
		return bodyKey(m)
	}
	return "job\x00" + m.Type + "\x00" + m.Sender + "\x00" + m.Key + "\x00" + m.JobID
}

// behalfOf is what a redrive by caller sends a dead letter with, on behalf of its job's producer:
// the SenderAttribute names the producer, and the router makes the job's sender
// "{caller}>{producer}" (job.Sender), the caller's own. So two producers' dead letters of one type,
// key and id stay two jobs once the operator sends them again, while no caller can send a job as
// another's: a producer that redrives its own dead letter gets its own sender back.
//
// A sender "p>q" is p's job, sent on q's behalf (an earlier redrive, or any producer naming another:
// SenderAttribute is open to all). Only p's own redrive names q again. Named q by anyone else,
// producer p's job would become the caller's "{caller}>q", which is also what the caller makes of
// q's own dead letter: one deduplication id and one execution name, so p's job would stand for q's.
//
// Nor may anyone else's redrive name p alone: p's jobs on behalf of two producers (a gateway's) would
// then be one. It names "=" and a hash of the whole sender, a principal no IAM id has ("=" is not in
// one), so the job stays apart from every other.
func behalfOf(m DeadLetter, caller string) map[string]types.MessageAttributeValue {
	if m.Sender == "" {
		return nil
	}
	p, q, named := strings.Cut(m.Sender, ">")
	switch {
	case named && caller != "" && p == caller:
		p = q
	case named:
		sum := sha256.Sum256([]byte(m.Sender))
		p = "=" + hex.EncodeToString(sum[:16])
	}
	return map[string]types.MessageAttributeValue{SenderAttribute: {DataType: aws.String("String"), StringValue: aws.String(p)}}
}

// SenderAttribute is the router's attribute naming on whose behalf a message is sent
// (router.SenderAttribute).
const SenderAttribute = "sfnlimitSender"

func bodyKey(m DeadLetter) string {
	sum := sha256.Sum256([]byte(m.Body))
	return "body\x00" + m.Sender + "\x00" + hex.EncodeToString(sum[:])
}

// move sends dead letters to the general queue and deletes the sent ones from the dead-letter
// queue. It returns those left in the dead-letter queue (send failed), to be made visible again.
func (d DLQ) move(ctx context.Context, sender *sqsbatch.Sender, ms []DeadLetter, res *RedriveResult) (kept []DeadLetter) {
	entries := make([]types.SendMessageBatchRequestEntry, len(ms))
	for i, m := range ms {
		entries[i] = types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(m.Body), MessageAttributes: behalfOf(m, d.Caller)}
	}
	failures, _ := sender.Send(ctx, entries)
	failed := map[string]sqsbatch.Failure{}
	for _, f := range failures {
		failed[f.ID] = f
	}
	var sent []DeadLetter
	for i, m := range ms {
		if f, bad := failed[strconv.Itoa(i)]; bad {
			res.SendFailed = append(res.SendFailed, RedriveFailure{MessageID: m.MessageID, Type: m.Type, JobID: m.JobID, Code: f.Code, Message: f.Message})
			kept = append(kept, m)
			continue
		}
		sent = append(sent, m)
	}
	if len(sent) == 0 {
		return kept
	}
	del := make([]types.DeleteMessageBatchRequestEntry, len(sent))
	for i, m := range sent {
		del[i] = types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(m.receipt)}
	}
	out, err := d.SQS.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: &d.URL, Entries: del})
	notDeleted := map[string]RedriveFailure{}
	if err != nil {
		for i, m := range sent {
			notDeleted[strconv.Itoa(i)] = RedriveFailure{MessageID: m.MessageID, Type: m.Type, JobID: m.JobID, Code: "RequestFailed", Message: err.Error()}
		}
	} else {
		for _, f := range out.Failed {
			i, _ := strconv.Atoi(aws.ToString(f.Id))
			m := sent[i]
			notDeleted[aws.ToString(f.Id)] = RedriveFailure{MessageID: m.MessageID, Type: m.Type, JobID: m.JobID, Code: aws.ToString(f.Code), Message: aws.ToString(f.Message)}
		}
	}
	for i, m := range sent {
		if f, bad := notDeleted[strconv.Itoa(i)]; bad {
			res.DeleteFailed = append(res.DeleteFailed, f)
			continue
		}
		res.Redriven++
		res.Moved = append(res.Moved, m)
	}
	return kept
}

// WriteDeadLetters prints dead letters for people.
func WriteDeadLetters(w io.Writer, list []DeadLetter, total int, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "AGE\tREASON\tTYPE\tKEY\tJOB ID\tSENDER\tATTEMPT\tSOURCE\tERROR")
	for _, d := range list {
		reason := d.Reason
		if reason == "" {
			reason = ReasonRedrivenBySQS
		}
		attempt := "-"
		if d.Attempt > 0 {
			attempt = strconv.Itoa(d.Attempt)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", Age(now.Sub(d.SentAt)), dash(reason), dash(d.Type), dash(d.Key), dash(d.JobID), dash(d.Sender), attempt, dash(d.Source), clipText(d.Error, 60))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\n%d shown of %d dead letters seen (each was received, then made visible again)\n", len(list), total)
	return err
}

// WriteTable prints a redrive's result for people.
func (r RedriveResult) WriteTable(w io.Writer) error {
	held := ""
	if r.HeldBack > 0 {
		held = fmt.Sprintf("; held back by --max %d, left: %d", r.Max, r.HeldBack)
	}
	chosen := r.Moved
	if r.DryRun {
		chosen = r.WouldRedrive
		fmt.Fprintf(w, "dry run, nothing moved: would redrive to the general queue: %d; not matching, left: %d%s\n", len(r.WouldRedrive), r.Skipped, held)
	} else {
		fmt.Fprintf(w, "redriven to the general queue: %d; not matching, left: %d%s\n", r.Redriven, r.Skipped, held)
	}
	for _, d := range chosen {
		reason := d.Reason
		if reason == "" {
			reason = ReasonRedrivenBySQS
		}
		fmt.Fprintf(w, "  %s (%s/%s): %s\n", d.MessageID, dash(d.Type), dash(d.JobID), dash(reason))
	}
	if r.Max > 0 && len(chosen) >= r.Max {
		fmt.Fprintf(w, "--max %d reached: the scan stopped there; dead letters it had not looked at yet are not counted above (sfnlimit dlq list shows them all)\n", r.Max)
	}
	if r.Returned > 0 {
		fmt.Fprintf(w, "dead-lettered again while the redrive ran, left (each job is redriven once a run): %d\n", r.Returned)
	}
	if len(r.Refused) > 0 {
		fmt.Fprintf(w, "left in the dead-letter queue, the router would refuse them again: %d\n", len(r.Refused))
		for _, d := range r.Refused {
			fmt.Fprintf(w, "  %s (%s/%s): %s\n", d.MessageID, dash(d.Type), dash(d.JobID), dash(d.Refusal))
		}
	}
	if len(r.SendFailed) > 0 {
		fmt.Fprintf(w, "could not be sent, left in the dead-letter queue: %d\n", len(r.SendFailed))
		for _, f := range r.SendFailed {
			fmt.Fprintf(w, "  %s (%s/%s): %s: %s\n", f.MessageID, dash(f.Type), dash(f.JobID), f.Code, f.Message)
		}
	}
	if len(r.DeleteFailed) > 0 {
		fmt.Fprintf(w, "sent, but still in the dead-letter queue too (a later redrive finds the same executions): %d\n", len(r.DeleteFailed))
		for _, f := range r.DeleteFailed {
			fmt.Fprintf(w, "  %s (%s/%s): %s: %s\n", f.MessageID, dash(f.Type), dash(f.JobID), f.Code, f.Message)
		}
	}
	return nil
}

// dash is a field of a dead letter as printed for people: "-" when empty, quoted with its control
// characters escaped when it has any. The fields come from producers (a refused job's id and type)
// and workflows (error, cause): a newline, tab or terminal escape in them must not forge rows or
// columns, nor reach the terminal. A field with a space at either end (spaces alone print as
// nothing) or two spaces in a row (a column's edge) is quoted too.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	if strings.IndexFunc(s, func(r rune) bool { return !unicode.IsGraphic(r) || (unicode.IsSpace(r) && r != ' ') }) >= 0 ||
		strings.HasPrefix(s, " ") || strings.HasSuffix(s, " ") || strings.Contains(s, "  ") {
		return strconv.QuoteToGraphic(s)
	}
	return s
}

// clipText is s (as dash shows it) clipped to n characters, its end replaced by "...": counted and
// cut by character, as a column's width is, never inside one.
func clipText(s string, n int) string {
	s = dash(s)
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-3]) + "..."
}
