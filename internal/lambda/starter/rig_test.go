package starter_test

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"

	"github.com/sfnlimit/sfnlimit/internal/lambda/admission"
	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/lambda/deadletter"
	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lane"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
	"github.com/sfnlimit/sfnlimit/internal/lambda/releaser"
	"github.com/sfnlimit/sfnlimit/internal/lambda/starter"
	"github.com/sfnlimit/sfnlimit/internal/lambda/waitroom"
	"github.com/sfnlimit/sfnlimit/internal/tools/fakes"
)

const (
	lanesURL   = "https://sqs.us-east-1.amazonaws.com/123456789012/sfnlimit-lanes.fifo"
	dlqURL     = "https://sqs.us-east-1.amazonaws.com/123456789012/sfnlimit-dlq"
	smArn      = "arn:aws:states:us-east-1:123456789012:stateMachine:sfnlimit-sample"
	retryDelay = 5 * time.Second
	staleAfter = 1350 * time.Second // 1.5 x a 900 s visibility timeout, as the app wires it
	// lanesVisibility is the lanes queue's visibility timeout as the starter knows it: 1000 s, not
	// 900, so that a check leaving a message in flight for it is not taken for a pause's park.
	lanesVisibility = 1000 * time.Second
)

var (
	t0        = time.Date(2025, 3, 14, 9, 27, 0, 0, time.UTC)
	submitted = time.Date(2025, 3, 14, 9, 26, 50, 123000000, time.UTC) // the fixtures' submittedAt
)

// rig is a starter wired to fakes and to a real releaser service on the same fakes. Limits:
// reports=3, payments=50; attempts: 3 by default, payments 5; unknown types are refused.
type rig struct {
	st     *starter.Starter
	leases *fakes.LeaseStore
	sqs    *fakes.SQS
	sfn    *fakes.SFN
	room   *waitroom.Store
	fates  *admission.Store
	clock  *fakes.Clock
	rel    *releaser.Service
}

func newRig(t *testing.T, limits map[string]int) *rig {
	t.Helper()
	return newRigStrategy(t, limits, "")
}

