package starter_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
	"github.com/sfnlimit/sfnlimit/internal/tools/fakes"
)

// newCancelRig is a rig whose type llm has 4 lanes, caps every key at keyCap and has the overflow
// rule rule.
func newCancelRig(t *testing.T, keyCap int, rule string) *rig {
	t.Helper()
	return newKeyRigRule(t, keyCap, rule)
}

// newest is the receive-th delivery of job "newest" of key acme, sent by sender, waiting in the key's
// group: the job that finds its key at its cap.
func newest(t *testing.T, sender string, receive int) events.SQSMessage {
	t.Helper()
	b, _ := json.Marshal(job.Job{Type: "llm", ID: "newest", Key: "acme", Sender: sender, Input: json.RawMessage(`{}`), SubmittedAt: submitted})
	return message(t, "llm#acme", "newest", string(b), receive)
}

// noStops fails t when any StopExecution was called.
func noStops(t *testing.T, r *rig, why string) {
	t.Helper()
	if stops := r.sfn.Stops(); len(stops) != 0 {
		t.Errorf("StopExecution calls = %d (first %s), want none: %s", len(stops), aws.ToString(stops[0].ExecutionArn), why)
	}
}

// holder is a job that holds a lane of llm when the waiting job looks.
type holder struct {
	id, key, sender string
	lane            int
	status          lease.Status
	submitted       time.Duration // before the waiting job's submission
}

// put writes h's lease, and its running execution when its lease is a claim.
func (h holder) put(t *testing.T, r *rig) string {
	t.Helper()
	j := job.Job{Type: "llm", ID: h.id, Key: h.key, Sender: h.sender, Input: json.RawMessage(`{}`), SubmittedAt: submitted.Add(-h.submitted)}
	l := lease.Lease{
		Type: "llm", Lane: h.lane, JobID: h.id, JobKey: h.key, JobSender: h.sender, MessageID: "msg-" + h.id, ReceiptHandle: handle(h.id, 1),
		Attempt: 1, Status: h.status, StartedAt: t0.Add(-time.Minute), SubmittedAt: j.SubmittedAt,
	}
	arn := ""
	if h.status == lease.Starting {
		e := r.sfn.Put(fakes.Execution{StateMachineArn: smArn, Name: job.RunName("llm", h.sender, h.key, h.id, 0, 1), Input: string(j.ExecutionInput(h.lane, 1).MustJSON())})
		l.ExecutionArn, arn = e.Arn, e.Arn
	} else {
		l.Attempt = 0 // a bound lease counts the attempts made before it
	}
	if _, err := r.leases.Put(context.Background(), l, nil); err != nil {
		t.Fatal(err)
	}
	return arn
}

