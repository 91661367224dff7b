package job_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
)

// nameRe is what Step Functions accepts as an execution name.
var nameRe = regexp.MustCompile(`^[A-Za-z0-9_-]{1,80}$`)

const msgID = "059f36b4-87a3-44ab-83d2-661975830a7d"

var sent = time.Date(2024, 3, 9, 10, 11, 12, 0, time.FixedZone("CET", 3600))

// sha16 is the first 16 hex digits of sha256(s), as the design names the hash in execution names.
func sha16(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:16]
}

// execInputSize is the length of the execution input the design documents,
// {"job":{"id","type","lane","attempt","submittedAt"},"input":<input>}, for a compact input.
func execInputSize(typ, id string, lane, attempt int, submitted time.Time, input string) int {
	return execInputSizeFrom(typ, id, lane, attempt, submitted, "", 0, input)
}

// execInputSizeFrom is execInputSize with the lanes-queue message id and the delivery's receive
// count the starter adds ("messageId" and "receive" after "submittedAt"; none when "" and 0).
func execInputSizeFrom(typ, id string, lane, attempt int, submitted time.Time, messageID string, receive int, input string) int {
	ts, err := submitted.UTC().MarshalJSON()
	if err != nil {
		panic(err)
	}
	mid := ""
	if messageID != "" {
		mid = fmt.Sprintf(`,"messageId":%q`, messageID)
	}
	if receive != 0 {
		mid += fmt.Sprintf(`,"receive":%d`, receive)
	}
	return len(fmt.Sprintf(`{"job":{"id":%q,"type":%q,"lane":%d,"attempt":%d,"submittedAt":%s%s},"input":%s}`,
		id, typ, lane, attempt, ts, mid, input))
}

// widestSenderBytes is what the widest sender the router may give a job adds to its execution
// input's job metadata.
var widestSenderBytes = len(`,"sender":""`) + job.MaxSenderLen

// inputOfSize returns a compact JSON object {"s":"xxx..."} of exactly n bytes (n >= 8).
func inputOfSize(n int) string {
	return `{"s":"` + strings.Repeat("x", n-8) + `"}`
}

