package config_test

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lane"
)

func TestResolverPools(t *testing.T) {
	d := testDefaults(0)
	d.Pools = map[string]int{"psp": 20, "llm": 5}
	d.TypePools = map[string][]string{"payments": {"psp"}, "reports": {"psp", "llm"}}
	d.Shares = map[string]int{"payments": 3}
	tests := []struct {
		name string
		give []config.Override
		typ  string
		want []config.Pool
	}{
		{name: "deployment's pools and share", typ: "payments", want: []config.Pool{{Name: "psp", Cap: 20, Share: 3}}},
		{name: "two pools, default share", typ: "reports", want: []config.Pool{{Name: "psp", Cap: 20, Share: 1}, {Name: "llm", Cap: 5, Share: 1}}},
		{name: "live cap of a pool", typ: "reports", give: []config.Override{{Pool: "llm", Limit: 2}},
			want: []config.Pool{{Name: "psp", Cap: 20, Share: 1}, {Name: "llm", Cap: 2, Share: 1}}},
		{name: "live pools and share", typ: "payments", give: []config.Override{{Type: "payments", Pools: []string{"llm"}, Share: 2}},
			want: []config.Pool{{Name: "llm", Cap: 5, Share: 2}}},
		{name: "out of its pools", typ: "payments", give: []config.Override{{Type: "payments", NoPools: true}}},
		{name: "a live pool with no cap caps nothing", typ: "payments", give: []config.Override{{Type: "payments", Pools: []string{"nocap"}}}},
		{name: "a pool given a cap live", typ: "payments", give: []config.Override{{Type: "payments", Pools: []string{"new"}}, {Pool: "new", Limit: 7}},
			want: []config.Pool{{Name: "new", Cap: 7, Share: 3}}},
		{name: "an invalid live cap is ignored", typ: "payments", give: []config.Override{{Pool: "psp", Limit: 0}},
			want: []config.Pool{{Name: "psp", Cap: 20, Share: 3}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := config.NewResolver(d, &fakeStore{list: tt.give}, time.Second)
			if err != nil {
				t.Fatal(err)
			}
			c, err := r.Get(context.Background(), tt.typ)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(c.Pools, tt.want) {
				t.Errorf("Pools = %+v, want %+v", c.Pools, tt.want)
			}
			if c.Pooled() && c.Strategy != lane.FirstFree {
				t.Errorf("a pooled type binds first-free; strategy = %s", c.Strategy)
			}
			all, err := r.All(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range all {
				if a.Type == "" || strings.HasPrefix(a.Type, "POOL#") {
					t.Errorf("All lists a pool as a type: %+v", a)
				}
			}
		})
	}
}

func TestPoolOverrideValidate(t *testing.T) {
	tests := []struct {
		give    config.Override
		wantErr bool
	}{
		{give: config.Override{Pool: "llm", Limit: 50}},
		{give: config.Override{Pool: "llm", Limit: 0}, wantErr: true},
		{give: config.Override{Pool: "llm", Limit: config.MaxPoolCap + 1}, wantErr: true},
		{give: config.Override{Pool: "l-m", Limit: 3}, wantErr: true},
		{give: config.Override{Type: "a", Pools: []string{"p", "q"}, Share: 4}},
		{give: config.Override{Type: "a", Pools: []string{"p", "q", "r"}}, wantErr: true},
		{give: config.Override{Type: "a", Pools: []string{"p", "p"}}, wantErr: true},
		{give: config.Override{Type: "a", Pools: []string{"p"}, NoPools: true}, wantErr: true},
		{give: config.Override{Type: "a", Share: config.MaxShare + 1}, wantErr: true},
	}
	for _, tt := range tests {
		if err := tt.give.Validate(); (err != nil) != tt.wantErr {
			t.Errorf("Validate(%+v) = %v, want error %v", tt.give, err, tt.wantErr)
		}
	}
}

func TestPoolCapsDoNotCountAsLanes(t *testing.T) {
	// A pool's cap is not a type's limit: it holds no lanes of the FIFO in-flight quota.
	r, err := config.NewResolver(testDefaults(0), &fakeStore{list: []config.Override{{Pool: "big", Limit: config.MaxPoolCap}}}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	caps, err := r.PoolCaps(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if caps["big"] != config.MaxPoolCap {
		t.Errorf("PoolCaps = %v, want big=%d", caps, config.MaxPoolCap)
	}
}
