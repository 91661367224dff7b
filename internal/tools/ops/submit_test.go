package ops

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/cenkalti/backoff/v5"

	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/lambda/sqsbatch"
)

func TestParseJobs(t *testing.T) {
	known := func(_ context.Context, typ string) error {
		if typ == "nolimit" {
			return &job.Error{Reason: job.ReasonUnknownType, Detail: "type nolimit has no limit"}
		}
		return nil
	}
	big := `{"type":"a","id":"big","input":"` + strings.Repeat("x", job.MaxExecutionInput) + `"}`
	long := `{"type":"a","id":"long","input":"` + strings.Repeat("y", 100_000) + `"}`
	tests := []struct {
		name        string
		give        string
		check       TypeChecker
		wantLines   []int
		wantInvalid map[int]string // line -> reason
		wantDup     int
		wantNoID    int
	}{
		{name: "valid lines and blank ones", give: "{\"type\":\"a\",\"id\":\"1\"}\n\n  \n{\"type\":\"b\",\"id\":\"2\",\"input\":[1]}\n", wantLines: []int{1, 4}},
		{name: "no final newline, CRLF", give: "{\"type\":\"a\",\"id\":\"1\"}\r\n{\"type\":\"a\",\"id\":\"2\"}", wantLines: []int{1, 2}},
		{
			name: "the router's refusals",
			give: strings.Join([]string{
				`not json`, `{"id":"x"}`, `{"type":"a-b","id":"x"}`, `{"type":"a","id":"a b"}`, `{"type":"a","id":"x"} {}`, big, `{"type":"a","id":"ok"}`,
			}, "\n"),
			wantLines:   []int{7},
			wantInvalid: map[int]string{1: "not_json", 2: "missing_type", 3: "invalid_type", 4: "invalid_id", 5: "not_json", 6: "input_too_large"},
		},
		{name: "unknown type", give: "{\"type\":\"nolimit\",\"id\":\"1\"}\n{\"type\":\"a\",\"id\":\"1\"}", check: known, wantLines: []int{2}, wantInvalid: map[int]string{1: "unknown_type"}},
		{name: "unknown type unchecked", give: `{"type":"nolimit","id":"1"}`, wantLines: []int{1}},
		{name: "duplicates and missing ids", give: "{\"type\":\"a\",\"id\":\"1\"}\n{\"type\":\"a\",\"id\":\"1\"}\n{\"type\":\"b\",\"id\":\"1\"}\n{\"type\":\"a\"}\n{\"type\":\"a\",\"id\":\"\"}", wantLines: []int{1, 2, 3, 4, 5}, wantDup: 1, wantNoID: 2},
		{name: "a line longer than a scanner's buffer", give: long + "\n" + `{"type":"a","id":"next"}`, wantLines: []int{1, 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := ParseJobs(context.Background(), strings.NewReader(tt.give), tt.check)
			if err != nil {
				t.Fatalf("ParseJobs() error = %v", err)
			}
			var lines []int
			for _, l := range p.Jobs {
				lines = append(lines, l.No)
			}
			if !slices.Equal(lines, tt.wantLines) {
				t.Errorf("ParseJobs() jobs on lines %v, want %v", lines, tt.wantLines)
			}
			invalid := map[int]string{}
			for _, x := range p.Invalid {
				invalid[x.No] = x.Reason
				if x.Detail == "" {
					t.Errorf("line %d: no detail", x.No)
				}
			}
			if len(invalid) != len(tt.wantInvalid) {
				t.Errorf("ParseJobs() invalid = %v, want %v", invalid, tt.wantInvalid)
			}
			for no, r := range tt.wantInvalid {
				if invalid[no] != r {
					t.Errorf("line %d: reason %q, want %q", no, invalid[no], r)
				}
			}
			if p.Duplicates != tt.wantDup || p.NoID != tt.wantNoID {
				t.Errorf("ParseJobs() duplicates %d, no id %d; want %d, %d", p.Duplicates, p.NoID, tt.wantDup, tt.wantNoID)
			}
		})
	}
}

