// Package iampolicy checks whether a role's identity policies allow the AWS calls a function makes.
// It reads resolved policy documents (internal/tools/cfntemplate.Resolver.Policies), maps each SDK
// call to the IAM actions, resources and condition keys AWS authorizes it by (Requests), and
// evaluates them as IAM does for one account's identity policies: an explicit Deny wins, else an
// Allow is needed. Emulators either skip IAM (moto by default, fauxqs) or check only some of it, so
// this is what makes a missing action fail a test before a deployment (docs/emulators.md, "IAM").
//
// It understands the policy language the template uses: Action/NotAction, Resource/NotResource with
// * and ? wildcards, and the condition operators String(Not)Equals, String(Not)Like and Bool, with
// or without ForAllValues:/ForAnyValue:. Anything else is an error, never a silent allow or deny.
package iampolicy

import (
	"fmt"
	"sort"
	"strings"
)

// Request is one authorization IAM makes for a call: an action on a resource, with the request's
// condition keys (for example dynamodb:LeadingKeys).
type Request struct {
	Action   string
	Resource string
	Context  map[string][]string
}

func (r Request) String() string {
	s := r.Action + " on " + r.Resource
	if len(r.Context) > 0 {
		keys := make([]string, 0, len(r.Context))
		for k := range r.Context {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			s += fmt.Sprintf(" %s=%v", k, r.Context[k])
		}
	}
	return s
}

// Statement is one statement of a policy.
type Statement struct {
	Sid                 string
	Effect              string
	Action, NotAction   []string
	Resource            []string
	NotResource         []string
	Condition           map[string]map[string][]string // operator -> key -> values
	hasResource, hasNot bool
}

// Policy is a parsed policy document.
type Policy struct {
	Name       string
	Statements []Statement
}

// Parse reads a resolved policy document (maps and lists as decoded from JSON or YAML).
func Parse(name string, doc any) (Policy, error) {
	m, ok := doc.(map[string]any)
	if !ok {
		return Policy{}, fmt.Errorf("policy %s: document is %T, not an object", name, doc)
	}
	p := Policy{Name: name}
	sts := m["Statement"]
	if one, ok := sts.(map[string]any); ok {
		sts = []any{one}
	}
	list, ok := sts.([]any)
	if !ok {
		return Policy{}, fmt.Errorf("policy %s: Statement is %T", name, m["Statement"])
	}
	for i, s := range list {
		sm, ok := s.(map[string]any)
		if !ok {
			return Policy{}, fmt.Errorf("policy %s: Statement[%d] is %T", name, i, s)
		}
		st := Statement{Sid: fmt.Sprint(orEmpty(sm["Sid"])), Effect: fmt.Sprint(sm["Effect"])}
		if st.Effect != "Allow" && st.Effect != "Deny" {
			return Policy{}, fmt.Errorf("policy %s: Statement[%d]: Effect %q", name, i, st.Effect)
		}
		if _, ok := sm["Principal"]; ok {
			return Policy{}, fmt.Errorf("policy %s: Statement[%d] has a Principal: not an identity policy", name, i)
		}
		var err error
		if st.Action, err = strings1(sm["Action"]); err != nil {
			return Policy{}, fmt.Errorf("policy %s: Statement[%d] Action: %w", name, i, err)
		}
		if st.NotAction, err = strings1(sm["NotAction"]); err != nil {
			return Policy{}, fmt.Errorf("policy %s: Statement[%d] NotAction: %w", name, i, err)
		}
		if st.Resource, err = strings1(sm["Resource"]); err != nil {
			return Policy{}, fmt.Errorf("policy %s: Statement[%d] Resource: %w", name, i, err)
		}
		if st.NotResource, err = strings1(sm["NotResource"]); err != nil {
			return Policy{}, fmt.Errorf("policy %s: Statement[%d] NotResource: %w", name, i, err)
		}
		_, st.hasResource = sm["Resource"]
		_, st.hasNot = sm["NotResource"]
		if len(st.Action) == 0 && len(st.NotAction) == 0 {
			return Policy{}, fmt.Errorf("policy %s: Statement[%d] has no Action", name, i)
		}
		if !st.hasResource && !st.hasNot {
			return Policy{}, fmt.Errorf("policy %s: Statement[%d] has no Resource", name, i)
		}
		if c, ok := sm["Condition"]; ok {
			cm, ok := c.(map[string]any)
			if !ok {
				return Policy{}, fmt.Errorf("policy %s: Statement[%d] Condition is %T", name, i, c)
			}
			st.Condition = map[string]map[string][]string{}
			for op, kv := range cm {
				km, ok := kv.(map[string]any)
				if !ok {
					return Policy{}, fmt.Errorf("policy %s: Statement[%d] Condition %s is %T", name, i, op, kv)
				}
				st.Condition[op] = map[string][]string{}
				for k, v := range km {
					vals, err := strings1(v)
					if err != nil {
						return Policy{}, fmt.Errorf("policy %s: Statement[%d] Condition %s %s: %w", name, i, op, k, err)
					}
					st.Condition[op][k] = vals
				}
			}
		}
		p.Statements = append(p.Statements, st)
	}
	return p, nil
}

