package ops

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
)

// manyKeys is a map of n keys with their own cap of 1.
func manyKeys(n int) map[string]int {
	m := make(map[string]int, n)
	for i := range n {
		m[fmt.Sprintf("t%04d", i)] = 1
	}
	return m
}

// config set --key-limit and --key K --limit N write the type's key caps into its live item and
// keep its other fields; caps are checked with the functions' rules and against the type's limit,
// and a refused change writes nothing.
func TestConfigSetKeys(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name         string
		typeKeyCaps  map[string]int // TypeKeyLimits
		stored       []config.Override
		give         Change
		wantErr      string          // in the usage error; nothing written
		want         config.Override // the stored override after
		wantKeyLimit int
		wantSource   string // of the key limit
		wantStrategy string // and its source, "strategy (source)"
		wantWarning  string
		wantWrites   *int // nil: one
	}{
		{
			name: "a key limit keeps the other fields", stored: []config.Override{{Type: "llm", Limit: 10, MaxAttempts: 4}},
			give:         Change{Type: "llm", KeyLimit: ptr(5)},
			want:         config.Override{Type: "llm", Limit: 10, MaxAttempts: 4, KeyLimit: 5},
			wantKeyLimit: 5, wantSource: "override", wantStrategy: "first-free (default)",
		},
		{
			name: "a key's own cap beside the others", stored: []config.Override{{Type: "llm", Limit: 30, KeyLimit: 5, KeyLimits: map[string]int{"trial": 1}}},
			give:         Change{Type: "llm", Key: ptr("acme"), KeyCap: ptr(20)},
			want:         config.Override{Type: "llm", Limit: 30, KeyLimit: 5, KeyLimits: map[string]int{"trial": 1, "acme": 20}},
			wantKeyLimit: 5, wantSource: "override", wantStrategy: "first-free (default)",
		},
		{
			name: "a key's cap replaced", stored: []config.Override{{Type: "llm", Limit: 30, KeyLimits: map[string]int{"acme": 20}}},
			give:       Change{Type: "llm", Key: ptr("acme"), KeyCap: ptr(3)},
			want:       config.Override{Type: "llm", Limit: 30, KeyLimits: map[string]int{"acme": 3}},
			wantSource: "none", wantStrategy: "first-free (default)",
		},
		{
			name: "a key's cap removed", stored: []config.Override{{Type: "llm", Limit: 30, KeyLimit: 5, KeyLimits: map[string]int{"trial": 1, "acme": 20}}},
			give:         Change{Type: "llm", Key: ptr("acme"), KeyCap: ptr(0)},
			want:         config.Override{Type: "llm", Limit: 30, KeyLimit: 5, KeyLimits: map[string]int{"trial": 1}},
			wantKeyLimit: 5, wantSource: "override", wantStrategy: "first-free (default)",
		},
		{
			name: "the last key's cap removed", stored: []config.Override{{Type: "llm", Limit: 30, KeyLimits: map[string]int{"acme": 20}}},
			give:       Change{Type: "llm", Key: ptr("acme"), KeyCap: ptr(0)},
			want:       config.Override{Type: "llm", Limit: 30},
			wantSource: "none", wantStrategy: "first-free (default)",
		},
		{
			name: "removing a key that has no cap", stored: []config.Override{{Type: "llm", Limit: 30, KeyLimits: map[string]int{"acme": 20}}},
			give: Change{Type: "llm", Key: ptr("globex"), KeyCap: ptr(0)},
			want: config.Override{Type: "llm", Limit: 30, KeyLimits: map[string]int{"acme": 20}}, wantWrites: ptr(0),
			wantSource: "none", wantStrategy: "first-free (default)",
			wantWarning: "key globex of type llm had no cap of its own: nothing removed",
		},
		{
			name: "key limit 0 removes the live one", stored: []config.Override{{Type: "llm", Limit: 10, KeyLimit: 5}},
			give:       Change{Type: "llm", KeyLimit: ptr(0)},
			want:       config.Override{Type: "llm", Limit: 10},
			wantSource: "none", wantStrategy: "first-free (default)",
		},
		{
			name: "key limit 0 brings back TypeKeyLimits", typeKeyCaps: map[string]int{"reports": 2}, stored: []config.Override{{Type: "reports", KeyLimit: 4}},
			give:         Change{Type: "reports", KeyLimit: ptr(0)},
			want:         config.Override{Type: "reports"},
			wantKeyLimit: 2, wantSource: "TypeKeyLimits", wantStrategy: "first-free (default)",
			wantWarning: "type reports has no live key limit any more: its TypeKeyLimits entry, 2, applies again",
		},
		{
			name: "a cap equal to the limit", give: Change{Type: "reports", Key: ptr("acme"), KeyCap: ptr(5)},
			want:       config.Override{Type: "reports", KeyLimits: map[string]int{"acme": 5}},
			wantSource: "none", wantStrategy: "first-free (default)",
		},
		{
			name: "a key of 64 characters with - . : _", give: Change{Type: "reports", Key: ptr(strings.Repeat("t-7.e:u_", 8)), KeyCap: ptr(1)},
			want:       config.Override{Type: "reports", KeyLimits: map[string]int{strings.Repeat("t-7.e:u_", 8): 1}},
			wantSource: "none", wantStrategy: "first-free (default)",
		},
		{
			name: "a random type runs first-free while it caps keys", stored: []config.Override{{Type: "llm", Limit: 10, Strategy: "random"}},
			give:         Change{Type: "llm", KeyLimit: ptr(5)},
			want:         config.Override{Type: "llm", Limit: 10, Strategy: "random", KeyLimit: 5},
			wantKeyLimit: 5, wantSource: "override", wantStrategy: "first-free (key caps)",
			wantWarning: "type llm is configured random but runs first-free while it caps keys",
		},
		{
			name: "a random type without key caps runs random again", stored: []config.Override{{Type: "llm", Limit: 10, Strategy: "random", KeyLimit: 5}},
			give:       Change{Type: "llm", KeyLimit: ptr(0)},
			want:       config.Override{Type: "llm", Limit: 10, Strategy: "random"},
			wantSource: "none", wantStrategy: "random (override)",
			wantWarning: "type llm caps no key any more: it runs random again, as configured",
		},
		{
			name: "a limit lowered under the caps", stored: []config.Override{{Type: "llm", Limit: 10, KeyLimit: 5, KeyLimits: map[string]int{"acme": 8, "trial": 1}}},
			give:         Change{Type: "llm", Limit: ptr(4)},
			want:         config.Override{Type: "llm", Limit: 4, KeyLimit: 5, KeyLimits: map[string]int{"acme": 8, "trial": 1}},
			wantKeyLimit: 5, wantSource: "override", wantStrategy: "first-free (default)",
			wantWarning: "key caps above the limit of type llm run as 4 (a key's cap cannot raise the type's total): key limit 5, acme=8",
		},
		{
			name: "a cap changed on a type full of keys", stored: []config.Override{{Type: "llm", Limit: 10, KeyLimits: manyKeys(config.MaxKeyOverrides)}},
			give: Change{Type: "llm", Key: ptr("t0007"), KeyCap: ptr(2)},
			want: config.Override{Type: "llm", Limit: 10, KeyLimits: func() map[string]int {
				m := manyKeys(config.MaxKeyOverrides)
				m["t0007"] = 2
				return m
			}()},
			wantSource: "none", wantStrategy: "first-free (default)",
		},

		{name: "a key limit above the limit", stored: []config.Override{{Type: "llm", Limit: 10}}, give: Change{Type: "llm", KeyLimit: ptr(11)},
			wantErr: "--key-limit 11: a key's cap cannot raise the type's total of 10 (the limit of type llm); nothing written"},
		{name: "a key's cap above the limit", stored: []config.Override{{Type: "llm", Limit: 10}}, give: Change{Type: "llm", Key: ptr("acme"), KeyCap: ptr(11)},
			wantErr: "--key acme --limit 11: a key's cap cannot raise the type's total of 10 (the limit of type llm)"},
		{name: "above a limit set in the same change", stored: []config.Override{{Type: "llm", Limit: 10}}, give: Change{Type: "llm", Limit: ptr(4), KeyLimit: ptr(5)},
			wantErr: "a key's cap cannot raise the type's total of 4"},
		{name: "above a default limit", give: Change{Type: "payments", KeyLimit: ptr(3)},
			wantErr: "a key's cap cannot raise the type's total of 2 (the limit of type payments)"},
		{name: "a type with no limit", give: Change{Type: "newtype", KeyLimit: ptr(3), NewType: true},
			wantErr: "type newtype has no limit: a key's cap is a share of the type's total, so give the type one first (config set newtype --limit N)"},
		{name: "a bad key: the router's words", stored: []config.Override{{Type: "llm", Limit: 10}}, give: Change{Type: "llm", Key: ptr("a b"), KeyCap: ptr(2)},
			wantErr: `--key: invalid_key: key "a b" must be 1-64 characters of A-Z a-z 0-9 _ - . :`},
		{name: "a key with a hash", give: Change{Type: "llm", Key: ptr("a#b"), KeyCap: ptr(2)}, wantErr: "invalid_key"},
		{name: "a key of 65 characters", give: Change{Type: "llm", Key: ptr(strings.Repeat("k", 65)), KeyCap: ptr(2)}, wantErr: "must be 1-64 characters"},
		{name: "an empty key", give: Change{Type: "llm", Key: ptr(""), KeyCap: ptr(2)}, wantErr: "--key needs a key: jobs without one share the default key, which --key-limit caps"},
		{name: "a key without its cap", give: Change{Type: "llm", Key: ptr("acme")}, wantErr: "--key acme needs --limit N, the key's own cap (--limit 0 removes it)"},
		{name: "a negative key limit", give: Change{Type: "llm", KeyLimit: ptr(-1)}, wantErr: "--key-limit -1 must be from 1 to the type's limit (0 removes the live key limit)"},
		{name: "a negative key cap", give: Change{Type: "llm", Key: ptr("acme"), KeyCap: ptr(-2)}, wantErr: "--key acme --limit -2 must be from 1"},
		{name: "a key limit at the quota", give: Change{Type: "llm", KeyLimit: ptr(config.MaxInFlight)}, wantErr: "must be from 1 to the type's limit"},
		{name: "too many keys", stored: []config.Override{{Type: "llm", Limit: 10, KeyLimits: manyKeys(config.MaxKeyOverrides)}}, give: Change{Type: "llm", Key: ptr("one-more"), KeyCap: ptr(2)},
			wantErr: "type llm: 2000 keys have their own cap already, the most its config item holds; remove one first (config set llm --key K --limit 0)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The store holds copies: a change that edits a stored map in place shows as a difference.
			var stored []config.Override
			for _, o := range tt.stored {
				o.KeyLimits = maps.Clone(o.KeyLimits)
				stored = append(stored, o)
			}
			store := newMemStore(stored...)
			d := defaults()
			d.KeyLimits = tt.typeKeyCaps
			e := ConfigEditor{Store: store, Defaults: d, CacheAge: time.Second}
			res, err := e.Set(ctx, tt.give)
			if tt.wantErr != "" {
				var ue UsageError
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.As(err, &ue) {
					t.Errorf("Set() = %v, want a usage error with %q", err, tt.wantErr)
				}
				if store.writes != 0 || len(store.items) != len(tt.stored) || len(tt.stored) > 0 && !reflect.DeepEqual(store.items[tt.stored[0].Type], tt.stored[0]) {
					t.Errorf("a refused change wrote: %d writes, overrides %v", store.writes, store.items)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			wantWrites := 1
			if tt.wantWrites != nil {
				wantWrites = *tt.wantWrites
			}
			if got := store.items[tt.give.Type]; !reflect.DeepEqual(got, tt.want) || store.writes != wantWrites {
				t.Errorf("stored %+v (%d writes), want %+v in %d writes", got, store.writes, tt.want, wantWrites)
			}
			a := res.After
			if a.KeyLimit != tt.wantKeyLimit || a.KeyLimitSource != tt.wantSource || !reflect.DeepEqual(a.KeyLimits, tt.want.KeyLimits) {
				t.Errorf("after: key limit %d (%s), own caps %v; want %d (%s), %v", a.KeyLimit, a.KeyLimitSource, a.KeyLimits, tt.wantKeyLimit, tt.wantSource, tt.want.KeyLimits)
			}
			if got := fmt.Sprintf("%s (%s)", a.Strategy, a.StrategySource); got != tt.wantStrategy {
				t.Errorf("after: strategy %s, want %s", got, tt.wantStrategy)
			}
			warnings := strings.Join(res.Warnings, "\n")
			if tt.wantWarning != "" && !strings.Contains(warnings, tt.wantWarning) {
				t.Errorf("warnings %q, want one with %q", res.Warnings, tt.wantWarning)
			}
			if tt.wantWarning == "" && warnings != "" {
				t.Errorf("warnings %q, want none", res.Warnings)
			}
		})
	}
}

