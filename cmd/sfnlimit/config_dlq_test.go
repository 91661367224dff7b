package main

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	sfnjob "github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/tools/ops"
	"github.com/sfnlimit/sfnlimit/internal/tools/resources"
)

// config get, set and reset show and change live overrides with the limiter's rules, and the
// router acts on them.
func TestConfig(t *testing.T) {
	t.Parallel()
	s, _ := localStack(t)
	typ := fmt.Sprintf("cfg%d", typeSeq.Add(1))

	v := decode[ops.ConfigView](t, must(t, local(t, "config", "get", "--json"), exitOK))
	if v.FallbackLimit != 0 || v.DefaultMaxAttempts != 2 || v.CacheSeconds != 1 || v.Quota != 120000 {
		t.Errorf("config get = %+v, want fallback 0, 2 attempts, cache 1s", v)
	}
	if base := find(v.Types, "base"); base == nil || base.Limit != 2 || base.Source != "default" || base.Override != nil {
		t.Errorf("config get base = %+v, want limit 2 from default", base)
	}

	res := decode[ops.SetResult](t, must(t, local(t, "config", "set", typ, "--limit", "3", "--json", "--new-type"), exitOK))
	if res.Before.Limit != 0 || res.After.Limit != 3 || res.After.Source != "override" || res.After.MaxAttempts != 2 {
		t.Errorf("config set --limit 3 = %+v", res)
	}
	// Only the fields given change.
	res = decode[ops.SetResult](t, must(t, local(t, "config", "set", typ, "--max-attempts", "4", "--json"), exitOK))
	if res.After.Limit != 3 || res.After.MaxAttempts != 4 || *res.After.Override != (ops.OverrideView{Limit: 3, MaxAttempts: 4}) {
		t.Errorf("config set --max-attempts 4 = %+v, want limit 3 kept", res.After)
	}
	sm := s.Info().Output("SampleStateMachineArn")
	must(t, local(t, "config", "set", typ, "--state-machine", sm), exitOK)
	r := must(t, local(t, "config", "set", typ, "--state-machine", strings.Replace(sm, "sfnlimit-sample", "nope", 1)), exitUsage)
	if !strings.Contains(r.stderr, "does not exist") {
		t.Errorf("config set with a missing state machine:\n%s", r)
	}
	// The quota counts every limit: base's 2 and this one's.
	r = must(t, local(t, "config", "set", typ, "--limit", "119999"), exitUsage)
	if !strings.Contains(r.stderr, "in-flight quota") {
		t.Errorf("config set over the quota:\n%s", r)
	}
	r = must(t, local(t, "config", "get", typ), exitOK)
	if !strings.Contains(r.stdout, typ+"  3") || !strings.Contains(r.stdout, "limit=3 maxAttempts=4") {
		t.Errorf("config get %s:\n%s", typ, r)
	}

	// The router takes the new type within the cache time: a job of it runs.
	waitCache()
	must(t, local(t, "submit", "--type", typ, "--id", "c-1", "--input", `{"seconds":0}`), exitOK)
	waitJob(t, typ, "c-1", "succeeded")

	// The type exists only as its override: a reset would dead-letter its queued jobs, so it says
	// what it can count and asks for --force. A job that holds its lane is counted.
	must(t, local(t, "submit", "--type", typ, "--id", "c-long", "--input", `{"seconds":600}`), exitOK)
	waitJob(t, typ, "c-long", "running")
	r = must(t, local(t, "config", "reset", typ), exitUsage)
	for _, want := range []string{"exists only as a live override", "unknown_type", "1 of its jobs holds a lane", "SQS cannot count one type's messages", "--force"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("config reset of an override-only type without --force lacks %q:\n%s", want, r)
		}
	}
	if tv := find(decode[ops.ConfigView](t, must(t, local(t, "config", "get", "--json"), exitOK)).Types, typ); tv == nil || tv.Limit != 3 {
		t.Errorf("config get after a refused reset = %+v, want limit 3 kept", tv)
	}
	res = decode[ops.SetResult](t, must(t, local(t, "config", "reset", typ, "--force", "--json"), exitOK))
	if res.Before.Limit != 3 || res.After.Limit != 0 || res.After.Override != nil || len(res.Warnings) == 0 {
		t.Errorf("config reset = %+v, want no limit left and a warning", res)
	}
	if v := decode[ops.ConfigView](t, must(t, local(t, "config", "get", "--json"), exitOK)); find(v.Types, typ) != nil {
		t.Errorf("config get after reset still lists %s: %+v", typ, v.Types)
	}
	// Submitting to it now is refused before anything is sent.
	r = must(t, local(t, "submit", "--type", typ, "--id", "c-2"), exitUsage)
	if !strings.Contains(r.stderr, "--type: unknown_type") {
		t.Errorf("submit to a reset type:\n%s", r)
	}
}

