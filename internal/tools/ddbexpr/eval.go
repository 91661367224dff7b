package ddbexpr

import (
	"bytes"
	"fmt"
	"math/big"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Env is what a condition is evaluated against: the stored item (nil when there is none) and the
// request's ExpressionAttributeNames and ExpressionAttributeValues.
type Env struct {
	Item   map[string]types.AttributeValue
	Names  map[string]string
	Values map[string]types.AttributeValue
}

// Eval reports whether n holds for env, as DynamoDB evaluates it: a comparison with a missing
// attribute, or between values of different types, is false; numbers compare by value, strings and
// binaries by their bytes. An undefined placeholder is an error, as DynamoDB's ValidationException.
func Eval(n Node, env Env) (bool, error) {
	switch n := n.(type) {
	case Logic:
		return evalLogic(n, env)
	case Not:
		ok, err := Eval(n.X, env)
		return !ok, err
	case Paren:
		return Eval(n.X, env)
	case Compare:
		return evalCompare(n, env)
	case Func:
		return evalFunc(n, env)
	}
	return false, fmt.Errorf("ddbexpr: unknown node %T", n)
}

// evalLogic evaluates every term (so an undefined placeholder is an error wherever it is).
func evalLogic(n Logic, env Env) (bool, error) {
	and := n.Op == "AND"
	result := and
	for _, t := range n.Terms {
		ok, err := Eval(t, env)
		if err != nil {
			return false, err
		}
		if and {
			result = result && ok
		} else {
			result = result || ok
		}
	}
	return result, nil
}

func evalCompare(n Compare, env Env) (bool, error) {
	l, lok, err := env.operand(n.L)
	if err != nil {
		return false, err
	}
	r, rok, err := env.operand(n.R)
	if err != nil || !lok || !rok {
		return false, err
	}
	c, comparable, err := compare(l, r, n.Op == "=")
	if err != nil || !comparable {
		return false, err
	}
	switch n.Op {
	case "=":
		return c == 0, nil
	case "<":
		return c < 0, nil
	case "<=":
		return c <= 0, nil
	case ">":
		return c > 0, nil
	case ">=":
		return c >= 0, nil
	}
	return false, fmt.Errorf("ddbexpr: comparator %q", n.Op)
}

// compare orders two values of one type; comparable is false for values of different types. Only
// equality is defined for booleans; other types are refused.
func compare(a, b types.AttributeValue, equality bool) (c int, comparable bool, err error) {
	switch a := a.(type) {
	case *types.AttributeValueMemberS:
		b, ok := b.(*types.AttributeValueMemberS)
		if !ok {
			return 0, false, nil
		}
		return strings.Compare(a.Value, b.Value), true, nil
	case *types.AttributeValueMemberN:
		b, ok := b.(*types.AttributeValueMemberN)
		if !ok {
			return 0, false, nil
		}
		return compareNumbers(a.Value, b.Value)
	case *types.AttributeValueMemberB:
		b, ok := b.(*types.AttributeValueMemberB)
		if !ok {
			return 0, false, nil
		}
		return bytes.Compare(a.Value, b.Value), true, nil
	case *types.AttributeValueMemberBOOL:
		b, ok := b.(*types.AttributeValueMemberBOOL)
		if !equality {
			return 0, false, fmt.Errorf("ddbexpr: ordering booleans is not supported")
		}
		if !ok || a.Value != b.Value {
			return 1, ok, nil
		}
		return 0, true, nil
	}
	return 0, false, fmt.Errorf("ddbexpr: comparing %T is not supported", a)
}

func compareNumbers(a, b string) (int, bool, error) {
	x, ok1 := new(big.Rat).SetString(a)
	y, ok2 := new(big.Rat).SetString(b)
	if !ok1 || !ok2 {
		return 0, false, fmt.Errorf("ddbexpr: numbers %q and %q", a, b)
	}
	return x.Cmp(y), true, nil
}

func evalFunc(n Func, env Env) (bool, error) {
	v, ok, err := env.operand(n.Args[0])
	if err != nil {
		return false, err
	}
	switch n.Name {
	case "attribute_exists":
		return ok, nil
	case "attribute_not_exists":
		return !ok, nil
	case "begins_with":
		p, _, err := env.operand(n.Args[1])
		if err != nil || !ok {
			return false, err
		}
		return beginsWith(v, p), nil
	}
	return false, fmt.Errorf("ddbexpr: function %q", n.Name)
}

func beginsWith(v, prefix types.AttributeValue) bool {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		p, ok := prefix.(*types.AttributeValueMemberS)
		return ok && strings.HasPrefix(v.Value, p.Value)
	case *types.AttributeValueMemberB:
		p, ok := prefix.(*types.AttributeValueMemberB)
		return ok && bytes.HasPrefix(v.Value, p.Value)
	}
	return false
}

// operand resolves a placeholder (which must be defined) or an attribute of the item (ok false
// when the item lacks it).
func (env Env) operand(t string) (types.AttributeValue, bool, error) {
	switch t[0] {
	case ':':
		v, ok := env.Values[t]
		if !ok {
			return nil, false, fmt.Errorf("an expression attribute value used in expression is not defined: %s", t)
		}
		return v, true, nil
	case '#':
		name, ok := env.Names[t]
		if !ok {
			return nil, false, fmt.Errorf("an expression attribute name used in expression is not defined: %s", t)
		}
		t = name
	}
	v, ok := env.Item[t]
	return v, ok, nil
}
