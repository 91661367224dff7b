// Package tests is sfnlimit's end-to-end suite: each scenario starts its own local stack (moto, and
// fauxqs for the SQS-facing scenarios), drives it with real SDK clients as a producer would, and ends
// by checking the invariants from what the emulators recorded, never from the limiter's own
// bookkeeping:
//
//	(a) never more working executions of a type than its limit at any instant, and never two in one
//	    lane (work intervals from Step Functions: start to entering the release state);
//	(b) every submitted job either succeeded (an execution with its id SUCCEEDED), was dead-lettered
//	    with a reason, or was cancelled by a newer job of its key (overflow rule cancel: its last
//	    execution ABORTED with error sfnlimit.Cancelled, none after it), exactly one of the three, and
//	    none dead-lettered twice;
//	(c) no lease left in the table, bound or otherwise (a raw scan for pk "LEASE#...");
//	(d) the general and lanes queues drained (visible and in-flight counts 0);
//	(e) no park record left (a raw scan for pk "WAIT#..."), nor any lane count of the retired
//	    least-loaded strategy (pk "OCC#...").
package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sfnlimit/sfnlimit/internal/lambda/admission"
	"github.com/sfnlimit/sfnlimit/internal/lambda/app"
	"github.com/sfnlimit/sfnlimit/internal/lambda/batch"
	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	sfnjob "github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/lambda/metrics"
	"github.com/sfnlimit/sfnlimit/internal/tools/local/gateway"
	"github.com/sfnlimit/sfnlimit/internal/tools/local/observe"
	"github.com/sfnlimit/sfnlimit/internal/tools/local/stack"
)

// pollEvery is how often wait loops look again.
const pollEvery = 500 * time.Millisecond

// backend is the SQS emulator a scenario runs on.
type backend struct {
	name   string
	fauxqs bool
}

var (
	moto   = backend{name: "moto"}
	fauxqs = backend{name: "fauxqs", fauxqs: true}
	// sqsFacing are the backends of the scenarios whose point is SQS behaviour: fauxqs treats stale
	// receipt handles as AWS does, moto does not.
	sqsFacing = []backend{moto, fauxqs}
)

// forBackends runs one scenario per backend, each in parallel with the other scenarios.
func forBackends(t *testing.T, bs []backend, run func(t *testing.T, b backend)) {
	t.Parallel()
	for _, b := range bs {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			run(t, b)
		})
	}
}

// rigOptions shape one scenario's stack.
type rigOptions struct {
	backend backend
	// params are template parameters (TypeLimits, DefaultMaxAttempts, ...).
	params map[string]string
	// env overrides function environment variables on top of fastEnv.
	env map[string]string
	// noRuntime leaves the runtime stopped (the scenario starts it).
	noRuntime bool
	// eventDropRate is the share of status-change events never delivered (the sweep makes up for them).
	eventDropRate float64
	// eventDupRate is the share of status-change events delivered a second time.
	eventDupRate float64
	// bareTypes run on the bare sample workflow (no release state) in events mode, set by a live
	// config item before the runtime starts: "type" -> its limit is still TypeLimits'.
	bareTypes []string
	// faults are AWS's occasional faults that the gateway injects (nil: none). The rig's own clients,
	// which observe the stack from outside, are exempt (gateway.ObserverAppID).
	faults *gateway.Faults
	// duplicates is the share of event-source batches delivered a second time within dupWithin
	// (esm.Poller.SetDuplicates), on every poller.
	duplicates float64
	dupWithin  time.Duration
	// functionAWS adjusts each function's SDK configuration ("router", "starter", "releaser"), for
	// example to time its calls (stack.Options.FunctionAWSConfig).
	functionAWS func(function string, cfg *aws.Config)
}

// fastEnv makes the limiter's waits short enough for a test.
var fastEnv = map[string]string{"START_RETRY_SECONDS": "1", "SWEEP_MIN_AGE_SECONDS": "2"}

// runName is the execution name of j's attempt of redrive generation gen. A job is its type, sender,
// key and id: the router names every job's sender, here the principal of the emulator's one
// SenderId, whoever sent the job.
func (r *rig) runName(j job, gen, attempt int) string {
	return sfnjob.RunName(j.Type, r.sender(), j.Key, j.ID, gen, attempt)
}

// sender is the sender the router names every job with here: the principal of the emulator's one
// SenderId, whoever sent the job.
func (r *rig) sender() string { return sfnjob.Sender(batch.Principal(r.s.Info().SenderID), "") }

// rig is one scenario's running stack and what the scenario submitted.
type rig struct {
	t       *testing.T
	o       rigOptions
	s       *stack.Stack
	c       app.Clients
	logs    *logSink
	limits  map[string]int
	began   time.Time
	general string
	lanes   string
	dlq     string
	table   string
	sm      string
	bare    string   // the bare sample workflow (no release state)
	sms     []string // every state machine a scenario's jobs may run on: the sample first

	mu   sync.Mutex
	subs []*submission
	byID map[string]*submission // by type+"/"+id, for jobs that have an id
	dead []deadLetter           // drained from the dead-letter queue so far
}

