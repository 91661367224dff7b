package samconfig_test

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/sfnlimit/sfnlimit/internal/tools/cfntemplate"
	"github.com/sfnlimit/sfnlimit/internal/tools/samconfig"
)

func TestParameters(t *testing.T) {
	tests := []struct {
		name    string
		give    string
		want    map[string]string
		wantErr bool
	}{
		{
			name: "list form",
			give: "version = 0.1\n[default.deploy.parameters]\nparameter_overrides = [\"TypeLimits=payments=2,llm=10\", \"TypeMaxAttempts=\\\"\\\"\", \"SweepSchedule=\\\"rate(5 minutes)\\\"\"]\n",
			want: map[string]string{"TypeLimits": "payments=2,llm=10", "TypeMaxAttempts": "", "SweepSchedule": "rate(5 minutes)"},
		},
		{
			name: "string form",
			give: "version = 0.1\n[default.deploy.parameters]\nparameter_overrides = \"TypeLimits=a=1 SweepSchedule=\\\"rate(1 minute)\\\" DefaultLimit=0\"\n",
			want: map[string]string{"TypeLimits": "a=1", "SweepSchedule": "rate(1 minute)", "DefaultLimit": "0"},
		},
		{
			name: "global section",
			give: "version = 0.1\n[default.global.parameters]\nparameter_overrides = [\"DefaultLimit=4\"]\n",
			want: map[string]string{"DefaultLimit": "4"},
		},
		{name: "none", give: "version = 0.1\n[default.deploy.parameters]\nstack_name = \"x\"\n", want: map[string]string{}},
		{name: "not name=value", give: "version = 0.1\n[default.deploy.parameters]\nparameter_overrides = [\"TypeLimits\"]\n", wantErr: true},
		{name: "unclosed quote", give: "version = 0.1\n[default.deploy.parameters]\nparameter_overrides = \"A=\\\"x\"\n", wantErr: true},
		{name: "not toml", give: "[[[", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "samconfig.toml")
			if err := os.WriteFile(p, []byte(tt.give), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := samconfig.Parameters(p, "default")
			if (err != nil) != tt.wantErr {
				t.Fatalf("Parameters() error = %v, wantErr %v", err, tt.wantErr)
			}
			if !tt.wantErr && !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Parameters() = %v, want %v", got, tt.want)
			}
		})
	}
}

// The project's own samconfig.toml is readable and sets the limits a deploy would use.
func TestProjectSamconfig(t *testing.T) {
	got, err := samconfig.Parameters("../../../samconfig.toml", "default")
	if err != nil {
		t.Fatal(err)
	}
	if got["TypeLimits"] == "" {
		t.Errorf("samconfig.toml sets no TypeLimits: %v", got)
	}
	if none, err := samconfig.ParametersIfPresent(filepath.Join(t.TempDir(), "absent.toml"), "default"); err != nil || len(none) != 0 {
		t.Errorf("ParametersIfPresent(absent) = %v, %v; want empty, nil", none, err)
	}
}

// `sam build --cached` rebuilds a function only when the checksum of its CodeUri folder changes
// (aws-sam-cli, samcli/lib/build/build_strategy.py: source_hash = dir_checksum(codeuri)). Each
// CodeUri here holds a thin main; the code is in internal/, outside it. So a cached build ships
// the previous binaries after any change to internal/: samconfig.toml must not enable it while a
// function imports this module's packages from outside its CodeUri.
func TestProjectBuildIsNotCachedOverCodeOutsideCodeUri(t *testing.T) {
	cached, err := samconfig.BuildCached("../../../samconfig.toml", "default")
	if err != nil {
		t.Fatal(err)
	}
	tpl, err := cfntemplate.Load("../../../template.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var outside []string
	for _, f := range tpl.Functions() {
		files, err := filepath.Glob(filepath.Join(f.CodeDir, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("%s: no Go files in CodeUri %s (%v)", f.LogicalID, f.CodeDir, err)
		}
		for _, file := range files {
			pf, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range pf.Imports {
				path := strings.Trim(imp.Path.Value, `"`)
				if strings.HasPrefix(path, module+"/") && !strings.HasPrefix(path, module+"/"+filepath.ToSlash(relToRoot(t, f.CodeDir))) {
					outside = append(outside, f.LogicalID+" imports "+path)
				}
			}
		}
	}
	if len(outside) == 0 {
		t.Fatal("no function imports code from outside its CodeUri: the test no longer checks its case")
	}
	if cached {
		t.Errorf("samconfig.toml builds with cached = true, but SAM hashes only each CodeUri and %s", strings.Join(outside, "; "))
	}
}

const module = "github.com/sfnlimit/sfnlimit"

func relToRoot(t *testing.T, dir string) string {
	t.Helper()
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(root, abs)
	if err != nil {
		t.Fatal(err)
	}
	return rel
}

func TestBuildCached(t *testing.T) {
	for _, tt := range []struct {
		give    string
		want    bool
		wantErr bool
	}{
		{give: "[default.build.parameters]\ncached = true\n", want: true},
		{give: "[default.build.parameters]\nparallel = true\n"},
		{give: "[default.global.parameters]\ncached = true\n", want: true},
		{give: "[default.build.parameters]\ncached = \"yes\"\n", wantErr: true},
	} {
		p := filepath.Join(t.TempDir(), "samconfig.toml")
		if err := os.WriteFile(p, []byte("version = 0.1\n"+tt.give), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := samconfig.BuildCached(p, "default")
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("BuildCached(%q) = %v, %v; want %v, error %v", tt.give, got, err, tt.want, tt.wantErr)
		}
	}
}
