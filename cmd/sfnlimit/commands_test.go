package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	sfnjob "github.com/sfnlimit/sfnlimit/internal/lambda/job"
)

// Every command has a short description, examples, and a --help that exits 0.
func TestHelpOfEveryCommand(t *testing.T) {
	t.Parallel()
	var walk func(c *cobra.Command)
	var paths [][]string
	walk = func(c *cobra.Command) {
		if c.Hidden || c.Name() == "help" || c.HasParent() && c.Parent().Name() == "completion" {
			return
		}
		path := strings.Fields(c.CommandPath())[1:]
		paths = append(paths, path)
		if c.Short == "" {
			t.Errorf("%q has no short description", c.CommandPath())
		}
		// completion is cobra's own command.
		if c.Example == "" && c.Name() != "completion" {
			t.Errorf("%q has no examples", c.CommandPath())
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	root := newRoot()
	root.InitDefaultCompletionCmd()
	walk(root)
	for _, p := range paths {
		r := sfnlimitIn(context.Background(), "", append(p, "--help")...)
		if r.code != exitOK || !strings.Contains(r.stdout, "Usage:") {
			t.Errorf("sfnlimit %s --help:\n%s", strings.Join(p, " "), r)
		}
	}
	for _, want := range []string{"submit", "status", "config get", "config set", "config reset", "pause", "resume", "attach", "dlq list", "dlq redrive", "job show", "batch open", "batch show", "batch wait", "completion"} {
		found := false
		for _, p := range paths {
			found = found || strings.Join(p, " ") == want
		}
		if !found {
			t.Errorf("no command %q", want)
		}
	}
}

// Usage errors exit 2, other errors 1, and neither needs a stack.
func TestExitCodes(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "nope.json")
	tests := []struct {
		name       string
		give       []string
		want       int
		wantStderr string
	}{
		{name: "unknown command", give: []string{"bogus"}, want: exitUsage, wantStderr: `unknown command "bogus"`},
		{name: "unknown subcommand", give: []string{"config", "bogus"}, want: exitUsage, wantStderr: `unknown command "bogus" for "sfnlimit config"`},
		{name: "unknown flag", give: []string{"status", "--bogus"}, want: exitUsage, wantStderr: "unknown flag"},
		{name: "bad flag value", give: []string{"config", "set", "a", "--limit", "x"}, want: exitUsage, wantStderr: "invalid argument"},
		{name: "missing argument", give: []string{"job", "show"}, want: exitUsage, wantStderr: "accepts 1 arg"},
		{name: "invalid type", give: []string{"config", "set", "pay-ments", "--limit", "2"}, want: exitUsage, wantStderr: "invalid_type"},
		{name: "nothing to set", give: []string{"config", "set", "payments"}, want: exitUsage, wantStderr: "nothing to set: give --limit, --max-attempts, --state-machine, --strategy, --release, --key-limit, --key-rate, --key with --limit or --rate, --rate or --burst"},
		{name: "limit zero", give: []string{"config", "set", "payments", "--limit", "0"}, want: exitUsage, wantStderr: "at least 1"},
		{name: "limit over quota", give: []string{"config", "set", "payments", "--limit", "120000"}, want: exitUsage, wantStderr: "quota"},
		{name: "bad state machine", give: []string{"config", "set", "payments", "--state-machine", "sample"}, want: exitUsage, wantStderr: "not a state machine ARN"},
		{name: "unknown strategy", give: []string{"config", "set", "payments", "--strategy", "fastest"}, want: exitUsage, wantStderr: `unknown lane strategy "fastest" (known: first-free, random)`},
		{name: "retired strategy", give: []string{"config", "set", "payments", "--strategy", "least-loaded"}, want: exitUsage, wantStderr: "--strategy: lane strategy least-loaded is retired: it kept a counter per lane"},
		{name: "retired strategy beside a limit", give: []string{"config", "set", "payments", "--limit", "3", "--strategy", "least-loaded"}, want: exitUsage, wantStderr: "types still configured least-loaded run as first-free"},
		{name: "demo on a retired strategy", give: []string{"demo", "--strategy", "least-loaded"}, want: exitUsage, wantStderr: "--strategy: lane strategy least-loaded is retired"},
		{name: "demo on an unknown strategy", give: []string{"demo", "--strategy", "fastest"}, want: exitUsage, wantStderr: `unknown lane strategy "fastest" (known: first-free, random)`},
		{name: "demo on an unknown SQS emulator", give: []string{"demo", "--sqs", "nope"}, want: exitUsage, wantStderr: `--sqs "nope": want fauxqs or moto`},
		{name: "demo on an unknown release mode", give: []string{"demo", "--release", "status"}, want: exitUsage, wantStderr: `--release: unknown release mode "status"`},
		{name: "strategy without a value", give: []string{"config", "set", "payments", "--strategy"}, want: exitUsage, wantStderr: "flag needs an argument: --strategy"},
		{name: "unknown release mode", give: []string{"config", "set", "payments", "--release", "event"}, want: exitUsage, wantStderr: `--release: unknown release mode "event" (known: step, events)`},
		{name: "unknown overflow rule", give: []string{"config", "set", "payments", "--overflow", "debounce"}, want: exitUsage, wantStderr: `--overflow: unknown overflow rule "debounce" (known: queue, cancel, skip)`},
		{name: "empty release mode", give: []string{"config", "set", "payments", "--release", ""}, want: exitUsage, wantStderr: "--release needs a mode (known: step, events)"},
		{name: "bad release beside a limit", give: []string{"config", "set", "payments", "--limit", "2", "--release", "status"}, want: exitUsage, wantStderr: `unknown release mode "status"`},
		{name: "key without its cap", give: []string{"config", "set", "llm", "--key", "acme"}, want: exitUsage, wantStderr: "--key acme needs --limit N, the key's own cap (--limit 0 removes it)"},
		{name: "bad key", give: []string{"config", "set", "llm", "--key", "a b", "--limit", "2"}, want: exitUsage, wantStderr: `--key: invalid_key: key "a b" must be 1-64 characters of A-Z a-z 0-9 _ - . :`},
		{name: "empty key", give: []string{"config", "set", "llm", "--key", "", "--limit", "2"}, want: exitUsage, wantStderr: "--key needs a key"},
		{name: "negative key limit", give: []string{"config", "set", "llm", "--key-limit", "-1"}, want: exitUsage, wantStderr: "--key-limit -1 must be from 1"},
		{name: "negative key cap", give: []string{"config", "set", "llm", "--key", "acme", "--limit", "-1"}, want: exitUsage, wantStderr: "--key acme --limit -1 must be from 1"},
		{name: "three pools", give: []string{"config", "set", "llm", "--pools", "a+b+c"}, want: exitUsage, wantStderr: `--pools "a+b+c": type llm: 3 pools, more than the 2 a type may belong to`},
		{name: "a pool twice", give: []string{"config", "set", "llm", "--pools", "a+a"}, want: exitUsage, wantStderr: "pool a is listed twice"},
		{name: "pools and no pools", give: []string{"config", "set", "llm", "--pools", "a", "--no-pools"}, want: exitUsage, wantStderr: "--pools and --no-pools at once"},
		{name: "share over the top", give: []string{"config", "set", "llm", "--share", "101"}, want: exitUsage, wantStderr: "--share 101 must be from 1 to 100"},
		{name: "pool set without a cap", give: []string{"config", "pool", "set", "llm_api"}, want: exitUsage, wantStderr: "config pool set needs --cap N, the pool's cap (1-1000)"},
		{name: "pool cap over the top", give: []string{"config", "pool", "set", "llm_api", "--cap", "1001"}, want: exitUsage, wantStderr: "--cap 1001: pool llm_api: cap 1001 must be from 1 to 1000"},
		{name: "bad pool name", give: []string{"config", "pool", "unset", "llm-api"}, want: exitUsage, wantStderr: `pool "llm-api": a pool's name is 1-40 characters`},
		{name: "negative --keys", give: []string{"status", "--keys", "-1"}, want: exitUsage, wantStderr: "--keys -1 must be 0 or more"},
		{name: "rate not a number", give: []string{"config", "set", "llm", "--rate", "fast"}, want: exitUsage,
			wantStderr: `--rate: rate "fast" must be a number of starts per second, like 5 or 0.5 (up to 3 decimals) (--rate 0 removes the rate)`},
		{name: "rate over the most", give: []string{"config", "set", "llm", "--rate", "20000"}, want: exitUsage, wantStderr: "rate 20000 must be more than 0 and at most 10000 starts per second"},
		{name: "burst of 0", give: []string{"config", "set", "llm", "--rate", "5", "--burst", "0"}, want: exitUsage, wantStderr: "--burst: burst 0 must be from 1 to 100000 starts"},
		{name: "rate 0 with a burst", give: []string{"config", "set", "llm", "--rate", "0", "--burst", "2"}, want: exitUsage, wantStderr: "--rate 0 removes the rate: give no --burst with it"},
		{name: "burst not a number", give: []string{"config", "set", "llm", "--burst", "x"}, want: exitUsage, wantStderr: "invalid argument"},
		{name: "key rate not a number", give: []string{"config", "set", "llm", "--key-rate", "fast"}, want: exitUsage,
			wantStderr: `--key-rate: rate "fast" must be a number of starts per second, like 5 or 0.5 (up to 3 decimals) (--key-rate 0 removes every key's rate)`},
		{name: "key rate over the most", give: []string{"config", "set", "llm", "--key-rate", "20000:1"}, want: exitUsage, wantStderr: "--key-rate: rate 20000 must be more than 0 and at most 10000"},
		{name: "key rate with a bad burst", give: []string{"config", "set", "llm", "--key-rate", "2:0"}, want: exitUsage, wantStderr: `--key-rate: burst "0" must be a whole number of at least 1`},
		{name: "key rate with --burst", give: []string{"config", "set", "llm", "--key-rate", "2", "--burst", "4"}, want: exitUsage, wantStderr: "give every key's burst as --key-rate R:B"},
		{name: "key's rate not a number", give: []string{"config", "set", "llm", "--key", "acme", "--rate", "fast"}, want: exitUsage,
			wantStderr: `--key acme --rate: rate "fast" must be a number of starts per second`},
		{name: "key's rate 0 with a burst", give: []string{"config", "set", "llm", "--key", "acme", "--rate", "0", "--burst", "2"}, want: exitUsage,
			wantStderr: "--key acme --rate 0 removes the key's own rate: give no --burst with it"},
		{name: "key's rate with two bursts", give: []string{"config", "set", "llm", "--key", "acme", "--rate", "5:10", "--burst", "3"}, want: exitUsage,
			wantStderr: "--key acme --rate 5:10 gives a burst already"},
		{name: "key's burst of 0", give: []string{"config", "set", "llm", "--key", "acme", "--rate", "5", "--burst", "0"}, want: exitUsage,
			wantStderr: "--key acme --burst: burst 0 must be from 1 to 100000 starts"},
		{name: "key's burst without its rate", give: []string{"config", "set", "llm", "--key", "acme", "--burst", "3"}, want: exitUsage,
			wantStderr: "--key acme --burst needs --rate R with it"},
		{name: "bad key with a rate", give: []string{"config", "set", "llm", "--key", "a b", "--rate", "1"}, want: exitUsage, wantStderr: `--key: invalid_key: key "a b"`},
		{name: "pause without a type", give: []string{"pause"}, want: exitUsage, wantStderr: "give a TYPE, or --pool POOL"},
		{name: "pause a type and a pool", give: []string{"pause", "llm", "--pool", "api"}, want: exitUsage, wantStderr: "give a TYPE or --pool POOL, not both"},
		{name: "pause a bad pool", give: []string{"pause", "--pool", "a-b"}, want: exitUsage, wantStderr: `pool "a-b"`},
		{name: "pause a bad type", give: []string{"pause", "a-b"}, want: exitUsage, wantStderr: "invalid_type"},
		{name: "pause reason too long", give: []string{"pause", "llm", "--reason", strings.Repeat("x", 201)}, want: exitUsage,
			wantStderr: "--reason: type llm: pause reason is 201 characters, more than 200"},
		{name: "pause reason with a control character", give: []string{"pause", "llm", "--reason", "a\tb"}, want: exitUsage, wantStderr: "pause reason has a control character"},
		{name: "resume two types", give: []string{"resume", "a", "b"}, want: exitUsage, wantStderr: "accepts at most 1 arg"},
		{name: "resume without a type", give: []string{"resume"}, want: exitUsage, wantStderr: "give a TYPE, or --pool POOL"},
		{name: "resume a bad type", give: []string{"resume", "a b"}, want: exitUsage, wantStderr: "invalid_type"},
		{name: "unknown priority", give: []string{"submit", "--type", "a", "--priority", "urgent"}, want: exitUsage,
			wantStderr: `--priority: invalid_priority: priority "urgent" must be low, normal, high or a whole number 1-9 (higher starts first)`},
		{name: "priority out of range", give: []string{"submit", "jobs.jsonl", "--priority", "0"}, want: exitUsage, wantStderr: "invalid_priority"},
		{name: "attach without a state machine", give: []string{"attach", "--type", "a", "--limit", "1"}, want: exitUsage, wantStderr: "accepts 1 arg"},
		{name: "attach not an ARN", give: []string{"attach", "mine", "--type", "a", "--limit", "1"}, want: exitUsage, wantStderr: `"mine" is not a state machine ARN`},
		{name: "attach without a type", give: []string{"attach", sampleArn, "--limit", "1"}, want: exitUsage, wantStderr: "--type: missing_type"},
		{name: "attach a bad type", give: []string{"attach", sampleArn, "--type", "a-b", "--limit", "1"}, want: exitUsage, wantStderr: "--type: invalid_type"},
		{name: "attach without a limit", give: []string{"attach", sampleArn, "--type", "a"}, want: exitUsage, wantStderr: "--limit 0 must be at least 1"},
		{name: "attach with a bad release mode", give: []string{"attach", sampleArn, "--type", "a", "--limit", "1", "--release", "event"}, want: exitUsage, wantStderr: `unknown release mode "event" (known: step, events)`},
		{name: "attach with an empty release mode", give: []string{"attach", sampleArn, "--type", "a", "--limit", "1", "--release", ""}, want: exitUsage, wantStderr: "--release needs a mode"},
		{name: "attach with no attempts", give: []string{"attach", sampleArn, "--type", "a", "--limit", "1", "--max-attempts", "0"}, want: exitUsage, wantStderr: "--max-attempts 0"},
		{name: "bad job id", give: []string{"job", "show", "a b"}, want: exitUsage, wantStderr: "invalid_id"},
		{name: "bad job key", give: []string{"job", "show", "a-1", "--key", "a b"}, want: exitUsage, wantStderr: "invalid_key"},
		{name: "bad job sender", give: []string{"job", "show", "a-1", "--sender", "acme/eu"}, want: exitUsage, wantStderr: "sender \"acme/eu\" must be"},
		{name: "bad input", give: []string{"submit", "--type", "a", "--input", "{"}, want: exitUsage, wantStderr: "not JSON"},
		{name: "flags and file", give: []string{"submit", "--type", "a", "jobs.jsonl"}, want: exitUsage, wantStderr: "not both"},
		{name: "bad param", give: []string{"status", "--param", "x", "--local", missing}, want: exitUsage, wantStderr: "Name=Value"},
		{name: "no info file", give: []string{"status", "--local", missing}, want: exitError, wantStderr: "sfnlimit local up --info"},
		{name: "batch open without a size", give: []string{"batch", "open", "nightly"}, want: exitUsage, wantStderr: "--size: batch size 0 must be 1-1000000"},
		{name: "batch open of a bad name", give: []string{"batch", "open", "a b", "--size", "2"}, want: exitUsage, wantStderr: `invalid_batch: batch "a b" must be 1-64 characters`},
		{name: "batch show without a name", give: []string{"batch", "show"}, want: exitUsage, wantStderr: "accepts 1 arg"},
		{name: "batch wait with a negative timeout", give: []string{"batch", "wait", "b", "--timeout", "-1s"}, want: exitUsage, wantStderr: "--timeout -1s must not be negative"},
		{name: "submit --wait without --batch", give: []string{"submit", "jobs.jsonl", "--wait"}, want: exitUsage, wantStderr: "--wait needs --batch NAME"},
		{name: "submit --timeout without --wait", give: []string{"submit", "jobs.jsonl", "--batch", "b", "--timeout", "1m"}, want: exitUsage, wantStderr: "--timeout needs --wait"},
		{name: "submit --wait --dry-run", give: []string{"submit", "jobs.jsonl", "--batch", "b", "--wait", "--dry-run"}, want: exitUsage, wantStderr: "nothing is sent to wait for"},
		{name: "submit to a bad batch name", give: []string{"submit", "jobs.jsonl", "--batch", strings.Repeat("b", 65)}, want: exitUsage, wantStderr: "--batch: invalid_batch"},
		{name: "help", give: []string{"dlq"}, want: exitOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := sfnlimitIn(context.Background(), "", tt.give...)
			if r.code != tt.want || !strings.Contains(r.stderr, tt.wantStderr) {
				t.Errorf("sfnlimit %s = %s\nwant exit %d and stderr with %q", strings.Join(tt.give, " "), r, tt.want, tt.wantStderr)
			}
			if tt.want == exitUsage && !strings.Contains(r.stderr, "--help' for usage") {
				t.Errorf("a usage error does not point to --help:\n%s", r)
			}
		})
	}
}

