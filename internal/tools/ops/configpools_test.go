package ops

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
	"github.com/sfnlimit/sfnlimit/internal/lambda/pool"
	"github.com/sfnlimit/sfnlimit/internal/lambda/waitroom"
	"github.com/sfnlimit/sfnlimit/internal/tools/fakes"
)

// poolDefaults is a deployment with pools: llm_api=50 and pay=20 (Pools), summarize in llm_api and
// classify in both (TypePools), summarize with a share of 3 (PoolShares).
func poolDefaults() config.Defaults {
	d := defaults()
	d.Limits["summarize"], d.Limits["classify"] = 10, 10
	d.Pools = map[string]int{"llm_api": 50, "pay": 20}
	d.TypePools = map[string][]string{"summarize": {"llm_api"}, "classify": {"llm_api", "pay"}}
	d.Shares = map[string]int{"summarize": 3}
	return d
}

// --pools, --no-pools and --share are checked with the functions' rules before anything is read,
// and an error names the flag and the rule.
func TestChangeValidatePools(t *testing.T) {
	tests := []struct {
		name    string
		give    Change
		wantErr string
	}{
		{name: "one pool", give: Change{Type: "a", Pools: ptr("llm_api")}},
		{name: "two pools", give: Change{Type: "a", Pools: ptr("llm_api+pay")}},
		{name: "no pools", give: Change{Type: "a", NoPools: true}},
		{name: "share alone", give: Change{Type: "a", Share: ptr(3)}},
		{name: "share 0 removes it", give: Change{Type: "a", Share: ptr(0)}},
		{name: "the largest share", give: Change{Type: "a", Share: ptr(config.MaxShare)}},
		{name: "three pools", give: Change{Type: "a", Pools: ptr("x+y+z")},
			wantErr: `--pools "x+y+z": type a: 3 pools, more than the 2 a type may belong to`},
		{name: "a pool twice", give: Change{Type: "a", Pools: ptr("x+x")}, wantErr: `--pools "x+x": type a: pool x is listed twice`},
		{name: "a bad pool name", give: Change{Type: "a", Pools: ptr("llm-api")},
			wantErr: `--pools "llm-api": type a: pool "llm-api": a pool's name is 1-40 characters of A-Z a-z 0-9 _`},
		{name: "an empty pool", give: Change{Type: "a", Pools: ptr("")}, wantErr: "--pools \"\": type a: pool \"\""},
		{name: "a trailing plus", give: Change{Type: "a", Pools: ptr("x+")}, wantErr: "a pool's name is 1-40 characters"},
		{name: "a comma", give: Change{Type: "a", Pools: ptr("x,y")}, wantErr: "give pool or pool+pool"},
		{name: "pools and no pools", give: Change{Type: "a", Pools: ptr("x"), NoPools: true}, wantErr: "--pools and --no-pools at once"},
		{name: "share over the top", give: Change{Type: "a", Share: ptr(config.MaxShare + 1)}, wantErr: "--share 101 must be from 1 to 100 (0 removes the live share)"},
		{name: "a negative share", give: Change{Type: "a", Share: ptr(-1)}, wantErr: "--share -1 must be from 1 to 100"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.give.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Errorf("Validate() = %v, want nil", err)
				}
				return
			}
			var ue UsageError
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.As(err, &ue) {
				t.Errorf("Validate() = %v, want a usage error with %q", err, tt.wantErr)
			}
		})
	}
}