// submission is one job a scenario sent, and what it expects of it.
type submission struct {
	Type, ID string
	// Body is the raw message body when the job has no usable id (bad input); dead letters are
	// matched to it by body.
	Body string
	// Want is "succeeded", "cancelled" or the reason of the dead letter the job must end with.
	Want string
	// Copies counts how often it was sent.
	Copies int
}

func (s *submission) key() string {
	if s.ID != "" {
		return s.Type + "/" + s.ID
	}
	return "body:" + s.Body
}

func (s *submission) String() string {
	if s.ID != "" {
		return s.Type + "/" + s.ID
	}
	b := s.Body
	if len(b) > 40 {
		b = b[:40] + fmt.Sprintf("...(%d bytes)", len(s.Body))
	}
	return fmt.Sprintf("raw %q", b)
}

const (
	wantSucceeded = "succeeded"
	// wantCancelled: the job is stopped by a newer job of its key (overflow rule cancel) and ends
	// there: its last execution ABORTED with error sfnlimit.Cancelled, no dead letter, no retry.
	wantCancelled = "cancelled"
	// wantSkipped: the job ends without running, its key at its cap with an older job of its sender
	// (overflow rule skip): no execution, no dead letter, its fate "skipped" in the table.
	wantSkipped = "skipped"
)

// deadLetter is one message taken from the dead-letter queue.
type deadLetter struct {
	Body  string
	Attrs map[string]string
	At    time.Time
}

// newRig starts a stack for one scenario and, unless told otherwise, its runtime. Everything is torn
// down when the test ends.
func newRig(t *testing.T, o rigOptions) *rig {
	t.Helper()
	ctx := t.Context()
	logs := newLogSink(t)
	env := map[string]string{}
	for k, v := range fastEnv {
		env[k] = v
	}
	for k, v := range o.env {
		env[k] = v
	}
	began := time.Now()
	s, err := stack.Start(ctx, stack.Options{
		Parameters: o.params, Log: logs.logger(), FunctionEnv: env,
		SweepEvery: 2 * time.Second, Fauxqs: o.backend.fauxqs, EmulatorLog: logs.emulatorWriter(), EventDropRate: o.eventDropRate, EventDupRate: o.eventDupRate,
		FunctionAWSConfig: o.functionAWS,
	})
	if err != nil {
		t.Fatalf("stack.Start() = %v", err)
	}
	t.Cleanup(func() {
		s.Close()
		logs.close()
	})
	r := &rig{
		t: t, o: o, s: s, c: s.Clients(), logs: logs, began: began, byID: map[string]*submission{},
		general: s.Info().Output("GeneralQueueUrl"), lanes: s.Info().Output("LanesQueueUrl"),
		dlq: s.Info().Output("DeadLetterQueueUrl"), table: s.Info().Output("TableName"),
		sm: s.Info().Output("SampleStateMachineArn"), bare: s.Info().Output("BareStateMachineArn"),
	}
	r.sms = []string{r.sm, r.bare}
	for _, v := range []string{r.general, r.lanes, r.dlq, r.table, r.sm, r.bare} {
		if v == "" {
			t.Fatalf("stack outputs lack a queue, table or state machine: %v", s.Info().Outputs)
		}
	}
	if o.faults != nil {
		cfg := s.AWSConfig(nil)
		cfg.AppID = gateway.ObserverAppID
		r.c = app.NewClients(cfg)
		s.Gateway().InjectFaults(o.faults)
	}
	if r.limits, err = parseLimits(o.params["TypeLimits"]); err != nil {
		t.Fatalf("TypeLimits: %v", err)
	}
	t.Logf("%s: stack up in %v", o.backend.name, time.Since(began).Round(time.Millisecond))
	store := config.NewDynamoStore(r.c.DDB, r.table)
	for _, typ := range o.bareTypes {
		if err := store.SetOverride(ctx, config.Override{Type: typ, StateMachineArn: r.bare, Release: config.ReleaseEvents}); err != nil {
			t.Fatalf("set type %s on the bare workflow in events mode: %v", typ, err)
		}
	}
	if !o.noRuntime {
		r.startRuntime()
	}
	return r
}

// parseLimits reads "a=2,b=3" (the test's own reading, not the limiter's).
func parseLimits(s string) (map[string]int, error) {
	out := map[string]int{}
	for _, part := range strings.Split(s, ",") {
		if part == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		n, err := strconv.Atoi(v)
		if !ok || err != nil {
			return nil, fmt.Errorf("%q is not type=number", part)
		}
		out[k] = n
	}
	return out, nil
}

func (r *rig) startRuntime() {
	r.t.Helper()
	if err := r.s.StartRuntime(r.t.Context()); err != nil {
		r.t.Fatalf("StartRuntime() = %v", err)
	}
	if r.o.duplicates > 0 {
		for _, p := range r.s.Runtime().Pollers {
			p.SetDuplicates(r.o.duplicates, r.o.dupWithin)
		}
	}
}

// job is a job a scenario submits through the general queue.
type job struct {
	Type  string
	ID    string
	Input any
	// Key is the job's concurrency key ("": none, the type's default key).
	Key string
	// Priority is the job's priority as a producer gives it ("low", "high", "7"; "": none, normal).
	Priority string
	// Want is the outcome the job must reach: wantSucceeded (default), wantCancelled or a
	// dead-letter reason.
	Want string
	// Batch is the job's batch ("": none); BatchSize, when not 0, opens it with that many jobs.
	Batch     string
	BatchSize int
}

