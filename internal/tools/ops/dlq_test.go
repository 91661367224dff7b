package ops

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sfnlimit/sfnlimit/internal/lambda/deadletter"
	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/tools/local/stack"
)

// The dead-letter tests run on a local stack's SQS (moto) without the limiter's runtime, each on
// queues of its own, so they can run in parallel and count every message.

var emu struct {
	once sync.Once
	s    *stack.Stack
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if emu.s != nil {
		emu.s.Close()
	}
	os.Exit(code)
}

func sqsClient(t *testing.T) *sqs.Client {
	t.Helper()
	emu.once.Do(func() { emu.s, emu.err = stack.Start(context.Background(), stack.Options{}) })
	if emu.err != nil {
		t.Fatalf("start the local stack: %v", emu.err)
	}
	return sqs.NewFromConfig(emu.s.AWSConfig(nil))
}

var queueSeq atomic.Int64

// queues creates a dead-letter queue and a general queue for one test.
func queues(t *testing.T, c *sqs.Client) (dlq, general string) {
	t.Helper()
	name := regexp.MustCompile(`[^A-Za-z0-9_-]+`).ReplaceAllString(t.Name(), "-")
	mk := func(kind string) string {
		out, err := c.CreateQueue(t.Context(), &sqs.CreateQueueInput{QueueName: aws.String(fmt.Sprintf("%.50s-%s-%d", name, kind, queueSeq.Add(1)))})
		if err != nil {
			t.Fatal(err)
		}
		return aws.ToString(out.QueueUrl)
	}
	return mk("dlq"), mk("general")
}

// deadLetter puts one dead letter on the queue as the limiter's functions do.
func deadLetter(t *testing.T, c *sqs.Client, url string, e deadletter.Entry) {
	t.Helper()
	if err := deadletter.New(c, url).Send(t.Context(), e); err != nil {
		t.Fatal(err)
	}
}

// drain takes every message of a queue and returns their bodies, sorted.
func drain(t *testing.T, c *sqs.Client, url string) []string {
	t.Helper()
	var bodies []string
	for {
		out, err := c.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 10, VisibilityTimeout: 300, WaitTimeSeconds: 1})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Messages) == 0 {
			sort.Strings(bodies)
			return bodies
		}
		for _, m := range out.Messages {
			bodies = append(bodies, aws.ToString(m.Body))
		}
	}
}

func body(typ, id string, redrive int) string {
	return fmt.Sprintf(`{"type":%q,"id":%q,"input":{"seconds":1},"redrive":%d}`, typ, id, redrive)
}

// seed puts a mix of dead letters on the queue and returns their bodies.
func seed(t *testing.T, c *sqs.Client, dlq string) []string {
	t.Helper()
	var bodies []string
	add := func(e deadletter.Entry) {
		deadLetter(t, c, dlq, e)
		bodies = append(bodies, e.Body)
	}
	for i := range 12 {
		add(deadletter.Entry{Reason: deadletter.ReasonAttemptsExhausted, Source: "releaser", Type: "payments", JobID: fmt.Sprint("p-", i), Attempt: 3, Error: "JobFailed", Body: body("payments", fmt.Sprint("p-", i), 1)})
	}
	for i := range 3 {
		add(deadletter.Entry{Reason: "aborted", Source: "releaser", Type: "reports", JobID: fmt.Sprint("r-", i), Attempt: 1, Body: body("reports", fmt.Sprint("r-", i), 1)})
	}
	add(deadletter.Entry{Reason: string(job.ReasonNotJSON), Source: "router", Error: "not_json", Body: "garbage"})
	// A general-queue message SQS moved after 5 receives: no attributes.
	if _, err := c.SendMessage(t.Context(), &sqs.SendMessageInput{QueueUrl: &dlq, MessageBody: aws.String(body("reports", "raw", 0))}); err != nil {
		t.Fatal(err)
	}
	bodies = append(bodies, body("reports", "raw", 0))
	sort.Strings(bodies)
	return bodies
}

