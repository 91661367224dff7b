package ops

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
	"github.com/sfnlimit/sfnlimit/internal/lambda/waitroom"
)

// status shows each type's start rate and, for a paused type, how long it has been paused, why,
// and how many of its waiting groups the pause parked (also of a random type, whose jobs wait in
// waiting groups while it is paused), beside the KEYS column.
func TestStatusFlow(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	parked := func(typ, group, key, head string, paused bool) waitroom.Waiter {
		return waitroom.Waiter{Type: typ, Group: group, MessageID: "m-" + head, ReceiptHandle: "h-" + head, JobID: head, Key: key, Paused: paused,
			SubmittedAt: now.Add(-time.Hour), ParkedAt: now.Add(-time.Minute)}
	}
	room := parkedTable(t,
		parked("llm", "llm#acme", "acme", "a-1", true),
		parked("llm", "llm-0", "", "l-1", true),
		parked("llm", "llm-w1", "", "l-2", false), // parked for a lane before the pause
		parked("reports", "reports-0", "", "r-1", true),
	)
	d := defaults()
	d.Rates = map[string]config.Rate{"payments": {PerSecond: 0.5, Burst: 1}}
	ovs := staticStore{
		{Type: "llm", Limit: 3, Rate: config.Rate{PerSecond: 5, Burst: 10}, Pause: &config.Pause{Reason: "partner API down", Since: now.Add(-3*time.Minute - 12*time.Second)}},
		{Type: "reports", Strategy: "random", Pause: &config.Pause{Since: now.Add(-2 * time.Hour)}},
	}
	st, err := StatusReader{
		SQS: noQueues, Parked: room, Defaults: d, Overrides: ovs, Now: func() time.Time { return now },
		Leases: leaseTable(t, lease.Lease{Type: "llm", Lane: 1, JobID: "l-0", JobKey: "acme", Attempt: 1, Status: lease.Starting, StartedAt: now.Add(-5 * time.Minute)}),
	}.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(room.read)
	if want := []string{"llm", "payments", "reports"}; !slices.Equal(room.read, want) {
		t.Errorf("parked groups read of %v, want %v (first-free types, and paused ones)", room.read, want)
	}
	byType := map[string]TypeStatus{}
	for _, ts := range st.Types {
		byType[ts.Type] = ts
	}
	tests := []struct {
		typ        string
		wantRate   string
		wantPaused *PauseView
	}{
		{typ: "llm", wantRate: "5/s burst 10", wantPaused: &PauseView{Reason: "partner API down", Since: now.Add(-192 * time.Second), PausedSeconds: 192, ParkedGroups: 2}},
		{typ: "payments", wantRate: "0.5/s burst 1"},
		{typ: "reports", wantRate: "none", wantPaused: &PauseView{Since: now.Add(-2 * time.Hour), PausedSeconds: 7200, ParkedGroups: 1}},
	}
	for _, tt := range tests {
		ts := byType[tt.typ]
		if ts.Rate.String() != tt.wantRate {
			t.Errorf("%s rate %s, want %s", tt.typ, ts.Rate, tt.wantRate)
		}
		if (ts.Paused == nil) != (tt.wantPaused == nil) || ts.Paused != nil && *ts.Paused != *tt.wantPaused {
			t.Errorf("%s paused %+v, want %+v", tt.typ, ts.Paused, tt.wantPaused)
		}
	}

	var b strings.Builder
	if err := st.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"HELD  FREE  RATE           PAUSED  KEYS                  OLDEST LEASE\n",
		"llm       3      override  first-free  step     1     2     5/s burst 10   3m12s   1 running, 2 waiting  l-0 (lane 1, attempt 1, started, 5m00s)\n",
		"payments  2      default   first-free  step     0     2     0.5/s burst 1  -       -                     -\n",
		"reports   5      default   random      step     0     5     -              2h00m   -                     -\n",
		`Paused: llm for 3m12s, since 2026-03-01T11:56:48Z: "partner API down". Nothing of it starts; 2 waiting groups parked until the resume (sfnlimit resume llm).` + "\n",
		"Paused: reports for 2h00m, since 2026-03-01T10:00:00Z: no reason given. Nothing of it starts; 1 waiting group parked until the resume (sfnlimit resume reports).\n",
		"  acme         1m00s       the type's resume (head job a-1)\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("WriteTable() lacks %q:\n%s", want, b.String())
		}
	}

	// Without rates or pauses, the table is as it was.
	st, err = StatusReader{SQS: noQueues, Parked: parkedTable(t), Defaults: defaults(), Overrides: staticStore(nil), Leases: leaseTable(t)}.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	b.Reset()
	if err := st.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "TYPE      LIMIT  SOURCE   STRATEGY    RELEASE  HELD  FREE  OLDEST LEASE\n") || strings.Contains(b.String(), "Paused") {
		t.Errorf("WriteTable() without rates or pauses:\n%s", b.String())
	}
}