// work is the sample workflow's input: wait seconds, then succeed or fail.
type work struct {
	Seconds   int    `json:"seconds"`
	Fail      bool   `json:"fail,omitempty"`
	FailCause string `json:"failCause,omitempty"`
}

// record notes a job as submitted (once per copy).
func (r *rig) record(typ, id, body, want string) {
	if want == "" {
		want = wantSucceeded
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	s := &submission{Type: typ, ID: id, Body: body, Want: want}
	if prev, ok := r.byID[s.key()]; ok {
		if prev.Want != want {
			r.t.Fatalf("job %s submitted twice with different expectations (%s, %s)", s, prev.Want, want)
		}
		prev.Copies++
		return
	}
	s.Copies = 1
	r.subs = append(r.subs, s)
	r.byID[s.key()] = s
}

// submit sends jobs to the general queue, ten per SendMessageBatch.
func (r *rig) submit(ctx context.Context, jobs ...job) {
	r.t.Helper()
	var bodies []string
	for _, j := range jobs {
		bodies = append(bodies, r.body(j))
		r.record(j.Type, j.ID, "", j.Want)
	}
	r.sendGeneral(ctx, bodies...)
}

// body is j's general-queue message body, as a producer writes it.
func (r *rig) body(j job) string {
	r.t.Helper()
	m := map[string]any{"type": j.Type, "id": j.ID, "input": withCanary(j.Input)}
	if j.Key != "" {
		m["key"] = j.Key
	}
	if j.Priority != "" {
		m["priority"] = j.Priority
	}
	if j.Batch != "" {
		m["batch"] = j.Batch
	}
	if j.BatchSize != 0 {
		m["batchSize"] = j.BatchSize
	}
	body, err := json.Marshal(m)
	if err != nil {
		r.t.Fatalf("encode job %s: %v", j.ID, err)
	}
	return string(body)
}

// inputCanary rides in every job's input; no log line of the limiter may ever contain it.
const inputCanary = "sfnlimit-canary-input-7f3a"

// withCanary adds the canary to a job input that is a JSON object.
func withCanary(in any) any {
	b, err := json.Marshal(in)
	if err != nil {
		return in
	}
	var m map[string]any
	if json.Unmarshal(b, &m) != nil || m == nil {
		return in
	}
	m["canary"] = inputCanary
	return m
}

// submitRaw sends one body as it is (bad input); the job must end dead-lettered with reason want,
// matched by its body.
func (r *rig) submitRaw(ctx context.Context, body, want string) {
	r.t.Helper()
	r.record("", "", body, want)
	r.sendGeneral(ctx, body)
}

func (r *rig) sendGeneral(ctx context.Context, bodies ...string) {
	r.t.Helper()
	for start := 0; start < len(bodies); start += 10 {
		var entries []sqstypes.SendMessageBatchRequestEntry
		for i, b := range bodies[start:min(start+10, len(bodies))] {
			entries = append(entries, sqstypes.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(b)})
		}
		out, err := r.c.SQS.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: &r.general, Entries: entries})
		if err != nil {
			r.t.Fatalf("SendMessageBatch(general queue) = %v", err)
		}
		if len(out.Failed) > 0 {
			r.t.Fatalf("SendMessageBatch(general queue): %d entries failed, first: %s %s", len(out.Failed),
				aws.ToString(out.Failed[0].Code), aws.ToString(out.Failed[0].Message))
		}
	}
}

// settled is what the emulators hold once a scenario is over.
type settled struct {
	xs    []observe.Execution
	end   time.Time
	byJob map[string][]observe.Execution // by type/id
	dead  map[string][]deadLetter        // by submission key
	// skipped counts the skipped fates (internal/lambda/admission) by type/id.
	skipped map[string]int
}

// state is one look at the stack while waiting for it to settle.
type state struct {
	queues  map[string][2]int // queue -> visible, in flight
	leases  []map[string]string
	running int
	pending []string // submissions with no outcome yet
	out     *settled
}

func (st state) quiet() bool {
	for _, q := range st.queues {
		if q[0] != 0 || q[1] != 0 {
			return false
		}
	}
	return len(st.leases) == 0 && st.running == 0
}

func (st state) String() string {
	var b strings.Builder
	names := make([]string, 0, len(st.queues))
	for n := range st.queues {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(&b, "%s queue: %d visible, %d in flight; ", n, st.queues[n][0], st.queues[n][1])
	}
	fmt.Fprintf(&b, "%d executions running; %d leases", st.running, len(st.leases))
	for i, l := range st.leases {
		if i == 10 {
			fmt.Fprintf(&b, " ...")
			break
		}
		fmt.Fprintf(&b, " [%s %s job %s attempt %s %s]", l["pk"], l["sk"], l["jobId"], l["attempt"], l["status"])
	}
	if st.out != nil {
		fmt.Fprintf(&b, "; %d jobs without an outcome (no SUCCEEDED or cancelled execution, no dead letter)", len(st.pending))
		for i, p := range st.pending {
			if i == 15 {
				b.WriteString(" ...")
				break
			}
			b.WriteString(" " + p)
		}
	}
	return b.String()
}