func TestParse(t *testing.T) {
	// The widest execution input: lane up to the FIFO in-flight quota (6 digits), attempt 2 digits,
	// the longest SQS message id, the widest receive count and the widest sender.
	const widestLane, widestAttempt = 120000, 99
	overhead := execInputSizeFrom("big", "job-1", widestLane, widestAttempt, sent, widestMessageID, job.MaxReceiveForSize, "") + widestSenderBytes
	fitsWorstCase := inputOfSize(job.MaxExecutionInput - overhead)
	// With the narrowest lane and attempt the execution input is one byte over: it can never fit.
	narrow := execInputSize("big", "job-1", 1, 0, sent, "")
	overByOne := inputOfSize(job.MaxExecutionInput - narrow + 1)

	tests := []struct {
		name       string
		give       string
		giveID     string
		want       job.Job
		wantReason job.Reason
	}{
		{
			name:   "full job",
			give:   `{"type":"payments","id":"order-1","input":{"amount":10,"currency":"EUR"}}`,
			giveID: msgID,
			want:   job.Job{Type: "payments", ID: "order-1", Input: json.RawMessage(`{"amount":10,"currency":"EUR"}`)},
		},
		{
			name:   "id defaults to the message id",
			give:   `{"type":"reports","input":{"month":"2024-02"}}`,
			giveID: msgID,
			want:   job.Job{Type: "reports", ID: msgID, Input: json.RawMessage(`{"month":"2024-02"}`)},
		},
		{
			name:   "empty id defaults to the message id",
			give:   `{"type":"reports","id":""}`,
			giveID: msgID,
			want:   job.Job{Type: "reports", ID: msgID, Input: json.RawMessage(`{}`)},
		},
		{
			name:   "absent input becomes {}",
			give:   `{"type":"reports","id":"r-1"}`,
			giveID: msgID,
			want:   job.Job{Type: "reports", ID: "r-1", Input: json.RawMessage(`{}`)},
		},
		{
			name:   "null input becomes {}",
			give:   `{"type":"reports","id":"r-1","input":null}`,
			giveID: msgID,
			want:   job.Job{Type: "reports", ID: "r-1", Input: json.RawMessage(`{}`)},
		},
		{
			name:   "array input kept",
			give:   `{"type":"reports","id":"r-1","input":[1,2,3]}`,
			giveID: msgID,
			want:   job.Job{Type: "reports", ID: "r-1", Input: json.RawMessage(`[1,2,3]`)},
		},
		{
			name:   "scalar input kept",
			give:   `{"type":"reports","id":"r-1","input":"hello"}`,
			giveID: msgID,
			want:   job.Job{Type: "reports", ID: "r-1", Input: json.RawMessage(`"hello"`)},
		},
		{
			name:   "false input kept",
			give:   `{"type":"reports","id":"r-1","input":false}`,
			giveID: msgID,
			want:   job.Job{Type: "reports", ID: "r-1", Input: json.RawMessage(`false`)},
		},
		{
			name:   "unknown fields ignored, surrounding whitespace allowed",
			give:   "\n {\"type\":\"reports\",\"id\":\"r-1\",\"priority\":3}\n\t ",
			giveID: msgID,
			want:   job.Job{Type: "reports", ID: "r-1", Input: json.RawMessage(`{}`)},
		},
		{
			name:   "type of 40 characters with _",
			give:   `{"type":"` + strings.Repeat("aB3_", 10) + `","id":"x"}`,
			giveID: msgID,
			want:   job.Job{Type: strings.Repeat("aB3_", 10), ID: "x", Input: json.RawMessage(`{}`)},
		},
		{
			name:   "id of 128 characters with . and :",
			give:   `{"type":"t","id":"` + strings.Repeat("a.b:c-d_e", 14) + `ab"}`,
			giveID: msgID,
			want:   job.Job{Type: "t", ID: strings.Repeat("a.b:c-d_e", 14) + "ab", Input: json.RawMessage(`{}`)},
		},
		{
			name:   "input just under the limit at the widest lane and attempt",
			give:   `{"type":"big","id":"job-1","input":` + fitsWorstCase + `}`,
			giveID: msgID,
			want:   job.Job{Type: "big", ID: "job-1", Input: json.RawMessage(fitsWorstCase)},
		},
		{
			name:   "key of 64 characters with - . : _",
			give:   `{"type":"llm","id":"x","key":"` + strings.Repeat("t-7.e:u_", 8) + `"}`,
			giveID: msgID,
			want:   job.Job{Type: "llm", ID: "x", Key: strings.Repeat("t-7.e:u_", 8), Input: json.RawMessage(`{}`)},
		},

		{name: "key of 65 characters", give: `{"type":"t","id":"x","key":"` + strings.Repeat("k", 65) + `"}`, giveID: msgID, wantReason: job.ReasonInvalidKey},
		{name: "key with hash", give: `{"type":"t","id":"x","key":"a#b"}`, giveID: msgID, wantReason: job.ReasonInvalidKey},
		{name: "key with space", give: `{"type":"t","id":"x","key":"a b"}`, giveID: msgID, wantReason: job.ReasonInvalidKey},
		{name: "key not a string", give: `{"type":"t","id":"x","key":7}`, giveID: msgID, wantReason: job.ReasonNotJSON},

		{
			name:   "batch with size",
			give:   `{"type":"docs","id":"d1","batch":"upload-7.a:b_c","batchSize":40000}`,
			giveID: msgID,
			want:   job.Job{Type: "docs", ID: "d1", Batch: "upload-7.a:b_c", BatchSize: 40000, Input: json.RawMessage(`{}`)},
		},
		{name: "batch of 64 characters", give: `{"type":"t","id":"x","batch":"` + strings.Repeat("b", 64) + `"}`, giveID: msgID,
			want: job.Job{Type: "t", ID: "x", Batch: strings.Repeat("b", 64), Input: json.RawMessage(`{}`)}},
		{name: "batch of 65 characters", give: `{"type":"t","id":"x","batch":"` + strings.Repeat("b", 65) + `"}`, giveID: msgID, wantReason: job.ReasonInvalidBatch},
		{name: "batch with hash", give: `{"type":"t","id":"x","batch":"a#b"}`, giveID: msgID, wantReason: job.ReasonInvalidBatch},
		{name: "batch with slash", give: `{"type":"t","id":"x","batch":"a/b"}`, giveID: msgID, wantReason: job.ReasonInvalidBatch},
		{name: "batch size without batch", give: `{"type":"t","id":"x","batchSize":3}`, giveID: msgID, wantReason: job.ReasonInvalidBatch},
		{name: "batch size negative", give: `{"type":"t","id":"x","batch":"b","batchSize":-1}`, giveID: msgID, wantReason: job.ReasonInvalidBatch},
		{name: "batch size over the maximum", give: `{"type":"t","id":"x","batch":"b","batchSize":1000001}`, giveID: msgID, wantReason: job.ReasonInvalidBatch},
		{name: "batch size not a number", give: `{"type":"t","id":"x","batch":"b","batchSize":"3"}`, giveID: msgID, wantReason: job.ReasonNotJSON},

		{name: "empty body", give: ``, giveID: msgID, wantReason: job.ReasonNotJSON},
		{name: "plain text", give: `hello`, giveID: msgID, wantReason: job.ReasonNotJSON},
		{name: "truncated object", give: `{"type":"payments"`, giveID: msgID, wantReason: job.ReasonNotJSON},
		{name: "array body", give: `[{"type":"payments"}]`, giveID: msgID, wantReason: job.ReasonNotJSON},
		{name: "string body", give: `"payments"`, giveID: msgID, wantReason: job.ReasonNotJSON},
		{name: "trailing text", give: `{"type":"payments"} trailing`, giveID: msgID, wantReason: job.ReasonNotJSON},
		{name: "two objects", give: `{"type":"payments"}{"type":"reports"}`, giveID: msgID, wantReason: job.ReasonNotJSON},
		{name: "trailing number", give: `{"type":"payments"} 1`, giveID: msgID, wantReason: job.ReasonNotJSON},

		{name: "missing type", give: `{"id":"x","input":{}}`, giveID: msgID, wantReason: job.ReasonMissingType},
		{name: "empty type", give: `{"type":"","id":"x"}`, giveID: msgID, wantReason: job.ReasonMissingType},
		{name: "null type", give: `{"type":null,"id":"x"}`, giveID: msgID, wantReason: job.ReasonMissingType},
		{name: "empty object", give: `{}`, giveID: msgID, wantReason: job.ReasonMissingType},

		{name: "type of 41 characters", give: `{"type":"` + strings.Repeat("a", 41) + `"}`, giveID: msgID, wantReason: job.ReasonInvalidType},
		{name: "type with space", give: `{"type":"pay ments"}`, giveID: msgID, wantReason: job.ReasonInvalidType},
		{name: "type with dot", give: `{"type":"pay.ments"}`, giveID: msgID, wantReason: job.ReasonInvalidType},
		{name: "type with colon", give: `{"type":"pay:ments"}`, giveID: msgID, wantReason: job.ReasonInvalidType},
		{name: "type with slash", give: `{"type":"pay/ments"}`, giveID: msgID, wantReason: job.ReasonInvalidType},
		{name: "type with hash", give: `{"type":"pay#1"}`, giveID: msgID, wantReason: job.ReasonInvalidType},
		{name: "type with non-ASCII letter", give: `{"type":"paiemént"}`, giveID: msgID, wantReason: job.ReasonInvalidType},
		{name: "type with newline", give: `{"type":"pay\nments"}`, giveID: msgID, wantReason: job.ReasonInvalidType},

		{name: "id of 129 characters", give: `{"type":"t","id":"` + strings.Repeat("a", 129) + `"}`, giveID: msgID, wantReason: job.ReasonInvalidID},
		{name: "id with space", give: `{"type":"t","id":"order 1"}`, giveID: msgID, wantReason: job.ReasonInvalidID},
		{name: "id with slash", give: `{"type":"t","id":"order/1"}`, giveID: msgID, wantReason: job.ReasonInvalidID},
		{name: "id with hash", give: `{"type":"t","id":"order#1"}`, giveID: msgID, wantReason: job.ReasonInvalidID},
		{name: "id with non-ASCII", give: `{"type":"t","id":"ordér"}`, giveID: msgID, wantReason: job.ReasonInvalidID},
		{name: "no id and no message id", give: `{"type":"t"}`, giveID: "", wantReason: job.ReasonInvalidID},

		{
			name:       "input alone over 256 KiB",
			give:       `{"type":"big","id":"job-1","input":` + inputOfSize(job.MaxExecutionInput+1) + `}`,
			giveID:     msgID,
			wantReason: job.ReasonInputTooLong,
		},
		{
			name:       "execution input one byte over even at lane 1 attempt 0",
			give:       `{"type":"big","id":"job-1","input":` + overByOne + `}`,
			giveID:     msgID,
			wantReason: job.ReasonInputTooLong,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := job.Parse([]byte(tt.give), tt.giveID, sent)
			if tt.wantReason != "" {
				if err == nil {
					t.Fatalf("Parse(%.80q) = %+v, nil, want error with reason %s", tt.give, got, tt.wantReason)
				}
				if r := job.ReasonOf(err); r != tt.wantReason {
					t.Fatalf("ReasonOf(Parse(%.80q)) = %q (%v), want %q", tt.give, r, err, tt.wantReason)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse(%.80q) error = %v, want nil", tt.give, err)
			}
			tt.want.SubmittedAt = sent.UTC()
			if got.Type != tt.want.Type || got.ID != tt.want.ID || got.Attempts != 0 {
				t.Errorf("Parse(%.80q) = type %q id %q attempts %d, want type %q id %q attempts 0",
					tt.give, got.Type, got.ID, got.Attempts, tt.want.Type, tt.want.ID)
			}
			if got.Batch != tt.want.Batch || got.BatchSize != tt.want.BatchSize {
				t.Errorf("Parse(%.80q) = batch %q size %d, want batch %q size %d", tt.give, got.Batch, got.BatchSize, tt.want.Batch, tt.want.BatchSize)
			}
			if string(got.Input) != string(tt.want.Input) {
				t.Errorf("Parse(%.80q).Input = %.80s, want %.80s", tt.give, got.Input, tt.want.Input)
			}
			if !got.SubmittedAt.Equal(tt.want.SubmittedAt) || got.SubmittedAt.Location() != time.UTC {
				t.Errorf("Parse(%.80q).SubmittedAt = %v, want %v in UTC", tt.give, got.SubmittedAt, tt.want.SubmittedAt)
			}
		})
	}
}

