package router_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sfnlimit/sfnlimit/internal/lambda/unlisted"
	"github.com/sfnlimit/sfnlimit/internal/tools/fakes"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/lambda/deadletter"
	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lane"
	"github.com/sfnlimit/sfnlimit/internal/lambda/router"
	"github.com/sfnlimit/sfnlimit/internal/lambda/sqsbatch"
)

// Message ids of the fixtures.
const (
	goodPayments = "2e1424d4-f796-459a-8184-9c92662be6da" // payments, id order-1
	goodReports  = "3b8f8a2c-51a6-4d5e-9b7f-1c2d3e4f5a6b" // reports, no id
	goodReportsR = "c0ffee00-1234-4abc-8def-001122334455" // reports, id r:2024.02, input null
	goodAdhoc    = "d15ea5e0-0000-4000-8000-00000000abcd" // adhoc (fallback limit), id x-1

	mixedGood1      = "a1000000-0000-4000-8000-000000000001" // payments order-2
	mixedNotJSON    = "a1000000-0000-4000-8000-000000000002"
	mixedNoType     = "a1000000-0000-4000-8000-000000000003"
	mixedUnknown    = "a1000000-0000-4000-8000-000000000004" // type nope
	mixedTooLarge   = "a1000000-0000-4000-8000-000000000005" // reports j-5
	mixedGood2      = "a1000000-0000-4000-8000-000000000006" // reports j-6
	mixedInvalidID  = "a1000000-0000-4000-8000-000000000007"
	mixedInvalidTyp = "a1000000-0000-4000-8000-000000000008"
)

func loadEvent(t *testing.T, name string) events.SQSEvent {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatalf("read fixture: %v", err)
	}
	var ev events.SQSEvent
	if err := json.Unmarshal(b, &ev); err != nil {
		t.Fatalf("decode fixture %s: %v", name, err)
	}
	return ev
}

// fakeConfig answers Get from a table of limits; types in unknown get ErrUnknownType, types in broken
// get a store error.
type fakeConfig struct {
	limits map[string]int
	broken map[string]bool
	// strategy of each type ("" is random for the router)
	strategy map[string]string
	// fallback is the limit of any other type (0: unknown)
	fallback int
}

var errStoreDown = errors.New("read live config: dynamodb unreachable")

func (f *fakeConfig) Get(_ context.Context, typ string) (config.TypeConfig, error) {
	if f.broken[typ] {
		return config.TypeConfig{}, errStoreDown
	}
	n, ok := f.limits[typ]
	if !ok && f.fallback > 0 {
		return config.TypeConfig{Type: typ, Limit: f.fallback, MaxAttempts: 3, Source: config.SourceFallback, Strategy: f.strategy[typ]}, nil
	}
	if !ok {
		return config.TypeConfig{}, fmt.Errorf("type %s: %w", typ, config.ErrUnknownType)
	}
	return config.TypeConfig{Type: typ, Limit: n, MaxAttempts: 3, Source: "default", Strategy: f.strategy[typ]}, nil
}

var limits = map[string]int{"payments": 3, "reports": 1, "adhoc": 5}

// fakeSender records the entries it is asked to send and fails those whose job id is in fail.
type fakeSender struct {
	mu      sync.Mutex
	calls   [][]types.SendMessageBatchRequestEntry
	fail    map[string]bool // job ids
	failAll bool
	err     error
}

func (f *fakeSender) Send(_ context.Context, entries []types.SendMessageBatchRequestEntry) ([]sqsbatch.Failure, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, entries)
	var failed []sqsbatch.Failure
	for _, e := range entries {
		var body struct{ ID string }
		_ = json.Unmarshal([]byte(aws.ToString(e.MessageBody)), &body)
		if f.failAll || f.fail[body.ID] {
			failed = append(failed, sqsbatch.Failure{ID: aws.ToString(e.Id), Code: "InternalError", Message: "try again"})
		}
	}
	return failed, f.err
}

func (f *fakeSender) entries() []types.SendMessageBatchRequestEntry {
	var out []types.SendMessageBatchRequestEntry
	for _, c := range f.calls {
		out = append(out, c...)
	}
	return out
}

// fakeDLQ records dead letters and fails those whose reason is in fail.
type fakeDLQ struct {
	mu   sync.Mutex
	sent []deadletter.Entry
	fail map[string]bool // reasons
}