// settle waits, at most within, until every submitted job has an outcome, nothing runs, no lease is
// left and both queues are empty, seen twice in a row; then it returns what the emulators recorded.
func (r *rig) settle(ctx context.Context, within time.Duration) *settled {
	r.t.Helper()
	deadline := time.Now().Add(within)
	quietOnce := false
	var last state
	for {
		last = r.look(ctx)
		if last.quiet() && last.out != nil && len(last.pending) == 0 {
			if quietOnce {
				r.t.Logf("settled %v after the stack started", time.Since(r.began).Round(100*time.Millisecond))
				return last.out
			}
			quietOnce = true
		} else {
			quietOnce = false
		}
		if time.Now().After(deadline) {
			r.explain(ctx, &last)
			r.t.Fatalf("not settled within %v: %s", within, last)
		}
		select {
		case <-ctx.Done():
			r.t.Fatalf("scenario cancelled before it settled (%v): %s", ctx.Err(), last)
		case <-time.After(pollEvery):
		}
	}
}

// explain adds the jobs without an outcome to a snapshot that was not quiet enough to look for them.
func (r *rig) explain(ctx context.Context, st *state) {
	if st.out == nil {
		st.out = r.outcome(ctx)
		st.pending = r.pending(st.out)
	}
}

// look takes one snapshot; the execution records are only read once the cheap checks are quiet.
func (r *rig) look(ctx context.Context) state {
	r.t.Helper()
	st := state{queues: map[string][2]int{}}
	for name, url := range map[string]string{"general": r.general, "lanes": r.lanes} {
		st.queues[name] = r.queueCounts(ctx, url)
	}
	st.leases = r.leases(ctx)
	st.running = r.running(ctx)
	r.drainDLQ(ctx)
	if st.quiet() {
		st.out = r.outcome(ctx)
		st.pending = r.pending(st.out)
	}
	return st
}

func (r *rig) queueCounts(ctx context.Context, url string) [2]int {
	r.t.Helper()
	out, err := r.c.SQS.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: &url, AttributeNames: []sqstypes.QueueAttributeName{
		sqstypes.QueueAttributeNameApproximateNumberOfMessages, sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
	}})
	if err != nil {
		r.t.Fatalf("GetQueueAttributes(%s) = %v", url, err)
	}
	n := func(k sqstypes.QueueAttributeName) int {
		v, err := strconv.Atoi(out.Attributes[string(k)])
		if err != nil {
			r.t.Fatalf("queue %s attribute %s = %q", url, k, out.Attributes[string(k)])
		}
		return v
	}
	return [2]int{n(sqstypes.QueueAttributeNameApproximateNumberOfMessages), n(sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible)}
}

// leases scans the table for lease items itself (pk "LEASE#..."), as plain strings.
func (r *rig) leases(ctx context.Context) []map[string]string { return r.scan(ctx, "LEASE#") }

// parked scans the table for park records of waiting groups (pk "WAIT#...") and for lane counts of
// the retired least-loaded strategy (pk "OCC#..."), as plain strings.
func (r *rig) parked(ctx context.Context) []map[string]string {
	return append(r.scan(ctx, "WAIT#"), r.scan(ctx, "OCC#")...)
}

// scan reads the table's items whose pk starts with prefix, as plain strings.
func (r *rig) scan(ctx context.Context, prefix string) []map[string]string {
	r.t.Helper()
	var out []map[string]string
	p := dynamodb.NewScanPaginator(r.c.DDB, &dynamodb.ScanInput{
		TableName: &r.table, ConsistentRead: aws.Bool(true), FilterExpression: aws.String("begins_with(pk, :p)"),
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":p": &ddbtypes.AttributeValueMemberS{Value: prefix}},
	})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			r.t.Fatalf("scan table %s for %s items: %v", r.table, prefix, err)
		}
		for _, it := range page.Items {
			m := map[string]string{}
			for k, v := range it {
				switch v := v.(type) {
				case *ddbtypes.AttributeValueMemberS:
					m[k] = v.Value
				case *ddbtypes.AttributeValueMemberN:
					m[k] = v.Value
				case *ddbtypes.AttributeValueMemberBOOL:
					m[k] = strconv.FormatBool(v.Value)
				}
			}
			out = append(out, m)
		}
	}
	return out
}

func (r *rig) running(ctx context.Context) int {
	return len(r.runningArns(ctx))
}

func (r *rig) runningArns(ctx context.Context) []string {
	r.t.Helper()
	var arns []string
	for _, sm := range r.sms {
		p := sfn.NewListExecutionsPaginator(r.c.SFN, &sfn.ListExecutionsInput{StateMachineArn: aws.String(sm), StatusFilter: sfntypes.ExecutionStatusRunning})
		for p.HasMorePages() {
			page, err := p.NextPage(ctx)
			if err != nil {
				r.t.Fatalf("ListExecutions(RUNNING) = %v", err)
			}
			for _, e := range page.Executions {
				arns = append(arns, aws.ToString(e.ExecutionArn))
			}
		}
	}
	return arns
}