// config get shows each type's key limit and where it comes from, and its keys with their own
// cap: all of them when few, how many and the first ten when many.
func TestConfigGetKeys(t *testing.T) {
	d := defaults()
	d.KeyLimits = map[string]int{"reports": 2}
	store := newMemStore(
		config.Override{Type: "llm", Limit: 50, Strategy: "random", KeyLimit: 5, KeyLimits: map[string]int{"acme": 20, "trial": 1}},
		config.Override{Type: "chat", Limit: 10, KeyLimits: manyKeys(25)},
	)
	v, err := ConfigEditor{Store: store, Defaults: d, CacheAge: time.Second}.Get(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		typ          string
		wantKeyLimit int
		wantSource   string
		wantOwn      int
		wantStrategy string
	}{
		{typ: "llm", wantKeyLimit: 5, wantSource: "override", wantOwn: 2, wantStrategy: "first-free (key caps)"},
		{typ: "chat", wantSource: "none", wantOwn: 25, wantStrategy: "first-free (default)"},
		{typ: "reports", wantKeyLimit: 2, wantSource: "TypeKeyLimits", wantStrategy: "first-free (default)"},
		{typ: "payments", wantSource: "none", wantStrategy: "first-free (default)"},
	}
	for _, tt := range tests {
		tv := find(v.Types, tt.typ)
		if tv == nil {
			t.Fatalf("Get() lacks type %s: %+v", tt.typ, v.Types)
		}
		if tv.KeyLimit != tt.wantKeyLimit || tv.KeyLimitSource != tt.wantSource || len(tv.KeyLimits) != tt.wantOwn ||
			fmt.Sprintf("%s (%s)", tv.Strategy, tv.StrategySource) != tt.wantStrategy {
			t.Errorf("%s: key limit %d (%s), %d own caps, strategy %s (%s); want %d (%s), %d, %s", tt.typ, tv.KeyLimit, tv.KeyLimitSource,
				len(tv.KeyLimits), tv.Strategy, tv.StrategySource, tt.wantKeyLimit, tt.wantSource, tt.wantOwn, tt.wantStrategy)
		}
	}
	var b strings.Builder
	if err := v.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"STRATEGY               RELEASE             KEY LIMIT          LIVE OVERRIDE\n",
		"first-free (key caps)  step (ReleaseMode)  5 (override)       limit=50 strategy=random keyLimit=5 keyLimits=2 keys\n",
		"2 (TypeKeyLimits)  -\n",
		"limit=10 keyLimits=25 keys\n",
		"Keys of llm with their own cap: acme=20, trial=1.\n",
		"Keys of chat with their own cap: 25 keys, the first 10 by name: t0000=1, t0001=1, t0002=1, t0003=1, t0004=1, t0005=1, t0006=1, t0007=1, t0008=1, t0009=1 (--json lists all).\n",
		"(key caps): configured random, run first-free: a key's cap is counted where its jobs wait for a free lane (llm).\n",
		"Key limits without an override: reports=2 (TypeKeyLimits); other types cap no key.\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("WriteTable() lacks %q:\n%s", want, b.String())
		}
	}

	// Without key caps anywhere, the table has no KEY LIMIT column and no keys' lines.
	plain, err := ConfigEditor{Store: newMemStore(config.Override{Type: "llm", Limit: 3}), Defaults: defaults()}.Get(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	b.Reset()
	if err := plain.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	for _, gone := range []string{"KEY LIMIT", "Keys of", "key caps", "Key limits"} {
		if strings.Contains(b.String(), gone) {
			t.Errorf("WriteTable() without key caps says %q:\n%s", gone, b.String())
		}
	}
}

