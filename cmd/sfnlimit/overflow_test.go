package main

import (
	"strings"
	"testing"

	"github.com/sfnlimit/sfnlimit/internal/tools/ops"
)

// The overflow rule end to end, on the stack's table: config set --overflow cancel is refused for a
// type without a key cap (exit 2, nothing written), written beside one, shown by config get (text
// and JSON) and status, kept from losing its key cap, and --overflow "" removes it.
func TestConfigOverflow(t *testing.T) {
	t.Parallel()
	typ := newType(t, "ovf", 2)

	r := must(t, local(t, "config", "set", typ, "--overflow", "cancel"), exitUsage)
	if !strings.Contains(r.stderr, "type "+typ+": overflow rule cancel needs a key cap (config set "+typ+" --key-limit N)") {
		t.Errorf("config set --overflow cancel without a key cap:\n%s", r)
	}
	res := decode[ops.SetResult](t, must(t, local(t, "config", "set", typ, "--key-limit", "1", "--overflow", "cancel", "--json"), exitOK))
	if a := res.After; a.Overflow != "cancel" || a.OverflowSource != ops.OverflowFromOverride || a.OverflowProblem != "" || a.Override.Overflow != "cancel" {
		t.Errorf("config set --key-limit 1 --overflow cancel = %+v, want cancel from the override", a)
	}
	r = must(t, local(t, "config", "get", typ), exitOK)
	for _, want := range []string{"OVERFLOW", "cancel (override)", "keyLimit=1 overflow=cancel"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("config get lacks %q:\n%s", want, r)
		}
	}
	if r = must(t, local(t, "status"), exitOK); !regexpMatch(`Overflow rule cancel: .*\b`+typ+`\b`, r.stdout) {
		t.Errorf("status does not name %s's rule:\n%s", typ, r)
	}
	r = must(t, local(t, "config", "set", typ, "--key-limit", "0"), exitUsage)
	if !strings.Contains(r.stderr, "needs a key cap") {
		t.Errorf("config set --key-limit 0 under a cancel rule:\n%s", r)
	}
	res = decode[ops.SetResult](t, must(t, local(t, "config", "set", typ, "--overflow", "", "--json"), exitOK))
	if a := res.After; a.Overflow != "queue" || a.OverflowSource != ops.OverflowDefault || a.Override.Overflow != "" {
		t.Errorf("config set --overflow \"\" = %+v, want queue (default)", a)
	}
}