// config set refuses what is most likely a mistake, and writes nothing: a type the stack does not
// know (a typo: the closest known type is suggested; --new-type adds one), attempts out of the
// template's range, and a change that would write nothing new (removing a key cap the type does not
// have). A change written says when it applies, with the ConfigCacheSeconds the stack runs with: the
// info file's parameters, without --param.
func TestConfigSetMistakes(t *testing.T) {
	t.Parallel()
	_, info := localStack(t)
	r := must(t, local(t, "config", "set", "bsae", "--limit", "3"), exitUsage)
	if !strings.Contains(r.stderr, "type bsae is not known to the stack") || !strings.Contains(r.stderr, "Did you mean base?") || !strings.Contains(r.stderr, "add --new-type") {
		t.Errorf("config set of a typo:\n%s", r)
	}
	if v := decode[ops.ConfigView](t, must(t, local(t, "config", "get", "--json"), exitOK)); find(v.Types, "bsae") != nil {
		t.Errorf("config set of a typo created type bsae: %+v", v.Types)
	}
	r = must(t, local(t, "config", "set", "base", "--max-attempts", "9999999999999"), exitUsage)
	if !strings.Contains(r.stderr, "--max-attempts 9999999999999 must be 1-999") {
		t.Errorf("config set --max-attempts 9999999999999:\n%s", r)
	}
	r = must(t, local(t, "config", "set", "base", "--key", "acme", "--limit", "0"), exitOK)
	if !strings.Contains(r.stdout, "note: nothing changed, nothing written: type base has no live override") {
		t.Errorf("config set --key acme --limit 0 of a type without key caps:\n%s", r)
	}
	if v := decode[ops.ConfigView](t, must(t, local(t, "config", "get", "base", "--json"), exitOK)); v.Types[0].Override != nil {
		t.Errorf("config set that changed nothing wrote %+v", v.Types[0].Override)
	}
	typ := fmt.Sprintf("when%d", typeSeq.Add(1))
	r = must(t, sfnlimitIn(t.Context(), "", "config", "set", typ, "--limit", "2", "--new-type", "--local", info), exitOK)
	if lines := strings.SplitN(r.stdout, "\n", 3); len(lines) < 2 || !strings.HasPrefix(lines[1], "the change applies within 1s (ConfigCacheSeconds)") {
		t.Errorf("config set does not say, below the change, that it applies within the stack's 1s:\n%s", r)
	}
}

// config reset of a paused type would resume it: refused (exit 2, nothing written) with what it
// would do, unless --force.
func TestConfigResetOfAPausedType(t *testing.T) {
	t.Parallel()
	typ := newType(t, "rstp", 1)
	must(t, local(t, "pause", typ, "--reason", "outage"), exitOK)
	r := must(t, local(t, "config", "reset", typ), exitUsage)
	if !strings.Contains(r.stderr, "type "+typ+" is paused") || !strings.Contains(r.stderr, "so it resumes within 1s (ConfigCacheSeconds)") || !strings.Contains(r.stderr, "add --force") {
		t.Errorf("config reset of a paused type:\n%s", r)
	}
	if v := decode[ops.ConfigView](t, must(t, local(t, "config", "get", typ, "--json"), exitOK)); v.Types[0].Pause == nil {
		t.Errorf("a refused reset resumed %s: %+v", typ, v.Types[0])
	}
	r = must(t, local(t, "config", "reset", typ, "--force"), exitOK)
	if !strings.Contains(r.stdout, "note: type "+typ+" was paused") {
		t.Errorf("config reset --force of a paused type:\n%s", r)
	}
}