// runningJob returns the ARN of a running execution whose input names job typ/id, or "".
func (r *rig) runningJob(ctx context.Context, typ, id string) string {
	r.t.Helper()
	for _, arn := range r.runningArns(ctx) {
		d, err := r.c.SFN.DescribeExecution(ctx, &sfn.DescribeExecutionInput{ExecutionArn: aws.String(arn)})
		if err != nil {
			r.t.Fatalf("DescribeExecution(%s) = %v", arn, err)
		}
		var in struct {
			Job struct{ ID, Type string } `json:"job"`
		}
		_ = json.Unmarshal([]byte(aws.ToString(d.Input)), &in)
		if in.Job.Type == typ && in.Job.ID == id && d.Status == sfntypes.ExecutionStatusRunning {
			return arn
		}
	}
	return ""
}

// drainDLQ takes every message off the dead-letter queue and keeps it.
func (r *rig) drainDLQ(ctx context.Context) {
	r.t.Helper()
	for {
		out, err := r.c.SQS.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: &r.dlq, MaxNumberOfMessages: 10, MessageAttributeNames: []string{"All"}, VisibilityTimeout: 30,
		})
		if err != nil {
			r.t.Fatalf("ReceiveMessage(dead-letter queue) = %v", err)
		}
		if len(out.Messages) == 0 {
			return
		}
		for _, m := range out.Messages {
			d := deadLetter{Body: aws.ToString(m.Body), Attrs: map[string]string{}, At: time.Now()}
			for k, v := range m.MessageAttributes {
				d.Attrs[k] = aws.ToString(v.StringValue)
			}
			r.mu.Lock()
			r.dead = append(r.dead, d)
			r.mu.Unlock()
			if _, err := r.c.SQS.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: &r.dlq, ReceiptHandle: m.ReceiptHandle}); err != nil {
				r.t.Fatalf("DeleteMessage(dead-letter queue) = %v", err)
			}
		}
	}
}

// collect reads every execution as Step Functions recorded it.
func (r *rig) collect(ctx context.Context) []observe.Execution {
	r.t.Helper()
	xs, err := observe.Collect(ctx, r.c.SFN, r.sms)
	if err != nil {
		r.t.Fatalf("observe.Collect() = %v", err)
	}
	return xs
}

// outcome gathers the executions and dead letters by submission.
func (r *rig) outcome(ctx context.Context) *settled {
	r.t.Helper()
	out := &settled{xs: r.collect(ctx), end: time.Now(), byJob: map[string][]observe.Execution{}, dead: map[string][]deadLetter{}, skipped: map[string]int{}}
	for _, it := range r.scan(ctx, "ADMIT#") {
		// sk is sender/key/id/redrive/submitted (admission.Store).
		if parts := strings.Split(it["sk"], "/"); it["outcome"] == admission.Skipped && len(parts) == 5 {
			out.skipped[strings.TrimPrefix(it["pk"], "ADMIT#")+"/"+parts[2]]++
		}
	}
	for _, x := range out.xs {
		k := x.Job.Type + "/" + x.Job.ID
		out.byJob[k] = append(out.byJob[k], x)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, d := range r.dead {
		// A raw (bad) submission is known by its body, which its dead letter carries unchanged;
		// any other by the type and id the dead letter names.
		k := "body:" + d.Body
		if _, raw := r.byID[k]; !raw {
			k = d.Attrs["type"] + "/" + d.Attrs["jobId"]
		}
		out.dead[k] = append(out.dead[k], d)
	}
	return out
}

// pending lists the submissions with neither a SUCCEEDED execution, a cancelled one, a skipped
// fate nor a dead letter.
func (r *rig) pending(out *settled) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var p []string
	for _, s := range r.subs {
		xs := out.byJob[s.key()]
		if !succeeded(xs) && len(cancelledRuns(xs)) == 0 && len(out.dead[s.key()]) == 0 && out.skipped[s.key()] == 0 {
			p = append(p, s.String())
		}
	}
	return p
}

func succeeded(xs []observe.Execution) bool {
	for _, x := range xs {
		if x.Status == string(sfntypes.ExecutionStatusSucceeded) {
			return true
		}
	}
	return false
}

// cancelledRuns are the executions stopped by a newer job of their key (overflow rule cancel):
// ABORTED with error sfnlimit.Cancelled.
func cancelledRuns(xs []observe.Execution) []observe.Execution {
	var out []observe.Execution
	for _, x := range xs {
		if x.Status == string(sfntypes.ExecutionStatusAborted) && x.Error == sfnjob.ErrorCancelled {
			out = append(out, x)
		}
	}
	return out
}

// ranAfter lists the executions of xs that started after x.
func ranAfter(xs []observe.Execution, x observe.Execution) []observe.Execution {
	var out []observe.Execution
	for _, y := range xs {
		if y.Arn != x.Arn && y.Start.After(x.Start) {
			out = append(out, y)
		}
	}
	return out
}

// limitFunc gives a type's limit in force over [from, to): the most executions that may work at once
// in that window.
type limitFunc func(typ string) int

