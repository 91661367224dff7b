package ops

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
)

// knownTypes are the types the stack knows: those its parameters name (a limit, attempts, a
// release mode, a key limit or a rate) and those with a live override.
func (e ConfigEditor) knownTypes(ovs []config.Override) []string {
	seen := map[string]bool{}
	for _, m := range []map[string]int{e.Defaults.Limits, e.Defaults.MaxAttempts, e.Defaults.KeyLimits} {
		for t := range m {
			seen[t] = true
		}
	}
	for t := range e.Defaults.Releases {
		seen[t] = true
	}
	for t := range e.Defaults.Rates {
		seen[t] = true
	}
	for t := range e.Defaults.TypePools {
		seen[t] = true
	}
	for t := range e.Defaults.Shares {
		seen[t] = true
	}
	for _, o := range ovs {
		if o.Pool == "" { // a pool's live cap is no type's
			seen[o.Type] = true
		}
	}
	return slices.Sorted(maps.Keys(seen))
}

// checkKnown refuses a change to a type the stack does not know (knownTypes): most often a typo,
// which would create a type nobody sends jobs to. It suggests the closest known type.
func (e ConfigEditor) checkKnown(typ string, ovs []config.Override) error {
	known := e.knownTypes(ovs)
	if slices.Contains(known, typ) {
		return nil
	}
	hint := ""
	if s := closest(typ, known); s != "" {
		hint = fmt.Sprintf(" Did you mean %s?", s)
	}
	return usagef("type %s is not known to the stack (no limit or other setting in its parameters, no live override): nothing written.%s To create type %s, add --new-type", typ, hint, typ)
}

// SuggestType is the type with a limit close enough to typ to be what a typo of it meant, else "".
func SuggestType(ctx context.Context, r *config.Resolver, typ string) string {
	all, err := r.All(ctx)
	if err != nil {
		return ""
	}
	names := make([]string, 0, len(all))
	for _, c := range all {
		names = append(names, c.Type)
	}
	return closest(typ, names)
}

// closest is the known name nearest to name by edit distance (case aside), if it is near enough to
// be a typo of it: at most 2 edits, and fewer than name has characters.
func closest(name string, known []string) string {
	best, bestD := "", 3
	for _, k := range known {
		if d := editDistance(strings.ToLower(name), strings.ToLower(k)); d < bestD && d < len(name) {
			best, bestD = k, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance of two strings, byte by byte (type names are ASCII).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