// config set --strategy writes the override's strategy and keeps its other fields; config get shows
// each type's strategy and where it comes from; a strategy that cannot be chosen (unknown, or the
// retired least-loaded) is refused with why, and nothing is written.
func TestConfigStrategy(t *testing.T) {
	t.Parallel()
	typ := fmt.Sprintf("strat%d", typeSeq.Add(1))
	get := func(typ string) ops.TypeView {
		t.Helper()
		v := decode[ops.ConfigView](t, must(t, local(t, "config", "get", typ, "--json"), exitOK))
		if len(v.Types) != 1 || v.Strategy != "first-free" {
			t.Fatalf("config get %s = %+v, want one type and the stack's LaneStrategy read as first-free", typ, v)
		}
		return v.Types[0]
	}

	// The shared stack runs with the template's LaneStrategy, which reads as first-free (the
	// default, or the retired least-loaded).
	if b := get("base"); b.Strategy != "first-free" || b.StrategySource != "default" {
		t.Errorf("base: strategy %s from %s, want first-free from default", b.Strategy, b.StrategySource)
	}
	steps := []struct {
		args       []string
		want       ops.OverrideView // the stored override after
		wantSource string
		wantOut    string // in the table of config set
	}{
		{args: []string{"--limit", "3", "--strategy", "random", "--new-type"}, want: ops.OverrideView{Limit: 3, Strategy: "random"}, wantSource: "override",
			wantOut: "strategy first-free -> random (override)"},
		{args: []string{"--max-attempts", "4"}, want: ops.OverrideView{Limit: 3, MaxAttempts: 4, Strategy: "random"}, wantSource: "override",
			wantOut: "limit=3 maxAttempts=4 strategy=random"},
		{args: []string{"--strategy", "first-free"}, want: ops.OverrideView{Limit: 3, MaxAttempts: 4, Strategy: "first-free"}, wantSource: "override",
			wantOut: "first-free (override)"},
		{args: []string{"--strategy", "hashed"}, want: ops.OverrideView{Limit: 3, MaxAttempts: 4, Strategy: "random"}, wantSource: "override",
			wantOut: "random (override)"},
	}
	for _, st := range steps {
		r := must(t, local(t, append([]string{"config", "set", typ}, st.args...)...), exitOK)
		if !strings.Contains(r.stdout, st.wantOut) {
			t.Errorf("config set %s lacks %q:\n%s", strings.Join(st.args, " "), st.wantOut, r)
		}
		tv := get(typ)
		if tv.Override == nil || *tv.Override != st.want || tv.Strategy != st.want.Strategy || tv.StrategySource != st.wantSource {
			t.Errorf("after config set %s: %+v (override %+v), want override %+v", strings.Join(st.args, " "), tv, tv.Override, st.want)
		}
	}
	r := must(t, local(t, "config", "get"), exitOK)
	for _, want := range []string{"STRATEGY", "random (override)", "Lane strategy without an override: first-free (LaneStrategy"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("config get lacks %q:\n%s", want, r)
		}
	}

	// Refused: exit 2, why, nothing written: not to this type's override, nor to base or a type
	// unknown so far, which have none. (base is shared by the package's tests: it is only ever
	// refused here.)
	fresh := fmt.Sprintf("strat%d", typeSeq.Add(1))
	for _, tt := range []struct {
		typ, strategy, want string
	}{
		{typ, "least-loaded", "--strategy: lane strategy least-loaded is retired: it kept a counter per lane"},
		{"base", "least-loaded", "types still configured least-loaded run as first-free"},
		{fresh, "least-loaded", "is retired"},
		{typ, "fastest", `--strategy: unknown lane strategy "fastest" (known: first-free, random)`},
		{typ, "Least-Loaded", `unknown lane strategy "Least-Loaded" (known: first-free, random)`},
		{typ, "", "--strategy needs a name (known: first-free, random)"},
		{"base", "round-robin", `unknown lane strategy "round-robin" (known: first-free, random)`},
		{fresh, "least_loaded", `unknown lane strategy "least_loaded" (known: first-free, random)`},
	} {
		before := get(tt.typ)
		r := must(t, local(t, "config", "set", tt.typ, "--limit", "2", "--strategy", tt.strategy), exitUsage)
		if !strings.Contains(r.stderr, tt.want) {
			t.Errorf("config set %s --strategy %q: stderr lacks %q:\n%s", tt.typ, tt.strategy, tt.want, r)
		}
		if after := get(tt.typ); fmt.Sprint(after.Override) != fmt.Sprint(before.Override) || after.Limit != before.Limit || after.Strategy != before.Strategy {
			t.Errorf("a refused config set %s changed it: %+v (override %v) -> %+v (override %v)", tt.typ, before, before.Override, after, after.Override)
		}
	}

	if f := get(fresh); f.Override != nil || f.Source != "none" {
		t.Errorf("%s after refused changes = %+v, want no override", fresh, f)
	}

	// reset drops the whole override: the deployment's strategy applies again.
	must(t, local(t, "config", "reset", typ, "--force"), exitOK)
	if tv := get(typ); tv.Strategy != "first-free" || tv.StrategySource != "default" || tv.Override != nil || tv.Source != "none" {
		t.Errorf("%s after reset = %+v, want first-free from default and no override", typ, tv)
	}
}

