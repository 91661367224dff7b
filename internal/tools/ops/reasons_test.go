package ops

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// Every Reason* string constant of the packages that write dead letters is in Reasons: the list
// names the constants, and this reads the packages' source to see that none was left out.
func TestReasonsAreEveryConstant(t *testing.T) {
	var found []string
	for _, dir := range []string{"../../lambda/job", "../../lambda/deadletter", "../../lambda/starter", "../../lambda/releaser", "."} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			file, err := parser.ParseFile(token.NewFileSet(), f, src, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range file.Decls {
				g, ok := d.(*ast.GenDecl)
				if !ok || g.Tok != token.CONST {
					continue
				}
				for _, spec := range g.Specs {
					vs := spec.(*ast.ValueSpec)
					for i, name := range vs.Names {
						if !strings.HasPrefix(name.Name, "Reason") || i >= len(vs.Values) {
							continue
						}
						lit, ok := vs.Values[i].(*ast.BasicLit)
						if !ok || lit.Kind != token.STRING {
							continue
						}
						v, _ := strconv.Unquote(lit.Value)
						found = append(found, v)
						if !slices.Contains(Reasons, v) {
							t.Errorf("%s: %s = %q is not in ops.Reasons", f, name.Name, v)
						}
					}
				}
			}
		}
	}
	if len(found) < 10 {
		t.Errorf("found %d reason constants (%v), want every one of the four packages' (the source moved?)", len(found), found)
	}
	for _, r := range Reasons {
		if !slices.Contains(found, r) {
			t.Errorf("ops.Reasons has %q, which no Reason constant holds", r)
		}
	}
}

func TestValidateReasons(t *testing.T) {
	tests := []struct {
		give    []string
		wantErr bool
	}{
		{give: nil},
		{give: []string{"attempts_exhausted", "unknown_type", "aborted", "receive_count_exceeded", "start_refused"}},
		{give: []string{"nonsense"}, wantErr: true},
		{give: []string{"aborted", "Aborted"}, wantErr: true},
	}
	for _, tt := range tests {
		err := ValidateReasons(tt.give)
		if (err != nil) != tt.wantErr {
			t.Errorf("ValidateReasons(%v) = %v, want error: %v", tt.give, err, tt.wantErr)
		}
		var ue UsageError
		if err != nil && (!errors.As(err, &ue) || !strings.Contains(err.Error(), "attempts_exhausted")) {
			t.Errorf("ValidateReasons(%v) = %v, want a usage error that names the known reasons", tt.give, err)
		}
	}
}