// cobra's completion command writes scripts, and TYPE arguments complete with the limiter's types.
func TestCompletion(t *testing.T) {
	t.Parallel()
	for _, sh := range []string{"bash", "zsh", "fish", "powershell"} {
		r := must(t, sfnlimitIn(context.Background(), "", "completion", sh), exitOK)
		if !strings.Contains(r.stdout, "sfnlimit") {
			t.Errorf("completion %s: no script:\n%s", sh, r)
		}
	}
	_, info := localStack(t)
	args := append([]string{"__complete", "config", "set"}, localFlags(info)...)
	r := must(t, sfnlimitIn(t.Context(), "", append(args, "")...), exitOK)
	if !strings.Contains(r.stdout, "base\n") {
		t.Errorf("config set TYPE does not complete with the type base:\n%s", r)
	}
	// --strategy completes with the strategies that can be chosen, without a stack: not the
	// retired least-loaded.
	for _, cmd := range [][]string{{"config", "set", "base"}, {"demo"}} {
		r = must(t, sfnlimitIn(t.Context(), "", append(append([]string{"__complete"}, cmd...), "--strategy", "")...), exitOK)
		if r.stdout != "first-free\twaits until a lane is free, then is bound to it\nrandom\ta lane from a hash of the job, no state kept\n:4\n" {
			t.Errorf("%s --strategy does not complete with first-free and random alone (no files):\n%s", strings.Join(cmd, " "), r)
		}
	}
	r = must(t, sfnlimitIn(t.Context(), "", "__complete", "config", "set", "base", "--strategy", "l"), exitOK)
	if r.stdout != ":4\n" {
		t.Errorf("config set --strategy l completes with something:\n%s", r)
	}
	r = must(t, sfnlimitIn(t.Context(), "", "__complete", "config", "set", "base", "--strategy", "r"), exitOK)
	if !strings.HasPrefix(r.stdout, "random\t") || strings.Contains(r.stdout, "first-free") || !strings.Contains(r.stdout, "\n:4\n") {
		t.Errorf("config set --strategy r does not complete with random:\n%s", r)
	}
	// --release completes with the release modes, without a stack.
	for _, cmd := range [][]string{{"config", "set", "base"}, {"attach", sampleArn}} {
		r = must(t, sfnlimitIn(t.Context(), "", append(append([]string{"__complete"}, cmd...), "--release", "")...), exitOK)
		if r.stdout != "step\tthe workflow's Release state calls the releaser\nevents\tthe execution's status-change event releases, no Release state needed\n:4\n" {
			t.Errorf("%s --release does not complete with step and events alone (no files):\n%s", strings.Join(cmd, " "), r)
		}
	}
	r = must(t, sfnlimitIn(t.Context(), "", "__complete", "config", "set", "base", "--release", "e"), exitOK)
	if !strings.HasPrefix(r.stdout, "events\t") || strings.Contains(r.stdout, "step") {
		t.Errorf("config set --release e does not complete with events alone:\n%s", r)
	}
	r = must(t, sfnlimitIn(t.Context(), "", "completion", "bash"), exitOK)
	if !strings.Contains(r.stdout, "__complete") {
		t.Errorf("the bash script does not ask the command for its completions:\n%.400s", r.stdout)
	}
}

