package ops

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lane"
)

// Where a type's pools and share come from.
const (
	PoolsFromOverride = "override"          // the type's live item: pools, or noPools
	PoolsFromType     = "TypePools"         // the type's entry in the TypePools parameter
	ShareFromOverride = "override"          // the type's live item
	ShareFromType     = "PoolShares"        // the type's entry in the PoolShares parameter
	ShareDefault      = "default"           // not set anywhere: 1
	StrategyFromPools = "pools"             // a pooled type configured random runs first-free
	PoolCapLive       = "live"              // a pool's cap from its live item (config pool set)
	PoolCapDeployment = "deployment"        // a pool's cap from the Pools parameter
	PoolCapNone       = "none"              // a pool named by a type that has no cap: it caps nothing
	poolsForm         = "pool or pool+pool" // --pools, as TypePools writes a type's pools
)

// PoolView is a shared pool: its cap in force, where the cap comes from, and its member types.
type PoolView struct {
	Name string `json:"name"`
	// Cap is 0 when no cap is in force (Source PoolCapNone): the pool caps nothing.
	Cap     int      `json:"cap"`
	Source  string   `json:"source"`
	Members []string `json:"members"`
}

// setPools fills in a type's pools and share from the deployment's TypePools and PoolShares and its
// live override ov (nil: none), as config.Resolver merges them; a type in a pool with a cap in force
// (caps) that is configured random runs first-free (a pool's slots are taken where jobs wait for a
// free lane).
func (tv *TypeView) setPools(d config.Defaults, ov *config.Override, configured string, caps map[string]int) {
	tv.Pools, tv.PoolsSource = nil, ""
	tv.Share, tv.ShareSource = 1, ShareDefault
	if names := d.TypePools[tv.Type]; len(names) > 0 {
		tv.Pools, tv.PoolsSource = slices.Clone(names), PoolsFromType
	}
	if n := d.Shares[tv.Type]; n > 0 {
		tv.Share, tv.ShareSource = n, ShareFromType
	}
	if ov != nil {
		switch {
		case ov.NoPools:
			tv.Pools, tv.PoolsSource = nil, PoolsFromOverride
		case len(ov.Pools) > 0:
			tv.Pools, tv.PoolsSource = slices.Clone(ov.Pools), PoolsFromOverride
		}
		if ov.Share > 0 {
			tv.Share, tv.ShareSource = ov.Share, ShareFromOverride
		}
	}
	pooled := slices.ContainsFunc(tv.Pools, func(p string) bool { return caps[p] > 0 })
	if s, err := lane.ParseStrategy(configured); err == nil && s != lane.FirstFree && pooled && !tv.capsKeys() && !tv.ratesKeys() {
		tv.Strategy, tv.StrategySource = lane.FirstFree, StrategyFromPools
	}
}

// poolsText is the POOLS column: the type's pools and where they come from.
func (tv TypeView) poolsText() string {
	if len(tv.Pools) == 0 {
		if tv.PoolsSource == PoolsFromOverride {
			return "none (override)"
		}
		return "-"
	}
	return fmt.Sprintf("%s (%s)", strings.Join(tv.Pools, "+"), tv.PoolsSource)
}

// shareText is the SHARE column: the type's share in its pools ("-" for a type in none).
func (tv TypeView) shareText() string {
	if len(tv.Pools) == 0 {
		return "-"
	}
	if tv.ShareSource == ShareDefault {
		return strconv.Itoa(tv.Share)
	}
	return fmt.Sprintf("%d (%s)", tv.Share, tv.ShareSource)
}

// showsPools reports whether the table has the POOLS and SHARE columns: once a pool exists or a
// type is in one.
func (v ConfigView) showsPools() bool {
	if len(v.Pools) > 0 {
		return true
	}
	return slices.ContainsFunc(v.Types, func(t TypeView) bool { return len(t.Pools) > 0 || t.PoolsSource != "" })
}

// poolViews lists every pool with a cap (the deployment's, or a live one) or named by a type, its
// cap in force and its members, by name.
func poolViews(d config.Defaults, live map[string]int, types []TypeView) []PoolView {
	byName := map[string]*PoolView{}
	get := func(name string) *PoolView {
		if p, ok := byName[name]; ok {
			return p
		}
		p := &PoolView{Name: name, Source: PoolCapNone, Members: []string{}}
		byName[name] = p
		return p
	}
	for name, n := range d.Pools {
		p := get(name)
		p.Cap, p.Source = n, PoolCapDeployment
	}
	for name, n := range live {
		p := get(name)
		p.Cap, p.Source = n, PoolCapLive
	}
	for _, t := range types {
		for _, name := range t.Pools {
			p := get(name)
			p.Members = append(p.Members, t.Type)
		}
	}
	var out []PoolView
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		p := byName[name]
		slices.Sort(p.Members)
		out = append(out, *p)
	}
	return out
}

