package ops

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
)

// Where a type's overflow rule comes from.
const (
	OverflowFromOverride = "override"     // the type's live item
	OverflowFromType     = "TypeOverflow" // the type's entry in the TypeOverflow parameter
	OverflowDefault      = "default"      // neither: the type queues
)

// setOverflow fills in a type's overflow rule from the deployment's TypeOverflow and its live
// override ov (nil: none), as config.Resolver merges them, and, for a rule that lacks what it needs
// in the type's effective configuration (config.TypeConfig.CheckOverflow), why: the functions then
// do not act on it. It runs after setKeys and setPools, which say how the type caps keys and which
// strategy it runs.
func (tv *TypeView) setOverflow(d config.Defaults, ov *config.Override) {
	tv.Overflow, tv.OverflowSource, tv.OverflowProblem = config.OverflowQueue, OverflowDefault, ""
	if r, ok := d.Overflows[tv.Type]; ok {
		tv.Overflow, tv.OverflowSource = r, OverflowFromType
	}
	if ov != nil && ov.Overflow != "" {
		tv.Overflow, tv.OverflowSource = ov.Overflow, OverflowFromOverride
	}
	if err := tv.effective().CheckOverflow(); err != nil {
		tv.OverflowProblem = err.Error()
	}
}

// effective is the part of the type's effective configuration its overflow rule depends on.
func (tv TypeView) effective() config.TypeConfig {
	return config.TypeConfig{Type: tv.Type, Overflow: tv.Overflow, KeyLimit: tv.KeyLimit, KeyLimits: tv.KeyLimits, Strategy: tv.Strategy}
}

// overflowText is the OVERFLOW column: the rule and where it comes from, marked when it cannot act.
func (tv TypeView) overflowText() string {
	s := fmt.Sprintf("%s (%s)", tv.Overflow, tv.OverflowSource)
	if tv.OverflowProblem != "" {
		s += "!"
	}
	return s
}

// showsOverflow reports whether some type has a rule other than queue, or the deployment gives one:
// the OVERFLOW column is shown then only, so that a deployment without rules keeps its table.
func (v ConfigView) showsOverflow() bool {
	if len(v.Overflows) > 0 {
		return true
	}
	for _, t := range v.Types {
		if t.Overflow != config.OverflowQueue || t.OverflowSource == OverflowFromOverride {
			return true
		}
	}
	return false
}

// writeOverflow prints, below the table, the deployment's rules and each rule that cannot act.
func (v ConfigView) writeOverflow(w io.Writer) {
	if len(v.Overflows) > 0 {
		fmt.Fprintf(w, "Overflow rules without an override: %s (TypeOverflow); other types queue.\n", config.FormatOverflows(v.Overflows))
	}
	for _, t := range v.Types {
		if t.OverflowProblem != "" {
			fmt.Fprintf(w, "WARNING (!): %s; until then the type queues.\n", t.OverflowProblem)
		}
	}
}

// parseOverflowFlag checks an --overflow value: a rule (config.OverflowRules), or "" to remove the
// live rule (the type's TypeOverflow entry, or queue, applies again).
func parseOverflowFlag(name string) (string, error) {
	if name == "" {
		return "", nil
	}
	r, err := config.ParseOverflow(name)
	if err != nil {
		return "", usagef("--overflow: %v", err)
	}
	return r, nil
}

// checkOverflow refuses a change after which the type's overflow rule lacks what it needs
// (config.TypeConfig.CheckOverflow, on the effective configuration the overrides next give): a
// change that sets the rule, or one that takes away what a rule in force needs (its key cap). A
// change to a type whose rule already lacked it, and that does not touch the rule, is let through:
// the table says so.
func (e ConfigEditor) checkOverflow(ctx context.Context, c Change, before TypeView, next []config.Override) error {
	r, err := config.NewResolver(e.Defaults, staticStore(next), time.Second)
	if err != nil {
		return err
	}
	cfg, err := r.Get(ctx, c.Type)
	if err != nil {
		return nil // no limit: the type runs nothing, and Set says so
	}
	err = cfg.CheckOverflow()
	if err == nil || (c.Overflow == nil && before.OverflowProblem != "") {
		return nil
	}
	return usagef("%v; nothing written", err)
}

// overflowWarnings says what a change did to a type's overflow rule that the table does not show at
// a glance.
func overflowWarnings(before, after TypeView) []string {
	var out []string
	if after.Overflow != before.Overflow && after.OverflowProblem == "" {
		switch after.Overflow {
		case config.OverflowCancel:
			out = append(out, fmt.Sprintf("type %s: a job whose key is at its cap now stops the oldest running job of its key from the same sender (StopExecution), which ends cancelled", after.Type))
		case config.OverflowSkip:
			out = append(out, fmt.Sprintf("type %s: a job whose key is at its cap with an older job of the same sender holding a lane now ends skipped: it never runs, and is not dead-lettered", after.Type))
		}
	}
	if before.OverflowSource == OverflowFromOverride && after.OverflowSource == OverflowFromType {
		out = append(out, fmt.Sprintf("type %s has no live overflow rule any more: its TypeOverflow entry, %s, applies again", after.Type, after.Overflow))
	}
	return out
}

// overflowsByRule groups the types shown whose rule is not queue, by rule, for status.
func overflowsByRule(types []TypeStatus) map[string][]string {
	out := map[string][]string{}
	for _, t := range types {
		if t.Overflow != "" {
			out[t.Overflow] = append(out[t.Overflow], t.Type)
		}
	}
	for _, ts := range out {
		sort.Strings(ts)
	}
	return out
}

// writeOverflowStatus prints, below status's table, the types with an overflow rule other than queue.
func writeOverflowStatus(w io.Writer, types []TypeStatus) {
	by := overflowsByRule(types)
	if ts := by[config.OverflowCancel]; len(ts) > 0 {
		fmt.Fprintf(w, "Overflow rule cancel: %s (a job whose key is at its cap stops its key's oldest running job of the same sender; see sfnlimit config get).\n", strings.Join(ts, ", "))
	}
	if ts := by[config.OverflowSkip]; len(ts) > 0 {
		fmt.Fprintf(w, "Overflow rule skip: %s (a job whose key is at its cap with an older job of the same sender holding a lane ends skipped, without running; see sfnlimit config get).\n", strings.Join(ts, ", "))
	}
}
