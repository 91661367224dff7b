package config

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lane"
)

// MaxKeyOverrides bounds the per-key caps one type may list: they live in the type's config item,
// which DynamoDB keeps under 400 KB (a key and its number take at most about 80 bytes).
const MaxKeyOverrides = 2000

// KeyCap is how many jobs of concurrency key may run at once: the key's own cap if it has one,
// else the type's keyLimit, never more than the type's limit (a key's cap cannot raise the
// type's total). A type with no key caps gives every key its whole limit.
func (c TypeConfig) KeyCap(key string) int {
	if n, ok := c.KeyLimits[key]; ok && n > 0 {
		return min(n, c.Limit)
	}
	if c.KeyLimit > 0 {
		return min(c.KeyLimit, c.Limit)
	}
	return c.Limit
}

// HasKeyCap reports whether key has a cap of its own or the type's key limit: otherwise its cap
// (KeyCap) is the type's limit, and a full type is not a key at its cap.
func (c TypeConfig) HasKeyCap(key string) bool { return c.KeyLimit > 0 || c.KeyLimits[key] > 0 }

// KeyRateOf is the start rate of a key's jobs: the key's own, else the type's rate for every key
// (not IsSet: none).
func (c TypeConfig) KeyRateOf(key string) Rate {
	if r, ok := c.KeyRates[key]; ok {
		return r
	}
	return c.KeyRate
}

// RatesKeys reports whether any key of the type has a start rate.
func (c TypeConfig) RatesKeys() bool { return c.KeyRate.IsSet() || len(c.KeyRates) > 0 }

// SeparatesKeys reports whether each key's jobs must wait in a group of their own, where one binder
// counts the key's cap and takes its start tokens: the type caps or rates keys.
func (c TypeConfig) SeparatesKeys() bool { return c.CapsKeys() || c.RatesKeys() }

// validateKeyRates checks a type's key rates: each a valid rate, keys as the job contract has
// them, at most MaxKeyOverrides keys with their own.
func validateKeyRates(typ string, keyRate Rate, keyRates map[string]Rate) error {
	if err := keyRate.Validate(); err != nil {
		return fmt.Errorf("type %s: key rate: %w", typ, err)
	}
	if len(keyRates) > MaxKeyOverrides {
		return fmt.Errorf("type %s: %d keys have their own rate, more than the %d a type's config item holds", typ, len(keyRates), MaxKeyOverrides)
	}
	for k, r := range keyRates {
		if k == "" {
			return fmt.Errorf("type %s: a key's own rate needs a key (the default key follows the key rate)", typ)
		}
		if err := job.ValidateKey(k); err != nil {
			return fmt.Errorf("type %s: %w", typ, err)
		}
		if !r.IsSet() {
			return fmt.Errorf("type %s: key %s: a key's own rate must be more than 0", typ, k)
		}
		if err := r.Validate(); err != nil {
			return fmt.Errorf("type %s: key %s: %w", typ, k, err)
		}
	}
	return nil
}

// FormatKeyRates writes per-key rates as "k1=5:10,k2=0.5:1", keys sorted ("" for none).
func FormatKeyRates(m map[string]Rate) string {
	keys := slices.Sorted(maps.Keys(m))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + m[k].String()
	}
	return strings.Join(parts, ",")
}

// CapsKeys reports whether any key of the type has a cap below the type's limit.
func (c TypeConfig) CapsKeys() bool { return c.KeyLimit > 0 || len(c.KeyLimits) > 0 }

// WaitingGroup is the MessageGroupId a first-free job of this type waits in: its key's group
// ("{type}#{key}") for a job with a key; for the default key, the type's first waiting group when
// the type has a keyLimit (so one binder at a time counts the default key's jobs, as for any key),
// else one of the type's ceil(limit/10) waiting groups, by a hash of the job. A job that is not
// normal priority waits in that group's twin for its priority ("{group}!{p}"), so a release can
// serve the higher first; in a type that caps keys, a key's jobs keep to one group whatever their
// priorities, as only one binder at a time may count the key's running jobs (its group's priority
// is then its head's).
func (c TypeConfig) WaitingGroup(j job.Job) string {
	var g string
	switch {
	case j.Key != "":
		g = job.KeyGroupID(j.Type, j.Key)
	case c.KeyLimit > 0:
		g = job.WaitingGroupID(j.Type, 0)
	default:
		g = job.WaitingGroupID(j.Type, lane.WaitingGroup(j, c.Limit))
	}
	if c.CapsKeys() {
		return g
	}
	return job.PriorityGroupID(g, j.Priority)
}

// validateKeyLimits checks a type's key caps: keys as the job contract has them, caps from 1.
func validateKeyLimits(typ string, keyLimit int, keyLimits map[string]int) error {
	if keyLimit < 0 {
		return fmt.Errorf("type %s: key limit %d must not be negative", typ, keyLimit)
	}
	if keyLimit > MaxInFlight {
		return fmt.Errorf("type %s: key limit %d is more than the FIFO in-flight quota %d", typ, keyLimit, MaxInFlight)
	}
	if len(keyLimits) > MaxKeyOverrides {
		return fmt.Errorf("type %s: %d keys have their own limit, more than the %d a type's config item holds", typ, len(keyLimits), MaxKeyOverrides)
	}
	for k, n := range keyLimits {
		if k == "" {
			return fmt.Errorf("type %s: a key's own limit needs a key (the default key follows keyLimit)", typ)
		}
		if err := job.ValidateKey(k); err != nil {
			return fmt.Errorf("type %s: %w", typ, err)
		}
		if n < 1 || n > MaxInFlight {
			return fmt.Errorf("type %s: key %s: limit %d must be from 1 to %d", typ, k, n, MaxInFlight)
		}
	}
	return nil
}

// FormatKeyLimits writes per-key caps as "k1=5,k2=20", keys sorted ("" for none).
func FormatKeyLimits(m map[string]int) string {
	keys := slices.Sorted(maps.Keys(m))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + strconv.Itoa(m[k])
	}
	return strings.Join(parts, ",")
}