func (f *fakeDLQ) Send(_ context.Context, e deadletter.Entry) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail[e.Reason] {
		return errors.New("dead-letter queue unreachable")
	}
	f.sent = append(f.sent, e)
	return nil
}

func newRouter(cfg *fakeConfig, s *fakeSender, d *fakeDLQ, log *slog.Logger) *router.Router {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &router.Router{Config: cfg, Lanes: lane.Hashed{}, Lanesq: s, DLQ: d, Log: log}
}

// lanesBody is the lanes-queue message body as the starter reads it.
type lanesBody struct {
	Type        string          `json:"type"`
	ID          string          `json:"id"`
	Input       json.RawMessage `json:"input"`
	SubmittedAt string          `json:"submittedAt"`
	Attempt     int             `json:"attempt"`
}

type wantSent struct {
	typ, id, input string
	sentMs         int64
	dedup          string
}

func checkSent(t *testing.T, got []types.SendMessageBatchRequestEntry, want []wantSent) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("sent %d entries, want %d", len(got), len(want))
	}
	seenIDs := map[string]bool{}
	for i, e := range got {
		w := want[i]
		if id := aws.ToString(e.Id); id == "" || seenIDs[id] {
			t.Errorf("entry %d Id = %q, want a unique non-empty id", i, id)
		} else {
			seenIDs[id] = true
		}
		var b lanesBody
		if err := json.Unmarshal([]byte(aws.ToString(e.MessageBody)), &b); err != nil {
			t.Fatalf("entry %d body %q is not JSON: %v", i, aws.ToString(e.MessageBody), err)
		}
		if b.Type != w.typ || b.ID != w.id || string(b.Input) != w.input || b.Attempt != 0 {
			t.Errorf("entry %d body = %s, want type %q id %q input %s attempt 0", i, aws.ToString(e.MessageBody), w.typ, w.id, w.input)
		}
		at, err := time.Parse(time.RFC3339Nano, b.SubmittedAt)
		if err != nil || !at.Equal(time.UnixMilli(w.sentMs)) {
			t.Errorf("entry %d submittedAt = %q (%v), want RFC 3339 of SentTimestamp %d (%v)", i, b.SubmittedAt, err, w.sentMs, time.UnixMilli(w.sentMs).UTC())
		}
		g := aws.ToString(e.MessageGroupId)
		prefix := w.typ + "-"
		ln, err := strconv.Atoi(strings.TrimPrefix(g, prefix))
		if !strings.HasPrefix(g, prefix) || err != nil || ln < 1 || ln > limits[w.typ] {
			t.Errorf("entry %d MessageGroupId = %q, want %q followed by a lane in 1..%d", i, g, prefix, limits[w.typ])
		}
		if d := aws.ToString(e.MessageDeduplicationId); d != w.dedup {
			t.Errorf("entry %d MessageDeduplicationId = %q, want %q", i, d, w.dedup)
		}
	}
}

var goodWant = []wantSent{
	{typ: "payments", id: "order-1", input: `{"amount":10,"card":"SECRET-4111"}`, sentMs: 1709978400123, dedup: "payments-order-1~sAIDAIENQZJOLO23YVJ4VO"},
	{typ: "reports", id: goodReports, input: `{"month":"2024-02"}`, sentMs: 1709978401000, dedup: "reports-" + goodReports + "~sAIDAIENQZJOLO23YVJ4VO"},
	{typ: "reports", id: "r:2024.02", input: `{}`, sentMs: 1709978402500, dedup: "reports-r:2024.02~sAIDAIENQZJOLO23YVJ4VO"},
	{typ: "adhoc", id: "x-1", input: `{}`, sentMs: 1709978403999, dedup: "adhoc-x-1~sAIDAIENQZJOLO23YVJ4VO"},
}

