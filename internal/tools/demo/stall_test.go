package demo

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/tools/local/observe"
	"github.com/sfnlimit/sfnlimit/internal/tools/local/stack"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

func onLane(ln int, x observe.Execution) observe.Execution { x.Job.Lane = ln; return x }

func exec(typ, id string, attempt int, submitted, start, end float64) observe.Execution {
	return observe.Execution{
		Name: typ + "-" + id, Status: "SUCCEEDED", Start: at(start), WorkEnd: at(end), Stop: at(end),
		Job: job.Meta{Type: typ, ID: id, Attempt: attempt, SubmittedAt: at(submitted)},
	}
}

// A stall is a job waiting while its type had a free lane: the time a batch spends waiting out a
// visibility timeout after a router timeout. Jobs that wait because every lane is busy are the
// limiter working, not a stall.
func TestLongestStall(t *testing.T) {
	limits := map[string]int{"a": 2, "b": 1, "c": 3}
	tests := []struct {
		name      string
		give      []observe.Execution
		noPool    bool
		wantType  string
		wantAbout float64 // seconds; 0: no stall at all
	}{
		{
			name: "router timeout: a job waits 57 s with both lanes free",
			give: []observe.Execution{
				onLane(1, exec("a", "1", 1, 0, 0.3, 2)),
				onLane(2, exec("a", "2", 1, 1, 58, 59)),
			},
			wantType: "a", wantAbout: 57,
		},
		{
			name: "every lane busy: waiting is the limit at work",
			give: []observe.Execution{
				onLane(1, exec("b", "1", 1, 0, 0.2, 40)),
				onLane(1, exec("b", "2", 1, 1, 40.3, 41)),
				onLane(1, exec("b", "3", 1, 1, 41.2, 42)),
			},
			wantType: "b", wantAbout: 0.3,
		},
		{
			name: "a retry that waits with a lane free counts",
			give: []observe.Execution{
				onLane(1, exec("b", "1", 1, 0, 0.2, 1)),
				onLane(1, exec("b", "1", 2, 0, 31, 32)),
			},
			wantType: "b", wantAbout: 30,
		},
		{
			// A busy machine: the type never has all three lanes working at once (handovers and
			// binds take a moment, and a random job bound to a busy lane waits for it), yet it starts
			// a job every 3 s. Slow, not stalled: the longest stretch is between two starts.
			name: "lanes short but starting jobs: no long stall",
			give: []observe.Execution{
				onLane(1, exec("c", "1", 1, 0, 0.2, 30)), onLane(2, exec("c", "2", 1, 0, 3, 5)), onLane(2, exec("c", "3", 1, 0, 6, 8)),
				onLane(2, exec("c", "4", 1, 0, 9, 11)), onLane(2, exec("c", "5", 1, 0, 12, 14)), onLane(2, exec("c", "6", 1, 0, 15, 17)),
				onLane(2, exec("c", "7", 1, 0, 18, 20)), onLane(2, exec("c", "8", 1, 0, 21, 23)), onLane(2, exec("c", "9", 1, 0, 24, 26)),
			},
			wantType: "c", wantAbout: 3,
		},
		{
			// Random: a job bound at routing to the lane of a long job waits for it while the
			// other lane is free. The strategy's wait, not a stall.
			name: "a job behind a long job in its own lane: no stall",
			give: []observe.Execution{
				onLane(1, exec("a", "1", 1, 0, 0.2, 30)),
				onLane(1, exec("a", "2", 1, 1, 30.5, 31)),
			},
			wantType: "a", wantAbout: 0.5,
		},
		{
			// a and c share pool p of cap 2: a's job waits with a lane free while c's two jobs
			// hold the pool. The pool's cap at work, not a stall.
			name: "a pool at its cap: no stall",
			give: []observe.Execution{
				onLane(1, exec("c", "1", 1, 0, 0.2, 30)), onLane(2, exec("c", "2", 1, 0, 0.3, 30)),
				onLane(1, exec("a", "1", 1, 1, 30.4, 31)),
			},
			wantType: "c", wantAbout: 0.2,
		},
		{
			name: "the same without the pool: a stall",
			give: []observe.Execution{
				onLane(1, exec("c", "1", 1, 0, 0.2, 30)), onLane(2, exec("c", "2", 1, 0, 0.3, 30)),
				onLane(1, exec("a", "1", 1, 1, 30.4, 31)),
			},
			noPool: true, wantType: "a", wantAbout: 29.4,
		},
		{name: "nothing ran", give: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pools := []PoolSpec{{Name: "p", Cap: 2, Members: []string{"a", "c"}}}
			if tt.noPool {
				pools = nil
			}
			got := longestStall(tt.give, limits, pools)
			if tt.wantAbout == 0 {
				if got.Seconds != 0 {
					t.Errorf("longestStall = %+v, want none", got)
				}
				return
			}
			if got.Type != tt.wantType || got.Seconds < tt.wantAbout-0.2 || got.Seconds > tt.wantAbout+0.2 {
				t.Errorf("longestStall = %+v, want type %s about %.1f s", got, tt.wantType, tt.wantAbout)
			}
		})
	}
}

// The handlers' failures and a stall are in the report's first line: a run that stalled is not
// reported as if it went as expected.
func TestReportSaysTrouble(t *testing.T) {
	r := &Report{Strategy: "first-free", WallSeconds: 90, Jobs: 40, Verified: 40, LimitHeld: true, Refused: map[string]int{}}
	var clean bytes.Buffer
	r.Print(&clean)
	if first := strings.SplitN(clean.String(), "\n", 2)[0]; strings.Contains(first, "TROUBLE") || !strings.Contains(first, "40/40 jobs ended as expected") {
		t.Errorf("first line of a clean run = %q, want no trouble", first)
	}

	r.trouble(map[string]stack.FunctionStats{
		"router":   {Invocations: 30, Errors: 2, Timeouts: 2, FailedItems: 3},
		"starter":  {Invocations: 80, FailedItems: 12}, // held messages: the starter's normal work
		"releaser": {Invocations: 50, Errors: 1},
	}, Stall{Type: "llm", Seconds: 57, From: 12.3, To: 69.3})
	var buf bytes.Buffer
	r.Print(&buf)
	first := strings.SplitN(buf.String(), "\n", 2)[0]
	for _, want := range []string{"TROUBLE", "llm started nothing for 57.0s while a job waited for a free lane", "router: 2 failed invocations (2 timed out)", "3 messages failed", "releaser: 1 failed invocation"} {
		if !strings.Contains(first, want) {
			t.Errorf("first line = %q, want it to say %q", first, want)
		}
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if last := lines[len(lines)-1]; !strings.HasPrefix(last, "TROUBLE: ") || !strings.Contains(last, "llm started nothing for 57.0s") {
		t.Errorf("last line = %q, want the trouble again", last)
	}
	if strings.Contains(first, "starter") {
		t.Errorf("first line = %q: the starter's held messages are not trouble", first)
	}
	if len(r.Trouble) != 4 {
		t.Errorf("Trouble = %q, want 4 entries (stall, router errors, router items, releaser)", r.Trouble)
	}
}
