package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/sfnlimit/sfnlimit/internal/tools/ddbexpr"
)

// Targets are the packages whose conditional writes the check mutates: the leases, the park
// records and the batch ledger; batchend writes through the ledger and has no condition of its own,
// but is scanned so that one added there is not missed.
var Targets = []string{
	"internal/lambda/lease",
	"internal/lambda/waitroom",
	"internal/lambda/batch",
	"internal/lambda/batchend",
}

// Mutation is one condition of one write with one clause removed.
type Mutation struct {
	File      string // absolute path of the Go file
	Rel       string // File relative to the module root
	Line      int
	Condition string // the condition as written
	Removed   string // the clause removed
	Mutated   string // the condition left; "" when none is left (the write is unconditional)
	// Start and End are the byte offsets of the ConditionExpression's value in File, and
	// Replacement the Go expression put in their place.
	Start, End  int
	Replacement string
}

// Name is the mutation's short name: file:line -clause.
func (m Mutation) Name() string {
	return fmt.Sprintf("%s:%d -[%s]", filepath.Base(m.File), m.Line, m.Removed)
}

// Enumerate returns every mutation of the conditional writes in the target packages under root,
// in file and line order.
func Enumerate(root string, targets []string) ([]Mutation, error) {
	var out []Mutation
	for _, dir := range targets {
		ms, err := enumeratePackage(root, dir)
		if err != nil {
			return nil, err
		}
		out = append(out, ms...)
	}
	return out, nil
}

// site is one ConditionExpression value in a file.
type site struct {
	expr ast.Expr
	file *ast.File
}

func enumeratePackage(root, dir string) ([]Mutation, error) {
	fset := token.NewFileSet()
	files, err := parsePackage(fset, filepath.Join(root, dir))
	if err != nil {
		return nil, err
	}
	consts := stringConsts(files)
	var out []Mutation
	for _, f := range files {
		for _, s := range conditionSites(f) {
			ms, err := mutationsAt(fset, root, s, consts)
			if err != nil {
				return nil, err
			}
			out = append(out, ms...)
		}
	}
	return out, nil
}

// parsePackage parses a directory's non-test Go files, sorted by name.
func parsePackage(fset *token.FileSet, dir string) ([]*ast.File, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	sort.Strings(names)
	var files []*ast.File
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, fmt.Errorf("parse %s: %w", name, err)
		}
		files = append(files, f)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no Go files in %s", dir)
	}
	return files, nil
}

// stringConsts maps each package-level string constant of files to its value.
func stringConsts(files []*ast.File) map[string]string {
	out := map[string]string{}
	for _, f := range files {
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, spec := range g.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if i >= len(vs.Values) {
						continue
					}
					if v, ok := stringLit(vs.Values[i]); ok {
						out[name.Name] = v
					}
				}
			}
		}
	}
	return out
}

func stringLit(e ast.Expr) (string, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	v, err := strconv.Unquote(lit.Value)
	return v, err == nil
}

// conditionSites finds every value given to a ConditionExpression field: in a composite literal
// (ConditionExpression: v) or assigned (x.ConditionExpression = v).
func conditionSites(f *ast.File) []site {
	var out []site
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.KeyValueExpr:
			if id, ok := n.Key.(*ast.Ident); ok && id.Name == "ConditionExpression" {
				out = append(out, site{expr: n.Value, file: f})
			}
		case *ast.AssignStmt:
			for i, lhs := range n.Lhs {
				if sel, ok := lhs.(*ast.SelectorExpr); ok && sel.Sel.Name == "ConditionExpression" && i < len(n.Rhs) {
					out = append(out, site{expr: n.Rhs[i], file: f})
				}
			}
		}
		return true
	})
	return out
}

// mutationsAt returns one mutation per clause of the condition at s.
func mutationsAt(fset *token.FileSet, root string, s site, consts map[string]string) ([]Mutation, error) {
	pos := fset.Position(s.expr.Pos())
	cond, err := conditionText(s.expr, consts)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", pos, err)
	}
	node, err := ddbexpr.Parse(cond)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", pos, err)
	}
	rel, err := filepath.Rel(root, pos.Filename)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", pos, err)
	}
	var out []Mutation
	for _, r := range Removals(node) {
		m := Mutation{
			File: pos.Filename, Rel: rel, Line: pos.Line, Condition: cond, Removed: r.Clause,
			Start: pos.Offset, End: fset.Position(s.expr.End()).Offset, Replacement: "nil",
		}
		if r.Left != nil {
			m.Mutated = ddbexpr.String(r.Left)
			m.Replacement = "aws.String(" + strconv.Quote(m.Mutated) + ")"
		}
		out = append(out, m)
	}
	return out, nil
}

// conditionText is the condition a ConditionExpression value writes: aws.String of a string
// literal or of a package-level string constant. Any other shape is an error, so that the check
// cannot skip a condition it does not understand.
func conditionText(e ast.Expr, consts map[string]string) (string, error) {
	call, ok := e.(*ast.CallExpr)
	if !ok || len(call.Args) != 1 {
		return "", fmt.Errorf("ConditionExpression is not aws.String(...)")
	}
	if sel, ok := call.Fun.(*ast.SelectorExpr); !ok || sel.Sel.Name != "String" {
		return "", fmt.Errorf("ConditionExpression is not aws.String(...)")
	}
	if v, ok := stringLit(call.Args[0]); ok {
		return v, nil
	}
	if id, ok := call.Args[0].(*ast.Ident); ok {
		if v, ok := consts[id.Name]; ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("ConditionExpression: the argument of aws.String is neither a string literal nor a string constant of the package")
}

// Overlay writes m's mutated copy of its file into dir and the overlay file that maps the original
// to it (go build -overlay), and returns the overlay file's path.
func Overlay(m Mutation, dir string) (string, error) {
	src, err := os.ReadFile(m.File)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", m.File, err)
	}
	if m.Start < 0 || m.End > len(src) || m.Start > m.End {
		return "", fmt.Errorf("%s: offsets %d-%d outside the file", m.File, m.Start, m.End)
	}
	mutated := append(append(append([]byte{}, src[:m.Start]...), m.Replacement...), src[m.End:]...)
	copyPath := filepath.Join(dir, filepath.Base(m.File))
	if err := os.WriteFile(copyPath, mutated, 0o644); err != nil {
		return "", fmt.Errorf("write the mutated copy: %w", err)
	}
	overlay := fmt.Sprintf("{\"Replace\": {%s: %s}}\n", strconv.Quote(m.File), strconv.Quote(copyPath))
	path := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(path, []byte(overlay), 0o644); err != nil {
		return "", fmt.Errorf("write the overlay: %w", err)
	}
	return path, nil
}
