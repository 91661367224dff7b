package stack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"time"
)

// InfoFileInUseError says why `local up` may not write its info file where it was asked to.
type InfoFileInUseError struct {
	Path string
	// Live says the file names a stack that still answers at Endpoint; otherwise the file is not an
	// info file at all (Err says why).
	Live     bool
	Endpoint string
	Err      error
}

func (e *InfoFileInUseError) Error() string {
	if e.Live {
		return fmt.Sprintf("info file %s names a local stack that is still running (it answers at %s): writing it would leave that stack running but unreachable through the file, and this one would remove the file when it stops. Stop that stack first (Ctrl-C where it runs) or give this one another info file",
			e.Path, e.Endpoint)
	}
	return fmt.Sprintf("info file %s is not the info file of a local stack (%v): it would be overwritten, and removed when the stack stops. Give another info file", e.Path, e.Err)
}

// answerTimeout bounds the check that a stack still answers at its endpoint: a stack on loopback
// answers in milliseconds.
const answerTimeout = 2 * time.Second

// CheckInfoFile says whether a stack may write its info to path. It may where there is no file, and
// over the file of a stack that no longer answers at its endpoint: that stale file's info is
// returned. It may not over the file of a stack that still answers, or over a file that is not an
// info file: the error is an *InfoFileInUseError.
func CheckInfoFile(ctx context.Context, path string) (stale *Info, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read info file %s: %w", path, err)
	}
	var info Info
	if err := json.Unmarshal(b, &info); err != nil {
		return nil, &InfoFileInUseError{Path: path, Err: err}
	}
	if info.Endpoint == "" || len(info.Outputs) == 0 {
		return nil, &InfoFileInUseError{Path: path, Err: errors.New("no endpoint or outputs")}
	}
	if answers(ctx, info.Endpoint) {
		return nil, &InfoFileInUseError{Path: path, Live: true, Endpoint: info.Endpoint}
	}
	return &info, nil
}

// answers reports whether anything answers HTTP at endpoint: any response at all, whatever its
// status.
func answers(ctx context.Context, endpoint string) bool {
	ctx, cancel := context.WithTimeout(ctx, answerTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint, nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return true
}

// RemoveInfoFile removes the info file at path if it still names the stack at endpoint: a file
// another stack wrote since is left to it.
func RemoveInfoFile(path, endpoint string) error {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read info file %s: %w", path, err)
	}
	var info Info
	if json.Unmarshal(b, &info) != nil || info.Endpoint != endpoint {
		return nil
	}
	return os.Remove(path)
}
