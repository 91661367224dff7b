package tests

// The README gives a new user two commands after cloning: `make demo`, then `make test`. These tests
// check what a fresh clone needs for them, with stand-ins for the tools so that they run in seconds:
// make demo installs the pinned npm tools before it starts the local stack (as make test does), and
// .ci/run runs the two commands in the order a new user types them.

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// cloneRoot is the module root, one level up from tests/.
func cloneRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatalf("Abs(..) error: %v", err)
	}
	return root
}

// standIns writes stand-in commands into a new directory and returns it with the file each one
// appends its command line to. Every stand-in logs "name args..." and runs body, if any.
func standIns(t *testing.T, bodies map[string]string) (bin, calls string) {
	t.Helper()
	bin = t.TempDir()
	calls = filepath.Join(t.TempDir(), "calls")
	for name, body := range bodies {
		script := "#!/bin/bash\necho \"" + name + " $*\" >> " + calls + "\n" + body + "\n"
		if err := os.WriteFile(filepath.Join(bin, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return bin, calls
}

func readCalls(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

// withPath returns the environment with PATH set to dirs first, then the system's own directories
// (make, bash, grep, touch), and nothing of the caller's Go or npm.
func withPath(dirs ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "PATH", "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "GO":
			continue
		}
		env = append(env, kv)
	}
	return append(env, "PATH="+strings.Join(append(dirs, "/usr/local/bin", "/usr/bin", "/bin"), ":"))
}

// npmWarnings is what npm 11 prints on Node 20 for packages that want Node 22 (one of ten blocks).
const npmWarnings = `echo "npm warn EBADENGINE Unsupported engine {" >&2
echo "npm warn EBADENGINE   package: 'fauxqs@2.4.1'," >&2
echo "npm warn EBADENGINE   required: { node: '>=22.5.0' }," >&2
echo "npm warn EBADENGINE }" >&2
echo "added 91 packages in 11s"`

func TestMakeDemoOnAFreshCloneInstallsTheNpmToolsFirst(t *testing.T) {
	root := cloneRoot(t)
	installs := npmWarnings + `
mkdir -p node_modules/.bin && printf '#!/bin/sh\n' > node_modules/.bin/asl-validator && chmod +x node_modules/.bin/asl-validator`
	tests := []struct {
		name      string
		npm       string
		wantErr   bool
		wantCalls []string
	}{
		{
			name:      "npm ci, then the demo",
			npm:       installs,
			wantCalls: []string{"npm ci --no-audit --no-fund", "go run ./cmd/sfnlimit demo"},
		},
		{
			name:      "a failed install stops before the demo",
			npm:       npmWarnings + "\necho 'npm error network' >&2; exit 1",
			wantErr:   true,
			wantCalls: []string{"npm ci --no-audit --no-fund"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// A fresh clone: the Makefile and the npm manifests, no node_modules.
			dir := t.TempDir()
			for _, f := range []string{"Makefile", "package.json", "package-lock.json"} {
				b, err := os.ReadFile(filepath.Join(root, f))
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			bin, calls := standIns(t, map[string]string{
				"npm": tt.npm, "go": "", "node": "", "jq": "", "moto_server": "", "cfn-lint": "", "aws": "",
			})
			cmd := exec.Command("make", "--no-print-directory", "demo")
			cmd.Dir = dir
			cmd.Env = withPath(bin)
			out, err := cmd.CombinedOutput()
			if gotErr := err != nil; gotErr != tt.wantErr {
				t.Fatalf("make demo error = %v, want error %v; output:\n%s", err, tt.wantErr, out)
			}
			if got := readCalls(t, calls); !slices.Equal(got, tt.wantCalls) {
				t.Errorf("make demo ran %q, want %q; output:\n%s", got, tt.wantCalls, out)
			}
			if strings.Contains(string(out), "EBADENGINE") {
				t.Errorf("make demo printed npm's engine warnings for the packages that run on the installed Node 22:\n%s", out)
			}
			if !tt.wantErr && !strings.Contains(string(out), "added 91 packages") {
				t.Errorf("make demo hid npm's own output:\n%s", out)
			}
			if tt.wantErr && !strings.Contains(string(out), "npm error network") {
				t.Errorf("make demo hid npm's error:\n%s", out)
			}
		})
	}
}

func TestCIRunsTheDemoThenTheTests(t *testing.T) {
	root := cloneRoot(t)
	bin, calls := standIns(t, map[string]string{"make": ""})
	cmd := exec.Command("bash", filepath.Join(root, ".ci", "run"))
	cmd.Env = withPath(bin)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf(".ci/run error: %v; output:\n%s", err, out)
	}
	var makes []string
	for _, c := range readCalls(t, calls) {
		makes = append(makes, strings.TrimSpace(strings.TrimPrefix(c, "make")))
	}
	// The first `make --version` only prints the tool's version.
	makes = slices.DeleteFunc(makes, func(s string) bool { return s == "--version" })
	if want := []string{"demo", "test"}; !slices.Equal(makes, want) {
		t.Errorf(".ci/run ran make %q, want %q (the README's two commands, in order)", makes, want)
	}
}

func TestGitIgnoresWhatTheDemoAndALocalStackWrite(t *testing.T) {
	root := cloneRoot(t)
	for _, p := range []string{"out/demo/report.md", "local.json", "node_modules/fauxqs/package.json"} {
		cmd := exec.Command("git", "check-ignore", "--no-index", "-q", p)
		cmd.Dir = root
		if err := cmd.Run(); err != nil {
			t.Errorf("git check-ignore %s: %v (a new user's `git status` would list it after make demo or local up)", p, err)
		}
	}
}

// make help is what a new user reads to find the targets: it speaks of what each does, not of when
// or why it was written (issue numbers, commits, sessions).
func TestMakeHelpNamesNoHistory(t *testing.T) {
	cmd := exec.Command("make", "--no-print-directory", "help")
	cmd.Dir = cloneRoot(t)
	cmd.Env = withPath()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make help error: %v\n%s", err, out)
	}
	history := regexp.MustCompile(`(?i)\bissue\s*#?\d+|\bcommit\s+[0-9a-f]{7,}|\b(last|previous) session\b|\breview\s*\d+`)
	for _, line := range strings.Split(string(out), "\n") {
		if m := history.FindString(line); m != "" {
			t.Errorf("make help says %q in %q: name what the target does instead", m, line)
		}
	}
	if !strings.Contains(string(out), "demo") {
		t.Errorf("make help does not list demo:\n%s", out)
	}
}