// widestMessageID is as long as an SQS message id may be.
var widestMessageID = strings.Repeat("f", job.MaxMessageIDLen)

// An accepted job's execution input fits Step Functions' limit at every lane, attempt and receive
// count the limiter uses, with the lanes-queue message id the starter adds.
func TestParseAcceptedInputFits(t *testing.T) {
	const widestLane, widestAttempt = 120000, 99
	overhead := execInputSizeFrom("big", "job-1", widestLane, widestAttempt, sent, widestMessageID, job.MaxReceiveForSize, "") + widestSenderBytes
	for _, n := range []int{job.MaxExecutionInput - overhead, job.MaxExecutionInput - overhead - 1, 1000} {
		in := inputOfSize(n)
		j, err := job.Parse([]byte(`{"type":"big","id":"job-1","input":`+in+`}`), msgID, sent)
		if err != nil {
			t.Fatalf("Parse(input of %d bytes) error = %v, want nil", n, err)
		}
		for _, lane := range []int{1, 9, 10000, widestLane} {
			for _, attempt := range []int{0, 1, widestAttempt} {
				for _, receive := range []int{0, 1, job.MaxReceiveForSize} {
					x := j.ExecutionInput(lane, attempt)
					x.Job.MessageID, x.Job.Receive = widestMessageID, receive
					b := x.MustJSON()
					x.Job.Sender = strings.Repeat("s", job.MaxSenderLen) // as the router may name it
					if wide := x.MustJSON(); len(wide) > job.MaxExecutionInput {
						t.Errorf("len(ExecutionInput(%d, %d), receive %d, widest sender) = %d for input of %d bytes, want <= %d", lane, attempt, receive, len(wide), n, job.MaxExecutionInput)
					}
					if len(b) > job.MaxExecutionInput {
						t.Errorf("len(ExecutionInput(%d, %d), receive %d) = %d for input of %d bytes, want <= %d", lane, attempt, receive, len(b), n, job.MaxExecutionInput)
					}
					if want := execInputSizeFrom("big", "job-1", lane, attempt, sent, widestMessageID, receive, in); len(b) != want {
						t.Errorf("len(ExecutionInput(%d, %d), receive %d) = %d, want %d (the documented shape)", lane, attempt, receive, len(b), want)
					}
				}
			}
		}
	}
}

func TestExecutionInputShape(t *testing.T) {
	j, err := job.Parse([]byte(`{"type":"payments","id":"order-1","input":{"amount":10}}`), msgID, sent)
	if err != nil {
		t.Fatalf("Parse error = %v", err)
	}
	got := string(j.ExecutionInput(3, 2).MustJSON())
	want := `{"job":{"id":"order-1","type":"payments","lane":3,"attempt":2,"submittedAt":"2024-03-09T09:11:12Z"},"input":{"amount":10}}`
	if got != want {
		t.Errorf("ExecutionInput(3, 2).MustJSON() = %s, want %s", got, want)
	}
}

