package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sfnlimit/sfnlimit/internal/tools/ops"
)

// jobsFile writes JSON Lines jobs to a file of the test's own.
func jobsFile(t *testing.T, lines ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "jobs.jsonl")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// batch open opens a batch once, says so when it is open already, and refuses another size; batch
// show of a batch nobody opened is an error.
func TestBatchOpenAndShow(t *testing.T) {
	t.Parallel()
	name := fmt.Sprintf("cli-open-%d", typeSeq.Add(1))
	r := must(t, local(t, "batch", "show", name), exitError)
	if !strings.Contains(r.stderr, "batch "+name+" does not exist: no batch of that name was opened; open it with") {
		t.Errorf("batch show of a batch never opened:\n%s", r)
	}
	// Waited for with a timeout, it is said not to exist as well: exit 1, not 4 ("it goes on").
	w := must(t, local(t, "batch", "wait", name, "--timeout", "1s"), exitError)
	if !strings.Contains(w.stderr, "sfnlimit: batch "+name+" does not exist: no batch of that name was opened; open it with") {
		t.Errorf("batch wait --timeout 1s of a batch never opened:\n%s", w)
	}
	r = must(t, local(t, "batch", "open", name, "--size", "3"), exitOK)
	if !strings.Contains(r.stdout, "batch "+name+" opened for 3 jobs") {
		t.Errorf("batch open:\n%s", r)
	}
	r = must(t, local(t, "batch", "open", name, "--size", "3"), exitOK)
	if !strings.Contains(r.stdout, "was open already for 3 jobs") {
		t.Errorf("batch open again:\n%s", r)
	}
	r = must(t, local(t, "batch", "open", name, "--size", "4"), exitUsage)
	if !strings.Contains(r.stderr, "for 3 jobs, and a batch's size never changes") {
		t.Errorf("batch open with another size:\n%s", r)
	}
	r = must(t, local(t, "batch", "show", name), exitOK)
	for _, want := range []string{"batch " + name + ": open\n", "  recorded       0/3 (0%)\n", "; 3 jobs to go\n"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("batch show lacks %q:\n%s", want, r)
		}
	}
}

// submit --batch --wait opens the batch for the file's jobs, sends them naming it, waits until it
// closes and exits 3 when a job was dead-lettered; batch show --jobs then lists every job.
func TestSubmitBatchWait(t *testing.T) {
	t.Parallel()
	typ := newType(t, "batchw", 2)
	name := "cli-" + typ
	path := jobsFile(t,
		fmt.Sprintf(`{"type":%q,"id":"ok-1","input":{"seconds":1}}`, typ),
		fmt.Sprintf(`{"type":%q,"id":"ok-2","input":{"seconds":1}}`, typ),
		fmt.Sprintf(`{"type":%q,"id":"bad-1","input":{"seconds":1,"fail":true}}`, typ),
	)
	r := must(t, local(t, "submit", path, "--batch", name, "--wait", "--timeout", "3m"), exitBatchFailed)
	for _, want := range []string{
		"sent 3 of 3 jobs", "batch " + name + ": opened for 3 jobs at ",
		"batch " + name + ": closed, completion event sent\n", "  recorded       3/3 (100%)\n",
		"  succeeded      2\n", "  dead_lettered  1\n", "  " + typ + "/bad-1\n",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("submit --wait output lacks %q:\n%s", want, r)
		}
	}
	if !strings.Contains(r.stderr, "batch "+name+" [") || !strings.Contains(r.stderr, "closed with 1 of 3 jobs dead-lettered or refused") {
		t.Errorf("submit --wait: no progress line or no failure on stderr:\n%s", r)
	}
	v := decode[ops.BatchView](t, must(t, local(t, "batch", "show", name, "--jobs", "--json"), exitOK))
	if len(v.Jobs) != 3 || v.Counts["succeeded"] != 2 || v.Counts["dead_lettered"] != 1 || v.State != "closed" {
		t.Errorf("batch show --jobs = %+v, want 3 jobs, 2 succeeded and 1 dead-lettered", v)
	}
	// The file again, as another batch, while its jobs name this one: refused, nothing opened.
	named := jobsFile(t, fmt.Sprintf(`{"type":%q,"id":"x-1","batch":%q}`, typ, name))
	r = must(t, local(t, "submit", named, "--batch", name+"-2"), exitError)
	if !strings.Contains(r.stderr, fmt.Sprintf(`line 1 names batch %q, not %s-2`, name, name)) {
		t.Errorf("submit of a job of another batch:\n%s", r)
	}
	must(t, local(t, "batch", "show", name+"-2"), exitError)
}