// A single job from flags is sent, runs, and is found by job show with its lane and execution.
func TestSubmitOneAndShow(t *testing.T) {
	t.Parallel()
	r := must(t, local(t, "submit", "--type", "base", "--id", "one-1", "--input", `{"seconds":1}`), exitOK)
	if !strings.Contains(r.stdout, "sent 1 of 1 jobs from flags") {
		t.Errorf("submit summary:\n%s", r)
	}
	j := waitJob(t, "base", "one-1", "succeeded")
	if len(j.Executions) != 1 || j.Executions[0].Status != "SUCCEEDED" || j.Executions[0].Attempt != 1 {
		t.Fatalf("job show executions = %+v, want one SUCCEEDED attempt 1", j.Executions)
	}
	if j.Lane < 1 || j.Lane > 2 || j.Executions[0].Lane != j.Lane {
		t.Errorf("job show lane = %d (execution's %d), want 1 or 2", j.Lane, j.Executions[0].Lane)
	}
	if want := ":execution:sfnlimit-sample:" + sfnjob.RunName("base", j.Sender, "", "one-1", 0, 1); j.Sender == "" || !strings.HasSuffix(j.Executions[0].Arn, want) {
		t.Errorf("execution ARN = %s, want it to end with %s", j.Executions[0].Arn, want)
	}
	// Without --type, every type is searched.
	r = must(t, local(t, "job", "show", "one-1"), exitOK)
	if !strings.Contains(r.stdout, "job one-1 of type base: succeeded") || !strings.Contains(r.stdout, sfnjob.RunName("base", j.Sender, "", "one-1", 0, 1)) {
		t.Errorf("job show without --type:\n%s", r)
	}
	// An unknown job is an error, with advice.
	r = must(t, local(t, "job", "show", "never-sent", "--type", "base"), exitError)
	if !strings.Contains(r.stderr, "job not found") {
		t.Errorf("job show of an unknown job:\n%s", r)
	}
}