func TestExecutionName(t *testing.T) {
	id76 := strings.Repeat("a", 76)
	id77 := strings.Repeat("a", 77)
	long := strings.Repeat("x", 128)
	key64 := strings.Repeat("k", 64)
	tests := []struct {
		name        string
		giveType    string
		giveKey     string
		giveID      string
		giveAttempt int
		want        string
	}{
		{name: "plain", giveType: "payments", giveID: "order-1", giveAttempt: 1, want: "payments-order-1-1"},
		// A job is its type, key and id: a keyed job's name hashes its key and id after "__k".
		{name: "keyed", giveType: "payments", giveKey: "acme", giveID: "order-1", giveAttempt: 1, want: "payments-order-1__k" + sha16("acme/order-1") + "-1"},
		{name: "another key, same id", giveType: "payments", giveKey: "beta", giveID: "order-1", giveAttempt: 1, want: "payments-order-1__k" + sha16("beta/order-1") + "-1"},
		{name: "keyed, id not name-safe", giveType: "t", giveKey: "acme", giveID: "a.b:c", giveAttempt: 2, want: "t-a_b_c__k" + sha16("acme/a.b:c") + "-2"},
		{
			name: "longest type, id and key", giveType: strings.Repeat("T", 40), giveKey: key64, giveID: long, giveAttempt: 12,
			// 80-40-1-2-17-3 = 17 characters of the id.
			want: strings.Repeat("T", 40) + "-" + strings.Repeat("x", 17) + "__k" + sha16(key64+"/"+long) + "-12",
		},
		{name: "plain attempt 0", giveType: "payments", giveID: "order_1", giveAttempt: 0, want: "payments-order_1-0"},
		{name: "plain uuid", giveType: "reports", giveID: msgID, giveAttempt: 3, want: "reports-" + msgID + "-3"},
		{name: "plain exactly 80", giveType: "t", giveID: id76, giveAttempt: 0, want: "t-" + id76 + "-0"},
		// 81 characters in plain form: room for the prefix is 80-len("t-")-len("__")-16-len("-0") = 58.
		{name: "81 becomes hashed", giveType: "t", giveID: id77, giveAttempt: 0, want: "t-" + strings.Repeat("a", 58) + "__" + sha16(id77) + "-0"},
		{name: "dot and colon replaced", giveType: "t", giveID: "a.b:c", giveAttempt: 2, want: "t-a_b_c__" + sha16("a.b:c") + "-2"},
		{name: "double underscore is hashed", giveType: "t", giveID: "a__b", giveAttempt: 1, want: "t-a__b__" + sha16("a__b") + "-1"},
		{
			name: "longest type and id", giveType: strings.Repeat("T", 40), giveID: long, giveAttempt: 12,
			// 80-40-1-2-16-3 = 18 characters of the id.
			want: strings.Repeat("T", 40) + "-" + strings.Repeat("x", 18) + "__" + sha16(long) + "-12",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := job.RunName(tt.giveType, "", tt.giveKey, tt.giveID, 0, tt.giveAttempt)
			if got != tt.want {
				t.Errorf("RunName(%q, %q, %q, 0, %d) = %q, want %q", tt.giveType, tt.giveKey, tt.giveID, tt.giveAttempt, got, tt.want)
			}
			if !nameRe.MatchString(got) {
				t.Errorf("RunName(%q, %q, %q, 0, %d) = %q (%d characters), want 1-80 of [A-Za-z0-9_-]", tt.giveType, tt.giveKey, tt.giveID, tt.giveAttempt, got, len(got))
			}
		})
	}
}

func TestExecutionNameDistinct(t *testing.T) {
	prefix := strings.Repeat("customer-42.invoice:", 6) // 120 characters: every id below is shortened
	tests := []struct {
		name     string
		giveType string
		giveA    string
		giveB    string
	}{
		{name: "long ids sharing a prefix", giveType: "reports", giveA: prefix + "0001", giveB: prefix + "0002"},
		{name: "long ids differing first", giveType: "reports", giveA: "a" + prefix, giveB: "b" + prefix},
		{name: "same after sanitizing", giveType: "t", giveA: "a.b", giveB: "a:b"},
		{name: "unsafe against its sanitized twin", giveType: "t", giveA: "a.b", giveB: "a_b"},
		{name: "max length ids differing last", giveType: strings.Repeat("T", 40), giveA: strings.Repeat("i", 127) + "1", giveB: strings.Repeat("i", 127) + "2"},
		{name: "plain ids", giveType: "t", giveA: "1", giveB: "2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := job.ExecutionName(tt.giveType, tt.giveA, 1)
			b := job.ExecutionName(tt.giveType, tt.giveB, 1)
			if a == b {
				t.Errorf("ExecutionName(%q, %q, 1) = ExecutionName(%q, %q, 1) = %q, want different names", tt.giveType, tt.giveA, tt.giveType, tt.giveB, a)
			}
			if again := job.ExecutionName(tt.giveType, tt.giveA, 1); again != a {
				t.Errorf("ExecutionName(%q, %q, 1) = %q then %q, want the same name every time", tt.giveType, tt.giveA, a, again)
			}
			if next := job.ExecutionName(tt.giveType, tt.giveA, 2); next == a {
				t.Errorf("ExecutionName(%q, %q, 2) = %q, the same as attempt 1; want a name per attempt", tt.giveType, tt.giveA, next)
			}
		})
	}
}

func FuzzExecutionName(f *testing.F) {
	f.Add("payments", "order-1", "order-2", 1)
	f.Add("t", strings.Repeat("a", 77), strings.Repeat("a", 76), 0)
	f.Add(strings.Repeat("T", 40), strings.Repeat("x.", 64), strings.Repeat("x:", 64), 99)
	f.Add("a-b", "c.d", "c:d", -1)
	f.Add("x", msgID, msgID+"1", math.MaxInt)
	f.Fuzz(func(t *testing.T, typ, id, other string, attempt int) {
		if job.ValidateType(typ) != nil || job.ValidateID(id) != nil {
			return // only valid jobs get execution names
		}
		got := job.ExecutionName(typ, id, attempt)
		if !nameRe.MatchString(got) {
			t.Fatalf("ExecutionName(%q, %q, %d) = %q (%d characters), want 1-80 of [A-Za-z0-9_-]", typ, id, attempt, got, len(got))
		}
		if again := job.ExecutionName(typ, id, attempt); again != got {
			t.Fatalf("ExecutionName(%q, %q, %d) = %q then %q, want stable", typ, id, attempt, got, again)
		}
		suffix := "-" + strconv.Itoa(attempt)
		if !strings.HasPrefix(got, typ+"-") || !strings.HasSuffix(got, suffix) {
			t.Fatalf("ExecutionName(%q, %q, %d) = %q, want %q...%q", typ, id, attempt, got, typ+"-", suffix)
		}
		plain := typ + "-" + id + suffix
		if len(plain) <= 80 && nameRe.MatchString(plain) && got != plain {
			t.Fatalf("ExecutionName(%q, %q, %d) = %q, want the plain form %q", typ, id, attempt, got, plain)
		}
		if other != id && job.ValidateID(other) == nil {
			if o := job.ExecutionName(typ, other, attempt); o == got {
				t.Fatalf("ExecutionName(%q, %q, %d) = ExecutionName(%q, %q, %d) = %q, want different names", typ, id, attempt, typ, other, attempt, got)
			}
		}
	})
}