func TestHandleGoodBatch(t *testing.T) {
	ev := loadEvent(t, "sqs-good-batch.json")
	sender, dlq := &fakeSender{}, &fakeDLQ{}
	resp, err := newRouter(&fakeConfig{limits: limits}, sender, dlq, nil).Handle(context.Background(), ev)
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("Handle(good batch) = %+v, %v, want no failures", resp, err)
	}
	if len(dlq.sent) != 0 {
		t.Errorf("dead-lettered %+v, want nothing", dlq.sent)
	}
	if len(sender.calls) != 1 {
		t.Errorf("Send called %d times, want once for the batch", len(sender.calls))
	}
	got := sender.entries()
	checkSent(t, got, goodWant)
	// reports has limit 1: its only lane is 1.
	for _, e := range got {
		if strings.HasPrefix(aws.ToString(e.MessageGroupId), "reports-") && aws.ToString(e.MessageGroupId) != "reports-1" {
			t.Errorf("reports job MessageGroupId = %q, want reports-1 (limit 1)", aws.ToString(e.MessageGroupId))
		}
	}
}

// A producer cannot forge the sweep's probe of a lane (job.Probe), which frees another job's bound
// lane: the router sends a job's own fields only, so whatever a body adds beside them (in any case)
// or inside its input never reaches the lanes queue as a probe, and a body that is only a probe is
// no job.
func TestProducerCannotSendALaneProbe(t *testing.T) {
	probe := `{"jobId":"victim","updatedAt":1709978400123000000}`
	ev := loadEvent(t, "sqs-good-batch.json")
	bodies := []string{
		`{"laneProbe":` + probe + `}`,
		`{"type":"payments","id":"p-1","laneProbe":` + probe + `}`,
		`{"type":"payments","id":"p-2","LANEPROBE":` + probe + `,"input":{}}`,
		`{"type":"payments","id":"p-3","input":{"laneProbe":` + probe + `}}`,
	}
	ev.Records = ev.Records[:1]
	for i, b := range bodies {
		m := ev.Records[0]
		m.MessageId, m.ReceiptHandle, m.Body = fmt.Sprintf("forged-%d", i), fmt.Sprintf("h-forged-%d", i), b
		ev.Records = append(ev.Records, m)
	}
	ev.Records = ev.Records[1:]
	sender, dlq := &fakeSender{}, &fakeDLQ{}
	if _, err := newRouter(&fakeConfig{limits: limits}, sender, dlq, nil).Handle(context.Background(), ev); err != nil {
		t.Fatal(err)
	}
	sent := sender.entries()
	if len(sent) != 3 || len(dlq.sent) != 1 {
		t.Errorf("sent %d, dead-lettered %d; want the three jobs sent and the bare probe refused", len(sent), len(dlq.sent))
	}
	for _, e := range sent {
		if p, ok := job.ParseProbe(aws.ToString(e.MessageBody)); ok {
			t.Errorf("sent %s to %s: a probe of %+v", aws.ToString(e.MessageBody), aws.ToString(e.MessageGroupId), p)
		}
	}
}

// A general-queue message delivered twice is sent with the same group and deduplication id, so the
// lanes queue enqueues it once.
func TestHandleRedeliveryIsDeduplicated(t *testing.T) {
	ev := loadEvent(t, "sqs-good-batch.json")
	sender := &fakeSender{}
	r := newRouter(&fakeConfig{limits: limits}, sender, &fakeDLQ{}, nil)
	for range 2 {
		if resp, err := r.Handle(context.Background(), ev); err != nil || len(resp.BatchItemFailures) != 0 {
			t.Fatalf("Handle(good batch) = %+v, %v, want no failures", resp, err)
		}
	}
	if len(sender.calls) != 2 {
		t.Fatalf("Send called %d times, want 2", len(sender.calls))
	}
	for i := range sender.calls[0] {
		a, b := sender.calls[0][i], sender.calls[1][i]
		if aws.ToString(a.MessageGroupId) != aws.ToString(b.MessageGroupId) || aws.ToString(a.MessageDeduplicationId) != aws.ToString(b.MessageDeduplicationId) {
			t.Errorf("entry %d: group/dedup %q/%q then %q/%q, want the same both times", i,
				aws.ToString(a.MessageGroupId), aws.ToString(a.MessageDeduplicationId), aws.ToString(b.MessageGroupId), aws.ToString(b.MessageDeduplicationId))
		}
	}
}

