package fakes

import (
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// Logger logs through t, so a failing test shows what the code under test said.
func Logger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(&tWriter{t: t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct {
	mu sync.Mutex
	t  testing.TB
}

func (w *tWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}