// config set --pools, --no-pools and --share write the type's pools and share into its live item
// and keep its other fields; a pool without a cap in force is refused, and a refused change writes
// nothing.
func TestConfigSetPools(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name        string
		stored      []config.Override
		give        Change
		wantErr     string          // in the usage error; nothing written
		want        config.Override // the type's stored override after
		wantPools   string          // the POOLS column after
		wantShare   string          // the SHARE column after
		wantStrat   string          // "strategy (source)"
		wantWarning string
	}{
		{
			name: "pools keep the other fields", stored: []config.Override{{Type: "reports", Limit: 4, MaxAttempts: 2}},
			give:      Change{Type: "reports", Pools: ptr("llm_api+pay")},
			want:      config.Override{Type: "reports", Limit: 4, MaxAttempts: 2, Pools: []string{"llm_api", "pay"}},
			wantPools: "llm_api+pay (override)", wantShare: "1", wantStrat: "first-free (default)",
		},
		{
			name: "a pool with only a live cap", stored: []config.Override{{Pool: "batch", Limit: 5}},
			give:      Change{Type: "reports", Pools: ptr("batch"), Share: ptr(7)},
			want:      config.Override{Type: "reports", Pools: []string{"batch"}, Share: 7},
			wantPools: "batch (override)", wantShare: "7 (override)", wantStrat: "first-free (default)",
		},
		{
			name: "pools replace the TypePools entry", give: Change{Type: "classify", Pools: ptr("pay")},
			want:      config.Override{Type: "classify", Pools: []string{"pay"}},
			wantPools: "pay (override)", wantShare: "1", wantStrat: "first-free (default)",
		},
		{
			name: "no pools over a TypePools entry says noPools", give: Change{Type: "summarize", NoPools: true},
			want:      config.Override{Type: "summarize", NoPools: true},
			wantPools: "none (override)", wantShare: "-", wantStrat: "first-free (default)",
			wantWarning: "type summarize is in no pool: its live item removes its TypePools entry, llm_api",
		},
		{
			name: "no pools without a TypePools entry clears the live pools", stored: []config.Override{{Type: "reports", Limit: 4, Pools: []string{"pay"}, Share: 2}},
			give:      Change{Type: "reports", NoPools: true},
			want:      config.Override{Type: "reports", Limit: 4, Share: 2},
			wantPools: "-", wantShare: "-", wantStrat: "first-free (default)",
			wantWarning: "type reports is in no pool: its share, 2, applies once it joins one",
		},
		{
			name: "pools again after noPools", stored: []config.Override{{Type: "summarize", NoPools: true}},
			give:      Change{Type: "summarize", Pools: ptr("pay")},
			want:      config.Override{Type: "summarize", Pools: []string{"pay"}},
			wantPools: "pay (override)", wantShare: "3 (PoolShares)", wantStrat: "first-free (default)",
		},
		{
			name: "share 0 brings back PoolShares", stored: []config.Override{{Type: "summarize", Share: 9}},
			give:      Change{Type: "summarize", Share: ptr(0)},
			want:      config.Override{Type: "summarize"},
			wantPools: "llm_api (TypePools)", wantShare: "3 (PoolShares)", wantStrat: "first-free (default)",
		},
		{
			name: "a random type in a pool without a cap runs random", stored: []config.Override{{Type: "reports", Strategy: "random", Pools: []string{"gone"}}},
			give:      Change{Type: "reports", Share: ptr(2)},
			want:      config.Override{Type: "reports", Strategy: "random", Pools: []string{"gone"}, Share: 2},
			wantPools: "gone (override)", wantShare: "2 (override)", wantStrat: "random (override)",
		},
		{
			name: "a random type runs first-free in a pool", stored: []config.Override{{Type: "reports", Strategy: "random"}},
			give:      Change{Type: "reports", Pools: ptr("pay")},
			want:      config.Override{Type: "reports", Strategy: "random", Pools: []string{"pay"}},
			wantPools: "pay (override)", wantShare: "1", wantStrat: "first-free (pools)",
			wantWarning: "type reports is configured random but runs first-free while it is in a pool",
		},

		{name: "a pool without a cap", give: Change{Type: "reports", Pools: ptr("llm_api+gpu")},
			wantErr: "--pools llm_api+gpu: pool gpu has no cap (neither the Pools parameter nor a live cap gives it one), so it would cap nothing; give it one first (sfnlimit config pool set gpu --cap N). Nothing written"},
		{name: "a bad pool list", stored: []config.Override{{Type: "reports", Limit: 3}}, give: Change{Type: "reports", Pools: ptr("a+b+c")},
			wantErr: "more than the 2 a type may belong to"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := newMemStore(tt.stored...)
			e := ConfigEditor{Store: store, Defaults: poolDefaults(), CacheAge: time.Second}
			res, err := e.Set(ctx, tt.give)
			if tt.wantErr != "" {
				var ue UsageError
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.As(err, &ue) {
					t.Errorf("Set() = %v, want a usage error with %q", err, tt.wantErr)
				}
				if store.writes != 0 {
					t.Errorf("a refused change wrote: %d writes, overrides %v", store.writes, store.items)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := store.items[tt.give.Type]; !reflect.DeepEqual(got, tt.want) || store.writes != 1 {
				t.Errorf("stored %+v (%d writes), want %+v in 1 write", got, store.writes, tt.want)
			}
			a := res.After
			if a.poolsText() != tt.wantPools || a.shareText() != tt.wantShare {
				t.Errorf("after: pools %q share %q, want %q %q", a.poolsText(), a.shareText(), tt.wantPools, tt.wantShare)
			}
			if got := fmt.Sprintf("%s (%s)", a.Strategy, a.StrategySource); got != tt.wantStrat {
				t.Errorf("after: strategy %s, want %s", got, tt.wantStrat)
			}
			warnings := strings.Join(res.Warnings, "\n")
			if tt.wantWarning != "" && !strings.Contains(warnings, tt.wantWarning) {
				t.Errorf("warnings %q, want one with %q", res.Warnings, tt.wantWarning)
			}
			var b strings.Builder
			if err := res.WriteTable(&b); err != nil {
				t.Fatal(err)
			}
			if want := fmt.Sprintf("pools of type %s: ", tt.give.Type); !strings.Contains(b.String(), want) {
				t.Errorf("WriteTable() lacks %q:\n%s", want, b.String())
			}
		})
	}
}