// A type configured least-loaded before it was retired keeps working: a live item written then
// (here straight into the table, as config set now refuses it) runs as first-free, and config get
// and status say it is configured least-loaded. So does a deployment whose LaneStrategy is
// least-loaded (here --param, the local stack's parameters as the command reads them).
func TestRetiredStrategy(t *testing.T) {
	t.Parallel()
	s, _ := localStack(t)
	typ := fmt.Sprintf("ll%d", typeSeq.Add(1))
	store := config.NewDynamoStore(dynamodb.NewFromConfig(s.AWSConfig(nil)), s.Info().Output(resources.TableName))
	if err := store.SetOverride(t.Context(), config.Override{Type: typ, Limit: 2, Strategy: "least-loaded"}); err != nil {
		t.Fatal(err)
	}
	type typeStatus struct {
		Type            string `json:"type"`
		Strategy        string `json:"strategy"`
		RetiredStrategy string `json:"retiredStrategy"`
	}
	statusOf := func(args ...string) typeStatus {
		t.Helper()
		st := decode[struct {
			Types []typeStatus `json:"types"`
		}](t, must(t, local(t, append([]string{"status", "--json"}, args...)...), exitOK))
		for _, ts := range st.Types {
			if ts.Type == typ {
				return ts
			}
		}
		t.Fatalf("status has no type %s: %+v", typ, st.Types)
		return typeStatus{}
	}
	v := decode[ops.ConfigView](t, must(t, local(t, "config", "get", typ, "--json"), exitOK))
	if tv := v.Types[0]; tv.Strategy != "first-free" || tv.RetiredStrategy != "least-loaded" || tv.StrategySource != "override" || tv.Override.Strategy != "least-loaded" {
		t.Errorf("config get %s = %+v (override %+v), want first-free, configured least-loaded by its live item", typ, tv, tv.Override)
	}
	if ts := statusOf(); ts.Strategy != "first-free" || ts.RetiredStrategy != "least-loaded" {
		t.Errorf("status %s = %+v, want first-free, configured least-loaded", typ, ts)
	}
	r := must(t, local(t, "status"), exitOK)
	if !regexp.MustCompile(`(?m)^`+typ+` +2 +override +first-free\* `).MatchString(r.stdout) || !strings.Contains(r.stdout, typ+" (least-loaded)") {
		t.Errorf("status does not mark %s as configured least-loaded:\n%s", typ, r)
	}
	// A job of it runs (as first-free).
	waitCache()
	must(t, local(t, "submit", "--type", typ, "--id", "ll-1", "--input", `{"seconds":0}`), exitOK)
	waitJob(t, typ, "ll-1", "succeeded")

	// Another field set keeps the stored strategy, and says so; first-free rewrites it.
	r = must(t, local(t, "config", "set", typ, "--max-attempts", "3"), exitOK)
	if !strings.Contains(r.stdout, "note: the live override of type "+typ+" keeps lane strategy least-loaded, which is retired: it runs as first-free") {
		t.Errorf("config set --max-attempts over a least-loaded item:\n%s", r)
	}
	res := decode[ops.SetResult](t, must(t, local(t, "config", "set", typ, "--strategy", "first-free", "--json"), exitOK))
	if res.After.Strategy != "first-free" || res.After.RetiredStrategy != "" || *res.After.Override != (ops.OverrideView{Limit: 2, MaxAttempts: 3, Strategy: "first-free"}) {
		t.Errorf("config set --strategy first-free = %+v (override %+v), want the item rewritten", res.After, res.After.Override)
	}
	if ts := statusOf(); ts.Strategy != "first-free" || ts.RetiredStrategy != "" {
		t.Errorf("status %s after rewriting = %+v, want first-free and nothing retired", typ, ts)
	}

	// The deployment's LaneStrategy: every type without a strategy of its own.
	v = decode[ops.ConfigView](t, must(t, local(t, "config", "get", "base", "--json", "--param", "LaneStrategy=least-loaded"), exitOK))
	if v.Strategy != "first-free" || v.RetiredStrategy != "least-loaded" || v.Types[0].Strategy != "first-free" || v.Types[0].RetiredStrategy != "least-loaded" {
		t.Errorf("config get base with LaneStrategy least-loaded = %+v, want first-free, configured least-loaded", v)
	}
	r = must(t, local(t, "config", "get", "--param", "LaneStrategy=least-loaded"), exitOK)
	if !strings.Contains(r.stdout, "Lane strategy without an override: first-free (LaneStrategy least-loaded, which is retired)") {
		t.Errorf("config get with LaneStrategy least-loaded:\n%s", r)
	}
	if ts := statusOf("--param", "LaneStrategy=least-loaded"); ts.Strategy != "first-free" || ts.RetiredStrategy != "" {
		t.Errorf("status %s with LaneStrategy least-loaded = %+v, want its own first-free, nothing retired", typ, ts)
	}
	must(t, local(t, "config", "reset", typ, "--force"), exitOK)
}