// set prints the type's key caps before and after when it has any.
func TestConfigSetKeysTable(t *testing.T) {
	e := ConfigEditor{Store: newMemStore(config.Override{Type: "llm", Limit: 10}), Defaults: defaults(), CacheAge: time.Second}
	res, err := e.Set(context.Background(), Change{Type: "llm", Key: ptr("acme"), KeyCap: ptr(8)})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := res.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	if want := "keys of type llm: key limit none -> none (none); own caps none -> acme=8\n"; !strings.Contains(b.String(), want) {
		t.Errorf("WriteTable() lacks %q:\n%s", want, b.String())
	}
	res, err = e.Set(context.Background(), Change{Type: "llm", MaxAttempts: ptr(2)})
	if err != nil {
		t.Fatal(err)
	}
	b.Reset()
	if err := res.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	if want := "own caps acme=8 -> acme=8\n"; !strings.Contains(b.String(), want) {
		t.Errorf("WriteTable() after another field lacks %q:\n%s", want, b.String())
	}
}

// manyKeyRates is a map of n keys with their own rate of 1 a second.
func manyKeyRates(n int) map[string]config.Rate {
	m := make(map[string]config.Rate, n)
	for k := range manyKeys(n) {
		m[k] = config.Rate{PerSecond: 1, Burst: 1}
	}
	return m
}

