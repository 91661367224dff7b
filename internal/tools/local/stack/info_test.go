package stack

import (
	"errors"
	"fmt"
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

// Two local up with the same --info started together both passed the check, which ran seconds
// before either wrote the file: the path is claimed at the check (a lock beside it, held while the
// stack runs), so the second is refused there (--force goes on), and the claim is given up at exit.
func TestClaimInfoFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "local.json")
	first, err := ClaimInfoFile(t.Context(), path, false)
	if err != nil {
		t.Fatalf("ClaimInfoFile() of a free path = %v", err)
	}
	_, err = ClaimInfoFile(t.Context(), path, false)
	var inUse *InfoFileInUseError
	if !errors.As(err, &inUse) || !strings.Contains(err.Error(), fmt.Sprintf("is claimed by another sfnlimit local up (pid %d)", os.Getpid())) {
		t.Fatalf("ClaimInfoFile() of a claimed path = %v, want an InfoFileInUseError naming the claim", err)
	}
	forced, err := ClaimInfoFile(t.Context(), path, true)
	if err != nil {
		t.Fatalf("ClaimInfoFile(force) of a claimed path = %v, want it to go on", err)
	}
	forced.Release() // holds no lock: leaves the first claim alone
	if _, err := ClaimInfoFile(t.Context(), path, false); err == nil {
		t.Fatal("a forced claim's release freed the first claim")
	}
	first.Release()
	if _, err := os.Stat(path + ".lock"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the claim's lock file is left after its release: %v", err)
	}
	again, err := ClaimInfoFile(t.Context(), path, false)
	if err != nil {
		t.Fatalf("ClaimInfoFile() after the first claim's release = %v", err)
	}
	again.Release()

	// The file of a stack that stopped is claimed and replaced, as before.
	stalePath := writeInfo(t, deadEndpoint(t))
	c, err := ClaimInfoFile(t.Context(), stalePath, false)
	if err != nil || c.Stale == nil {
		t.Fatalf("ClaimInfoFile() of a stopped stack's file = %+v, %v; want its stale info", c, err)
	}
	c.Release()
}
