package config_test

import (
	"context"
	"errors"
	"math"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lane"
)

func TestParseLimits(t *testing.T) {
	tests := []struct {
		name    string
		give    string
		want    map[string]int
		wantErr bool
	}{
		{name: "two types", give: "payments=50,reports=5", want: map[string]int{"payments": 50, "reports": 5}},
		{name: "spaces refused (the template's pattern refuses them)", give: " payments = 50 , reports=5 ", wantErr: true},
		{name: "empty", give: "", want: map[string]int{}},
		{name: "only spaces", give: "   ", wantErr: true},
		{name: "empty parts", give: "payments=50,,reports=5,", wantErr: true},
		{name: "leading zero", give: "payments=050", wantErr: true},
		{name: "plus sign", give: "payments=+5", wantErr: true},
		{name: "type with _", give: "monthly_reports_v2=1", want: map[string]int{"monthly_reports_v2": 1}},
		{name: "type with - refused", give: "monthly-reports=1", wantErr: true},
		{name: "one at the quota", give: "big=120000", want: map[string]int{"big": 120000}},
		{name: "duplicate", give: "payments=50,payments=5", wantErr: true},
		{name: "zero", give: "payments=0", wantErr: true},
		{name: "negative", give: "payments=-1", wantErr: true},
		{name: "not a number", give: "payments=lots", wantErr: true},
		{name: "fraction", give: "payments=1.5", wantErr: true},
		{name: "no number", give: "payments=", wantErr: true},
		{name: "no equals", give: "payments", wantErr: true},
		{name: "two equals", give: "payments=1=2", wantErr: true},
		{name: "no type", give: "=5", wantErr: true},
		{name: "invalid type", give: "pay.ments=5", wantErr: true},
		{name: "type of 41", give: strings.Repeat("a", 41) + "=5", wantErr: true},
		{name: "colon separator", give: "payments:5", wantErr: true},
		{name: "semicolon list", give: "payments=5;reports=2", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := config.ParseLimits(tt.give)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("ParseLimits(%q) = %v, nil, want error", tt.give, got)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseLimits(%q) error = %v, want nil", tt.give, err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ParseLimits(%q) = %v, want %v", tt.give, got, tt.want)
			}
		})
	}
}

