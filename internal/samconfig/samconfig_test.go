package samconfig_test

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/sfnlimit/sfnlimit/internal/samconfig"
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
	got, err := samconfig.Parameters("../../samconfig.toml", "default")
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
