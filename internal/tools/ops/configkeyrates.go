package ops

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
)

// Start rates per key, as config get and set show and change them: every key's (config set
// --key-rate R[:B]) and keys' own (--key K --rate R[:B], or --rate R --burst B). They are live
// overrides only: no template parameter gives a type key rates.

// StrategyFromKeyRates is the strategy source of a type configured random that runs first-free
// because it rates its keys (and caps none): a key waiting for its start token waits in its key's
// waiting group, holding no lane, and only first-free jobs wait in one (config.Resolver forces it).
const StrategyFromKeyRates = "key rates"

// keyRatesView is keys' own rates as views show them (nil for none).
func keyRatesView(m map[string]config.Rate) map[string]RateView {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]RateView, len(m))
	for k, r := range m {
		out[k] = RateView{PerSecond: r.PerSecond, Burst: r.Burst}
	}
	return out
}

// ratesKeys reports whether the type rates any key (config.TypeConfig.RatesKeys).
func (tv TypeView) ratesKeys() bool { return tv.KeyRate != nil || len(tv.KeyRates) > 0 }

// keyRateText is the KEY RATE column of config get: every key's rate ("-" for none), and how many
// keys have their own.
func (tv TypeView) keyRateText() string { return keyRateColumn(tv.KeyRate, len(tv.KeyRates)) }

