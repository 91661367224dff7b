package functions_test

import (
	"bufio"
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The layout of internal/: internal/lambda holds the code the functions deploy, internal/tools the
// code that runs on a developer's or operator's machine (the command line, the local stack, the
// demo and simulators, test helpers). Tools may import the limiter's code, never the reverse.
const (
	deployedDir = "internal/lambda"
	toolsDir    = "internal/tools"
)

// sdkPrefixes are the modules a function's main may import besides internal/lambda and the
// standard library.
var sdkPrefixes = []string{
	"github.com/aws/aws-lambda-go/",
	"github.com/aws/aws-sdk-go-v2",
	"github.com/aws/smithy-go",
}

// goPackage is a directory's Go files as the layout check sees them: the imports of its non-test
// files (what a binary links) and of its test files, by file.
type goPackage struct {
	dir         string              // slash-separated, relative to the module root
	imports     map[string][]string // import path -> non-test files importing it
	testImports map[string][]string // import path -> _test.go files importing it
}

// readModule parses the imports of every Go file under root (build constraints ignored, so a
// file for another platform counts too), skipping testdata, node_modules and hidden directories.
func readModule(root string) (module string, pkgs map[string]*goPackage, err error) {
	module, err = modulePath(filepath.Join(root, "go.mod"))
	if err != nil {
		return "", nil, err
	}
	pkgs = map[string]*goPackage{}
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p != root && (name == "testdata" || name == "node_modules" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.ImportsOnly)
		if err != nil {
			return fmt.Errorf("parse imports: %w", err)
		}
		rel, err := filepath.Rel(root, filepath.Dir(p))
		if err != nil {
			return err
		}
		dir := filepath.ToSlash(rel)
		pkg := pkgs[dir]
		if pkg == nil {
			pkg = &goPackage{dir: dir, imports: map[string][]string{}, testImports: map[string][]string{}}
			pkgs[dir] = pkg
		}
		into := pkg.imports
		if strings.HasSuffix(name, "_test.go") {
			into = pkg.testImports
		}
		for _, spec := range f.Imports {
			imp, err := strconv.Unquote(spec.Path.Value)
			if err != nil {
				return fmt.Errorf("%s: import %s: %w", p, spec.Path.Value, err)
			}
			into[imp] = append(into[imp], name)
		}
		return nil
	})
	if err != nil {
		return "", nil, fmt.Errorf("read %s: %w", root, err)
	}
	return module, pkgs, nil
}