// A JSON Lines file: invalid lines are reported by number and not sent, the valid ones are sent and
// run; a job that fails once is retried and found with both attempts.
func TestSubmitFile(t *testing.T) {
	t.Parallel()
	typ := newType(t, "file", 3)
	lines := []string{
		fmt.Sprintf(`{"type":%q,"id":"f-1","input":{"seconds":1}}`, typ),
		`{"type":"bad-type","id":"x"}`,
		`not json`,
		"",
		`{"type":"nolimit","id":"x"}`,
		fmt.Sprintf(`{"type":%q,"id":"f 2"}`, typ),
		fmt.Sprintf(`{"type":%q,"id":"f-3","input":{"seconds":1,"failAttempts":1}}`, typ),
		fmt.Sprintf(`{"type":%q,"id":"f-1","input":{"seconds":1}}`, typ),
		fmt.Sprintf(`{"type":%q,"input":{"seconds":1}}`, typ),
	}
	path := filepath.Join(t.TempDir(), "jobs.jsonl")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	// --dry-run and --strict send nothing.
	r := must(t, local(t, "submit", path, "--dry-run"), exitError)
	if !strings.Contains(r.stdout, "dry run: 4 of 8 jobs") {
		t.Errorf("dry run:\n%s", r)
	}
	r = must(t, local(t, "submit", path, "--strict", "--json"), exitError)
	if s := decode[submitSummary](t, r); s.Sent != 0 || s.Held != 4 || len(s.Invalid) != 4 {
		t.Errorf("--strict summary = %+v, want nothing sent, 4 held, 4 invalid", s)
	}

	r = must(t, local(t, "submit", path), exitError)
	for _, want := range []string{
		"sent 4 of 8 jobs from " + path,
		"line 2: invalid_type",
		"line 3: not_json",
		"line 5: unknown_type",
		"line 6: invalid_id",
		"note: 1 line repeats the type, key and id of an earlier line",
		"note: 1 job has no id",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("submit summary lacks %q:\n%s", want, r)
		}
	}
	if !strings.Contains(r.stderr, "4 of 8 jobs not sent (4 invalid)") {
		t.Errorf("submit error:\n%s", r)
	}
	waitJob(t, typ, "f-1", "succeeded")
	j := waitJob(t, typ, "f-3", "succeeded")
	if len(j.Executions) != 2 || j.Executions[0].Status != "FAILED" || j.Executions[1].Status != "SUCCEEDED" || j.Attempt != 2 {
		t.Errorf("job f-3 = %+v, want a FAILED attempt 1 and a SUCCEEDED attempt 2", j)
	}
}