func find(ts []ops.TypeView, typ string) *ops.TypeView {
	for i := range ts {
		if ts[i].Type == typ {
			return &ts[i]
		}
	}
	return nil
}

type deadLetters struct {
	Seen        int              `json:"seen"`
	DeadLetters []ops.DeadLetter `json:"deadLetters"`
}

// dlq list shows dead letters without consuming them; dlq redrive sends the chosen ones back, leaves
// those the router would refuse again, and a redriven job runs under a fresh name.
func TestDLQ(t *testing.T) {
	t.Parallel()
	failing := newType(t, "dl", 1)
	ghost := fmt.Sprintf("ghost%d", typeSeq.Add(1)) // no limit: the router refuses its jobs
	must(t, local(t, "submit", "--type", failing, "--id", "d-1", "--input", `{"fail":true}`), exitOK)
	must(t, local(t, "submit", "--type", ghost, "--id", "g-1", "--skip-type-check"), exitOK)

	filter := []string{"--type", failing + "," + ghost}
	var list deadLetters
	eventually(t, 3*time.Minute, func() error {
		list = decode[deadLetters](t, must(t, local(t, append([]string{"dlq", "list", "--json"}, filter...)...), exitOK))
		if len(list.DeadLetters) != 2 {
			return fmt.Errorf("%d dead letters of %s and %s, want 2", len(list.DeadLetters), failing, ghost)
		}
		return nil
	})
	byType := map[string]ops.DeadLetter{}
	for _, d := range list.DeadLetters {
		byType[d.Type] = d
	}
	if d := byType[failing]; d.Reason != "attempts_exhausted" || d.JobID != "d-1" || d.Attempt != 2 || d.Source != "releaser" || !strings.Contains(d.Body, `"redrive":1`) {
		t.Errorf("dead letter of %s = %+v", failing, d)
	}
	if d := byType[ghost]; d.Reason != "unknown_type" || d.JobID != "g-1" || d.Source != "router" {
		t.Errorf("dead letter of %s = %+v", ghost, d)
	}
	// Listing again finds the same messages: nothing was consumed.
	again := decode[deadLetters](t, must(t, local(t, append([]string{"dlq", "list", "--json"}, filter...)...), exitOK))
	if len(again.DeadLetters) != 2 || again.DeadLetters[0].MessageID != list.DeadLetters[0].MessageID || again.DeadLetters[0].Received <= list.DeadLetters[0].Received {
		t.Errorf("second list = %+v, want the same 2 messages received again", again.DeadLetters)
	}
	r := must(t, local(t, append([]string{"dlq", "list"}, filter...)...), exitOK)
	for _, want := range []string{"REASON", "attempts_exhausted", "unknown_type", "d-1", "g-1"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("dlq list lacks %q:\n%s", want, r)
		}
	}

	// The ghost's type still has no limit: the redrive leaves it.
	r = must(t, local(t, "dlq", "redrive", "--type", ghost), exitError)
	if !strings.Contains(r.stdout, "the router would refuse them again: 1") {
		t.Errorf("redrive of a type with no limit:\n%s", r)
	}
	// A dry run applies the same rules: it would not send the ghost's job either.
	r = must(t, local(t, "dlq", "redrive", "--type", ghost, "--dry-run"), exitError)
	if !strings.Contains(r.stdout, "would redrive to the general queue: 0") || !strings.Contains(r.stdout, "the router would refuse them again: 1") {
		t.Errorf("redrive --dry-run of a type with no limit, want 0 to redrive and 1 refused:\n%s", r)
	}
	// An unknown reason is a usage error, not an empty list.
	r = must(t, local(t, "dlq", "list", "--reason", "nonsense"), exitUsage)
	if !strings.Contains(r.stderr, "nonsense") || !strings.Contains(r.stderr, "attempts_exhausted") {
		t.Errorf("dlq list --reason nonsense, want the known reasons named:\n%s", r)
	}
	// Give it a limit, and the redrive sends it back; it then runs and succeeds.
	must(t, local(t, "config", "set", ghost, "--limit", "1", "--new-type"), exitOK)
	waitCache()
	dry := decode[ops.RedriveResult](t, must(t, local(t, "dlq", "redrive", "--type", ghost, "--dry-run", "--json"), exitOK))
	if !dry.DryRun || dry.Redriven != 0 || len(dry.WouldRedrive) != 1 || dry.WouldRedrive[0].JobID != "g-1" || len(dry.Refused) != 0 {
		t.Errorf("redrive --dry-run once the type has a limit = %+v, want g-1 to redrive and nothing moved", dry)
	}
	res := decode[ops.RedriveResult](t, must(t, local(t, "dlq", "redrive", "--type", ghost, "--reason", "unknown_type", "--json"), exitOK))
	if res.Redriven != 1 || len(res.SendFailed)+len(res.DeleteFailed)+len(res.Refused) != 0 {
		t.Errorf("redrive = %+v, want 1 redriven\n%s", res, local(t, "dlq", "list", "--type", ghost))
	}
	waitJob(t, ghost, "g-1", "succeeded")

	// The failing job is redriven once per run even though it fails again while the run goes on;
	// its second run has fresh execution names.
	res = decode[ops.RedriveResult](t, must(t, local(t, "dlq", "redrive", "--type", failing, "--json"), exitOK))
	if res.Redriven != 1 {
		t.Errorf("redrive of %s = %+v, want 1 redriven", failing, res)
	}
	eventually(t, 3*time.Minute, func() error {
		r := must(t, local(t, "job", "show", "d-1", "--type", failing, "--json"), exitOK)
		j := decode[[]jobState](t, r)[0]
		if len(j.Executions) != 4 || j.Executions[3].Redrive != 1 || j.State != "dead-lettered" {
			return fmt.Errorf("job d-1 = %+v, want 4 executions, the last two of redrive 1", j)
		}
		if want := ":" + sfnjob.RunName(failing, j.Sender, "", "d-1", 1, 2); j.Sender == "" || !strings.HasSuffix(j.Executions[3].Arn, want) {
			return fmt.Errorf("redriven execution %s (sender %q), want the name %s", j.Executions[3].Arn, j.Sender, want)
		}
		return nil
	})
	eventually(t, 3*time.Minute, func() error {
		l := decode[deadLetters](t, must(t, local(t, "dlq", "list", "--json", "--type", failing), exitOK))
		if len(l.DeadLetters) != 1 || !strings.Contains(l.DeadLetters[0].Body, `"redrive":2`) {
			return fmt.Errorf("dead letters of %s = %+v, want the one of the redriven run", failing, l.DeadLetters)
		}
		return nil
	})
	if l := decode[deadLetters](t, must(t, local(t, "dlq", "list", "--json", "--type", ghost), exitOK)); len(l.DeadLetters) != 0 {
		t.Errorf("dead letters of %s after its redrive = %+v, want none", ghost, l.DeadLetters)
	}
}