// config set --key-rate and --key K --rate write the type's key rates into its live item and keep
// its other fields (its key caps and type rate too); 0 removes them; values are checked with the
// functions' own rules and words, and a refused change writes nothing.
func TestConfigSetKeyRates(t *testing.T) {
	ctx := context.Background()
	every := config.Rate{PerSecond: 2, Burst: 4}
	noisy := config.Rate{PerSecond: 0.1, Burst: 1}
	paused := &config.Pause{Reason: "outage", Since: time.Date(2026, 3, 1, 11, 0, 0, 0, time.UTC)}
	tests := []struct {
		name         string
		stored       []config.Override
		give         Change
		wantErr      string          // in the usage error; nothing written
		want         config.Override // the stored override after
		wantKeyRate  string          // every key's rate after (RateView.String)
		wantStrategy string          // and its source, "strategy (source)"
		wantWarning  string
		wantWrites   *int // nil: one
	}{
		{
			name:   "every key's rate keeps the other fields",
			stored: []config.Override{{Type: "llm", Limit: 10, MaxAttempts: 4, KeyLimit: 3, KeyLimits: map[string]int{"acme": 5}, Rate: config.Rate{PerSecond: 5, Burst: 5}, Pause: paused}},
			give:   Change{Type: "llm", KeyRate: ptr("2:4")},
			want: config.Override{Type: "llm", Limit: 10, MaxAttempts: 4, KeyLimit: 3, KeyLimits: map[string]int{"acme": 5}, Rate: config.Rate{PerSecond: 5, Burst: 5}, Pause: paused,
				KeyRate: every},
			wantKeyRate: "2/s burst 4", wantStrategy: "first-free (default)", wantWarning: "is paused",
		},
		{
			name: "every key's rate, the burst by default", stored: []config.Override{{Type: "llm", Limit: 10}},
			give:        Change{Type: "llm", KeyRate: ptr("0.5")},
			want:        config.Override{Type: "llm", Limit: 10, KeyRate: config.Rate{PerSecond: 0.5, Burst: 1}},
			wantKeyRate: "0.5/s burst 1", wantStrategy: "first-free (default)",
		},
		{
			name: "a key's own rate beside every key's", stored: []config.Override{{Type: "llm", Limit: 10, KeyRate: every, KeyRates: map[string]config.Rate{"trial": noisy}}},
			give:        Change{Type: "llm", Key: ptr("acme"), KeyOwnRate: ptr("5"), KeyOwnBurst: ptr(10)},
			want:        config.Override{Type: "llm", Limit: 10, KeyRate: every, KeyRates: map[string]config.Rate{"trial": noisy, "acme": {PerSecond: 5, Burst: 10}}},
			wantKeyRate: "2/s burst 4", wantStrategy: "first-free (default)",
		},
		{
			name: "a key's own rate as R:B", stored: []config.Override{{Type: "llm", Limit: 10}},
			give:         Change{Type: "llm", Key: ptr("noisy"), KeyOwnRate: ptr("0.1:1")},
			want:         config.Override{Type: "llm", Limit: 10, KeyRates: map[string]config.Rate{"noisy": noisy}},
			wantKeyRate:  "none",
			wantStrategy: "first-free (default)",
		},
		{
			name: "a key's own cap and rate at once", stored: []config.Override{{Type: "llm", Limit: 10}},
			give:        Change{Type: "llm", Key: ptr("acme"), KeyCap: ptr(3), KeyOwnRate: ptr("1")},
			want:        config.Override{Type: "llm", Limit: 10, KeyLimits: map[string]int{"acme": 3}, KeyRates: map[string]config.Rate{"acme": {PerSecond: 1, Burst: 1}}},
			wantKeyRate: "none", wantStrategy: "first-free (default)",
		},
		{
			name: "a key's own rate beside its cap, the cap kept", stored: []config.Override{{Type: "llm", Limit: 10, KeyLimits: map[string]int{"acme": 3}}},
			give:        Change{Type: "llm", Key: ptr("acme"), KeyOwnRate: ptr("1")},
			want:        config.Override{Type: "llm", Limit: 10, KeyLimits: map[string]int{"acme": 3}, KeyRates: map[string]config.Rate{"acme": {PerSecond: 1, Burst: 1}}},
			wantKeyRate: "none", wantStrategy: "first-free (default)",
		},
		{
			name: "every key's rate and the type's rate at once", stored: []config.Override{{Type: "llm", Limit: 10}},
			give:        Change{Type: "llm", Rate: ptr("8"), Burst: ptr(16), KeyRate: ptr("2:4")},
			want:        config.Override{Type: "llm", Limit: 10, Rate: config.Rate{PerSecond: 8, Burst: 16}, KeyRate: every},
			wantKeyRate: "2/s burst 4", wantStrategy: "first-free (default)", wantWarning: "starts at most 8/s burst 16",
		},
		{
			name: "a key's own rate replaced", stored: []config.Override{{Type: "llm", Limit: 10, KeyRates: map[string]config.Rate{"noisy": noisy}}},
			give:        Change{Type: "llm", Key: ptr("noisy"), KeyOwnRate: ptr("0.2")},
			want:        config.Override{Type: "llm", Limit: 10, KeyRates: map[string]config.Rate{"noisy": {PerSecond: 0.2, Burst: 1}}},
			wantKeyRate: "none", wantStrategy: "first-free (default)",
		},
		{
			name: "a key's own rate removed", stored: []config.Override{{Type: "llm", Limit: 10, KeyRate: every, KeyRates: map[string]config.Rate{"noisy": noisy, "acme": every}}},
			give:        Change{Type: "llm", Key: ptr("noisy"), KeyOwnRate: ptr("0")},
			want:        config.Override{Type: "llm", Limit: 10, KeyRate: every, KeyRates: map[string]config.Rate{"acme": every}},
			wantKeyRate: "2/s burst 4", wantStrategy: "first-free (default)",
		},
		{
			name: "the last key's own rate removed", stored: []config.Override{{Type: "llm", Limit: 10, KeyRates: map[string]config.Rate{"noisy": noisy}}},
			give:        Change{Type: "llm", Key: ptr("noisy"), KeyOwnRate: ptr("0")},
			want:        config.Override{Type: "llm", Limit: 10},
			wantKeyRate: "none", wantStrategy: "first-free (default)",
		},
		{
			name: "every key's rate removed, keys' own kept", stored: []config.Override{{Type: "llm", Limit: 10, KeyRate: every, KeyRates: map[string]config.Rate{"noisy": noisy}}},
			give:        Change{Type: "llm", KeyRate: ptr("0")},
			want:        config.Override{Type: "llm", Limit: 10, KeyRates: map[string]config.Rate{"noisy": noisy}},
			wantKeyRate: "none", wantStrategy: "first-free (default)",
		},
		{
			name: "removing every key's rate of a type with none", stored: []config.Override{{Type: "llm", Limit: 10}},
			give: Change{Type: "llm", KeyRate: ptr("0")},
			want: config.Override{Type: "llm", Limit: 10}, wantWrites: ptr(0),
			wantKeyRate: "none", wantStrategy: "first-free (default)",
			wantWarning: "type llm had no key rate: nothing removed",
		},
		{
			name: "removing a key's rate it does not have", stored: []config.Override{{Type: "llm", Limit: 10, KeyRates: map[string]config.Rate{"noisy": noisy}}},
			give: Change{Type: "llm", Key: ptr("acme"), KeyOwnRate: ptr("0")},
			want: config.Override{Type: "llm", Limit: 10, KeyRates: map[string]config.Rate{"noisy": noisy}}, wantWrites: ptr(0),
			wantKeyRate: "none", wantStrategy: "first-free (default)",
			wantWarning: "key acme of type llm had no rate of its own: nothing removed",
		},
		{
			name: "removing a key's rate from an empty map writes nothing", stored: []config.Override{{Type: "llm", Limit: 10, KeyRates: map[string]config.Rate{}}},
			give: Change{Type: "llm", Key: ptr("acme"), KeyOwnRate: ptr("0")},
			want: config.Override{Type: "llm", Limit: 10, KeyRates: map[string]config.Rate{}}, wantWrites: ptr(0),
			wantKeyRate: "none", wantStrategy: "first-free (default)",
			wantWarning: "nothing changed, nothing written",
		},
		{
			name: "a random type runs first-free while it rates keys", stored: []config.Override{{Type: "llm", Limit: 10, Strategy: "random"}},
			give:        Change{Type: "llm", KeyRate: ptr("2:4")},
			want:        config.Override{Type: "llm", Limit: 10, Strategy: "random", KeyRate: every},
			wantKeyRate: "2/s burst 4", wantStrategy: "first-free (key rates)",
			wantWarning: "type llm is configured random but runs first-free while it rates keys: a key waiting for its start token waits in its key's waiting group, holding no lane",
		},
		{
			name: "a random type without key rates runs random again", stored: []config.Override{{Type: "llm", Limit: 10, Strategy: "random", KeyRates: map[string]config.Rate{"noisy": noisy}}},
			give:        Change{Type: "llm", Key: ptr("noisy"), KeyOwnRate: ptr("0")},
			want:        config.Override{Type: "llm", Limit: 10, Strategy: "random"},
			wantKeyRate: "none", wantStrategy: "random (override)",
			wantWarning: "type llm rates no key any more: it runs random again, as configured",
		},
		{
			name: "a random type that stops capping keys but rates them stays first-free", stored: []config.Override{{Type: "llm", Limit: 10, Strategy: "random", KeyLimit: 2, KeyRate: every}},
			give:        Change{Type: "llm", KeyLimit: ptr(0)},
			want:        config.Override{Type: "llm", Limit: 10, Strategy: "random", KeyRate: every},
			wantKeyRate: "2/s burst 4", wantStrategy: "first-free (key rates)",
			wantWarning: "type llm caps no key any more: it still runs first-free, as it rates keys",
		},
		{
			name: "key rates above the type's rate", stored: []config.Override{{Type: "llm", Limit: 10, Rate: config.Rate{PerSecond: 1, Burst: 1}}},
			give:        Change{Type: "llm", KeyRate: ptr("2:4")},
			want:        config.Override{Type: "llm", Limit: 10, Rate: config.Rate{PerSecond: 1, Burst: 1}, KeyRate: every},
			wantKeyRate: "2/s burst 4", wantStrategy: "first-free (default)",
			wantWarning: "key rates above the start rate of type llm (1/s burst 1) start no faster than it (a key's rate cannot raise the type's): key rate 2/s burst 4",
		},
		{
			name: "a rate changed on a type full of keys", stored: []config.Override{{Type: "llm", Limit: 10, KeyRates: manyKeyRates(config.MaxKeyOverrides)}},
			give: Change{Type: "llm", Key: ptr("t0007"), KeyOwnRate: ptr("3")},
			want: config.Override{Type: "llm", Limit: 10, KeyRates: func() map[string]config.Rate {
				m := manyKeyRates(config.MaxKeyOverrides)
				m["t0007"] = config.Rate{PerSecond: 3, Burst: 3}
				return m
			}()},
			wantKeyRate: "none", wantStrategy: "first-free (default)",
		},

		{name: "every key's rate not a number", give: Change{Type: "llm", KeyRate: ptr("fast")},
			wantErr: `--key-rate: rate "fast" must be a number of starts per second, like 5 or 0.5 (up to 3 decimals) (--key-rate 0 removes every key's rate)`},
		{name: "every key's rate over the most", give: Change{Type: "llm", KeyRate: ptr("10001")}, wantErr: "--key-rate: rate 10001 must be more than 0 and at most 10000 starts per second"},
		{name: "every key's rate written as zero", give: Change{Type: "llm", KeyRate: ptr("0.0")}, wantErr: `--key-rate: rate "0.0" must be more than 0`},
		{name: "every key's burst over the most", give: Change{Type: "llm", KeyRate: ptr("1:100001")}, wantErr: "--key-rate: burst 100001 must be from 1 to 100000 starts"},
		{name: "every key's rate with --burst", give: Change{Type: "llm", KeyRate: ptr("2"), Burst: ptr(4)},
			wantErr: "--burst is the burst of --rate, the type's: give every key's burst as --key-rate R:B"},
		{name: "a key's rate not a number", give: Change{Type: "llm", Key: ptr("acme"), KeyOwnRate: ptr("-1")},
			wantErr: `--key acme --rate: rate "-1" must be a number of starts per second, like 5 or 0.5 (up to 3 decimals) (--rate 0 removes the key's own rate)`},
		{name: "a key's rate with two bursts", give: Change{Type: "llm", Key: ptr("acme"), KeyOwnRate: ptr("5:10"), KeyOwnBurst: ptr(3)},
			wantErr: "--key acme --rate 5:10 gives a burst already: give it as --rate R:B or as --burst B, not both"},
		{name: "a key's rate 0 with a burst", give: Change{Type: "llm", Key: ptr("acme"), KeyOwnRate: ptr("0"), KeyOwnBurst: ptr(3)},
			wantErr: "--key acme --rate 0 removes the key's own rate: give no --burst with it"},
		{name: "a key's burst of 0", give: Change{Type: "llm", Key: ptr("acme"), KeyOwnRate: ptr("5"), KeyOwnBurst: ptr(0)},
			wantErr: "--key acme --burst: burst 0 must be from 1 to 100000 starts"},
		{name: "a key's burst without its rate", give: Change{Type: "llm", Key: ptr("acme"), KeyOwnBurst: ptr(3)},
			wantErr: "--key acme --burst needs --rate R with it: the key's own rate (--rate R:B, or --rate R --burst B)"},
		{name: "a key's rate without a key", give: Change{Type: "llm", KeyOwnRate: ptr("1")}, wantErr: "a key's own rate needs --key"},
		{name: "a bad key with a rate: the router's words", give: Change{Type: "llm", Key: ptr("a#b"), KeyOwnRate: ptr("1")},
			wantErr: `--key: invalid_key: key "a#b" must be 1-64 characters of A-Z a-z 0-9 _ - . :`},
		{name: "an empty key with a rate", give: Change{Type: "llm", Key: ptr(""), KeyOwnRate: ptr("1")}, wantErr: "--key needs a key"},
		{name: "a key with neither cap nor rate", give: Change{Type: "llm", Key: ptr("acme")},
			wantErr: "--key acme needs --limit N, the key's own cap (--limit 0 removes it), or --rate R[:B], its own start rate (--rate 0 removes it)"},
		{name: "too many keys with their own rate", stored: []config.Override{{Type: "llm", Limit: 10, KeyRates: manyKeyRates(config.MaxKeyOverrides)}},
			give:    Change{Type: "llm", Key: ptr("one-more"), KeyOwnRate: ptr("2")},
			wantErr: "type llm: 2000 keys have their own rate already, the most its config item holds; remove one first (config set llm --key K --rate 0)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The store holds copies: a change that edits a stored map in place shows as a difference.
			var stored []config.Override
			for _, o := range tt.stored {
				o.KeyLimits, o.KeyRates = maps.Clone(o.KeyLimits), maps.Clone(o.KeyRates)
				stored = append(stored, o)
			}
			store := newMemStore(stored...)
			e := ConfigEditor{Store: store, Defaults: defaults(), CacheAge: time.Second}
			res, err := e.Set(ctx, tt.give)
			if tt.wantErr != "" {
				var ue UsageError
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.As(err, &ue) {
					t.Errorf("Set() = %v, want a usage error with %q", err, tt.wantErr)
				}
				if store.writes != 0 || len(store.items) != len(tt.stored) || len(tt.stored) > 0 && !reflect.DeepEqual(store.items[tt.stored[0].Type], tt.stored[0]) {
					t.Errorf("a refused change wrote: %d writes, overrides %v", store.writes, store.items)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			wantWrites := 1
			if tt.wantWrites != nil {
				wantWrites = *tt.wantWrites
			}
			if got := store.items[tt.give.Type]; !reflect.DeepEqual(got, tt.want) || store.writes != wantWrites {
				t.Errorf("stored %+v (%d writes), want %+v in %d writes", got, store.writes, tt.want, wantWrites)
			}
			a := res.After
			if a.KeyRate.String() != tt.wantKeyRate || !reflect.DeepEqual(a.KeyRates, keyRatesView(tt.want.KeyRates)) {
				t.Errorf("after: key rate %s, own rates %v; want %s, %v", a.KeyRate, a.KeyRates, tt.wantKeyRate, tt.want.KeyRates)
			}
			if got := fmt.Sprintf("%s (%s)", a.Strategy, a.StrategySource); got != tt.wantStrategy {
				t.Errorf("after: strategy %s, want %s", got, tt.wantStrategy)
			}
			// What the functions run with: the resolver's merge of the item written.
			r, err := config.NewResolver(defaults(), staticStore{store.items[tt.give.Type]}, time.Second)
			if err != nil {
				t.Fatal(err)
			}
			c, err := r.Get(ctx, tt.give.Type)
			if err != nil || rateView(c.KeyRate).String() != a.KeyRate.String() || c.Strategy != a.Strategy {
				t.Errorf("the functions' key rate %v, strategy %s (%v); config set says %s, %s", c.KeyRate, c.Strategy, err, a.KeyRate, a.Strategy)
			}
			warnings := strings.Join(res.Warnings, "\n")
			if tt.wantWarning != "" && !strings.Contains(warnings, tt.wantWarning) {
				t.Errorf("warnings %q, want one with %q", res.Warnings, tt.wantWarning)
			}
			if tt.wantWarning == "" && warnings != "" {
				t.Errorf("warnings %q, want none", res.Warnings)
			}
		})
	}
}

// config get shows each type's rate for every key and how many keys have their own (the KEY RATE
// column, once some type rates keys), the keys with their own rate below the table, and all of it
// in JSON.
func TestConfigGetKeyRates(t *testing.T) {
	store := newMemStore(
		config.Override{Type: "llm", Limit: 50, Strategy: "random", KeyRate: config.Rate{PerSecond: 2, Burst: 4},
			KeyRates: map[string]config.Rate{"noisy": {PerSecond: 0.1, Burst: 1}, "acme": {PerSecond: 5, Burst: 10}}},
		config.Override{Type: "chat", Limit: 10, KeyRates: manyKeyRates(12)},
	)
	v, err := ConfigEditor{Store: store, Defaults: defaults(), CacheAge: time.Second}.Get(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		typ          string
		wantKeyRate  string
		wantOwn      int
		wantStrategy string
	}{
		{typ: "llm", wantKeyRate: "2/s burst 4", wantOwn: 2, wantStrategy: "first-free (key rates)"},
		{typ: "chat", wantKeyRate: "none", wantOwn: 12, wantStrategy: "first-free (default)"},
		{typ: "payments", wantKeyRate: "none", wantStrategy: "first-free (default)"},
	}
	for _, tt := range tests {
		tv := find(v.Types, tt.typ)
		if tv == nil {
			t.Fatalf("Get() lacks type %s: %+v", tt.typ, v.Types)
		}
		if tv.KeyRate.String() != tt.wantKeyRate || len(tv.KeyRates) != tt.wantOwn || fmt.Sprintf("%s (%s)", tv.Strategy, tv.StrategySource) != tt.wantStrategy {
			t.Errorf("%s: key rate %s, %d own rates, strategy %s (%s); want %s, %d, %s", tt.typ, tv.KeyRate, len(tv.KeyRates), tv.Strategy, tv.StrategySource,
				tt.wantKeyRate, tt.wantOwn, tt.wantStrategy)
		}
	}
	var b strings.Builder
	if err := v.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"RELEASE             KEY RATE                 LIVE OVERRIDE\n",
		"first-free (key rates)  step (ReleaseMode)  2/s burst 4, 2 keys own  limit=50 strategy=random keyRate=2:4 keyRates=2 keys\n",
		"step (ReleaseMode)  12 keys own              limit=10 keyRates=12 keys\n",
		"Keys of llm with their own rate (per second:burst): acme=5:10, noisy=0.1:1.\n",
		"Keys of chat with their own rate (per second:burst): 12 keys, the first 10 by name: t0000=1:1, t0001=1:1, t0002=1:1, t0003=1:1, t0004=1:1, t0005=1:1, t0006=1:1, t0007=1:1, t0008=1:1, t0009=1:1 (--json lists all).\n",
		"(key rates): configured random, run first-free: a key waiting for its start token waits in its key's waiting group, holding no lane (llm).\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("WriteTable() lacks %q:\n%s", want, b.String())
		}
	}
	b.Reset()
	if err := json.NewEncoder(&b).Encode(find(v.Types, "llm")); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`"keyRate":{"perSecond":2,"burst":4}`,
		`"keyRates":{"acme":{"perSecond":5,"burst":10},"noisy":{"perSecond":0.1,"burst":1}}`,
		`"override":{"limit":50,"strategy":"random","keyRate":"2:4","ownKeyRates":2}`,
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("JSON lacks %s:\n%s", want, b.String())
		}
	}

	// Without key rates anywhere, no KEY RATE column and no keys' lines.
	plain, err := ConfigEditor{Store: newMemStore(config.Override{Type: "llm", Limit: 3}), Defaults: defaults()}.Get(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	b.Reset()
	if err := plain.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	for _, gone := range []string{"KEY RATE", "own rate", "key rates", "keyRate"} {
		if strings.Contains(b.String(), gone) {
			t.Errorf("WriteTable() without key rates says %q:\n%s", gone, b.String())
		}
	}
}

