package cfntemplate

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/dlclark/regexp2"
)

// Ref is the attribute name AttrFunc receives for !Ref of a resource.
const Ref = "Ref"

// AttrFunc returns an attribute of a resource the caller has created: attribute is Ref for
// !Ref (a queue's URL, a state machine's ARN, a table's or function's name) or the attribute
// of !GetAtt ("Arn", "QueueName", "Name", ...). ok is false when it is not known (yet).
type AttrFunc func(logicalID, attribute string) (value string, ok bool)

// Attributes is a ready AttrFunc store: logical ID -> attribute (Ref, Arn, ...) -> value.
// Record a resource's attributes once it is created; pass Lookup as Env.Attr.
type Attributes map[string]map[string]string

// Set records an attribute of a resource.
func (a Attributes) Set(logicalID, attribute, value string) {
	if a[logicalID] == nil {
		a[logicalID] = map[string]string{}
	}
	a[logicalID][attribute] = value
}

// Lookup is an AttrFunc over the recorded attributes.
func (a Attributes) Lookup(logicalID, attribute string) (string, bool) {
	v, ok := a[logicalID][attribute]
	return v, ok
}

// Env is what resolving the template needs besides the template.
type Env struct {
	// Parameters overrides parameter defaults, by parameter name. Values are checked against
	// the parameter's constraints; an unknown name is an error.
	Parameters map[string]string
	// Pseudo parameters; empty fields take DefaultStackName, DefaultRegion, DefaultAccountID
	// and DefaultPartition.
	StackName, Region, AccountID, Partition string
	// Attr returns attributes of resources created so far. Nil: no resource attribute is known.
	Attr AttrFunc
}

// Defaults of Env's pseudo parameters (123456789012 is the emulators' default account).
const (
	DefaultStackName = "sfnlimit"
	DefaultRegion    = "us-east-1"
	DefaultAccountID = "123456789012"
	DefaultPartition = "aws"
)

// Resolver evaluates the template's intrinsic functions for one set of parameter values.
// Resource attributes are asked of Env.Attr at the time of each call, so a caller can resolve
// resources one by one as it creates them. It is safe for concurrent use if Env.Attr is.
type Resolver struct {
	t      *Template
	params map[string]any // string, or []any of strings for list types
	pseudo map[string]string
	attr   AttrFunc
	conds  map[string]bool

	evaluating map[string]bool // conditions being evaluated while the resolver is built
}

// noValue is what AWS::NoValue evaluates to: the property or list item is dropped.
type noValueT struct{}

var noValue = noValueT{}

