package config

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
)

// MaxPoolsPerType is how many pools one type may belong to: a workflow that calls two limited
// services. Each pool adds a conditional write to a bind.
const MaxPoolsPerType = 2

// MaxPoolCap is the largest cap a pool may have: the lanes of its member types are the real bound,
// and a bind reads the pool's slots (one item each) with every look.
const MaxPoolCap = 1000

// MaxShare is the largest share a type may have in its pools.
const MaxShare = 100

// poolPrefix marks a pool's live cap among the overrides the Resolver reads (a type has no '#').
const poolPrefix = "POOL#"

// Pool is one shared cap a type counts against: a named cap that every member type's running jobs
// count toward together, and this type's share of it when member types contend for it.
type Pool struct {
	Name  string
	Cap   int
	Share int
}

// Pooled reports whether the type's jobs count against a pool.
func (c TypeConfig) Pooled() bool { return len(c.Pools) > 0 }

// InPool reports whether the type belongs to pool name.
func (c TypeConfig) InPool(name string) bool {
	return slices.ContainsFunc(c.Pools, func(p Pool) bool { return p.Name == name })
}

// ValidatePoolName checks a pool's name: the grammar of a type's.
func ValidatePoolName(name string) error {
	if err := job.ValidateType(name); err != nil {
		return fmt.Errorf("pool %q: a pool's name is 1-%d characters of A-Z a-z 0-9 _", name, job.MaxTypeLen)
	}
	return nil
}

// validatePoolCap checks a pool's cap.
func validatePoolCap(name string, n int) error {
	if n < 1 || n > MaxPoolCap {
		return fmt.Errorf("pool %s: cap %d must be from 1 to %d", name, n, MaxPoolCap)
	}
	return nil
}