// --timeout stops waiting with exit 4 and leaves the batch to go on; batch wait waits again and
// exits 0 when every job succeeded.
func TestSubmitBatchTimeout(t *testing.T) {
	t.Parallel()
	typ := newType(t, "batcht", 1)
	name := "cli-" + typ
	path := jobsFile(t, fmt.Sprintf(`{"type":%q,"id":"slow-1","input":{"seconds":8}}`, typ))
	r := must(t, local(t, "submit", path, "--batch", name, "--wait", "--timeout", "2s"), exitTimeout)
	if !strings.Contains(r.stderr, "batch "+name+" did not close within 2s (0 of 1 jobs recorded)") {
		t.Errorf("submit --wait --timeout:\n%s", r)
	}
	r = must(t, local(t, "batch", "wait", name, "--timeout", "3m"), exitOK)
	if !strings.Contains(r.stdout, "batch "+name+": closed") || !strings.Contains(r.stdout, "  succeeded      1\n") {
		t.Errorf("batch wait:\n%s", r)
	}
}

// Interrupted (Ctrl-C cancels the command's context), a wait says that it stopped waiting, that the
// batch goes on, and the command that waits again, and exits 130: not "context canceled", exit 1.
func TestWaitInterrupted(t *testing.T) {
	t.Parallel()
	_, info := localStack(t)
	typ := newType(t, "intr", 1)
	must(t, local(t, "pause", typ), exitOK) // its jobs wait: the batch stays open
	waitCache()
	name := "cli-" + typ
	for _, args := range [][]string{
		{"submit", jobsFile(t, fmt.Sprintf(`{"type":%q,"id":"i-1"}`, typ)), "--batch", name, "--wait"},
		{"batch", "wait", name},
	} {
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(2*time.Second, cancel) // a Ctrl-C while it waits
		r := sfnlimitIn(ctx, "", append(args, localFlags(info)...)...)
		cancel()
		again := "sfnlimit batch wait " + name + " --local " + info
		if r.code != exitInterrupted || strings.Contains(r.stderr, "context canceled") ||
			!strings.Contains(r.stderr, "stopped waiting for batch "+name+": the batch goes on; wait again with:\n  "+again) {
			t.Errorf("sfnlimit %s interrupted = %s\nwant exit 130, that it stopped waiting, and %q", strings.Join(args[:2], " "), r, again)
		}
	}
}

// docs/cli.md: "If SQS fails some jobs after its retries, the batch waits for them: send the same
// input again with the same --batch (the size is the same, and the ledger counts a job with an id
// once)." The jobs that did go out ran; the earlier-submission check must not shrink the batch's
// count, or the documented recovery is refused as "another size" and the batch never closes.
func TestSubmitBatchResendAfterPartialSend(t *testing.T) {
	t.Parallel()
	typ := newType(t, "resend", 3)
	name := fmt.Sprintf("resend-%d", time.Now().UnixNano())
	lines := []string{
		`{"type":"` + typ + `","id":"r-1","input":{"seconds":0}}`,
		`{"type":"` + typ + `","id":"r-2","input":{"seconds":0}}`,
		`{"type":"` + typ + `","id":"r-3","input":{"seconds":0}}`,
	}
	// As if SQS had failed line 3: the batch is open for 3, lines 1 and 2 were sent and ran.
	must(t, local(t, "batch", "open", name, "--size", "3"), exitOK)
	sent := strings.ReplaceAll(lines[0]+"\n"+lines[1]+"\n", `"input"`, `"batch":"`+name+`","input"`)
	must(t, localIn(t, sent, "submit", "-"), exitOK)
	waitJob(t, typ, "r-1", "succeeded")
	waitJob(t, typ, "r-2", "succeeded")

	r := local(t, "submit", jobsFile(t, lines...), "--batch", name)
	if r.code == exitUsage || strings.Contains(r.stderr, "another size") {
		t.Fatalf("the documented recovery (same input, same --batch) was refused:\n%s", r)
	}
	for _, want := range []string{"sent 1 of 3 jobs", "batch " + name + ": open already for 3 jobs", "note: 2 jobs were sent before as jobs of batch " + name} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("submit of the same input again lacks %q:\n%s", want, r)
		}
	}
	must(t, local(t, "batch", "wait", name, "--timeout", "1m"), exitOK)
}
