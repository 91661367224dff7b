package ops

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	ledger "github.com/sfnlimit/sfnlimit/internal/lambda/batch"
	"github.com/sfnlimit/sfnlimit/internal/tools/fakes"
)

var batchNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func newLedger() *ledger.Ledger { return ledger.New(fakes.NewDynamoDB("t"), "t") }

// record ends jobs of a batch in the ledger, a second apart from at.
func record(t *testing.T, l *ledger.Ledger, id string, at time.Time, ends map[string]ledger.Outcome) {
	t.Helper()
	ids := make([]string, 0, len(ends))
	for j := range ends {
		ids = append(ids, j)
	}
	slices.Sort(ids)
	for i, j := range ids {
		if _, err := l.Record(context.Background(), id, j, 0, ends[j], at.Add(time.Duration(i)*time.Second)); err != nil {
			t.Fatalf("Record(%s): %v", j, err)
		}
	}
}

// batch open opens a batch for its size; again with the same size it says so and changes nothing;
// with another size it is refused with both sizes; a bad name or size is a usage error.
// testOwner stands for the caller's principal (resources.Target.Caller).
const testOwner = "AIDAEXAMPLECALLER"

func TestOpenBatch(t *testing.T) {
	l := newLedger()
	ctx := context.Background()
	got, err := OpenBatch(ctx, l, "nightly-1", 3, testOwner, batchNow)
	if err != nil || got != (BatchOpened{Batch: "nightly-1", Size: 3, OpenedAt: batchNow}) {
		t.Fatalf("OpenBatch() = %+v, %v; want opened for 3 at %s", got, err, batchNow)
	}
	var out bytes.Buffer
	WriteBatchOpened(&out, got)
	if want := "batch nightly-1 opened for 3 jobs at 2026-03-01T12:00:00Z; it closes when 3 jobs have ended\n"; out.String() != want {
		t.Errorf("output %q, want %q", out.String(), want)
	}

	again, err := OpenBatch(ctx, l, "nightly-1", 3, testOwner, batchNow.Add(time.Hour))
	if err != nil || !again.Already || !again.OpenedAt.Equal(batchNow) {
		t.Errorf("OpenBatch() again = %+v, %v; want already open since %s", again, err, batchNow)
	}
	out.Reset()
	WriteBatchOpened(&out, again)
	if !strings.Contains(out.String(), "was open already for 3 jobs (since 2026-03-01T12:00:00Z)") {
		t.Errorf("output %q says nothing of the batch open already", out.String())
	}

	// Another principal's batch is not the caller's to open, whatever size it gives.
	if _, err := OpenBatch(ctx, l, "nightly-1", 3, "AROAOTHER", batchNow); !errors.Is(err, ledger.ErrNotOwned) || !errors.As(err, new(UsageError)) {
		t.Errorf("OpenBatch() by another principal: %v; want a usage error, ErrNotOwned", err)
	}
	_, err = OpenBatch(ctx, l, "nightly-1", 4, testOwner, batchNow)
	var ue UsageError
	if !errors.Is(err, ledger.ErrSizeMismatch) || !errors.As(err, &ue) || !strings.Contains(err.Error(), "opened at 2026-03-01T12:00:00Z for 3 jobs") {
		t.Errorf("OpenBatch() with another size: %v; want a usage error, ErrSizeMismatch naming the open size", err)
	}

	for _, bad := range []struct {
		id   string
		size int
		want string
	}{
		{"", 1, "a batch needs a name"},
		{"a b", 1, "must be 1-64 characters"},
		{strings.Repeat("x", 65), 1, "must be 1-64 characters"},
		{"ok", 0, "batch size 0 must be 1-1000000"},
		{"ok", 1_000_001, "must be 1-1000000"},
	} {
		_, err := OpenBatch(ctx, l, bad.id, bad.size, testOwner, batchNow)
		var ue UsageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("OpenBatch(%q, %d) = %v; want a usage error with %q", bad.id, bad.size, err, bad.want)
		}
	}
}