func TestDefaultsValidate(t *testing.T) {
	tests := []struct {
		name        string
		give        config.Defaults
		wantErr     bool
		wantInError []string
	}{
		{name: "typical", give: config.Defaults{Limits: map[string]int{"payments": 50, "reports": 5}, DefaultMaxAttempts: 3}},
		{name: "no limits, fallback only", give: config.Defaults{FallbackLimit: 10, DefaultMaxAttempts: 1}},
		{name: "nothing configured", give: config.Defaults{DefaultMaxAttempts: 3}},
		{name: "sum just under the quota", give: config.Defaults{Limits: map[string]int{"a": 100000, "b": 19999}, DefaultMaxAttempts: 3}},
		{name: "sum with fallback just under the quota", give: config.Defaults{Limits: map[string]int{"a": 100000}, FallbackLimit: 1999, UnlistedTypes: 10, DefaultMaxAttempts: 3}},
		{name: "one unlisted type, fallback just under the quota", give: config.Defaults{Limits: map[string]int{"a": 100000}, FallbackLimit: 19999, UnlistedTypes: 1, DefaultMaxAttempts: 3}},
		{name: "unset: as many unlisted types as fit", give: config.Defaults{Limits: map[string]int{"a": 100000}, FallbackLimit: 19999, DefaultMaxAttempts: 3}},
		{
			// Every unlisted type may take the fallback's lanes: it counts once per type that may
			// hold lanes at once, not once in all.
			name:        "every unlisted type counts",
			give:        config.Defaults{Limits: map[string]int{"a": 100000}, FallbackLimit: 19999, UnlistedTypes: 10, DefaultMaxAttempts: 3},
			wantErr:     true,
			wantInError: []string{"UNLISTED_TYPES_LIMIT", "299990", "quota"},
		},
		{
			name:        "unlisted types over the quota",
			give:        config.Defaults{FallbackLimit: 200, UnlistedTypes: 600, DefaultMaxAttempts: 3},
			wantErr:     true,
			wantInError: []string{"120000", "quota"},
		},
		{name: "negative unlisted types", give: config.Defaults{FallbackLimit: 1, UnlistedTypes: -1, DefaultMaxAttempts: 3}, wantErr: true, wantInError: []string{"UNLISTED_TYPES_LIMIT"}},
		{name: "too many unlisted types", give: config.Defaults{FallbackLimit: 1, UnlistedTypes: config.MaxUnlistedTypes + 1, DefaultMaxAttempts: 3}, wantErr: true, wantInError: []string{"UNLISTED_TYPES_LIMIT"}},
		{
			name:        "sum at the quota",
			give:        config.Defaults{Limits: map[string]int{"a": 100000, "b": 20000}, DefaultMaxAttempts: 3},
			wantErr:     true,
			wantInError: []string{"120000", "quota"},
		},
		{
			name:        "sum over the quota",
			give:        config.Defaults{Limits: map[string]int{"a": 70000, "b": 70000}, DefaultMaxAttempts: 3},
			wantErr:     true,
			wantInError: []string{"140000", "120000", "quota"},
		},
		{
			name:        "fallback takes the sum to the quota",
			give:        config.Defaults{Limits: map[string]int{"a": 100000}, FallbackLimit: 20000, DefaultMaxAttempts: 3},
			wantErr:     true,
			wantInError: []string{"120000", "quota"},
		},
		{
			name:        "one limit at the quota",
			give:        config.Defaults{Limits: map[string]int{"a": 120000}, DefaultMaxAttempts: 3},
			wantErr:     true,
			wantInError: []string{"120000", "quota"},
		},
		{name: "zero limit", give: config.Defaults{Limits: map[string]int{"a": 0}, DefaultMaxAttempts: 3}, wantErr: true, wantInError: []string{"a"}},
		{name: "negative limit", give: config.Defaults{Limits: map[string]int{"a": -5}, DefaultMaxAttempts: 3}, wantErr: true, wantInError: []string{"a"}},
		{name: "negative fallback", give: config.Defaults{FallbackLimit: -1, DefaultMaxAttempts: 3}, wantErr: true, wantInError: []string{"DEFAULT_LIMIT"}},
		{name: "zero max attempts", give: config.Defaults{Limits: map[string]int{"a": 1}}, wantErr: true, wantInError: []string{"DEFAULT_MAX_ATTEMPTS"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.give.Validate()
			if !tt.wantErr {
				if err != nil {
					t.Errorf("%+v.Validate() = %v, want nil", tt.give, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("%+v.Validate() = nil, want error", tt.give)
			}
			for _, w := range tt.wantInError {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%+v.Validate() = %q, want it to mention %q", tt.give, err, w)
				}
			}
		})
	}
}

func TestFromEnv(t *testing.T) {
	tests := []struct {
		name      string
		give      map[string]string
		want      config.Defaults
		wantCache time.Duration
		wantErr   string
	}{
		{
			name:      "nothing set",
			give:      map[string]string{},
			want:      config.Defaults{Limits: map[string]int{}, MaxAttempts: map[string]int{}, DefaultMaxAttempts: 3, Releases: map[string]string{}, KeyLimits: map[string]int{}, Rates: map[string]config.Rate{}, Pools: map[string]int{}, TypePools: map[string][]string{}, Shares: map[string]int{}, Overflows: map[string]string{}},
			wantCache: 30 * time.Second,
		},
		{
			name: "everything set",
			give: map[string]string{
				"TYPE_LIMITS":          "payments=50,reports=5",
				"DEFAULT_LIMIT":        "2",
				"UNLISTED_TYPES_LIMIT": "3",
				"DEFAULT_MAX_ATTEMPTS": "4",
				"TYPE_MAX_ATTEMPTS":    "payments=5",
				"STATE_MACHINE_ARN":    " arn:aws:states:us-east-1:123456789012:stateMachine:work ",
				"CONFIG_CACHE_SECONDS": "10",
				"LANE_STRATEGY":        "random",
				"RELEASE_MODE":         "events",
				"TYPE_RELEASE_MODES":   "payments=step",
				"TYPE_KEY_LIMITS":      "payments=5",
				"TYPE_RATES":           "payments=2.5:4,reports=1",
				"POOL_CAPS":            "psp=20,llm=5",
				"TYPE_POOLS":           "payments=psp,reports=psp+llm",
				"TYPE_POOL_SHARES":     "payments=3",
				"TYPE_OVERFLOW":        "payments=cancel",
			},
			want: config.Defaults{
				Limits:             map[string]int{"payments": 50, "reports": 5},
				FallbackLimit:      2,
				UnlistedTypes:      3,
				MaxAttempts:        map[string]int{"payments": 5},
				DefaultMaxAttempts: 4,
				StateMachineArn:    "arn:aws:states:us-east-1:123456789012:stateMachine:work",
				Strategy:           "random",
				Release:            "events",
				Releases:           map[string]string{"payments": "step"},
				KeyLimits:          map[string]int{"payments": 5},
				Rates:              map[string]config.Rate{"payments": {PerSecond: 2.5, Burst: 4}, "reports": {PerSecond: 1, Burst: 1}},
				Pools:              map[string]int{"psp": 20, "llm": 5},
				TypePools:          map[string][]string{"payments": {"psp"}, "reports": {"psp", "llm"}},
				Shares:             map[string]int{"payments": 3},
				Overflows:          map[string]string{"payments": "cancel"},
			},
			wantCache: 10 * time.Second,
		},
		{
			name:      "spaces around numbers",
			give:      map[string]string{"DEFAULT_LIMIT": " 7 ", "DEFAULT_MAX_ATTEMPTS": " 2", "CONFIG_CACHE_SECONDS": "5 "},
			want:      config.Defaults{Limits: map[string]int{}, MaxAttempts: map[string]int{}, FallbackLimit: 7, DefaultMaxAttempts: 2, Releases: map[string]string{}, KeyLimits: map[string]int{}, Rates: map[string]config.Rate{}, Pools: map[string]int{}, TypePools: map[string][]string{}, Shares: map[string]int{}, Overflows: map[string]string{}},
			wantCache: 5 * time.Second,
		},
		{name: "bad TYPE_LIMITS", give: map[string]string{"TYPE_LIMITS": "payments=zero"}, wantErr: "TYPE_LIMITS"},
		{name: "pool without a cap", give: map[string]string{"TYPE_POOLS": "a=psp"}, wantErr: "pool psp has no cap in POOL_CAPS"},
		{name: "three pools", give: map[string]string{"POOL_CAPS": "p=1,q=1,r=1", "TYPE_POOLS": "a=p+q+r"}, wantErr: "3 pools, more than the 2"},
		{name: "pool twice", give: map[string]string{"POOL_CAPS": "p=1", "TYPE_POOLS": "a=p+p"}, wantErr: "pool p is listed twice"},
		{name: "pool cap too high", give: map[string]string{"POOL_CAPS": "p=1001"}, wantErr: "POOL_CAPS"},
		{name: "bad pool name", give: map[string]string{"POOL_CAPS": "p-q=3"}, wantErr: "POOL_CAPS"},
		{name: "share too high", give: map[string]string{"TYPE_POOL_SHARES": "a=101"}, wantErr: "TYPE_POOL_SHARES"},
		{name: "duplicate in TYPE_LIMITS", give: map[string]string{"TYPE_LIMITS": "a=1,a=2"}, wantErr: "TYPE_LIMITS"},
		{name: "bad TYPE_MAX_ATTEMPTS", give: map[string]string{"TYPE_MAX_ATTEMPTS": "payments=0"}, wantErr: "TYPE_MAX_ATTEMPTS"},
		{name: "bad DEFAULT_LIMIT", give: map[string]string{"DEFAULT_LIMIT": "ten"}, wantErr: "DEFAULT_LIMIT"},
		{name: "negative DEFAULT_LIMIT", give: map[string]string{"DEFAULT_LIMIT": "-1"}, wantErr: "DEFAULT_LIMIT"},
		{name: "zero DEFAULT_MAX_ATTEMPTS", give: map[string]string{"DEFAULT_MAX_ATTEMPTS": "0"}, wantErr: "DEFAULT_MAX_ATTEMPTS"},
		{name: "bad DEFAULT_MAX_ATTEMPTS", give: map[string]string{"DEFAULT_MAX_ATTEMPTS": "3x"}, wantErr: "DEFAULT_MAX_ATTEMPTS"},
		{name: "bad CONFIG_CACHE_SECONDS", give: map[string]string{"CONFIG_CACHE_SECONDS": "30s"}, wantErr: "CONFIG_CACHE_SECONDS"},
		{name: "unknown LANE_STRATEGY", give: map[string]string{"LANE_STRATEGY": "shortest"}, wantErr: "LANE_STRATEGY"},
		{name: "unknown RELEASE_MODE", give: map[string]string{"RELEASE_MODE": "status"}, wantErr: "RELEASE_MODE"},
		{name: "unknown mode in TYPE_RELEASE_MODES", give: map[string]string{"TYPE_RELEASE_MODES": "llm=event"}, wantErr: "TYPE_RELEASE_MODES"},
		{name: "bad TYPE_KEY_LIMITS", give: map[string]string{"TYPE_KEY_LIMITS": "llm=0"}, wantErr: "TYPE_KEY_LIMITS"},
		{name: "bad TYPE_RATES", give: map[string]string{"TYPE_RATES": "llm=0"}, wantErr: "TYPE_RATES"},
		{name: "unknown rule in TYPE_OVERFLOW", give: map[string]string{"TYPE_OVERFLOW": "llm=drop"}, wantErr: "TYPE_OVERFLOW"},
		{name: "sum over the quota", give: map[string]string{"TYPE_LIMITS": "a=60000,b=60000"}, wantErr: "quota"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			getenv := func(k string) string { return tt.give[k] }
			got, cache, err := config.FromEnv(getenv)
			if tt.wantErr != "" {
				if err == nil {
					t.Fatalf("FromEnv(%v) = %+v, %v, nil, want error mentioning %q", tt.give, got, cache, tt.wantErr)
				}
				if !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("FromEnv(%v) error = %q, want it to mention %q", tt.give, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("FromEnv(%v) error = %v, want nil", tt.give, err)
			}
			if !reflect.DeepEqual(got, tt.want) || cache != tt.wantCache {
				t.Errorf("FromEnv(%v) = %+v, %v, want %+v, %v", tt.give, got, cache, tt.want, tt.wantCache)
			}
		})
	}
}

// fakeStore is a Store whose overrides and error the test sets, counting reads.
type fakeStore struct {
	mu    sync.Mutex
	list  []config.Override
	err   error
	calls int
}

func (s *fakeStore) ListOverrides(context.Context) ([]config.Override, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if s.err != nil {
		return nil, s.err
	}
	return append([]config.Override(nil), s.list...), nil
}

func (s *fakeStore) set(list []config.Override, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.list, s.err = list, err
}

func (s *fakeStore) reads() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

// fakeClock is a settable clock.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

const (
	defaultArn = "arn:aws:states:us-east-1:123456789012:stateMachine:work"
	reportsArn = "arn:aws:states:us-east-1:123456789012:stateMachine:reports"
)

func testDefaults(fallback int) config.Defaults {
	return config.Defaults{
		Limits:             map[string]int{"payments": 50, "reports": 5},
		FallbackLimit:      fallback,
		MaxAttempts:        map[string]int{"payments": 5},
		DefaultMaxAttempts: 3,
		StateMachineArn:    defaultArn,
		Strategy:           "random",
	}
}

func testOverrides() []config.Override {
	return []config.Override{
		{Type: "reports", Limit: 7, MaxAttempts: 9, StateMachineArn: reportsArn, Strategy: "least-loaded"},
		{Type: "payments", StateMachineArn: reportsArn}, // no limit: the default limit stays
		{Type: "adhoc", Limit: 4},               // a type only the table knows
		{Type: "attempts_only", MaxAttempts: 2}, // no limit anywhere
	}
}

func TestResolverGet(t *testing.T) {
	tests := []struct {
		name         string
		giveFallback int
		giveStore    bool
		give         string
		want         config.TypeConfig
		wantUnknown  bool
	}{
		{
			name: "default", giveFallback: 2, give: "payments",
			want: config.TypeConfig{Type: "payments", Limit: 50, MaxAttempts: 5, StateMachineArn: defaultArn, Strategy: "random", Release: "step", Source: "default"},
		},
		{
			name: "fallback", giveFallback: 2, give: "other",
			want: config.TypeConfig{Type: "other", Limit: 2, MaxAttempts: 3, StateMachineArn: defaultArn, Strategy: "random", Release: "step", Source: "fallback"},
		},
		{name: "unknown without fallback", giveFallback: 0, give: "other", wantUnknown: true},
		{
			name: "override beats default", giveFallback: 2, giveStore: true, give: "reports",
			// The override names the retired least-loaded: it runs as first-free.
			want: config.TypeConfig{Type: "reports", Limit: 7, MaxAttempts: 9, StateMachineArn: reportsArn, Strategy: "first-free", Release: "step", Source: "override"},
		},
		{
			name: "override without limit keeps the default limit", giveFallback: 2, giveStore: true, give: "payments",
			want: config.TypeConfig{Type: "payments", Limit: 50, MaxAttempts: 5, StateMachineArn: reportsArn, Strategy: "random", Release: "step", Source: "default"},
		},
		{
			name: "override of a type without default", giveFallback: 0, giveStore: true, give: "adhoc",
			want: config.TypeConfig{Type: "adhoc", Limit: 4, MaxAttempts: 3, StateMachineArn: defaultArn, Strategy: "random", Release: "step", Source: "override"},
		},
		{
			name: "override beats fallback", giveFallback: 2, giveStore: true, give: "adhoc",
			want: config.TypeConfig{Type: "adhoc", Limit: 4, MaxAttempts: 3, StateMachineArn: defaultArn, Strategy: "random", Release: "step", Source: "override"},
		},
		{
			name: "override without limit on fallback", giveFallback: 2, giveStore: true, give: "attempts_only",
			want: config.TypeConfig{Type: "attempts_only", Limit: 2, MaxAttempts: 2, StateMachineArn: defaultArn, Strategy: "random", Release: "step", Source: "fallback"},
		},
		{name: "override without limit, no fallback", giveFallback: 0, giveStore: true, give: "attempts_only", wantUnknown: true},
		{name: "unknown with store, no fallback", giveFallback: 0, giveStore: true, give: "other", wantUnknown: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var store config.Store
			if tt.giveStore {
				store = &fakeStore{list: testOverrides()}
			}
			r, err := config.NewResolver(testDefaults(tt.giveFallback), store, time.Second)
			if err != nil {
				t.Fatalf("NewResolver error = %v", err)
			}
			got, err := r.Get(context.Background(), tt.give)
			if tt.wantUnknown {
				if !errors.Is(err, config.ErrUnknownType) {
					t.Fatalf("Get(%q) = %+v, %v, want an error wrapping ErrUnknownType", tt.give, got, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Get(%q) error = %v, want nil", tt.give, err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Get(%q) = %+v, want %+v", tt.give, got, tt.want)
			}
		})
	}
}

func TestNewResolverRefusesInvalidDefaults(t *testing.T) {
	d := config.Defaults{Limits: map[string]int{"a": 60000, "b": 60000}, DefaultMaxAttempts: 3}
	if r, err := config.NewResolver(d, nil, time.Second); err == nil {
		t.Errorf("NewResolver(%+v) = %v, nil, want error", d, r)
	}
}

func TestResolverCache(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2024, 3, 9, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		name       string
		giveMaxAge time.Duration
		wantMaxAge time.Duration
	}{
		{name: "10s", giveMaxAge: 10 * time.Second, wantMaxAge: 10 * time.Second},
		{name: "30s", giveMaxAge: 30 * time.Second, wantMaxAge: 30 * time.Second},
		{name: "an hour is capped at 30s", giveMaxAge: time.Hour, wantMaxAge: 30 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := &fakeStore{list: []config.Override{{Type: "reports", Limit: 7}}}
			clock := &fakeClock{now: t0}
			r, err := config.NewResolver(testDefaults(0), store, tt.giveMaxAge)
			if err != nil {
				t.Fatalf("NewResolver error = %v", err)
			}
			r.SetClock(clock.Now)
			limit := func() int {
				t.Helper()
				c, err := r.Get(ctx, "reports")
				if err != nil {
					t.Fatalf("Get(reports) error = %v", err)
				}
				return c.Limit
			}

			if got := limit(); got != 7 || store.reads() != 1 {
				t.Fatalf("first Get: limit %d after %d reads, want 7 after 1", got, store.reads())
			}
			store.set([]config.Override{{Type: "reports", Limit: 9}}, nil)
			clock.Advance(tt.wantMaxAge - time.Millisecond)
			if got := limit(); got != 7 || store.reads() != 1 {
				t.Fatalf("Get before %v: limit %d after %d reads, want the cached 7 after 1", tt.wantMaxAge, got, store.reads())
			}
			clock.Advance(2 * time.Millisecond)
			if got := limit(); got != 9 || store.reads() != 2 {
				t.Fatalf("Get after %v: limit %d after %d reads, want the new 9 after 2", tt.wantMaxAge, got, store.reads())
			}
			if got := limit(); got != 9 || store.reads() != 2 {
				t.Fatalf("Get right after a reload: limit %d after %d reads, want 9 after 2", got, store.reads())
			}
		})
	}
}

