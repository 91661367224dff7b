package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sfnlimit/sfnlimit/internal/tools/ops"
)

// Per-tenant caps end to end: config set writes a type's key limit and a key's own cap (refusing
// caps above the type's limit and bad keys), submit sends keyed jobs and refuses a bad key as the
// router would, status shows which keys run, which wait and which are at their cap, and job show
// names a job's key.
func TestKeys(t *testing.T) {
	t.Parallel()
	typ := newType(t, "keys", 3)

	res := decode[ops.SetResult](t, must(t, local(t, "config", "set", typ, "--key-limit", "1", "--json"), exitOK))
	if a := res.After; a.KeyLimit != 1 || a.KeyLimitSource != "override" || a.Limit != 3 || a.Override == nil || a.Override.Limit != 3 {
		t.Errorf("config set --key-limit 1 = %+v, want key limit 1 from the override, limit 3 kept", a)
	}
	res = decode[ops.SetResult](t, must(t, local(t, "config", "set", typ, "--key", "vip", "--limit", "2", "--json"), exitOK))
	if a := res.After; a.KeyLimit != 1 || a.Limit != 3 || len(a.KeyLimits) != 1 || a.KeyLimits["vip"] != 2 {
		t.Errorf("config set --key vip --limit 2 = %+v, want vip's own cap 2 beside key limit 1 and limit 3", a)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--key-limit", "4"}, "--key-limit 4: a key's cap cannot raise the type's total of 3"},
		{[]string{"--key", "vip", "--limit", "4"}, "--key vip --limit 4: a key's cap cannot raise the type's total of 3"},
		{[]string{"--key", "a#b", "--limit", "1"}, `--key: invalid_key: key "a#b" must be 1-64 characters`},
	} {
		r := must(t, local(t, append([]string{"config", "set", typ}, tt.args...)...), exitUsage)
		if !strings.Contains(r.stderr, tt.want) {
			t.Errorf("config set %s: stderr lacks %q:\n%s", strings.Join(tt.args, " "), tt.want, r)
		}
	}
	r := must(t, local(t, "config", "get", typ), exitOK)
	for _, want := range []string{"KEY LIMIT", "1 (override)", "limit=3 keyLimit=1 keyLimits=1 key", "Keys of " + typ + " with their own cap: vip=2."} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("config get %s lacks %q:\n%s", typ, want, r)
		}
	}
	// A key's own cap removed, then given again: the others stay.
	must(t, local(t, "config", "set", typ, "--key", "trial", "--limit", "1"), exitOK)
	res = decode[ops.SetResult](t, must(t, local(t, "config", "set", typ, "--key", "trial", "--limit", "0", "--json"), exitOK))
	if a := res.After; a.KeyLimit != 1 || len(a.KeyLimits) != 1 || a.KeyLimits["vip"] != 2 {
		t.Errorf("config set --key trial --limit 0 = %+v, want only vip's own cap left", a)
	}

	// tenant-a has two jobs and a cap of 1: one runs, one waits at its cap; tenant-b's runs.
	waitCache()
	lines := []string{
		fmt.Sprintf(`{"type":%q,"id":"a-1","key":"tenant-a","input":{"seconds":600}}`, typ),
		fmt.Sprintf(`{"type":%q,"id":"a-2","key":"tenant-a","input":{"seconds":600}}`, typ),
		fmt.Sprintf(`{"type":%q,"id":"b-1","key":"tenant-b","input":{"seconds":600}}`, typ),
		fmt.Sprintf(`{"type":%q,"id":"x-1","key":"tenant a","input":{"seconds":600}}`, typ),
	}
	path := filepath.Join(t.TempDir(), "keyed.jsonl")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r = must(t, local(t, "submit", path), exitError)
	if !strings.Contains(r.stdout, "sent 3 of 4 jobs") || !strings.Contains(r.stdout, `line 4: invalid_key: key "tenant a" must be 1-64 characters of A-Z a-z 0-9 _ - . :`) {
		t.Errorf("submit of keyed jobs:\n%s", r)
	}
	r = must(t, local(t, "submit", "--type", typ, "--id", "x-2", "--key", "a/b"), exitUsage)
	if !strings.Contains(r.stderr, `--key: invalid_key: key "a/b" must be`) {
		t.Errorf("submit --key a/b:\n%s", r)
	}

	type statusOut struct {
		Types []ops.TypeStatus `json:"types"`
	}
	var keys *ops.KeysStatus
	eventually(t, 90*time.Second, func() error {
		st := decode[statusOut](t, must(t, local(t, "status", "--json"), exitOK))
		for _, ts := range st.Types {
			if ts.Type == typ {
				keys = ts.Keys
			}
		}
		if keys == nil || len(keys.Running) != 2 || len(keys.Waiting) != 1 {
			return fmt.Errorf("keys of %s = %+v, want tenant-a and tenant-b running, tenant-a waiting", typ, keys)
		}
		return nil
	})
	want := []ops.KeyRunning{{Key: "tenant-a", Running: 1, Cap: 1, AtCap: true}, {Key: "tenant-b", Running: 1, Cap: 1, AtCap: true}}
	if fmt.Sprint(keys.Running) != fmt.Sprint(want) || keys.AtCap != 2 || keys.KeyLimit != 1 || keys.OwnCaps != 1 {
		t.Errorf("keys running = %+v (at cap %d), want %+v", keys.Running, keys.AtCap, want)
	}
	if w := keys.Waiting[0]; w.Key != "tenant-a" || !w.AtCap || w.HeadJobID != "a-2" || w.Groups != 1 {
		t.Errorf("keys waiting = %+v, want tenant-a's a-2 parked at its cap", keys.Waiting)
	}
	r = must(t, local(t, "status"), exitOK)
	for _, want := range []string{
		"KEYS",
		"2 running, 2 at cap, 1 waiting",
		"Keys of " + typ + " (cap 1 a key, 1 key with its own cap): 2 keys running, 2 at its cap; 1 key waiting.",
		"its key to fall under its cap (head job a-2)",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("status lacks %q:\n%s", want, r)
		}
	}

	j := decode[[]ops.JobView](t, must(t, local(t, "job", "show", "a-1", "--type", typ, "--json"), exitOK))
	if len(j) != 1 || j[0].Key != "tenant-a" || j[0].KeyCap != 1 || j[0].Lease == nil || j[0].Lease.Key != "tenant-a" {
		t.Errorf("job show a-1 = %+v, want key tenant-a, cap 1, from its lease", j)
	}
	r = must(t, local(t, "job", "show", "b-1", "--type", typ), exitOK)
	if !strings.Contains(r.stdout, "  key        tenant-b (its type runs at most 1 job of it at once)") {
		t.Errorf("job show b-1:\n%s", r)
	}
}

