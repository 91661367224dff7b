package stack

import (
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeInfo writes the info file of a stack at endpoint, as local up does.
func writeInfo(t *testing.T, endpoint string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "local.json")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := (Info{Endpoint: endpoint, Region: Region, Outputs: map[string]string{"TableName": "t"}}).WriteJSON(f); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// deadEndpoint is an endpoint where nothing listens any more.
func deadEndpoint(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr
}

// An info file may be written where there is none, or over the file of a stack that stopped; not
// over the file of a stack still answering (that stack would run on unreachable), nor over a file
// that is not an info file.
func TestCheckInfoFile(t *testing.T) {
	live := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNotFound) }))
	defer live.Close()
	notInfo := filepath.Join(t.TempDir(), "notes.json")
	if err := os.WriteFile(notInfo, []byte("my notes\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		path      string
		wantStale bool
		wantErr   string
		wantLive  bool
	}{
		{name: "no file", path: filepath.Join(t.TempDir(), "local.json")},
		{name: "a stack that stopped", path: writeInfo(t, deadEndpoint(t)), wantStale: true},
		{name: "a stack still running", path: writeInfo(t, live.URL), wantLive: true,
			wantErr: "names a local stack that is still running (it answers at " + live.URL + ")"},
		{name: "not an info file", path: notInfo, wantErr: "is not the info file of a local stack"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stale, err := CheckInfoFile(t.Context(), tt.path)
			if tt.wantErr != "" {
				var inUse *InfoFileInUseError
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.As(err, &inUse) || inUse.Live != tt.wantLive {
					t.Errorf("CheckInfoFile() = %v, want an InfoFileInUseError (live %v) with %q", err, tt.wantLive, tt.wantErr)
				}
				return
			}
			if err != nil || (stale != nil) != tt.wantStale {
				t.Errorf("CheckInfoFile() = %v, %v; want a stale stack's info %v and no error", stale, err, tt.wantStale)
			}
		})
	}
}

// At exit, local up removes its info file only while it still names its own stack.
func TestRemoveInfoFile(t *testing.T) {
	path := writeInfo(t, "http://127.0.0.1:1111")
	if err := RemoveInfoFile(path, "http://127.0.0.1:2222"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Errorf("the info file of another stack was removed: %v", err)
	}
	if err := RemoveInfoFile(path, "http://127.0.0.1:1111"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the stack's own info file is still there: %v", err)
	}
}
