package main

import "github.com/sfnlimit/sfnlimit/internal/tools/ddbexpr"

// Removal is a condition with one clause removed.
type Removal struct {
	Clause string       // the clause removed, as written
	Left   ddbexpr.Node // what is left of the condition; nil when nothing is (one clause)
}

// Removals returns one Removal per clause of n: each term of an AND or OR chain (a parenthesized
// group as a whole, and each term of the chain inside it), or n itself when it is one clause. A
// NOT is one clause: removing a term under it would invert what the term did, not drop it.
func Removals(n ddbexpr.Node) []Removal {
	if _, ok := chainOf(n); !ok {
		return []Removal{{Clause: ddbexpr.String(n)}}
	}
	return removalsIn(n, func(x ddbexpr.Node) ddbexpr.Node { return x })
}

// chainOf returns the AND or OR chain n is, or holds within parentheses.
func chainOf(n ddbexpr.Node) (ddbexpr.Logic, bool) {
	for {
		switch x := n.(type) {
		case ddbexpr.Logic:
			return x, true
		case ddbexpr.Paren:
			n = x.X
		default:
			return ddbexpr.Logic{}, false
		}
	}
}

// removalsIn returns the removals within the chain n; wrap rebuilds the whole condition around
// what is left of n.
func removalsIn(n ddbexpr.Node, wrap func(ddbexpr.Node) ddbexpr.Node) []Removal {
	if p, ok := n.(ddbexpr.Paren); ok {
		return removalsIn(p.X, func(x ddbexpr.Node) ddbexpr.Node { return wrap(ddbexpr.Paren{X: x}) })
	}
	chain, ok := n.(ddbexpr.Logic)
	if !ok {
		return nil
	}
	var out []Removal
	for i, term := range chain.Terms {
		out = append(out, Removal{Clause: ddbexpr.String(term), Left: wrap(without(chain, i))})
		if _, ok := chainOf(term); ok {
			out = append(out, removalsIn(term, func(x ddbexpr.Node) ddbexpr.Node { return wrap(with(chain, i, x)) })...)
		}
	}
	return out
}

// without is chain without its term i: the one term left when there were two.
func without(chain ddbexpr.Logic, i int) ddbexpr.Node {
	terms := append(append([]ddbexpr.Node{}, chain.Terms[:i]...), chain.Terms[i+1:]...)
	if len(terms) == 1 {
		return terms[0]
	}
	return ddbexpr.Logic{Op: chain.Op, Terms: terms}
}

// with is chain with its term i replaced by x.
func with(chain ddbexpr.Logic, i int, x ddbexpr.Node) ddbexpr.Node {
	terms := append([]ddbexpr.Node{}, chain.Terms...)
	terms[i] = x
	return ddbexpr.Logic{Op: chain.Op, Terms: terms}
}
