package config

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
)

// MaxTypeAttempts is the most attempts TYPE_MAX_ATTEMPTS may give a type (three digits, as the
// template's TypeMaxAttempts pattern allows).
const MaxTypeAttempts = 999

// ParseLimits reads "payments=50,reports=5": type=n pairs separated by commas, nothing else (no
// spaces, no empty parts, n a whole number from 1 without leading zeros); "" is none. It is the
// grammar of the template's TypeLimits and TypeMaxAttempts AllowedPatterns, so that a value
// CloudFormation accepts is one the functions accept at cold start (template_agreement_test.go).
func ParseLimits(s string) (map[string]int, error) {
	return parsePairs(s, "number", func(typ, v string) (int, error) {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || v[0] == '0' || v[0] == '+' {
			return 0, fmt.Errorf("type %s: %q must be a whole number of at least 1 (no sign, no leading zero)", typ, v)
		}
		return n, nil
	})
}

// parsePairs reads "type=value" pairs separated by commas, nothing else ("" is none), each type at
// most once, each value read by parse; what names a value in errors.
func parsePairs[V any](s, what string, parse func(typ, v string) (V, error)) (map[string]V, error) {
	out := map[string]V{}
	if s == "" {
		return out, nil
	}
	for _, part := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(part, "=")
		if !ok {
			return nil, fmt.Errorf("%q is not type=%s (pairs separated by commas, no spaces)", part, what)
		}
		if err := job.ValidateType(k); err != nil {
			return nil, err
		}
		val, err := parse(k, v)
		if err != nil {
			return nil, err
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("type %s is listed twice", k)
		}
		out[k] = val
	}
	return out, nil
}

// ParseMaxAttempts reads TYPE_MAX_ATTEMPTS as ParseLimits does, each at most MaxTypeAttempts.
func ParseMaxAttempts(s string) (map[string]int, error) {
	out, err := ParseLimits(s)
	if err != nil {
		return nil, err
	}
	for k, n := range out {
		if n > MaxTypeAttempts {
			return nil, fmt.Errorf("type %s: %d attempts is more than %d", k, n, MaxTypeAttempts)
		}
	}
	return out, nil
}