func modulePath(goMod string) (string, error) {
	f, err := os.Open(goMod)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`), nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("read %s: %w", goMod, err)
	}
	return "", fmt.Errorf("%s has no module line", goMod)
}

func under(dir, parent string) bool { return dir == parent || strings.HasPrefix(dir, parent+"/") }

// checkLayout returns what breaks the layout rules in the module at root:
//   - a non-test file under internal/lambda imports a package of this module outside it (the
//     deployed code links none of the tooling);
//   - a function's main package imports anything but internal/lambda, the standard library and the
//     AWS SDKs (the mains stay thin);
//   - a package under internal/lambda is one that no function imports, directly or not (it is
//     tooling, or dead code).
//
// Test files under internal/lambda may import internal/tools (fakes, moto, the template reader):
// they run on a developer's machine and are not linked into a function.
func checkLayout(root string) ([]string, error) {
	module, pkgs, err := readModule(root)
	if err != nil {
		return nil, err
	}
	importPath := func(dir string) string { return path.Join(module, dir) }
	dirOf := func(imp string) (string, bool) {
		if imp == module {
			return ".", true
		}
		rest, ok := strings.CutPrefix(imp, module+"/")
		return rest, ok
	}
	var problems []string
	var functions, deployed []string
	for dir := range pkgs {
		switch {
		case path.Dir(dir) == "functions":
			functions = append(functions, dir)
		case under(dir, deployedDir):
			deployed = append(deployed, dir)
		}
	}
	slices.Sort(functions)
	slices.Sort(deployed)
	if len(functions) == 0 {
		problems = append(problems, "no Go package under functions/: nothing to check the layout against")
	}
	if len(deployed) == 0 {
		problems = append(problems, "no Go package under "+deployedDir+"/")
	}

	for _, dir := range deployed {
		for _, imp := range sortedKeys(pkgs[dir].imports) {
			if to, ok := dirOf(imp); ok && !under(to, deployedDir) {
				problems = append(problems, fmt.Sprintf("%s (%s) imports %s: code under %s/ is deployed and may import only packages under it; move what it needs there (tools may import %s, never the reverse)",
					dir, strings.Join(pkgs[dir].imports[imp], ", "), to, deployedDir, deployedDir))
			}
		}
	}

	for _, dir := range functions {
		for _, imp := range sortedKeys(pkgs[dir].imports) {
			to, inModule := dirOf(imp)
			switch {
			case inModule && under(to, deployedDir):
			case inModule:
				problems = append(problems, fmt.Sprintf("%s (%s) imports %s: a function's main may import only %s/, the standard library and the AWS SDKs",
					dir, strings.Join(pkgs[dir].imports[imp], ", "), to, deployedDir))
			case !strings.Contains(strings.SplitN(imp, "/", 2)[0], "."): // standard library
			case slices.ContainsFunc(sdkPrefixes, func(p string) bool { return strings.HasPrefix(imp, p) }):
			default:
				problems = append(problems, fmt.Sprintf("%s (%s) imports %s: a function's main may import only %s/, the standard library and the AWS SDKs",
					dir, strings.Join(pkgs[dir].imports[imp], ", "), imp, deployedDir))
			}
		}
	}

	// Every package under internal/lambda must be linked into some function.
	reached := map[string]bool{}
	queue := slices.Clone(functions)
	for len(queue) > 0 {
		dir := queue[0]
		queue = queue[1:]
		if reached[dir] {
			continue
		}
		reached[dir] = true
		if pkg := pkgs[dir]; pkg != nil {
			for imp := range pkg.imports {
				if to, ok := dirOf(imp); ok {
					queue = append(queue, to)
				}
			}
		}
	}
	for _, dir := range deployed {
		if !reached[dir] {
			problems = append(problems, fmt.Sprintf("%s is under %s/ but no function imports it (%s): code that only tools use belongs under %s/",
				dir, deployedDir, importPath(dir), toolsDir))
		}
	}
	return problems, nil
}

func sortedKeys(m map[string][]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// TestLayout checks this repository: see checkLayout.
func TestLayout(t *testing.T) {
	problems, err := checkLayout(repoRoot)
	if err != nil {
		t.Fatalf("checkLayout(%s) error: %v", repoRoot, err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// TestCheckLayout runs checkLayout on small modules, each breaking one rule or none.
func TestCheckLayout(t *testing.T) {
	base := map[string]string{
		"go.mod":                      "module example.com/m\n\ngo 1.22\n",
		"functions/f/main.go":         "package main\n\nimport (\n\t\"os\"\n\n\t\"github.com/aws/aws-lambda-go/lambda\"\n\t\"example.com/m/internal/lambda/a\"\n)\n\nfunc main() { _ = os.Args; lambda.Start(a.H) }\n",
		"internal/lambda/a/a.go":      "package a\n\nimport \"example.com/m/internal/lambda/b\"\n\nvar H = b.H\n",
		"internal/lambda/a/a_test.go": "package a\n\nimport \"example.com/m/internal/tools/fake\"\n\nvar _ = fake.X\n",
		"internal/lambda/b/b.go":      "package b\n\nfunc H() {}\n",
		"internal/tools/fake/fake.go": "package fake\n\nimport \"example.com/m/internal/lambda/b\"\n\nvar X = b.H\n",
		"cmd/c/main.go":               "package main\n\nimport \"example.com/m/internal/tools/fake\"\n\nfunc main() { _ = fake.X }\n",
	}
	tests := []struct {
		name  string
		files map[string]string // added to base; "" deletes
		want  []string          // substrings, one problem each
	}{
		{name: "clean", want: nil},
		{
			name:  "deployed imports tools",
			files: map[string]string{"internal/lambda/b/b.go": "package b\n\nimport \"example.com/m/internal/tools/fake\"\n\nvar _ = fake.X\n\nfunc H() {}\n"},
			want:  []string{"internal/lambda/b (b.go) imports internal/tools/fake"},
		},
		{
			name:  "deployed imports another folder of the module",
			files: map[string]string{"internal/lambda/b/b.go": "package b\n\nimport \"example.com/m/internal/misc\"\n\nvar _ = misc.X\n\nfunc H() {}\n", "internal/misc/misc.go": "package misc\n\nvar X int\n"},
			want:  []string{"internal/lambda/b (b.go) imports internal/misc"},
		},
		{
			name:  "main imports tools",
			files: map[string]string{"functions/g/main.go": "package main\n\nimport (\n\t\"example.com/m/internal/lambda/a\"\n\t\"example.com/m/internal/tools/fake\"\n)\n\nfunc main() { _, _ = a.H, fake.X }\n"},
			want:  []string{"functions/g (main.go) imports internal/tools/fake"},
		},
		{
			name:  "main imports a third-party module",
			files: map[string]string{"functions/g/main.go": "package main\n\nimport \"github.com/spf13/cobra\"\n\nfunc main() { _ = cobra.Command{} }\n"},
			want:  []string{"functions/g (main.go) imports github.com/spf13/cobra"},
		},
		{
			name:  "deployed package no function imports",
			files: map[string]string{"internal/lambda/c/c.go": "package c\n\nimport \"example.com/m/internal/lambda/b\"\n\nvar X = b.H\n"},
			want:  []string{"internal/lambda/c is under internal/lambda/ but no function imports it"},
		},
		{
			name:  "no functions",
			files: map[string]string{"functions/f/main.go": ""},
			want:  []string{"no Go package under functions/", "internal/lambda/a is under", "internal/lambda/b is under"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			files := map[string]string{}
			for name, text := range base {
				files[name] = text
			}
			for name, text := range tt.files {
				files[name] = text
			}
			for name, text := range files {
				if text == "" {
					continue
				}
				p := filepath.Join(root, filepath.FromSlash(name))
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, err := checkLayout(root)
			if err != nil {
				t.Fatalf("checkLayout error: %v", err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("checkLayout = %d problems %q, want %d matching %q", len(got), got, len(tt.want), tt.want)
			}
			for i, want := range tt.want {
				if !strings.Contains(got[i], want) {
					t.Errorf("problem %d = %q, want it to contain %q", i, got[i], want)
				}
			}
		})
	}
}
