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
	"time"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lane"
)

// Where a type's key limit comes from.
const (
	KeyLimitFromOverride = "override"      // the type's live item
	KeyLimitFromType     = "TypeKeyLimits" // the type's entry in the TypeKeyLimits parameter
	KeyLimitNone         = "none"          // no key of the type is capped by a key limit
)

// StrategyFromKeyCaps is the strategy source of a type configured random that runs first-free
// because it caps its keys: a key's cap is counted by the one binder of the key's waiting group,
// and only first-free jobs wait in one (config.Resolver forces it).
const StrategyFromKeyCaps = "key caps"

// keysListed is how many keys with their own cap config get and set list per type (--json lists
// all of them).
const keysListed = 10

// setKeys fills in a type's key caps from the deployment's TypeKeyLimits and its live override ov
// (nil: none), as config.Resolver merges them, its key rates (the override's only), and the
// strategy the caps or rates force: configured is the strategy the type is configured with, which a
// type with key caps or key rates runs as first-free.
func (tv *TypeView) setKeys(d config.Defaults, ov *config.Override, configured string) {
	tv.KeyLimit, tv.KeyLimitSource = 0, KeyLimitNone
	tv.KeyRate, tv.KeyRates = nil, nil
	if n := d.KeyLimits[tv.Type]; n > 0 {
		tv.KeyLimit, tv.KeyLimitSource = n, KeyLimitFromType
	}
	if ov != nil {
		if ov.KeyLimit > 0 {
			tv.KeyLimit, tv.KeyLimitSource = ov.KeyLimit, KeyLimitFromOverride
		}
		if len(ov.KeyLimits) > 0 {
			tv.KeyLimits = maps.Clone(ov.KeyLimits)
		}
		tv.KeyRate, tv.KeyRates = rateView(ov.KeyRate), keyRatesView(ov.KeyRates)
	}
	if s, err := lane.ParseStrategy(configured); err == nil && s != lane.FirstFree {
		switch {
		case tv.capsKeys():
			tv.Strategy, tv.StrategySource = lane.FirstFree, StrategyFromKeyCaps
		case tv.ratesKeys():
			tv.Strategy, tv.StrategySource = lane.FirstFree, StrategyFromKeyRates
		}
	}
}

// capsKeys reports whether the type caps any key (config.TypeConfig.CapsKeys).
func (tv TypeView) capsKeys() bool { return tv.KeyLimit > 0 || len(tv.KeyLimits) > 0 }

// keyLimitText is the KEY LIMIT column: the cap of every key and where it comes from (its header
// for a KeyLimit of -1).
func (tv TypeView) keyLimitText() string {
	switch tv.KeyLimit {
	case -1:
		return "KEY LIMIT"
	case 0:
		return "-"
	}
	return fmt.Sprintf("%d (%s)", tv.KeyLimit, tv.KeyLimitSource)
}

// capsKeys reports whether some type caps its keys, or the deployment gives a type a key limit.
func (v ConfigView) capsKeys() bool {
	if len(v.KeyLimits) > 0 {
		return true
	}
	for _, t := range v.Types {
		if t.capsKeys() {
			return true
		}
	}
	return false
}

// validateKeys checks the key fields of a change with the functions' rules (job.ValidateKey, caps
// from 1), before anything is read. Whether a cap fits under the type's limit is checked by Set,
// which knows the limit.
func (c Change) validateKeys() error {
	if c.KeyLimit != nil && (*c.KeyLimit < 0 || *c.KeyLimit >= config.MaxInFlight) {
		return usagef("--key-limit %d must be from 1 to the type's limit (0 removes the live key limit)", *c.KeyLimit)
	}
	if c.Key == nil {
		if c.KeyCap != nil {
			return usagef("a key's own cap needs --key")
		}
		if c.KeyOwnRate != nil || c.KeyOwnBurst != nil {
			return usagef("a key's own rate needs --key")
		}
		return nil
	}
	if *c.Key == "" {
		return usagef("--key needs a key: jobs without one share the default key, which --key-limit caps")
	}
	if err := job.ValidateKey(*c.Key); err != nil {
		return UsageError{fmt.Errorf("--key: %w", err)}
	}
	if c.KeyCap == nil && c.KeyOwnRate == nil && c.KeyOwnBurst == nil {
		return usagef("--key %s needs --limit N, the key's own cap (--limit 0 removes it), or --rate R[:B], its own start rate (--rate 0 removes it)", *c.Key)
	}
	if c.KeyCap == nil {
		return nil
	}
	if *c.KeyCap < 0 || *c.KeyCap >= config.MaxInFlight {
		return usagef("--key %s --limit %d must be from 1 to the type's limit (0 removes the key's own cap)", *c.Key, *c.KeyCap)
	}
	return nil
}

// applyKeys writes the key fields of a change into the type's override o. The stored map is never
// changed in place: a refused change leaves it as read.
func (c Change) applyKeys(o *config.Override) (warnings []string, err error) {
	if c.KeyLimit != nil {
		o.KeyLimit = *c.KeyLimit
	}
	if c.Key == nil || c.KeyCap == nil {
		return nil, nil
	}
	key, n := *c.Key, *c.KeyCap
	m := maps.Clone(o.KeyLimits)
	if n == 0 {
		if _, ok := m[key]; !ok {
			warnings = append(warnings, fmt.Sprintf("key %s of type %s had no cap of its own: nothing removed", key, c.Type))
		}
		delete(m, key)
	} else {
		if m == nil {
			m = map[string]int{}
		}
		if _, ok := m[key]; !ok && len(m) >= config.MaxKeyOverrides {
			return nil, usagef("type %s: %d keys have their own cap already, the most its config item holds; remove one first (config set %s --key K --limit 0), or let keys share --key-limit (nothing written)",
				c.Type, len(m), c.Type)
		}
		m[key] = n
	}
	if len(m) == 0 {
		m = nil
	}
	o.KeyLimits = m
	return warnings, nil
}