// checkInvariants checks (a)-(d) on a settled stack; limit gives each type's limit (nil: TypeLimits).
func (r *rig) checkInvariants(ctx context.Context, out *settled, limit limitFunc) {
	r.t.Helper()
	if limit == nil {
		limit = func(typ string) int { return r.limits[typ] }
	}
	// (a) Concurrency from Step Functions' records.
	peaks := observe.Peaks(out.xs, out.end)
	types := make([]string, 0, len(peaks))
	for typ := range peaks {
		types = append(types, typ)
	}
	sort.Strings(types)
	for _, typ := range types {
		p := peaks[typ]
		lim := limit(typ)
		r.t.Logf("type %s: peak %d working at once (at %s), limit %d, %d executions", typ, p.Max,
			p.At.Sub(r.began).Round(100*time.Millisecond), lim, count(out.xs, typ))
		if lim <= 0 {
			r.t.Errorf("type %s has executions but no limit: %d of them", typ, count(out.xs, typ))
		} else if p.Max > lim {
			r.t.Errorf("type %s: %d executions worked at once at %s, over its limit %d", typ, p.Max, p.At.Format(time.RFC3339Nano), lim)
		}
	}
	for _, o := range laneOverlaps(out.xs) {
		r.t.Errorf("two executions worked in one lane at once: %s", o)
	}
	for _, x := range out.xs {
		if x.WorkEnd.IsZero() || x.Status == string(sfntypes.ExecutionStatusRunning) {
			r.t.Errorf("execution %s is still %s after the stack settled", x.Name, x.Status)
		}
	}

	// (b) Each job succeeded, was dead-lettered with a reason, was cancelled or was skipped, exactly
	// one of them; a cancelled job never ran again, and a skipped job never ran.
	r.mu.Lock()
	subs := append([]*submission(nil), r.subs...)
	r.mu.Unlock()
	known := map[string]bool{}
	counts := map[string]int{}
	for _, s := range subs {
		k := s.key()
		known[k] = true
		ok, dead, cancels := succeeded(out.byJob[k]), out.dead[k], cancelledRuns(out.byJob[k])
		if skips := out.skipped[k]; skips > 0 {
			switch {
			case skips > 1:
				r.t.Errorf("job %s was skipped %d times", s, skips)
			case len(out.byJob[k]) > 0:
				r.t.Errorf("job %s was skipped and ran: %s", s, names(out.byJob[k]))
			case len(dead) > 0:
				r.t.Errorf("job %s was skipped and dead-lettered (reason %q)", s, dead[0].Attrs["reason"])
			}
		}
		for _, c := range cancels {
			if after := ranAfter(out.byJob[k], c); len(after) > 0 {
				r.t.Errorf("job %s ran again after it was cancelled (%s, cause %q): %s", s, c.Name, c.Cause, names(after))
			}
		}
		switch {
		case len(cancels) > 0 && ok:
			r.t.Errorf("job %s both succeeded and was cancelled (%s, cause %q)", s, cancels[0].Name, cancels[0].Cause)
		case len(cancels) > 0 && len(dead) > 0:
			r.t.Errorf("job %s both was cancelled (%s) and dead-lettered (reason %q)", s, cancels[0].Name, dead[0].Attrs["reason"])
		case ok && len(dead) > 0:
			r.t.Errorf("job %s both succeeded and was dead-lettered (reason %q)", s, dead[0].Attrs["reason"])
		case !ok && len(dead) == 0 && len(cancels) == 0 && out.skipped[k] == 0:
			r.t.Errorf("job %s neither succeeded, was cancelled, skipped nor dead-lettered; executions: %s", s, names(out.byJob[k]))
		case len(dead) > 1:
			r.t.Errorf("job %s was dead-lettered %d times, reasons %s", s, len(dead), reasons(dead))
		case len(dead) == 1 && dead[0].Attrs["reason"] == "":
			r.t.Errorf("job %s was dead-lettered without a reason (attributes %v)", s, dead[0].Attrs)
		}
		got := wantSucceeded
		switch {
		case !ok && len(dead) > 0:
			got = dead[0].Attrs["reason"]
		case !ok && len(cancels) > 0:
			got = wantCancelled
		case !ok && out.skipped[k] > 0:
			got = wantSkipped
		}
		counts[got]++
		if got != s.Want {
			r.t.Errorf("job %s ended %q, want %q (executions: %s)", s, got, s.Want, names(out.byJob[k]))
		}
	}
	for k, ds := range out.dead {
		if !known[k] {
			r.t.Errorf("dead letter for a job never submitted: key %.60q reasons %s", k, reasons(ds))
		}
	}
	for k, xs := range out.byJob {
		if !known[k] {
			r.t.Errorf("executions of a job never submitted: %s: %s", k, names(xs))
		}
	}
	r.t.Logf("%d jobs: %v; %d executions", len(subs), counts, len(out.xs))

	// (e) The metrics the functions published (CloudWatch embedded metric format, read back as
	// CloudWatch would) agree with what Step Functions and the queues recorded.
	r.checkMetrics(out, counts[wantSucceeded], counts[wantCancelled], counts[wantSkipped])

	// Logs name jobs and never carry their input.
	r.logs.mu.Lock()
	leaks := append([]string(nil), r.logs.leaks...)
	r.logs.mu.Unlock()
	for _, l := range leaks[:min(len(leaks), 3)] {
		r.t.Errorf("a log line carries a job's input: %s", l)
	}

	// (c) No lease left; (d) both queues drained; (e) no park record left.
	if ls := r.leases(ctx); len(ls) > 0 {
		r.t.Errorf("%d leases left: %v", len(ls), ls)
	}
	if ps := r.parked(ctx); len(ps) > 0 {
		r.t.Errorf("%d park records (or retired lane counts) left after every job ended: %v", len(ps), ps)
	}
	for name, url := range map[string]string{"general": r.general, "lanes": r.lanes} {
		if q := r.queueCounts(ctx, url); q != [2]int{} {
			r.t.Errorf("%s queue not drained: %d visible, %d in flight", name, q[0], q[1])
		}
	}
}