// Resolver checks the parameter overrides of env against the template's parameters and returns
// a resolver for them.
func (t *Template) Resolver(env Env) (*Resolver, error) {
	r := &Resolver{
		t:      t,
		params: map[string]any{},
		pseudo: map[string]string{
			"AWS::StackName": orDefault(env.StackName, DefaultStackName),
			"AWS::Region":    orDefault(env.Region, DefaultRegion),
			"AWS::AccountId": orDefault(env.AccountID, DefaultAccountID),
			"AWS::Partition": orDefault(env.Partition, DefaultPartition),
			"AWS::URLSuffix": "amazonaws.com",
		},
		attr:  env.Attr,
		conds: map[string]bool{},
	}
	r.pseudo["AWS::StackId"] = fmt.Sprintf("arn:%s:cloudformation:%s:%s:stack/%s/00000000-0000-0000-0000-000000000000",
		r.pseudo["AWS::Partition"], r.pseudo["AWS::Region"], r.pseudo["AWS::AccountId"], r.pseudo["AWS::StackName"])
	if r.attr == nil {
		r.attr = func(string, string) (string, bool) { return "", false }
	}

	var errs []error
	for name := range env.Parameters {
		if _, ok := t.Parameter(name); !ok {
			errs = append(errs, fmt.Errorf("parameter %s is not in the template", name))
		}
	}
	for _, p := range t.params {
		v, ok := env.Parameters[p.Name]
		if !ok {
			if !p.HasDefault {
				errs = append(errs, fmt.Errorf("parameter %s has no default and no value", p.Name))
				continue
			}
			v = p.Default
		}
		if err := p.Check(v); err != nil {
			errs = append(errs, err)
			continue
		}
		if isListType(p.Type) {
			items := []any{}
			for _, s := range strings.Split(v, ",") {
				items = append(items, s)
			}
			r.params[p.Name] = items
		} else {
			r.params[p.Name] = v
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if err := t.CheckRules(env.Parameters); err != nil {
		return nil, err
	}

	// Conditions depend on parameters only: evaluate them all now, so that a resolver is
	// read-only afterwards.
	names := make([]string, 0, len(t.conditions))
	for name := range t.conditions {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if _, err := r.condition(name, map[string]bool{}); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return r, nil
}

func isListType(typ string) bool {
	return typ == "CommaDelimitedList" || strings.HasPrefix(typ, "List<")
}

// Check reports whether v satisfies the parameter's constraints, as CloudFormation would.
func (p Parameter) Check(v string) error {
	if len(p.AllowedValues) > 0 && !slices.Contains(p.AllowedValues, v) {
		return fmt.Errorf("parameter %s: %q is not one of %q", p.Name, v, p.AllowedValues)
	}
	if p.AllowedPattern != "" {
		if err := p.matchPattern(v); err != nil {
			return err
		}
	}
	if p.MinLength != nil && len(v) < *p.MinLength {
		return fmt.Errorf("parameter %s: %q is shorter than %d", p.Name, v, *p.MinLength)
	}
	if p.MaxLength != nil && len(v) > *p.MaxLength {
		return fmt.Errorf("parameter %s: %q is longer than %d", p.Name, v, *p.MaxLength)
	}
	if p.Type == "Number" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return fmt.Errorf("parameter %s: %q is not a number", p.Name, v)
		}
		if p.MinValue != nil && f < *p.MinValue {
			return fmt.Errorf("parameter %s: %s is below MinValue %v", p.Name, v, *p.MinValue)
		}
		if p.MaxValue != nil && f > *p.MaxValue {
			return fmt.Errorf("parameter %s: %s is above MaxValue %v", p.Name, v, *p.MaxValue)
		}
	}
	return nil
}

// matchPattern checks v against AllowedPattern, which must match the whole value, or for a list
// type each of its members (CloudFormation, "Parameters" syntax). CloudFormation's patterns are
// Java regular expressions (CloudFormation User Guide, "Using regular expressions in CloudFormation
// templates", cfn-regexes.html), with lookahead and back-references that Go's regexp lacks:
// regexp2 reads those the same.
func (p Parameter) matchPattern(v string) error {
	re, err := regexp2.Compile(`^(?:`+p.AllowedPattern+`)$`, regexp2.None)
	if err != nil {
		return fmt.Errorf("parameter %s: AllowedPattern: %w", p.Name, err)
	}
	members := []string{v}
	if isListType(p.Type) {
		members = strings.Split(v, ",")
	}
	for _, m := range members {
		ok, err := re.MatchString(m)
		if err != nil {
			return fmt.Errorf("parameter %s: AllowedPattern: %w", p.Name, err)
		}
		if !ok {
			return fmt.Errorf("parameter %s: %q does not match %s", p.Name, m, p.AllowedPattern)
		}
	}
	return nil
}

// Value returns the resolved value of a parameter (for list types, joined with commas).
func (r *Resolver) Value(parameter string) (string, bool) {
	v, ok := r.params[parameter]
	if !ok {
		return "", false
	}
	if l, isList := v.([]any); isList {
		parts := make([]string, len(l))
		for i, s := range l {
			parts[i], _ = s.(string)
		}
		return strings.Join(parts, ","), true
	}
	s, _ := v.(string)
	return s, true
}

// Condition returns the value of a condition of the template's Conditions section.
func (r *Resolver) Condition(name string) (bool, error) {
	return r.condition(name, nil)
}

// condition evaluates a condition; evaluating is non-nil only while the resolver is being built
// (it holds the conditions being evaluated, to refuse a cycle).
func (r *Resolver) condition(name string, evaluating map[string]bool) (bool, error) {
	if v, ok := r.conds[name]; ok {
		return v, nil
	}
	def, ok := r.t.conditions[name]
	if !ok {
		return false, fmt.Errorf("condition %s is not in the template", name)
	}
	if evaluating == nil {
		return false, fmt.Errorf("condition %s could not be evaluated", name)
	}
	if evaluating[name] {
		return false, fmt.Errorf("condition %s refers to itself", name)
	}
	evaluating[name] = true
	defer delete(evaluating, name)
	prev := r.evaluating
	r.evaluating = evaluating
	v, err := r.eval(def)
	r.evaluating = prev
	if err != nil {
		return false, fmt.Errorf("condition %s: %w", name, err)
	}
	b, ok := v.(bool)
	if !ok {
		return false, fmt.Errorf("condition %s is not a boolean", name)
	}
	r.conds[name] = b
	return b, nil
}

// Eval resolves every intrinsic function in v, a value of the template (long form).
func (r *Resolver) Eval(v any) (any, error) {
	out, err := r.eval(v)
	if err != nil {
		return nil, err
	}
	if out == noValue {
		return nil, nil
	}
	return out, nil
}

func (r *Resolver) eval(v any) (any, error) {
	switch x := v.(type) {
	case map[string]any:
		if len(x) == 1 {
			for k, arg := range x {
				if fn, ok := intrinsics[k]; ok {
					out, err := fn(r, arg)
					if err != nil {
						return nil, fmt.Errorf("%s: %w", k, err)
					}
					return out, nil
				}
				if strings.HasPrefix(k, "Fn::") {
					return nil, fmt.Errorf("%s is not supported", k)
				}
			}
		}
		m := make(map[string]any, len(x))
		for k, e := range x {
			ev, err := r.eval(e)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", k, err)
			}
			if ev != noValue {
				m[k] = ev
			}
		}
		return m, nil
	case []any:
		l := make([]any, 0, len(x))
		for i, e := range x {
			ev, err := r.eval(e)
			if err != nil {
				return nil, fmt.Errorf("[%d]: %w", i, err)
			}
			if ev != noValue {
				l = append(l, ev)
			}
		}
		return l, nil
	default:
		return v, nil
	}
}