func TestResolverStoreErrors(t *testing.T) {
	ctx := context.Background()
	errDown := errors.New("dynamodb unreachable")

	t.Run("first load fails", func(t *testing.T) {
		clock := &fakeClock{now: time.Date(2024, 3, 9, 10, 0, 0, 0, time.UTC)}
		store := &fakeStore{err: errDown}
		r, err := config.NewResolver(testDefaults(2), store, 10*time.Second)
		if err != nil {
			t.Fatalf("NewResolver error = %v", err)
		}
		r.SetClock(clock.Now)
		got, err := r.Get(ctx, "payments")
		if !errors.Is(err, errDown) || errors.Is(err, config.ErrUnknownType) {
			t.Fatalf("Get(payments) = %+v, %v, want an error wrapping the store's, not ErrUnknownType", got, err)
		}
		if all, err := r.All(ctx); !errors.Is(err, errDown) {
			t.Errorf("All() = %v, %v, want an error wrapping the store's", all, err)
		}
		// Nothing read yet: the deployment's attempt count could be one an override raised.
		if n, err := r.MaxAttempts(ctx, "payments"); !errors.Is(err, errDown) {
			t.Errorf("MaxAttempts(payments) before any read = %d, %v, want the store's error", n, err)
		}
		// The failure is remembered for a second (a throttled table is not asked once per job),
		// then the table is asked again: once it answers, Get works.
		store.set([]config.Override{{Type: "payments", Limit: 8}}, nil)
		if _, err := r.Get(ctx, "payments"); !errors.Is(err, errDown) || store.reads() != 1 {
			t.Errorf("Get(payments) right after the failure = %v after %d reads, want the failure again, not a second read", err, store.reads())
		}
		clock.Advance(time.Second)
		if got, err := r.Get(ctx, "payments"); err != nil || got.Limit != 8 {
			t.Errorf("Get(payments) after recovery = %+v, %v, want limit 8", got, err)
		}
	})

	t.Run("later load fails", func(t *testing.T) {
		clock := &fakeClock{now: time.Date(2024, 3, 9, 10, 0, 0, 0, time.UTC)}
		store := &fakeStore{list: []config.Override{{Type: "payments", Limit: 8, MaxAttempts: 5}}}
		r, err := config.NewResolver(testDefaults(2), store, 10*time.Second)
		if err != nil {
			t.Fatalf("NewResolver error = %v", err)
		}
		r.SetClock(clock.Now)
		if got, err := r.Get(ctx, "payments"); err != nil || got.Limit != 8 {
			t.Fatalf("Get(payments) = %+v, %v, want limit 8", got, err)
		}
		store.set(nil, errDown)
		clock.Advance(time.Minute)
		// Overrides older than the cache are never acted on: the limit may have been lowered
		// since, and must hold from the next start. The caller tries again shortly.
		got, err := r.Get(ctx, "payments")
		if !errors.Is(err, errDown) {
			t.Fatalf("Get(payments) with the store down = %+v, %v, want the store's error, not an override a minute old", got, err)
		}
		if reads := store.reads(); reads != 2 {
			t.Errorf("store reads = %d, want 2 (the failed reload was tried)", reads)
		}
		// A reader whose choices cap nothing (the router) may answer from them.
		r.ServeStale()
		clock.Advance(2 * time.Second)
		if got, err := r.Get(ctx, "payments"); err != nil || got.Limit != 8 {
			t.Errorf("Get(payments) with the store down, serving stale = %+v, %v, want the last override read (limit 8)", got, err)
		}
		// An attempt count caps nothing: the last one read still counts (a raised one must not
		// dead-letter a job early while the table is down).
		if n, err := r.MaxAttempts(ctx, "payments"); err != nil || n != 5 {
			t.Errorf("MaxAttempts(payments) with the store down = %d, %v, want the last override read, 5", n, err)
		}
	})
}

