package starter_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sfnlimit/sfnlimit/internal/lambda/deadletter"
	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lane"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
	"github.com/sfnlimit/sfnlimit/internal/lambda/releaser"
	"github.com/sfnlimit/sfnlimit/internal/lambda/router"
	"github.com/sfnlimit/sfnlimit/internal/lambda/sqsbatch"
	"github.com/sfnlimit/sfnlimit/internal/lambda/starter"
	"github.com/sfnlimit/sfnlimit/internal/tools/fakes"
)

// fifoLanes is the lanes queue as SQS runs it (template.yaml: DeduplicationScope messageGroup): a
// message whose MessageDeduplicationId was sent to its group within the last five minutes is
// accepted and not enqueued, even when the first copy was deleted since ("Amazon SQS continues
// tracking the deduplication ID even after the message has been received and deleted", SQS
// Developer Guide, FIFO queue key terms). The router sends to it; the starter's copies (binds,
// moves) are taken from the fake SQS by sync.
type fifoLanes struct {
	now    func() time.Time
	seen   map[[2]string]time.Time
	queued []fakes.SentMessage
	synced int // the starter's sends already taken
}

func (q *fifoLanes) add(m fakes.SentMessage) {
	k := [2]string{m.MessageGroupID, m.MessageDeduplicationID}
	if at, ok := q.seen[k]; ok && q.now().Sub(at) < 5*time.Minute {
		return // accepted, not enqueued
	}
	q.seen[k] = q.now()
	q.queued = append(q.queued, m)
}

func (q *fifoLanes) Send(_ context.Context, entries []sqstypes.SendMessageBatchRequestEntry) ([]sqsbatch.Failure, error) {
	for _, e := range entries {
		q.add(fakes.SentMessage{QueueURL: lanesURL, Body: aws.ToString(e.MessageBody),
			MessageGroupID: aws.ToString(e.MessageGroupId), MessageDeduplicationID: aws.ToString(e.MessageDeduplicationId)})
	}
	return nil, nil
}

// sync enqueues what the starter sent to the lanes queue since the last sync.
func (q *fifoLanes) sync(f *fakes.SQS) {
	sent := f.Sent(lanesURL)
	for _, m := range sent[q.synced:] {
		if m.Err == nil {
			q.add(m)
		}
	}
	q.synced = len(sent)
}