// A redriven job (a dead letter's body, with its generation) goes to the lanes queue under a
// deduplication id of its own: SQS keeps its first run's id five minutes even after that message
// was deleted, and would drop the redrive as a copy of it.
func TestHandleRedrivenJobHasItsOwnDedupID(t *testing.T) {
	sender := &fakeSender{}
	r := newRouter(&fakeConfig{limits: limits}, sender, &fakeDLQ{}, nil)
	for i, body := range []string{
		`{"type":"payments","id":"order-1","input":{}}`,
		`{"type":"payments","id":"order-1","input":{},"redrive":1}`,
		`{"type":"payments","id":"order-1","input":{},"redrive":2}`,
	} {
		ev := events.SQSEvent{Records: []events.SQSMessage{{MessageId: "m-" + strconv.Itoa(i), Body: body}}}
		if resp, err := r.Handle(context.Background(), ev); err != nil || len(resp.BatchItemFailures) != 0 {
			t.Fatalf("Handle(%s) = %+v, %v, want no failures", body, resp, err)
		}
	}
	want := []string{"payments-order-1", "payments-order-1~g1", "payments-order-1~g2"}
	got := sender.entries()
	if len(got) != len(want) {
		t.Fatalf("sent %d entries, want %d", len(got), len(want))
	}
	for i, e := range got {
		if d := aws.ToString(e.MessageDeduplicationId); d != want[i] {
			t.Errorf("generation %d: MessageDeduplicationId = %q, want %q", i, d, want[i])
		}
	}
}

type wantDead struct {
	messageID, reason, typ, jobID string
}

func TestHandleMixedBatch(t *testing.T) {
	ev := loadEvent(t, "sqs-mixed-batch.json")
	bodyOf := map[string]string{}
	for _, m := range ev.Records {
		bodyOf[m.MessageId] = m.Body
	}
	good := []wantSent{
		{typ: "payments", id: "order-2", input: `{"card":"SECRET-4111"}`, sentMs: 1709978500000, dedup: "payments-order-2~sAIDAIENQZJOLO23YVJ4VO"},
		{typ: "reports", id: "j-6", input: `{"card":"SECRET-4111"}`, sentMs: 1709978500005, dedup: "reports-j-6~sAIDAIENQZJOLO23YVJ4VO"},
	}
	dead := []wantDead{
		{messageID: mixedNotJSON, reason: "not_json"},
		{messageID: mixedNoType, reason: "missing_type"},
		{messageID: mixedUnknown, reason: "unknown_type", typ: "nope", jobID: "j-4"},
		{messageID: mixedTooLarge, reason: "input_too_large"},
		{messageID: mixedInvalidID, reason: "invalid_id"},
		{messageID: mixedInvalidTyp, reason: "invalid_type"},
	}
	tests := []struct {
		name         string
		giveCfg      *fakeConfig
		giveSender   *fakeSender
		giveDLQFail  map[string]bool
		wantFailures []string
		wantSent     []wantSent
		wantDead     []wantDead
	}{
		{
			name:       "bad jobs dead-lettered, good jobs sent, nothing failed",
			giveCfg:    &fakeConfig{limits: limits},
			giveSender: &fakeSender{},
			wantSent:   good,
			wantDead:   dead,
		},
		{
			name:         "dead-letter queue failing: that message is retried",
			giveCfg:      &fakeConfig{limits: limits},
			giveSender:   &fakeSender{},
			giveDLQFail:  map[string]bool{"missing_type": true},
			wantFailures: []string{mixedNoType},
			wantSent:     good,
			wantDead:     slices.Delete(slices.Clone(dead), 1, 2),
		},
		{
			name:         "lanes queue failing one entry: exactly that message is retried",
			giveCfg:      &fakeConfig{limits: limits},
			giveSender:   &fakeSender{fail: map[string]bool{"j-6": true}},
			wantFailures: []string{mixedGood2},
			wantSent:     good,
			wantDead:     dead,
		},
		{
			name:         "lanes queue failing every entry and the context ending",
			giveCfg:      &fakeConfig{limits: limits},
			giveSender:   &fakeSender{failAll: true, err: context.DeadlineExceeded},
			wantFailures: []string{mixedGood1, mixedGood2},
			wantSent:     good,
			wantDead:     dead,
		},
		{
			name:         "config store down for a type: its job retried, not dead-lettered",
			giveCfg:      &fakeConfig{limits: limits, broken: map[string]bool{"reports": true}},
			giveSender:   &fakeSender{},
			wantFailures: []string{mixedGood2},
			wantSent:     good[:1],
			// The oversized reports job is refused before its config is read.
			wantDead: dead,
		},
		{
			name:         "config store down for every type",
			giveCfg:      &fakeConfig{limits: limits, broken: map[string]bool{"reports": true, "payments": true, "nope": true}},
			giveSender:   &fakeSender{},
			wantFailures: []string{mixedGood1, mixedUnknown, mixedGood2},
			wantDead:     slices.Delete(slices.Clone(dead), 2, 3),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dlq := &fakeDLQ{fail: tt.giveDLQFail}
			resp, err := newRouter(tt.giveCfg, tt.giveSender, dlq, nil).Handle(context.Background(), ev)
			if err != nil {
				t.Fatalf("Handle(mixed batch) error = %v, want per-message failures only", err)
			}
			var failures []string
			for _, f := range resp.BatchItemFailures {
				failures = append(failures, f.ItemIdentifier)
			}
			slices.Sort(failures)
			if want := slices.Sorted(slices.Values(tt.wantFailures)); !slices.Equal(failures, want) {
				t.Errorf("BatchItemFailures = %v, want %v", failures, want)
			}
			if len(tt.wantSent) == 0 {
				if n := len(tt.giveSender.entries()); n != 0 {
					t.Errorf("sent %d entries, want none", n)
				}
			} else {
				checkSent(t, tt.giveSender.entries(), tt.wantSent)
			}
			if len(dlq.sent) != len(tt.wantDead) {
				t.Fatalf("dead-lettered %d messages %+v, want %d", len(dlq.sent), dlq.sent, len(tt.wantDead))
			}
			for i, w := range tt.wantDead {
				d := dlq.sent[i]
				if d.Reason != w.reason || d.Source != "router" || d.Body != bodyOf[w.messageID] {
					t.Errorf("dead letter %d = reason %q source %q body %.60q, want reason %q source router and the original body %.60q",
						i, d.Reason, d.Source, d.Body, w.reason, bodyOf[w.messageID])
				}
				if w.typ != "" && (d.Type != w.typ || d.JobID != w.jobID) {
					t.Errorf("dead letter %d type %q jobId %q, want %q %q", i, d.Type, d.JobID, w.typ, w.jobID)
				}
				if d.Cause == "" {
					t.Errorf("dead letter %d (%s) has no cause, want the refusal's detail", i, d.Reason)
				}
			}
		})
	}
}

