package cfntemplate

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Rule is a rule of the template's Rules section: when RuleCondition holds (or there is none),
// each assertion must hold, or CloudFormation refuses the parameters before it creates or updates
// any resource (CloudFormation template reference, "Rule functions").
type Rule struct {
	Name       string
	condition  any
	assertions []assertion
}

type assertion struct {
	assert      any
	description string
}

func parseRules(top map[string]any, order []string) ([]Rule, error) {
	rules := asMap(top["Rules"])
	var out []Rule
	for _, name := range order {
		m := asMap(rules[name])
		r := Rule{Name: name, condition: m["RuleCondition"]}
		list, ok := m["Assertions"].([]any)
		if !ok || len(list) == 0 {
			return nil, fmt.Errorf("rule %s has no Assertions", name)
		}
		for _, a := range list {
			am := asMap(a)
			desc, _ := am["AssertDescription"].(string)
			r.assertions = append(r.assertions, assertion{assert: am["Assert"], description: desc})
		}
		out = append(out, r)
	}
	return out, nil
}

// Rules returns the template's rules in document order.
func (t *Template) Rules() []Rule { return slices.Clone(t.rules) }

// CheckRules evaluates the template's rules on parameter values (defaults for those not given),
// as CloudFormation does before it touches a resource, and returns every assertion that fails.
func (t *Template) CheckRules(values map[string]string) error {
	params := map[string]any{}
	for _, p := range t.params {
		v, ok := values[p.Name]
		if !ok {
			v = p.Default
		}
		if isListType(p.Type) {
			params[p.Name] = strings.Split(v, ",")
		} else {
			params[p.Name] = v
		}
	}
	var errs []error
	for _, r := range t.rules {
		if err := r.check(params); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (r Rule) check(params map[string]any) error {
	if r.condition != nil {
		applies, err := ruleBool(r.condition, params)
		if err != nil || !applies {
			return wrapRule(r.Name, err)
		}
	}
	for _, a := range r.assertions {
		ok, err := ruleBool(a.assert, params)
		if err != nil {
			return wrapRule(r.Name, err)
		}
		if !ok {
			return fmt.Errorf("rule %s: %s", r.Name, a.description)
		}
	}
	return nil
}

func wrapRule(name string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("rule %s: %w", name, err)
}

// ruleBool evaluates a rule-specific function: Fn::And, Fn::Or, Fn::Not, Fn::Equals, Fn::Contains,
// Fn::EachMemberEquals and Fn::EachMemberIn, over Ref of parameters and literals.
func ruleBool(v any, params map[string]any) (bool, error) {
	m, ok := v.(map[string]any)
	if !ok || len(m) != 1 {
		return false, fmt.Errorf("%v is not a rule function", v)
	}
	for fn, arg := range m {
		args, _ := arg.([]any)
		switch fn {
		case "Fn::And", "Fn::Or":
			return ruleAndOr(fn == "Fn::And", args, params)
		case "Fn::Not":
			if len(args) != 1 {
				return false, errors.New("Fn::Not takes one condition")
			}
			b, err := ruleBool(args[0], params)
			return !b, err
		}
		if len(args) != 2 {
			return false, fmt.Errorf("%s takes two arguments", fn)
		}
		a, err := ruleValue(args[0], params)
		if err != nil {
			return false, err
		}
		b, err := ruleValue(args[1], params)
		if err != nil {
			return false, err
		}
		return ruleCompare(fn, a, b)
	}
	return false, nil
}

func ruleAndOr(and bool, args []any, params map[string]any) (bool, error) {
	for _, c := range args {
		b, err := ruleBool(c, params)
		if err != nil {
			return false, err
		}
		if b != and {
			return b, nil
		}
	}
	return and, nil
}

func ruleCompare(fn string, a, b any) (bool, error) {
	as, aIsList := a.([]string)
	bs, bIsList := b.([]string)
	switch {
	case fn == "Fn::Equals" && !aIsList && !bIsList:
		return a == b, nil
	case fn == "Fn::Contains" && aIsList && !bIsList:
		return slices.Contains(as, b.(string)), nil
	case fn == "Fn::EachMemberEquals" && aIsList && !bIsList:
		for _, s := range as {
			if s != b.(string) {
				return false, nil
			}
		}
		return true, nil
	case fn == "Fn::EachMemberIn" && aIsList && bIsList:
		for _, s := range as {
			if !slices.Contains(bs, s) {
				return false, nil
			}
		}
		return true, nil
	}
	return false, fmt.Errorf("%s: unsupported function or arguments %v, %v", fn, a, b)
}

// ruleValue is a string or a list of strings: a literal (whose members may be Ref of string
// parameters), or Ref of a parameter.
func ruleValue(v any, params map[string]any) (any, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case []any:
		out := make([]string, len(x))
		for i, e := range x {
			v, err := ruleValue(e, params)
			if err != nil {
				return nil, err
			}
			s, ok := v.(string)
			if !ok {
				return nil, fmt.Errorf("list member %v is not a string", e)
			}
			out[i] = s
		}
		return out, nil
	case map[string]any:
		if name, ok := x["Ref"].(string); ok && len(x) == 1 {
			p, ok := params[name]
			if !ok {
				return nil, fmt.Errorf("Ref %s: rules see parameters only", name)
			}
			return p, nil
		}
	}
	return nil, fmt.Errorf("%v is not a string, a list or Ref of a parameter", v)
}