// The user's scenario from issue 10: `config set llm --limit 4`, a job whose attempt 1 failed,
// `config reset llm` (the starter dead-letters it unknown_type), `config set llm --limit 4` and
// `dlq redrive` 30 s later. The redriven job must be enqueued (not dropped by SQS deduplication as
// the first routing's copy) and run under fresh execution names (not dropped as a duplicate of its
// failed attempt 1). With one lane, or first-free's one waiting group, the redriven job is sent to
// the group its first run was sent to, so only its deduplication id tells them apart.
func TestRedriveOfStarterDeadLetterRunsAgain(t *testing.T) {
	tests := []struct {
		strategy string
		limit    int
	}{
		{lane.Random, 4}, {lane.FirstFree, 4},
		{lane.Random, 1}, {lane.FirstFree, 1},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s limit %d", tt.strategy, tt.limit), func(t *testing.T) {
			r := newRigStrategy(t, map[string]int{"llm": tt.limit}, tt.strategy)
			ctx := context.Background()
			cfg := &switchableConfig{inner: r.st.Config, gone: map[string]bool{}}
			r.st.Config = cfg
			lanes := &fifoLanes{now: r.clock.Now, seen: map[[2]string]time.Time{}}
			rt := &router.Router{Config: cfg, Lanes: lane.Hashed{}, Lanesq: lanes,
				DLQ: deadletter.New(r.sqs, dlqURL), Log: fakes.Logger(t)}
			route := func(msgID, body string) {
				t.Helper()
				resp, err := rt.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{{
					MessageId: msgID, Body: body,
					Attributes: map[string]string{"SentTimestamp": strconv.FormatInt(r.clock.Now().UnixMilli(), 10)},
				}}})
				if err != nil || len(resp.BatchItemFailures) != 0 {
					t.Fatalf("route %s: failures %v, error %v", body, resp.BatchItemFailures, err)
				}
			}
			// deliver hands the n-th lanes-queue message to the starter (its receive-th delivery).
			deliver := func(n, receive int) (events.SQSEventResponse, events.SQSMessage) {
				e := lanes.queued[n]
				m := message(t, e.MessageGroupID, "j1", e.Body, receive)
				m.MessageId = "lanes-msg-" + strconv.Itoa(n)
				m.ReceiptHandle = handle("j1-"+strconv.Itoa(n), receive)
				resp, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{m}})
				if err != nil {
					t.Fatal(err)
				}
				lanes.sync(r.sqs)
				return resp, m
			}
			// run delivers queued messages from n on until one starts an execution named name; it
			// returns that message's index.
			run := func(n int, name string) int {
				t.Helper()
				arn := fakes.ExecutionArn(smArn, name)
				for ; n < len(lanes.queued); n++ {
					deliver(n, 1)
					if _, ok := r.sfn.Execution(arn); ok {
						return n
					}
				}
				t.Fatalf("execution %s not started; starts %v", name, startNames(r.sfn))
				return 0
			}

			route("gen-1", `{"type":"llm","id":"j1","input":{"prompt":"hi"}}`)
			if len(lanes.queued) != 1 {
				t.Fatalf("routed job: %d lanes messages, want 1", len(lanes.queued))
			}
			n := run(0, job.RunName("llm", "", "", "j1", 0, 1))
			_, ln, _ := job.ParseGroupID(lanes.queued[n].MessageGroupID)
			key := lease.Key{Type: "llm", Lane: ln}

			// Attempt 1 fails: the lane keeps the job for attempt 2.
			r.sfn.Close(fakes.ExecutionArn(smArn, job.RunName("llm", "", "", "j1", 0, 1)), sfntypes.ExecutionStatusFailed, "JobFailed", "boom")
			res, err := r.rel.Release(ctx, releaser.Request{Key: key, JobID: "j1", Attempt: 1, Outcome: releaser.Failed, Error: "JobFailed", Source: "workflow"})
			if err != nil || res != releaser.Retried {
				t.Fatalf("release of failed attempt 1 = %s, %v; want retried", res, err)
			}

			// config reset llm: the next delivery is dead-lettered unknown_type.
			cfg.set("llm", true)
			r.clock.Advance(10 * time.Second)
			if resp, _ := deliver(n, 2); len(resp.BatchItemFailures) != 0 {
				t.Fatalf("unknown type's job held, want it dead-lettered and acknowledged")
			}
			dead := r.sqs.Sent(dlqURL)
			if len(dead) != 1 || dead[0].Attributes[deadletter.AttrReason] != string(job.ReasonUnknownType) {
				t.Fatalf("dead letters = %+v, want one unknown_type", dead)
			}
			var sub job.Submission
			if err := json.Unmarshal([]byte(dead[0].Body), &sub); err != nil || sub.Redrive != 1 {
				t.Errorf("dead letter body %s: redrive %d (%v), want 1: attempt 1 ran under generation 0's names", dead[0].Body, sub.Redrive, err)
			}

			// config set llm; dlq redrive --type llm, 30 s later: well within SQS's five-minute
			// deduplication interval of the first routing.
			cfg.set("llm", false)
			r.clock.Advance(30 * time.Second)
			before := len(lanes.queued)
			route("redrive-1", dead[0].Body)
			if len(lanes.queued) != before+1 {
				t.Fatalf("redriven job was accepted by SQS and not enqueued: its deduplication id %q was sent to group %s 40s before",
					lanes.queued[0].MessageDeduplicationID, lanes.queued[0].MessageGroupID)
			}
			run(before, job.RunName("llm", "", "", "j1", sub.Redrive, 1))
		})
	}
}