// Per-key start rates end to end: config set --key-rate writes every key's rate and --key K --rate
// a key's own, beside its cap and the type's rate, which stay; 0 removes each; config get and
// status show them, in text and JSON.
func TestKeyRates(t *testing.T) {
	t.Parallel()
	typ := newType(t, "keyrates", 3)

	must(t, local(t, "config", "set", typ, "--rate", "8", "--key-limit", "2"), exitOK)
	res := decode[ops.SetResult](t, must(t, local(t, "config", "set", typ, "--key-rate", "2:4", "--json"), exitOK))
	if a := res.After; a.KeyRate == nil || *a.KeyRate != (ops.RateView{PerSecond: 2, Burst: 4}) || a.Override.KeyRate != "2:4" ||
		a.Rate == nil || a.Rate.PerSecond != 8 || a.KeyLimit != 2 || a.Limit != 3 {
		t.Errorf("config set --key-rate 2:4 = %+v (key rate %v), want every key 2/s burst 4, the rate 8, key limit 2 and limit 3 kept", a, a.KeyRate)
	}
	res = decode[ops.SetResult](t, must(t, local(t, "config", "set", typ, "--key", "noisy", "--rate", "0.5", "--burst", "2", "--limit", "1", "--json"), exitOK))
	if a := res.After; len(a.KeyRates) != 1 || a.KeyRates["noisy"] != (ops.RateView{PerSecond: 0.5, Burst: 2}) || a.KeyLimits["noisy"] != 1 ||
		a.Rate == nil || a.Rate.PerSecond != 8 || a.KeyRate == nil || a.Override.OwnKeyRates != 1 {
		t.Errorf("config set --key noisy --rate 0.5 --burst 2 --limit 1 = %+v, want noisy's own rate and cap, the type's rate and every key's kept", a)
	}
	r := must(t, local(t, "config", "set", typ, "--key", "acme", "--rate", "5:10"), exitOK)
	if want := "key rates of type " + typ + ": every key 2/s burst 4 -> 2/s burst 4; own rates noisy=0.5:2 -> acme=5:10, noisy=0.5:2"; !strings.Contains(r.stdout, want) {
		t.Errorf("config set --key acme --rate 5:10 lacks %q:\n%s", want, r)
	}
	r = must(t, local(t, "config", "set", typ, "--key-rate", "fast"), exitUsage)
	if !strings.Contains(r.stderr, `--key-rate: rate "fast" must be a number of starts per second`) {
		t.Errorf("config set --key-rate fast:\n%s", r)
	}

	r = must(t, local(t, "config", "get", typ), exitOK)
	for _, want := range []string{"KEY RATE", "2/s burst 4, 2 keys own", "keyRate=2:4 keyRates=2 keys",
		"Keys of " + typ + " with their own rate (per second:burst): acme=5:10, noisy=0.5:2."} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("config get %s lacks %q:\n%s", typ, want, r)
		}
	}
	v := decode[ops.ConfigView](t, must(t, local(t, "config", "get", typ, "--json"), exitOK))
	if tv := v.Types[0]; tv.KeyRate == nil || tv.KeyRate.PerSecond != 2 || len(tv.KeyRates) != 2 || tv.KeyRates["acme"] != (ops.RateView{PerSecond: 5, Burst: 10}) {
		t.Errorf("config get %s --json = %+v, want every key 2/s, acme and noisy their own", typ, tv)
	}

	type statusOut struct {
		Types []ops.TypeStatus `json:"types"`
	}
	found := false
	for _, ts := range decode[statusOut](t, must(t, local(t, "status", "--json"), exitOK)).Types {
		if ts.Type == typ {
			found = true
			if ts.KeyRate == nil || *ts.KeyRate != (ops.RateView{PerSecond: 2, Burst: 4}) || ts.OwnKeyRates != 2 {
				t.Errorf("status --json %s: key rate %v, %d own; want 2/s burst 4, 2 own", typ, ts.KeyRate, ts.OwnKeyRates)
			}
		}
	}
	if !found {
		t.Errorf("status --json lacks type %s", typ)
	}
	r = must(t, local(t, "status"), exitOK)
	if !strings.Contains(r.stdout, "KEY RATE") || !strings.Contains(r.stdout, "2/s burst 4, 2 keys own") {
		t.Errorf("status lacks the key rates of %s:\n%s", typ, r)
	}

	// Removed: a key's own, then every key's; the rest stays.
	res = decode[ops.SetResult](t, must(t, local(t, "config", "set", typ, "--key", "noisy", "--rate", "0", "--json"), exitOK))
	if a := res.After; len(a.KeyRates) != 1 || a.KeyRates["acme"].PerSecond != 5 || a.KeyLimits["noisy"] != 1 {
		t.Errorf("config set --key noisy --rate 0 = %+v, want acme's own rate left and noisy's cap kept", a)
	}
	res = decode[ops.SetResult](t, must(t, local(t, "config", "set", typ, "--key-rate", "0", "--json"), exitOK))
	if a := res.After; a.KeyRate != nil || a.Override.KeyRate != "" || len(a.KeyRates) != 1 || a.Rate == nil || a.Rate.PerSecond != 8 {
		t.Errorf("config set --key-rate 0 = %+v, want no rate for every key, acme's own and the type's rate kept", a)
	}
}