// inForce are the pools' caps in force: the deployment's, with live ones over them.
func inForce(deployment, live map[string]int) map[string]int {
	out := maps.Clone(deployment)
	if out == nil {
		out = map[string]int{}
	}
	maps.Copy(out, live)
	return out
}

// livePoolCaps splits the pools' live caps from the types' overrides.
func livePoolCaps(ovs []config.Override) (caps map[string]int, types []config.Override) {
	caps = map[string]int{}
	for _, o := range ovs {
		if o.Pool != "" {
			caps[o.Pool] = o.Limit
			continue
		}
		types = append(types, o)
	}
	return caps, types
}

// writePools prints the pools: each one's cap, its source and its member types.
func (v ConfigView) writePools(w io.Writer) error {
	if len(v.Pools) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "POOL\tCAP\tSOURCE\tMEMBERS")
	for _, p := range v.Pools {
		members := strings.Join(p.Members, ", ")
		if members == "" {
			members = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", p.Name, limitText(p.Cap), p.Source, members)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write pools: %w", err)
	}
	for _, p := range v.Pools {
		if p.Source == PoolCapNone {
			fmt.Fprintf(w, "Pool %s has no cap (neither Pools nor a live cap): it caps nothing, and its members (%s) run on their own limits (sfnlimit config pool set %s --cap N gives it one).\n",
				p.Name, strings.Join(p.Members, ", "), p.Name)
		}
	}
	return nil
}

// validatePools checks the pool fields of a change with the functions' rules
// (config.ParsePoolList, config.MaxShare), before anything is read.
func (c Change) validatePools() error {
	if c.Pools != nil && c.NoPools {
		return usagef("--pools and --no-pools at once: give one (--pools %s puts the type in those pools, --no-pools in none)", poolsForm)
	}
	if c.Pools != nil {
		if _, err := config.ParsePoolList(c.Type, *c.Pools); err != nil {
			return usagef("--pools %q: %v (give %s: at most %d different pools, each 1-40 characters of A-Z a-z 0-9 _, joined by +)", *c.Pools, err, poolsForm, config.MaxPoolsPerType)
		}
	}
	if c.Share != nil && (*c.Share < 0 || *c.Share > config.MaxShare) {
		return usagef("--share %d must be from 1 to %d (0 removes the live share)", *c.Share, config.MaxShare)
	}
	return nil
}

// applyPools writes the pool fields of a change into the type's override o. --no-pools says noPools
// only when the deployment gives the type pools (TypePools); otherwise clearing the live pools
// leaves it in none. A pool without a cap in force (caps: the deployment's with live ones over
// them) is refused: the functions leave such a pool out, so the type would count against nothing.
func (c Change) applyPools(o *config.Override, d config.Defaults, caps map[string]int) (warnings []string, err error) {
	if c.Pools != nil {
		names, _ := config.ParsePoolList(c.Type, *c.Pools) // checked by Validate
		for _, n := range names {
			if caps[n] == 0 {
				return nil, usagef("--pools %s: pool %s has no cap (neither the Pools parameter nor a live cap gives it one), so it would cap nothing; give it one first (sfnlimit config pool set %s --cap N). Nothing written", *c.Pools, n, n)
			}
		}
		o.Pools, o.NoPools = names, false
	}
	if c.NoPools {
		o.Pools = nil
		o.NoPools = len(d.TypePools[c.Type]) > 0
		if o.NoPools {
			warnings = append(warnings, fmt.Sprintf("type %s is in no pool: its live item removes its TypePools entry, %s (config reset %s, or --pools again, puts it back)",
				c.Type, strings.Join(d.TypePools[c.Type], "+"), c.Type))
		}
	}
	if c.Share != nil {
		o.Share = *c.Share
	}
	return warnings, nil
}

// poolWarnings says what a change of a type's pools or share means.
func poolWarnings(before, after TypeView) []string {
	var out []string
	if len(after.Pools) > 0 && before.StrategySource != StrategyFromPools && after.StrategySource == StrategyFromPools {
		out = append(out, fmt.Sprintf("type %s is configured random but runs first-free while it is in a pool: a pool's slots are taken where jobs wait for a free lane", after.Type))
	}
	if len(after.Pools) == 0 && after.ShareSource == ShareFromOverride {
		out = append(out, fmt.Sprintf("type %s is in no pool: its share, %d, applies once it joins one", after.Type, after.Share))
	}
	return out
}

