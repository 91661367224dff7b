package ops

import (
	"context"
	"fmt"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
)

// PoolMembers returns the types in pool name as the functions resolve the config now (live
// overrides over the deployment's): pause --pool and resume --pool act on each of them.
func (e ConfigEditor) PoolMembers(ctx context.Context, name string) ([]string, error) {
	if err := config.ValidatePoolName(name); err != nil {
		return nil, UsageError{err}
	}
	ovs, err := e.Store.ListOverrides(ctx)
	if err != nil {
		return nil, err
	}
	res, err := config.NewResolver(e.Defaults, staticStore(ovs), 0)
	if err != nil {
		return nil, err
	}
	ms, err := res.Members(ctx, name)
	if err != nil {
		return nil, err
	}
	if len(ms) == 0 {
		return nil, fmt.Errorf("pool %s has no member types with a cap in force: see sfnlimit config get", name)
	}
	out := make([]string, len(ms))
	for i, c := range ms {
		out[i] = c.Type
	}
	return out, nil
}
