package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/sfnlimit/sfnlimit/internal/tools/localbench"
)

var headlineRow = regexp.MustCompile(`(?m)^ +0\.[89] +1 +(5|10) `)

// small keeps a run of the command to a fraction of a second.
var small = []string{"--jobs", "3000", "--runs", "2", "--bursts", "5", "--lanes", "5,10", "--sigmas", "1"}

func TestRunText(t *testing.T) {
	var out, errs bytes.Buffer
	if code := run(context.Background(), small, &out, &errs); code != exitOK {
		t.Fatalf("run(%v) = %d, want %d; stderr %s", small, code, exitOK, errs.String())
	}
	text := out.String()
	for _, want := range []string{
		"== Headline: p99 wait / ideal p99",
		"== Poisson: p99 wait ==", "== Poisson: utilization while backlogged ==",
		"== Bursts of K = 10 x lanes jobs: makespan ==",
		"first-free*", "random*", "least-loaded", "two-choices",
		"Acceptance: first-free p99 at most 1.05x the ideal's at loads 0.8 and 0.9 for 5, 10 and 50 lanes: met in the 4 such cells here (at most 1.000x;",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("run(%v) output lacks %q:\n%s", small, want, text)
		}
	}
	// Headline rows: load 0.8 and 0.9 at sigma 1, for 5 and 10 lanes.
	head := text[strings.Index(text, "== Headline"):strings.Index(text, "== Poisson: p99")]
	if rows := len(headlineRow.FindAllString(head, -1)); rows != 4 {
		t.Errorf("headline has %d rows, want 4:\n%s", rows, head)
	}
	if strings.Contains(text, "bind latency d") {
		t.Errorf("run(%v) printed a bind latency table without --bind-latency:\n%s", small, text)
	}
}

// --bind-latency adds a table of first-free with each latency against the ideal, and against the
// ideal with the same latency.
func TestRunBindLatency(t *testing.T) {
	var out, errs bytes.Buffer
	args := append([]string{"--headline", "--bind-latency", "0,0.01,0.3"}, small...)
	if code := run(context.Background(), args, &out, &errs); code != exitOK {
		t.Fatalf("run(%v) = %d, want %d; stderr %s", args, code, exitOK, errs.String())
	}
	text := out.String()
	i := strings.Index(text, "== First-free with a bind latency d")
	if i < 0 {
		t.Fatalf("run(%v) printed no bind latency table:\n%s", args, text)
	}
	table := text[i:]
	if rows := len(headlineRow.FindAllString(table, -1)); rows != 4 || !strings.Contains(table, "d=0.01") || !strings.Contains(table, "d=0.3") || strings.Contains(table, "d=0 ") {
		t.Errorf("bind latency table: %d rows, want 4, with columns d=0.01 and d=0.3 only:\n%s", rows, table)
	}
	// A bind latency of 0.3 mean durations costs far more than 5%: the verdict must say so.
	if !strings.Contains(table, "Within 1.05x of the ideal in every row: d up to 0.01.") && !strings.Contains(table, "Within 1.05x of the ideal in every row: d none of these.") {
		t.Errorf("bind latency table lacks a verdict that excludes d=0.3:\n%s", table)
	}
	var js bytes.Buffer
	if code := run(context.Background(), append([]string{"--json"}, args...), &js, &errs); code != exitOK {
		t.Fatalf("run(--json %v) = %d, want %d; stderr %s", args, code, exitOK, errs.String())
	}
	var rep jsonReport
	if err := json.Unmarshal(js.Bytes(), &rep); err != nil {
		t.Fatalf("run(--json %v) printed invalid JSON: %v", args, err)
	}
	var names []string
	for _, s := range rep.BindLatency {
		names = append(names, s.Name)
	}
	if want := "first-free+0.01 ideal+0.01 first-free+0.3 ideal+0.3"; strings.Join(names, " ") != want || len(rep.LatencyCells) != 4 || rep.GroupHoldShare != 1 {
		t.Errorf("JSON bind latency strategies %v over %d cells, group hold %g; want %s over 4, 1", names, len(rep.LatencyCells), rep.GroupHoldShare, want)
	}
	for _, c := range rep.LatencyCells {
		ff, ideal := c.Strategies[2], c.Strategies[3]
		if !(ff.P99Wait >= ideal.P99Wait && ideal.P99Wait > c.Ideal.P99Wait) {
			t.Errorf("cell %+v: p99 %g for first-free+0.3, %g for ideal+0.3, %g for the ideal; want them in falling order", c.Cell, ff.P99Wait, ideal.P99Wait, c.Ideal.P99Wait)
		}
	}
}

func TestRunHeadlineOnly(t *testing.T) {
	var out, errs bytes.Buffer
	args := append([]string{"--headline"}, small...)
	if code := run(context.Background(), args, &out, &errs); code != exitOK {
		t.Fatalf("run(%v) = %d, want %d; stderr %s", args, code, exitOK, errs.String())
	}
	text := out.String()
	if !strings.Contains(text, "== Headline") || strings.Contains(text, "== Poisson") || strings.Contains(text, "== Bursts") {
		t.Errorf("run(%v) printed more or less than the headline:\n%s", args, text)
	}
	if !strings.Contains(errs.String(), "4 cells") {
		t.Errorf("run(%v) simulated other than the 4 headline cells: %s", args, errs.String())
	}
}