// status shows each type's key rates as the functions resolve them: every key's rate and how many
// keys have their own, in a KEY RATE column shown once some type rates keys, and in JSON.
func TestStatusKeyRates(t *testing.T) {
	ovs := staticStore{
		{Type: "llm", Limit: 3, KeyRate: config.Rate{PerSecond: 2, Burst: 4}, KeyRates: map[string]config.Rate{"noisy": {PerSecond: 0.1, Burst: 1}, "acme": {PerSecond: 5, Burst: 10}}},
		{Type: "reports", Strategy: "random", KeyRates: map[string]config.Rate{"noisy": {PerSecond: 0.5, Burst: 1}}},
	}
	st, err := StatusReader{SQS: noQueues, Parked: parkedTable(t), Defaults: defaults(), Overrides: ovs, Leases: leaseTable(t)}.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	byType := map[string]TypeStatus{}
	for _, ts := range st.Types {
		byType[ts.Type] = ts
	}
	tests := []struct {
		typ          string
		wantKeyRate  string
		wantOwn      int
		wantStrategy string
		wantColumn   string
	}{
		{typ: "llm", wantKeyRate: "2/s burst 4", wantOwn: 2, wantStrategy: "first-free", wantColumn: "2/s burst 4, 2 keys own"},
		{typ: "reports", wantKeyRate: "none", wantOwn: 1, wantStrategy: "first-free", wantColumn: "1 key own"},
		{typ: "payments", wantKeyRate: "none", wantStrategy: "first-free", wantColumn: "-"},
	}
	for _, tt := range tests {
		ts := byType[tt.typ]
		if ts.KeyRate.String() != tt.wantKeyRate || ts.OwnKeyRates != tt.wantOwn || ts.Strategy != tt.wantStrategy {
			t.Errorf("%s: key rate %s, %d own, strategy %s; want %s, %d, %s", tt.typ, ts.KeyRate, ts.OwnKeyRates, ts.Strategy, tt.wantKeyRate, tt.wantOwn, tt.wantStrategy)
		}
		if got := keyRateColumn(ts.KeyRate, ts.OwnKeyRates); got != tt.wantColumn {
			t.Errorf("%s: KEY RATE column %q, want %q", tt.typ, got, tt.wantColumn)
		}
	}
	var b strings.Builder
	if err := st.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"HELD  FREE  KEY RATE                 OLDEST LEASE\n",
		"llm       3      override  first-free  step     0     3     2/s burst 4, 2 keys own  -\n",
		"reports   5      default   first-free  step     0     5     1 key own                -\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("WriteTable() lacks %q:\n%s", want, b.String())
		}
	}
	b.Reset()
	if err := json.NewEncoder(&b).Encode(byType["llm"]); err != nil {
		t.Fatal(err)
	}
	if want := `"keyRate":{"perSecond":2,"burst":4},"ownKeyRates":2`; !strings.Contains(b.String(), want) {
		t.Errorf("JSON lacks %s:\n%s", want, b.String())
	}

	// Without key rates, no KEY RATE column.
	st, err = StatusReader{SQS: noQueues, Parked: parkedTable(t), Defaults: defaults(), Overrides: staticStore{{Type: "llm", Limit: 3}}, Leases: leaseTable(t)}.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	b.Reset()
	if err := st.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "KEY RATE") {
		t.Errorf("WriteTable() without key rates:\n%s", b.String())
	}
}