// A waiting job at its key's cap under the overflow rule cancel stops the oldest running job of its
// key that its sender submitted before it, and only that one: never another sender's job (the general
// queue is a boundary between tenants), a newer job, or a job not running yet. It parks either way,
// for the stop's release to wake it.
func TestKeyAtItsCapCancelsItsOldestRunningJob(t *testing.T) {
	tests := []struct {
		name    string
		rule    string
		keyCap  int
		sender  string // the waiting job's
		holders []holder
		stopped string // the holder whose execution is stopped ("" none)
		// soon: an older job of the key holds a lane without running yet, and none runs: the job
		// looks again shortly instead of parking, to stop it once it runs.
		soon bool
	}{
		{
			name: "older running job of the key is stopped", rule: config.OverflowCancel, keyCap: 1,
			holders: []holder{{id: "old", key: "acme", lane: 1, status: lease.Starting, submitted: time.Minute}},
			stopped: "old",
		},
		{
			name: "the oldest of two is stopped", rule: config.OverflowCancel, keyCap: 2,
			holders: []holder{
				{id: "older", key: "acme", lane: 1, status: lease.Starting, submitted: time.Minute},
				{id: "oldest", key: "acme", lane: 2, status: lease.Starting, submitted: 2 * time.Minute},
			},
			stopped: "oldest",
		},
		{
			name: "another sender's job of the key is not stopped", rule: config.OverflowCancel, keyCap: 1, sender: "tenant-b",
			holders: []holder{{id: "old", key: "acme", sender: "tenant-a", lane: 1, status: lease.Starting, submitted: time.Minute}},
		},
		{
			name: "a newer job of the key is not stopped", rule: config.OverflowCancel, keyCap: 1,
			holders: []holder{{id: "new", key: "acme", lane: 1, status: lease.Starting, submitted: -time.Minute}},
		},
		{
			name: "a job submitted at the same time is not stopped", rule: config.OverflowCancel, keyCap: 1,
			holders: []holder{{id: "twin", key: "acme", lane: 1, status: lease.Starting}},
		},
		{
			name: "a bound job is not running: nothing to stop yet, looks again shortly", rule: config.OverflowCancel, keyCap: 1,
			holders: []holder{{id: "old", key: "acme", lane: 1, status: lease.Bound, submitted: time.Minute}},
			soon:    true,
		},
		{
			name: "another sender's bound job is not waited for", rule: config.OverflowCancel, keyCap: 1, sender: "tenant-b",
			holders: []holder{{id: "old", key: "acme", sender: "tenant-a", lane: 1, status: lease.Bound, submitted: time.Minute}},
		},
		{
			name: "another key's job is not stopped", rule: config.OverflowCancel, keyCap: 1,
			holders: []holder{
				{id: "old", key: "acme", lane: 1, status: lease.Starting, submitted: time.Minute},
				{id: "other", key: "beta", lane: 2, status: lease.Starting, submitted: time.Hour},
			},
			stopped: "old",
		},
		{
			name: "the rule queue stops nothing", rule: config.OverflowQueue, keyCap: 1,
			holders: []holder{{id: "old", key: "acme", lane: 1, status: lease.Starting, submitted: time.Minute}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			r := newCancelRig(t, tt.keyCap, tt.rule)
			arns := map[string]string{}
			for _, h := range tt.holders {
				arns[h.id] = h.put(t, r)
			}
			resp, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{newest(t, tt.sender, 1)}})
			if err != nil {
				t.Fatal(err)
			}
			if got := failures(resp); !equal(got, sorted("msg-newest")) {
				t.Errorf("batch item failures = %v, want the waiting job held at its key's cap", got)
			}
			ws, err := r.room.List(ctx, "llm")
			if err != nil {
				t.Fatal(err)
			}
			if parked := len(ws) == 1 && ws[0].AtKeyCap; parked == tt.soon {
				t.Errorf("parked records = %+v; want parked at its key's cap %v", ws, !tt.soon)
			}
			if tt.soon {
				vs := r.sqs.VisibilityChanges()
				if len(vs) == 0 || vs[len(vs)-1].Timeout > int32(2*retryDelay/time.Second) {
					t.Errorf("visibility changes = %+v, want the job back within %s", vs, 2*retryDelay)
				}
			}
			stops := r.sfn.Stops()
			if tt.stopped == "" {
				if len(stops) != 0 {
					t.Fatalf("StopExecution calls = %d (first %s), want none", len(stops), aws.ToString(stops[0].ExecutionArn))
				}
				return
			}
			if len(stops) != 1 || aws.ToString(stops[0].ExecutionArn) != arns[tt.stopped] {
				t.Fatalf("StopExecution calls = %+v, want one, of %s", stops, arns[tt.stopped])
			}
			if e := aws.ToString(stops[0].Error); e != job.ErrorCancelled {
				t.Errorf("stop error = %q, want %q", e, job.ErrorCancelled)
			}
			if c := aws.ToString(stops[0].Cause); !strings.Contains(c, "newest") {
				t.Errorf("stop cause = %q, want it to name the newer job", c)
			}
			if x, _ := r.sfn.Execution(arns[tt.stopped]); x.Status != sfntypes.ExecutionStatusAborted {
				t.Errorf("stopped execution's status = %s, want ABORTED", x.Status)
			}
		})
	}
}

// A stop that fails (throttled) leaves the waiting job parked, for its next look to stop again:
// the delivery does not fail, and the stop is tried again on the next look.
func TestFailedCancelIsTriedAgainOnTheNextLook(t *testing.T) {
	ctx := context.Background()
	r := newCancelRig(t, 1, config.OverflowCancel)
	arn := holder{id: "old", key: "acme", lane: 1, status: lease.Starting, submitted: time.Minute}.put(t, r)
	throttled := true
	r.sfn.OnStop = func(*sfn.StopExecutionInput) error {
		if throttled {
			return fakes.APIError("ThrottlingException", "Rate exceeded")
		}
		return nil
	}
	for receive := 1; receive <= 2; receive++ {
		resp, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{newest(t, "", receive)}})
		if err != nil || !equal(failures(resp), sorted("msg-newest")) {
			t.Fatalf("delivery %d = %+v, %v; want the job parked", receive, resp, err)
		}
		if receive == 1 {
			if x, _ := r.sfn.Execution(arn); x.Status != sfntypes.ExecutionStatusRunning {
				t.Fatalf("after a throttled stop the execution is %s, want RUNNING", x.Status)
			}
			throttled = false
		}
	}
	if x, _ := r.sfn.Execution(arn); x.Status != sfntypes.ExecutionStatusAborted || x.Error != job.ErrorCancelled {
		t.Errorf("after the next look the execution is %s (%s), want ABORTED by the rule", x.Status, x.Error)
	}
}