func TestDLQList(t *testing.T) {
	t.Parallel()
	c := sqsClient(t)
	url, general := queues(t, c)
	want := seed(t, c, url)
	d := DLQ{SQS: c, URL: url, General: general}
	ctx := t.Context()

	list, total, err := d.List(ctx, Filter{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if total != 17 || len(list) != 17 {
		t.Fatalf("List() = %d of %d, want 17 of 17", len(list), total)
	}
	if !slices.IsSortedFunc(list, func(a, b DeadLetter) int { return a.SentAt.Compare(b.SentAt) }) {
		t.Error("List() is not oldest first")
	}
	byID := map[string]DeadLetter{}
	for _, d := range list {
		byID[d.JobID] = d
	}
	if p := byID["p-3"]; p.Reason != "attempts_exhausted" || p.Type != "payments" || p.Attempt != 3 || p.Source != "releaser" || p.Error != "JobFailed" || p.SentAt.IsZero() {
		t.Errorf("List() p-3 = %+v", p)
	}
	if raw := byID["raw"]; raw.Reason != "" || raw.Type != "reports" {
		t.Errorf("List() raw = %+v, want its type read from the body", raw)
	}

	// Nothing was consumed: a second list sees the same messages, received once more.
	again, _, err := d.List(ctx, Filter{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range again {
		if first, ok := byID[m.JobID]; ok && (first.MessageID != m.MessageID || m.Received != first.Received+1) {
			t.Errorf("second List() %s = received %d, want %d", m.JobID, m.Received, first.Received+1)
		}
	}

	tests := []struct {
		name  string
		give  Filter
		limit int
		want  int
	}{
		{name: "type", give: Filter{Types: []string{"reports"}}, want: 4},
		{name: "reason", give: Filter{Reasons: []string{"aborted", "not_json"}}, want: 4},
		{name: "no reason", give: Filter{Reasons: []string{ReasonRedrivenBySQS}}, want: 1},
		{name: "type and reason", give: Filter{Types: []string{"reports"}, Reasons: []string{"aborted"}}, want: 3},
		{name: "id", give: Filter{IDs: []string{"p-1", "r-2"}}, want: 2},
		{name: "limit", limit: 5, want: 5},
	}
	for _, tt := range tests {
		list, _, err := d.List(ctx, tt.give, tt.limit)
		if err != nil || len(list) != tt.want {
			t.Errorf("%s: List() = %d, %v; want %d", tt.name, len(list), err, tt.want)
		}
	}
	if got := drain(t, c, url); !slices.Equal(got, want) {
		t.Errorf("the queue after listing holds %d messages, want the %d seeded", len(got), len(want))
	}
}

func TestDLQRedrive(t *testing.T) {
	t.Parallel()
	c := sqsClient(t)
	url, general := queues(t, c)
	all := seed(t, c, url)
	d := DLQ{SQS: c, URL: url, General: general}

	var progress []int
	res, err := d.Redrive(t.Context(), Filter{Types: []string{"payments"}}, 0, func(n int) { progress = append(progress, n) })
	if err != nil {
		t.Fatal(err)
	}
	if res.Redriven != 12 || res.Skipped != 5 || len(res.Refused)+len(res.SendFailed)+len(res.DeleteFailed) != 0 {
		t.Errorf("Redrive(payments) = %+v, want 12 redriven, 5 left", res)
	}
	if len(progress) == 0 || progress[len(progress)-1] != 12 {
		t.Errorf("progress = %v, want it to end at 12", progress)
	}
	var payments, rest []string
	for _, b := range all {
		if strings.Contains(b, `"payments"`) {
			payments = append(payments, b)
		} else {
			rest = append(rest, b)
		}
	}
	if got := drain(t, c, general); !slices.Equal(got, payments) {
		t.Errorf("general queue = %v, want the payments bodies unchanged", got)
	}

	// All that is left: the not_json body stays, as the router would refuse it again; --max counts.
	res, err = d.Redrive(t.Context(), Filter{}, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Redriven != 2 {
		t.Errorf("Redrive(max 2) = %+v, want 2 redriven", res)
	}
	res, err = d.Redrive(t.Context(), Filter{}, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Redriven != 2 || len(res.Refused) != 1 || res.Refused[0].Body != "garbage" || !strings.Contains(res.Refused[0].Refusal, "not_json") {
		t.Errorf("Redrive(all) = %+v, want 2 redriven and garbage refused", res)
	}
	if got := drain(t, c, url); !slices.Equal(got, []string{"garbage"}) {
		t.Errorf("dead-letter queue = %v, want only garbage", got)
	}
	if got := drain(t, c, general); len(got) != len(rest)-1 {
		t.Errorf("general queue got %d, want %d", len(got), len(rest)-1)
	}
}

// --max holds matching dead letters back: they are reported as held back by it, not as "not
// matching", and a redrive lists what it moved, as a dry run lists what it would move.
func TestDLQRedriveMax(t *testing.T) {
	t.Parallel()
	c := sqsClient(t)
	url, general := queues(t, c)
	for i := range 3 {
		deadLetter(t, c, url, deadletter.Entry{Reason: deadletter.ReasonAttemptsExhausted, Type: "payments", JobID: fmt.Sprint("m-", i), Body: body("payments", fmt.Sprint("m-", i), 1)})
	}
	deadLetter(t, c, url, deadletter.Entry{Reason: deadletter.ReasonAttemptsExhausted, Type: "reports", JobID: "r-0", Body: body("reports", "r-0", 1)})
	for _, dry := range []bool{true, false} {
		d := DLQ{SQS: c, URL: url, General: general, DryRun: dry}
		res, err := d.Redrive(t.Context(), Filter{Types: []string{"payments"}}, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		chosen := res.Moved
		if dry {
			chosen = res.WouldRedrive
		}
		// moto answers a receive with every visible message (up to 10): all four are looked at.
		if len(chosen) != 1 || chosen[0].Type != "payments" || res.HeldBack != 2 || res.Skipped != 1 || res.Max != 1 {
			t.Errorf("Redrive(payments, max 1, dry run %v) = %+v; want 1 chosen, 2 held back by --max, 1 not matching", dry, res)
		}
		var out strings.Builder
		if err := res.WriteTable(&out); err != nil {
			t.Fatal(err)
		}
		want := "not matching, left: 1; held back by --max 1, left: 2\n  " + chosen[0].MessageID + " (payments/" + chosen[0].JobID + "): attempts_exhausted\n"
		if !strings.Contains(out.String(), want) {
			t.Errorf("dry run %v: output\n%s\nwant it to contain\n%s", dry, out.String(), want)
		}
	}
	if got := drain(t, c, general); len(got) != 1 {
		t.Errorf("general queue holds %d, want the 1 redriven", len(got))
	}
}

// A type with no limit is left, as the router would refuse it again.
func TestDLQRedriveChecksTypes(t *testing.T) {
	t.Parallel()
	c := sqsClient(t)
	url, general := queues(t, c)
	seed(t, c, url)
	d := DLQ{SQS: c, URL: url, General: general, CheckType: func(_ context.Context, typ string) error {
		if typ == "reports" {
			return &job.Error{Reason: job.ReasonUnknownType, Detail: "type reports has no limit"}
		}
		return nil
	}}
	res, err := d.Redrive(t.Context(), Filter{}, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Redriven != 12 || len(res.Refused) != 5 {
		t.Errorf("Redrive() = %d redriven, %d refused; want 12 and 5 (4 reports, 1 garbage)", res.Redriven, len(res.Refused))
	}
	// A check that cannot answer stops the redrive, and what it had received goes back.
	d.CheckType = func(context.Context, string) error { return errors.New("table unreachable") }
	d.Hold = 60 * time.Second
	if _, err := d.Redrive(t.Context(), Filter{}, 0, nil); err == nil || !strings.Contains(err.Error(), "unreachable") {
		t.Errorf("Redrive() = %v, want the check's error", err)
	}
	if got := drain(t, c, url); len(got) != 5 {
		t.Errorf("dead-letter queue after a failed check holds %d visible, want 5", len(got))
	}
}

// Another sender's job refused for naming a batch it does not own stays: redriven, it would reach
// the router as the operator's job, and be counted in that batch if the operator owns it.
func TestDLQRedriveLeavesOtherSendersBatchJobs(t *testing.T) {
	t.Parallel()
	c := sqsClient(t)
	url, general := queues(t, c)
	deadLetter(t, c, url, deadletter.Entry{Reason: string(job.ReasonBatchNotOwned), Source: "router", Type: "payments", JobID: "m-1",
		Body: `{"type":"payments","id":"m-1","batch":"theirs","input":{}}`, Refused: true})
	deadLetter(t, c, url, deadletter.Entry{Reason: deadletter.ReasonAttemptsExhausted, Source: "releaser", Type: "payments", JobID: "p-1", Attempt: 3, Body: body("payments", "p-1", 1)})
	res, err := DLQ{SQS: c, URL: url, General: general}.Redrive(t.Context(), Filter{}, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Redriven != 1 || len(res.Refused) != 1 || res.Refused[0].JobID != "m-1" {
		t.Errorf("Redrive() = %d redriven, refused %+v; want 1 redriven and m-1 left", res.Redriven, res.Refused)
	}
}

// A dry run decides as the redrive would (the router's refusals included) and moves nothing.
func TestDLQRedriveDryRun(t *testing.T) {
	t.Parallel()
	c := sqsClient(t)
	url, general := queues(t, c)
	all := seed(t, c, url)
	d := DLQ{SQS: c, URL: url, General: general, DryRun: true, CheckType: func(_ context.Context, typ string) error {
		if typ == "reports" {
			return &job.Error{Reason: job.ReasonUnknownType, Detail: "type reports has no limit"}
		}
		return nil
	}}
	res, err := d.Redrive(t.Context(), Filter{}, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !res.DryRun || res.Redriven != 0 || len(res.WouldRedrive) != 12 || len(res.Refused) != 5 {
		t.Errorf("dry run = %d redriven, %d would be, %d refused; want 0, 12 (payments) and 5 (4 reports, 1 garbage)", res.Redriven, len(res.WouldRedrive), len(res.Refused))
	}
	for _, m := range res.WouldRedrive {
		if m.Type != "payments" {
			t.Errorf("dry run would redrive %s/%s, which the router refuses", m.Type, m.JobID)
		}
	}
	// With a limit, the dry run stops where the redrive would.
	res, err = d.Redrive(t.Context(), Filter{Types: []string{"payments"}}, 5, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.WouldRedrive) != 5 {
		t.Errorf("dry run with --max 5 would redrive %d, want 5", len(res.WouldRedrive))
	}
	if got := drain(t, c, general); len(got) != 0 {
		t.Errorf("general queue after dry runs holds %d, want none", len(got))
	}
	if got := drain(t, c, url); !slices.Equal(got, all) {
		t.Errorf("dead-letter queue after dry runs holds %d, want all %d", len(got), len(all))
	}
}

// faulty wraps the SQS client: it fails the sends of some bodies, or every delete, as SQS may.
type faulty struct {
	*sqs.Client
	failSend   func(body string) bool
	failDelete bool
	afterSend  func(bodies []string)
}

func (f faulty) SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	var pass []types.SendMessageBatchRequestEntry
	var failed []types.BatchResultErrorEntry
	for _, e := range in.Entries {
		if f.failSend != nil && f.failSend(aws.ToString(e.MessageBody)) {
			failed = append(failed, types.BatchResultErrorEntry{Id: e.Id, Code: aws.String("InternalError"), Message: aws.String("injected")})
			continue
		}
		pass = append(pass, e)
	}
	out := &sqs.SendMessageBatchOutput{}
	if len(pass) > 0 {
		o, err := f.Client.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: in.QueueUrl, Entries: pass}, opts...)
		if err != nil {
			return nil, err
		}
		out = o
		if f.afterSend != nil {
			var bodies []string
			for _, e := range pass {
				bodies = append(bodies, aws.ToString(e.MessageBody))
			}
			f.afterSend(bodies)
		}
	}
	out.Failed = append(out.Failed, failed...)
	return out, nil
}

func (f faulty) DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	if f.failDelete {
		return nil, errors.New("injected: connection reset")
	}
	return f.Client.DeleteMessageBatch(ctx, in, opts...)
}

// On partial failure nothing is lost: a message whose send failed stays in the dead-letter queue,
// one sent but not deleted is in both queues.
func TestDLQRedrivePartialFailure(t *testing.T) {
	t.Parallel()
	c := sqsClient(t)

	t.Run("sends fail", func(t *testing.T) {
		url, general := queues(t, c)
		all := seed(t, c, url)
		failing := func(b string) bool { return strings.Contains(b, `"p-1`) } // p-1, p-10, p-11
		d := DLQ{SQS: faulty{Client: c, failSend: failing}, URL: url, General: general, Sender: noWait}
		res, err := d.Redrive(t.Context(), Filter{}, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		if res.Redriven != 13 || len(res.SendFailed) != 3 || res.SendFailed[0].Code != "InternalError" {
			t.Errorf("Redrive() = %+v, want 13 redriven and 3 send failures", res)
		}
		left, sent := drain(t, c, url), drain(t, c, general)
		if len(left) != 4 { // 3 failed sends and garbage
			t.Errorf("dead-letter queue holds %v, want the 3 failed and garbage, visible again", left)
		}
		if got := slices.Sorted(slices.Values(append(left, sent...))); !slices.Equal(got, all) {
			t.Errorf("a message was lost or doubled: %d in the queues, %d seeded", len(got), len(all))
		}
	})
	t.Run("deletes fail", func(t *testing.T) {
		url, general := queues(t, c)
		all := seed(t, c, url)
		d := DLQ{SQS: faulty{Client: c, failDelete: true}, URL: url, General: general, Hold: time.Second}
		res, err := d.Redrive(t.Context(), Filter{Types: []string{"reports"}}, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		if res.Redriven != 0 || len(res.DeleteFailed) != 4 {
			t.Errorf("Redrive() = %+v, want 4 sent but not deleted", res)
		}
		time.Sleep(1500 * time.Millisecond) // Hold: the undeleted come back
		left, sent := drain(t, c, url), drain(t, c, general)
		if len(left) != len(all) || len(sent) != 4 {
			t.Errorf("dead-letter queue holds %d, general %d; want all %d kept and 4 sent", len(left), len(sent), len(all))
		}
	})
}

// A job that is dead-lettered again while the redrive runs is not sent a second time.
func TestDLQRedriveOncePerRun(t *testing.T) {
	t.Parallel()
	c := sqsClient(t)
	url, general := queues(t, c)
	deadLetter(t, c, url, deadletter.Entry{Reason: "attempts_exhausted", Type: "payments", JobID: "again", Body: body("payments", "again", 1)})
	// Every send fails again at once: a new dead letter of the same job with the next redrive.
	again := func(bodies []string) {
		for range bodies {
			deadLetter(t, c, url, deadletter.Entry{Reason: "attempts_exhausted", Type: "payments", JobID: "again", Body: body("payments", "again", 2)})
		}
	}
	d := DLQ{SQS: faulty{Client: c, afterSend: again}, URL: url, General: general}
	res, err := d.Redrive(t.Context(), Filter{}, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Redriven != 1 || res.Returned != 1 {
		t.Errorf("Redrive() = %+v, want 1 redriven and 1 returned", res)
	}
	if got := drain(t, c, url); len(got) != 1 || got[0] != body("payments", "again", 2) {
		t.Errorf("dead-letter queue = %v, want the returned dead letter", got)
	}
}

// An interrupted redrive finishes the move it is in, and leaves the rest visible.
func TestDLQRedriveInterrupted(t *testing.T) {
	t.Parallel()
	c := sqsClient(t)
	url, general := queues(t, c)
	all := seed(t, c, url)
	ctx, cancel := context.WithCancel(t.Context())
	d := DLQ{SQS: faulty{Client: c, afterSend: func([]string) { cancel() }}, URL: url, General: general}
	res, err := d.Redrive(ctx, Filter{}, 0, nil)
	if err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	if res.Redriven == 0 || res.Redriven >= 16 {
		t.Errorf("Redrive() interrupted = %+v, want some redriven", res)
	}
	left, sent := drain(t, c, url), drain(t, c, general)
	if len(sent) != res.Redriven || len(left)+len(sent) != len(all) {
		t.Errorf("after the interruption: %d left, %d sent, %d redriven; want all %d in one queue", len(left), len(sent), res.Redriven, len(all))
	}
}

// A dead letter's attributes come from whoever sent the job (its id, its type) and from workflows
// (error, cause): a newline, a tab or a terminal escape in them must not forge rows or columns of
// dlq list or dlq redrive, nor drive the operator's terminal. Such a value is printed quoted, with
// its control characters escaped.
func TestDeadLetterFieldsAreEscaped(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	forged := DeadLetter{MessageID: "m-1", Reason: "invalid_id", Type: "payments", Source: "router",
		JobID: "x\n1s      attempts_exhausted  payments  victim-7\t3", Error: "boom\x1b[2J", SentAt: now.Add(-time.Second)}
	plain := DeadLetter{MessageID: "m-2", Reason: "attempts_exhausted", Type: "payments", JobID: "order-1", Attempt: 3, Source: "releaser", SentAt: now.Add(-time.Minute)}
	// Spaces alone print nothing but widen a column, and a run of them inside a field reads as a
	// column's edge: such a field is quoted too.
	blank := DeadLetter{MessageID: "m-3", Reason: "invalid_id", Type: "payments", Source: "router",
		JobID: "   ", Error: "  ", SentAt: now.Add(-time.Second)}
	spaced := DeadLetter{MessageID: "m-4", Reason: "invalid_id", Type: "payments", Source: "router",
		JobID: "y  releaser", SentAt: now.Add(-time.Second)}
	var list bytes.Buffer
	if err := WriteDeadLetters(&list, []DeadLetter{forged, plain, blank, spaced}, 4, now); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(list.String(), `"  "`+"\n") {
		t.Errorf("dlq list does not show an error of spaces alone quoted:\n%s", list.String())
	}
	var redrive bytes.Buffer
	if err := (RedriveResult{Redriven: 4, Moved: []DeadLetter{forged, plain, blank, spaced}}).WriteTable(&redrive); err != nil {
		t.Fatal(err)
	}
	for name, out := range map[string]string{"dlq list": list.String(), "dlq redrive": redrive.String()} {
		if strings.Contains(out, "\x1b") {
			t.Errorf("%s printed a raw escape character:\n%q", name, out)
		}
		if !strings.Contains(out, `"x\n1s      attempts_exhausted  payments  victim-7\t3"`) {
			t.Errorf("%s does not show the forged id quoted and escaped:\n%s", name, out)
		}
		if !strings.Contains(out, "order-1") {
			t.Errorf("%s lost the plain row:\n%s", name, out)
		}
		if !strings.Contains(out, `"   "`) {
			t.Errorf("%s does not show an id of spaces alone quoted:\n%s", name, out)
		}
		if !strings.Contains(out, `"y  releaser"`) {
			t.Errorf("%s does not show an id with a run of spaces quoted:\n%s", name, out)
		}
		for _, line := range strings.Split(out, "\n") {
			if strings.Contains(line, "victim-7") && !strings.Contains(line, "m-1") && !strings.Contains(line, "invalid_id") {
				t.Errorf("%s: the forged id made a row of its own: %q", name, line)
			}
		}
	}
}

// A workflow's error name is the workflow's own (any Unicode, up to 256 characters): the ERROR
// column clips it to its width by characters, never cutting one in two (invalid UTF-8 on the
// terminal, and a broken character where the "..." should be).
func TestWriteDeadLettersClipsErrorByCharacter(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	var b bytes.Buffer
	err := WriteDeadLetters(&b, []DeadLetter{{Reason: "attempts_exhausted", Type: "payments", JobID: "o-1", Source: "releaser",
		Error: "Échec.Paiement." + strings.Repeat("é", 60), SentAt: now}}, 1, now)
	if err != nil {
		t.Fatal(err)
	}
	if !utf8.Valid(b.Bytes()) {
		t.Errorf("dlq list printed invalid UTF-8 for a long non-ASCII error:\n%q", b.String())
	}
}

// A job is its type, key and id: two keys' dead letters of one id are two jobs, both redriven in
// one run (one per job is the rule), whether the key travels as an attribute or only in the body
// (a dead letter of an earlier version).
func TestDLQRedriveTwoKeysOfOneID(t *testing.T) {
	t.Parallel()
	c := sqsClient(t)
	url, general := queues(t, c)
	keyed := func(key string) string {
		return fmt.Sprintf(`{"type":"payments","id":"o-1","key":%q,"input":{"seconds":1},"redrive":1}`, key)
	}
	deadLetter(t, c, url, deadletter.Entry{Reason: "attempts_exhausted", Type: "payments", JobID: "o-1", Key: "acme", Body: keyed("acme")})
	deadLetter(t, c, url, deadletter.Entry{Reason: "attempts_exhausted", Type: "payments", JobID: "o-1", Body: keyed("beta")})
	deadLetter(t, c, url, deadletter.Entry{Reason: "attempts_exhausted", Type: "payments", JobID: "o-1", Body: body("payments", "o-1", 1)})
	res, err := DLQ{SQS: c, URL: url, General: general}.Redrive(t.Context(), Filter{}, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Redriven != 3 || res.Returned != 0 {
		t.Errorf("Redrive() = %+v, want all 3 redriven (acme's, beta's and the default key's o-1), none returned", res)
	}
	if got := drain(t, c, general); len(got) != 3 {
		t.Errorf("general queue = %v, want the 3 jobs", got)
	}
}

// A general-queue message the router failed on maxReceiveCount times is moved to the dead-letter
// queue by SQS, as its producer sent it: with the producer's message attributes. A producer that
// names its messages' attributes reason, type, jobId and key as the limiter's dead letters do
// would, once such a message is moved (any router outage), list as another key's dead letter, and
// `dlq redrive`, which moves one dead letter per job, would send the forged body in place of that
// job's real dead letter. A message SQS moved (DeadLetterQueueSourceArn) is read from its body.
func TestDeadLetterMovedBySQSIgnoresProducerAttributes(t *testing.T) {
	m := types.Message{
		MessageId: aws.String("moved-1"), ReceiptHandle: aws.String("r"),
		Body: aws.String(`{"type":"payments","id":"mine-1","key":"mallory","input":{}}`),
		Attributes: map[string]string{
			"DeadLetterQueueSourceArn": "arn:aws:sqs:eu-west-1:123456789012:sfnlimit-GeneralQueue-abc",
			"SentTimestamp":            "1709978500000", "ApproximateReceiveCount": "1",
		},
		MessageAttributes: map[string]types.MessageAttributeValue{
			deadletter.AttrReason: strAttr("attempts_exhausted"), deadletter.AttrSource: strAttr("releaser"),
			deadletter.AttrType: strAttr("payments"), deadletter.AttrJobID: strAttr("order-1"), deadletter.AttrKey: strAttr("acme"),
		},
	}
	d := decode(m, "")
	if d.JobID != "mine-1" || d.Key != "mallory" || d.Type != "payments" {
		t.Errorf("moved message read as job %s/%s/%s, want payments/mine-1/mallory (its body's, not its producer's attributes)", d.Type, d.JobID, d.Key)
	}
	if d.Reason != "" || d.Source != "" {
		t.Errorf("moved message has reason %q from %q, want none (SQS moved it: %s)", d.Reason, d.Source, ReasonRedrivenBySQS)
	}
}

// A general-queue message SQS moved here (the router failed on it maxReceiveCount times: an outage)
// was sent by any producer, and may name a batch it does not own: the router never got to refuse
// it batch_not_owned. `dlq redrive` sends it back as the operator's, and a batch the operator
// opened (`batch open`, `submit --batch`) would count another producer's job. Such a dead letter
// that names a batch is redriven only by its own sender.
func TestDLQRedriveLeavesMovedBatchJobsOfOtherSenders(t *testing.T) {
	m := types.Message{
		MessageId: aws.String("moved-2"), ReceiptHandle: aws.String("r"),
		Body: aws.String(`{"type":"payments","id":"m-1","batch":"up","input":{}}`),
		Attributes: map[string]string{
			"DeadLetterQueueSourceArn": "arn:aws:sqs:eu-west-1:123456789012:sfnlimit-GeneralQueue-abc",
			"SenderId":                 "AROAMALLORY:tenant-b", "SentTimestamp": "1709978500000", "ApproximateReceiveCount": "1",
		},
	}
	if err := (DLQ{}).refusal(t.Context(), decode(m, "")); err == nil {
		t.Errorf("refusal of another sender's batch job SQS moved here = nil, want it left (redriven it would count as the operator's)")
	}
}

// Its own sender may redrive it (the command line's caller is the principal that sent it).
func TestDLQRedriveTakesMovedBatchJobsOfTheCaller(t *testing.T) {
	m := types.Message{
		MessageId: aws.String("moved-3"), ReceiptHandle: aws.String("r"),
		Body: aws.String(`{"type":"payments","id":"o-1","batch":"up","input":{}}`),
		Attributes: map[string]string{
			"DeadLetterQueueSourceArn": "arn:aws:sqs:eu-west-1:123456789012:sfnlimit-GeneralQueue-abc",
			"SenderId":                 "AROAOWNER:api", "SentTimestamp": "1709978500000", "ApproximateReceiveCount": "1",
		},
	}
	if err := (DLQ{Caller: "AROAOWNER"}).refusal(t.Context(), decode(m, "")); err != nil {
		t.Errorf("refusal of the caller's own batch job SQS moved here = %v, want none", err)
	}
}

// A job is its type, sender, key and id, and any producer may send another's type, key and id: its
// own job, which may fail on its own input. dlq list prints a row per dead letter with type and id
// only, so producer B's failed payments/o-1 reads exactly as A's (same reason, source, attempt and
// error): the operator takes B's dead letter for A's job, and `dlq redrive --id o-1` for A's
// redrive. Rows of two senders' (or keys') jobs must tell them apart.
func TestWriteDeadLettersTellsSendersApart(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	dl := func(id, sender string) DeadLetter {
		return DeadLetter{MessageID: id, Reason: "attempts_exhausted", Source: "releaser", Type: "payments", JobID: "o-1", Key: "acme",
			Sender: sender, Attempt: 3, Error: "States.TaskFailed", SentAt: now.Add(-time.Minute)}
	}
	var b bytes.Buffer
	if err := WriteDeadLetters(&b, []DeadLetter{dl("m-a", "AROAACME"), dl("m-b", "AROAMALLORY")}, 2, now); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) < 3 || lines[1] == lines[2] {
		t.Errorf("dlq list prints AROAACME's and AROAMALLORY's dead letters of payments/acme/o-1 as the same row:\n%s", b.String())
	}
	for _, s := range []string{"AROAACME", "AROAMALLORY"} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("dlq list does not name sender %s:\n%s", s, b.String())
		}
	}
}

// routerDeadLetter is a dead letter the router sent (its SenderId the router's role) for a job of
// sender naming batch "up", refused for reason.
func routerDeadLetter(id, reason, sender, body string) types.Message {
	return types.Message{
		MessageId: aws.String(id), ReceiptHandle: aws.String("r"), Body: aws.String(body),
		Attributes: map[string]string{"SenderId": "AROAROUTER:sfnlimit-Router", "SentTimestamp": "1709978500000", "ApproximateReceiveCount": "1"},
		MessageAttributes: map[string]types.MessageAttributeValue{
			deadletter.AttrReason: strAttr(reason), deadletter.AttrSource: strAttr("router"), deadletter.AttrType: strAttr("payments"),
			deadletter.AttrSender: strAttr(sender), deadletter.AttrBatch: strAttr("up"),
		},
	}
}

// A job the router refused before its batch was open (batch_not_open after its third delivery, or
// any other reason while the batch was not open: not counted there) names a batch its sender never
// owned. `dlq redrive` sent it back on its sender's behalf, as the caller's job ("{caller}>{sender}"),
// and the router admits a job to a batch by its principal, the caller's: a batch the caller opened
// since (`submit --batch`, a predictable id) counted another producer's jobs as its own, and could
// close early on them. Another producer's refusal that names a batch is redriven only by its own
// sender, as a message SQS moved here is; redriven by anyone else it would at best be refused again
// as batch_not_owned, its first reason lost.
func TestDLQRedriveLeavesRouterRefusedBatchJobsOfOtherSenders(t *testing.T) {
	for _, m := range []types.Message{
		routerDeadLetter("r-1", string(job.ReasonBatchNotOpen), "AROAMALLORY", `{"type":"payments","id":"m-1","batch":"up","input":{}}`),
		routerDeadLetter("r-2", string(job.ReasonUnknownType), "AROAMALLORY", `{"type":"payments","id":"m-2","batch":"up","redrive":1,"input":{}}`),
	} {
		if err := (DLQ{Caller: "AIDAOPS", Router: "AROAROUTER"}).refusal(t.Context(), decode(m, "AROAROUTER")); err == nil {
			t.Errorf("refusal of %s, another sender's router-refused batch job = nil, want it left (redriven it would count as the caller's)", aws.ToString(m.MessageId))
		}
	}
	// Its own sender may redrive it, and a job it sent on another's behalf.
	for _, m := range []types.Message{
		routerDeadLetter("r-3", string(job.ReasonBatchNotOpen), "AROAOWNER", `{"type":"payments","id":"o-1","batch":"up","input":{}}`),
		routerDeadLetter("r-4", string(job.ReasonUnknownType), "AROAOWNER>AIDACUSTOMER", `{"type":"payments","id":"o-2","batch":"up","input":{}}`),
	} {
		if err := (DLQ{Caller: "AROAOWNER", Router: "AROAROUTER"}).refusal(t.Context(), decode(m, "AROAROUTER")); err != nil {
			t.Errorf("refusal of %s, the caller's own router-refused batch job = %v, want none", aws.ToString(m.MessageId), err)
		}
	}
}