// config get shows each type's pools and share, with their sources, and a pools section: each
// pool's cap in force, where it comes from, and its member types; --json has the same. A pool's live
// cap is no type: it adds no row and no lanes.
func TestConfigGetPools(t *testing.T) {
	store := newMemStore(
		config.Override{Pool: "llm_api", Limit: 40},
		config.Override{Pool: "batch", Limit: 3},
		config.Override{Type: "reports", Pools: []string{"pay", "gpu"}, Share: 2},
		config.Override{Type: "classify", NoPools: true},
	)
	d := poolDefaults()
	v, err := ConfigEditor{Store: store, Defaults: d, CacheAge: time.Second}.Get(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, tv := range v.Types {
		types = append(types, tv.Type)
	}
	if want := []string{"classify", "payments", "reports", "summarize"}; !reflect.DeepEqual(types, want) {
		t.Errorf("types %v, want %v (a pool's live cap is no type)", types, want)
	}
	if want := 2 + 5 + 10 + 10; v.Lanes != want {
		t.Errorf("lanes %d, want %d (a pool's cap counts no lanes)", v.Lanes, want)
	}
	wantPools := []PoolView{
		{Name: "batch", Cap: 3, Source: PoolCapLive, Members: []string{}},
		{Name: "gpu", Cap: 0, Source: PoolCapNone, Members: []string{"reports"}},
		{Name: "llm_api", Cap: 40, Source: PoolCapLive, Members: []string{"summarize"}},
		{Name: "pay", Cap: 20, Source: PoolCapDeployment, Members: []string{"reports"}},
	}
	if !reflect.DeepEqual(v.Pools, wantPools) {
		t.Errorf("pools %+v,\nwant %+v", v.Pools, wantPools)
	}
	var b strings.Builder
	if err := v.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"POOLS                SHARE           LIVE OVERRIDE\n",
		"none (override)      -               noPools\n",
		"pay+gpu (override)   2 (override)    pools=pay+gpu share=2\n",
		"llm_api (TypePools)  3 (PoolShares)  -\n",
		"POOL     CAP   SOURCE      MEMBERS\n",
		"batch    3     live        -\n",
		"gpu      none  none        reports\n",
		"llm_api  40    live        summarize\n",
		"pay      20    deployment  reports\n",
		"Pool gpu has no cap (neither Pools nor a live cap): it caps nothing, and its members (reports) run on their own limits",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("WriteTable() lacks %q:\n%s", want, b.String())
		}
	}
	if strings.Contains(b.String(), "type  is ignored") || strings.Contains(b.String(), "WARNING") {
		t.Errorf("WriteTable() warns about a pool's cap:\n%s", b.String())
	}

	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var back struct {
		Types []struct {
			Type        string   `json:"type"`
			Pools       []string `json:"pools"`
			PoolsSource string   `json:"poolsSource"`
			Share       int      `json:"share"`
		} `json:"types"`
		Pools []PoolView `json:"pools"`
	}
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back.Pools, wantPools) {
		t.Errorf("JSON pools %+v, want %+v", back.Pools, wantPools)
	}
	for _, tv := range back.Types {
		if tv.Type == "reports" && (!reflect.DeepEqual(tv.Pools, []string{"pay", "gpu"}) || tv.PoolsSource != "override" || tv.Share != 2) {
			t.Errorf("JSON of reports: pools %v (%s) share %d, want [pay gpu] (override) 2", tv.Pools, tv.PoolsSource, tv.Share)
		}
	}

	// Without pools anywhere, the table has no POOLS column and no pools section.
	plain, err := ConfigEditor{Store: newMemStore(config.Override{Type: "llm", Limit: 3}), Defaults: defaults()}.Get(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	b.Reset()
	if err := plain.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "POOL") || plain.Pools != nil {
		t.Errorf("a deployment without pools shows them:\n%s", b.String())
	}
}