// releasedAfterRead is a lease store whose first ListType is answered, then the lease of lane ln is
// deleted, as the workflow's Release step frees it (step mode) while the starter holds the read.
type releasedAfterRead struct {
	*fakes.LeaseStore
	lane int
	done bool
}

func (s *releasedAfterRead) ListType(ctx context.Context, typ string) ([]lease.Lease, error) {
	ls, err := s.LeaseStore.ListType(ctx, typ)
	if !s.done {
		s.done = true
		for _, l := range ls {
			if l.Lane == s.lane {
				if err := s.LeaseStore.Delete(ctx, l); err != nil {
					return nil, err
				}
			}
		}
	}
	return ls, err
}

// A job whose lease was freed after the waiting job read the leases has done its work (its release
// step freed it): it is not stopped, which would end it ABORTED after it was counted a success. The
// waiting job binds the freed lane instead.
func TestCancelLeavesAJobReleasedSinceTheRead(t *testing.T) {
	ctx := context.Background()
	r := newCancelRig(t, 1, config.OverflowCancel)
	arn := holder{id: "old", key: "acme", lane: 1, status: lease.Starting, submitted: time.Minute}.put(t, r)
	r.st.Leases = &releasedAfterRead{LeaseStore: r.leases, lane: 1}
	resp, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{newest(t, "", 1)}})
	if err != nil {
		t.Fatal(err)
	}
	noStops(t, r, "the job had released its lane")
	if x, _ := r.sfn.Execution(arn); x.Status != sfntypes.ExecutionStatusRunning {
		t.Errorf("released job's execution is %s, want it left RUNNING to its end", x.Status)
	}
	if got := failures(resp); len(got) != 0 {
		t.Errorf("batch item failures = %v, want the waiting job bound to the freed lane", got)
	}
}

// A stale delivery of a waiting job (Lambda may hand a batch over twice; its message was received
// again, or deleted since: the job was bound, ran and ended) stops nothing. Its job is not waiting:
// the stop would end an older job of its key that no newer job takes the place of (a second job
// stopped for one newer job, or one that started after the newer job ended).
func TestStaleWaitingDeliveryCancelsNothing(t *testing.T) {
	ctx := context.Background()
	r := newCancelRig(t, 1, config.OverflowCancel)
	holder{id: "old", key: "acme", lane: 1, status: lease.Starting, submitted: time.Minute}.put(t, r)
	stale := newest(t, "", 1)
	r.sqs.OnChangeVisibility = func(in *sqs.ChangeMessageVisibilityInput) error {
		if *in.ReceiptHandle == stale.ReceiptHandle {
			return fakes.APIError("ReceiptHandleIsInvalid", "The receipt handle has expired")
		}
		return nil
	}
	if _, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{stale}}); err != nil {
		t.Fatal(err)
	}
	noStops(t, r, "a stale delivery stops nothing")
}

// A job moving back to its key's group (its lane above a lowered limit, a pool, a rate) leaves a
// moving lease in its lane until its move ends, and its copy in the key's group may be delivered
// before that. The job's own moving lease does not put its key at its cap: with one older job
// running under a cap of two, that job is not stopped.
func TestOwnMovingLeaseCancelsNothing(t *testing.T) {
	ctx := context.Background()
	r := newCancelRig(t, 2, config.OverflowCancel)
	holder{id: "old", key: "acme", lane: 1, status: lease.Starting, submitted: time.Minute}.put(t, r)
	if _, err := r.leases.Put(ctx, lease.Lease{
		Type: "llm", Lane: 2, JobID: "newest", JobKey: "acme", MessageID: "msg-newest-in-lane-2", ReceiptHandle: "AQEBnewestlane2",
		Receives: 1, Status: lease.Moving, StartedAt: t0.Add(-time.Second), SubmittedAt: submitted, MovedTo: job.KeyGroupID("llm", "acme"),
	}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{newest(t, "", 1)}}); err != nil {
		t.Fatal(err)
	}
	noStops(t, r, "the key runs one job under a cap of two")
}