func TestDedupID(t *testing.T) {
	id128 := strings.Repeat("d", 128)
	digest := func(s string) string { sum := sha256.Sum256([]byte(s)); return hex.EncodeToString(sum[:]) }
	tests := []struct {
		name        string
		giveType    string
		giveKey     string
		giveSender  string
		giveID      string
		giveRedrive int
		want        string
	}{
		{name: "plain", giveType: "payments", giveID: "order-1", want: "payments-order-1"},
		// A job is its type, key and id: another key's job with the same id is not deduplicated away.
		{name: "keyed", giveType: "payments", giveKey: "acme", giveID: "order-1", want: "payments-order-1~kacme"},
		{name: "another key, same id", giveType: "payments", giveKey: "beta", giveID: "order-1", want: "payments-order-1~kbeta"},
		{name: "keyed, redriven", giveType: "payments", giveKey: "acme", giveID: "order-1", giveRedrive: 2, want: "payments-order-1~kacme~g2"},
		// A job is its type, sender, key and id: another sender's job with the same key and id is not
		// deduplicated away; a job without a sender keeps the id it had before senders.
		{name: "sender", giveType: "payments", giveSender: "AROAACME", giveKey: "acme", giveID: "order-1", want: "payments-order-1~kacme~sAROAACME"},
		{name: "another sender", giveType: "payments", giveSender: "AROAMALLORY", giveKey: "acme", giveID: "order-1", want: "payments-order-1~kacme~sAROAMALLORY"},
		{name: "sender, no key, redriven", giveType: "payments", giveSender: "123456789012:bob", giveID: "order-1", giveRedrive: 1, want: "payments-order-1~s123456789012:bob~g1"},
		{name: "on behalf of", giveType: "payments", giveSender: "AROAOPS>AROAACME", giveKey: "acme", giveID: "order-1", giveRedrive: 1, want: "payments-order-1~kacme~sAROAOPS>AROAACME~g1"},
		{name: "sender makes it 129", giveType: "t", giveSender: "AROA", giveID: strings.Repeat("d", 121), want: "t#" + digest("t-"+strings.Repeat("d", 121)+"~sAROA")},
		{name: "key makes it 129", giveType: "t", giveKey: "k", giveID: strings.Repeat("d", 124), want: "t#" + digest("t-"+strings.Repeat("d", 124)+"~kk")},
		{name: "plain with . and :", giveType: "payments", giveID: "a.b:c", want: "payments-a.b:c"},
		{name: "redriven", giveType: "payments", giveID: "order-1", giveRedrive: 1, want: "payments-order-1~g1"},
		{name: "redriven often", giveType: "payments", giveID: "order-1", giveRedrive: 999, want: "payments-order-1~g999"},
		{name: "exactly 128", giveType: "t", giveID: strings.Repeat("d", 126), want: "t-" + strings.Repeat("d", 126)},
		{name: "129 becomes hashed", giveType: "t", giveID: id128[:127], want: "t#" + digest("t-"+id128[:127])},
		{name: "redrive makes it 129", giveType: "t", giveID: strings.Repeat("d", 124), giveRedrive: 1, want: "t#" + digest("t-"+strings.Repeat("d", 124)+"~g1")},
		{name: "longest type and id", giveType: strings.Repeat("T", 40), giveID: id128, want: strings.Repeat("T", 40) + "#" + digest(strings.Repeat("T", 40)+"-"+id128)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := job.DedupID(tt.giveType, tt.giveSender, tt.giveKey, tt.giveID, tt.giveRedrive)
			if got != tt.want {
				t.Errorf("DedupID(%q, %q, %q, %d) = %q, want %q", tt.giveType, tt.giveKey, tt.giveID, tt.giveRedrive, got, tt.want)
			}
			if len(got) > 128 {
				t.Errorf("len(DedupID(%q, %q, %d)) = %d, want <= 128", tt.giveType, tt.giveID, tt.giveRedrive, len(got))
			}
		})
	}
}

// The copies the starter sends name the message they come from, so a job moved or bound twice with
// the same attempts (in two messages) is never dropped as a copy of itself.
func TestCopyDedupIDs(t *testing.T) {
	tests := []struct {
		name string
		got  string
		want string
	}{
		{name: "moved", got: job.MovedDedupID("payments", "", "", "order-1", 0, 3, "m-1"), want: "payments-order-1~moved~3~m-1"},
		{name: "moved, redriven", got: job.MovedDedupID("payments", "", "", "order-1", 4, 3, "m-1"), want: "payments-order-1~moved~3~m-1~g4"},
		{name: "moved to wait", got: job.MovedDedupID("payments", "", "", "order-1", 0, job.WaitingLane, "m-1"), want: "payments-order-1~moved~0~m-1"},
		{name: "bound", got: job.BoundDedupID("payments", "", "", "order-1", 0, 7, "m-1", 1741944420000000001), want: "payments-order-1~bound~7~m-1~1741944420000000001~g0"},
		{name: "bound, redriven", got: job.BoundDedupID("payments", "", "", "order-1", 2, 7, "m-1", 1741944420000000001), want: "payments-order-1~bound~7~m-1~1741944420000000001~g2"},
		{name: "bound again", got: job.BoundDedupID("payments", "", "", "order-1", 0, 7, "m-1", 1741944480000000000), want: "payments-order-1~bound~7~m-1~1741944480000000000~g0"},
		{name: "moved, keyed", got: job.MovedDedupID("payments", "", "acme", "order-1", 1, 3, "m-1"), want: "payments-order-1~kacme~moved~3~m-1~g1"},
		{name: "bound, keyed", got: job.BoundDedupID("payments", "", "acme", "order-1", 0, 7, "m-1", 1741944420000000001), want: "payments-order-1~kacme~bound~7~m-1~1741944420000000001~g0"},
		{name: "moved, sender", got: job.MovedDedupID("payments", "AROAACME", "acme", "order-1", 1, 3, "m-1"), want: "payments-order-1~kacme~sAROAACME~moved~3~m-1~g1"},
		{name: "bound, sender", got: job.BoundDedupID("payments", "AROAACME", "", "order-1", 0, 7, "m-1", 1741944420000000001), want: "payments-order-1~sAROAACME~bound~7~m-1~1741944420000000001~g0"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.name, tt.got, tt.want)
		}
	}
}

