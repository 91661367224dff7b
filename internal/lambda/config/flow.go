package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Flow control beside a type's concurrency limit: a pause, a start rate and priorities.

const (
	// MaxRate is the most starts per second a type's rate may allow: Step Functions' StartExecution
	// refills at a few hundred per second per account and Region (docs/design.md), so a rate above
	// this is no limit at all.
	MaxRate = 10000
	// MaxBurst is the largest burst a rate may allow.
	MaxBurst = 100000
	// MinRate is the fewest starts per second a rate may allow (ParseRate reads 3 decimals): one
	// about every 17 minutes.
	MinRate = 0.001
	// MaxPauseReason is the longest reason a pause may give.
	MaxPauseReason = 200
	// DefaultPriorityAging is how long a waiting group's head waits before it is ranked one
	// priority higher (PRIORITY_AGING_SECONDS): the bound on how long higher priorities can starve
	// it (docs/design.md, "Priorities").
	DefaultPriorityAging = 60 * time.Second
)

// Rate is a type's start rate: at most PerSecond starts per second, with bursts of up to Burst.
type Rate struct {
	PerSecond float64
	Burst     int
}

// IsSet reports whether the rate limits anything.
func (r Rate) IsSet() bool { return r.PerSecond > 0 }

// String reads as the TYPE_RATES grammar has it: "5:10" (5 per second, burst 10).
func (r Rate) String() string {
	if !r.IsSet() {
		return ""
	}
	return strconv.FormatFloat(r.PerSecond, 'f', -1, 64) + ":" + strconv.Itoa(r.Burst)
}

// DefaultBurst is the burst of a rate given without one: a second's worth of starts, at least one.
func DefaultBurst(perSecond float64) int { return max(1, int(math.Ceil(perSecond))) }

// Validate checks a rate: 0 (none), or more than 0 and at most MaxRate per second with a burst from
// 1 to MaxBurst.
func (r Rate) Validate() error {
	if r.PerSecond == 0 && r.Burst == 0 {
		return nil
	}
	if math.IsNaN(r.PerSecond) || r.PerSecond <= 0 || r.PerSecond > MaxRate {
		return fmt.Errorf("rate %v must be more than 0 and at most %d starts per second", r.PerSecond, MaxRate)
	}
	if r.PerSecond < MinRate {
		return fmt.Errorf("rate %v must be at least %v starts per second", r.PerSecond, MinRate)
	}
	if r.Burst < 1 || r.Burst > MaxBurst {
		return fmt.Errorf("burst %d must be from 1 to %d starts", r.Burst, MaxBurst)
	}
	return nil
}

// ParseRate reads "R" or "R:B": R starts per second (a decimal, up to 3 places), B the burst
// (default DefaultBurst(R)).
func ParseRate(s string) (Rate, error) {
	rs, bs, hasBurst := strings.Cut(s, ":")
	if !rateRe(rs) {
		return Rate{}, fmt.Errorf("rate %q must be a number of starts per second, like 5 or 0.5 (up to 3 decimals)", rs)
	}
	perSecond, err := strconv.ParseFloat(rs, 64)
	if err != nil {
		return Rate{}, fmt.Errorf("rate %q: %w", rs, err)
	}
	r := Rate{PerSecond: perSecond, Burst: DefaultBurst(perSecond)}
	if hasBurst {
		b, err := strconv.Atoi(bs)
		if err != nil || bs == "" || bs[0] == '0' || bs[0] == '+' {
			return Rate{}, fmt.Errorf("burst %q must be a whole number of at least 1 (no sign, no leading zero)", bs)
		}
		r.Burst = b
	}
	if perSecond == 0 {
		return Rate{}, fmt.Errorf("rate %q must be more than 0", rs)
	}
	return r, r.Validate()
}

// rateRe matches a plain decimal: digits, optionally a point and 1-3 digits; no sign or exponent.
func rateRe(s string) bool {
	whole, frac, hasFrac := strings.Cut(s, ".")
	if whole == "" || len(whole) > 5 || (len(whole) > 1 && whole[0] == '0') || !allDigits(whole) {
		return false
	}
	return !hasFrac || (len(frac) >= 1 && len(frac) <= 3 && allDigits(frac))
}

func allDigits(s string) bool {
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// ParseRates reads TYPE_RATES: "partner=5:10,llm=0.5", type=rate pairs separated by commas ("" is
// none), the grammar of the template's TypeRates AllowedPattern.
func ParseRates(s string) (map[string]Rate, error) {
	return parsePairs(s, "rate[:burst]", func(typ, v string) (Rate, error) {
		r, err := ParseRate(v)
		if err != nil {
			return Rate{}, fmt.Errorf("type %s: %w", typ, err)
		}
		return r, nil
	})
}

// Pause is a type's pause: no new starts while it holds; running executions finish as usual and
// waiting jobs wait.
type Pause struct {
	Reason string
	Since  time.Time
}

// validatePause checks a pause's reason: printable, at most MaxPauseReason characters.
func validatePause(typ string, p *Pause) error {
	if p == nil {
		return nil
	}
	if len([]rune(p.Reason)) > MaxPauseReason {
		return fmt.Errorf("type %s: pause reason is %d characters, more than %d", typ, len([]rune(p.Reason)), MaxPauseReason)
	}
	for _, c := range p.Reason {
		if c < ' ' || c == 0x7f {
			return fmt.Errorf("type %s: pause reason has a control character", typ)
		}
	}
	if p.Since.IsZero() {
		return fmt.Errorf("type %s: a pause needs the time it began", typ)
	}
	return nil
}

// Paused reports whether the type is paused.
func (c TypeConfig) Paused() bool { return c.Pause != nil }
