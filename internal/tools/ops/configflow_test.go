package ops

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
)

// config set --rate and --burst write the type's start rate into its live item and keep its other
// fields; --rate 0 removes it, with noRate when TypeRates gives the type one; a bad value is
// refused with the functions' own words, and nothing is written.
func TestConfigSetRate(t *testing.T) {
	paused := &config.Pause{Reason: "outage", Since: time.Date(2026, 3, 1, 11, 0, 0, 0, time.UTC)}
	tests := []struct {
		name        string
		typeRates   map[string]config.Rate // TypeRates
		stored      []config.Override
		give        Change
		wantErr     string          // in the usage error; nothing written
		want        config.Override // the stored override after
		unchanged   bool            // nothing to write: the store is left as it was
		wantRate    string          // the type's rate after (RateView.String) and its source
		wantWarning string
	}{
		{
			name: "a rate keeps the other fields, and the pause", stored: []config.Override{{Type: "llm", Limit: 10, KeyLimit: 2, Pause: paused}},
			give:     Change{Type: "llm", Rate: ptr("5")},
			want:     config.Override{Type: "llm", Limit: 10, KeyLimit: 2, Pause: paused, Rate: config.Rate{PerSecond: 5, Burst: 5}},
			wantRate: "5/s burst 5 (override)", wantWarning: "type llm starts at most 5/s burst 5: starts over the rate wait in the queue",
		},
		{
			name: "a rate under one a second: a burst of one", give: Change{Type: "payments", Rate: ptr("0.5")},
			want:     config.Override{Type: "payments", Rate: config.Rate{PerSecond: 0.5, Burst: 1}},
			wantRate: "0.5/s burst 1 (override)", wantWarning: "starts at most 0.5/s burst 1",
		},
		{
			name: "a rate with its burst", give: Change{Type: "payments", Rate: ptr("2.25"), Burst: ptr(7)},
			want:     config.Override{Type: "payments", Rate: config.Rate{PerSecond: 2.25, Burst: 7}},
			wantRate: "2.25/s burst 7 (override)", wantWarning: "starts at most 2.25/s burst 7",
		},
		{
			name: "a rate as TypeRates writes it", give: Change{Type: "payments", Rate: ptr("3:9")},
			want:     config.Override{Type: "payments", Rate: config.Rate{PerSecond: 3, Burst: 9}},
			wantRate: "3/s burst 9 (override)", wantWarning: "starts at most 3/s burst 9",
		},
		{
			name: "the burst alone, of the live rate", stored: []config.Override{{Type: "llm", Limit: 10, Rate: config.Rate{PerSecond: 4, Burst: 4}}},
			give:     Change{Type: "llm", Burst: ptr(12)},
			want:     config.Override{Type: "llm", Limit: 10, Rate: config.Rate{PerSecond: 4, Burst: 12}},
			wantRate: "4/s burst 12 (override)", wantWarning: "starts at most 4/s burst 12",
		},
		{
			name: "the burst alone, of the TypeRates rate", typeRates: map[string]config.Rate{"reports": {PerSecond: 1.5, Burst: 2}},
			give:     Change{Type: "reports", Burst: ptr(30)},
			want:     config.Override{Type: "reports", Rate: config.Rate{PerSecond: 1.5, Burst: 30}},
			wantRate: "1.5/s burst 30 (override)", wantWarning: "starts at most 1.5/s burst 30",
		},
		{
			name: "rate 0 removes the live rate", stored: []config.Override{{Type: "llm", Limit: 10, Rate: config.Rate{PerSecond: 4, Burst: 4}}},
			give:     Change{Type: "llm", Rate: ptr("0")},
			want:     config.Override{Type: "llm", Limit: 10},
			wantRate: "none (none)",
		},
		{
			name: "rate 0 over TypeRates says noRate", typeRates: map[string]config.Rate{"reports": {PerSecond: 1, Burst: 1}},
			give:     Change{Type: "reports", Rate: ptr("0")},
			want:     config.Override{Type: "reports", NoRate: true},
			wantRate: "none (override)", wantWarning: "type reports has no start rate: its live item removes its TypeRates entry",
		},
		{
			name: "rate 0 over a live rate and TypeRates", typeRates: map[string]config.Rate{"reports": {PerSecond: 1, Burst: 1}},
			stored:   []config.Override{{Type: "reports", Limit: 3, Rate: config.Rate{PerSecond: 8, Burst: 8}}},
			give:     Change{Type: "reports", Rate: ptr("0")},
			want:     config.Override{Type: "reports", Limit: 3, NoRate: true},
			wantRate: "none (override)", wantWarning: "its live item removes its TypeRates entry",
		},
		{
			name: "a rate again after noRate", typeRates: map[string]config.Rate{"reports": {PerSecond: 1, Burst: 1}},
			stored:   []config.Override{{Type: "reports", NoRate: true}},
			give:     Change{Type: "reports", Rate: ptr("6")},
			want:     config.Override{Type: "reports", Rate: config.Rate{PerSecond: 6, Burst: 6}},
			wantRate: "6/s burst 6 (override)", wantWarning: "starts at most 6/s burst 6",
		},
		{
			name: "rate 0 of a type with none", give: Change{Type: "payments", Rate: ptr("0")},
			unchanged: true, wantRate: "none (none)", wantWarning: "type payments had no start rate: nothing removed",
		},

		{name: "not a number", give: Change{Type: "llm", Rate: ptr("fast")},
			wantErr: `--rate: rate "fast" must be a number of starts per second, like 5 or 0.5 (up to 3 decimals) (--rate 0 removes the rate)`},
		{name: "four decimals", give: Change{Type: "llm", Rate: ptr("0.0001")}, wantErr: `rate "0.0001" must be a number of starts per second`},
		{name: "negative", give: Change{Type: "llm", Rate: ptr("-1")}, wantErr: `rate "-1" must be a number of starts per second`},
		{name: "zero written otherwise", give: Change{Type: "llm", Rate: ptr("0.0")}, wantErr: `rate "0.0" must be more than 0 (--rate 0 removes the rate)`},
		{name: "over the most", give: Change{Type: "llm", Rate: ptr("10001")}, wantErr: "rate 10001 must be more than 0 and at most 10000 starts per second"},
		{name: "a burst of 0", give: Change{Type: "llm", Rate: ptr("5"), Burst: ptr(0)}, wantErr: "--burst: burst 0 must be from 1 to 100000 starts"},
		{name: "a burst over the most", give: Change{Type: "llm", Burst: ptr(100001)}, wantErr: "burst 100001 must be from 1 to 100000 starts"},
		{name: "two bursts", give: Change{Type: "llm", Rate: ptr("5:10"), Burst: ptr(3)}, wantErr: "--rate 5:10 gives a burst already"},
		{name: "rate 0 with a burst", give: Change{Type: "llm", Rate: ptr("0"), Burst: ptr(3)}, wantErr: "--rate 0 removes the rate: give no --burst with it"},
		{name: "a burst of no rate", stored: []config.Override{{Type: "llm", Limit: 10}}, give: Change{Type: "llm", Burst: ptr(3)},
			wantErr: "type llm has no start rate: --burst needs --rate R (starts per second) with it; nothing written"},
		{name: "a burst of a rate removed", typeRates: map[string]config.Rate{"reports": {PerSecond: 1, Burst: 1}}, stored: []config.Override{{Type: "reports", NoRate: true}},
			give: Change{Type: "reports", Burst: ptr(3)}, wantErr: "type reports has no start rate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := newMemStore(tt.stored...)
			d := defaults()
			d.Rates = tt.typeRates
			e := ConfigEditor{Store: store, Defaults: d, CacheAge: time.Second}
			res, err := e.Set(context.Background(), tt.give)
			if tt.wantErr != "" {
				var ue UsageError
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.As(err, &ue) {
					t.Errorf("Set() = %v, want a usage error with %q", err, tt.wantErr)
				}
				if store.writes != 0 {
					t.Errorf("a refused change wrote: %v", store.items)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.unchanged {
				if store.writes != 0 || len(store.items) != len(tt.stored) || !res.Unchanged || !strings.Contains(strings.Join(res.Warnings, "\n"), tt.wantWarning) {
					t.Errorf("Set() = %+v with %d writes (overrides %v); want it unchanged, no write, and a warning with %q", res, store.writes, store.items, tt.wantWarning)
				}
				return
			}
			if got := store.items[tt.give.Type]; !reflect.DeepEqual(got, tt.want) || store.writes != 1 {
				t.Errorf("stored %+v (%d writes), want %+v in one write", got, store.writes, tt.want)
			}
			if got := res.After.Rate.String() + " (" + res.After.RateSource + ")"; got != tt.wantRate {
				t.Errorf("rate after %s, want %s", got, tt.wantRate)
			}
			// What the functions run with: the resolver's merge of the item written.
			r, err := config.NewResolver(d, staticStore{store.items[tt.give.Type]}, time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if c, err := r.Get(context.Background(), tt.give.Type); err != nil || rateView(c.Rate).String() != res.After.Rate.String() {
				t.Errorf("the functions' rate %v (%v), config set says %s", c.Rate, err, res.After.Rate)
			}
			warnings := strings.Join(res.Warnings, "\n")
			if tt.wantWarning != "" && !strings.Contains(warnings, tt.wantWarning) {
				t.Errorf("warnings %q, want one with %q", res.Warnings, tt.wantWarning)
			}
			if tt.wantWarning == "" && warnings != "" && tt.want.Pause == nil {
				t.Errorf("warnings %q, want none", res.Warnings)
			}
		})
	}
}

// config get shows a RATE column with each type's rate and its source, and a PAUSED column with
// how long each paused type has been paused and, below the table, since when and why; neither
// column when no type has a rate or a pause.
func TestConfigGetFlow(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	d := defaults()
	d.Rates = map[string]config.Rate{"reports": {PerSecond: 0.5, Burst: 1}, "payments": {PerSecond: 2, Burst: 2}}
	store := newMemStore(
		config.Override{Type: "llm", Limit: 4, Rate: config.Rate{PerSecond: 5, Burst: 10}, Pause: &config.Pause{Reason: "partner API down", Since: now.Add(-12*time.Minute - 3*time.Second)}},
		config.Override{Type: "payments", NoRate: true},
		config.Override{Type: "chat", Limit: 2, Pause: &config.Pause{Since: now.Add(-40 * time.Second)}},
	)
	e := ConfigEditor{Store: store, Defaults: d, CacheAge: time.Second, Now: func() time.Time { return now }}
	v, err := e.Get(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		typ        string
		wantRate   string
		wantSource string
		wantPaused float64 // seconds; -1: not paused
	}{
		{typ: "llm", wantRate: "5/s burst 10", wantSource: RateFromOverride, wantPaused: 723},
		{typ: "payments", wantRate: "none", wantSource: RateFromOverride, wantPaused: -1},
		{typ: "reports", wantRate: "0.5/s burst 1", wantSource: RateFromType, wantPaused: -1},
		{typ: "chat", wantRate: "none", wantSource: RateNone, wantPaused: 40},
	}
	for _, tt := range tests {
		tv := find(v.Types, tt.typ)
		if tv == nil {
			t.Fatalf("Get() lacks type %s", tt.typ)
		}
		paused := -1.0
		if tv.Pause != nil {
			paused = tv.Pause.PausedSeconds
		}
		if tv.Rate.String() != tt.wantRate || tv.RateSource != tt.wantSource || paused != tt.wantPaused {
			t.Errorf("%s: rate %s (%s), paused %vs; want %s (%s), %vs", tt.typ, tv.Rate, tv.RateSource, paused, tt.wantRate, tt.wantSource, tt.wantPaused)
		}
	}
	var b strings.Builder
	if err := v.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"RELEASE             RATE                       PAUSED  LIVE OVERRIDE\n",
		"step (ReleaseMode)  -                          40s     limit=2 paused\n",
		"step (ReleaseMode)  5/s burst 10 (override)    12m03s  limit=4 rate=5:10 paused\n",
		"step (ReleaseMode)  none (override)            -       noRate\n",
		"step (ReleaseMode)  0.5/s burst 1 (TypeRates)  -       -\n",
		"Paused: chat for 40s, since 2026-03-01T11:59:20Z: no reason given (sfnlimit resume chat starts it again).\n",
		`Paused: llm for 12m03s, since 2026-03-01T11:47:57Z: "partner API down" (sfnlimit resume llm starts it again).` + "\n",
		"Start rates without an override: payments=2:2,reports=0.5:1 (TypeRates, per second:burst); other types have none.\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("WriteTable() lacks %q:\n%s", want, b.String())
		}
	}

	// Without rates or pauses anywhere, the table is as it was.
	plain, err := ConfigEditor{Store: newMemStore(config.Override{Type: "llm", Limit: 3}), Defaults: defaults()}.Get(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	b.Reset()
	if err := plain.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	for _, gone := range []string{" RATE", "PAUSED", "Paused:", "Start rates"} {
		if strings.Contains(b.String(), gone) {
			t.Errorf("WriteTable() without rates or pauses says %q:\n%s", gone, b.String())
		}
	}
}

// set prints the type's start rate before and after when it has one.
func TestConfigSetRateTable(t *testing.T) {
	e := ConfigEditor{Store: newMemStore(config.Override{Type: "llm", Limit: 10}), Defaults: defaults(), CacheAge: time.Second}
	for _, tt := range []struct {
		give Change
		want string
	}{
		{Change{Type: "llm", Rate: ptr("5")}, "start rate of type llm: none -> 5/s burst 5 (override)\n"},
		{Change{Type: "llm", Burst: ptr(9)}, "start rate of type llm: 5/s burst 5 -> 5/s burst 9 (override)\n"},
		{Change{Type: "llm", MaxAttempts: ptr(2)}, "start rate of type llm: 5/s burst 9 -> 5/s burst 9 (override)\n"},
		{Change{Type: "llm", Rate: ptr("0")}, "start rate of type llm: 5/s burst 9 -> none (none)\n"},
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
}