// dedupCase is one id derived from a job: its run (kind 0), a moved copy (1) or a bound copy (2).
type dedupCase struct {
	typ, sender, key, id        string
	redrive, kind, to, attempts int
}

func (c dedupCase) dedupID() string {
	switch c.kind {
	case 1:
		return job.MovedDedupID(c.typ, c.sender, c.key, c.id, c.redrive, c.to, "m-"+strconv.Itoa(c.attempts))
	case 2:
		return job.BoundDedupID(c.typ, c.sender, c.key, c.id, c.redrive, c.to, "m-"+strconv.Itoa(c.attempts), int64(c.attempts))
	}
	return job.DedupID(c.typ, c.sender, c.key, c.id, c.redrive)
}

// same says whether two cases name the same thing (a run has no lane or attempts; a bind no attempts).
func (c dedupCase) same(o dedupCase) bool {
	if c.typ != o.typ || c.sender != o.sender || c.key != o.key || c.id != o.id || c.redrive != o.redrive || c.kind != o.kind {
		return false
	}
	switch c.kind {
	case 1:
		return c.to == o.to && c.attempts == o.attempts
	case 2:
		return c.to == o.to && c.attempts == o.attempts // attempts stand for the message id here
	}
	return true
}

func (c dedupCase) valid() bool {
	return job.ValidateType(c.typ) == nil && job.ValidateSender(c.sender) == nil && job.ValidateKey(c.key) == nil && job.ValidateID(c.id) == nil && c.redrive >= 0 && c.redrive <= 999 &&
		c.kind >= 0 && c.kind <= 2 && c.to >= 0 && c.to <= 120000 && c.attempts >= 0 && c.attempts <= 1000
}

// No two distinct (type, key, id, redrive) share a deduplication id, and no copy shares one with a run or
// another copy: among ids of every length around the hashing threshold, ids that are the digests of
// other ids, and every generation and copy of each.
func TestDedupIDNeverShared(t *testing.T) {
	digest := func(s string) string { sum := sha256.Sum256([]byte(s)); return hex.EncodeToString(sum[:]) }
	types := []string{"t", "payments", strings.Repeat("T", 40)}
	var ids []string
	for _, n := range []int{1, 60, 80, 86, 87, 88, 100, 119, 120, 121, 124, 125, 126, 127, 128} {
		ids = append(ids, strings.Repeat("d", n), strings.Repeat("d", n-1)+"e")
	}
	for _, typ := range types {
		for _, id := range []string{strings.Repeat("d", 127), strings.Repeat("d", 128), strings.Repeat("x", 128)} {
			// The digests this package ever hashed such ids to, old and new forms: all valid ids.
			ids = append(ids, digest(id), digest(typ+"-"+id), digest(typ+"-"+id+"~g1"))
		}
	}
	ids = append(ids, "a.b:c", "a-b", "a_b", "g1", "a-g1", "1")
	// Keys that look like the parts after them: a generation, a copy's word, a lane.
	keys := []string{"", "acme", "g1", "moved", "bound", "1", "a-b", strings.Repeat("k", 64)}
	// Senders that look like keys and the parts after them, and a sender on another's behalf.
	senders := []string{"", "AROAACME", "acme", "kacme", "g1", "123456789012:bob", "AROAOPS>AROAACME", strings.Repeat("S", 128)}
	seen := map[string]dedupCase{}
	for _, typ := range types {
		for _, id := range ids {
			for _, key := range keys {
				for _, redrive := range []int{0, 1, 2, 10, 999} {
					for _, sender := range senders {
						for _, c := range []dedupCase{
							{typ: typ, sender: sender, key: key, id: id, redrive: redrive},
							{typ: typ, sender: sender, key: key, id: id, redrive: redrive, kind: 1, to: 1, attempts: 0},
							{typ: typ, sender: sender, key: key, id: id, redrive: redrive, kind: 1, to: 12, attempts: 3},
							{typ: typ, sender: sender, key: key, id: id, redrive: redrive, kind: 1, to: 1, attempts: 23},
							{typ: typ, sender: sender, key: key, id: id, redrive: redrive, kind: 2, to: 1},
							{typ: typ, sender: sender, key: key, id: id, redrive: redrive, kind: 2, to: 120000},
						} {
							if !c.valid() {
								t.Fatalf("case %+v is not valid", c)
							}
							d := c.dedupID()
							if len(d) > 128 || len(d) == 0 {
								t.Errorf("%+v: dedup id %q has %d characters, want 1-128", c, d, len(d))
							}
							if prev, ok := seen[d]; ok && !prev.same(c) {
								t.Fatalf("%+v and %+v share the deduplication id %q", prev, c, d)
							}
							seen[d] = c
						}
					}
				}
			}
		}
	}
}

func FuzzDedupIDNeverShared(f *testing.F) {
	long := strings.Repeat("x", 128)
	sum := sha256.Sum256([]byte(long))
	f.Add("t", long, 0, 0, 0, 0, "t", hex.EncodeToString(sum[:]), 0, 0, 0, 0)
	f.Add("payments", "order-1", 0, 0, 0, 0, "payments", "order-1", 1, 0, 0, 0)
	f.Add("payments", "order-1", 1, 1, 3, 2, "payments", "order-1", 0, 1, 3, 2)
	f.Add("payments", "order-1", 0, 1, 3, 2, "payments", "order-1", 0, 2, 3, 0)
	f.Add("a", "b-c", 0, 0, 0, 0, "a", "b-c", 0, 0, 0, 0)
	f.Fuzz(func(t *testing.T, typA, idA string, rA, kA, toA, atA int, typB, idB string, rB, kB, toB, atB int) {
		a := dedupCase{typ: typA, id: idA, redrive: rA, kind: kA, to: toA, attempts: atA}
		b := dedupCase{typ: typB, id: idB, redrive: rB, kind: kB, to: toB, attempts: atB}
		if !a.valid() || !b.valid() {
			return
		}
		da, db := a.dedupID(), b.dedupID()
		if len(da) > 128 || len(db) > 128 {
			t.Fatalf("dedup ids %q, %q: over 128 characters", da, db)
		}
		if da == db && !a.same(b) {
			t.Fatalf("%+v and %+v share the deduplication id %q", a, b, da)
		}
	})
}

