package main

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/sfnlimit/sfnlimit/internal/tools/ops"
)

// Pools end to end, on the stack's table: config pool set writes a pool's live cap, config set
// --pools puts a type in it (a pool without a cap is refused), --share and --no-pools change the
// type's item, config get shows the type's pools and share and the pool with its cap, source and
// members, and config pool unset removes the cap (the stack has no Pools parameter: the pool then
// caps nothing).
func TestConfigPools(t *testing.T) {
	t.Parallel()
	typ := newType(t, "pooled", 3)
	pool := typ + "_pool"

	r := must(t, local(t, "config", "set", typ, "--pools", pool), exitUsage)
	if !strings.Contains(r.stderr, "pool "+pool+" has no cap") {
		t.Errorf("config set --pools before the pool has a cap:\n%s", r)
	}
	p := decode[ops.PoolResult](t, must(t, local(t, "config", "pool", "set", pool, "--cap", "2", "--json"), exitOK))
	if want := (ops.PoolView{Name: pool, Cap: 2, Source: ops.PoolCapLive, Members: []string{}}); !reflect.DeepEqual(p.After, want) {
		t.Errorf("config pool set = %+v, want %+v", p.After, want)
	}
	res := decode[ops.SetResult](t, must(t, local(t, "config", "set", typ, "--pools", pool, "--share", "4", "--json"), exitOK))
	if a := res.After; !reflect.DeepEqual(a.Pools, []string{pool}) || a.PoolsSource != "override" || a.Share != 4 || a.Limit != 3 || a.Override.Pools != pool {
		t.Errorf("config set --pools --share = %+v, want pool %s and share 4 from the override, limit 3 kept", a, pool)
	}
	v := decode[ops.ConfigView](t, must(t, local(t, "config", "get", "--json"), exitOK))
	i := slices.IndexFunc(v.Pools, func(p ops.PoolView) bool { return p.Name == pool })
	if i < 0 || v.Pools[i].Cap != 2 || v.Pools[i].Source != ops.PoolCapLive || !reflect.DeepEqual(v.Pools[i].Members, []string{typ}) {
		t.Errorf("config get pools = %+v, want %s with cap 2 (live) and member %s", v.Pools, pool, typ)
	}
	r = must(t, local(t, "config", "get", typ), exitOK)
	for _, want := range []string{"POOLS", "SHARE", pool + " (override)", "4 (override)", "pools=" + pool + " share=4", "POOL "} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("config get %s lacks %q:\n%s", typ, want, r)
		}
	}
	if !slices.ContainsFunc(strings.Split(r.stdout, "\n"), func(l string) bool {
		return slices.Equal(strings.Fields(l), []string{pool, "2", "live", typ})
	}) {
		t.Errorf("config get %s lacks the line of pool %s: cap 2, live, member %s:\n%s", typ, pool, typ, r)
	}

	res = decode[ops.SetResult](t, must(t, local(t, "config", "set", typ, "--no-pools", "--json"), exitOK))
	if a := res.After; len(a.Pools) != 0 || a.Override.Pools != "" || a.Override.NoPools {
		t.Errorf("config set --no-pools = %+v, want no pools and no noPools (the stack has no TypePools)", a)
	}
	p = decode[ops.PoolResult](t, must(t, local(t, "config", "pool", "unset", pool, "--json"), exitOK))
	if p.After.Source != ops.PoolCapNone || p.Unchanged {
		t.Errorf("config pool unset = %+v, want no cap left", p)
	}
	r = must(t, local(t, "config", "pool", "unset", pool), exitOK)
	if !strings.Contains(r.stdout, "pool "+pool+" had no live cap: nothing changed") {
		t.Errorf("a second config pool unset:\n%s", r)
	}
}