// A deployment that names no strategy gets lane.DefaultStrategy; an override naming an unknown one
// is ignored like any invalid override, so the type keeps working on the deployment's strategy.
func TestResolverStrategy(t *testing.T) {
	d := testDefaults(2)
	d.Strategy = ""
	store := &fakeStore{list: []config.Override{
		{Type: "reports", Strategy: "random"},
		{Type: "payments", Strategy: "shortest-queue"},
	}}
	r, err := config.NewResolver(d, store, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for typ, want := range map[string]string{"other": lane.DefaultStrategy, "reports": lane.Random, "payments": lane.DefaultStrategy} {
		got, err := r.Get(context.Background(), typ)
		if err != nil || got.Strategy != want {
			t.Errorf("Get(%s).Strategy = %q, %v; want %q", typ, got.Strategy, err, want)
		}
	}
	if err := (config.Override{Type: "payments", Strategy: "shortest-queue"}).Validate(); err == nil || !strings.Contains(err.Error(), "first-free") {
		t.Errorf("Validate(unknown strategy) = %v, want an error listing the known ones", err)
	}
}

func TestResolverAll(t *testing.T) {
	tests := []struct {
		name         string
		giveFallback int
		giveStore    bool
		want         []config.TypeConfig
	}{
		{
			name: "defaults only",
			want: []config.TypeConfig{
				{Type: "payments", Limit: 50, MaxAttempts: 5, StateMachineArn: defaultArn, Strategy: "random", Release: "step", Source: "default"},
				{Type: "reports", Limit: 5, MaxAttempts: 3, StateMachineArn: defaultArn, Strategy: "random", Release: "step", Source: "default"},
			},
		},
		{
			name: "with overrides, no fallback", giveStore: true,
			want: []config.TypeConfig{
				{Type: "adhoc", Limit: 4, MaxAttempts: 3, StateMachineArn: defaultArn, Strategy: "random", Release: "step", Source: "override"},
				{Type: "payments", Limit: 50, MaxAttempts: 5, StateMachineArn: reportsArn, Strategy: "random", Release: "step", Source: "default"},
				{Type: "reports", Limit: 7, MaxAttempts: 9, StateMachineArn: reportsArn, Strategy: "first-free", Release: "step", Source: "override"},
			},
		},
		{
			name: "with overrides and fallback", giveFallback: 2, giveStore: true,
			want: []config.TypeConfig{
				{Type: "adhoc", Limit: 4, MaxAttempts: 3, StateMachineArn: defaultArn, Strategy: "random", Release: "step", Source: "override"},
				{Type: "attempts_only", Limit: 2, MaxAttempts: 2, StateMachineArn: defaultArn, Strategy: "random", Release: "step", Source: "fallback"},
				{Type: "payments", Limit: 50, MaxAttempts: 5, StateMachineArn: reportsArn, Strategy: "random", Release: "step", Source: "default"},
				{Type: "reports", Limit: 7, MaxAttempts: 9, StateMachineArn: reportsArn, Strategy: "first-free", Release: "step", Source: "override"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var store config.Store
			if tt.giveStore {
				store = &fakeStore{list: testOverrides()}
			}
			r, err := config.NewResolver(testDefaults(tt.giveFallback), store, time.Second)
			if err != nil {
				t.Fatalf("NewResolver error = %v", err)
			}
			got, err := r.All(context.Background())
			if err != nil {
				t.Fatalf("All() error = %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("All() = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestResolverConcurrentGet(t *testing.T) {
	clock := &fakeClock{now: time.Date(2024, 3, 9, 10, 0, 0, 0, time.UTC)}
	store := &fakeStore{list: testOverrides()}
	r, err := config.NewResolver(testDefaults(2), store, 5*time.Second)
	if err != nil {
		t.Fatalf("NewResolver error = %v", err)
	}
	r.SetClock(clock.Now)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i%8 == 0 {
				clock.Advance(time.Second)
			}
			c, err := r.Get(context.Background(), "reports")
			if err == nil && c.Limit != 7 {
				err = errors.New("wrong limit")
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("concurrent Get(reports) error = %v", err)
	}
	// 64 calls over 8 seconds of clock with a 5s cache: a handful of reads, not one per call.
	if reads := store.reads(); reads < 1 || reads > 3 {
		t.Errorf("store reads = %d for 64 concurrent Gets over 8s, want 1-3", reads)
	}
}

// A sum of limits must not wrap around past the quota check.
func TestDefaultsValidateOverflow(t *testing.T) {
	for _, d := range []config.Defaults{
		{Limits: map[string]int{"a": math.MaxInt}, FallbackLimit: 1, DefaultMaxAttempts: 3},
		{Limits: map[string]int{"a": math.MaxInt, "b": 1}, DefaultMaxAttempts: 3},
		{FallbackLimit: math.MaxInt, DefaultMaxAttempts: 3},
	} {
		if err := d.Validate(); err == nil {
			t.Errorf("%+v.Validate() = nil, want error (sum over the in-flight quota)", d)
		}
	}
	env := map[string]string{"TYPE_LIMITS": "a=9223372036854775807,b=1"}
	if d, _, err := config.FromEnv(func(k string) string { return env[k] }); err == nil {
		t.Errorf("FromEnv(%v) = %+v, nil, want error", env, d)
	}
}

// Live overrides that would push the lanes past the FIFO in-flight quota are refused as a set: the
// last good configuration stays in force.
func TestResolverRefusesOverridesOverQuota(t *testing.T) {
	d := config.Defaults{Limits: map[string]int{"a": 60000}, DefaultMaxAttempts: 3}
	store := &quotaStore{list: []config.Override{{Type: "a", Limit: 100}}}
	r, err := config.NewResolver(d, store, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(0, 0)
	r.SetClock(func() time.Time { return now })
	if c, err := r.Get(context.Background(), "a"); err != nil || c.Limit != 100 {
		t.Fatalf("Get(a) = %+v, %v; want limit 100", c, err)
	}
	store.list = []config.Override{{Type: "a", Limit: 100}, {Type: "b", Limit: 119950}}
	now = now.Add(2 * time.Second)
	if c, err := r.Get(context.Background(), "a"); err != nil || c.Limit != 100 {
		t.Errorf("Get(a) after an over-quota override = %+v, %v; want the last good limit 100", c, err)
	}
	if _, err := r.Get(context.Background(), "b"); err == nil {
		t.Errorf("Get(b) = nil error; want b unknown, its override refused")
	}
	// The fallback counts once per unlisted type that may hold lanes: 100 + 19,000 x 5 + 24,900.
	store.list = []config.Override{{Type: "a", Limit: 100}, {Type: "c", Limit: 24900}}
	un, err := config.NewResolver(config.Defaults{Limits: map[string]int{"a": 1000}, FallbackLimit: 19000, UnlistedTypes: 5, DefaultMaxAttempts: 3}, store, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := un.Get(context.Background(), "c"); err == nil || !strings.Contains(err.Error(), "quota") {
		t.Errorf("overrides over the quota with the unlisted types' lanes: error = %v, want one naming the quota", err)
	}
	store.list = []config.Override{{Type: "a", Limit: 100}, {Type: "b", Limit: 119950}}
	fresh, _ := config.NewResolver(d, store, time.Second)
	if _, err := fresh.Get(context.Background(), "a"); err == nil || !strings.Contains(err.Error(), "quota") {
		t.Errorf("first load of over-quota overrides: error = %v, want one naming the quota", err)
	}
	// A set refused whole was read: a release still decides on the deployment's attempt count.
	if n, err := fresh.MaxAttempts(context.Background(), "a"); err != nil || n != 3 {
		t.Errorf("MaxAttempts(a) with the first set refused = %d, %v; want the deployment's 3", n, err)
	}
}

type quotaStore struct{ list []config.Override }

func (q *quotaStore) ListOverrides(context.Context) ([]config.Override, error) { return q.list, nil }

// Listed says which types have a limit of their own, from the deployment's TYPE_LIMITS and the live
// overrides last read, without reading the table: the metrics recorder asks it for every count.
func TestResolverListed(t *testing.T) {
	store := &fakeStore{list: []config.Override{
		{Type: "live", Limit: 4},
		{Type: "pausedonly", Pause: &config.Pause{Reason: "maintenance", Since: time.Date(2024, 3, 9, 10, 0, 0, 0, time.UTC)}}, // no limit of its own: runs on the fallback
	}}
	r, err := config.NewResolver(testDefaults(2), store, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if r.Listed("live") {
		t.Errorf("Listed(live) before the overrides were read = true, want false (it reads nothing)")
	}
	if _, err := r.Get(t.Context(), "live"); err != nil {
		t.Fatal(err)
	}
	reads := store.reads()
	for typ, want := range map[string]bool{"payments": true, "live": true, "pausedonly": false, "invented": false, "": false} {
		if got := r.Listed(typ); got != want {
			t.Errorf("Listed(%q) = %v, want %v", typ, got, want)
		}
	}
	if store.reads() != reads {
		t.Errorf("Listed read the store")
	}
}

// UNLISTED_TYPES_LIMIT unset lets as many unlisted types hold lanes as fit under the quota beside
// the listed limits, at most DefaultUnlistedTypes and at least one; set, it is what it says.
func TestDefaultsUnlisted(t *testing.T) {
	for _, tt := range []struct {
		give config.Defaults
		want int
	}{
		{config.Defaults{FallbackLimit: 5}, config.DefaultUnlistedTypes},
		{config.Defaults{FallbackLimit: 20000}, 5},
		{config.Defaults{Limits: map[string]int{"a": 100000}, FallbackLimit: 19999}, 1},
		{config.Defaults{FallbackLimit: 119999}, 1},
		{config.Defaults{Limits: map[string]int{"a": 119999}, FallbackLimit: 1}, 1}, // over the quota: Validate refuses it
		{config.Defaults{FallbackLimit: 20000, UnlistedTypes: 3}, 3},
		{config.Defaults{}, config.DefaultUnlistedTypes},
	} {
		if got := tt.give.Unlisted(); got != tt.want {
			t.Errorf("%+v.Unlisted() = %d, want %d", tt.give, got, tt.want)
		}
	}
}
