package stack

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sfnlimit/sfnlimit/internal/emulator"
)

// A parameter out of range is reported as such (it used to panic in Close on a nil stack).
func TestStartReportsAParameterOutOfRange(t *testing.T) {
	s, err := Start(t.Context(), Options{Parameters: map[string]string{"FifoVisibilityTimeout": "1"}})
	if err == nil {
		s.Close()
		t.Fatal("Start(FifoVisibilityTimeout=1) = nil error, want the parameter's error")
	}
	if s != nil || !strings.Contains(err.Error(), "FifoVisibilityTimeout") {
		t.Errorf("Start(FifoVisibilityTimeout=1) = %v, %v; want nil and an error naming the parameter", s, err)
	}
}

// An error once the emulators run (here: the state machine's definition file is missing) stops them.
func TestStartStopsTheEmulatorsOnError(t *testing.T) {
	root, err := emulator.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	tpl, err := os.ReadFile(filepath.Join(root, "template.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	broken := t.TempDir() // template.yaml without statemachine/
	if err := os.WriteFile(filepath.Join(broken, "template.yaml"), tpl, 0o644); err != nil {
		t.Fatal(err)
	}
	var started []*emulator.Process
	emulatorStarted = func(p *emulator.Process) { started = append(started, p) }
	t.Cleanup(func() { emulatorStarted = func(*emulator.Process) {} })

	s, err := Start(t.Context(), Options{Root: broken})
	if err == nil {
		s.Close()
		t.Fatal("Start without the state machine's definition = nil error, want one")
	}
	if len(started) == 0 {
		t.Fatalf("Start failed before any emulator started (%v): the test does not reach its case", err)
	}
	for _, p := range started {
		select {
		case <-p.Done():
		case <-time.After(30 * time.Second):
			_ = p.Stop()
			t.Errorf("emulator (pid %d) still runs after Start failed with %v", p.PID(), err)
		}
	}
}
