package ops

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
)

// pause --pool and resume --pool act on the pool's member types as the functions resolve them now:
// the deployment's members, with live changes over them.
func TestPoolMembers(t *testing.T) {
	d := defaults()
	d.Limits = map[string]int{"summarize": 5, "classify": 5, "payments": 2}
	d.Pools = map[string]int{"llm": 4}
	d.TypePools = map[string][]string{"summarize": {"llm"}, "classify": {"llm"}}
	tests := []struct {
		name    string
		ovs     []config.Override
		pool    string
		want    []string
		wantErr string
		usage   bool
	}{
		{name: "the deployment's members", pool: "llm", want: []string{"classify", "summarize"}},
		{name: "a type joined live, another left", pool: "llm",
			ovs:  []config.Override{{Type: "payments", Pools: []string{"llm"}}, {Type: "classify", NoPools: true}},
			want: []string{"payments", "summarize"}},
		{name: "no such pool", pool: "psp", wantErr: "pool psp has no member types"},
		{name: "not a pool's name", pool: "l-m", wantErr: "pool", usage: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := ConfigEditor{Store: newMemStore(tt.ovs...), Defaults: d}
			got, err := e.PoolMembers(context.Background(), tt.pool)
			if tt.wantErr != "" {
				var ue UsageError
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || errors.As(err, &ue) != tt.usage {
					t.Fatalf("PoolMembers(%s) = %v, %v; want an error with %q (usage error %v)", tt.pool, got, err, tt.wantErr, tt.usage)
				}
				return
			}
			if err != nil || !slices.Equal(got, tt.want) {
				t.Errorf("PoolMembers(%s) = %v, %v; want %v", tt.pool, got, err, tt.want)
			}
		})
	}
}