func TestRunJSON(t *testing.T) {
	var out, errs bytes.Buffer
	args := append([]string{"--json", "--workloads", "burst", "--strategies", "random,least-loaded"}, small...)
	if code := run(context.Background(), args, &out, &errs); code != exitOK {
		t.Fatalf("run(%v) = %d, want %d; stderr %s", args, code, exitOK, errs.String())
	}
	var rep jsonReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("run(%v) printed invalid JSON: %v", args, err)
	}
	if len(rep.Cells) != 2 || len(rep.Strategies) != 2 {
		t.Fatalf("run(%v) JSON has %d cells and %d strategies, want 2 and 2", args, len(rep.Cells), len(rep.Strategies))
	}
	for _, c := range rep.Cells {
		if c.Kind != "burst" || c.Jobs != 10*c.Lanes || len(c.Strategies) != 2 {
			t.Errorf("cell %+v, want a burst of 10 x lanes with 2 strategies", c.Cell)
		}
		for _, s := range c.Strategies {
			if s.Ratios == nil || s.Ratios.Makespan == nil || *s.Ratios.Makespan < 0.5 || s.Makespan == nil {
				t.Errorf("cell %+v, strategy %s: makespan ratio missing or off: %+v", c.Cell, s.Strategy, s.Ratios)
			}
		}
	}
}

func TestRunRefusesBadFlags(t *testing.T) {
	tests := []struct {
		name string
		give []string
	}{
		{name: "unknown strategy", give: []string{"--strategies", "fastest"}},
		{name: "unknown workload", give: []string{"--workloads", "steady"}},
		{name: "bad load", give: []string{"--loads", "0.8,x"}},
		{name: "zero lanes", give: []string{"--lanes", "0"}},
		{name: "warm-up of everything", give: []string{"--warmup", "1"}},
		{name: "unknown ids", give: []string{"--ids", "uuid7"}},
		{name: "negative bind latency", give: []string{"--bind-latency", "0,-0.1"}},
		{name: "negative group hold", give: []string{"--group-hold", "-1"}},
		{name: "stray argument", give: []string{"grid"}},
		{name: "unknown flag", give: []string{"--fast"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errs bytes.Buffer
			if code := run(context.Background(), tt.give, &out, &errs); code != exitUsage {
				t.Errorf("run(%v) = %d, want %d", tt.give, code, exitUsage)
			}
			if errs.Len() == 0 {
				t.Errorf("run(%v) said nothing on stderr", tt.give)
			}
		})
	}
}

func TestParseLocalFlags(t *testing.T) {
	available, err := localbench.Strategies("")
	if err != nil {
		t.Fatalf("localbench.Strategies() error = %v", err)
	}
	tests := []struct {
		name string
		give []string
		// want is each run's strategy, lanes, jobs, load and sigma.
		want []string
	}{
		{name: "defaults: every router strategy of the template, 5 lanes, 72 jobs, load 0.8, sigma 1", give: []string{"--local"}, want: func() []string {
			var out []string
			for _, s := range available {
				out = append(out, s+" 5 72 0.8 1")
			}
			return out
		}()},
		{name: "first-free and random", give: []string{"--local", "--strategies", "first-free,random"}, want: []string{"first-free 5 72 0.8 1", "random 5 72 0.8 1"}},
		{
			name: "one strategy over two lane counts",
			give: []string{"--local", "--strategies", "random", "--lanes", "5,10", "--jobs", "30", "--loads", "0.7"},
			want: []string{"random 5 30 0.7 1", "random 10 30 0.7 1"},
		},
		{name: "sigma 0 is kept, not taken for unset", give: []string{"--local", "--strategies", "random", "--sigmas", "0"}, want: []string{"random 5 72 0.8 0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var errs bytes.Buffer
			opts, err := parseFlags(tt.give, &errs)
			if err != nil {
				t.Fatalf("parseFlags(%v) error = %v", tt.give, err)
			}
			if opts.local == nil {
				t.Fatalf("parseFlags(%v) did not select the local run", tt.give)
			}
			var got []string
			for _, c := range opts.local.configs {
				got = append(got, fmt.Sprintf("%s %d %d %g %g", c.Strategy, c.Lanes, c.Jobs, c.Load, c.Sigma))
			}
			if strings.Join(got, "|") != strings.Join(tt.want, "|") {
				t.Errorf("parseFlags(%v) runs %q, want %q", tt.give, got, tt.want)
			}
		})
	}
}

func TestRunLocalRefusesBadFlags(t *testing.T) {
	tests := []struct {
		name string
		give []string
	}{
		{name: "a simulator-only flag", give: []string{"--local", "--headline"}},
		{name: "workers", give: []string{"--local", "--workers", "2"}},
		{name: "a local-only flag without --local", give: []string{"--mean-seconds", "5"}},
		{name: "a strategy the simulator does not know", give: []string{"--local", "--strategies", "fastest"}},
		{name: "a strategy the template does not offer", give: []string{"--local", "--strategies", "two-choices"}},
		{name: "the retired least-loaded", give: []string{"--local", "--strategies", "first-free,least-loaded"}},
		{name: "a bind latency (the stack has its own)", give: []string{"--local", "--bind-latency", "0.1"}},
		{name: "sub-second durations", give: []string{"--local", "--mean-seconds", "0.2"}},
		{name: "no time to run", give: []string{"--local", "--timeout", "0s"}},
		{name: "one job", give: []string{"--local", "--jobs", "1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errs bytes.Buffer
			if code := run(context.Background(), tt.give, &out, &errs); code != exitUsage {
				t.Errorf("run(%v) = %d, want %d; stderr %s", tt.give, code, exitUsage, errs.String())
			}
			if errs.Len() == 0 {
				t.Errorf("run(%v) said nothing on stderr", tt.give)
			}
			if out.Len() > 0 {
				t.Errorf("run(%v) printed %q, want nothing on stdout", tt.give, out.String())
			}
		})
	}
}
