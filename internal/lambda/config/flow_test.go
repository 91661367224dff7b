package config_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
)

func TestParseRate(t *testing.T) {
	for _, tt := range []struct {
		give    string
		want    config.Rate
		wantErr string
	}{
		{give: "5", want: config.Rate{PerSecond: 5, Burst: 5}},
		{give: "5:10", want: config.Rate{PerSecond: 5, Burst: 10}},
		{give: "0.5", want: config.Rate{PerSecond: 0.5, Burst: 1}},
		{give: "2.25:1", want: config.Rate{PerSecond: 2.25, Burst: 1}},
		{give: "10000:100000", want: config.Rate{PerSecond: 10000, Burst: 100000}},
		{give: "0", wantErr: "more than 0"},
		{give: "0.000", wantErr: "more than 0"},
		{give: "10001", wantErr: "at most"},
		{give: "1:0", wantErr: "burst"},
		{give: "1:100001", wantErr: "burst"},
		{give: "1e3", wantErr: "number of starts"},
		{give: "-1", wantErr: "number of starts"},
		{give: "0.0001", wantErr: "number of starts"},
		{give: "05", wantErr: "number of starts"},
		{give: "1:", wantErr: "burst"},
		{give: "1:+2", wantErr: "burst"},
		{give: "", wantErr: "number of starts"},
	} {
		got, err := config.ParseRate(tt.give)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParseRate(%q) = %+v, %v; want an error mentioning %q", tt.give, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseRate(%q) = %+v, %v; want %+v", tt.give, got, err, tt.want)
		}
		if back, err := config.ParseRate(got.String()); err != nil || back != got {
			t.Errorf("ParseRate(%q) does not read back its String %q: %+v, %v", tt.give, got.String(), back, err)
		}
	}
	if _, err := config.ParseRates("a=1,a=2"); err == nil {
		t.Error("ParseRates with a type twice = nil error")
	}
	if _, err := config.ParseRates("a-b=1"); err == nil {
		t.Error("ParseRates with an invalid type = nil error")
	}
}

// A live override's pause and rate replace the deployment's; NoRate removes the default rate;
// a pause's reason is checked like any other setting.
func TestResolverFlowControl(t *testing.T) {
	since := time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC)
	d := config.Defaults{
		Limits: map[string]int{"partner": 4, "llm": 10, "mail": 2}, DefaultMaxAttempts: 3,
		Rates: map[string]config.Rate{"partner": {PerSecond: 5, Burst: 5}, "llm": {PerSecond: 1, Burst: 2}},
	}
	store := &fakeStore{list: []config.Override{
		{Type: "partner", Pause: &config.Pause{Reason: "INC-42", Since: since}},
		{Type: "llm", NoRate: true},
		{Type: "mail", Rate: config.Rate{PerSecond: 0.5, Burst: 1}},
	}}
	r, err := config.NewResolver(d, store, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		typ    string
		paused bool
		rate   config.Rate
	}{
		{"partner", true, config.Rate{PerSecond: 5, Burst: 5}},
		{"llm", false, config.Rate{}},
		{"mail", false, config.Rate{PerSecond: 0.5, Burst: 1}},
	} {
		c, err := r.Get(context.Background(), tt.typ)
		if err != nil || c.Paused() != tt.paused || c.Rate != tt.rate {
			t.Errorf("Get(%s) = paused %v, rate %+v, %v; want %v, %+v", tt.typ, c.Paused(), c.Rate, err, tt.paused, tt.rate)
		}
		if tt.paused && (c.Pause.Reason != "INC-42" || !c.Pause.Since.Equal(since)) {
			t.Errorf("Get(%s).Pause = %+v", tt.typ, c.Pause)
		}
	}
	for _, bad := range []config.Override{
		{Type: "a", Pause: &config.Pause{Reason: strings.Repeat("x", config.MaxPauseReason+1), Since: since}},
		{Type: "a", Pause: &config.Pause{Reason: "two\nlines", Since: since}},
		{Type: "a", Pause: &config.Pause{Reason: "when?"}},
		{Type: "a", Rate: config.Rate{PerSecond: 1}},
		{Type: "a", Rate: config.Rate{PerSecond: 1, Burst: 1}, NoRate: true},
	} {
		if err := bad.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil, want refused", bad)
		}
	}
}

// Jobs that are not normal priority wait in their group's twin for their priority, except in a
// type that caps keys, where a key's jobs keep to one group.
func TestWaitingGroupOfPriorities(t *testing.T) {
	j := func(key string, p int) job.Job { return job.Job{Type: "llm", ID: "j-1", Key: key, Priority: p} }
	for _, tt := range []struct {
		name string
		cfg  config.TypeConfig
		give job.Job
		want string
	}{
		{"normal", config.TypeConfig{Type: "llm", Limit: 5}, j("", 0), "llm-0"},
		{"high", config.TypeConfig{Type: "llm", Limit: 5}, j("", 9), "llm-0!9"},
		{"low key", config.TypeConfig{Type: "llm", Limit: 5}, j("acme", 1), "llm#acme!1"},
		{"capped key", config.TypeConfig{Type: "llm", Limit: 5, KeyLimit: 2}, j("acme", 9), "llm#acme"},
		{"capped default key", config.TypeConfig{Type: "llm", Limit: 5, KeyLimit: 2}, j("", 9), "llm-0"},
		{"one key capped", config.TypeConfig{Type: "llm", Limit: 5, KeyLimits: map[string]int{"big": 3}}, j("acme", 9), "llm#acme"},
	} {
		if got := tt.cfg.WaitingGroup(tt.give); got != tt.want {
			t.Errorf("%s: WaitingGroup = %q, want %q", tt.name, got, tt.want)
		}
	}
}

// A rate under MinRate is refused: the bucket's wait and expiry are computed from it, and a rate
// of one start in centuries is no rate an operator means.
func TestRateUnderTheLeastIsRefused(t *testing.T) {
	for _, r := range []config.Rate{{PerSecond: 1e-300, Burst: 1}, {PerSecond: 0.0009, Burst: 1}} {
		if err := r.Validate(); err == nil || !strings.Contains(err.Error(), "at least") {
			t.Errorf("Validate(%v) = %v, want an error saying the least rate", r, err)
		}
	}
	if err := (config.Rate{PerSecond: config.MinRate, Burst: 1}).Validate(); err != nil {
		t.Errorf("Validate(MinRate) = %v, want nil", err)
	}
}