// ParsePools reads POOL_CAPS, "llm_api=50,pay=20": each pool's cap ("" is none).
func ParsePools(s string) (map[string]int, error) {
	out, err := ParseLimits(s)
	if err != nil {
		return nil, err
	}
	for name, n := range out {
		if err := validatePoolCap(name, n); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// ParseTypePools reads TYPE_POOLS, "summarize=llm_api,classify=llm_api+pay": the pools of each
// type, at most MaxPoolsPerType, joined by '+' ("" is none).
func ParseTypePools(s string) (map[string][]string, error) {
	return parsePairs(s, "pool[+pool]", func(typ, v string) ([]string, error) {
		return ParsePoolList(typ, v)
	})
}

// ParsePoolList reads one type's pools, "a+b" (as TYPE_POOLS and the CLI write them).
func ParsePoolList(typ, v string) ([]string, error) {
	names := strings.Split(v, "+")
	if len(names) > MaxPoolsPerType {
		return nil, fmt.Errorf("type %s: %d pools, more than the %d a type may belong to", typ, len(names), MaxPoolsPerType)
	}
	for i, n := range names {
		if err := ValidatePoolName(n); err != nil {
			return nil, fmt.Errorf("type %s: %w", typ, err)
		}
		if slices.Contains(names[:i], n) {
			return nil, fmt.Errorf("type %s: pool %s is listed twice", typ, n)
		}
	}
	return names, nil
}

// ParseShares reads TYPE_POOL_SHARES, "summarize=3,classify=1": each type's share in its pools
// (1 when not listed), from 1 to MaxShare.
func ParseShares(s string) (map[string]int, error) {
	out, err := ParseLimits(s)
	if err != nil {
		return nil, err
	}
	for t, n := range out {
		if n > MaxShare {
			return nil, fmt.Errorf("type %s: share %d is more than %d", t, n, MaxShare)
		}
	}
	return out, nil
}

// FormatPools writes pool caps as "a=50,b=20", names sorted ("" for none).
func FormatPools(m map[string]int) string { return FormatKeyLimits(m) }

// PoolNames are the names of a type's pools, in its order.
func (c TypeConfig) PoolNames() []string {
	out := make([]string, len(c.Pools))
	for i, p := range c.Pools {
		out[i] = p.Name
	}
	return out
}

// validatePools checks the deployment's pools: every type's pools have a cap.
func (d Defaults) validatePools() error {
	for name, n := range d.Pools {
		if err := ValidatePoolName(name); err != nil {
			return fmt.Errorf("POOL_CAPS: %w", err)
		}
		if err := validatePoolCap(name, n); err != nil {
			return fmt.Errorf("POOL_CAPS: %w", err)
		}
	}
	for t, names := range d.TypePools {
		if _, err := ParsePoolList(t, strings.Join(names, "+")); err != nil {
			return fmt.Errorf("TYPE_POOLS: %w", err)
		}
		for _, n := range names {
			if _, ok := d.Pools[n]; !ok {
				return fmt.Errorf("TYPE_POOLS: type %s: pool %s has no cap in POOL_CAPS", t, n)
			}
		}
	}
	for t, n := range d.Shares {
		if n < 1 || n > MaxShare {
			return fmt.Errorf("TYPE_POOL_SHARES: type %s: share %d must be from 1 to %d", t, n, MaxShare)
		}
	}
	return nil
}

// validate checks a pool's live cap.
func (o Override) validatePool() error {
	if err := ValidatePoolName(o.Pool); err != nil {
		return err
	}
	return validatePoolCap(o.Pool, o.Limit)
}

// validateTypePools checks a type override's pools and share.
func (o Override) validateTypePools() error {
	if len(o.Pools) > 0 {
		if o.NoPools {
			return fmt.Errorf("type %s: pools and no pools at once", o.Type)
		}
		if _, err := ParsePoolList(o.Type, strings.Join(o.Pools, "+")); err != nil {
			return err
		}
	}
	if o.Share < 0 || o.Share > MaxShare {
		return fmt.Errorf("type %s: share %d must be from 1 to %d", o.Type, o.Share, MaxShare)
	}
	return nil
}

// poolCaps returns every pool's cap: the deployment's, with live caps over them.
func (r *Resolver) poolCaps(ov map[string]Override) map[string]int {
	caps := maps.Clone(r.defaults.Pools)
	if caps == nil {
		caps = map[string]int{}
	}
	for k, o := range ov {
		if name, ok := strings.CutPrefix(k, poolPrefix); ok {
			caps[name] = o.Limit
		}
	}
	return caps
}

// mergePools sets c's pools from the deployment's and the type's override: a pool without a cap
// (removed, or never set) is left out, so it caps nothing rather than stall its members.
func (r *Resolver) mergePools(c *TypeConfig, ov map[string]Override) {
	names := r.defaults.TypePools[c.Type]
	share := r.defaults.Shares[c.Type]
	if o, ok := ov[c.Type]; ok {
		switch {
		case o.NoPools:
			names = nil
		case len(o.Pools) > 0:
			names = o.Pools
		}
		if o.Share > 0 {
			share = o.Share
		}
	}
	if share == 0 {
		share = 1
	}
	caps := r.poolCaps(ov)
	for _, n := range names {
		if cp, ok := caps[n]; ok && cp > 0 {
			c.Pools = append(c.Pools, Pool{Name: n, Cap: cp, Share: share})
		}
	}
}

// PoolCaps returns every pool's cap in force (the deployment's, with live caps over them), by name.
func (r *Resolver) PoolCaps(ctx context.Context) (map[string]int, error) {
	ov, err := r.load(ctx)
	if err != nil {
		return nil, err
	}
	return r.poolCaps(ov), nil
}

// Members returns the effective configuration of every type in pool name, sorted by type.
func (r *Resolver) Members(ctx context.Context, name string) ([]TypeConfig, error) {
	all, err := r.All(ctx)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(all, func(c TypeConfig) bool { return !c.InPool(name) }), nil
}
