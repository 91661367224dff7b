package ops

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
)

// config set --overflow writes the override's overflow rule; cancel or skip is refused (nothing
// written) for a type without a key cap, and so is taking away the key cap such a rule needs; --overflow ""
// removes the live rule, and the type's TypeOverflow entry, or queue, applies again.
func TestConfigSetOverflow(t *testing.T) {
	const needsCap = "type payments: overflow rule cancel needs a key cap (config set payments --key-limit N): it acts when a key is at its cap; nothing written"
	const skipNeedsCap = "type payments: overflow rule skip needs a key cap (config set payments --key-limit N): it acts when a key is at its cap; nothing written"
	tests := []struct {
		name      string
		overflows map[string]string // TypeOverflow
		keyLimits map[string]int    // TypeKeyLimits
		stored    []config.Override
		give      Change
		wantErr   string
		want      config.Override // stored after
		// the type's rule after and where it comes from
		wantRule, wantSource string
		wantWarning          string
	}{
		{
			name: "cancel with a key limit", give: Change{Type: "payments", KeyLimit: ptr(1), Overflow: ptr("cancel")},
			want:     config.Override{Type: "payments", KeyLimit: 1, Overflow: "cancel"},
			wantRule: "cancel", wantSource: OverflowFromOverride, wantWarning: "stops the oldest running job of its key from the same sender",
		},
		{
			name: "cancel with the TypeKeyLimits entry", keyLimits: map[string]int{"payments": 1}, give: Change{Type: "payments", Overflow: ptr("cancel")},
			want:     config.Override{Type: "payments", Overflow: "cancel"},
			wantRule: "cancel", wantSource: OverflowFromOverride,
		},
		{
			name: "cancel with a key's own cap", stored: []config.Override{{Type: "payments", KeyLimits: map[string]int{"acme": 1}}},
			give:     Change{Type: "payments", Overflow: ptr("cancel")},
			want:     config.Override{Type: "payments", KeyLimits: map[string]int{"acme": 1}, Overflow: "cancel"},
			wantRule: "cancel", wantSource: OverflowFromOverride,
		},
		{name: "cancel without a key cap", give: Change{Type: "payments", Overflow: ptr("cancel")}, wantErr: needsCap},
		{
			name: "the key cap a cancel rule needs taken away", stored: []config.Override{{Type: "payments", KeyLimit: 1, Overflow: "cancel"}},
			give: Change{Type: "payments", KeyLimit: ptr(0)}, wantErr: needsCap,
		},
		{
			name: "queue over TypeOverflow's cancel", overflows: map[string]string{"payments": "cancel"}, keyLimits: map[string]int{"payments": 1},
			give:     Change{Type: "payments", Overflow: ptr("queue")},
			want:     config.Override{Type: "payments", Overflow: "queue"},
			wantRule: "queue", wantSource: OverflowFromOverride,
		},
		{
			name: "unset: TypeOverflow applies again", overflows: map[string]string{"payments": "cancel"}, keyLimits: map[string]int{"payments": 1},
			stored:   []config.Override{{Type: "payments", Limit: 3, Overflow: "queue"}},
			give:     Change{Type: "payments", Overflow: ptr("")},
			want:     config.Override{Type: "payments", Limit: 3},
			wantRule: "cancel", wantSource: OverflowFromType, wantWarning: "its TypeOverflow entry, cancel, applies again",
		},
		{
			name: "unset: queue again", stored: []config.Override{{Type: "payments", KeyLimit: 1, Overflow: "cancel"}},
			give:     Change{Type: "payments", Overflow: ptr("")},
			want:     config.Override{Type: "payments", KeyLimit: 1},
			wantRule: "queue", wantSource: OverflowDefault,
		},
		{
			// A deployment whose rule cannot act: another change is let through, and says so.
			name: "a limit for a type whose TypeOverflow rule lacks a key cap", overflows: map[string]string{"payments": "cancel"},
			give:     Change{Type: "payments", Limit: ptr(4)},
			want:     config.Override{Type: "payments", Limit: 4},
			wantRule: "cancel", wantSource: OverflowFromType,
		},
		{
			name: "skip with a key limit", give: Change{Type: "payments", KeyLimit: ptr(1), Overflow: ptr("skip")},
			want:     config.Override{Type: "payments", KeyLimit: 1, Overflow: "skip"},
			wantRule: "skip", wantSource: OverflowFromOverride,
			wantWarning: "type payments: a job whose key is at its cap with an older job of the same sender holding a lane now ends skipped: it never runs, and is not dead-lettered",
		},
		{
			name: "cancel to skip", stored: []config.Override{{Type: "payments", KeyLimit: 1, Overflow: "cancel"}},
			give:     Change{Type: "payments", Overflow: ptr("skip")},
			want:     config.Override{Type: "payments", KeyLimit: 1, Overflow: "skip"},
			wantRule: "skip", wantSource: OverflowFromOverride, wantWarning: "now ends skipped",
		},
		{
			name: "skip with the TypeKeyLimits entry", keyLimits: map[string]int{"payments": 1}, give: Change{Type: "payments", Overflow: ptr("skip")},
			want:     config.Override{Type: "payments", Overflow: "skip"},
			wantRule: "skip", wantSource: OverflowFromOverride,
		},
		{name: "skip without a key cap", give: Change{Type: "payments", Overflow: ptr("skip")}, wantErr: skipNeedsCap},
		{
			name: "the key cap a skip rule needs taken away", stored: []config.Override{{Type: "payments", KeyLimit: 1, Overflow: "skip"}},
			give: Change{Type: "payments", KeyLimit: ptr(0)}, wantErr: skipNeedsCap,
		},
		{name: "an unknown rule", give: Change{Type: "payments", Overflow: ptr("debounce")}, wantErr: `--overflow: unknown overflow rule "debounce" (known: queue, cancel, skip)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			d := defaults()
			d.Overflows, d.KeyLimits = tt.overflows, tt.keyLimits
			store := newMemStore(tt.stored...)
			e := ConfigEditor{Store: store, Defaults: d, CacheAge: time.Second}
			res, err := e.Set(ctx, tt.give)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Set() = %v, want an error with %q", err, tt.wantErr)
				}
				if _, usage := err.(UsageError); !usage {
					t.Errorf("Set() error %T, want a UsageError (exit 2)", err)
				}
				if store.writes != 0 {
					t.Errorf("a refused change wrote %d times: %v", store.writes, store.items)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := store.items[tt.give.Type]; !reflect.DeepEqual(got, tt.want) {
				t.Errorf("stored override = %+v, want %+v", got, tt.want)
			}
			if res.After.Overflow != tt.wantRule || res.After.OverflowSource != tt.wantSource {
				t.Errorf("Set() overflow %s (%s), want %s (%s)", res.After.Overflow, res.After.OverflowSource, tt.wantRule, tt.wantSource)
			}
			if w := strings.Join(res.Warnings, "\n"); tt.wantWarning != "" && !strings.Contains(w, tt.wantWarning) {
				t.Errorf("Set() warnings = %q, want %q", res.Warnings, tt.wantWarning)
			}
			var b strings.Builder
			if err := res.WriteTable(&b); err != nil {
				t.Fatal(err)
			}
			if want := " -> " + tt.wantRule + " (" + tt.wantSource + ")\n"; !strings.Contains(b.String(), want) {
				t.Errorf("WriteTable() lacks %q:\n%s", want, b.String())
			}
		})
	}
}

func TestChangeValidateOverflow(t *testing.T) {
	for give, wantErr := range map[string]string{"cancel": "", "skip": "", "queue": "", "": "", "Cancel": "unknown overflow rule", "debounce": "unknown overflow rule"} {
		err := Change{Type: "payments", Overflow: ptr(give)}.Validate()
		if (err == nil) != (wantErr == "") || err != nil && !strings.Contains(err.Error(), wantErr) {
			t.Errorf("Validate(--overflow %q) = %v, want %q", give, err, wantErr)
		}
	}
}

// config get shows each type's rule and its source (text and JSON), the OVERFLOW column only once
// some type has a rule other than queue, and a rule that cannot act, with why.
func TestConfigGetOverflow(t *testing.T) {
	ctx := context.Background()
	plain := ConfigEditor{Store: newMemStore(), Defaults: defaults(), CacheAge: time.Second}
	v, err := plain.Get(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := v.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "OVERFLOW") {
		t.Errorf("config get without rules shows an OVERFLOW column:\n%s", b.String())
	}

	for _, rule := range []string{config.OverflowCancel, config.OverflowSkip} {
		t.Run(rule, func(t *testing.T) {
			d := defaults()
			d.Overflows = map[string]string{"reports": rule}
			e := ConfigEditor{Store: newMemStore(config.Override{Type: "payments", KeyLimit: 1, Overflow: rule}), Defaults: d, CacheAge: time.Second}
			v, err := e.Get(ctx, "")
			if err != nil {
				t.Fatal(err)
			}
			byType := map[string]TypeView{}
			for _, tv := range v.Types {
				byType[tv.Type] = tv
			}
			if p := byType["payments"]; p.Overflow != rule || p.OverflowSource != OverflowFromOverride || p.OverflowProblem != "" || p.Override.Overflow != rule {
				t.Errorf("payments = %+v, want %s (override) that acts", p, rule)
			}
			if r := byType["reports"]; r.Overflow != rule || r.OverflowSource != OverflowFromType || !strings.Contains(r.OverflowProblem, "needs a key cap") {
				t.Errorf("reports = %+v, want %s (TypeOverflow) that lacks a key cap", r, rule)
			}
			var b strings.Builder
			if err := v.WriteTable(&b); err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{
				"OVERFLOW", rule + " (override)", "keyLimit=1 overflow=" + rule, rule + " (TypeOverflow)!",
				"Overflow rules without an override: reports=" + rule + " (TypeOverflow); other types queue.\n",
				"WARNING (!): type reports: overflow rule " + rule + " needs a key cap (config set reports --key-limit N): it acts when a key is at its cap; until then the type queues.\n",
			} {
				if !strings.Contains(b.String(), want) {
					t.Errorf("config get lacks %q:\n%s", want, b.String())
				}
			}
			js, err := json.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{`"overflow":"` + rule + `","overflowSource":"override"`, `"overflows":{"reports":"` + rule + `"}`} {
				if !strings.Contains(string(js), want) {
					t.Errorf("config get --json lacks %s: %s", want, js)
				}
			}
		})
	}
}

// status names the types whose overflow rule is cancel or skip and acts, below its table, and in
// JSON; a type that queues, or whose rule lacks a key cap, keeps the output as it was.
func TestStatusOverflow(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, tt := range []struct{ rule, line string }{
		{config.OverflowCancel, "Overflow rule cancel: payments (a job whose key is at its cap stops its key's oldest running job of the same sender; see sfnlimit config get).\n"},
		{config.OverflowSkip, "Overflow rule skip: payments (a job whose key is at its cap with an older job of the same sender holding a lane ends skipped, without running; see sfnlimit config get).\n"},
	} {
		t.Run(tt.rule, func(t *testing.T) {
			d := defaults()
			d.Overflows = map[string]string{"reports": tt.rule} // no key cap: the rule does not act
			ovs := staticStore{{Type: "payments", KeyLimit: 1, Overflow: tt.rule}}
			st, err := StatusReader{SQS: noQueues, Defaults: d, Overrides: ovs, Now: func() time.Time { return now }, Leases: leaseTable(t)}.Read(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for _, ts := range st.Types {
				got[ts.Type] = ts.Overflow
			}
			if want := map[string]string{"payments": tt.rule, "reports": ""}; !reflect.DeepEqual(got, want) {
				t.Errorf("status overflow = %v, want %v", got, want)
			}
			var b strings.Builder
			if err := st.WriteTable(&b); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(b.String(), tt.line) {
				t.Errorf("status lacks %q:\n%s", tt.line, b.String())
			}
			if strings.Count(b.String(), "Overflow rule") != 1 {
				t.Errorf("status names another rule:\n%s", b.String())
			}
		})
	}

	st, err := StatusReader{SQS: noQueues, Defaults: defaults(), Overrides: staticStore{}, Now: func() time.Time { return now }, Leases: leaseTable(t)}.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := st.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "Overflow") {
		t.Errorf("status without rules mentions them:\n%s", b.String())
	}
}

// config reset of a type whose TypeOverflow rule is cancel or skip and whose key cap is the live
// item's takes away the cap the rule needs, as config set --key-limit 0 would (refused there): it is
// refused alike, nothing written, or at least says the rule no longer acts. Without that the result
// reads "cancel -> cancel (TypeOverflow)" while the type queues.
func TestConfigResetTakingAwayTheKeyCapACancelRuleNeeds(t *testing.T) {
	ctx := context.Background()
	for _, rule := range []string{config.OverflowCancel, config.OverflowSkip} {
		t.Run(rule, func(t *testing.T) {
			d := defaults()
			d.Overflows = map[string]string{"payments": rule}
			store := newMemStore(config.Override{Type: "payments", KeyLimit: 1})
			e := ConfigEditor{Store: store, Defaults: d, CacheAge: time.Second}
			if _, err := e.Set(ctx, Change{Type: "payments", KeyLimit: ptr(0)}); err == nil || !strings.Contains(err.Error(), "overflow rule "+rule+" needs a key cap") {
				t.Fatalf("Set(--key-limit 0) = %v, want refused: the TypeOverflow rule %s needs the cap", err, rule)
			}
			res, err := e.Reset(ctx, "payments", false)
			if err != nil {
				if !strings.Contains(err.Error(), "needs a key cap") || len(store.items) != 1 {
					t.Errorf("Reset() = %v, items %v; want refused for the key cap, nothing written", err, store.items)
				}
				return
			}
			if res.After.OverflowProblem == "" {
				t.Fatalf("after the reset the rule has no problem: %+v", res.After)
			}
			if w := strings.Join(res.Warnings, "\n"); !strings.Contains(w, "overflow rule "+rule+" needs a key cap") || !strings.Contains(w, "until then type payments queues") {
				t.Errorf("Reset() took away the key cap the TypeOverflow rule %s needs without a word: warnings %q", rule, res.Warnings)
			}
		})
	}
}
