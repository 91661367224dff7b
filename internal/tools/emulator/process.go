// Package emulator starts and stops the AWS emulators of the local stack (moto and fauxqs) as child
// processes on loopback ports, and leaves nothing behind: each runs in its own process group, which Stop
// kills, and the kernel kills it if the parent dies first (Pdeathsig).
package emulator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"
)

const (
	defaultStartTimeout = 30 * time.Second
	stopGrace           = 2 * time.Second
	logTailBytes        = 64 << 10
	errorTailLines      = 30
)

// Process is a running emulator.
type Process struct {
	name     string
	cmd      *exec.Cmd
	port     int
	endpoint string
	logs     *tailBuffer
	dir      string // files needed to start (launcher, ready file): removed once started, or by Stop

	done    chan struct{} // closed once the process has been waited for
	waitErr error         // valid after done is closed

	stopOnce sync.Once
	stopErr  error
}

// Endpoint returns the emulator's base URL, http://127.0.0.1:PORT.
func (p *Process) Endpoint() string { return p.endpoint }

// Port returns the loopback port the emulator serves on.
func (p *Process) Port() int { return p.port }

// PID returns the process id, which is also the id of its process group.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Logs returns the last lines (at most n; all kept when n <= 0) of the process's stdout and stderr.
func (p *Process) Logs(n int) string { return p.logs.Tail(n) }

// Stop kills the process group, waits for the process and removes its temporary files. It is safe to
// call more than once and from several goroutines; later calls return the first call's result.
func (p *Process) Stop() error {
	p.stopOnce.Do(func() { p.stopErr = p.stop() })
	return p.stopErr
}

func (p *Process) stop() error {
	pgid := p.cmd.Process.Pid
	select {
	case <-p.done:
	default:
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(stopGrace):
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			select {
			case <-p.done:
			case <-time.After(10 * time.Second):
				return fmt.Errorf("stop %s (pid %d): still running after SIGKILL", p.name, pgid)
			}
		}
	}
	// Anything the process left in its group (it starts none, but a wrapper might) goes too. The group id
	// cannot have been reused while members remain.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	if err := p.removeTempDir(); err != nil {
		return fmt.Errorf("stop %s: remove temporary files: %w", p.name, err)
	}
	return nil
}

// removeTempDir removes the files the process needed only to start.
func (p *Process) removeTempDir() error {
	if p.dir == "" {
		return nil
	}
	return os.RemoveAll(p.dir)
}

// exited describes how the process ended, with the end of its output.
func (p *Process) exited() error {
	return fmt.Errorf("%s exited early (%v); last output:\n%s", p.name, p.waitErr, p.logs.Tail(errorTailLines))
}

type spec struct {
	name      string
	path      string
	args      []string
	dir       string
	env       []string
	extra     []*os.File
	logWriter io.Writer
	tmpDir    string
}

// start runs the command in its own process group, with Pdeathsig, and its output captured.
func start(s spec) (*Process, error) {
	cmd := exec.Command(s.path, s.args...)
	cmd.Dir = s.dir
	cmd.Env = s.env
	cmd.ExtraFiles = s.extra
	// Pdeathsig is delivered when the thread that forked the child exits; the Go runtime keeps its
	// threads for the life of the process, so in practice this is when the parent dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	logs := newTailBuffer(logTailBytes)
	var out io.Writer = logs
	if s.logWriter != nil {
		out = io.MultiWriter(logs, &lockedWriter{w: s.logWriter})
	}
	cmd.Stdout = out
	cmd.Stderr = out
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", s.name, err)
	}
	p := &Process{name: s.name, cmd: cmd, logs: logs, dir: s.tmpDir, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// waitReady polls check until it succeeds, the process exits, ctx ends or timeout passes.
func (p *Process) waitReady(ctx context.Context, timeout time.Duration, check func(ctx context.Context) error) error {
	if timeout <= 0 {
		timeout = defaultStartTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		select {
		case <-p.done:
			return p.exited()
		default:
		}
		attempt, cancelAttempt := context.WithTimeout(ctx, 2*time.Second)
		last = check(attempt)
		cancelAttempt()
		if last == nil {
			return nil
		}
		select {
		case <-p.done:
			return p.exited()
		case <-ctx.Done():
			return fmt.Errorf("%s did not answer on port %d within %v (last check: %v); last output:\n%s",
				p.name, p.port, timeout, last, p.logs.Tail(errorTailLines))
		case <-tick.C:
		}
	}
}

// loopbackClient talks to emulators only: no proxy, short timeouts.
var loopbackClient = &http.Client{
	Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true},
	Timeout:   5 * time.Second,
}

func httpGet(ctx context.Context, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := loopbackClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return body, fmt.Errorf("GET %s: status %d", url, resp.StatusCode)
	}
	return body, nil
}

// listenLoopback listens on 127.0.0.1:port (0 picks a free port) and returns the listening socket as a
// file that a child process can inherit, with its port.
func listenLoopback(port int) (*os.File, int, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return nil, 0, fmt.Errorf("listen on loopback port %d: %w", port, err)
	}
	defer ln.Close()
	tcp, ok := ln.(*net.TCPListener)
	if !ok {
		return nil, 0, errors.New("listen on loopback: not a TCP listener")
	}
	f, err := tcp.File()
	if err != nil {
		return nil, 0, fmt.Errorf("listen on loopback: socket file: %w", err)
	}
	return f, tcp.Addr().(*net.TCPAddr).Port, nil
}

// childEnv returns the parent's environment without the given variables, plus extra.
func childEnv(drop []string, extra ...string) []string {
	dropped := make(map[string]bool, len(drop))
	for _, k := range drop {
		dropped[k] = true
	}
	var env []string
	for _, kv := range os.Environ() {
		k := kv
		for i := 0; i < len(kv); i++ {
			if kv[i] == '=' {
				k = kv[:i]
				break
			}
		}
		if !dropped[k] {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}