// checkKeyCaps refuses a key cap the change sets above the type's limit, as it would be once the
// overrides next are in force: a key's cap is a share of the type's total, never a way to raise it
// (config.TypeConfig.KeyCap would hold it to the limit anyway; refusing says so before it misleads).
func (e ConfigEditor) checkKeyCaps(ctx context.Context, c Change, next []config.Override) error {
	if (c.KeyLimit == nil || *c.KeyLimit == 0) && (c.KeyCap == nil || *c.KeyCap == 0) {
		return nil // only removals: nothing to check
	}
	r, err := config.NewResolver(e.Defaults, staticStore(next), time.Second)
	if err != nil {
		return err
	}
	cfg, err := r.Get(ctx, c.Type)
	if errors.Is(err, config.ErrUnknownType) {
		return usagef("type %s has no limit: a key's cap is a share of the type's total, so give the type one first (config set %s --limit N); nothing written", c.Type, c.Type)
	}
	if err != nil {
		return err
	}
	if c.KeyLimit != nil && *c.KeyLimit > cfg.Limit {
		return usagef("--key-limit %d: a key's cap cannot raise the type's total of %d (the limit of type %s); nothing written", *c.KeyLimit, cfg.Limit, c.Type)
	}
	if c.KeyCap != nil && *c.KeyCap > cfg.Limit {
		return usagef("--key %s --limit %d: a key's cap cannot raise the type's total of %d (the limit of type %s); nothing written", *c.Key, *c.KeyCap, cfg.Limit, c.Type)
	}
	return nil
}

// keyWarnings says what a change did to a type's keys that the table does not show at a glance.
func keyWarnings(before, after TypeView) []string {
	var out []string
	typ := after.Type
	if after.StrategySource == StrategyFromKeyCaps {
		out = append(out, fmt.Sprintf("type %s is configured random but runs first-free while it caps keys: a key's cap is counted where its jobs wait for a free lane, which only first-free has (its new jobs wait there; jobs already in lanes stay)", typ))
	}
	if before.StrategySource == StrategyFromKeyCaps && !after.capsKeys() {
		if after.StrategySource == StrategyFromKeyRates {
			out = append(out, fmt.Sprintf("type %s caps no key any more: it still runs first-free, as it rates keys", typ))
		} else {
			out = append(out, fmt.Sprintf("type %s caps no key any more: it runs %s again, as configured", typ, after.Strategy))
		}
	}
	if before.KeyLimitSource == KeyLimitFromOverride && after.KeyLimitSource == KeyLimitFromType {
		out = append(out, fmt.Sprintf("type %s has no live key limit any more: its TypeKeyLimits entry, %d, applies again (redeploy without it for no cap)", typ, after.KeyLimit))
	}
	if after.Limit > 0 {
		var above []string
		if after.KeyLimit > after.Limit {
			above = append(above, fmt.Sprintf("key limit %d", after.KeyLimit))
		}
		for _, k := range slices.Sorted(maps.Keys(after.KeyLimits)) {
			if n := after.KeyLimits[k]; n > after.Limit {
				above = append(above, fmt.Sprintf("%s=%d", k, n))
			}
		}
		if len(above) > 0 {
			out = append(out, fmt.Sprintf("key caps above the limit of type %s run as %d (a key's cap cannot raise the type's total): %s", typ, after.Limit, strings.Join(above, ", ")))
		}
	}
	return out
}

// keyCapsText lists keys with their own cap, by name: all of them when there are at most n, else
// how many and the first n.
func keyCapsText(m map[string]int, n int) string {
	if len(m) == 0 {
		return "none"
	}
	keys := slices.Sorted(maps.Keys(m))
	parts := make([]string, 0, min(len(keys), n))
	for _, k := range keys[:min(len(keys), n)] {
		parts = append(parts, k+"="+strconv.Itoa(m[k]))
	}
	if len(keys) <= n {
		return strings.Join(parts, ", ")
	}
	return fmt.Sprintf("%d keys, the first %d by name: %s (--json lists all)", len(keys), n, strings.Join(parts, ", "))
}

// writeKeys prints, below the table, the keys with their own caps and which types run first-free
// for their key caps.
func (v ConfigView) writeKeys(w io.Writer) {
	var forced, forcedByRates []string
	for _, t := range v.Types {
		if len(t.KeyLimits) > 0 {
			fmt.Fprintf(w, "Keys of %s with their own cap: %s.\n", t.Type, keyCapsText(t.KeyLimits, keysListed))
		}
		if len(t.KeyRates) > 0 {
			fmt.Fprintf(w, "Keys of %s with their own rate (per second:burst): %s.\n", t.Type, keyRatesText(t.KeyRates, keysListed))
		}
		switch t.StrategySource {
		case StrategyFromKeyCaps:
			forced = append(forced, t.Type)
		case StrategyFromKeyRates:
			forcedByRates = append(forcedByRates, t.Type)
		}
	}
	if len(forced) > 0 {
		fmt.Fprintf(w, "(key caps): configured random, run first-free: a key's cap is counted where its jobs wait for a free lane (%s).\n", strings.Join(forced, ", "))
	}
	if len(forcedByRates) > 0 {
		fmt.Fprintf(w, "(key rates): configured random, run first-free: a key waiting for its start token waits in its key's waiting group, holding no lane (%s).\n", strings.Join(forcedByRates, ", "))
	}
}

// plural writes a count and the noun that goes with it.
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