// Jobs with a concurrency key pass through as written; a bad key is refused before anything is
// sent, with the router's reason and words (job.Parse).
func TestParseJobsKeys(t *testing.T) {
	tests := []struct {
		name       string
		give       string
		wantReason string // "": sent as written
		wantDetail string
	}{
		{name: "a key", give: `{"type":"llm","id":"1","key":"acme","input":{"n":1}}`},
		{name: "a key of 64 characters with - . : _", give: `{"type":"llm","id":"2","key":"` + strings.Repeat("t-7.e:u_", 8) + `"}`},
		{name: "no key: the default key", give: `{"type":"llm","id":"3"}`},
		{name: "an empty key is the default key", give: `{"type":"llm","id":"4","key":""}`},
		{name: "a key with a space", give: `{"type":"llm","id":"5","key":"a b"}`,
			wantReason: "invalid_key", wantDetail: `key "a b" must be 1-64 characters of A-Z a-z 0-9 _ - . :`},
		{name: "a key with a hash", give: `{"type":"llm","id":"6","key":"a#b"}`,
			wantReason: "invalid_key", wantDetail: `key "a#b" must be 1-64 characters of A-Z a-z 0-9 _ - . :`},
		{name: "a key of 65 characters", give: `{"type":"llm","id":"7","key":"` + strings.Repeat("k", 65) + `"}`, wantReason: "invalid_key"},
		{name: "a key that is not a string", give: `{"type":"llm","id":"8","key":7}`, wantReason: "not_json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := ParseJobs(context.Background(), strings.NewReader(tt.give+"\n"), nil)
			if err != nil {
				t.Fatal(err)
			}
			if tt.wantReason == "" {
				if len(p.Invalid) != 0 || len(p.Jobs) != 1 || string(p.Jobs[0].Body) != tt.give {
					t.Errorf("ParseJobs() = %+v, want the line sent as written", p)
				}
				return
			}
			if len(p.Jobs) != 0 || len(p.Invalid) != 1 || p.Invalid[0].Reason != tt.wantReason {
				t.Fatalf("ParseJobs() = %+v, want the line refused as %s", p, tt.wantReason)
			}
			if tt.wantDetail != "" && p.Invalid[0].Detail != tt.wantDetail {
				t.Errorf("detail %q, want the router's %q", p.Invalid[0].Detail, tt.wantDetail)
			}
		})
	}
}

// A failure of the type check that is not a refusal stops the parse: the jobs cannot be judged.
func TestParseJobsCheckError(t *testing.T) {
	boom := errors.New("table unreachable")
	_, err := ParseJobs(context.Background(), strings.NewReader(`{"type":"a","id":"1"}`), func(context.Context, string) error { return boom })
	if !errors.Is(err, boom) {
		t.Errorf("ParseJobs() error = %v, want %v", err, boom)
	}
}

