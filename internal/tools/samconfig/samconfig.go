// Package samconfig reads the template parameter values a samconfig.toml deploys with, so that the
// local stack runs with the same limits as `sam deploy` unless told otherwise.
package samconfig

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/BurntSushi/toml"
)

// Parameters returns the parameter_overrides of [env.deploy.parameters] (falling back to
// [env.global.parameters]) in samconfig.toml at path. SAM accepts them as one string
// ("A=1 B=\"x y\"") or as a list of "Name=Value" strings; both are read.
func Parameters(path, env string) (map[string]string, error) {
	var doc map[string]any
	if _, err := toml.DecodeFile(path, &doc); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	var raw any
	for _, cmd := range []string{"deploy", "global"} {
		if v, ok := table(table(table(doc[env])[cmd])["parameters"])["parameter_overrides"]; ok {
			raw = v
			break
		}
	}
	var items []string
	switch v := raw.(type) {
	case nil:
		return map[string]string{}, nil
	case string:
		var err error
		if items, err = split(v); err != nil {
			return nil, fmt.Errorf("%s: parameter_overrides: %w", path, err)
		}
	case []any:
		for _, x := range v {
			s, ok := x.(string)
			if !ok {
				return nil, fmt.Errorf("%s: parameter_overrides item %v is not a string", path, x)
			}
			items = append(items, s)
		}
	default:
		return nil, fmt.Errorf("%s: parameter_overrides is %T, want a string or a list", path, raw)
	}
	out := map[string]string{}
	for _, it := range items {
		k, v, ok := strings.Cut(it, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%s: parameter_overrides item %q is not Name=Value", path, it)
		}
		out[k] = unquote(v)
	}
	return out, nil
}

// ParametersIfPresent is Parameters, with no error and no parameters when the file does not exist.
func ParametersIfPresent(path, env string) (map[string]string, error) {
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return map[string]string{}, nil
	}
	return Parameters(path, env)
}

func unquote(v string) string {
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		return strings.ReplaceAll(v[1:len(v)-1], `\"`, `"`)
	}
	return v
}

// split cuts "A=1 B=\"x y\"" at spaces outside double quotes.
func split(s string) ([]string, error) {
	var out []string
	var cur strings.Builder
	quoted := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\' && i+1 < len(s) && s[i+1] == '"':
			cur.WriteString(`\"`)
			i++
		case c == '"':
			quoted = !quoted
			cur.WriteByte(c)
		case c == ' ' && !quoted:
			if cur.Len() > 0 {
				out = append(out, cur.String())
				cur.Reset()
			}
		default:
			cur.WriteByte(c)
		}
	}
	if quoted {
		return nil, fmt.Errorf("unclosed quote in %q", s)
	}
	if cur.Len() > 0 {
		out = append(out, cur.String())
	}
	return out, nil
}

func table(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

// BuildCached reports whether `sam build` runs with cached = true in [env.build.parameters]
// (falling back to [env.global.parameters]).
func BuildCached(path, env string) (bool, error) {
	var doc map[string]any
	if _, err := toml.DecodeFile(path, &doc); err != nil {
		return false, fmt.Errorf("read %s: %w", path, err)
	}
	for _, cmd := range []string{"build", "global"} {
		if v, ok := table(table(table(doc[env])[cmd])["parameters"])["cached"]; ok {
			b, isBool := v.(bool)
			if !isBool {
				return false, fmt.Errorf("%s: %s cached is %T, want true or false", path, cmd, v)
			}
			return b, nil
		}
	}
	return false, nil
}
