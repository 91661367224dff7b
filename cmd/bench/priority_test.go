package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/sfnlimit/sfnlimit/internal/tools/sim"
)

func TestRunPriorityText(t *testing.T) {
	var out, errs bytes.Buffer
	args := []string{"--priority", "--runs", "10"}
	if code := run(context.Background(), args, &out, &errs); code != exitOK {
		t.Fatalf("run(%v) = %d, want %d; stderr %s", args, code, exitOK, errs.String())
	}
	text := out.String()
	for _, want := range []string{
		"Seeds: --seed 1; 10 runs of the burst, 10 of the starvation scenario",
		"Aging 60 s per level.",
		"== Burst: 500 low jobs (priority 1) submitted at 0, then 50 high jobs (priority 9) at random times in (0, 5] ==",
		"| priority ", "| strict-priority ", "| fifo ",
		"Target: the scheduler's high waits close to strict priority's (p99 within 1.1x): met",
		"== Burst: what a shorter aging costs the high jobs",
		"| 0.5 ", // the sweep's last aging
		"== Starvation: high jobs (priority 9) at 1.2x the lanes' capacity from 0 to 1200 s",
		"(9 - p) x aging since its submission, 480 s here",
		"Scheduler: every low job started while the high load lasted (200 of 200: met)",
		"no later job passed a low job at the top: met",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("run(%v) output lacks %q:\n%s", args, want, text)
		}
	}
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "|") && !strings.HasSuffix(line, "|") {
			t.Errorf("table row %q does not end with |", line)
		}
	}
}

func TestRunPriorityJSON(t *testing.T) {
	var out, errs bytes.Buffer
	args := []string{"--priority", "--json", "--runs", "5", "--seed", "3", "--aging", "30"}
	if code := run(context.Background(), args, &out, &errs); code != exitOK {
		t.Fatalf("run(%v) = %d, want %d; stderr %s", args, code, exitOK, errs.String())
	}
	var rep priorityReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("run(%v) printed invalid JSON: %v", args, err)
	}
	b, s := rep.Burst, rep.Starvation
	if rep.Seed != 3 || b.Scenario.Runs != 5 || b.Scenario.Aging != 30 || s.Scenario.Aging != 30 || s.Bound != 240 ||
		len(b.Orders) != len(sim.PriorityOrders()) || len(s.Orders) != len(sim.PriorityOrders()) || len(rep.AgingSweep) != len(agingSweep) {
		t.Errorf("JSON report: seed %d, %d runs, aging %g and %g, bound %g, %d and %d orders, %d agings; want 3, 5, 30, 30, 240, %d, %d, %d",
			rep.Seed, b.Scenario.Runs, b.Scenario.Aging, s.Scenario.Aging, s.Bound, len(b.Orders), len(s.Orders), len(rep.AgingSweep),
			len(sim.PriorityOrders()), len(sim.PriorityOrders()), len(agingSweep))
	}
	for _, f := range b.Orders {
		if f.High.Jobs != 5*b.Scenario.HighJobs || f.Low.Jobs != 5*b.Scenario.LowJobs {
			t.Errorf("order %s: %d high and %d low waits, want %d and %d", f.Order, f.High.Jobs, f.Low.Jobs, 5*b.Scenario.HighJobs, 5*b.Scenario.LowJobs)
		}
	}
	if rep.Violation != "" {
		t.Errorf("violation: %s", rep.Violation)
	}
}

func TestRunRateText(t *testing.T) {
	var out, errs bytes.Buffer
	args := []string{"--rate", "--runs", "10"}
	if code := run(context.Background(), args, &out, &errs); code != exitOK {
		t.Fatalf("run(%v) = %d, want %d; stderr %s", args, code, exitOK, errs.String())
	}
	text := out.String()
	for _, want := range []string{
		"Each scenario: 500 jobs submitted at 0 to a type of 10 lanes",
		"Seeds: --seed 1; 10 runs per scenario",
		"| short jobs, rate 5/s ", "| long jobs, rate 5/s ", "| short jobs, no rate ",
		"short jobs, rate 5/s: the rate binds; 5 starts/s against the 5 expected.",
		"long jobs, rate 5/s: the limit binds (10 lanes / 10 s = 1/s under the rate)",
		"target at most R + B = 15: met.",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("run(%v) output lacks %q:\n%s", args, want, text)
		}
	}
	if strings.Contains(text, "NOT met") {
		t.Errorf("run(%v) missed a target:\n%s", args, text)
	}
}

func TestRunRateJSON(t *testing.T) {
	var out, errs bytes.Buffer
	args := []string{"--rate", "--json", "--runs", "4", "--seed", "5"}
	if code := run(context.Background(), args, &out, &errs); code != exitOK {
		t.Fatalf("run(%v) = %d, want %d; stderr %s", args, code, exitOK, errs.String())
	}
	var rep rateReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("run(%v) printed invalid JSON: %v", args, err)
	}
	if rep.Seed != 5 || len(rep.Scenarios) != len(sim.DefaultRateScenarios()) || rep.Violation != "" {
		t.Fatalf("JSON report: seed %d, %d scenarios, violation %q; want 5, %d, none", rep.Seed, len(rep.Scenarios), rep.Violation, len(sim.DefaultRateScenarios()))
	}
	for _, f := range rep.Scenarios {
		if f.Scenario.Runs != 4 || f.Wait.Jobs != 4*f.Scenario.Jobs || f.Sustained <= 0 {
			t.Errorf("scenario %s: %d runs, %d waits, %g starts/s; want 4, %d, above 0", f.Scenario.Name, f.Scenario.Runs, f.Wait.Jobs, f.Sustained, 4*f.Scenario.Jobs)
		}
	}
}

func TestFlowModesRefuseBadFlags(t *testing.T) {
	tests := []struct {
		name string
		give []string
	}{
		{name: "priority with a grid flag", give: []string{"--priority", "--lanes", "5"}},
		{name: "priority with sigmas", give: []string{"--priority", "--sigmas", "1"}},
		{name: "priority with keys", give: []string{"--priority", "--keys"}},
		{name: "priority with rate", give: []string{"--priority", "--rate"}},
		{name: "rate with local", give: []string{"--rate", "--local"}},
		{name: "rate with a strategy", give: []string{"--rate", "--strategies", "random"}},
		{name: "rate with aging", give: []string{"--rate", "--aging", "30"}},
		{name: "aging alone", give: []string{"--aging", "30"}},
		{name: "aging 0", give: []string{"--priority", "--aging", "0"}},
		{name: "aging infinite", give: []string{"--priority", "--aging", "+Inf"}},
		{name: "negative runs", give: []string{"--rate", "--runs", "-1"}},
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

func TestHelpMentionsTheFlowModes(t *testing.T) {
	var out, errs bytes.Buffer
	if code := run(context.Background(), []string{"--help"}, &out, &errs); code != exitOK {
		t.Fatalf("run(--help) = %d, want %d", code, exitOK)
	}
	help := errs.String()
	for _, want := range []string{"-priority", "-rate", "-aging", "go run ./cmd/bench --priority", "go run ./cmd/bench --rate"} {
		if !strings.Contains(help, want) {
			t.Errorf("--help lacks %q:\n%s", want, help)
		}
	}
}