// keyRateColumn is a KEY RATE column: every key's rate, and how many keys have their own
// ("2/s burst 4, 3 keys own"; "-" for none).
func keyRateColumn(every *RateView, own int) string {
	var parts []string
	if every != nil {
		parts = append(parts, every.String())
	}
	if own > 0 {
		parts = append(parts, plural(own, "key own", "keys own"))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

// ratesKeys reports whether some type rates its keys.
func (v ConfigView) ratesKeys() bool { return slices.ContainsFunc(v.Types, TypeView.ratesKeys) }

// keyRatesText lists keys with their own rate, by name, as config.FormatKeyRates writes each
// ("acme=5:10"): all of them when there are at most n, else how many and the first n.
func keyRatesText(m map[string]RateView, n int) string {
	if len(m) == 0 {
		return "none"
	}
	keys := slices.Sorted(maps.Keys(m))
	parts := make([]string, 0, min(len(keys), n))
	for _, k := range keys[:min(len(keys), n)] {
		parts = append(parts, config.FormatKeyRates(map[string]config.Rate{k: {PerSecond: m[k].PerSecond, Burst: m[k].Burst}}))
	}
	if len(keys) <= n {
		return strings.Join(parts, ", ")
	}
	return fmt.Sprintf("%d keys, the first %d by name: %s (--json lists all)", len(keys), n, strings.Join(parts, ", "))
}

// validateKeyRates checks the key rate fields of a change with the functions' own rules and words
// (config.ParseRate, config.Rate.Validate), before anything is read. Keys are checked by
// validateKeys.
func (c Change) validateKeyRates() error {
	if c.KeyRate != nil && *c.KeyRate != RemoveRate {
		if _, err := config.ParseRate(*c.KeyRate); err != nil {
			return usagef("--key-rate: %v (--key-rate 0 removes every key's rate)", err)
		}
	}
	if c.KeyRate != nil && c.Burst != nil && c.Rate == nil && c.Key == nil {
		return usagef("--burst is the burst of --rate, the type's: give every key's burst as --key-rate R:B")
	}
	if c.KeyOwnRate == nil {
		if c.KeyOwnBurst != nil {
			return usagef("--key %s --burst needs --rate R with it: the key's own rate (--rate R:B, or --rate R --burst B)", keyText(c.Key))
		}
		return nil
	}
	key, rate := keyText(c.Key), *c.KeyOwnRate
	switch {
	case rate == RemoveRate && c.KeyOwnBurst != nil:
		return usagef("--key %s --rate 0 removes the key's own rate: give no --burst with it", key)
	case rate == RemoveRate:
		return nil
	case strings.Contains(rate, ":") && c.KeyOwnBurst != nil:
		return usagef("--key %s --rate %s gives a burst already: give it as --rate R:B or as --burst B, not both", key, rate)
	}
	if _, err := config.ParseRate(rate); err != nil {
		return usagef("--key %s --rate: %v (--rate 0 removes the key's own rate)", key, err)
	}
	if c.KeyOwnBurst != nil {
		// The burst alone, against a valid rate: config.Rate.Validate's own message.
		if err := (config.Rate{PerSecond: 1, Burst: *c.KeyOwnBurst}).Validate(); err != nil {
			return usagef("--key %s --burst: %v", key, err)
		}
	}
	return nil
}

func keyText(key *string) string {
	if key == nil {
		return "K"
	}
	return *key
}

// applyKeyRates writes the key rate fields of a change into the type's override o. The stored map
// is never changed in place: a refused change leaves it as read.
func (c Change) applyKeyRates(o *config.Override) (warnings []string, err error) {
	if c.KeyRate != nil {
		if *c.KeyRate == RemoveRate {
			if !o.KeyRate.IsSet() {
				warnings = append(warnings, fmt.Sprintf("type %s had no key rate: nothing removed", c.Type))
			}
			o.KeyRate = config.Rate{}
		} else {
			o.KeyRate, _ = config.ParseRate(*c.KeyRate) // checked by Validate
		}
	}
	if c.KeyOwnRate == nil || c.Key == nil {
		return warnings, nil
	}
	key := *c.Key
	m := maps.Clone(o.KeyRates)
	if *c.KeyOwnRate == RemoveRate {
		if _, ok := m[key]; !ok {
			warnings = append(warnings, fmt.Sprintf("key %s of type %s had no rate of its own: nothing removed", key, c.Type))
		}
		delete(m, key)
	} else {
		r, _ := config.ParseRate(*c.KeyOwnRate) // checked by Validate
		if c.KeyOwnBurst != nil {
			r.Burst = *c.KeyOwnBurst
		}
		if m == nil {
			m = map[string]config.Rate{}
		}
		if _, ok := m[key]; !ok && len(m) >= config.MaxKeyOverrides {
			return nil, usagef("type %s: %d keys have their own rate already, the most its config item holds; remove one first (config set %s --key K --rate 0), or let keys share --key-rate (nothing written)",
				c.Type, len(m), c.Type)
		}
		m[key] = r
	}
	if len(m) == 0 {
		m = nil
	}
	o.KeyRates = m
	return warnings, nil
}

// keyRateWarnings says what a change did to a type's key rates that the table does not show at a
// glance.
func keyRateWarnings(before, after TypeView) []string {
	var out []string
	typ := after.Type
	if after.StrategySource == StrategyFromKeyRates {
		out = append(out, fmt.Sprintf("type %s is configured random but runs first-free while it rates keys: a key waiting for its start token waits in its key's waiting group, holding no lane, which only first-free has (its new jobs wait there; jobs already in lanes stay)", typ))
	}
	if before.StrategySource == StrategyFromKeyRates && after.StrategySource != StrategyFromKeyRates && !after.capsKeys() {
		out = append(out, fmt.Sprintf("type %s rates no key any more: it runs %s again, as configured", typ, after.Strategy))
	}
	if after.Rate != nil {
		var above []string
		if after.KeyRate != nil && after.KeyRate.PerSecond > after.Rate.PerSecond {
			above = append(above, "key rate "+after.KeyRate.String())
		}
		for _, k := range slices.Sorted(maps.Keys(after.KeyRates)) {
			if r := after.KeyRates[k]; r.PerSecond > after.Rate.PerSecond {
				above = append(above, fmt.Sprintf("%s %s", k, &r))
			}
		}
		if len(above) > 0 {
			out = append(out, fmt.Sprintf("key rates above the start rate of type %s (%s) start no faster than it (a key's rate cannot raise the type's): %s", typ, after.Rate, strings.Join(above, ", ")))
		}
	}
	return out
}