// batch show: counts per outcome, recorded of expected with a percentage, open and close times and
// the duration, whether the event was sent, the dead-lettered jobs and where the rest are, the late
// jobs, and every job with --jobs.
func TestShowBatch(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name      string
		size      int
		ends      map[string]ledger.Outcome
		late      bool
		withJobs  bool
		retention time.Duration
		want      []string
		wantNot   []string
	}{
		{
			name: "open", size: 8,
			ends: map[string]ledger.Outcome{"a/1": ledger.Succeeded, "a/2": ledger.DeadLettered, "b/1": ledger.Refused},
			want: []string{
				"batch b: open\n",
				"  recorded       3/8 (37.5%)\n",
				"  succeeded      1\n",
				"  dead_lettered  1\n",
				"  refused        1\n",
				"  opened         2026-03-01T12:00:00Z\n",
				"  open for       10m0s; 5 jobs to go\n",
				"  job ends       2026-03-01T12:01:00Z to 2026-03-01T12:01:02Z\n",
				"  expires        not while open (BatchRetentionDays after the close)\n",
				"dead-lettered or refused: 2 (their messages are on the dead-letter queue: sfnlimit dlq list)\n  a/2\n  b/1\n",
			},
			wantNot: []string{": closed", "  closed", "late", "jobs:"},
		},
		{
			name: "closed, with a late job and every job", size: 2, late: true, withJobs: true, retention: 30 * 24 * time.Hour,
			ends: map[string]ledger.Outcome{"a/1": ledger.Succeeded, "a/2": ledger.Succeeded},
			want: []string{
				"batch b: closed, completion event not sent yet\n",
				"  recorded       2/2 (100%)\n",
				"  closed         2026-03-01T12:01:01Z (after 1m1s; closed by a/2)\n",
				"  expires        2026-03-31T12:01:01Z (DynamoDB's TTL deletes it within days after)\n",
				"late (ended after the batch closed, not counted): 1\n  JOB  OUTCOME        REDRIVE  ENDED\n  a/9  dead_lettered  0        2026-03-01T12:05:00.000Z\n",
				"jobs: 2\n  JOB  OUTCOME    REDRIVE  ENDED\n  a/1  succeeded  0        2026-03-01T12:01:00.000Z\n  a/2  succeeded  0        2026-03-01T12:01:01.000Z\n",
			},
			wantNot: []string{"dead-lettered or refused"},
		},
		{
			// A job stopped by a newer job of its key (overflow rule cancel) is counted as cancelled,
			// not as a failure: it is not on the dead-letter queue.
			name: "cancelled", size: 3,
			ends: map[string]ledger.Outcome{"a/1": ledger.Cancelled, "a/2": ledger.Succeeded, "a/3": ledger.DeadLettered},
			want: []string{
				"  succeeded      1\n",
				"  dead_lettered  1\n",
				"  cancelled      1\n",
				"dead-lettered or refused: 1 (their messages are on the dead-letter queue: sfnlimit dlq list)\n  a/3\n",
			},
			wantNot: []string{"  a/1\n"},
		},
		{
			// A job that ended without running, its key at its cap with an older job of its sender
			// (overflow rule skip), is counted as skipped, not as a failure.
			name: "skipped", size: 3,
			ends: map[string]ledger.Outcome{"a/1": ledger.Skipped, "a/2": ledger.Succeeded, "a/3": ledger.Cancelled},
			want: []string{
				"  succeeded      1\n",
				"  cancelled      1\n",
				"  skipped        1\n",
			},
			wantNot: []string{"dead-lettered or refused", "  a/1\n"},
		},
		{
			name: "closed with no retention", size: 1,
			ends: map[string]ledger.Outcome{"a/1": ledger.Succeeded},
			want: []string{"  expires        never (closed with no retention)\n"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newLedger()
			l.Retention = tt.retention
			if err := l.Open(ctx, "b", tt.size, batchNow); err != nil {
				t.Fatal(err)
			}
			record(t, l, "b", batchNow.Add(time.Minute), tt.ends)
			if tt.late {
				record(t, l, "b", batchNow.Add(5*time.Minute), map[string]ledger.Outcome{"a/9": ledger.DeadLettered})
			}
			v, err := ShowBatch(ctx, l, "b", tt.withJobs, batchNow.Add(10*time.Minute))
			if err != nil {
				t.Fatalf("ShowBatch() error = %v", err)
			}
			var out bytes.Buffer
			if err := WriteBatch(&out, v); err != nil {
				t.Fatal(err)
			}
			for _, w := range tt.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
			for _, w := range tt.wantNot {
				if strings.Contains(out.String(), w) {
					t.Errorf("output has %q:\n%s", w, out.String())
				}
			}
			b, err := json.Marshal(v)
			if err != nil || !bytes.Contains(b, []byte(`"counts":{"cancelled":`)) || !bytes.Contains(b, []byte(`"dead_lettered":`)) {
				t.Errorf("JSON %s, %v: want counts per outcome", b, err)
			}
			failed := 0
			for _, o := range tt.ends {
				if o == ledger.DeadLettered || o == ledger.Refused {
					failed++
				}
			}
			if v.Failed != failed {
				t.Errorf("Failed = %d, want %d (dead-lettered or refused; not cancelled or skipped)", v.Failed, failed)
			}
			if hasExpiry := bytes.Contains(b, []byte(`"expiresAt":`)); hasExpiry != (tt.retention > 0) {
				t.Errorf("JSON %s: expiresAt present %v, want %v (closed with a retention)", b, hasExpiry, tt.retention > 0)
			}
		})
	}
}

