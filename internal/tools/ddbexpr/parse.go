// Package ddbexpr parses and evaluates the part of DynamoDB's condition expression grammar the
// limiter's writes use ("Condition and filter expressions, operators, and functions", DynamoDB
// Developer Guide):
//
//	condition ::= operand comparator operand
//	            | function
//	            | condition AND condition
//	            | condition OR condition
//	            | NOT condition
//	            | ( condition )
//	comparator ::= = | < | <= | > | >=
//	function   ::= attribute_exists(path) | attribute_not_exists(path) | begins_with(path, operand)
//	operand    ::= path | :value | #name
//
// with DynamoDB's precedence (comparisons and functions, then parentheses, NOT, AND, OR) and its
// keywords in any case. Anything else of the grammar (<>, BETWEEN, IN, size, contains,
// attribute_type, nested paths) is refused with an error, so that no expression is evaluated by a
// rule it does not follow. The in-memory table of internal/tools/fakes evaluates conditions with
// it, and the mutation check (internal/tools/mutate) removes one clause at a time from them.
package ddbexpr

import (
	"fmt"
	"strings"
)

// Node is a parsed condition.
type Node interface{ node() }

// Logic is a chain of conditions joined by one operator ("AND" or "OR"); a chain of two or more.
type Logic struct {
	Op    string
	Terms []Node
}

// Not negates a condition.
type Not struct{ X Node }

// Paren is a parenthesized condition (kept, so a condition prints as it was written).
type Paren struct{ X Node }

// Compare is operand comparator operand.
type Compare struct {
	Op   string
	L, R string
}

// Func is a function call: attribute_exists, attribute_not_exists or begins_with.
type Func struct {
	Name string
	Args []string
}

func (Logic) node()   {}
func (Not) node()     {}
func (Paren) node()   {}
func (Compare) node() {}
func (Func) node()    {}

// Parse parses a condition expression.
func Parse(expr string) (Node, error) {
	toks, err := lex(expr)
	if err != nil {
		return nil, fmt.Errorf("condition %q: %w", expr, err)
	}
	p := &parser{toks: toks}
	n, err := p.or()
	if err == nil && p.pos < len(p.toks) {
		err = fmt.Errorf("unexpected %q", p.toks[p.pos])
	}
	if err != nil {
		return nil, fmt.Errorf("condition %q: %w", expr, err)
	}
	return n, nil
}

// String prints a condition with single spaces, as the limiter writes them.
func String(n Node) string {
	switch n := n.(type) {
	case Logic:
		parts := make([]string, len(n.Terms))
		for i, t := range n.Terms {
			parts[i] = String(t)
		}
		return strings.Join(parts, " "+n.Op+" ")
	case Not:
		return "NOT " + String(n.X)
	case Paren:
		return "(" + String(n.X) + ")"
	case Compare:
		return n.L + " " + n.Op + " " + n.R
	case Func:
		return n.Name + "(" + strings.Join(n.Args, ", ") + ")"
	}
	panic(fmt.Sprintf("ddbexpr: unknown node %T", n))
}

type parser struct {
	toks []string
	pos  int
}

func (p *parser) peek() string {
	if p.pos < len(p.toks) {
		return p.toks[p.pos]
	}
	return ""
}

func (p *parser) next() string {
	t := p.peek()
	if t != "" {
		p.pos++
	}
	return t
}

func (p *parser) expect(t string) error {
	if got := p.next(); got != t {
		return fmt.Errorf("want %q, got %q", t, got)
	}
	return nil
}

func (p *parser) or() (Node, error)  { return p.chain("OR", p.and) }
func (p *parser) and() (Node, error) { return p.chain("AND", p.not) }

// chain parses sub (op sub)*, a Logic when there are two terms or more.
func (p *parser) chain(op string, sub func() (Node, error)) (Node, error) {
	first, err := sub()
	if err != nil {
		return nil, err
	}
	terms := []Node{first}
	for strings.EqualFold(p.peek(), op) {
		p.next()
		t, err := sub()
		if err != nil {
			return nil, err
		}
		terms = append(terms, t)
	}
	if len(terms) == 1 {
		return first, nil
	}
	return Logic{Op: op, Terms: terms}, nil
}

func (p *parser) not() (Node, error) {
	if strings.EqualFold(p.peek(), "NOT") {
		p.next()
		x, err := p.not()
		if err != nil {
			return nil, err
		}
		return Not{X: x}, nil
	}
	return p.primary()
}

func (p *parser) primary() (Node, error) {
	t := p.next()
	switch {
	case t == "(":
		x, err := p.or()
		if err != nil {
			return nil, err
		}
		return Paren{X: x}, p.expect(")")
	case t == "":
		return nil, fmt.Errorf("unexpected end")
	case p.peek() == "(":
		return p.call(t)
	case !isOperand(t):
		return nil, fmt.Errorf("unexpected %q", t)
	}
	op := p.next()
	switch op {
	case "=", "<", "<=", ">", ">=":
	default:
		return nil, fmt.Errorf("comparator %q after %q is not supported", op, t)
	}
	r := p.next()
	if !isOperand(r) {
		return nil, fmt.Errorf("want an operand after %q, got %q", op, r)
	}
	return Compare{Op: op, L: t, R: r}, nil
}

// call parses a function's arguments; name has been read, "(" is next.
func (p *parser) call(name string) (Node, error) {
	want := map[string]int{"attribute_exists": 1, "attribute_not_exists": 1, "begins_with": 2}[name]
	if want == 0 {
		return nil, fmt.Errorf("function %q is not supported", name)
	}
	p.next()
	var args []string
	for {
		a := p.next()
		if !isOperand(a) {
			return nil, fmt.Errorf("%s: want an operand, got %q", name, a)
		}
		args = append(args, a)
		if p.peek() != "," {
			break
		}
		p.next()
	}
	if len(args) != want {
		return nil, fmt.Errorf("%s takes %d arguments, got %d", name, want, len(args))
	}
	if strings.HasPrefix(args[0], ":") {
		return nil, fmt.Errorf("%s: the first argument must be a path, got %q", name, args[0])
	}
	return Func{Name: name, Args: args}, p.expect(")")
}

func isOperand(t string) bool {
	if t == "" || isKeyword(t) {
		return false
	}
	for i, r := range t {
		switch {
		case r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z':
		case r >= '0' && r <= '9' && i > 0:
		case (r == ':' || r == '#') && i == 0 && len(t) > 1:
		default:
			return false
		}
	}
	return true
}

func isKeyword(t string) bool {
	switch strings.ToUpper(t) {
	case "AND", "OR", "NOT", "BETWEEN", "IN":
		return true
	}
	return false
}

// lex splits an expression into words (names, placeholders, keywords) and symbols.
func lex(s string) ([]string, error) {
	var toks []string
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case strings.IndexByte("(),=", c) >= 0:
			toks = append(toks, s[i:i+1])
			i++
		case c == '<' || c == '>':
			j := i + 1
			if j < len(s) && (s[j] == '=' || c == '<' && s[j] == '>') {
				j++
			}
			toks = append(toks, s[i:j])
			i = j
		case c == ':' || c == '#' || c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			j := i + 1
			for j < len(s) && isWordByte(s[j]) {
				j++
			}
			toks = append(toks, s[i:j])
			i = j
		default:
			return nil, fmt.Errorf("unexpected %q at %d", c, i)
		}
	}
	return toks, nil
}

func isWordByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}
