package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/sfnlimit/sfnlimit/internal/localbench"
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
		"random*", "least-loaded", "two-choices",
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
		{name: "defaults: every strategy of the template, 5 lanes, 72 jobs, load 0.8, sigma 1", give: []string{"--local"}, want: func() []string {
			var out []string
			for _, s := range available {
				out = append(out, s+" 5 72 0.8 1")
			}
			return out
		}()},
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