// Over batch.MaxListed dead-lettered jobs, show lists the first ones and says where the rest are.
func TestShowBatchManyDeadLettered(t *testing.T) {
	ctx := context.Background()
	l := newLedger()
	if err := l.Open(ctx, "big", 150, batchNow); err != nil {
		t.Fatal(err)
	}
	ends := map[string]ledger.Outcome{}
	for i := range 120 {
		ends[fmt.Sprintf("a/%03d", i)] = ledger.DeadLettered
	}
	record(t, l, "big", batchNow, ends)
	v, err := ShowBatch(ctx, l, "big", false, batchNow)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	_ = WriteBatch(&out, v)
	if len(v.DeadLettered) != ledger.MaxListed || !strings.Contains(out.String(), "  ... and 20 more: sfnlimit batch show big --jobs") {
		t.Errorf("%d listed; output:\n%s\nwant %d listed and where the other 20 are", len(v.DeadLettered), out.String(), ledger.MaxListed)
	}
}

// A batch nobody opened does not exist, and the error says so (a batch is open or closed: "not
// open" would read as a third state), and how to open one.
func TestShowBatchNotOpen(t *testing.T) {
	_, err := ShowBatch(context.Background(), newLedger(), "nope", false, batchNow)
	var none NoBatchError
	if !errors.Is(err, ledger.ErrNotOpen) || !errors.As(err, &none) || !strings.Contains(err.Error(), "sfnlimit batch open nope --size N") ||
		!strings.HasPrefix(err.Error(), "batch nope does not exist: ") || strings.Contains(err.Error(), "not open") {
		t.Errorf("ShowBatch() of a batch not open = %v; want a NoBatchError that says it does not exist and how to open it", err)
	}
}

// orderLog records the calls of a ledger and a queue, in order.
type orderLog struct {
	mu    sync.Mutex
	calls []string
	sent  []string
}

func (o *orderLog) add(s string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls = append(o.calls, s)
}

type loggedLedger struct {
	BatchLedger
	log *orderLog
}

func (l loggedLedger) OpenBy(ctx context.Context, id string, expected int, owner string, at time.Time) error {
	l.log.add(fmt.Sprintf("open %s %d", id, expected))
	return l.BatchLedger.OpenBy(ctx, id, expected, owner, at)
}

func (o *orderLog) SendMessageBatch(_ context.Context, in *sqs.SendMessageBatchInput, _ ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	o.add("send")
	out := &sqs.SendMessageBatchOutput{}
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, e := range in.Entries {
		o.sent = append(o.sent, *e.MessageBody)
		out.Successful = append(out.Successful, types.SendMessageBatchResultEntry{Id: e.Id})
	}
	return out, nil
}

func (o *orderLog) SendMessage(context.Context, *sqs.SendMessageInput, ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	panic("not used")
}