func orEmpty(v any) any {
	if v == nil {
		return ""
	}
	return v
}

func strings1(v any) ([]string, error) {
	switch x := v.(type) {
	case nil:
		return nil, nil
	case string:
		return []string{x}, nil
	case bool:
		return []string{fmt.Sprint(x)}, nil
	case []any:
		out := make([]string, 0, len(x))
		for _, e := range x {
			switch s := e.(type) {
			case string:
				out = append(out, s)
			case bool:
				out = append(out, fmt.Sprint(s))
			default:
				return nil, fmt.Errorf("%v is %T, not a string", e, e)
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("%v is %T, not a string or list of strings", v, v)
}

// Decision is the outcome of evaluating a request.
type Decision struct {
	Allowed bool
	// By names the statement that decided: the Deny that matched, or the first Allow.
	By string
}

// Decide evaluates req against the policies as IAM does within one account: an explicit Deny
// denies, else any Allow allows, else the request is implicitly denied.
func Decide(policies []Policy, req Request) (Decision, error) {
	var allow *Decision
	for _, p := range policies {
		for _, st := range p.Statements {
			ok, err := st.matches(req)
			if err != nil {
				return Decision{}, fmt.Errorf("policy %s statement %q: %w", p.Name, st.Sid, err)
			}
			if !ok {
				continue
			}
			by := p.Name + "/" + st.Sid
			if st.Effect == "Deny" {
				return Decision{Allowed: false, By: by}, nil
			}
			if allow == nil {
				allow = &Decision{Allowed: true, By: by}
			}
		}
	}
	if allow != nil {
		return *allow, nil
	}
	return Decision{}, nil
}

func (st Statement) matches(req Request) (bool, error) {
	// Action names are case-insensitive; resource ARNs are not.
	if len(st.Action) > 0 && !anyMatch(st.Action, req.Action, true) {
		return false, nil
	}
	if len(st.NotAction) > 0 && anyMatch(st.NotAction, req.Action, true) {
		return false, nil
	}
	if st.hasResource && !anyMatch(st.Resource, req.Resource, false) {
		return false, nil
	}
	if st.hasNot && anyMatch(st.NotResource, req.Resource, false) {
		return false, nil
	}
	for op, keys := range st.Condition {
		for key, want := range keys {
			ok, err := condition(op, want, req.Context[key], hasKey(req.Context, key))
			if err != nil {
				return false, fmt.Errorf("condition %s on %s: %w", op, key, err)
			}
			if !ok {
				return false, nil
			}
		}
	}
	return true, nil
}

func hasKey(ctx map[string][]string, key string) bool {
	_, ok := ctx[key]
	return ok
}

// condition evaluates one operator. Without a set qualifier the request must carry the key and one
// of its values must match (AWS: a single-valued key); ForAllValues: every request value matches
// one of the policy's (true when the request has no value: AWS documents this pitfall);
// ForAnyValue: at least one does.
func condition(op string, want, got []string, present bool) (bool, error) {
	qual := ""
	if q, rest, ok := strings.Cut(op, ":"); ok {
		qual, op = q, rest
	}
	ifExists := strings.HasSuffix(op, "IfExists")
	op = strings.TrimSuffix(op, "IfExists")
	var match func(pattern, value string) bool
	negate := false
	switch op {
	case "StringEquals":
		match = func(p, v string) bool { return p == v }
	case "StringNotEquals":
		match, negate = func(p, v string) bool { return p == v }, true
	case "StringLike":
		match = func(p, v string) bool { return wildcard(p, v, false) }
	case "StringNotLike":
		match, negate = func(p, v string) bool { return wildcard(p, v, false) }, true
	case "Bool":
		match = func(p, v string) bool { return strings.EqualFold(p, v) }
	default:
		return false, fmt.Errorf("operator %s is not understood by iampolicy", op)
	}
	one := func(v string) bool {
		for _, p := range want {
			if match(p, v) {
				return !negate
			}
		}
		return negate
	}
	switch qual {
	case "ForAllValues":
		for _, v := range got {
			if !one(v) {
				return false, nil
			}
		}
		return true, nil
	case "ForAnyValue":
		for _, v := range got {
			if one(v) {
				return true, nil
			}
		}
		return false, nil
	case "":
		if !present || len(got) == 0 {
			return ifExists || negate, nil
		}
		for _, v := range got {
			if one(v) {
				return true, nil
			}
		}
		return false, nil
	}
	return false, fmt.Errorf("set qualifier %s is not understood by iampolicy", qual)
}

func anyMatch(patterns []string, s string, fold bool) bool {
	for _, p := range patterns {
		if wildcard(p, s, fold) {
			return true
		}
	}
	return false
}

// wildcard matches s against an IAM pattern: * any run of characters, ? any one character.
func wildcard(p, s string, fold bool) bool {
	if fold {
		p, s = strings.ToLower(p), strings.ToLower(s)
	}
	// Iterative glob match with backtracking on the last star.
	pi, si, star, mark := 0, 0, -1, 0
	for si < len(s) {
		switch {
		case pi < len(p) && (p[pi] == '?' || p[pi] == s[si]):
			pi++
			si++
		case pi < len(p) && p[pi] == '*':
			star, mark = pi, si
			pi++
		case star >= 0:
			pi = star + 1
			mark++
			si = mark
		default:
			return false
		}
	}
	for pi < len(p) && p[pi] == '*' {
		pi++
	}
	return pi == len(p)
}

// Grant is one action of one Allow statement of a policy.
type Grant struct {
	Policy, Sid, Action string
}

func (g Grant) String() string { return g.Policy + "/" + g.Sid + " " + g.Action }

// Unused returns the grants of policies that allowed none of reqs: each action of each Allow
// statement that no request needed, with the statement's resources and conditions. A role should
// grant what its code calls and nothing more; an action a request matches by wildcard is used.
func Unused(policies []Policy, reqs []Request) ([]Grant, error) {
	var out []Grant
	for _, p := range policies {
		for _, st := range p.Statements {
			if st.Effect != "Allow" {
				continue
			}
			for _, a := range st.Action {
				used := false
				for _, r := range reqs {
					if !wildcard(a, r.Action, true) {
						continue
					}
					ok, err := st.matches(r)
					if err != nil {
						return nil, fmt.Errorf("policy %s statement %q: %w", p.Name, st.Sid, err)
					}
					if ok {
						used = true
						break
					}
				}
				if !used {
					out = append(out, Grant{Policy: p.Name, Sid: st.Sid, Action: a})
				}
			}
		}
	}
	return out, nil
}
