package main

import (
	"strings"
	"testing"

	"github.com/sfnlimit/sfnlimit/internal/tools/ops"
)

// The overflow rules cancel and skip end to end, on the stack's table: config set --overflow RULE is
// refused for a type without a key cap (exit 2, nothing written), written beside one, shown by
// config get (text and JSON) and status, kept from losing its key cap, and --overflow "" removes it.
func TestConfigOverflow(t *testing.T) {
	t.Parallel()
	for _, rule := range []string{"cancel", "skip"} {
		t.Run(rule, func(t *testing.T) {
			t.Parallel()
			typ := newType(t, "ovf", 2)

			r := must(t, local(t, "config", "set", typ, "--overflow", rule), exitUsage)
			if !strings.Contains(r.stderr, "type "+typ+": overflow rule "+rule+" needs a key cap (config set "+typ+" --key-limit N)") {
				t.Errorf("config set --overflow %s without a key cap:\n%s", rule, r)
			}
			res := decode[ops.SetResult](t, must(t, local(t, "config", "set", typ, "--key-limit", "1", "--overflow", rule, "--json"), exitOK))
			if a := res.After; a.Overflow != rule || a.OverflowSource != ops.OverflowFromOverride || a.OverflowProblem != "" || a.Override.Overflow != rule {
				t.Errorf("config set --key-limit 1 --overflow %s = %+v, want %s from the override", rule, a, rule)
			}
			r = must(t, local(t, "config", "get", typ), exitOK)
			for _, want := range []string{"OVERFLOW", rule + " (override)", "keyLimit=1 overflow=" + rule} {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("config get lacks %q:\n%s", want, r)
				}
			}
			if r = must(t, local(t, "status"), exitOK); !regexpMatch(`Overflow rule `+rule+`: .*\b`+typ+`\b`, r.stdout) {
				t.Errorf("status does not name %s's rule:\n%s", typ, r)
			}
			r = must(t, local(t, "config", "set", typ, "--key-limit", "0"), exitUsage)
			if !strings.Contains(r.stderr, "needs a key cap") {
				t.Errorf("config set --key-limit 0 under a %s rule:\n%s", rule, r)
			}
			res = decode[ops.SetResult](t, must(t, local(t, "config", "set", typ, "--overflow", "", "--json"), exitOK))
			if a := res.After; a.Overflow != "queue" || a.OverflowSource != ops.OverflowDefault || a.Override.Overflow != "" {
				t.Errorf("config set --overflow \"\" = %+v, want queue (default)", a)
			}
		})
	}
}
