package cfntemplate

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The validators are part of the test suite: a missing tool fails the test, it is never skipped.
// cfn-lint comes with the machine (pyenv); asl-validator is the pinned npm package (make tools).

func lookTool(t *testing.T, name, path, install string) string {
	t.Helper()
	if path == "" {
		p, err := exec.LookPath(name)
		if err != nil {
			t.Fatalf("%s is not on PATH (%s): the template cannot be validated", name, install)
		}
		return p
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("%s is missing at %s (%s): the state machines cannot be validated", name, path, install)
	}
	return path
}

func runTool(t *testing.T, dir, tool string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, tool, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s failed: %v\n%s", filepath.Base(tool), strings.Join(args, " "), err, out)
	}
	t.Logf("%s %s: %s", filepath.Base(tool), strings.Join(args, " "), strings.TrimSpace(string(out)))
}

func TestCfnLint(t *testing.T) {
	tool := lookTool(t, "cfn-lint", "", "it is preinstalled with Python 3.11 on these machines: pyenv's cfn-lint 1.51.0")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, tool, "template.yaml")
	cmd.Dir = repoRoot
	out, err := cmd.CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Fatalf("cfn-lint template.yaml reports (%v):\n%s", err, out)
	}
}

func TestASLValidator(t *testing.T) {
	tool := lookTool(t, "asl-validator", filepath.Join(repoRoot, "node_modules", ".bin", "asl-validator"), "run make tools, which runs npm ci")
	files, err := filepath.Glob(filepath.Join(repoRoot, "statemachine", "*.asl.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no statemachine/*.asl.json (%v)", err)
	}
	abs, err := filepath.Abs(tool)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			runTool(t, ".", abs, "--json-path", f)
		})
	}

	// The definitions as deployed: substitutions applied (TimeoutSeconds is only there then).
	s := newLocalStack(t, nil)
	for id, sm := range s.sms {
		t.Run(id+"/resolved", func(t *testing.T) {
			path := filepath.Join(t.TempDir(), id+".asl.json")
			if err := os.WriteFile(path, []byte(sm.Definition), 0o600); err != nil {
				t.Fatal(err)
			}
			runTool(t, ".", abs, "--json-path", path)
		})
	}
}
