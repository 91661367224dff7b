package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A second `local up --info FILE` while the stack that wrote FILE still runs refuses before it
// starts anything (exit 2), and leaves the file: overwriting it, and removing it at exit, would
// leave the first stack running unreachable. A file that is not an info file is refused too.
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
	for _, tt := range []struct {
		path, body, want string
	}{
		{path: running, body: info, want: "info file " + running + " names a local stack that is still running (it answers at " + live.URL + ")"},
		{path: notes, body: "my notes\n", want: "info file " + notes + " is not the info file of a local stack"},
	} {
		// Bounded: without the check, local up would start a stack and run until interrupted.
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		r := sfnlimitIn(ctx, "", "local", "up", "--info", tt.path)
		cancel()
		if r.code != exitUsage || !strings.Contains(r.stderr, tt.want) || !strings.Contains(r.stderr, "add --force") {
			t.Errorf("local up --info %s = %s\nwant exit 2 with %q and --force named", tt.path, r, tt.want)
		}
		if b, err := os.ReadFile(tt.path); err != nil || string(b) != tt.body {
			t.Errorf("local up --info %s changed the file: %q, %v", tt.path, b, err)
		}
	}
}