// Two jobs of a key delivered in one batch, its cap 1: the first binds, and the second, newer, finds
// its key at its cap with an older job of its sender bound and not running yet. Like any job that
// finds so, it looks again shortly to stop that job once it runs, rather than park for a release
// that comes only when that job ends (up to waitroom.MaxParkFor later, the rule's stop that long).
func TestNewerJobOfOneBatchLooksAgainShortlyToCancelTheOneBoundBeforeIt(t *testing.T) {
	ctx := context.Background()
	r := newCancelRig(t, 1, config.OverflowCancel)
	older, _ := json.Marshal(job.Job{Type: "llm", ID: "older", Key: "acme", Input: json.RawMessage(`{}`), SubmittedAt: submitted.Add(-time.Minute)})
	newer, _ := json.Marshal(job.Job{Type: "llm", ID: "newer", Key: "acme", Input: json.RawMessage(`{}`), SubmittedAt: submitted})
	resp, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{
		message(t, "llm#acme", "older", string(older), 1), message(t, "llm#acme", "newer", string(newer), 1),
	}})
	if err != nil {
		t.Fatal(err)
	}
	if got := failures(resp); !equal(got, sorted("msg-newer")) {
		t.Fatalf("batch item failures = %v, want the older job bound and the newer held", got)
	}
	if ws, err := r.room.List(ctx, "llm"); err != nil || len(ws) != 0 {
		t.Errorf("parked records = %+v, %v; want none: the newer job looks again shortly", ws, err)
	}
	var back []fakes.VisibilityChange
	for _, v := range r.sqs.VisibilityChanges() {
		if v.ReceiptHandle == handle("newer", 1) {
			back = append(back, v)
		}
	}
	if len(back) == 0 || back[len(back)-1].Timeout > int32(2*retryDelay/time.Second) {
		t.Errorf("visibility changes of the newer job = %+v, want it back within %s", back, 2*retryDelay)
	}
}

// A stop refused for good (a role without states:StopExecution, a workflow's KMS key the starter may
// not use) parks the job as under the rule queue, instead of looking again every few seconds for
// the whole run of the older job; and a job whose older job stays bound for long (a copy the sweep
// must probe) parks after its quick looks.
func TestCancelParksWhenItCannotStopSoon(t *testing.T) {
	tests := []struct {
		name    string
		holder  holder
		stopErr error
		receive int
	}{
		{"stop refused: AccessDenied", holder{id: "old", key: "acme", lane: 1, status: lease.Starting, submitted: time.Minute},
			fakes.APIError("AccessDeniedException", "not authorized to perform: states:StopExecution"), 1},
		{"stop refused: the workflow's KMS key", holder{id: "old", key: "acme", lane: 1, status: lease.Starting, submitted: time.Minute},
			fakes.APIError("KmsAccessDeniedException", "access denied to the KMS key"), 1},
		{"older job bound past the quick looks", holder{id: "old", key: "acme", lane: 1, status: lease.Bound, submitted: time.Minute},
			nil, 13},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			r := newCancelRig(t, 1, config.OverflowCancel)
			tt.holder.put(t, r)
			r.sfn.OnStop = func(*sfn.StopExecutionInput) error { return tt.stopErr }
			resp, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{newest(t, "", tt.receive)}})
			if err != nil || !equal(failures(resp), sorted("msg-newest")) {
				t.Fatalf("Handle = %+v, %v; want the job held", resp, err)
			}
			ws, err := r.room.List(ctx, "llm")
			if err != nil || len(ws) != 1 || !ws[0].AtKeyCap {
				t.Errorf("parked records = %+v, %v; want the job parked at its key's cap", ws, err)
			}
		})
	}
}

// With caps for some keys only, the default key and keys not listed have no cap
// (docs/flow-control.md: the rule never acts for them): when the type's lanes are all taken by
// older running jobs of such a key and of the waiting job's sender, the rule cancel stops none of
// them (a full type is not a key at its cap); the job waits for a lane, as under the rule queue.
func TestCancelNeverActsForAKeyWithoutACap(t *testing.T) {
	for _, key := range []string{"", "zeta"} {
		t.Run("key "+key, func(t *testing.T) {
			ctx := context.Background()
			r := newCancelRig(t, 1, config.OverflowCancel)
			caps := keyCapsOnly{inner: r.st.Config, caps: map[string]int{"acme": 2}}
			r.st.Config = caps
			cfg, err := caps.Get(ctx, "llm")
			if err != nil || !cfg.Cancels() {
				t.Fatalf("config %+v, %v: want the rule cancel in force", cfg, err)
			}
			for ln := 1; ln <= 4; ln++ {
				holder{id: fmt.Sprintf("old-%d", ln), key: key, lane: ln, status: lease.Starting, submitted: time.Minute}.put(t, r)
			}
			j := job.Job{Type: "llm", ID: "newest", Key: key, Input: json.RawMessage(`{}`), SubmittedAt: submitted}
			b, _ := json.Marshal(j)
			if _, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{message(t, cfg.WaitingGroup(j), "newest", string(b), 1)}}); err != nil {
				t.Fatal(err)
			}
			noStops(t, r, "the key has no cap: a full type is not a key at its cap")
		})
	}
}