type intrinsic func(r *Resolver, arg any) (any, error)

var intrinsics map[string]intrinsic

func init() {
	intrinsics = map[string]intrinsic{
		"Ref":           (*Resolver).fnRef,
		"Condition":     (*Resolver).fnCondition,
		"Fn::GetAtt":    (*Resolver).fnGetAtt,
		"Fn::Sub":       (*Resolver).fnSub,
		"Fn::Join":      (*Resolver).fnJoin,
		"Fn::Select":    (*Resolver).fnSelect,
		"Fn::Split":     (*Resolver).fnSplit,
		"Fn::If":        (*Resolver).fnIf,
		"Fn::Equals":    (*Resolver).fnEquals,
		"Fn::Not":       (*Resolver).fnNot,
		"Fn::And":       (*Resolver).fnAnd,
		"Fn::Or":        (*Resolver).fnOr,
		"Fn::FindInMap": (*Resolver).fnFindInMap,
	}
}

func (r *Resolver) fnRef(arg any) (any, error) {
	name, ok := arg.(string)
	if !ok {
		return nil, errors.New("argument is not a name")
	}
	return r.ref(name)
}

// ref resolves a name as !Ref does: parameter, pseudo parameter or resource.
func (r *Resolver) ref(name string) (any, error) {
	if name == "AWS::NoValue" {
		return noValue, nil
	}
	if v, ok := r.params[name]; ok {
		return v, nil
	}
	if v, ok := r.pseudo[name]; ok {
		return v, nil
	}
	return r.getAtt(name, Ref)
}

func (r *Resolver) getAtt(id, attribute string) (string, error) {
	if v, ok := r.attr(id, attribute); ok {
		return v, nil
	}
	if _, ok := r.t.byID[id]; !ok {
		return "", fmt.Errorf("%s is neither a parameter nor a resource of the template", id)
	}
	what := "!GetAtt " + id + "." + attribute
	if attribute == Ref {
		what = "!Ref " + id
	}
	return "", fmt.Errorf("%s is not known: create %s first", what, id)
}

func (r *Resolver) fnGetAtt(arg any) (any, error) {
	var id, attribute string
	switch a := arg.(type) {
	case string:
		var ok bool
		if id, attribute, ok = strings.Cut(a, "."); !ok {
			return nil, fmt.Errorf("%q is not Resource.Attribute", a)
		}
	case []any:
		if len(a) != 2 {
			return nil, errors.New("want [Resource, Attribute]")
		}
		id, _ = a[0].(string)
		at, err := r.eval(a[1])
		if err != nil {
			return nil, err
		}
		attribute, _ = at.(string)
	}
	if id == "" || attribute == "" {
		return nil, errors.New("want [Resource, Attribute]")
	}
	return r.getAtt(id, attribute)
}

