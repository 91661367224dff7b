// Package functions_test holds the build test of the Lambda functions: every functions/<name> must
// cross-compile to the static linux/arm64 bootstrap that provided.al2023 runs, and every function of
// template.yaml must be built by its Makefile target (sam build's BuildMethod makefile).
package functions_test

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/sfnlimit/sfnlimit/internal/tools/cfntemplate"
)

// repoRoot is the module root, one level up from functions/.
var repoRoot = func() string {
	abs, err := filepath.Abs("..")
	if err != nil {
		panic(err)
	}
	return abs
}()

// lambdaEnv is the environment of a Lambda build (Makefile GO_LAMBDA_ENV).
var lambdaEnv = []string{"GOOS=linux", "GOARCH=arm64", "CGO_ENABLED=0"}

// buildEnv returns the test's environment with the Lambda cross-compilation settings in force, and
// without anything that would change the build (GOFLAGS such as -race, a host GOARM64, ...).
func buildEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "GOOS", "GOARCH", "CGO_ENABLED", "GOFLAGS", "ARTIFACTS_DIR", "MAKEFLAGS", "MFLAGS", "MAKELEVEL":
			continue
		}
		env = append(env, kv)
	}
	return append(append(env, lambdaEnv...), extra...)
}

func goTool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("LookPath(go) error: %v (the build test runs the go command)", err)
	}
	return p
}

// functionDirs lists functions/<name> directories.
func functionDirs(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(repoRoot, "functions"))
	if err != nil {
		t.Fatalf("ReadDir(functions) error: %v", err)
	}
	var names []string
	for _, e := range entries {
		if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	if len(names) == 0 {
		t.Fatal("functions/ has no function directories")
	}
	return names
}

func loadTemplate(t *testing.T) *cfntemplate.Template {
	t.Helper()
	tpl, err := cfntemplate.Load(filepath.Join(repoRoot, "template.yaml"))
	if err != nil {
		t.Fatalf("Load(template.yaml) error: %v", err)
	}
	if len(tpl.Functions()) == 0 {
		t.Fatal("template.yaml has no AWS::Serverless::Function")
	}
	return tpl
}

// checkBootstrap asserts that path is what provided.al2023 on arm64 runs: a static linux/arm64 ELF
// executable (no interpreter, no dynamic section, so it needs no libc of the image).
func checkBootstrap(t *testing.T, path string) {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatalf("Stat(%s) error: %v", path, err)
	}
	if st.Mode().Perm()&0o111 == 0 {
		t.Errorf("%s mode = %v, want executable", path, st.Mode())
	}
	f, err := elf.Open(path)
	if err != nil {
		t.Fatalf("elf.Open(%s) error: %v", path, err)
	}
	defer f.Close()
	if f.Machine != elf.EM_AARCH64 {
		t.Errorf("%s machine = %v, want %v", path, f.Machine, elf.EM_AARCH64)
	}
	if f.Class != elf.ELFCLASS64 {
		t.Errorf("%s class = %v, want %v", path, f.Class, elf.ELFCLASS64)
	}
	if f.Type != elf.ET_EXEC {
		t.Errorf("%s type = %v, want %v (a static executable)", path, f.Type, elf.ET_EXEC)
	}
	if f.OSABI != elf.ELFOSABI_NONE && f.OSABI != elf.ELFOSABI_LINUX {
		t.Errorf("%s OS ABI = %v, want linux (or none)", path, f.OSABI)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("%s has program header %v, want a static binary", path, p.Type)
		}
	}
	if s := f.Section(".dynamic"); s != nil {
		t.Errorf("%s has a .dynamic section, want a static binary", path)
	}
	if s := f.Section(".interp"); s != nil {
		t.Errorf("%s has an .interp section, want a static binary", path)
	}
	if libs, err := f.ImportedLibraries(); err == nil && len(libs) > 0 {
		t.Errorf("%s imports libraries %v, want none", path, libs)
	}
}

// build cross-compiles the package in dir into a temporary bootstrap and returns its path.
func build(t *testing.T, dir string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "bootstrap")
	cmd := exec.Command(goTool(t), "build", "-tags", "lambda.norpc", "-trimpath", "-o", out, ".")
	cmd.Dir = dir
	cmd.Env = buildEnv()
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s (linux/arm64, lambda.norpc) error: %v\n%s", dir, err, b)
	}
	return out
}

// packageName returns the Go package name of dir under the Lambda build settings.
func packageName(t *testing.T, dir string) string {
	t.Helper()
	cmd := exec.Command(goTool(t), "list", "-tags", "lambda.norpc", "-f", "{{.Name}}", ".")
	cmd.Dir = dir
	cmd.Env = buildEnv()
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %s error: %v", dir, err)
	}
	return strings.TrimSpace(string(b))
}

