package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sfnlimit/sfnlimit/internal/tools/local/stack"
)

// The tests of this package drive the command line end to end against one local stack (moto, the
// runtime running), started on first use and shared: each test uses job types of its own, so they
// run in parallel without seeing each other's jobs.

// stackParams are the template parameters of the shared stack; every command is told them with
// --param, as the info file does not carry them.
var stackParams = map[string]string{
	"TypeLimits":         "base=2",
	"DefaultMaxAttempts": "2",
	"ConfigCacheSeconds": "1", // overrides reach the router within a second
}

var shared struct {
	once sync.Once
	s    *stack.Stack
	info string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.s != nil {
		shared.s.Close()
		_ = os.RemoveAll(filepath.Dir(shared.info))
	}
	os.Exit(code)
}

// localStack starts the shared stack if need be and returns it with its info file.
func localStack(t *testing.T) (*stack.Stack, string) {
	t.Helper()
	shared.once.Do(func() {
		ctx := context.Background()
		s, err := stack.Start(ctx, stack.Options{
			Parameters:  stackParams,
			FunctionEnv: map[string]string{"START_RETRY_SECONDS": "1", "SWEEP_MIN_AGE_SECONDS": "2"},
			SweepEvery:  2 * time.Second,
		})
		if err != nil {
			shared.err = err
			return
		}
		if err := s.StartRuntime(ctx); err != nil {
			s.Close()
			shared.err = err
			return
		}
		dir, err := os.MkdirTemp("", "sfnlimit-cli-test")
		if err != nil {
			s.Close()
			shared.err = err
			return
		}
		// The same file `sfnlimit local up --info` writes.
		shared.info = filepath.Join(dir, "local.json")
		f, err := os.Create(shared.info)
		if err == nil {
			err = s.Info().WriteJSON(f)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		shared.s, shared.err = s, err
	})
	if shared.err != nil {
		t.Fatalf("start the local stack: %v", shared.err)
	}
	return shared.s, shared.info
}

// result is what one command line did.
type result struct {
	code           int
	stdout, stderr string
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// sfnlimit runs a command line in-process, with stdin.
func sfnlimitIn(ctx context.Context, stdin string, args ...string) result {
	var out, errb bytes.Buffer
	code := run(ctx, args, strings.NewReader(stdin), &out, &errb)
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

// local runs an operator command against the shared stack.
func local(t *testing.T, args ...string) result {
	t.Helper()
	return localIn(t, "", args...)
}

func localIn(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	_, info := localStack(t)
	return sfnlimitIn(t.Context(), stdin, append(args, localFlags(info)...)...)
}

func localFlags(info string) []string {
	out := []string{"--local", info}
	for k, v := range stackParams {
		out = append(out, "--param", k+"="+v)
	}
	return out
}

// must fails the test unless the command exited with code want.
func must(t *testing.T, r result, want int) result {
	t.Helper()
	if r.code != want {
		t.Fatalf("exit code %d, want %d\n%s", r.code, want, r)
	}
	return r
}

// decode parses a command's JSON output.
func decode[T any](t *testing.T, r result) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
		t.Fatalf("output is not the JSON expected: %v\n%s", err, r)
	}
	return v
}

var typeSeq atomic.Int64

// newType makes a job type of the test's own and gives it a live limit with `config set`.
func newType(t *testing.T, prefix string, limit int) string {
	t.Helper()
	typ := fmt.Sprintf("%s%d", prefix, typeSeq.Add(1))
	must(t, local(t, "config", "set", typ, "--limit", fmt.Sprint(limit), "--new-type"), exitOK)
	waitCache()
	return typ
}

// waitCache waits until every function has read the live config again (ConfigCacheSeconds is 1):
// until then, the starter may still refuse a new type's jobs.
func waitCache() { time.Sleep(1500 * time.Millisecond) }

// eventually retries check until it returns nil or the time is up.
func eventually(t *testing.T, within time.Duration, check func() error) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %v", within, err)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// jobState is the part of `job show --json` the tests read.
type jobState struct {
	Type       string `json:"type"`
	ID         string `json:"id"`
	State      string `json:"state"`
	Lane       int    `json:"lane"`
	Attempt    int    `json:"attempt"`
	Redrive    int    `json:"redrive"`
	Sender     string `json:"sender"`
	Executions []struct {
		Attempt int    `json:"attempt"`
		Redrive int    `json:"redrive"`
		Lane    int    `json:"lane"`
		Status  string `json:"status"`
		Arn     string `json:"arn"`
	} `json:"executions"`
}

// waitJob waits until `job show` reports the job in state want.
func waitJob(t *testing.T, typ, id, want string) jobState {
	t.Helper()
	var got jobState
	eventually(t, 3*time.Minute, func() error { // bounds a stuck job only
		r := local(t, "job", "show", id, "--type", typ, "--json")
		if r.code != exitOK {
			return fmt.Errorf("job show: %s", r)
		}
		views := decode[[]jobState](t, r)
		if len(views) != 1 {
			return fmt.Errorf("job show found %d jobs", len(views))
		}
		got = views[0]
		if got.State != want {
			return fmt.Errorf("job %s/%s is %s, want %s", typ, id, got.State, want)
		}
		return nil
	})
	return got
}