func (r *Resolver) fnCondition(arg any) (any, error) {
	name, ok := arg.(string)
	if !ok {
		return nil, errors.New("argument is not a condition name")
	}
	return r.condition(name, r.evaluating)
}

var subVar = regexp.MustCompile(`\$\{([^}]*)\}`)

func (r *Resolver) fnSub(arg any) (any, error) {
	var text string
	vars := map[string]any{}
	switch a := arg.(type) {
	case string:
		text = a
	case []any:
		if len(a) != 2 {
			return nil, errors.New("want a string or [string, {variables}]")
		}
		var ok bool
		if text, ok = a[0].(string); !ok {
			return nil, errors.New("first argument is not a string")
		}
		for k, v := range asMap(a[1]) {
			ev, err := r.eval(v)
			if err != nil {
				return nil, fmt.Errorf("variable %s: %w", k, err)
			}
			vars[k] = ev
		}
	default:
		return nil, errors.New("want a string or [string, {variables}]")
	}

	var firstErr error
	out := subVar.ReplaceAllStringFunc(text, func(m string) string {
		name := m[2 : len(m)-1]
		if strings.HasPrefix(name, "!") {
			return "${" + name[1:] + "}"
		}
		var v any
		var err error
		if vv, ok := vars[name]; ok {
			v = vv
		} else if id, attribute, ok := strings.Cut(name, "."); ok {
			v, err = r.getAtt(id, attribute)
		} else {
			v, err = r.ref(name)
		}
		if err == nil {
			var s string
			if s, err = scalarString(v); err == nil {
				return s
			}
		}
		if firstErr == nil {
			firstErr = fmt.Errorf("${%s}: %w", name, err)
		}
		return m
	})
	if firstErr != nil {
		return nil, firstErr
	}
	return out, nil
}

