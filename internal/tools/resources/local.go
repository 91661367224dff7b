package resources

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/BurntSushi/toml"

	"github.com/sfnlimit/sfnlimit/internal/tools/cfntemplate"
	"github.com/sfnlimit/sfnlimit/internal/tools/emulator"
	"github.com/sfnlimit/sfnlimit/internal/tools/samconfig"
)

// starterLogicalID is the template's starter function: its environment holds every default the
// command line shows (limits, attempts, state machine, cache time).
const starterLogicalID = "StarterFunction"

// localEnv resolves the local stack's starter environment from template.yaml, as the local stack
// itself does: the template's parameter defaults, then the parameters the stack runs with, then
// Options.Params. The info file that `local up` writes carries its parameters; an info file
// without them falls back to samconfig.toml, as `local up` reads it when given no --param or
// --limits. Resource values are not needed for the defaults; the state machine is the
// info file's SampleStateMachineArn.
func (t *Target) localEnv() (map[string]string, error) {
	params, err := t.localParams()
	if err != nil {
		return nil, err
	}
	root := t.opts.Root
	if root == "" {
		var err error
		if root, err = emulator.RepoRoot(); err != nil {
			return nil, fmt.Errorf("the local stack's defaults are read from template.yaml: run from the repository: %w", err)
		}
	}
	tpl, err := cfntemplate.Load(filepath.Join(root, "template.yaml"))
	if err != nil {
		return nil, fmt.Errorf("the local stack's defaults are read from template.yaml: %w", err)
	}
	r, err := tpl.Resolver(cfntemplate.Env{
		Parameters: params,
		// Only parameters matter here; every resource attribute stands in as a placeholder.
		Attr: func(id, attr string) (string, bool) { return "<" + id + "." + attr + ">", true },
	})
	if err != nil {
		return nil, fmt.Errorf("the local stack's parameters: %w", err)
	}
	for _, f := range tpl.Functions() {
		if f.LogicalID != starterLogicalID {
			continue
		}
		cfg, err := r.Function(f)
		if err != nil {
			return nil, err
		}
		env := cfg.Environment
		env["STATE_MACHINE_ARN"] = t.outputs[SampleStateMachineArn]
		return env, nil
	}
	return nil, fmt.Errorf("template.yaml has no %s", starterLogicalID)
}

// localParams are the parameters the local stack runs with: the info file's, or samconfig.toml's
// for an info file without them, then Options.Params.
func (t *Target) localParams() (map[string]string, error) {
	params := map[string]string{}
	if t.params != nil {
		for k, v := range t.params {
			params[k] = v
		}
	} else {
		p, err := samconfig.ParametersIfPresent(t.opts.Samconfig, t.opts.ConfigEnv)
		if err != nil {
			return nil, err
		}
		params = p
	}
	for k, v := range t.opts.Params {
		params[k] = v
	}
	return params, nil
}

// StackNameIfPresent returns the stack_name samconfig.toml deploys to ([env.deploy.parameters],
// else [env.global.parameters]), or DefaultStackName when the file or the setting is absent.
func StackNameIfPresent(path, env string) (string, error) {
	if path == "" {
		return DefaultStackName, nil
	}
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return DefaultStackName, nil
	}
	var doc map[string]any
	if _, err := toml.DecodeFile(path, &doc); err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	if env == "" {
		env = "default"
	}
	for _, cmd := range []string{"deploy", "global"} {
		if v, ok := table(table(table(doc[env])[cmd])["parameters"])["stack_name"]; ok {
			s, ok := v.(string)
			if !ok || s == "" {
				return "", fmt.Errorf("%s: %s.%s.parameters.stack_name is not a name", path, env, cmd)
			}
			return s, nil
		}
	}
	return DefaultStackName, nil
}

func table(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}