// Jobs from standard input, with a JSON summary.
func TestSubmitStdin(t *testing.T) {
	t.Parallel()
	typ := newType(t, "stdin", 2)
	var in strings.Builder
	for i := range 25 {
		fmt.Fprintf(&in, `{"type":%q,"id":"s-%d","input":{"seconds":0}}`+"\n", typ, i)
	}
	r := must(t, localIn(t, in.String(), "submit", "-", "--json", "--parallel", "3"), exitOK)
	s := decode[submitSummary](t, r)
	if s.Sent != 25 || s.Jobs != 25 || len(s.Failed) != 0 || len(s.Invalid) != 0 || s.Source != "standard input" {
		t.Errorf("summary = %+v, want 25 of 25 sent from standard input", s)
	}
	waitJob(t, typ, "s-24", "succeeded")
}

// status shows the limit and its source, the leases of running jobs, the oldest one, and the
// queues; --watch refreshes until interrupted.
func TestStatus(t *testing.T) {
	t.Parallel()
	typ := newType(t, "st", 2)
	var in strings.Builder
	for i := range 4 {
		fmt.Fprintf(&in, `{"type":%q,"id":"w-%d","input":{"seconds":10}}`+"\n", typ, i) // both lanes busy for about 20 s: a wide window to see them
	}
	must(t, localIn(t, in.String(), "submit", "-"), exitOK)

	type status struct {
		Target string `json:"target"`
		Types  []struct {
			Type     string         `json:"type"`
			Limit    int            `json:"limit"`
			Source   string         `json:"source"`
			Running  int            `json:"running"`
			Free     int            `json:"free"`
			ByStatus map[string]int `json:"byStatus"`
			Leases   []struct {
				Lane   int    `json:"lane"`
				Status string `json:"status"`
				JobID  string `json:"jobId"`
			} `json:"leases"`
			Oldest *struct {
				ID      string `json:"id"`
				Lane    int    `json:"lane"`
				Attempt int    `json:"attempt"`
			} `json:"oldest"`
		} `json:"types"`
		Queues struct {
			Lanes struct {
				Waiting, InFlight int
			} `json:"lanes"`
		} `json:"queues"`
	}
	eventually(t, 2*time.Minute, func() error {
		st := decode[status](t, must(t, local(t, "status", "--json"), exitOK))
		for _, ts := range st.Types {
			if ts.Type == "base" && (ts.Limit != 2 || ts.Source != "default") {
				return fmt.Errorf("base: limit %d from %s, want 2 from default", ts.Limit, ts.Source)
			}
			if ts.Type != typ {
				continue
			}
			if ts.Limit != 2 || ts.Source != "override" {
				return fmt.Errorf("%s: limit %d from %s, want 2 from override", typ, ts.Limit, ts.Source)
			}
			if ts.Running > 2 {
				t.Fatalf("%s: %d running, over its limit 2", typ, ts.Running)
			}
			// A started job's lease is its claim (a start writes nothing after it): status shows it
			// as started.
			if ts.Running != 2 || ts.ByStatus["started"] != 2 || ts.Free != 0 {
				return fmt.Errorf("%s: %d held (%v), %d free, want 2 started and none free\n%s", typ, ts.Running, ts.ByStatus, ts.Free, local(t, "status"))
			}
			if len(ts.Leases) != 2 || ts.Leases[0].Lane != 1 || ts.Leases[1].Lane != 2 || !strings.HasPrefix(ts.Leases[0].JobID, "w-") || ts.Leases[1].Status != "started" {
				return fmt.Errorf("%s: leases %+v, want lanes 1 and 2 held by started w- jobs", typ, ts.Leases)
			}
			if ts.Oldest == nil || !strings.HasPrefix(ts.Oldest.ID, "w-") || ts.Oldest.Attempt != 1 || ts.Oldest.Lane < 1 {
				return fmt.Errorf("%s: oldest = %+v", typ, ts.Oldest)
			}
			if st.Queues.Lanes.InFlight < 2 {
				return fmt.Errorf("lanes queue in flight %d, want at least 2", st.Queues.Lanes.InFlight)
			}
			return nil
		}
		return fmt.Errorf("no type %s in status", typ)
	})

	// The table says the same: both lanes held, started. (The columns are as wide as the longest
	// type name of the shared stack, and it has RATE, PAUSED and KEYS columns, "-" for this type,
	// once a type of it has a rate, a pause or keyed work.)
	row := regexp.MustCompile(`(?m)^` + typ + ` +2 +override +\S+ +step +2 +0 +(- +)*w-\d \(lane [12], attempt 1, started, \d+s\)$`)
	lanes := regexp.MustCompile(`(?m)^` + typ + ` +started 2 \(1-2\)$`)
	eventually(t, time.Minute, func() error {
		r := must(t, local(t, "status"), exitOK)
		for _, want := range []string{"TYPE", "RELEASE", "HELD", "FREE", "OLDEST LEASE", "LEASES BY STATUS", "lanes (FIFO)", "dead-letter", "FIFO in-flight quota of 120000"} {
			if !strings.Contains(r.stdout, want) {
				t.Fatalf("status table lacks %q:\n%s", want, r)
			}
		}
		if !row.MatchString(r.stdout) || !lanes.MatchString(r.stdout) {
			return fmt.Errorf("status lacks lines matching %s and %s:\n%s", row, lanes, r.stdout)
		}
		return nil
	})

	// --watch keeps printing frames until it is interrupted, then exits 0. How many frames fit in a
	// given time depends on the machine, so the test interrupts it after the third frame instead
	// (the deadline only bounds a watch that stopped refreshing).
	const wantFrames = 3
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	_, info := localStack(t)
	frames := &frameCounter{after: wantFrames, cancel: cancel}
	var errb bytes.Buffer
	code := run(ctx, append([]string{"status", "--watch", "--interval", "200ms", "--json"}, localFlags(info)...), strings.NewReader(""), frames, &errb)
	r := result{code: code, stdout: frames.String(), stderr: errb.String()}
	if r.code != exitOK {
		t.Fatalf("status --watch ended with:\n%s", r)
	}
	if n := strings.Count(r.stdout, "\n"); n < wantFrames {
		t.Errorf("status --watch printed %d frames before its 2-minute deadline, want %d:\n%s", n, wantFrames, r)
	}
	for i, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		if !json.Valid([]byte(line)) {
			t.Errorf("status --watch --json frame %d is not one JSON object a line: %q", i, line)
		}
	}
	waitJob(t, typ, "w-3", "succeeded")
}

// frameCounter is the output of `status --watch --json`: it keeps what is written and cancels the
// command once it has seen after lines (one frame a line).
type frameCounter struct {
	bytes.Buffer
	after  int
	cancel context.CancelFunc
}

func (f *frameCounter) Write(p []byte) (int, error) {
	n, err := f.Buffer.Write(p)
	if strings.Count(f.Buffer.String(), "\n") >= f.after {
		f.cancel()
	}
	return n, err
}

// `local up` with a parameter out of range prints the parameter's error (it used to panic).
func TestLocalUpReportsAParameterOutOfRange(t *testing.T) {
	t.Parallel()
	r := sfnlimitIn(t.Context(), "", "local", "up", "--param", "FifoVisibilityTimeout=1")
	if r.code == exitOK || !strings.Contains(r.stderr, "FifoVisibilityTimeout") {
		t.Errorf("sfnlimit local up --param FifoVisibilityTimeout=1:\n%s\nwant a failure naming the parameter", r)
	}
}
