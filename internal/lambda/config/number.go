package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Number is a whole-number variable of a function's environment that a Number parameter of the
// template sets, with the parameter's MinValue and MaxValue.
type Number struct {
	Env      string
	Min, Max int
}

// Numbers are the environment's whole-number variables with the bounds of the template parameters
// that set them (internal/lambda/config's template agreement test holds the two equal).
var Numbers = map[string]Number{
	"BACKLOG_HOLD_SECONDS":    {"BACKLOG_HOLD_SECONDS", 1, 900},
	"BATCH_RETENTION_DAYS":    {"BATCH_RETENTION_DAYS", 1, 3650},
	"CONFIG_CACHE_SECONDS":    {"CONFIG_CACHE_SECONDS", 0, 30},
	"DEFAULT_LIMIT":           {"DEFAULT_LIMIT", 0, MaxInFlight - 1},
	"DEFAULT_MAX_ATTEMPTS":    {"DEFAULT_MAX_ATTEMPTS", 1, 100},
	"FIFO_VISIBILITY_TIMEOUT": {"FIFO_VISIBILITY_TIMEOUT", 30, 43200},
	"MAX_LANES_BACKLOG":       {"MAX_LANES_BACKLOG", 0, 100000},
	"PRIORITY_AGING_SECONDS":  {"PRIORITY_AGING_SECONDS", 1, 86400},
	"START_RETRY_SECONDS":     {"START_RETRY_SECONDS", 0, 900},
	"SWEEP_MAX_DESCRIBES":     {"SWEEP_MAX_DESCRIBES", 1, 10000},
	"SWEEP_MIN_AGE_SECONDS":   {"SWEEP_MIN_AGE_SECONDS", 0, 86400},
	"UNLISTED_TYPES_LIMIT":    {"UNLISTED_TYPES_LIMIT", 0, MaxUnlistedTypes},
}

// Parse reads a whole number as CloudFormation hands a Number parameter over: as the text
// written, so "3", "3.0" and "3.00" are all 3 (CloudFormation accepts a Number "as an integer or
// float" and passes the string on). A fraction ("3.5") or a value outside Min..Max is refused.
func (n Number) Parse(v string) (int, error) {
	f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, fmt.Errorf("%s=%q is not a number", n.Env, v)
	}
	if f != math.Trunc(f) {
		return 0, fmt.Errorf("%s=%q must be a whole number", n.Env, v)
	}
	if f < float64(n.Min) || f > float64(n.Max) {
		return 0, fmt.Errorf("%s=%q must be from %d to %d", n.Env, v, n.Min, n.Max)
	}
	return int(f), nil
}

// NumberEnv reads the whole-number variable name (one of Numbers) from getenv: def when unset.
func NumberEnv(getenv func(string) string, name string, def int) (int, error) {
	n, ok := Numbers[name]
	if !ok {
		return 0, fmt.Errorf("%s is not a number variable of the template", name)
	}
	v := strings.TrimSpace(getenv(name))
	if v == "" {
		return def, nil
	}
	return n.Parse(v)
}