func TestGroupIDRoundTrip(t *testing.T) {
	tests := []struct {
		name     string
		giveType string
		giveLane int
		want     string
	}{
		{name: "simple", giveType: "payments", giveLane: 1, want: "payments-1"},
		{name: "type with hyphen", giveType: "monthly-reports", giveLane: 12, want: "monthly-reports-12"},
		{name: "type ending in hyphen and digit", giveType: "v-2", giveLane: 3, want: "v-2-3"},
		{name: "type ending in hyphen", giveType: "a-", giveLane: 5, want: "a--5"},
		{name: "type of digits", giveType: "42", giveLane: 7, want: "42-7"},
		{name: "waiting group", giveType: "payments", giveLane: job.WaitingLane, want: "payments-0"},
		{name: "key group", giveType: "llm", giveLane: job.WaitingLane, want: "llm#t-7.eu"},
		{name: "widest lane", giveType: strings.Repeat("t", 40), giveLane: 120000, want: strings.Repeat("t", 40) + "-120000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := job.GroupID(tt.giveType, tt.giveLane)
			if k, ok := strings.CutPrefix(tt.want, tt.giveType+"#"); ok {
				g = job.KeyGroupID(tt.giveType, k)
			}
			if g != tt.want {
				t.Fatalf("GroupID(%q, %d) = %q, want %q", tt.giveType, tt.giveLane, g, tt.want)
			}
			if len(g) > 128 {
				t.Errorf("len(GroupID(%q, %d)) = %d, want <= 128 (SQS MessageGroupId)", tt.giveType, tt.giveLane, len(g))
			}
			typ, lane, err := job.ParseGroupID(g)
			if err != nil || typ != tt.giveType || lane != tt.giveLane {
				t.Errorf("ParseGroupID(%q) = %q, %d, %v, want %q, %d, nil", g, typ, lane, err, tt.giveType, tt.giveLane)
			}
		})
	}
}

// A type's later waiting groups parse as its waiting lane; the first keeps the form it had when a
// type had one, so jobs routed before several existed are still bound.
func TestWaitingGroupID(t *testing.T) {
	for k, want := range []string{"payments-0", "payments-w1", "payments-w2"} {
		g := job.WaitingGroupID("payments", k)
		if g != want {
			t.Errorf("WaitingGroupID(payments, %d) = %q, want %q", k, g, want)
		}
		typ, lane, err := job.ParseGroupID(g)
		if err != nil || typ != "payments" || lane != job.WaitingLane {
			t.Errorf("ParseGroupID(%q) = %q, %d, %v, want payments, %d, nil", g, typ, lane, err, job.WaitingLane)
		}
	}
}

func TestParseGroupIDBad(t *testing.T) {
	for _, give := range []string{"payments-w0", "payments-w", "payments-w01", "payments-wx", "", "payments", "-1", "payments-", "payments-x", "payments-00", "payments-01", "payments-1.5", "payments-1 ", "payments-1a"} {
		t.Run(give, func(t *testing.T) {
			typ, lane, err := job.ParseGroupID(give)
			if err == nil {
				t.Errorf("ParseGroupID(%q) = %q, %d, nil, want error", give, typ, lane)
			}
		})
	}
}

func TestReasonOf(t *testing.T) {
	refused := &job.Error{Reason: job.ReasonInvalidID, Detail: "bad id"}
	tests := []struct {
		name string
		give error
		want job.Reason
	}{
		{name: "nil", give: nil, want: ""},
		{name: "other error", give: errors.New("timeout"), want: ""},
		{name: "job error", give: refused, want: job.ReasonInvalidID},
		{name: "wrapped job error", give: fmt.Errorf("route message 1: %w", refused), want: job.ReasonInvalidID},
		{name: "from Parse", give: func() error { _, err := job.Parse([]byte(`{}`), msgID, sent); return err }(), want: job.ReasonMissingType},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := job.ReasonOf(tt.give); got != tt.want {
				t.Errorf("ReasonOf(%v) = %q, want %q", tt.give, got, tt.want)
			}
		})
	}
}

// Jobs of different types, or a plain id crafted to look like another id's shortened name, never
// share an execution name (a shared name would make the starter take one job for the other).
func TestExecutionNameDistinctAcrossTypes(t *testing.T) {
	tests := []struct{ typeA, idA, typeB, idB string }{
		{"report", "daily-1", "report_daily", "1"},
		{"a", "b-c", "a_b", "c"},
		{"a", "b.c", "a", "b_c__" + sha16("b.c")},
		{"a", "b.c", "a", "b_c_" + sha16("b.c")},
	}
	for _, tt := range tests {
		a, b := job.ExecutionName(tt.typeA, tt.idA, 1), job.ExecutionName(tt.typeB, tt.idB, 1)
		if a == b {
			t.Errorf("ExecutionName(%q, %q, 1) = ExecutionName(%q, %q, 1) = %q, want different names", tt.typeA, tt.idA, tt.typeB, tt.idB, a)
		}
	}
}

func TestParseRejectsTrailingClosers(t *testing.T) {
	for _, give := range []string{`{"type":"payments"}}`, `{"type":"payments"}]`, `{"type":"payments"}]]} and more`} {
		got, err := job.Parse([]byte(give), msgID, sent)
		if r := job.ReasonOf(err); r != job.ReasonNotJSON {
			t.Errorf("Parse(%q) = %+v, %v, want reason %s", give, got, err, job.ReasonNotJSON)
		}
	}
}

