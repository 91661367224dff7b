package config_test

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
)

func TestKeyCap(t *testing.T) {
	tests := []struct {
		name string
		give config.TypeConfig
		key  string
		want int
	}{
		{name: "no key caps: the whole limit", give: config.TypeConfig{Limit: 10}, key: "acme", want: 10},
		{name: "type key limit", give: config.TypeConfig{Limit: 10, KeyLimit: 5}, key: "acme", want: 5},
		{name: "default key follows the type key limit", give: config.TypeConfig{Limit: 10, KeyLimit: 5}, key: "", want: 5},
		{name: "a key's own cap above the key limit", give: config.TypeConfig{Limit: 50, KeyLimit: 5, KeyLimits: map[string]int{"premium": 20}}, key: "premium", want: 20},
		{name: "a key's own cap below the key limit", give: config.TypeConfig{Limit: 50, KeyLimit: 5, KeyLimits: map[string]int{"trial": 1}}, key: "trial", want: 1},
		{name: "other keys keep the key limit", give: config.TypeConfig{Limit: 50, KeyLimit: 5, KeyLimits: map[string]int{"premium": 20}}, key: "acme", want: 5},
		{name: "a key's cap never raises the total", give: config.TypeConfig{Limit: 8, KeyLimits: map[string]int{"premium": 20}}, key: "premium", want: 8},
		{name: "key limit over the limit is the limit", give: config.TypeConfig{Limit: 3, KeyLimit: 5}, key: "acme", want: 3},
		{name: "own cap without a key limit leaves other keys uncapped", give: config.TypeConfig{Limit: 10, KeyLimits: map[string]int{"trial": 1}}, key: "acme", want: 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.give.KeyCap(tt.key); got != tt.want {
				t.Errorf("KeyCap(%q) = %d, want %d", tt.key, got, tt.want)
			}
		})
	}
}

func TestWaitingGroupOfKeys(t *testing.T) {
	j := func(key, id string) job.Job { return job.Job{Type: "llm", ID: id, Key: key} }
	tests := []struct {
		name string
		cfg  config.TypeConfig
		give job.Job
		want string
	}{
		{name: "a key waits in its own group", cfg: config.TypeConfig{Type: "llm", Limit: 50}, give: j("acme", "1"), want: "llm#acme"},
		{name: "a key with hyphens and dots", cfg: config.TypeConfig{Type: "llm", Limit: 50, KeyLimit: 5}, give: j("t-7.eu:a", "1"), want: "llm#t-7.eu:a"},
		{name: "capped default key: one group", cfg: config.TypeConfig{Type: "llm", Limit: 50, KeyLimit: 5}, give: j("", "job-77"), want: "llm-0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.cfg.WaitingGroup(tt.give); got != tt.want {
				t.Errorf("WaitingGroup(%+v) = %q, want %q", tt.give, got, tt.want)
			}
			typ, ln, err := job.ParseGroupID(tt.cfg.WaitingGroup(tt.give))
			if err != nil || typ != "llm" || ln != job.WaitingLane {
				t.Errorf("ParseGroupID(%q) = %q, %d, %v, want llm, a waiting group", tt.want, typ, ln, err)
			}
		})
	}
	// Without a key limit the default key spreads over ceil(limit/10) groups, as before keys.
	groups := map[string]bool{}
	cfg := config.TypeConfig{Type: "llm", Limit: 50}
	for i := range 200 {
		groups[cfg.WaitingGroup(j("", strings.Repeat("x", i%7)+string(rune('a'+i%26))+strings.Repeat("y", i/26)))] = true
	}
	if len(groups) != 5 {
		t.Errorf("uncapped default key used %d waiting groups (%v), want 5", len(groups), groups)
	}
}

