package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sfnlimit/sfnlimit/internal/tools/local/stack"
)

// A second `local up --info FILE` while the stack that wrote FILE still runs, or while another
// local up that claimed FILE starts its stack, refuses before it starts anything (exit 2), and
// leaves the file: overwriting it, and removing it at exit, would leave the first stack running
// unreachable. A file that is not an info file is refused too; a refused one leaves no claim.
func TestLocalUpRefusesAnInfoFileInUse(t *testing.T) {
	t.Parallel()
	live := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNotFound) }))
	defer live.Close()
	dir := t.TempDir()
	running := filepath.Join(dir, "local.json")
	info := `{"endpoint": "` + live.URL + `", "region": "us-east-1", "outputs": {"TableName": "sfnlimit"}}` + "\n"
	notes := filepath.Join(dir, "notes.json")
	for path, body := range map[string]string{running: info, notes: "my notes\n"} {
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A path another local up claims (it is starting its stack, and has not written the file yet).
	starting := filepath.Join(dir, "starting.json")
	claim, err := stack.ClaimInfoFile(t.Context(), starting, false)
	if err != nil {
		t.Fatal(err)
	}
	defer claim.Release()
	for _, tt := range []struct {
		path, body, want string
	}{
		{path: running, body: info, want: "info file " + running + " names a local stack that is still running (it answers at " + live.URL + ")"},
		{path: notes, body: "my notes\n", want: "info file " + notes + " is not the info file of a local stack"},
		{path: starting, want: fmt.Sprintf("info file %s is claimed by another sfnlimit local up (pid %d)", starting, os.Getpid())},
	} {
		// Bounded: without the check, local up would start a stack and run until interrupted.
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		r := sfnlimitIn(ctx, "", "local", "up", "--info", tt.path)
		cancel()
		if r.code != exitUsage || !strings.Contains(r.stderr, tt.want) || !strings.Contains(r.stderr, "add --force") {
			t.Errorf("local up --info %s = %s\nwant exit 2 with %q and --force named", tt.path, r, tt.want)
		}
		if b, err := os.ReadFile(tt.path); tt.body != "" && (err != nil || string(b) != tt.body) || tt.body == "" && !errors.Is(err, os.ErrNotExist) {
			t.Errorf("local up --info %s changed the file: %q, %v", tt.path, b, err)
		}
		if _, err := os.Stat(tt.path + ".lock"); tt.path != starting && !errors.Is(err, os.ErrNotExist) {
			t.Errorf("local up --info %s left its claim behind: %v", tt.path, err)
		}
	}
}
