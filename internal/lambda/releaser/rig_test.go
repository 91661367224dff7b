package releaser_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/lambda/deadletter"
	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
	"github.com/sfnlimit/sfnlimit/internal/lambda/releaser"
	"github.com/sfnlimit/sfnlimit/internal/tools/fakes"
)

const (
	lanesURL = "https://sqs.us-east-1.amazonaws.com/123456789012/sfnlimit-lanes.fifo"
	dlqURL   = "https://sqs.us-east-1.amazonaws.com/123456789012/sfnlimit-dlq"
	smArn    = "arn:aws:states:us-east-1:123456789012:stateMachine:sfnlimit-sample"
)

// t0 is the fixtures' time: the jobs were submitted at 09:26:50.123 and run a few seconds later.
var (
	t0        = time.Date(2025, 3, 14, 9, 30, 0, 0, time.UTC)
	submitted = time.Date(2025, 3, 14, 9, 26, 50, 123000000, time.UTC)
)

// rig is a releaser wired to fakes: reports has 3 attempts (the default), payments 5.
type rig struct {
	svc    *releaser.Service
	h      *releaser.Handler
	leases *fakes.LeaseStore
	sqs    *fakes.SQS
	sfn    *fakes.SFN
	clock  *fakes.Clock
}

func newRig(t *testing.T) *rig {
	t.Helper()
	clock := fakes.NewClock(t0)
	res, err := config.NewResolver(config.Defaults{
		Limits: map[string]int{"reports": 3, "payments": 50}, MaxAttempts: map[string]int{"payments": 5},
		DefaultMaxAttempts: 3, StateMachineArn: smArn,
	}, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{leases: fakes.NewLeaseStore(clock.Now), sqs: &fakes.SQS{}, sfn: fakes.NewSFN(clock.Now), clock: clock}
	log := fakes.Logger(t)
	r.svc = &releaser.Service{
		Leases: r.leases, Queue: r.sqs, QueueURL: lanesURL, SFN: r.sfn, Config: res, DLQ: deadletter.New(r.sqs, dlqURL), Log: log,
	}
	r.h = &releaser.Handler{
		Service: r.svc, Leases: r.leases, SweepMinAge: time.Minute, SweepMaxDescribes: 500, SweepConcurrency: 4,
		Now: clock.Now, Log: log,
	}
	return r
}

func fixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func execName(typ, id string, attempt int) string { return job.ExecutionName(typ, id, attempt) }
func execArn(typ, id string, attempt int) string {
	return fakes.ExecutionArn(smArn, execName(typ, id, attempt))
}

// handle names a receipt handle of a job's message: its n-th receive.
func handle(jobID string, n int) string {
	return "AQEB" + strings.ReplaceAll(jobID, "-", "") + "-receive-" + string(rune('0'+n))
}

// held is a lane's lease of a job whose execution runs (or ran).
func held(typ string, ln int, jobID string, attempt int, st lease.Status) lease.Lease {
	l := lease.Lease{
		Type: typ, Lane: ln, JobID: jobID, MessageID: "msg-" + jobID, ReceiptHandle: handle(jobID, 2),
		Attempt: attempt, Status: st, StartedAt: t0.Add(-3 * time.Minute), SubmittedAt: submitted, Version: 4,
		UpdatedAt: t0.Add(-3 * time.Minute),
	}
	if st == lease.Starting {
		l.ExecutionArn = execArn(typ, jobID, attempt)
	}
	return l
}

// execution is the execution of a job's attempt as the starter starts it.
func execution(typ string, ln int, jobID string, attempt int, input string, status string, errName, cause string) fakes.Execution {
	j := job.Job{Type: typ, ID: jobID, Input: json.RawMessage(input), SubmittedAt: submitted}
	return fakes.Execution{
		StateMachineArn: smArn, Name: execName(typ, jobID, attempt), Status: sfntypes.ExecutionStatus(status),
		Input: string(j.ExecutionInput(ln, attempt).MustJSON()), Error: errName, Cause: cause, StartDate: t0.Add(-3 * time.Minute),
	}
}

// wantLease is what a lane's lease should be afterwards; nil means the lane is free.
type wantLease struct {
	JobID   string
	Status  lease.Status
	Attempt int
	Handle  string
	Arn     string
	Version int64 // 0: any
}

func checkLease(t *testing.T, s *fakes.LeaseStore, k lease.Key, want *wantLease) {
	t.Helper()
	got, ok := s.Lease(k)
	switch {
	case want == nil && ok:
		t.Errorf("lease of lane %s = %+v, want the lane free", k, got)
	case want == nil:
	case !ok:
		t.Errorf("lease of lane %s is gone, want %+v", k, *want)
	default:
		if got.JobID != want.JobID || got.Status != want.Status || got.Attempt != want.Attempt ||
			got.ReceiptHandle != want.Handle || got.ExecutionArn != want.Arn || (want.Version != 0 && got.Version != want.Version) {
			t.Errorf("lease of lane %s = {job %s status %s attempt %d handle %s arn %q version %d}, want %+v",
				k, got.JobID, got.Status, got.Attempt, got.ReceiptHandle, got.ExecutionArn, got.Version, *want)
		}
	}
}

// dead is one dead letter as a test expects it; empty fields are not checked.
type dead struct {
	Reason, JobID, Attempt, Error, Cause, Body string
}

func checkDLQ(t *testing.T, q *fakes.SQS, want []dead) {
	t.Helper()
	got := q.Sent(dlqURL)
	if len(got) != len(want) {
		t.Fatalf("dead letters = %d (%+v), want %d", len(got), got, len(want))
	}
	for i, w := range want {
		g := got[i]
		a := g.Attributes
		if a[deadletter.AttrReason] != w.Reason || a[deadletter.AttrSource] != "releaser" ||
			(w.JobID != "" && a[deadletter.AttrJobID] != w.JobID) || (w.Attempt != "" && a[deadletter.AttrAttempt] != w.Attempt) ||
			(w.Error != "" && a[deadletter.AttrError] != w.Error) || (w.Cause != "" && a[deadletter.AttrCause] != w.Cause) {
			t.Errorf("dead letter %d attributes = %v, want %+v from the releaser", i, a, w)
		}
		if w.Body != "" && !jsonEqual(g.Body, w.Body) {
			t.Errorf("dead letter %d body = %s, want %s", i, g.Body, w.Body)
		}
	}
}

func jsonEqual(a, b string) bool {
	var x, y any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return false
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return bytes.Equal(xa, ya)
}

func deletedHandles(q *fakes.SQS) []string {
	var out []string
	for _, d := range q.Deletes() {
		if d.QueueURL != lanesURL {
			out = append(out, "wrong queue "+d.QueueURL)
			continue
		}
		out = append(out, d.ReceiptHandle)
	}
	return out
}

// visibleHandles lists the handles made visible at once (timeout 0); other timeouts are shown as such.
func visibleHandles(q *fakes.SQS) []string {
	var out []string
	for _, v := range q.VisibilityChanges() {
		if v.Timeout != 0 || v.QueueURL != lanesURL {
			out = append(out, "unexpected "+v.QueueURL+" "+v.ReceiptHandle)
			continue
		}
		out = append(out, v.ReceiptHandle)
	}
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

func sorted(s []string) []string {
	s = append([]string(nil), s...)
	sort.Strings(s)
	return s
}
