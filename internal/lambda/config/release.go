package config

import (
	"fmt"
	"sort"
	"strings"
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
	return parsePairs(s, "mode", func(typ, v string) (string, error) {
		if v == "" {
			return "", fmt.Errorf("type %s: no release mode (known: %s)", typ, strings.Join(ReleaseModes, ", "))
		}
		m, err := ParseReleaseMode(v)
		if err != nil {
			return "", fmt.Errorf("type %s: %w", typ, err)
		}
		return m, nil
	})
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