// A check that fails for a job given by flags names the job, not a line of a file it is not in; a
// job of a file is named by its line.
func TestParseJobCheckErrorNamesTheJob(t *testing.T) {
	boom := errors.New("table unreachable")
	check := func(context.Context, string) error { return boom }
	tests := []struct {
		name string
		give func() error
		want string
	}{
		{name: "flags", give: func() error {
			_, err := ParseJob(context.Background(), []byte(`{"type":"payments","id":"order-1"}`), check)
			return err
		}, want: "check the type of job payments/order-1: table unreachable"},
		{name: "flags without an id", give: func() error {
			_, err := ParseJob(context.Background(), []byte(`{"type":"payments"}`), check)
			return err
		}, want: "check the type of the job of type payments: table unreachable"},
		{name: "file", give: func() error {
			_, err := ParseJobs(context.Background(), strings.NewReader("\n"+`{"type":"payments","id":"order-1"}`), check)
			return err
		}, want: "check the type of line 2: table unreachable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.give(); err == nil || err.Error() != tt.want {
				t.Errorf("error = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestBatch(t *testing.T) {
	line := func(n int, size int) Line { return Line{No: n, Body: []byte(strings.Repeat("x", size))} }
	tests := []struct {
		name string
		give []Line
		want []int // entries per batch
	}{
		{name: "none", give: nil, want: nil},
		{name: "tens", give: repeat(25, func(i int) Line { return line(i, 10) }), want: []int{10, 10, 5}},
		// SQS's total per batch is 1 MiB since August 2025 (sqsbatch): ten jobs of 100 KiB fit one.
		{name: "ten of 100 KiB", give: repeat(10, func(i int) Line { return line(i, 100*1024) }), want: []int{10}},
		{name: "by size", give: repeat(5, func(i int) Line { return line(i, 300*1024) }), want: []int{3, 2}},
		{name: "one at the limit", give: []Line{line(1, sqsbatch.MaxBatchBytes), line(2, 1)}, want: []int{1, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []int
			total := 0
			for _, b := range batch(tt.give) {
				got = append(got, len(b.entries))
				size := 0
				for _, e := range b.entries {
					size += sqsbatch.Size(e)
					if l := b.lines[*e.Id]; string(l.Body) != *e.MessageBody {
						t.Errorf("entry %s is not its line", *e.Id)
					}
				}
				if size > sqsbatch.MaxBatchBytes && len(b.entries) > 1 {
					t.Errorf("batch of %d bytes", size)
				}
				total += len(b.entries)
			}
			if !slices.Equal(got, tt.want) || total != len(tt.give) {
				t.Errorf("batch() sizes = %v, want %v", got, tt.want)
			}
		})
	}
}

func repeat(n int, f func(int) Line) []Line {
	out := make([]Line, n)
	for i := range out {
		out[i] = f(i + 1)
	}
	return out
}

// sendFunc is a function-type fake of SendMessageBatch.
type sendFunc func(*sqs.SendMessageBatchInput) (*sqs.SendMessageBatchOutput, error)

func (f sendFunc) SendMessageBatch(_ context.Context, in *sqs.SendMessageBatchInput, _ ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	return f(in)
}

// SendMessage is for a batch SQS refuses as too long, which these fakes never do.
func (f sendFunc) SendMessage(context.Context, *sqs.SendMessageInput, ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	return nil, errors.New("unexpected SendMessage: the fake never refuses a batch as too long")
}

func noWait(s *sqsbatch.Sender) {
	s.Sleep = func(context.Context, time.Duration) error { return nil }
	s.NewBackOff = func() backoff.BackOff { return &backoff.ZeroBackOff{} }
}

// Send sends every job once, in parallel, retries what SQS fails for a while, and reports by line
// what still failed, with SQS's reason.
func TestSubmitterSend(t *testing.T) {
	var (
		mu       sync.Mutex
		bodies   = map[string]int{}
		tries    = map[string]int{}
		inFlight int
		peak     int
	)
	fake := sendFunc(func(in *sqs.SendMessageBatchInput) (*sqs.SendMessageBatchOutput, error) {
		mu.Lock()
		inFlight++
		peak = max(peak, inFlight)
		mu.Unlock()
		time.Sleep(time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		inFlight--
		out := &sqs.SendMessageBatchOutput{}
		for _, e := range in.Entries {
			b := *e.MessageBody
			tries[b]++
			switch {
			case strings.Contains(b, `"bad"`): // refused for good
				out.Failed = append(out.Failed, types.BatchResultErrorEntry{Id: e.Id, Code: aws.String("InvalidMessageContents"), Message: aws.String("no"), SenderFault: true})
			case strings.Contains(b, `"flaky"`) && tries[b] < 3: // throttled twice, then sent
				out.Failed = append(out.Failed, types.BatchResultErrorEntry{Id: e.Id, Code: aws.String("ThrottlingException"), Message: aws.String("slow down")})
			default:
				bodies[b]++
				out.Successful = append(out.Successful, types.SendMessageBatchResultEntry{Id: e.Id})
			}
		}
		return out, nil
	})
	var jobs []Line
	for i := range 95 {
		id := fmt.Sprint(i)
		switch i {
		case 17:
			id = "bad"
		case 42:
			id = "flaky"
		}
		jobs = append(jobs, Line{No: i + 1, Type: "a", ID: id, Body: []byte(fmt.Sprintf(`{"type":"a","id":%q}`, id))})
	}
	var progress []int
	res := Submitter{SQS: fake, QueueURL: "q", Parallel: 4, Sender: noWait}.Send(context.Background(), jobs, func(n int) { progress = append(progress, n) })

	if res.Sent != 94 || len(res.Failed) != 1 {
		t.Fatalf("Send() = %d sent, %d failed; want 94 and 1", res.Sent, len(res.Failed))
	}
	if f := res.Failed[0]; f.No != 18 || f.ID != "bad" || f.Code != "InvalidMessageContents" {
		t.Errorf("Send() failed = %+v, want line 18 with SQS's code", f)
	}
	for _, l := range jobs {
		want := 1
		if l.ID == "bad" {
			want = 0
		}
		if bodies[string(l.Body)] != want {
			t.Errorf("job %s sent %d times, want %d", l.ID, bodies[string(l.Body)], want)
		}
	}
	if tries[`{"type":"a","id":"bad"}`] != 1 {
		t.Errorf("a sender fault was tried %d times, want once", tries[`{"type":"a","id":"bad"}`])
	}
	if peak < 2 || peak > 4 {
		t.Errorf("peak batches in flight = %d, want 2-4 (Parallel 4)", peak)
	}
	if len(progress) != 10 || progress[len(progress)-1] != 95 || !slices.IsSorted(progress) {
		t.Errorf("progress = %v, want 10 rising counts ending at 95", progress)
	}
}

// A cancelled send reports what it did not send, and sends nothing more.
func TestSubmitterCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	sent := 0
	fake := sendFunc(func(in *sqs.SendMessageBatchInput) (*sqs.SendMessageBatchOutput, error) {
		mu.Lock()
		defer mu.Unlock()
		sent += len(in.Entries)
		cancel()
		out := &sqs.SendMessageBatchOutput{}
		for _, e := range in.Entries {
			out.Successful = append(out.Successful, types.SendMessageBatchResultEntry{Id: e.Id})
		}
		return out, nil
	})
	jobs := repeat(100, func(i int) Line { return Line{No: i, Body: []byte(fmt.Sprintf(`{"type":"a","id":"%d"}`, i))} })
	res := Submitter{SQS: fake, QueueURL: "q", Parallel: 1}.Send(ctx, jobs, nil)
	if res.Sent != sent || res.Sent+len(res.Failed) != 100 || res.Failed[0].Code != "Cancelled" {
		t.Errorf("Send() after cancel = %d sent (fake saw %d), %d failed (%+v)", res.Sent, sent, len(res.Failed), res.Failed[:1])
	}
}

// A priority given to the parser (submit --priority) goes into every job without one of its own,
// where the router reads it; a job's own priority wins, whatever its case; a bad one is refused
// with the router's reason and words.
func TestParseJobsPriority(t *testing.T) {
	tests := []struct {
		name     string
		priority string // the parser's; "" none
		give     string
		wantBody string // sent; "" as given
		wantPrio int    // the priority the router reads from the body sent
		wantErr  string // the line's refusal
	}{
		{name: "none given, none added", give: `{"type":"llm","id":"1"}`, wantPrio: 5},
		{name: "a name added first", priority: "high", give: `{"type":"llm","id":"1","input":{"n":1}}`,
			wantBody: `{"priority":"high","type":"llm","id":"1","input":{"n":1}}`, wantPrio: 9},
		{name: "a name in capitals, as a name", priority: "LOW", give: `{"type":"llm","id":"1"}`,
			wantBody: `{"priority":"low","type":"llm","id":"1"}`, wantPrio: 1},
		{name: "a number, as a number", priority: "7", give: ` {"type":"llm","id":"1"} `,
			wantBody: `{"priority":7,"type":"llm","id":"1"}`, wantPrio: 7},
		{name: "normal, written", priority: "normal", give: `{"type":"llm"}`, wantBody: `{"priority":"normal","type":"llm"}`, wantPrio: 5},
		{name: "an empty object", priority: "high", give: `{}`, wantBody: `{"priority":"high"}`, wantErr: "missing_type"},
		{name: "the line's own wins", priority: "high", give: `{"type":"llm","id":"1","priority":"low"}`, wantPrio: 1},
		{name: "the line's own number wins", priority: "low", give: `{"type":"llm","id":"1","priority":3}`, wantPrio: 3},
		{name: "the line's own in another case wins", priority: "low", give: `{"type":"llm","id":"1","Priority":"high"}`, wantPrio: 9},
		{name: "a null is none", priority: "high", give: `{"type":"llm","id":"1","priority":null}`,
			wantBody: `{"id":"1","priority":"high","type":"llm"}`, wantPrio: 9},
		{name: "the line's own bad one is refused", priority: "high", give: `{"type":"llm","id":"1","priority":"urgent"}`,
			wantErr: `invalid_priority: priority "urgent" must be low, normal, high or a whole number 1-9 (higher starts first)`},
		{name: "out of range", give: `{"type":"llm","id":"1","priority":10}`, wantErr: "invalid_priority"},
		{name: "not JSON stays refused", priority: "high", give: `{"type":"llm",`, wantErr: "not_json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Parser{Priority: tt.priority}.ParseJobs(context.Background(), strings.NewReader(tt.give+"\n"))
			if err != nil {
				t.Fatal(err)
			}
			if tt.wantErr != "" {
				if len(p.Jobs) != 0 || len(p.Invalid) != 1 || !strings.Contains(p.Invalid[0].Reason+": "+p.Invalid[0].Detail, tt.wantErr) {
					t.Errorf("ParseJobs() = %+v, want the line refused with %q", p, tt.wantErr)
				}
				return
			}
			if len(p.Invalid) != 0 || len(p.Jobs) != 1 {
				t.Fatalf("ParseJobs() = %+v, want one job", p)
			}
			want := tt.wantBody
			if want == "" {
				want = strings.TrimSpace(tt.give)
			}
			if got := string(p.Jobs[0].Body); got != want {
				t.Errorf("body sent %s, want %s", got, want)
			}
			j, err := job.Parse(p.Jobs[0].Body, "m-1", time.Now())
			if err != nil || j.EffectivePriority() != tt.wantPrio {
				t.Errorf("the router reads priority %d (%v), want %d", j.EffectivePriority(), err, tt.wantPrio)
			}
			// One job from flags goes the same way.
			one, err := Parser{Priority: tt.priority}.ParseJob(context.Background(), []byte(tt.give))
			if err != nil || len(one.Jobs) != 1 || string(one.Jobs[0].Body) != want {
				t.Errorf("ParseJob() = %+v, %v; want the body %s", one, err, want)
			}
		})
	}
}
