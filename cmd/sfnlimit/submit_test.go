package main

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sfnjob "github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/tools/local/stack"
)

// deadStack writes an info file of a local stack that has stopped: nothing answers at its
// endpoint.
func deadStack(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	endpoint := "http://" + l.Addr().String()
	l.Close()
	info := map[string]any{
		"endpoint": endpoint, "region": "us-east-1",
		"outputs": map[string]string{
			"GeneralQueueUrl": endpoint + "/000000000000/general", "LanesQueueUrl": endpoint + "/000000000000/lanes.fifo",
			"DeadLetterQueueUrl": endpoint + "/000000000000/dead", "TableName": "sfnlimit",
			"SampleStateMachineArn": "arn:aws:states:us-east-1:123456789012:stateMachine:sfnlimit-sample", "StarterFunctionName": "starter",
		},
		"parameters": map[string]string{"TypeLimits": "payments=2"},
	}
	b, err := json.Marshal(info)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "local.json")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// A job given by flags that breaks the router's rules is a usage error, whichever flag is wrong:
// exit 2, naming the flag, and nothing is sent. No stack is reached (its endpoint is dead).
func TestSubmitFlagsInvalid(t *testing.T) {
	t.Parallel()
	dead := deadStack(t)
	tests := []struct {
		name       string
		give       []string
		wantStderr string
	}{
		{name: "bad id", give: []string{"--type", "payments", "--id", "a b"}, wantStderr: `--id: invalid_id: id "a b" must be`},
		{name: "bad type", give: []string{"--type", "pay-ments", "--id", "x"}, wantStderr: "--type: invalid_type"},
		{name: "no type", give: []string{"--id", "x"}, wantStderr: "--type is required"},
		{name: "bad key", give: []string{"--type", "payments", "--id", "x", "--key", "a b"}, wantStderr: "--key: invalid_key"},
		{name: "input too large", give: []string{"--type", "payments", "--id", "x", "--input", `"` + strings.Repeat("x", 300*1024) + `"`}, wantStderr: "--input: input_too_large"},
		{name: "bad priority", give: []string{"--type", "payments", "--id", "x", "--priority", "urgent"}, wantStderr: "--priority: invalid_priority"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"submit", "--local", dead, "--skip-type-check"}, tt.give...)
			r := sfnlimitIn(context.Background(), "", args...)
			if r.code != exitUsage || !strings.Contains(r.stderr, tt.wantStderr) || strings.Contains(r.stdout, "sent") {
				t.Errorf("sfnlimit submit %s = %s\nwant exit 2, stderr with %q, and no summary", strings.Join(tt.give, " "), r, tt.wantStderr)
			}
		})
	}
}

// submit with nothing to send is a usage error: an empty standard input or file sends no job.
func TestSubmitNoJobs(t *testing.T) {
	t.Parallel()
	dead := deadStack(t)
	r := sfnlimitIn(context.Background(), "", "submit", "--local", dead, "-")
	if r.code != exitUsage || !strings.Contains(r.stderr, "no jobs on standard input") {
		t.Errorf("submit - of an empty standard input = %s\nwant exit 2: no jobs on standard input", r)
	}
	r = sfnlimitIn(context.Background(), "\n  \n", "submit", "--local", dead, "-")
	if r.code != exitUsage || !strings.Contains(r.stderr, "no jobs on standard input") {
		t.Errorf("submit - of blank lines = %s\nwant exit 2: no jobs on standard input", r)
	}
	empty := filepath.Join(t.TempDir(), "empty.jsonl")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	r = sfnlimitIn(context.Background(), "", "submit", "--local", dead, empty)
	if r.code != exitUsage || !strings.Contains(r.stderr, "no jobs in "+empty) {
		t.Errorf("submit of an empty file = %s\nwant exit 2: no jobs in %s", r, empty)
	}
}

// A stack that cannot be reached is named as such, with the job given by flags: not as "line 0" of
// some file.
func TestSubmitStoppedStack(t *testing.T) {
	t.Parallel()
	dead := deadStack(t)
	r := sfnlimitIn(context.Background(), "", "submit", "--local", dead, "--type", "payments", "--id", "order-1")
	if r.code != exitError || strings.Contains(r.stderr, "line 0") || !strings.Contains(r.stderr, "job payments/order-1") ||
		!strings.Contains(r.stderr, "is `sfnlimit local up` still running?") {
		t.Errorf("submit to a stopped stack = %s\nwant exit 1 naming job payments/order-1, no line 0, and the hint", r)
	}
}