// set prints the type's key rates before and after when it has any.
func TestConfigSetKeyRatesTable(t *testing.T) {
	e := ConfigEditor{Store: newMemStore(config.Override{Type: "llm", Limit: 10}), Defaults: defaults(), CacheAge: time.Second}
	for _, tt := range []struct {
		give Change
		want string
	}{
		{Change{Type: "llm", KeyRate: ptr("2:4")}, "key rates of type llm: every key none -> 2/s burst 4; own rates none -> none\n"},
		{Change{Type: "llm", Key: ptr("noisy"), KeyOwnRate: ptr("0.1")}, "key rates of type llm: every key 2/s burst 4 -> 2/s burst 4; own rates none -> noisy=0.1:1\n"},
		{Change{Type: "llm", MaxAttempts: ptr(2)}, "own rates noisy=0.1:1 -> noisy=0.1:1\n"},
		{Change{Type: "llm", KeyRate: ptr("0")}, "key rates of type llm: every key 2/s burst 4 -> none; own rates noisy=0.1:1 -> noisy=0.1:1\n"},
	} {
		res, err := e.Set(context.Background(), tt.give)
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		if err := res.WriteTable(&b); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(b.String(), tt.want) {
			t.Errorf("WriteTable() lacks %q:\n%s", tt.want, b.String())
		}
	}
	// A type that never rated keys has no key rates line.
	res, err := e.Set(context.Background(), Change{Type: "payments", Limit: ptr(3)})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := res.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "key rates of type") {
		t.Errorf("WriteTable() of a type without key rates:\n%s", b.String())
	}
}
