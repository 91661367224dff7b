package config_test

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lane"
)

func TestParseOverflows(t *testing.T) {
	tests := []struct {
		give    string
		want    map[string]string
		wantErr string
	}{
		{give: "", want: map[string]string{}},
		{give: "reindex=cancel", want: map[string]string{"reindex": "cancel"}},
		{give: "reindex=cancel,sync=queue", want: map[string]string{"reindex": "cancel", "sync": "queue"}},
		{give: "reindex=cancel,sync=skip", want: map[string]string{"reindex": "cancel", "sync": "skip"}},
		{give: "reindex=debounce", wantErr: `unknown overflow rule "debounce"`},
		{give: "reindex=", wantErr: "no overflow rule"},
		{give: "reindex", wantErr: "not type=rule"},
		{give: "reindex=cancel,reindex=queue", wantErr: "listed twice"},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			got, err := config.ParseOverflows(tt.give)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseOverflows(%q) = %v, %v; want an error mentioning %q", tt.give, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("ParseOverflows(%q) = %v, %v; want %v", tt.give, got, err, tt.want)
			}
			if back := config.FormatOverflows(got); back != tt.give {
				t.Errorf("FormatOverflows = %q, want %q", back, tt.give)
			}
		})
	}
}

// cancel acts when a key is at its cap: a type whose rule is cancel needs a key cap and the
// first-free strategy, or its rule does not act (Cancels) and the CLI refuses it (CheckOverflow).
func TestCheckOverflow(t *testing.T) {
	tests := []struct {
		name    string
		give    config.TypeConfig
		wantErr string
	}{
		{name: "queue needs nothing", give: config.TypeConfig{Type: "r", Overflow: config.OverflowQueue, Strategy: lane.Random}},
		{name: "no rule", give: config.TypeConfig{Type: "r", Strategy: lane.FirstFree}},
		{name: "cancel with a key limit", give: config.TypeConfig{Type: "r", Overflow: "cancel", KeyLimit: 1, Strategy: lane.FirstFree}},
		{name: "cancel with keys of their own cap", give: config.TypeConfig{Type: "r", Overflow: "cancel", KeyLimits: map[string]int{"acme": 2}, Strategy: lane.FirstFree}},
		{name: "cancel without a key cap", give: config.TypeConfig{Type: "r", Overflow: "cancel", Strategy: lane.FirstFree},
			wantErr: "type r: overflow rule cancel needs a key cap (config set r --key-limit N): it acts when a key is at its cap"},
		{name: "cancel random", give: config.TypeConfig{Type: "r", Overflow: "cancel", KeyLimit: 1, Strategy: lane.Random},
			wantErr: "type r: overflow rule cancel needs the first-free strategy"},
		{name: "skip with a key limit", give: config.TypeConfig{Type: "r", Overflow: "skip", KeyLimit: 1, Strategy: lane.FirstFree}},
		{name: "skip without a key cap", give: config.TypeConfig{Type: "r", Overflow: "skip", Strategy: lane.FirstFree},
			wantErr: "type r: overflow rule skip needs a key cap (config set r --key-limit N): it acts when a key is at its cap"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.give.CheckOverflow()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("CheckOverflow() = %v, want nil", err)
				}
				if want := tt.give.Overflow == config.OverflowCancel; tt.give.Cancels() != want {
					t.Errorf("Cancels() = %v, want %v", !want, want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("CheckOverflow() = %v, want an error mentioning %q", err, tt.wantErr)
			}
			if tt.give.Cancels() {
				t.Error("Cancels() = true for a rule that lacks what it needs")
			}
		})
	}
}

// A type's overflow rule comes from its live override, else its TYPE_OVERFLOW entry, else queue;
// the effective configuration runs a type with key caps first-free, so cancel with a key cap acts
// whatever the configured strategy.
func TestOverflowResolution(t *testing.T) {
	d := config.Defaults{
		Limits: map[string]int{"a": 2, "b": 2, "c": 2, "d": 2, "e": 2}, DefaultMaxAttempts: 3, Strategy: lane.Random,
		KeyLimits: map[string]int{"a": 1, "b": 1, "e": 1}, Overflows: map[string]string{"a": "cancel", "b": "cancel", "d": "cancel", "e": "skip"},
	}
	store := &fakeStore{list: []config.Override{{Type: "b", Overflow: "queue"}, {Type: "c", Overflow: "cancel", KeyLimit: 1}}}
	r, err := config.NewResolver(d, store, 0)
	if err != nil {
		t.Fatal(err)
	}
	for typ, want := range map[string]struct {
		rule           string
		cancels, skips bool
	}{"a": {"cancel", true, false}, "b": {"queue", false, false}, "c": {"cancel", true, false}, "d": {"cancel", false, false}, "e": {"skip", false, true}} {
		c, err := r.Get(context.Background(), typ)
		if err != nil || c.Overflow != want.rule || c.Cancels() != want.cancels || c.Skips() != want.skips {
			t.Errorf("Get(%s) = overflow %q, cancels %v, skips %v, %v; want %q, %v, %v", typ, c.Overflow, c.Cancels(), c.Skips(), err, want.rule, want.cancels, want.skips)
		}
	}
	if err := (config.Override{Type: "a", Overflow: "drop"}).Validate(); err == nil {
		t.Error("Validate(overflow drop) = nil, want an error")
	}
}