// PoolResult is a pool after a change of its live cap, and what to know about it.
type PoolResult struct {
	Before   PoolView   `json:"before"`
	After    PoolView   `json:"after"`
	Config   ConfigView `json:"config"`
	Warnings []string   `json:"warnings,omitempty"`
	// AppliesWithinSeconds is how soon the functions act on what was written; nil when nothing was.
	AppliesWithinSeconds *float64 `json:"appliesWithinSeconds,omitempty"`
	// Unchanged says nothing was written.
	Unchanged bool `json:"unchanged,omitempty"`
	// Woken counts the waiting groups a raise woke at once (their first jobs bind to the room it
	// made; those behind them follow in their groups' order).
	Woken int `json:"woken"`
	// WakeError says why they were not all woken (the releaser's sweep wakes them).
	WakeError string `json:"wakeError,omitempty"`
}

// findPool returns pool name's view, or one with no cap and no members.
func (v ConfigView) findPool(name string) PoolView {
	for _, p := range v.Pools {
		if p.Name == name {
			return p
		}
	}
	return PoolView{Name: name, Source: PoolCapNone, Members: []string{}}
}

// ValidatePoolArg checks a pool's name with the functions' rule (config.ValidatePoolName), and its
// cap (nil: none given) as config.Override.Validate does; a bad one is a usage error.
func ValidatePoolArg(name string, cap *int) error {
	if err := config.ValidatePoolName(name); err != nil {
		return UsageError{err}
	}
	if cap == nil {
		return nil
	}
	if err := (config.Override{Pool: name, Limit: *cap}).Validate(); err != nil {
		return usagef("--cap %d: %v", *cap, err)
	}
	return nil
}

// SetPool writes a pool's live cap (the CONFIG item POOL#{name}), over the deployment's.
//
// A raise wakes the pool's parked jobs at once, one per slot it freed, fairly, with w (a zero w
// wakes nobody: the releaser's sweep wakes them within a minute).
func (e ConfigEditor) SetPool(ctx context.Context, name string, cap int, w Waker) (PoolResult, error) {
	if err := ValidatePoolArg(name, &cap); err != nil {
		return PoolResult{}, err
	}
	o := config.Override{Pool: name, Limit: cap}
	ovs, err := e.Store.ListOverrides(ctx)
	if err != nil {
		return PoolResult{}, fmt.Errorf("read the live config: %w", err)
	}
	before, err := e.view(ctx, ovs)
	if err != nil {
		return PoolResult{}, err
	}
	live, _ := livePoolCaps(ovs)
	if n, ok := live[name]; ok && n == cap {
		res, err := e.poolResult(ctx, name, before, []string{fmt.Sprintf("nothing changed, nothing written: the live cap of pool %s is %d already", name, cap)})
		res.Unchanged = true
		return res, err
	}
	if err := e.Store.SetOverride(ctx, o); err != nil {
		return PoolResult{}, fmt.Errorf("set the live cap of pool %s: %w", name, err)
	}
	res, err := e.poolResult(ctx, name, before, nil)
	res.AppliesWithinSeconds = ptrTo(e.CacheAge.Seconds())
	if err != nil {
		return res, err
	}
	return res, e.wakePool(ctx, w, &res, append(withoutPool(ovs, name), o))
}

// UnsetPool removes a pool's live cap: the deployment's (Pools) applies again, or, without one, the
// pool caps nothing and its members run on their own limits.
// Like SetPool, it wakes the pool's parked jobs with w when the pool has more room.
func (e ConfigEditor) UnsetPool(ctx context.Context, name string, w Waker) (PoolResult, error) {
	if err := ValidatePoolArg(name, nil); err != nil {
		return PoolResult{}, err
	}
	ovs, err := e.Store.ListOverrides(ctx)
	if err != nil {
		return PoolResult{}, fmt.Errorf("read the live config: %w", err)
	}
	before, err := e.view(ctx, ovs)
	if err != nil {
		return PoolResult{}, err
	}
	if live, _ := livePoolCaps(ovs); !hasKey(live, name) {
		res, err := e.poolResult(ctx, name, before, []string{fmt.Sprintf("pool %s had no live cap: nothing changed", name)})
		res.Unchanged = true
		return res, err
	}
	if err := e.Store.DeletePool(ctx, name); err != nil {
		return PoolResult{}, fmt.Errorf("unset the live cap of pool %s: %w", name, err)
	}
	var warnings []string
	if n, ok := e.Defaults.Pools[name]; ok {
		warnings = append(warnings, fmt.Sprintf("pool %s has no live cap any more: its Pools entry, %d, applies again", name, n))
	}
	res, err := e.poolResult(ctx, name, before, warnings)
	res.AppliesWithinSeconds = ptrTo(e.CacheAge.Seconds())
	if err != nil {
		return res, err
	}
	return res, e.wakePool(ctx, w, &res, withoutPool(ovs, name))
}