func TestHandleEmptyBatch(t *testing.T) {
	sender, dlq := &fakeSender{}, &fakeDLQ{}
	resp, err := newRouter(&fakeConfig{limits: limits}, sender, dlq, nil).Handle(context.Background(), events.SQSEvent{})
	if err != nil || len(resp.BatchItemFailures) != 0 || len(sender.calls) != 0 || len(dlq.sent) != 0 {
		t.Errorf("Handle(empty) = %+v, %v with %d sends and %d dead letters, want nothing at all", resp, err, len(sender.calls), len(dlq.sent))
	}
}

func TestHandleAllRefused(t *testing.T) {
	ev := loadEvent(t, "sqs-mixed-batch.json")
	sender, dlq := &fakeSender{}, &fakeDLQ{}
	resp, err := newRouter(&fakeConfig{limits: map[string]int{}}, sender, dlq, nil).Handle(context.Background(), ev)
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("Handle = %+v, %v, want no failures", resp, err)
	}
	if len(sender.calls) != 0 {
		t.Errorf("Send called %d times, want none when every job is refused", len(sender.calls))
	}
	if len(dlq.sent) != len(ev.Records) {
		t.Errorf("dead-lettered %d, want all %d", len(dlq.sent), len(ev.Records))
	}
}

// Logs carry job ids and types, never the job's input.
func TestHandleDoesNotLogInput(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	for _, fixture := range []string{"sqs-good-batch.json", "sqs-mixed-batch.json"} {
		ev := loadEvent(t, fixture)
		sender := &fakeSender{fail: map[string]bool{"order-1": true, "j-6": true}}
		cfg := &fakeConfig{limits: limits, broken: map[string]bool{"adhoc": true}}
		if _, err := newRouter(cfg, sender, &fakeDLQ{}, log).Handle(context.Background(), ev); err != nil {
			t.Fatalf("Handle(%s) error = %v", fixture, err)
		}
	}
	if buf.Len() == 0 {
		t.Fatal("no log lines, want some")
	}
	if strings.Contains(buf.String(), "SECRET-4111") {
		t.Errorf("logs contain a job's input:\n%s", buf.String())
	}
	if !strings.Contains(buf.String(), "order-1") {
		t.Errorf("logs do not name job order-1:\n%s", buf.String())
	}
}

