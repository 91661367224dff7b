package config

import (
	"fmt"
	"sort"
	"strings"

	"github.com/sfnlimit/sfnlimit/internal/lambda/lane"
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
	// OverflowSkip: the job ends at once, "skipped", when its key is at its cap with a job of the
	// same sender submitted before it (running, or holding a lane to start). It never runs, and is
	// not dead-lettered.
	OverflowSkip = "skip"
)

// OverflowRules are the overflow rules, the default first.
var OverflowRules = []string{OverflowQueue, OverflowCancel, OverflowSkip}

// ParseOverflow returns the overflow rule named s ("" is OverflowQueue).
func ParseOverflow(s string) (string, error) {
	switch s {
	case "", OverflowQueue:
		return OverflowQueue, nil
	case OverflowCancel, OverflowSkip:
		return s, nil
	}
	return "", fmt.Errorf("unknown overflow rule %q (known: %s)", s, strings.Join(OverflowRules, ", "))
}

// Cancels reports whether a job at its key's cap stops an older running job of its key: the type's
// rule is cancel and has what it needs (CheckOverflow). A rule that lacks it does not act: the type
// queues.
func (c TypeConfig) Cancels() bool { return c.Overflow == OverflowCancel && c.CheckOverflow() == nil }

// Skips reports whether a job at its key's cap ends skipped when an older job of its key and sender
// holds a lane: the type's rule is skip and has what it needs (CheckOverflow).
func (c TypeConfig) Skips() bool { return c.Overflow == OverflowSkip && c.CheckOverflow() == nil }

// CheckOverflow checks that the type's overflow rule has what it needs in the type's effective
// configuration. It is the one check of it: the CLI refuses a change that fails it, and shows a
// type that fails it; the functions do not act on such a rule (Cancels).
//
// cancel and skip act when a key is at its cap, so they need a key cap (a key limit, or keys with their own
// cap), and the first-free strategy, where the one binder of a key's waiting group counts its
// running jobs (a type with key caps runs first-free: Resolver forces it).
func (c TypeConfig) CheckOverflow() error {
	if c.Overflow != OverflowCancel && c.Overflow != OverflowSkip {
		return nil
	}
	if !c.CapsKeys() {
		return fmt.Errorf("type %s: overflow rule %s needs a key cap (config set %s --key-limit N): it acts when a key is at its cap", c.Type, c.Overflow, c.Type)
	}
	if c.Strategy != lane.FirstFree {
		return fmt.Errorf("type %s: overflow rule %s needs the first-free strategy (config set %s --strategy first-free): a key's cap is counted where its jobs wait for a free lane", c.Type, c.Overflow, c.Type)
	}
	return nil
}

// ParseOverflows reads "reindex=cancel,sync=skip": type=rule pairs separated by commas, nothing
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
