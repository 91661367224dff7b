package job_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
)

func TestParsePriority(t *testing.T) {
	for _, tt := range []struct {
		raw  string
		want int
		ok   bool
	}{
		{"", job.DefaultPriority, true},
		{"null", job.DefaultPriority, true},
		{`"low"`, 1, true},
		{`"normal"`, 5, true},
		{`"HIGH"`, 9, true},
		{"7", 7, true},
		{`"3"`, 3, true},
		{"0", 0, false},
		{"10", 0, false},
		{"-1", 0, false},
		{"2.5", 0, false},
		{`"07"`, 0, false},
		{`"urgent"`, 0, false},
		{`{"p":1}`, 0, false},
	} {
		got, err := job.ParsePriority(json.RawMessage(tt.raw))
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("ParsePriority(%s) = %d, %v; want %d, ok %v", tt.raw, got, err, tt.want, tt.ok)
		}
		if err != nil && job.ReasonOf(err) != job.ReasonInvalidPriority {
			t.Errorf("ParsePriority(%s): reason %q, want %q", tt.raw, job.ReasonOf(err), job.ReasonInvalidPriority)
		}
	}
}

// A job's priority travels in its body (normal ones as before: no field), and a bad one is refused
// with its reason, naming the job.
func TestParseJobPriority(t *testing.T) {
	at := time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		body     string
		want     int
		reason   job.Reason
		bodyWant string
	}{
		{`{"type":"llm","id":"a","priority":"high"}`, 9, "", `"priority":9`},
		{`{"type":"llm","id":"a","priority":"normal"}`, 0, "", ""},
		{`{"type":"llm","id":"a"}`, 0, "", ""},
		{`{"type":"llm","id":"a","priority":2}`, 2, "", `"priority":2`},
		{`{"type":"llm","id":"a","priority":"soon"}`, 0, job.ReasonInvalidPriority, ""},
	} {
		j, err := job.Parse([]byte(tt.body), "m", at)
		if job.ReasonOf(err) != tt.reason || (err == nil && j.Priority != tt.want) {
			t.Errorf("Parse(%s) = priority %d, %v; want %d, reason %q", tt.body, j.Priority, err, tt.want, tt.reason)
			continue
		}
		if err != nil {
			if j.ID != "a" || j.Type != "llm" {
				t.Errorf("Parse(%s) refused job = %+v, want it named", tt.body, j)
			}
			continue
		}
		b, _ := json.Marshal(j)
		if has := contains(string(b), `"priority"`); has != (tt.bodyWant != "") || (has && !contains(string(b), tt.bodyWant)) {
			t.Errorf("body of %s = %s, want priority field %q", tt.body, b, tt.bodyWant)
		}
		if in := string(j.ExecutionInput(1, 1).MustJSON()); contains(in, `"priority"`) != (tt.bodyWant != "") {
			t.Errorf("execution input of %s = %s, want the priority only when not normal", tt.body, in)
		}
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// Waiting groups of each priority: normal keeps the group's id; others add "!{p}", which parses
// back to the type's waiting lane; a priority is never on a lane's group.
func TestPriorityGroups(t *testing.T) {
	for _, tt := range []struct {
		base string
		p    int
		want string
	}{
		{"llm-0", 0, "llm-0"},
		{"llm-0", 5, "llm-0"},
		{"llm-0", 9, "llm-0!9"},
		{"llm-w3", 1, "llm-w3!1"},
		{"llm#acme:eu", 9, "llm#acme:eu!9"},
	} {
		g := job.PriorityGroupID(tt.base, tt.p)
		if g != tt.want {
			t.Errorf("PriorityGroupID(%s, %d) = %s, want %s", tt.base, tt.p, g, tt.want)
		}
		base, p, err := job.GroupPriority(g)
		if want := max(tt.p, 0); err != nil || base != tt.base || (p != want && !(want == 0 && p == job.DefaultPriority)) {
			t.Errorf("GroupPriority(%s) = %s, %d, %v", g, base, p, err)
		}
		if typ, ln, err := job.ParseGroupID(g); err != nil || typ != "llm" || ln != job.WaitingLane {
			t.Errorf("ParseGroupID(%s) = %s, %d, %v; want llm's waiting lane", g, typ, ln, err)
		}
	}
	for _, bad := range []string{"llm-3!9", "llm-0!5", "llm-0!10", "llm-0!", "llm-0!x"} {
		if _, _, err := job.ParseGroupID(bad); err == nil {
			t.Errorf("ParseGroupID(%s) = nil error, want refused", bad)
		}
	}
}