// config pool set writes a pool's live cap (checked with the functions' rules), config pool unset
// removes it; each says what the pool's cap is after, and a change that changes nothing writes
// nothing.
func TestConfigPoolSetUnset(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name        string
		stored      []config.Override
		unset       bool
		pool        string
		cap         int
		wantErr     string
		wantWrites  int
		wantAfter   PoolView
		wantWarning string
	}{
		{name: "a live cap over the deployment's", pool: "llm_api", cap: 40, wantWrites: 1,
			wantAfter: PoolView{Name: "llm_api", Cap: 40, Source: PoolCapLive, Members: []string{"classify", "summarize"}}},
		{name: "a new pool", pool: "gpu", cap: config.MaxPoolCap, wantWrites: 1,
			wantAfter:   PoolView{Name: "gpu", Cap: 1000, Source: PoolCapLive, Members: []string{}},
			wantWarning: "no type is in pool gpu: it caps nothing until one joins it (sfnlimit config set TYPE --pools gpu)"},
		{name: "the same cap again", stored: []config.Override{{Pool: "pay", Limit: 5}}, pool: "pay", cap: 5,
			wantAfter:   PoolView{Name: "pay", Cap: 5, Source: PoolCapLive, Members: []string{"classify"}},
			wantWarning: "nothing changed, nothing written: the live cap of pool pay is 5 already"},
		{name: "unset: the deployment's applies again", stored: []config.Override{{Pool: "pay", Limit: 5}}, unset: true, pool: "pay", wantWrites: 1,
			wantAfter:   PoolView{Name: "pay", Cap: 20, Source: PoolCapDeployment, Members: []string{"classify"}},
			wantWarning: "pool pay has no live cap any more: its Pools entry, 20, applies again"},
		{name: "unset: a live-only pool caps nothing", stored: []config.Override{{Pool: "gpu", Limit: 5}, {Type: "reports", Pools: []string{"gpu"}}},
			unset: true, pool: "gpu", wantWrites: 1,
			wantAfter:   PoolView{Name: "gpu", Source: PoolCapNone, Members: []string{"reports"}},
			wantWarning: "pool gpu has no cap: it caps nothing, and its members (reports) run on their own limits"},
		{name: "unset without a live cap", unset: true, pool: "pay",
			wantAfter:   PoolView{Name: "pay", Cap: 20, Source: PoolCapDeployment, Members: []string{"classify"}},
			wantWarning: "pool pay had no live cap: nothing changed"},

		{name: "cap 0", pool: "pay", cap: 0, wantErr: "--cap 0: pool pay: cap 0 must be from 1 to 1000"},
		{name: "cap over the top", pool: "pay", cap: config.MaxPoolCap + 1, wantErr: "--cap 1001: pool pay: cap 1001 must be from 1 to 1000"},
		{name: "a bad name", pool: "llm-api", cap: 3, wantErr: `pool "llm-api": a pool's name is 1-40 characters of A-Z a-z 0-9 _`},
		{name: "unset a bad name", unset: true, pool: "a#b", wantErr: `pool "a#b"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := newMemStore(tt.stored...)
			e := ConfigEditor{Store: store, Defaults: poolDefaults(), CacheAge: time.Second}
			var (
				res PoolResult
				err error
			)
			if tt.unset {
				res, err = e.UnsetPool(ctx, tt.pool, Waker{})
			} else {
				res, err = e.SetPool(ctx, tt.pool, tt.cap, Waker{})
			}
			if tt.wantErr != "" {
				var ue UsageError
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.As(err, &ue) {
					t.Errorf("err = %v, want a usage error with %q", err, tt.wantErr)
				}
				if store.writes != 0 {
					t.Errorf("a refused change wrote %d times", store.writes)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if store.writes != tt.wantWrites || res.Unchanged != (tt.wantWrites == 0) || (res.AppliesWithinSeconds != nil) != (tt.wantWrites > 0) {
				t.Errorf("%d writes (unchanged %v, applies %v), want %d", store.writes, res.Unchanged, res.AppliesWithinSeconds, tt.wantWrites)
			}
			if !reflect.DeepEqual(res.After, tt.wantAfter) {
				t.Errorf("after %+v, want %+v", res.After, tt.wantAfter)
			}
			if o, ok := store.items["POOL#"+tt.pool]; ok != (tt.wantAfter.Source == PoolCapLive) || ok && o.Limit != tt.wantAfter.Cap {
				t.Errorf("stored pool item %+v (%v), want the live cap %+v", o, ok, tt.wantAfter)
			}
			if warnings := strings.Join(res.Warnings, "\n"); tt.wantWarning != "" && !strings.Contains(warnings, tt.wantWarning) {
				t.Errorf("warnings %q, want one with %q", res.Warnings, tt.wantWarning)
			}
			var b strings.Builder
			if err := res.WriteTable(&b); err != nil {
				t.Fatal(err)
			}
			if want := fmt.Sprintf("pool %s: cap ", tt.pool); !strings.HasPrefix(b.String(), want) || !strings.Contains(b.String(), "POOL ") {
				t.Errorf("WriteTable() = %q, want it to start with %q and list the pools", b.String(), want)
			}
		})
	}
}

// A change that gives a pool more room wakes its parked jobs at once, one per slot it adds (or,
// with no cap left, each former member's parked groups for its free lanes); a lower cap wakes
// nobody. Pool pay: classify's job c-1 runs and holds slot 1, its waiting group's head parks at
// the pool.
func TestConfigPoolRaiseWakesParkedJobs(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name      string
		stored    []config.Override
		unset     bool
		cap       int
		wantWoken int
	}{
		{name: "set: raised from 1 to 2", stored: []config.Override{{Pool: "pay", Limit: 1}}, cap: 2, wantWoken: 1},
		{name: "set: raised, the deployment's 20 to 30", cap: 30, wantWoken: 1},
		{name: "set: lowered", cap: 1},
		{name: "unset: the deployment's 20 over a live 1", stored: []config.Override{{Pool: "pay", Limit: 1}}, unset: true, wantWoken: 1},
		{name: "unset: no cap left", stored: []config.Override{{Pool: "pay", Limit: 1}, {Type: "classify", Pools: []string{"pay"}}},
			unset: true, wantWoken: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := poolDefaults()
			if tt.unset && len(tt.stored) > 1 {
				delete(d.Pools, "pay") // pay is a live-only pool: unset leaves it no cap
				d.TypePools["classify"] = []string{"llm_api"}
			}
			db := fakes.NewDynamoDB("table")
			leases, slots, room := lease.NewStore(db, "table"), pool.NewStore(db, "table"), waitroom.NewStore(db, "table")
			c1 := lease.Lease{Type: "classify", Lane: 1, JobID: "c-1", Status: lease.Starting, Attempt: 1, ReceiptHandle: "h-c-1"}
			c1, err := leases.Put(ctx, c1, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := slots.Take(ctx, "pay", 1, pool.HolderOf(c1), nil); err != nil {
				t.Fatal(err)
			}
			if err := room.Park(ctx, waitroom.Waiter{Type: "classify", Group: "classify-0", MessageID: "m-c-2", ReceiptHandle: "h-c-2",
				JobID: "c-2", AtPool: "pay", SubmittedAt: time.Now(), ParkedAt: time.Now()}); err != nil {
				t.Fatal(err)
			}
			q := &fakes.SQS{}
			w := Waker{Queue: q, QueueURL: "lanes", WaitRoom: room, Leases: leases, Pools: slots}
			e := ConfigEditor{Store: newMemStore(tt.stored...), Defaults: d, CacheAge: time.Second}
			var res PoolResult
			if tt.unset {
				res, err = e.UnsetPool(ctx, "pay", w)
			} else {
				res, err = e.SetPool(ctx, "pay", tt.cap, w)
			}
			if err != nil {
				t.Fatal(err)
			}
			var woken []string
			for _, v := range q.VisibilityChanges() {
				if v.Timeout == 0 {
					woken = append(woken, v.ReceiptHandle)
				}
			}
			if res.Woken != tt.wantWoken || len(woken) != tt.wantWoken || tt.wantWoken > 0 && woken[0] != "h-c-2" {
				t.Errorf("woken %d (%v), want %d (c-2's head)", res.Woken, woken, tt.wantWoken)
			}
		})
	}
}
