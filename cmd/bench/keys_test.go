package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/sfnlimit/sfnlimit/internal/tools/sim"
)

func TestRunKeysText(t *testing.T) {
	var out, errs bytes.Buffer
	args := []string{"--keys", "--runs", "40"}
	if code := run(context.Background(), args, &out, &errs); code != exitOK {
		t.Fatalf("run(%v) = %d, want %d; stderr %s", args, code, exitOK, errs.String())
	}
	text := out.String()
	for _, want := range []string{
		"Seeds: --seed 1; 40 runs per scenario",
		"== Isolation: a noisy key submits 1000 jobs at time 0; 20 quiet keys each submit 5 jobs at once, at a random time in [0, 10) ==",
		"| keyed ", "| keyed-oldest-head ", "| fifo ", "(a) ", "(b) ", "(c) ", "(d) ",
		"Target (a)/(b) p99 at most 2x:",
		"Noisy key alone under keyed: at most 5 running, at least 5 while its jobs waited (mean 5); its cap is 5: met.",
		"== Isolation over longer quiet windows",
		"| 200 ", // the noisy backlog's drain time ends the sweep
		"== Work conservation under keyed",
		"| one key ", "| four keys, equal ",
		"One key: exactly its cap 5 at a time (max 5, min 5 while backlogged): met.",
		"Several keys: lanes busy while a startable job waited, target at least 90%: met",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("run(%v) output lacks %q:\n%s", args, want, text)
		}
	}
	// Every table row has as many cells as its header.
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "|") && !strings.HasSuffix(line, "|") {
			t.Errorf("table row %q does not end with |", line)
		}
	}
	if strings.Contains(text, "Headline") {
		t.Errorf("run(%v) printed the lane strategies' grid too:\n%s", args, text)
	}
}

func TestRunKeysJSON(t *testing.T) {
	var out, errs bytes.Buffer
	args := []string{"--keys", "--json", "--runs", "20", "--seed", "3", "--sigmas", "0.5"}
	if code := run(context.Background(), args, &out, &errs); code != exitOK {
		t.Fatalf("run(%v) = %d, want %d; stderr %s", args, code, exitOK, errs.String())
	}
	var rep keysReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("run(%v) printed invalid JSON: %v", args, err)
	}
	h := rep.Headline
	if rep.Seed != 3 || h.Scenario.Runs != 20 || h.Scenario.Sigma != 0.5 || len(h.Orders) != len(sim.KeyOrders()) || len(rep.Sweep) < 2 || len(rep.Backlogs) != len(sim.DefaultKeyBacklogs()) {
		t.Errorf("JSON report: seed %d, %d runs, sigma %g, %d orders, %d windows, %d backlog scenarios; want 3, 20, 0.5, %d, several, %d",
			rep.Seed, h.Scenario.Runs, h.Scenario.Sigma, len(h.Orders), len(rep.Sweep), len(rep.Backlogs), len(sim.KeyOrders()), len(sim.DefaultKeyBacklogs()))
	}
	for _, f := range h.Orders {
		if f.With.Jobs != 20*h.Scenario.QuietKeys*h.Scenario.QuietJobs || f.With.Jobs != f.Without.Jobs {
			t.Errorf("order %s: %d quiet waits with the noisy key, %d without; want %d each", f.Order, f.With.Jobs, f.Without.Jobs, 20*h.Scenario.QuietKeys*h.Scenario.QuietJobs)
		}
	}
}

func TestRunKeysRefusesBadFlags(t *testing.T) {
	tests := []struct {
		name string
		give []string
	}{
		{name: "a grid flag", give: []string{"--keys", "--lanes", "5"}},
		{name: "a strategy", give: []string{"--keys", "--strategies", "random"}},
		{name: "two sigmas", give: []string{"--keys", "--sigmas", "0.5,1"}},
		{name: "with --local", give: []string{"--keys", "--local"}},
		{name: "negative runs", give: []string{"--keys", "--runs", "-1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errs bytes.Buffer
			if code := run(context.Background(), tt.give, &out, &errs); code != exitUsage {
				t.Errorf("run(%v) = %d, want %d; stderr %s", tt.give, code, exitUsage, errs.String())
			}
			if errs.Len() == 0 || out.Len() > 0 {
				t.Errorf("run(%v): stderr %q, stdout %q; want a reason on stderr and nothing on stdout", tt.give, errs.String(), out.String())
			}
		})
	}
}

func TestHelpMentionsKeys(t *testing.T) {
	var out, errs bytes.Buffer
	if code := run(context.Background(), []string{"--help"}, &out, &errs); code != exitOK {
		t.Fatalf("run(--help) = %d, want %d", code, exitOK)
	}
	if help := errs.String(); !strings.Contains(help, "-keys") || !strings.Contains(help, "go run ./cmd/bench --keys") {
		t.Errorf("--help lacks --keys:\n%s", help)
	}
}