// A refused job keeps what is known of it, so its dead letter can name it.
func TestParseRefusalKeepsTypeAndID(t *testing.T) {
	big := `{"type":"reports","id":"r-1","input":{"b":"` + strings.Repeat("x", job.MaxExecutionInput) + `"}}`
	got, err := job.Parse([]byte(big), msgID, sent)
	if job.ReasonOf(err) != job.ReasonInputTooLong || got.Type != "reports" || got.ID != "r-1" {
		t.Errorf("Parse(oversized) = type %q id %q, %v; want reports r-1, %s", got.Type, got.ID, err, job.ReasonInputTooLong)
	}
	got, err = job.Parse([]byte(`{"type":"reports","id":"bad id"}`), msgID, sent)
	if job.ReasonOf(err) != job.ReasonInvalidID || got.Type != "reports" {
		t.Errorf("Parse(bad id) = type %q, %v; want reports, %s", got.Type, err, job.ReasonInvalidID)
	}
}

// An id too long for its deduplication id is hashed; the hashed form must never equal the
// deduplication id of another valid id (for example the hex digest itself, a valid id).
func TestDedupIDHashedFormIsNoOtherIDs(t *testing.T) {
	long := strings.Repeat("x", 128)
	sum := sha256.Sum256([]byte(long))
	digest := hex.EncodeToString(sum[:])
	if err := job.ValidateID(digest); err != nil {
		t.Fatalf("the digest %q is not a valid id (%v): the test would prove nothing", digest, err)
	}
	if a, b := job.DedupID("t", "", "", long, 0), job.DedupID("t", "", "", digest, 0); a == b {
		t.Errorf("DedupID(t, %q...) = DedupID(t, %q) = %q, want different ids", long[:10], digest, a)
	}
}

// A dead letter's body, sent back to the general queue, is the same job of the same batch: a job
// redriven after its batch closed is reported in that batch as late, never counted in none.
func TestResubmissionKeepsTheBatch(t *testing.T) {
	j, err := job.Parse([]byte(`{"type":"docs","id":"d-1","key":"acme","priority":"high","batch":"up-1","batchSize":40,"input":{"x":1}}`), msgID, sent)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(j.Resubmission(3))
	if err != nil {
		t.Fatal(err)
	}
	back, err := job.Parse(b, "other-message", sent)
	if err != nil {
		t.Fatalf("Parse(%s) = %v", b, err)
	}
	if back.ID != "d-1" || back.Key != "acme" || back.Priority != job.HighPriority || back.Batch != "up-1" || back.BatchSize != 40 || back.Redrive != 3 || string(back.Input) != `{"x":1}` {
		t.Errorf("resubmitted job = %+v from %s, want d-1 acme high up-1/40 redrive 3", back, b)
	}
}

// Step Functions names an execution after its state machine and its own name, whatever version or
// alias started it: StartExecution takes a version or alias ARN (arn:...:stateMachine:NAME:3,
// arn:...:stateMachine:NAME:PROD) and runs that version, and the execution it makes is
// arn:...:execution:NAME:EXEC, with the version or alias in DescribeExecution's
// stateMachineVersionArn and stateMachineAliasArn. An ARN that kept the qualifier
// (...:execution:NAME:3:EXEC) names no execution: status events never match the lease, the sweep
// describes an execution that does not exist, and a last attempt's input cannot be read.
func TestExecutionArn(t *testing.T) {
	const (
		sm   = "arn:aws:states:us-east-1:123456789012:stateMachine:work"
		exec = "arn:aws:states:us-east-1:123456789012:execution:work:reports-r-1-1"
	)
	tests := []struct {
		name, give, wantSM, want string
	}{
		{name: "unqualified", give: sm, wantSM: sm, want: exec},
		{name: "version", give: sm + ":3", wantSM: sm, want: exec},
		{name: "alias", give: sm + ":prod", wantSM: sm, want: exec},
		{name: "alias of another partition", give: "arn:aws-cn:states:cn-north-1:123456789012:stateMachine:work:PROD_2-b",
			wantSM: "arn:aws-cn:states:cn-north-1:123456789012:stateMachine:work",
			want:   "arn:aws-cn:states:cn-north-1:123456789012:execution:work:reports-r-1-1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := job.ExecutionArn(tt.give, "reports-r-1-1"); got != tt.want {
				t.Errorf("ExecutionArn(%q) = %q, want %q", tt.give, got, tt.want)
			}
			if got := job.UnqualifiedStateMachine(tt.give); got != tt.wantSM {
				t.Errorf("UnqualifiedStateMachine(%q) = %q, want %q", tt.give, got, tt.wantSM)
			}
			if got := job.StateMachineOf(tt.want); got != tt.wantSM {
				t.Errorf("StateMachineOf(%q) = %q, want %q", tt.want, got, tt.wantSM)
			}
		})
	}
}

// Claims recorded before versions and aliases were handled hold execution ARNs with the qualifier
// in them; read back, they name the execution Step Functions made.
func TestUnqualifiedExecution(t *testing.T) {
	const exec = "arn:aws:states:us-east-1:123456789012:execution:work:reports-r-1-1"
	tests := []struct {
		name, give, want string
	}{
		{name: "as Step Functions names it", give: exec, want: exec},
		{name: "version kept", give: "arn:aws:states:us-east-1:123456789012:execution:work:3:reports-r-1-1", want: exec},
		{name: "alias kept", give: "arn:aws:states:us-east-1:123456789012:execution:work:prod:reports-r-1-1", want: exec},
		{name: "a Map Run's child", give: "arn:aws:states:us-east-1:123456789012:execution:work/map:0e5b", want: "arn:aws:states:us-east-1:123456789012:execution:work/map:0e5b"},
		{name: "not an execution", give: "arn:aws:states:us-east-1:123456789012:stateMachine:work:prod", want: "arn:aws:states:us-east-1:123456789012:stateMachine:work:prod"},
		{name: "empty", give: "", want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := job.UnqualifiedExecution(tt.give); got != tt.want {
				t.Errorf("UnqualifiedExecution(%q) = %q, want %q", tt.give, got, tt.want)
			}
		})
	}
}