// A first-free type's keyed jobs wait in their key's group; jobs without a key in the type's
// waiting groups; a job whose key breaks the contract is dead-lettered with invalid_key and does
// not hold up the others.
func TestHandleKeyedBatch(t *testing.T) {
	ev := loadEvent(t, "sqs-keyed-batch.json")
	sender, dlq := &fakeSender{}, &fakeDLQ{}
	cfg := &fakeConfig{limits: map[string]int{"llm": 20}, strategy: map[string]string{"llm": lane.FirstFree}}
	resp, err := newRouter(cfg, sender, dlq, nil).Handle(context.Background(), ev)
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("Handle(keyed batch) = %+v, %v, want no failures", resp, err)
	}
	groups := map[string]string{}
	for _, e := range sender.entries() {
		var j job.Job
		if err := json.Unmarshal([]byte(aws.ToString(e.MessageBody)), &j); err != nil {
			t.Fatal(err)
		}
		groups[j.ID] = aws.ToString(e.MessageGroupId)
		if j.ID == "doc-1" && j.Key != "acme" {
			t.Errorf("doc-1 body key = %q, want acme carried to the lanes queue", j.Key)
		}
	}
	want := map[string]string{"doc-1": "llm#acme", "doc-2": "llm#tenant-7.eu:prod"}
	for id, g := range want {
		if groups[id] != g {
			t.Errorf("%s sent to group %q, want %q", id, groups[id], g)
		}
	}
	if g := groups["doc-3"]; g != "llm-0" && g != "llm-w1" {
		t.Errorf("doc-3 (no key) sent to group %q, want one of llm's waiting groups", g)
	}
	if len(dlq.sent) != 1 || dlq.sent[0].Reason != string(job.ReasonInvalidKey) || dlq.sent[0].JobID != "doc-4" {
		t.Errorf("dead letters = %+v, want doc-4 refused with invalid_key", dlq.sent)
	}
}

// Types without a limit of their own run on the fallback limit only while they hold one of the
// unlisted types' slots: a job of one more such type is dead-lettered with its reason, and neither
// the listed types' jobs nor the unlisted types holding slots wait for it; a slot table that
// cannot be read fails the job back to the general queue.
func TestUnlistedTypesOverTheBoundAreRefused(t *testing.T) {
	ctx := context.Background()
	db := fakes.NewDynamoDB("t")
	lanes, dlq := &fakeSender{}, &fakeDLQ{}
	r := newRouter(&fakeConfig{limits: map[string]int{"payments": 3}, fallback: 2}, lanes, dlq, nil)
	r.Unlisted = &unlisted.Slots{DB: db, Table: "t", Limit: 2}
	from := func(m events.SQSMessage, sender string) events.SQSMessage {
		m.Attributes["SenderId"] = sender
		return m
	}
	ev := events.SQSEvent{Records: []events.SQSMessage{
		from(sqsJob("invented1", "i1"), "AIDAONE"), from(sqsJob("invented2", "i2"), "AIDATWO"),
		from(sqsJob("invented3", "i3"), "AIDATHREE"), sqsJob("payments", "p1"), from(sqsJob("invented1", "i4"), "AIDATHREE"),
	}}
	resp, err := r.Handle(ctx, ev)
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("Handle() = %+v, %v; want no failures", resp, err)
	}
	var routed []string
	for _, e := range lanes.entries() {
		var j lanesBody
		_ = json.Unmarshal([]byte(aws.ToString(e.MessageBody)), &j)
		routed = append(routed, j.ID)
	}
	if want := []string{"i1", "i2", "p1", "i4"}; !slices.Equal(routed, want) {
		t.Errorf("routed %v, want %v", routed, want)
	}
	if len(dlq.sent) != 1 || dlq.sent[0].JobID != "i3" || dlq.sent[0].Reason != string(job.ReasonUnlistedTypes) ||
		!strings.Contains(dlq.sent[0].Cause, "UnlistedTypesLimit") {
		t.Errorf("dead letters = %+v, want i3 refused as %s, naming UnlistedTypesLimit", dlq.sent, job.ReasonUnlistedTypes)
	}
	// The slots cannot be read: the job of a type without one is delivered again, not refused.
	r.Unlisted = &unlisted.Slots{DB: downDB{}, Table: "t", Limit: 2}
	resp, err = r.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{sqsJob("invented9", "i9")}})
	if err != nil || len(resp.BatchItemFailures) != 1 || len(dlq.sent) != 1 {
		t.Errorf("Handle() with the table down = %+v, %v, %d dead letters; want the job failed back, not refused", resp, err, len(dlq.sent))
	}
}