func (r *rig) checkMetrics(out *settled, succeededJobs, cancelledJobs, skippedJobs int) {
	r.t.Helper()
	m := r.s.Metrics()
	bySource := map[string]int{}
	for _, ds := range out.dead {
		for _, d := range ds {
			bySource[d.Attrs["source"]]++
		}
	}
	checks := []struct {
		metric string
		want   int
	}{
		{metrics.JobsSucceeded, succeededJobs},
		{metrics.JobsCancelled, cancelledJobs},
		{metrics.JobsSkipped, skippedJobs},
		{metrics.JobsDeadLettered, bySource["releaser"]},
		{metrics.JobsRejected, bySource["router"]},
		{metrics.JobsStarted, len(out.xs)},
	}
	for _, c := range checks {
		if got := m.Sum("", c.metric); got != float64(c.want) {
			r.t.Errorf("metric %s = %v, want %d (from the emulators' records)", c.metric, got, c.want)
		}
	}
	var samples int
	for typ := range r.limits {
		for _, v := range m.Samples(typ, metrics.StartLatency) {
			samples++
			if v < 0 {
				r.t.Errorf("metric StartLatency of type %s has a negative sample %v", typ, v)
			}
		}
	}
	if len(out.xs) > 0 && samples == 0 {
		r.t.Errorf("metric StartLatency has no samples, want one per job's first start")
	}
	r.t.Logf("metrics: %v", m.Totals())
}

func count(xs []observe.Execution, typ string) int {
	n := 0
	for _, x := range xs {
		if x.Job.Type == typ {
			n++
		}
	}
	return n
}

func names(xs []observe.Execution) string {
	if len(xs) == 0 {
		return "none"
	}
	var s []string
	for _, x := range xs {
		s = append(s, x.Name+" "+x.Status)
	}
	return strings.Join(s, ", ")
}

func reasons(ds []deadLetter) string {
	var s []string
	for _, d := range ds {
		s = append(s, strconv.Quote(d.Attrs["reason"]))
	}
	return strings.Join(s, ", ")
}

// laneOverlaps finds executions of one lane (type and lane from their input) whose work intervals
// overlap.
func laneOverlaps(xs []observe.Execution) []string {
	byLane := map[string][]observe.Execution{}
	for _, x := range xs {
		k := fmt.Sprintf("%s-%d", x.Job.Type, x.Job.Lane)
		byLane[k] = append(byLane[k], x)
	}
	var out []string
	for lane, l := range byLane {
		sort.Slice(l, func(i, j int) bool { return l[i].Start.Before(l[j].Start) })
		var prev *observe.Execution
		for i := range l {
			x := &l[i]
			if prev != nil && (prev.WorkEnd.IsZero() || x.Start.Before(prev.WorkEnd)) {
				out = append(out, fmt.Sprintf("lane %s: %s [%s, %s) and %s [%s, %s)", lane,
					prev.Name, stamp(prev.Start), stamp(prev.WorkEnd), x.Name, stamp(x.Start), stamp(x.WorkEnd)))
			}
			if prev == nil || (!prev.WorkEnd.IsZero() && (x.WorkEnd.IsZero() || x.WorkEnd.After(prev.WorkEnd))) {
				prev = x
			}
		}
	}
	sort.Strings(out)
	return out
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Format("15:04:05.000")
}

// peakIn is the most executions of typ working at one instant within [from, to).
func peakIn(xs []observe.Execution, typ string, from, to, now time.Time) (int, time.Time) {
	var clipped []observe.Execution
	for _, x := range xs {
		if x.Job.Type != typ {
			continue
		}
		end := x.WorkEnd
		if end.IsZero() {
			end = now
		}
		s, e := x.Start, end
		if s.Before(from) {
			s = from
		}
		if e.After(to) {
			e = to
		}
		if s.Before(e) {
			y := x
			y.Start, y.WorkEnd = s, e
			clipped = append(clipped, y)
		}
	}
	p := observe.Peaks(clipped, now)[typ]
	return p.Max, p.At
}

// overrun is how far behind this run's stack was, measured on the run itself: the longest time an
// execution that succeeded worked beyond its seconds of work (its Wait state's overrun and the way
// into its Release state), over the executions pick selects with the seconds of work each was
// given. On a quiet machine it is a fraction of a second; on a busy one seconds. Timing bounds
// that must exist add it to their fixed part, so that they move with the machine, not with a
// guess of its load.
func overrun(xs []observe.Execution, pick func(observe.Execution) (seconds int, ok bool)) time.Duration {
	var worst time.Duration
	for _, x := range xs {
		secs, ok := pick(x)
		if !ok || x.Status != string(sfntypes.ExecutionStatusSucceeded) || x.WorkEnd.IsZero() {
			continue
		}
		worst = max(worst, x.WorkEnd.Sub(x.Start)-time.Duration(secs)*time.Second)
	}
	return worst
}