// A job sent again with the type and id of one submitted before never runs again (its execution
// names are taken, and the lanes queue drops a copy within 5 minutes): submit says so, counts it
// apart from the jobs sent, sends it not, and exits 1.
func TestSubmitAgain(t *testing.T) {
	t.Parallel()
	typ := newType(t, "again", 2)
	must(t, local(t, "submit", "--type", typ, "--id", "once", "--input", `{"seconds":0}`), exitOK)
	j := waitJob(t, typ, "once", "succeeded")

	r := must(t, local(t, "submit", "--type", typ, "--id", "once", "--input", `{"seconds":0}`), exitError)
	for _, want := range []string{
		"sent 0 of 1 jobs from flags",
		"already submitted, not sent: 1\n  " + typ + "/once was already submitted (execution " + sfnjob.RunName(typ, j.Sender, "", "once", 0, 1) + " SUCCEEDED): it will not run again; use a new id\n",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("submit of a job submitted before lacks %q:\n%s", want, r)
		}
	}
	if !strings.Contains(r.stderr, "1 of 1 jobs not sent (1 already submitted)") {
		t.Errorf("submit of a job submitted before: stderr\n%s", r)
	}
	// In a file, the other jobs are sent.
	path := jobsFile(t,
		`{"type":"`+typ+`","id":"fresh","input":{"seconds":0}}`,
		`{"type":"`+typ+`","id":"once","input":{"seconds":0}}`)
	s := decode[submitSummary](t, must(t, local(t, "submit", path, "--json"), exitError))
	if s.Sent != 1 || s.Jobs != 2 || len(s.Already) != 1 || s.Already[0].No != 2 || s.Already[0].ID != "once" || s.Checked != 2 {
		t.Errorf("submit of a file with a job submitted before = %+v, want 1 of 2 sent, line 2 already submitted, 2 looked up", s)
	}
	waitJob(t, typ, "fresh", "succeeded")
}

// A job given by flags of a type with no limit is a usage error that suggests the closest type
// that has one: most often it is a typo.
func TestSubmitUnknownTypeSuggests(t *testing.T) {
	t.Parallel()
	r := must(t, local(t, "submit", "--type", "bsae", "--id", "x"), exitUsage)
	if !strings.Contains(r.stderr, "--type: unknown_type: ") || !strings.HasSuffix(strings.TrimSuffix(strings.SplitN(r.stderr, "\n", 2)[0], "\r"), " (did you mean base?)") {
		t.Errorf("submit --type bsae:\n%s", r)
	}
}

// Ctrl-C while submit looks up whether its jobs were submitted before stops it there: exit 130,
// nothing sent, and no note that the jobs are "sent as they are" (they are not: its context is
// cancelled). The lookup is held by a proxy in front of the shared stack that, at the first
// DescribeExecution, cancels the command's context as Ctrl-C does.
func TestSubmitInterruptedWhileLookingUpEarlier(t *testing.T) {
	t.Parallel()
	_, info := localStack(t)
	typ := newType(t, "lookup", 1)
	b, err := os.ReadFile(info)
	if err != nil {
		t.Fatal(err)
	}
	var si stack.Info
	if err := json.Unmarshal(b, &si); err != nil {
		t.Fatal(err)
	}
	target, err := url.Parse(si.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var sends atomic.Int32
	upstream := httputil.NewSingleHostReverseProxy(target)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch op := r.Header.Get("X-Amz-Target"); {
		case strings.HasSuffix(op, ".DescribeExecution"):
			cancel() // Ctrl-C while the lookup runs
			select { // the client gives up on its cancelled context; the connection may stay open
			case <-r.Context().Done():
			case <-time.After(3 * time.Second):
			}
			panic(http.ErrAbortHandler) // no answer: the connection is dropped
		case strings.HasSuffix(op, ".SendMessageBatch"), strings.HasSuffix(op, ".SendMessage"):
			sends.Add(1)
		}
		upstream.ServeHTTP(w, r)
	}))
	defer proxy.Close()
	si.Endpoint = proxy.URL
	via := filepath.Join(t.TempDir(), "local.json")
	b, err = json.Marshal(si)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(via, b, 0o644); err != nil {
		t.Fatal(err)
	}

	r := sfnlimitIn(ctx, "", append([]string{"submit", "--type", typ, "--id", "l-1"}, localFlags(via)...)...)
	if r.code != exitInterrupted || strings.Contains(r.stdout, "sent as they are") || strings.Contains(r.stdout, "sent 1") || sends.Load() > 0 {
		t.Errorf("submit interrupted during its lookup = %s (%d sends)\nwant exit 130, nothing sent, no \"sent as they are\"", r, sends.Load())
	}
	if !strings.Contains(r.stderr, "interrupted while looking up whether the jobs were submitted before: nothing sent") {
		t.Errorf("submit interrupted during its lookup: stderr\n%s", r)
	}
}