// submit --batch: each job is sent naming the batch, after the batch is opened for the jobs the
// input holds (a repeated job counted once); a job naming another batch, or carrying another
// batchSize, stops everything before the batch is opened.
func TestSubmitBatch(t *testing.T) {
	tests := []struct {
		name      string
		give      string
		wantCalls []string
		wantSent  []string
		wantErr   string
	}{
		{
			name: "jobs, one repeated, one without an id, one naming the batch already",
			give: `{"type":"a","id":"1","input":{"n":1}}
{"type":"a","id":"1"}
{"type":"b"}
{"batch":"nightly","type":"a","id":"2"}
{"type":"a","id":"3","batch":null}
{"type":"a","id":"4","batchSize":5}`,
			wantCalls: []string{"open nightly 5", "send"},
			wantSent: []string{
				`{"batch":"nightly","type":"a","id":"1","input":{"n":1}}`,
				`{"batch":"nightly","type":"a","id":"1"}`,
				`{"batch":"nightly","type":"b"}`,
				`{"batch":"nightly","type":"a","id":"2"}`,
				`{"batch":"nightly","id":"3","type":"a"}`,
				`{"batch":"nightly","type":"a","id":"4","batchSize":5}`,
			},
		},
		{
			name:    "a job of another batch",
			give:    "{\"type\":\"a\",\"id\":\"1\"}\n{\"type\":\"a\",\"id\":\"2\",\"Batch\":\"weekly\"}",
			wantErr: `line 2 names batch "weekly", not nightly`,
		},
		{
			name:    "a job with another batchSize",
			give:    "{\"type\":\"a\",\"id\":\"1\"}\n{\"type\":\"a\",\"id\":\"2\",\"batchSize\":7}",
			wantErr: "line 2 carries batchSize 7, but the batch nightly of this input holds 2 jobs",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			log := &orderLog{}
			l := loggedLedger{newLedger(), log}
			p, err := Parser{Batch: "nightly"}.ParseJobs(ctx, strings.NewReader(tt.give))
			if err == nil {
				_, _, err = SubmitBatch(ctx, l, Submitter{SQS: log, QueueURL: "q", Parallel: 1}, "nightly", p.Jobs, p.Jobs, testOwner, batchNow, nil)
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("error = %v, want one with %q", err, tt.wantErr)
				}
				if len(log.calls) > 0 {
					t.Errorf("calls %v, want none", log.calls)
				}
				return
			}
			if err != nil {
				t.Fatalf("SubmitBatch() error = %v", err)
			}
			if !slices.Equal(log.calls, tt.wantCalls) {
				t.Errorf("calls %v, want %v", log.calls, tt.wantCalls)
			}
			if !slices.Equal(log.sent, tt.wantSent) {
				t.Errorf("sent:\n%s\nwant:\n%s", strings.Join(log.sent, "\n"), strings.Join(tt.wantSent, "\n"))
			}
		})
	}
}

// A batch opened already with another size refuses the submission: nothing is sent.
func TestSubmitBatchOpenWithAnotherSize(t *testing.T) {
	ctx := context.Background()
	log := &orderLog{}
	l := loggedLedger{newLedger(), log}
	if err := l.BatchLedger.OpenBy(ctx, "nightly", 9, testOwner, batchNow); err != nil {
		t.Fatal(err)
	}
	jobs := []Line{{No: 1, Type: "a", ID: "1", Body: []byte(`{"batch":"nightly","type":"a","id":"1"}`)}}
	_, res, err := SubmitBatch(ctx, l, Submitter{SQS: log, QueueURL: "q"}, "nightly", jobs, jobs, testOwner, batchNow, nil)
	if !errors.Is(err, ledger.ErrSizeMismatch) || !strings.Contains(err.Error(), "nothing sent") || res.Sent != 0 || slices.Contains(log.calls, "send") {
		t.Errorf("SubmitBatch() = %+v, %v, calls %v; want ErrSizeMismatch and nothing sent", res, err, log.calls)
	}
}

// Sent again with the same --batch after SQS failed some of its jobs, an input sizes its batch as
// the first time: the jobs found submitted before as jobs of this batch are counted (not sent),
// and only a job submitted before outside it (another batch, or none) is left out, as it was then.
func TestBatchMembers(t *testing.T) {
	jobs := []Line{{No: 1, Type: "a", ID: "1"}, {No: 2, Type: "a", ID: "2"}, {No: 3, Type: "a", ID: "3"}, {No: 4, Type: "a", ID: "4"}}
	tests := []struct {
		name string
		give []Earlier
		want []int // line numbers
	}{
		{name: "nothing submitted before", want: []int{1, 2, 3, 4}},
		{name: "lines 1 and 2 sent before in this batch", give: []Earlier{{No: 1, Batch: "nightly"}, {No: 2, Batch: "nightly"}}, want: []int{1, 2, 3, 4}},
		{name: "line 3 sent before in another batch, line 4 in none", give: []Earlier{{No: 1, Batch: "nightly"}, {No: 3, Batch: "weekly"}, {No: 4}}, want: []int{1, 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []int
			for _, l := range BatchMembers(jobs, tt.give, "nightly") {
				got = append(got, l.No)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("BatchMembers() = lines %v, want %v", got, tt.want)
			}
		})
	}
}
