package stack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
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
	// ClaimedBy is the process id of another local up that claims the path (ClaimInfoFile): it is
	// starting a stack that will write the file, or runs one that did. "" when not claimed.
	ClaimedBy string
}

func (e *InfoFileInUseError) Error() string {
	if e.ClaimedBy != "" {
		return fmt.Sprintf("info file %s is claimed by another sfnlimit local up (pid %s) that is starting or running a stack: it would write the file too, and remove it when it stops. Stop that one first (Ctrl-C where it runs) or give this one another info file",
			e.Path, e.ClaimedBy)
	}
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

// InfoClaim is one local up's hold on its info file's path, from its check until it stops: an
// exclusive lock (flock) on a file beside it, PATH.lock, holding the process id. The check and the
// write of the info file are seconds apart (the stack starts between them), so without it two
// local up started together with the same --info both passed the check. The kernel drops the lock
// when the process ends, however it ends: a crash leaves no claim behind, only a file that names
// the process.
type InfoClaim struct {
	Path string
	// Stale is the info of the stack that no longer answers, whose file this one replaces.
	Stale *Info
	lock  *os.File // nil: a claim forced past another's (--force), which holds nothing
}

// ClaimInfoFile claims path for this process, then checks it as CheckInfoFile does. A path another
// local up claims, a file of a stack still answering and a file that is not an info file are
// refused with an *InfoFileInUseError; with force none is (the claim holds no lock when another
// holds it). The caller releases the claim when its stack stops.
func ClaimInfoFile(ctx context.Context, path string, force bool) (*InfoClaim, error) {
	c := &InfoClaim{Path: path}
	lock, err := lockBeside(path)
	var inUse *InfoFileInUseError
	switch {
	case errors.As(err, &inUse) && force:
	case err != nil:
		return nil, err
	default:
		c.lock = lock
	}
	c.Stale, err = CheckInfoFile(ctx, path)
	if err != nil && !(force && errors.As(err, &inUse)) {
		c.Release()
		return nil, err
	}
	return c, nil
}

// Release gives the path up: the lock file is removed while the lock is held, so that one who
// opened it meanwhile finds, once it has the lock, that it locked a removed file (lockBeside).
func (c *InfoClaim) Release() {
	if c == nil || c.lock == nil {
		return
	}
	_ = os.Remove(c.lock.Name())
	_ = c.lock.Close() // drops the lock
	c.lock = nil
}

// lockBeside takes the exclusive lock on path's lock file, creating it, and writes this process's
// id in it. Held by another, it is an *InfoFileInUseError naming the holder's process id.
func lockBeside(path string) (*os.File, error) {
	name := path + ".lock"
	for {
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return nil, fmt.Errorf("claim info file %s: %w", path, err)
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			f.Close()
			if errors.Is(err, syscall.EWOULDBLOCK) {
				pid, _ := os.ReadFile(name)
				by := strings.TrimSpace(string(pid))
				if by == "" {
					by = "?" // it has the lock, and has not written its id yet
				}
				return nil, &InfoFileInUseError{Path: path, ClaimedBy: by}
			}
			return nil, fmt.Errorf("claim info file %s: lock %s: %w", path, name, err)
		}
		// The holder before may have released (removed) the file between our open and our lock:
		// then the lock is on a file no one else sees, and the claim is tried again.
		held, err1 := f.Stat()
		now, err2 := os.Stat(name)
		if err1 == nil && err2 == nil && os.SameFile(held, now) {
			if err := f.Truncate(0); err == nil {
				_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
			}
			return f, nil
		}
		f.Close()
		if err1 != nil {
			return nil, fmt.Errorf("claim info file %s: %w", path, err1)
		}
		if err2 != nil && !errors.Is(err2, os.ErrNotExist) {
			return nil, fmt.Errorf("claim info file %s: %w", path, err2)
		}
	}
}
