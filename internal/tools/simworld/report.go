package simworld

import (
	"fmt"
	"strings"
)

// Report is a failing seed's short story: the violations, and the trace lines about the first
// one's job (its id) or type, at most max lines (the first and last halves when longer).
func (w *World) Report(vs []Violation, max int) string { return w.ReportOn(vs, "", max) }

// ReportOn is Report with the trace about filter (a job id, a group such as "gamma-1"); "" is the
// first violation's job.
func (w *World) ReportOn(vs []Violation, filter string, max int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %d violations\n", w.seed, len(vs))
	for i, v := range vs {
		if i == 10 {
			fmt.Fprintf(&b, "  ... %d more\n", len(vs)-i)
			break
		}
		fmt.Fprintf(&b, "  %s\n", v)
	}
	if len(vs) == 0 && filter == "" {
		return b.String()
	}
	id := filter
	if id == "" {
		id = vs[0].Subject
		if i := strings.LastIndexAny(id, "/-"); i >= 0 {
			id = id[i+1:]
		}
	}
	var lines []string
	for _, l := range w.traceLog {
		if strings.Contains(l.subject, id) || strings.Contains(l.text, id) || strings.HasPrefix(l.text, "VIOLATION") || strings.HasPrefix(l.text, "operator") {
			lines = append(lines, fmt.Sprintf("  %10s  %s", l.at.Truncate(1e6), l.text))
		}
	}
	if len(lines) > max {
		lines = append(append(lines[:max/2:max/2], fmt.Sprintf("  ... %d lines ...", len(lines)-max)), lines[len(lines)-max/2:]...)
	}
	fmt.Fprintf(&b, "trace of %q:\n%s\n", id, strings.Join(lines, "\n"))
	return b.String()
}