// wakePool wakes, after a change that left pool res.After.Name more room (a raised cap, or no cap
// any more), its parked jobs at once with w, judging them by ovs, the overrides as written: fairly
// for the pool's free slots (releaser.Service.WakePool), or, without a cap, each former member's
// parked groups for its free lanes (WakeResumed). A failure is returned with the result: the
// releaser's sweep wakes them within a minute.
func (e ConfigEditor) wakePool(ctx context.Context, w Waker, res *PoolResult, ovs []config.Override) error {
	before, after := res.Before, res.After
	if w.Queue == nil || w.Pools == nil || before.Cap == 0 || (after.Cap != 0 && after.Cap <= before.Cap) {
		return nil
	}
	svc, err := w.service(e, ovs)
	if err != nil {
		return err
	}
	if after.Cap > 0 {
		res.Woken, err = svc.WakePool(ctx, after.Name)
	} else {
		for _, typ := range before.Members {
			n, werr := svc.WakeResumed(ctx, typ)
			res.Woken += n
			err = errors.Join(err, werr)
		}
	}
	if err != nil {
		res.WakeError = err.Error()
		return fmt.Errorf("pool %s has more room, but waking its waiting jobs stopped after %d: %w; the releaser's sweep wakes the others within a minute", after.Name, res.Woken, err)
	}
	return nil
}

// withoutPool is ovs without pool name's live cap.
func withoutPool(ovs []config.Override, name string) []config.Override {
	return slices.DeleteFunc(slices.Clone(ovs), func(o config.Override) bool { return o.Pool == name })
}

func (e ConfigEditor) poolResult(ctx context.Context, name string, before ConfigView, warnings []string) (PoolResult, error) {
	ovs, err := e.Store.ListOverrides(ctx)
	if err != nil {
		return PoolResult{}, fmt.Errorf("read the live config back: %w", err)
	}
	after, err := e.view(ctx, ovs)
	if err != nil {
		return PoolResult{}, err
	}
	res := PoolResult{Before: before.findPool(name), After: after.findPool(name), Config: after, Warnings: warnings}
	if a := res.After; a.Source == PoolCapNone && len(a.Members) > 0 {
		res.Warnings = append(res.Warnings, fmt.Sprintf("pool %s has no cap: it caps nothing, and its members (%s) run on their own limits", name, strings.Join(a.Members, ", ")))
	}
	if a := res.After; a.Source != PoolCapNone && len(a.Members) == 0 {
		res.Warnings = append(res.Warnings, fmt.Sprintf("no type is in pool %s: it caps nothing until one joins it (sfnlimit config set TYPE --pools %s)", name, name))
	}
	return res, nil
}

// WriteTable prints the result of a change of a pool's live cap.
func (r PoolResult) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "pool %s: cap %s (%s) -> %s (%s)\n", r.After.Name, limitText(r.Before.Cap), r.Before.Source, limitText(r.After.Cap), r.After.Source)
	if s := r.AppliesWithinSeconds; s != nil {
		fmt.Fprintf(w, "the change applies %s\n", appliesText(time.Duration(*s*float64(time.Second))))
	}
	if r.Woken > 0 {
		fmt.Fprintf(w, "woke %d waiting groups at once for the room it made\n", r.Woken)
	}
	for _, x := range r.Warnings {
		fmt.Fprintln(w, "note:", x)
	}
	fmt.Fprintln(w)
	return r.Config.WriteTable(w)
}

func hasKey[K comparable, V any](m map[K]V, k K) bool {
	_, ok := m[k]
	return ok
}

func ptrTo[T any](v T) *T { return &v }

// poolCaps are the caps in force of the view's pools, by name (none for a pool without one).
func (v ConfigView) poolCaps() map[string]int { return v.caps }