type downDB struct{}

func (downDB) PutItem(context.Context, *dynamodb.PutItemInput, ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	return nil, errors.New("throttled")
}

func (downDB) Query(context.Context, *dynamodb.QueryInput, ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	return nil, errors.New("throttled")
}

// The unlisted types' slots are shared by every producer, first come, and a type keeps its slot
// 14-15 days after it last routed: one producer that sends one job of each of UnlistedTypesLimit
// invented types (renewed by one job a day) refuses every other producer's unlisted type,
// too_many_unlisted_types, for as long as it likes. A producer's invented types take no more
// than its share of the slots.
func TestUnlistedTypesOfOneSenderDoNotRefuseAnothers(t *testing.T) {
	ctx := context.Background()
	lanes, dlq := &fakeSender{}, &fakeDLQ{}
	r := newRouter(&fakeConfig{limits: map[string]int{"payments": 3}, fallback: 2}, lanes, dlq, nil)
	r.Unlisted = &unlisted.Slots{DB: fakes.NewDynamoDB("t"), Table: "t", Limit: 2}
	from := func(m events.SQSMessage, sender string) events.SQSMessage {
		m.Attributes["SenderId"] = sender
		return m
	}
	ev := events.SQSEvent{Records: []events.SQSMessage{
		from(sqsJob("junk1", "j1"), "AROAMALLORY:x"), from(sqsJob("junk2", "j2"), "AROAMALLORY:x"),
		from(sqsJob("reports2", "r1"), "AROAACME:api"),
	}}
	if resp, err := r.Handle(ctx, ev); err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("Handle() = %+v, %v; want no failures", resp, err)
	}
	for _, e := range dlq.sent {
		if e.JobID == "r1" {
			t.Errorf("acme's job of its unlisted type refused as %s: mallory's invented types hold every slot", e.Reason)
		}
	}
}

// A federated user's principal is its whole id, "{account}:{name}" (batch.Principal), and the name
// is whatever the IAM user that called sts:GetFederationToken chose: one producer with that right
// is as many principals as it likes, each with its own share of the unlisted types' slots, and
// together they held every slot, refusing every other producer's unlisted types for two weeks.
// The federated users of one account share one share.
func TestUnlistedTypesOfFederatedUsersShareOneShare(t *testing.T) {
	ctx := context.Background()
	lanes, dlq := &fakeSender{}, &fakeDLQ{}
	r := newRouter(&fakeConfig{limits: map[string]int{"payments": 3}, fallback: 2}, lanes, dlq, nil)
	r.Unlisted = &unlisted.Slots{DB: fakes.NewDynamoDB("t"), Table: "t", Limit: 4}
	from := func(m events.SQSMessage, sender string) events.SQSMessage {
		m.Attributes["SenderId"] = sender
		return m
	}
	ev := events.SQSEvent{Records: []events.SQSMessage{
		from(sqsJob("junk1", "j1"), "123456789012:m1"), from(sqsJob("junk2", "j2"), "123456789012:m1"),
		from(sqsJob("junk3", "j3"), "123456789012:m2"), from(sqsJob("junk4", "j4"), "123456789012:m2"),
		from(sqsJob("reports2", "r1"), "AROAACME:api"),
	}}
	if resp, err := r.Handle(ctx, ev); err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("Handle() = %+v, %v; want no failures", resp, err)
	}
	for _, e := range dlq.sent {
		if e.JobID == "r1" {
			t.Errorf("acme's job of its unlisted type refused as %s: one account's federated users' invented types hold every slot", e.Reason)
		}
	}
}
