package config

import (
	"fmt"
	"sort"
	"strings"

	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
)

// Release modes: how a type's lane is released when its execution ends.
const (
	// ReleaseStep: the workflow's own last step calls the releaser (the sample's Release state),
	// and status events and the sweep release what it misses. The lowest handover latency.
	ReleaseStep = "step"
	// ReleaseEvents: the execution's "Step Functions Execution Status Change" event releases the
	// lane, so any Standard workflow runs unchanged; the sweep releases what the events miss.
	ReleaseEvents = "events"
)

// ReleaseModes are the release modes, the default first.
var ReleaseModes = []string{ReleaseStep, ReleaseEvents}

// ParseReleaseMode returns the release mode named s ("" is ReleaseStep).
func ParseReleaseMode(s string) (string, error) {
	switch s {
	case "", ReleaseStep:
		return ReleaseStep, nil
	case ReleaseEvents:
		return ReleaseEvents, nil
	}
	return "", fmt.Errorf("unknown release mode %q (known: %s)", s, strings.Join(ReleaseModes, ", "))
}

// ParseReleaseModes reads "llm=events,payments=step": type=mode pairs separated by commas, nothing
// else; "" is none. It is the grammar of the template's TypeReleaseModes AllowedPattern.
func ParseReleaseModes(s string) (map[string]string, error) {
	out := map[string]string{}
	if s == "" {
		return out, nil
	}
	for _, part := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(part, "=")
		if !ok {
			return nil, fmt.Errorf("%q is not type=mode (pairs separated by commas, no spaces)", part)
		}
		if err := job.ValidateType(k); err != nil {
			return nil, err
		}
		if v == "" {
			return nil, fmt.Errorf("type %s: no release mode (known: %s)", k, strings.Join(ReleaseModes, ", "))
		}
		m, err := ParseReleaseMode(v)
		if err != nil {
			return nil, fmt.Errorf("type %s: %w", k, err)
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("type %s is listed twice", k)
		}
		out[k] = m
	}
	return out, nil
}

// FormatReleaseModes renders modes as ParseReleaseModes reads them, sorted by type.
func FormatReleaseModes(modes map[string]string) string {
	parts := make([]string, 0, len(modes))
	for t, m := range modes {
		parts = append(parts, t+"="+m)
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}
