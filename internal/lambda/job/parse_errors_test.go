package job_test

import (
	"strings"
	"testing"

	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
)

// A body the router, submit or a redrive cannot read is refused with words a producer can act on,
// never the decoder's Go terms (type names, "Go value", "unmarshal").
func TestParseErrorsInUserWords(t *testing.T) {
	tests := []struct {
		name string
		give string
		want []string // all in the detail
	}{
		{name: "array", give: `[{"type":"a","id":"1"}]`, want: []string{"JSON array", `a job is a JSON object {"type","id","input"}`}},
		{name: "string", give: `"hello"`, want: []string{"JSON string", "a job is a JSON object"}},
		{name: "number", give: `42`, want: []string{"JSON number", "a job is a JSON object"}},
		{name: "type a number", give: `{"type":5,"id":"1"}`, want: []string{`"type"`, "JSON number", "must be a string"}},
		{name: "id an object", give: `{"type":"a","id":{"x":1}}`, want: []string{`"id"`, "JSON object", "must be a string"}},
		{name: "redrive a string", give: `{"type":"a","redrive":"2"}`, want: []string{`"redrive"`, "JSON string", "whole number"}},
		{name: "redrive a fraction", give: `{"type":"a","redrive":1.5}`, want: []string{`"redrive"`, "whole number"}},
		{name: "not JSON", give: `type=a`, want: []string{"not JSON", "offset"}},
		{name: "cut short", give: `{"type":"a",`, want: []string{"ends before its JSON object does"}},
		{name: "empty", give: ``, want: []string{"empty"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := job.Parse([]byte(tt.give), "x", sent)
			if err == nil {
				t.Fatalf("Parse(%s) = nil error, want a refusal", tt.give)
			}
			if job.ReasonOf(err) != job.ReasonNotJSON {
				t.Errorf("Parse(%s) reason = %q, want %q", tt.give, job.ReasonOf(err), job.ReasonNotJSON)
			}
			msg := err.Error()
			for _, leak := range []string{"Go value", "Go struct", "unmarshal", "job.Submission", "json.RawMessage", "int"} {
				if strings.Contains(msg, leak+" ") || strings.HasSuffix(msg, leak) || strings.Contains(msg, leak+")") {
					t.Errorf("Parse(%s) = %q: leaks the decoder's %q", tt.give, msg, leak)
				}
			}
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("Parse(%s) = %q, want it to say %q", tt.give, msg, w)
				}
			}
		})
	}
}