// Every dead letter the starter writes for a job carries the next redrive generation, as the
// releaser's do: whatever ran under this generation's names (attempts before the refusal, a start
// whose answer was lost) stays out of the redriven run's way, and SQS does not take the redriven
// job for a copy of this run.
func TestStarterDeadLettersCarryTheNextGeneration(t *testing.T) {
	waitingBody := func(redrive int) string {
		b, _ := json.Marshal(job.Job{Type: "gone", ID: "g-1", Input: json.RawMessage(`{}`), SubmittedAt: submitted, Redrive: redrive})
		return string(b)
	}
	redriven := func(typ, id string, attempts, redrive int) string {
		b, _ := json.Marshal(job.Job{Type: typ, ID: id, Input: json.RawMessage(`{"seconds":3}`), SubmittedAt: submitted, Attempts: attempts, Redrive: redrive})
		return string(b)
	}
	tests := []struct {
		name       string
		setup      func(r *rig)
		msg        func(t *testing.T) events.SQSMessage
		wantReason string
		wantGen    int
	}{
		{
			name: "unknown type, never started",
			msg: func(t *testing.T) events.SQSMessage {
				return message(t, "gone-1", "g-1", redriven("gone", "g-1", 0, 0), 1)
			},
			wantReason: string(job.ReasonUnknownType), wantGen: 1,
		},
		{
			name: "unknown type, moved after attempts, redriven twice before",
			msg: func(t *testing.T) events.SQSMessage {
				return message(t, "gone-2", "g-1", redriven("gone", "g-1", 2, 2), 1)
			},
			wantReason: string(job.ReasonUnknownType), wantGen: 3,
		},
		{
			name: "unknown type, retrying after a failed attempt",
			setup: func(r *rig) {
				l := leaseOf("gone", 1, "g-1", 1, lease.Retrying, 1)
				r.leases.Set(l)
			},
			msg: func(t *testing.T) events.SQSMessage {
				return message(t, "gone-1", "g-1", redriven("gone", "g-1", 0, 0), 2)
			},
			wantReason: string(job.ReasonUnknownType), wantGen: 1,
		},
		{
			name:       "unknown type, waiting in a first-free group",
			msg:        func(t *testing.T) events.SQSMessage { return message(t, "gone-0", "g-1", waitingBody(4), 1) },
			wantReason: string(job.ReasonUnknownType), wantGen: 5,
		},
		{
			name: "state machine refused the start",
			setup: func(r *rig) {
				r.sfn.OnStart = func(*sfn.StartExecutionInput) error {
					return &sfntypes.StateMachineDoesNotExist{Message: aws.String("State Machine Does Not Exist")}
				}
			},
			msg: func(t *testing.T) events.SQSMessage {
				return message(t, "reports-1", "r-1", redriven("reports", "r-1", 0, 1), 1)
			},
			wantReason: starter.ReasonStartRefused, wantGen: 2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, nil)
			if tt.setup != nil {
				tt.setup(r)
			}
			resp, err := r.st.Handle(context.Background(), events.SQSEvent{Records: []events.SQSMessage{tt.msg(t)}})
			if err != nil || len(resp.BatchItemFailures) != 0 {
				t.Fatalf("Handle: failures %v, error %v; want the job dead-lettered and acknowledged", resp.BatchItemFailures, err)
			}
			dead := r.sqs.Sent(dlqURL)
			if len(dead) != 1 || dead[0].Attributes[deadletter.AttrReason] != tt.wantReason {
				t.Fatalf("dead letters = %+v, want one %s", dead, tt.wantReason)
			}
			j, err := job.Parse([]byte(dead[0].Body), "redrive-msg", submitted) // as the router reads a redrive
			if err != nil {
				t.Fatalf("dead letter body %s does not parse as a job: %v", dead[0].Body, err)
			}
			if j.Redrive != tt.wantGen {
				t.Errorf("dead letter body %s: redrive %d, want %d", dead[0].Body, j.Redrive, tt.wantGen)
			}
		})
	}
}

// A job dead-lettered after its attempts and redriven as its dead letter's body runs again, under
// names its first run did not take.
func TestRedrivenDeadLetterRunsAgain(t *testing.T) {
	r := newRig(t, nil)
	ctx := context.Background()
	for a := 1; a <= 3; a++ {
		r.sfn.Put(execution("reports", 1, "r-1001", a, sfntypes.ExecutionStatusFailed, "JobFailed", "boom"))
	}
	r.leases.Set(leaseOf("reports", 1, "r-1001", 3, lease.Starting, 3))
	r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{jobMessage(t, "reports", 1, "r-1001", 0, 4)}}) // dead-lettered
	dead := r.sqs.Sent(dlqURL)
	if len(dead) != 1 {
		t.Fatalf("dead letters = %d, want 1", len(dead))
	}
	j, err := job.Parse([]byte(dead[0].Body), "redrive-msg", submitted) // redrive through the router
	if err != nil {
		t.Fatalf("dead letter body %s does not parse as a job: %v", dead[0].Body, err)
	}
	ln, _ := lane.Hashed{}.Choose(ctx, j, 3)
	body, _ := json.Marshal(j)
	before := len(r.sfn.Executions())
	r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{message(t, job.GroupID("reports", ln), "r-1001", string(body), 1)}})
	if got := len(r.sfn.Executions()); got != before+1 {
		t.Errorf("redriven job: executions %d -> %d, want one new execution", before, got)
	}
}

// A keyed job the starter dead-letters (here its type lost its limit while it waited: unknown_type,
// which `config reset` advises to redrive once the type has a limit again) must keep its key in the
// dead letter's body, which is redriven unchanged: without it the job comes back under the default
// key, outside its tenant's cap.
func TestStarterDeadLetterKeepsTheJobsKey(t *testing.T) {
	r := newKeyRig(t)
	b, _ := json.Marshal(job.Job{Type: "gone", ID: "g-1", Key: "acme", Input: json.RawMessage(`{}`), SubmittedAt: submitted})
	m := message(t, job.KeyGroupID("gone", "acme"), "g-1", string(b), 1)
	if _, err := r.st.Handle(context.Background(), events.SQSEvent{Records: []events.SQSMessage{m}}); err != nil {
		t.Fatal(err)
	}
	checkDLQ(t, r.sqs, []dead{{Reason: string(job.ReasonUnknownType), JobID: "g-1"}})
	got := r.sqs.Sent(dlqURL)
	if len(got) != 1 {
		t.Fatalf("dead letters = %+v", got)
	}
	var s job.Submission
	if err := json.Unmarshal([]byte(got[0].Body), &s); err != nil || s.Key != "acme" {
		t.Errorf("dead letter body = %s, want it to keep the job's key \"acme\"", got[0].Body)
	}
}