// waitFor polls cond every pollEvery until it holds, failing the test after within with what cond
// says is still pending.
func (r *rig) waitFor(ctx context.Context, within time.Duration, what string, cond func() (bool, string)) {
	r.t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, pending := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("%s: not within %v; still pending: %s", what, within, pending)
		}
		select {
		case <-ctx.Done():
			r.t.Fatalf("%s: cancelled (%v); still pending: %s", what, ctx.Err(), pending)
		case <-time.After(pollEvery):
		}
	}
}

// logSink keeps the stack's logs: the last lines for a failing test's report, counts of messages for
// checks that a scenario exercised what it claims, and everything in a file when SFNLIMIT_E2E_LOGS
// names a directory.
type logSink struct {
	t      *testing.T
	mu     sync.Mutex
	ring   []string
	next   int
	full   bool
	counts map[string]int
	file   *os.File
	// leaks are log lines that carried a job's input (the canary).
	leaks []string
	// events are the records of timedMessages, in the order they were logged.
	events []logEvent
}

// timedMessages are the log messages whose records a scenario may read back with their times
// (logSink.eventsOf): evidence of when the limiter did something, for tolerances measured on the
// run itself, never for an invariant.
var timedMessages = map[string]bool{
	"started":                           true, // the starter, after StartExecution answered
	"bound to a free lane":              true, // the starter, after a bind sent the job to its lane
	"woke a parked job for a free lane": true, // a release
}

// logEvent is one record of a timed message: when it was logged and the job it names (jobId, or a
// release's parkedJobId).
type logEvent struct {
	Msg, Type, JobID string
	At               time.Time
}

const ringLines = 400

func newLogSink(t *testing.T) *logSink {
	l := &logSink{t: t, ring: make([]string, ringLines), counts: map[string]int{}}
	if dir := os.Getenv("SFNLIMIT_E2E_LOGS"); dir != "" {
		name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name()) + ".log"
		if err := os.MkdirAll(dir, 0o755); err == nil {
			if f, err := os.Create(filepath.Join(dir, name)); err == nil {
				l.file = f
			}
		}
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("last lines of the stack's log:\n%s", l.tail())
		}
	})
	return l
}

func (l *logSink) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range strings.SplitAfter(string(p), "\n") {
		if line == "" {
			continue
		}
		if strings.Contains(line, inputCanary) {
			l.leaks = append(l.leaks, line)
		}
		l.ring[l.next] = line
		l.next = (l.next + 1) % len(l.ring)
		if l.next == 0 {
			l.full = true
		}
	}
	if l.file != nil {
		_, _ = l.file.Write(p)
	}
	return len(p), nil
}

func (l *logSink) tail() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	if l.full {
		for _, s := range l.ring[l.next:] {
			b.WriteString(s)
		}
	}
	for _, s := range l.ring[:l.next] {
		b.WriteString(s)
	}
	return b.String()
}

// count returns how often a message containing part was logged. Only used for evidence that a
// scenario exercised the path it is about, never for an invariant.
func (l *logSink) count(part string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for msg, c := range l.counts {
		if strings.Contains(msg, part) {
			n += c
		}
	}
	return n
}

func (l *logSink) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.file != nil {
		_ = l.file.Close()
		l.file = nil
	}
}

func (l *logSink) logger() *slog.Logger {
	return slog.New(countingHandler{sink: l, inner: slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelInfo})})
}

// emulatorWriter receives the emulators' output: only into the file, when there is one.
func (l *logSink) emulatorWriter() io.Writer {
	if l.file == nil {
		return nil
	}
	return writerFunc(func(p []byte) (int, error) {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.file != nil {
			_, _ = l.file.Write(append([]byte("emulator: "), bytes.TrimRight(p, "\n")...))
			_, _ = l.file.Write([]byte("\n"))
		}
		return len(p), nil
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// countingHandler counts each record's message before handing it on.
type countingHandler struct {
	sink  *logSink
	inner slog.Handler
	// attrs are the attributes the logger was given (With), where a record's job is named.
	attrs []slog.Attr
}

func (h countingHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.inner.Enabled(ctx, l)
}

func (h countingHandler) Handle(ctx context.Context, r slog.Record) error {
	h.sink.mu.Lock()
	h.sink.counts[r.Message]++
	if timedMessages[r.Message] {
		e := logEvent{Msg: r.Message, At: r.Time}
		see := func(a slog.Attr) bool {
			switch a.Key {
			case "jobId", "parkedJobId":
				e.JobID = a.Value.String()
			case "type":
				e.Type = a.Value.String()
			}
			return true
		}
		for _, a := range h.attrs {
			see(a)
		}
		r.Attrs(see)
		h.sink.events = append(h.sink.events, e)
	}
	h.sink.mu.Unlock()
	return h.inner.Handle(ctx, r)
}

func (h countingHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return countingHandler{sink: h.sink, inner: h.inner.WithAttrs(as), attrs: append(append([]slog.Attr(nil), h.attrs...), as...)}
}

func (h countingHandler) WithGroup(name string) slog.Handler {
	return countingHandler{sink: h.sink, inner: h.inner.WithGroup(name), attrs: h.attrs}
}

// eventsOf returns the records of a timed message (timedMessages) so far.
func (l *logSink) eventsOf(msg string) []logEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []logEvent
	for _, e := range l.events {
		if e.Msg == msg {
			out = append(out, e)
		}
	}
	return out
}