func (r *Resolver) args(arg any, n int) ([]any, error) {
	l, ok := arg.([]any)
	if !ok || len(l) != n {
		return nil, fmt.Errorf("want a list of %d arguments", n)
	}
	out := make([]any, n)
	for i, a := range l {
		v, err := r.eval(a)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

func (r *Resolver) fnJoin(arg any) (any, error) {
	a, err := r.args(arg, 2)
	if err != nil {
		return nil, err
	}
	delim, ok := a[0].(string)
	if !ok {
		return nil, errors.New("delimiter is not a string")
	}
	items, ok := a[1].([]any)
	if !ok {
		return nil, errors.New("second argument is not a list")
	}
	parts := make([]string, 0, len(items))
	for _, it := range items {
		s, err := scalarString(it)
		if err != nil {
			return nil, err
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, delim), nil
}

func (r *Resolver) fnSelect(arg any) (any, error) {
	a, err := r.args(arg, 2)
	if err != nil {
		return nil, err
	}
	i, err := toInt(a[0])
	if err != nil {
		return nil, fmt.Errorf("index: %w", err)
	}
	items, ok := a[1].([]any)
	if !ok {
		return nil, errors.New("second argument is not a list")
	}
	if i < 0 || i >= len(items) {
		return nil, fmt.Errorf("index %d out of range of %d items", i, len(items))
	}
	return items[i], nil
}

func (r *Resolver) fnSplit(arg any) (any, error) {
	a, err := r.args(arg, 2)
	if err != nil {
		return nil, err
	}
	delim, ok1 := a[0].(string)
	s, ok2 := a[1].(string)
	if !ok1 || !ok2 || delim == "" {
		return nil, errors.New("want [delimiter, string]")
	}
	parts := strings.Split(s, delim)
	out := make([]any, len(parts))
	for i, p := range parts {
		out[i] = p
	}
	return out, nil
}

func (r *Resolver) fnIf(arg any) (any, error) {
	l, ok := arg.([]any)
	if !ok || len(l) != 3 {
		return nil, errors.New("want [condition, value if true, value if false]")
	}
	name, ok := l[0].(string)
	if !ok {
		return nil, errors.New("first argument is not a condition name")
	}
	c, err := r.condition(name, r.evaluating)
	if err != nil {
		return nil, err
	}
	if c {
		return r.eval(l[1])
	}
	return r.eval(l[2])
}

func (r *Resolver) fnEquals(arg any) (any, error) {
	a, err := r.args(arg, 2)
	if err != nil {
		return nil, err
	}
	x, err1 := scalarString(a[0])
	y, err2 := scalarString(a[1])
	if err1 != nil || err2 != nil {
		return nil, errors.New("arguments are not scalars")
	}
	return x == y, nil
}

func (r *Resolver) fnNot(arg any) (any, error) {
	a, err := r.args(arg, 1)
	if err != nil {
		return nil, err
	}
	b, ok := a[0].(bool)
	if !ok {
		return nil, errors.New("argument is not a condition")
	}
	return !b, nil
}

func (r *Resolver) bools(arg any) ([]bool, error) {
	l, ok := arg.([]any)
	if !ok || len(l) < 2 {
		return nil, errors.New("want a list of at least 2 conditions")
	}
	out := make([]bool, len(l))
	for i, e := range l {
		v, err := r.eval(e)
		if err != nil {
			return nil, err
		}
		b, ok := v.(bool)
		if !ok {
			return nil, fmt.Errorf("[%d] is not a condition", i)
		}
		out[i] = b
	}
	return out, nil
}

func (r *Resolver) fnAnd(arg any) (any, error) {
	bs, err := r.bools(arg)
	if err != nil {
		return nil, err
	}
	return !slices.Contains(bs, false), nil
}

func (r *Resolver) fnOr(arg any) (any, error) {
	bs, err := r.bools(arg)
	if err != nil {
		return nil, err
	}
	return slices.Contains(bs, true), nil
}

func (r *Resolver) fnFindInMap(arg any) (any, error) {
	a, err := r.args(arg, 3)
	if err != nil {
		return nil, err
	}
	keys := make([]string, 3)
	for i, v := range a {
		if keys[i], err = scalarString(v); err != nil {
			return nil, err
		}
	}
	top, ok := r.t.mappings[keys[0]]
	if !ok {
		return nil, fmt.Errorf("mapping %s is not in the template", keys[0])
	}
	second, ok := asMap(top)[keys[1]]
	if !ok {
		return nil, fmt.Errorf("mapping %s has no key %s", keys[0], keys[1])
	}
	v, ok := asMap(second)[keys[2]]
	if !ok {
		return nil, fmt.Errorf("mapping %s.%s has no key %s", keys[0], keys[1], keys[2])
	}
	return v, nil
}

// references returns the logical IDs and parameter names v refers to (Ref, GetAtt, Sub).
func references(v any) []string {
	var out []string
	var walk func(any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				switch k {
				case "Ref":
					if s, ok := e.(string); ok {
						out = append(out, s)
					}
				case "Fn::GetAtt":
					switch a := e.(type) {
					case []any:
						if len(a) > 0 {
							if s, ok := a[0].(string); ok {
								out = append(out, s)
							}
						}
					case string:
						id, _, _ := strings.Cut(a, ".")
						out = append(out, id)
					}
				case "Fn::Sub":
					text, _ := e.(string)
					if l, ok := e.([]any); ok && len(l) > 0 {
						text, _ = l[0].(string)
					}
					for _, m := range subVar.FindAllStringSubmatch(text, -1) {
						if !strings.HasPrefix(m[1], "!") {
							id, _, _ := strings.Cut(m[1], ".")
							out = append(out, id)
						}
					}
				}
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(v)
	return out
}

func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

func isTrue(v any) bool {
	switch x := v.(type) {
	case bool:
		return x
	case string:
		return strings.EqualFold(x, "true")
	}
	return false
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// scalarString renders a resolved scalar as CloudFormation passes it to a string property.
func scalarString(v any) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case bool:
		return strconv.FormatBool(x), nil
	case int64:
		return strconv.FormatInt(x, 10), nil
	case int:
		return strconv.Itoa(x), nil
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64), nil
	case nil:
		return "", errors.New("value is null")
	default:
		return "", fmt.Errorf("value is a %T, not a scalar", v)
	}
}

func toFloat(v any) (float64, error) {
	switch x := v.(type) {
	case int64:
		return float64(x), nil
	case int:
		return float64(x), nil
	case float64:
		return x, nil
	case string:
		return strconv.ParseFloat(x, 64)
	}
	return 0, fmt.Errorf("%v is not a number", v)
}

func toInt(v any) (int, error) {
	f, err := toFloat(v)
	if err != nil {
		return 0, err
	}
	if f != math.Trunc(f) || math.Abs(f) > math.MaxInt32 {
		return 0, fmt.Errorf("%v is not a whole number", v)
	}
	return int(f), nil
}
