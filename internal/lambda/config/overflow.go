package config

import (
	"fmt"
	"sort"
	"strings"
)

// Overflow rules: what happens to a job whose key is at its cap (docs/flow-control.md, "Overflow
// rules"). A rule acts per key, and only on jobs of the same sender: the general queue is a boundary
// between tenants, so one producer's job never ends another's.
const (
	// OverflowQueue: the job waits its turn (the default).
	OverflowQueue = "queue"
	// OverflowCancel: the job stops the oldest running execution of its key that was submitted
	// before it (StopExecution) and takes its lane once that one is released. The stopped job ends
	// "cancelled": not retried, not dead-lettered.
	OverflowCancel = "cancel"
)

// OverflowRules are the overflow rules, the default first.
var OverflowRules = []string{OverflowQueue, OverflowCancel}

// ParseOverflow returns the overflow rule named s ("" is OverflowQueue).
func ParseOverflow(s string) (string, error) {
	switch s {
	case "", OverflowQueue:
		return OverflowQueue, nil
	case OverflowCancel:
		return OverflowCancel, nil
	}
	return "", fmt.Errorf("unknown overflow rule %q (known: %s)", s, strings.Join(OverflowRules, ", "))
}

// Cancels reports whether a job at its key's cap stops an older running job of its key.
func (c TypeConfig) Cancels() bool { return c.Overflow == OverflowCancel }

// ParseOverflows reads "reindex=cancel,sync=queue": type=rule pairs separated by commas, nothing
// else; "" is none. It is the grammar of the template's TypeOverflow parameter.
func ParseOverflows(s string) (map[string]string, error) {
	return parsePairs(s, "rule", func(typ, v string) (string, error) {
		if v == "" {
			return "", fmt.Errorf("type %s: no overflow rule (known: %s)", typ, strings.Join(OverflowRules, ", "))
		}
		r, err := ParseOverflow(v)
		if err != nil {
			return "", fmt.Errorf("type %s: %w", typ, err)
		}
		return r, nil
	})
}

// FormatOverflows renders rules as ParseOverflows reads them, sorted by type.
func FormatOverflows(rules map[string]string) string {
	parts := make([]string, 0, len(rules))
	for t, r := range rules {
		parts = append(parts, t+"="+r)
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}