func TestFunctionsBuildForLambda(t *testing.T) {
	for _, name := range functionDirs(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join(repoRoot, "functions", name)
			if got, want := packageName(t, dir), "main"; got != want {
				t.Fatalf("package of functions/%s = %q, want %q", name, got, want)
			}
			checkBootstrap(t, build(t, dir))
		})
	}
}

func TestTemplateFunctionsHaveMainPackages(t *testing.T) {
	tpl := loadTemplate(t)
	dirs := functionDirs(t)
	var codeNames []string
	for _, f := range tpl.Functions() {
		codeNames = append(codeNames, filepath.Base(filepath.Clean(f.CodeDir)))
		t.Run(f.LogicalID, func(t *testing.T) {
			t.Parallel()
			if f.CodeDir == "" {
				t.Fatalf("%s has no CodeUri", f.LogicalID)
			}
			want := filepath.Join(repoRoot, "functions", filepath.Base(filepath.Clean(f.CodeDir)))
			if got := filepath.Clean(f.CodeDir); got != want {
				t.Errorf("%s CodeDir = %q, want %q (functions/<name>/)", f.LogicalID, got, want)
			}
			if got, want := packageName(t, f.CodeDir), "main"; got != want {
				t.Fatalf("package of %s's CodeUri %s = %q, want %q", f.LogicalID, f.CodeDir, got, want)
			}
			checkBootstrap(t, build(t, f.CodeDir))
		})
	}
	// A functions/<name> directory that no template function deploys is dead code (or a missing
	// resource); a template function without a directory does not build at all.
	slices.Sort(codeNames)
	if !slices.Equal(codeNames, dirs) {
		t.Errorf("template functions' code directories = %v, want functions/ directories %v", codeNames, dirs)
	}
}

// TestMakefileBuildsEveryTemplateFunction runs each build-<LogicalID> target as sam build does (with
// ARTIFACTS_DIR set) and checks it writes the function's own bootstrap there.
func TestMakefileBuildsEveryTemplateFunction(t *testing.T) {
	makefile, err := os.ReadFile(filepath.Join(repoRoot, "Makefile"))
	if err != nil {
		t.Fatalf("read Makefile: %v", err)
	}
	makeTool, err := exec.LookPath("make")
	if err != nil {
		t.Fatalf("LookPath(make) error: %v (sam build runs the Makefile's targets)", err)
	}
	tpl := loadTemplate(t)
	for _, f := range tpl.Functions() {
		t.Run(f.LogicalID, func(t *testing.T) {
			t.Parallel()
			target := "build-" + f.LogicalID
			if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(target) + `:`).Match(makefile) {
				t.Fatalf("Makefile has no target %s (template.yaml's %s uses BuildMethod makefile)", target, f.LogicalID)
			}
			if !regexp.MustCompile(`(?m)^\.PHONY:(?:[^\n]*\\\n)*[^\n]*\b` + regexp.QuoteMeta(target) + `\b`).Match(makefile) {
				t.Errorf("Makefile does not declare %s .PHONY: a file of that name would stop it from running", target)
			}
			artifacts := t.TempDir()
			dry := exec.Command(makeTool, "--no-print-directory", "-n", target, "ARTIFACTS_DIR="+artifacts)
			dry.Dir = repoRoot
			dry.Env = buildEnv()
			b, err := dry.CombinedOutput()
			if err != nil {
				t.Fatalf("make -n %s error: %v\n%s", target, err, b)
			}
			pkg := "./functions/" + filepath.Base(filepath.Clean(f.CodeDir))
			for _, want := range append([]string{"-tags lambda.norpc", "-trimpath", filepath.Join(artifacts, "bootstrap"), pkg}, lambdaEnv...) {
				if !strings.Contains(string(b), want) {
					t.Errorf("make -n %s = %q, want it to contain %q", target, b, want)
				}
			}

			run := exec.Command(makeTool, "--no-print-directory", target, "ARTIFACTS_DIR="+artifacts)
			run.Dir = repoRoot
			run.Env = buildEnv()
			if b, err := run.CombinedOutput(); err != nil {
				t.Fatalf("make %s error: %v\n%s", target, err, b)
			}
			checkBootstrap(t, filepath.Join(artifacts, "bootstrap"))

			// Without ARTIFACTS_DIR the target must refuse, not write /bootstrap.
			bare := exec.Command(makeTool, "--no-print-directory", target)
			bare.Dir = repoRoot
			bare.Env = buildEnv()
			if b, err := bare.CombinedOutput(); err == nil || !strings.Contains(string(b), "ARTIFACTS_DIR") {
				t.Errorf("make %s without ARTIFACTS_DIR = %v, %q, want an error naming ARTIFACTS_DIR", target, err, b)
			}
		})
	}
}
