package config

import (
	"fmt"
	"os"
	"strings"
	"time"
)

// FromEnv reads the deployment defaults and the cache age from the function's environment
// (TYPE_LIMITS, DEFAULT_LIMIT, UNLISTED_TYPES_LIMIT, DEFAULT_MAX_ATTEMPTS, TYPE_MAX_ATTEMPTS, STATE_MACHINE_ARN,
// CONFIG_CACHE_SECONDS, LANE_STRATEGY, RELEASE_MODE, TYPE_RELEASE_MODES, TYPE_OVERFLOW, TYPE_KEY_LIMITS, TYPE_RATES, POOL_CAPS, TYPE_POOLS,
// TYPE_POOL_SHARES), as the template sets them.
func FromEnv(getenv func(string) string) (Defaults, time.Duration, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	limits, err := ParseLimits(getenv("TYPE_LIMITS"))
	if err != nil {
		return Defaults{}, 0, fmt.Errorf("TYPE_LIMITS: %w", err)
	}
	attempts, err := ParseMaxAttempts(getenv("TYPE_MAX_ATTEMPTS"))
	if err != nil {
		return Defaults{}, 0, fmt.Errorf("TYPE_MAX_ATTEMPTS: %w", err)
	}
	keyLimits, err := ParseLimits(getenv("TYPE_KEY_LIMITS"))
	if err != nil {
		return Defaults{}, 0, fmt.Errorf("TYPE_KEY_LIMITS: %w", err)
	}
	rates, err := ParseRates(getenv("TYPE_RATES"))
	if err != nil {
		return Defaults{}, 0, fmt.Errorf("TYPE_RATES: %w", err)
	}
	releases, err := ParseReleaseModes(getenv("TYPE_RELEASE_MODES"))
	if err != nil {
		return Defaults{}, 0, fmt.Errorf("TYPE_RELEASE_MODES: %w", err)
	}
	overflows, err := ParseOverflows(getenv("TYPE_OVERFLOW"))
	if err != nil {
		return Defaults{}, 0, fmt.Errorf("TYPE_OVERFLOW: %w", err)
	}
	pools, err := ParsePools(getenv("POOL_CAPS"))
	if err != nil {
		return Defaults{}, 0, fmt.Errorf("POOL_CAPS: %w", err)
	}
	typePools, err := ParseTypePools(getenv("TYPE_POOLS"))
	if err != nil {
		return Defaults{}, 0, fmt.Errorf("TYPE_POOLS: %w", err)
	}
	shares, err := ParseShares(getenv("TYPE_POOL_SHARES"))
	if err != nil {
		return Defaults{}, 0, fmt.Errorf("TYPE_POOL_SHARES: %w", err)
	}
	fallback, err := NumberEnv(getenv, "DEFAULT_LIMIT", 0)
	if err != nil {
		return Defaults{}, 0, err
	}
	unlisted, err := NumberEnv(getenv, "UNLISTED_TYPES_LIMIT", 0)
	if err != nil {
		return Defaults{}, 0, err
	}
	maxAttempts, err := NumberEnv(getenv, "DEFAULT_MAX_ATTEMPTS", 3)
	if err != nil {
		return Defaults{}, 0, err
	}
	cache, err := NumberEnv(getenv, "CONFIG_CACHE_SECONDS", 30)
	if err != nil {
		return Defaults{}, 0, err
	}
	d := Defaults{
		Limits:             limits,
		FallbackLimit:      fallback,
		UnlistedTypes:      unlisted,
		MaxAttempts:        attempts,
		DefaultMaxAttempts: maxAttempts,
		StateMachineArn:    strings.TrimSpace(getenv("STATE_MACHINE_ARN")),
		Strategy:           strings.TrimSpace(getenv("LANE_STRATEGY")),
		Release:            strings.TrimSpace(getenv("RELEASE_MODE")),
		Releases:           releases,
		KeyLimits:          keyLimits,
		Rates:              rates,
		Pools:              pools,
		TypePools:          typePools,
		Shares:             shares,
		Overflows:          overflows,
	}
	if err := d.Validate(); err != nil {
		return Defaults{}, 0, err
	}
	return d, time.Duration(cache) * time.Second, nil
}