// newRigStrategy is newRig with every type on a lane strategy ("" is the default).
func newRigStrategy(t *testing.T, limits map[string]int, strategy string) *rig {
	t.Helper()
	if limits == nil {
		limits = map[string]int{"reports": 3, "payments": 50}
	}
	clock := fakes.NewClock(t0)
	res, err := config.NewResolver(config.Defaults{
		Limits: limits, MaxAttempts: map[string]int{"payments": 5}, DefaultMaxAttempts: 3, StateMachineArn: smArn, Strategy: strategy,
	}, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{leases: fakes.NewLeaseStore(clock.Now), sqs: &fakes.SQS{}, sfn: fakes.NewSFN(clock.Now), clock: clock}
	r.room = waitroom.NewStore(fakes.NewDynamoDB("table"), "table")
	r.fates = admission.NewStore(fakes.NewDynamoDB("table"), "table")
	log := fakes.Logger(t)
	dlq := deadletter.New(r.sqs, dlqURL)
	rel := &releaser.Service{Leases: r.leases, Queue: r.sqs, QueueURL: lanesURL, SFN: r.sfn, Config: res, DLQ: dlq, WaitRoom: r.room, Log: log}
	r.rel = rel
	r.st = &starter.Starter{
		Config: res, Leases: r.leases, SFN: r.sfn, Queue: r.sqs, QueueURL: lanesURL, DLQ: dlq, Releaser: rel,
		Lanes: lane.Hashed{}, WaitRoom: r.room, Fates: r.fates, RetryDelay: retryDelay, StaleAfter: staleAfter, Visibility: lanesVisibility, Concurrency: 10, Now: clock.Now, Log: log,
	}
	return r
}

func loadEvent(t *testing.T, name string) events.SQSEvent {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var ev events.SQSEvent
	if err := json.Unmarshal(b, &ev); err != nil {
		t.Fatalf("decode %s: %v", name, err)
	}
	return ev
}

// message is the fixture's lanes-queue record turned into another job's message: group, body and
// receipt handle change, as they would on the queue. receive numbers the delivery (1 = first).
func message(t *testing.T, group, jobID, body string, receive int) events.SQSMessage {
	t.Helper()
	m := loadEvent(t, "sqs_fifo_event.json").Records[0]
	attrs := map[string]string{}
	for k, v := range m.Attributes {
		attrs[k] = v
	}
	typ, _, _ := job.ParseGroupID(group)
	attrs["MessageGroupId"] = group
	attrs["MessageDeduplicationId"] = job.DedupID(typ, "", "", jobID, 0)
	attrs["ApproximateReceiveCount"] = strconv.Itoa(receive)
	m.Attributes = attrs
	m.MessageId = "msg-" + jobID
	m.ReceiptHandle = handle(jobID, receive)
	m.Body = body
	sum := md5.Sum([]byte(body))
	m.Md5OfBody = hex.EncodeToString(sum[:])
	return m
}

// jobMessage is the receive-th delivery of a job waiting in group "{type}-{lane}".
func jobMessage(t *testing.T, typ string, ln int, jobID string, attempts, receive int) events.SQSMessage {
	t.Helper()
	return message(t, job.GroupID(typ, ln), jobID, jobBody(typ, jobID, attempts), receive)
}

func jobBody(typ, jobID string, attempts int) string {
	b, _ := json.Marshal(job.Job{Type: typ, ID: jobID, Input: json.RawMessage(`{"seconds":3}`), SubmittedAt: submitted, Attempts: attempts})
	return string(b)
}

// handle is the receipt handle of a job's message on its n-th receive.
func handle(jobID string, n int) string {
	return "AQEB" + strings.ReplaceAll(jobID, "-", "") + "-receive-" + strconv.Itoa(n)
}

func execName(typ, id string, attempt int) string { return job.ExecutionName(typ, id, attempt) }
func execArn(typ, id string, attempt int) string {
	return fakes.ExecutionArn(smArn, execName(typ, id, attempt))
}

// execution is a job attempt's execution as the starter would have started it in lane ln.
func execution(typ string, ln int, jobID string, attempt int, status sfntypes.ExecutionStatus, errName, cause string) fakes.Execution {
	j := job.Job{Type: typ, ID: jobID, Input: json.RawMessage(`{"seconds":3}`), SubmittedAt: submitted}
	return fakes.Execution{
		StateMachineArn: smArn, Name: execName(typ, jobID, attempt), Status: status,
		Input: string(j.ExecutionInput(ln, attempt).MustJSON()), Error: errName, Cause: cause,
	}
}

// leaseOf is a lease as the starter writes it; receive is the delivery whose handle it holds.
func leaseOf(typ string, ln int, jobID string, attempt int, st lease.Status, receive int) lease.Lease {
	l := lease.Lease{
		Type: typ, Lane: ln, JobID: jobID, MessageID: "msg-" + jobID, ReceiptHandle: handle(jobID, receive),
		Attempt: attempt, Status: st, StartedAt: t0.Add(-20 * time.Minute), SubmittedAt: submitted,
		UpdatedAt: t0.Add(-20 * time.Minute), Version: 3,
	}
	if st == lease.Starting {
		// A claim names its execution before the start is tried.
		l.ExecutionArn = execArn(typ, jobID, attempt)
	}
	return l
}

// holdsRunning reports whether a lease is of a started job: its claim (a start writes nothing more)
// or a lease confirmed running by a later look.
func holdsRunning(l lease.Lease) bool { return l.Status == lease.Starting }

// wantLease is a lane's lease as a test expects it.
type wantLease struct {
	JobID   string
	Status  lease.Status
	Attempt int
	Handle  string
	Arn     string
}

// checkLeases compares the whole table with want.
func checkLeases(t *testing.T, s *fakes.LeaseStore, want map[lease.Key]wantLease) {
	t.Helper()
	seen := map[lease.Key]bool{}
	for _, got := range s.Leases() {
		k := got.Key()
		seen[k] = true
		w, ok := want[k]
		if !ok {
			t.Errorf("lease of lane %s = %+v, want the lane free", k, got)
			continue
		}
		if got.JobID != w.JobID || got.Status != w.Status || got.Attempt != w.Attempt || got.ReceiptHandle != w.Handle || got.ExecutionArn != w.Arn {
			t.Errorf("lease of lane %s = {job %s status %s attempt %d handle %s arn %q}, want %+v",
				k, got.JobID, got.Status, got.Attempt, got.ReceiptHandle, got.ExecutionArn, w)
		}
	}
	for k, w := range want {
		if !seen[k] {
			t.Errorf("lane %s is free, want lease %+v", k, w)
		}
	}
}

func failures(resp events.SQSEventResponse) []string {
	var ids []string
	for _, f := range resp.BatchItemFailures {
		ids = append(ids, f.ItemIdentifier)
	}
	sort.Strings(ids)
	return ids
}

func startNames(f *fakes.SFN) []string {
	var names []string
	for _, s := range f.Starts() {
		names = append(names, s.Name)
	}
	sort.Strings(names)
	return names
}

// visibility is a ChangeMessageVisibility the test expects, with its timeout's bounds.
type visibility struct {
	Handle   string
	Min, Max int32
}

// decisions are the visibility changes that decide when a message comes back, without the checks
// that a delivery still holds its message, which leave it in flight for the queue's visibility
// timeout as a receive does (an unbound first-free job's, before its start).
func decisions(q *fakes.SQS) []fakes.VisibilityChange {
	var out []fakes.VisibilityChange
	for _, v := range q.VisibilityChanges() {
		if v.Timeout != int32(lanesVisibility.Seconds()) {
			out = append(out, v)
		}
	}
	return out
}

func checkVisibility(t *testing.T, q *fakes.SQS, want []visibility) {
	t.Helper()
	got := decisions(q)
	sort.Slice(got, func(i, j int) bool { return got[i].ReceiptHandle < got[j].ReceiptHandle })
	want = append([]visibility(nil), want...)
	sort.Slice(want, func(i, j int) bool { return want[i].Handle < want[j].Handle })
	if len(got) != len(want) {
		t.Errorf("visibility changes = %+v, want %+v", got, want)
		return
	}
	for i, w := range want {
		g := got[i]
		if g.QueueURL != lanesURL || g.ReceiptHandle != w.Handle || g.Timeout < w.Min || g.Timeout > w.Max {
			t.Errorf("visibility change %d = %s %s -> %d s, want %s -> %d..%d s", i, g.QueueURL, g.ReceiptHandle, g.Timeout, w.Handle, w.Min, w.Max)
		}
	}
}

// dead is a dead letter as a test expects it.
type dead struct{ Reason, JobID string }

func checkDLQ(t *testing.T, q *fakes.SQS, want []dead) {
	t.Helper()
	got := q.Sent(dlqURL)
	if len(got) != len(want) {
		t.Errorf("dead letters = %+v, want %+v", got, want)
		return
	}
	for i, w := range want {
		a := got[i].Attributes
		if a[deadletter.AttrReason] != w.Reason || a[deadletter.AttrJobID] != w.JobID {
			t.Errorf("dead letter %d = %v, want reason %s job %s", i, a, w.Reason, w.JobID)
		}
	}
}

func deleted(q *fakes.SQS) []string {
	var out []string
	for _, d := range q.Deletes() {
		if d.QueueURL != lanesURL {
			out = append(out, "wrong queue "+d.QueueURL)
			continue
		}
		out = append(out, d.ReceiptHandle)
	}
	sort.Strings(out)
	return out
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func sorted(s ...string) []string {
	s = append([]string(nil), s...)
	sort.Strings(s)
	return s
}

// switchableConfig is a type configuration an operator can reset and set again (`config reset`,
// `config set`): a reset type is unknown.
type switchableConfig struct {
	inner interface {
		Get(ctx context.Context, typ string) (config.TypeConfig, error)
	}
	mu   sync.Mutex
	gone map[string]bool
}

func (c *switchableConfig) Get(ctx context.Context, typ string) (config.TypeConfig, error) {
	c.mu.Lock()
	gone := c.gone[typ]
	c.mu.Unlock()
	if gone {
		return config.TypeConfig{}, fmt.Errorf("type %s: %w", typ, config.ErrUnknownType)
	}
	return c.inner.Get(ctx, typ)
}

func (c *switchableConfig) set(typ string, gone bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gone[typ] = gone
}