func TestOverrideValidateKeyLimits(t *testing.T) {
	tests := []struct {
		name    string
		give    config.Override
		wantErr string
	}{
		{name: "ok", give: config.Override{Type: "llm", KeyLimit: 5, KeyLimits: map[string]int{"acme": 20}}},
		{name: "negative key limit", give: config.Override{Type: "llm", KeyLimit: -1}, wantErr: "must not be negative"},
		{name: "key limit over the quota", give: config.Override{Type: "llm", KeyLimit: config.MaxInFlight + 1}, wantErr: "quota"},
		{name: "zero own cap", give: config.Override{Type: "llm", KeyLimits: map[string]int{"acme": 0}}, wantErr: "key acme"},
		{name: "bad key", give: config.Override{Type: "llm", KeyLimits: map[string]int{"a b": 2}}, wantErr: "key"},
		{name: "empty key", give: config.Override{Type: "llm", KeyLimits: map[string]int{"": 2}}, wantErr: "needs a key"},
		{name: "key rates ok", give: config.Override{Type: "llm", KeyRate: config.Rate{PerSecond: 1, Burst: 1}, KeyRates: map[string]config.Rate{"acme": {PerSecond: 0.1, Burst: 1}}}},
		{name: "key rate over the most", give: config.Override{Type: "llm", KeyRate: config.Rate{PerSecond: config.MaxRate + 1, Burst: 1}}, wantErr: "key rate"},
		{name: "key's own rate of zero", give: config.Override{Type: "llm", KeyRates: map[string]config.Rate{"acme": {}}}, wantErr: "key acme"},
		{name: "key's own rate without burst", give: config.Override{Type: "llm", KeyRates: map[string]config.Rate{"acme": {PerSecond: 1}}}, wantErr: "burst"},
		{name: "rate of an empty key", give: config.Override{Type: "llm", KeyRates: map[string]config.Rate{"": {PerSecond: 1, Burst: 1}}}, wantErr: "needs a key"},
		{name: "rate of a bad key", give: config.Override{Type: "llm", KeyRates: map[string]config.Rate{"a b": {PerSecond: 1, Burst: 1}}}, wantErr: "key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.give.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Validate() = %v, want an error mentioning %q", err, tt.wantErr)
			}
		})
	}
}

func TestResolverKeyLimits(t *testing.T) {
	d := testDefaults(0) // strategy random
	d.KeyLimits = map[string]int{"reports": 2}
	store := &fakeStore{list: []config.Override{
		{Type: "payments", KeyLimit: 5, KeyLimits: map[string]int{"premium": 20}},
	}}
	r, err := config.NewResolver(d, store, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		typ           string
		wantKeyLimit  int
		wantKeyLimits map[string]int
	}{
		{typ: "payments", wantKeyLimit: 5, wantKeyLimits: map[string]int{"premium": 20}},
		{typ: "reports", wantKeyLimit: 2},
	}
	for _, tt := range tests {
		t.Run(tt.typ, func(t *testing.T) {
			c, err := r.Get(context.Background(), tt.typ)
			if err != nil {
				t.Fatal(err)
			}
			if c.KeyLimit != tt.wantKeyLimit || !reflect.DeepEqual(c.KeyLimits, tt.wantKeyLimits) {
				t.Errorf("Get(%s) key limits = %d, %v, want %d, %v", tt.typ, c.KeyLimit, c.KeyLimits, tt.wantKeyLimit, tt.wantKeyLimits)
			}
			// Key caps are counted at the bind: a capped type runs first-free even where the
			// deployment's strategy is random.
			if c.Strategy != "first-free" {
				t.Errorf("Get(%s).Strategy = %q, want first-free for a type with key caps", tt.typ, c.Strategy)
			}
		})
	}
}

// A key's rate is its own, else the type's rate for every key; either makes the type first-free, as
// the key's tokens are taken by the one binder of its waiting group.
func TestResolverKeyRates(t *testing.T) {
	d := testDefaults(0) // strategy random
	noisy := config.Rate{PerSecond: 0.1, Burst: 1}
	every := config.Rate{PerSecond: 2, Burst: 4}
	store := &fakeStore{list: []config.Override{
		{Type: "payments", KeyRate: every, KeyRates: map[string]config.Rate{"noisy": noisy}},
		{Type: "reports", KeyRates: map[string]config.Rate{"noisy": noisy}},
	}}
	r, err := config.NewResolver(d, store, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		typ, key     string
		want         config.Rate
		wantStrategy string
	}{
		{typ: "payments", key: "noisy", want: noisy, wantStrategy: "first-free"},
		{typ: "payments", key: "acme", want: every, wantStrategy: "first-free"},
		{typ: "payments", key: "", want: every, wantStrategy: "first-free"},
		{typ: "reports", key: "noisy", want: noisy, wantStrategy: "first-free"},
		{typ: "reports", key: "acme", want: config.Rate{}, wantStrategy: "first-free"},
	}
	for _, tt := range tests {
		t.Run(tt.typ+"/"+tt.key, func(t *testing.T) {
			c, err := r.Get(context.Background(), tt.typ)
			if err != nil {
				t.Fatal(err)
			}
			if got := c.KeyRateOf(tt.key); got != tt.want {
				t.Errorf("KeyRateOf(%q) = %+v, want %+v", tt.key, got, tt.want)
			}
			if c.Strategy != tt.wantStrategy {
				t.Errorf("Strategy = %q, want %q", c.Strategy, tt.wantStrategy)
			}
		})
	}
}
