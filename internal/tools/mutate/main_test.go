package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sfnlimit/sfnlimit/internal/tools/ddbexpr"
)

const moduleRoot = "../../.."

// wantMutations is how many mutations the current conditional writes give, per file. A condition
// added, removed or changed changes it: update it, and run make mutate to judge the new ones.
var wantMutations = map[string]int{
	"internal/lambda/lease/lease.go":       5,  // a free lane's Put; Put and Delete on sameLease (2 clauses each)
	"internal/lambda/waitroom/waitroom.go": 13, // Park (4 clauses, one a group of 2), Restore, Unpark (messageId, the group, its 3 terms), Claim
	"internal/lambda/batch/batch.go":       2,  // Open; updateMeta (putMeta and the announcement writes share it)
	"internal/lambda/batch/record.go":      3,  // a shard's first and later writes, a job's record
}

// TestEnumerateFindsEveryCondition: the check covers every condition of the current code, and a
// new one changes the count (it is not silently outside the check).
func TestEnumerateFindsEveryCondition(t *testing.T) {
	ms, err := Enumerate(moduleRoot, Targets)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, m := range ms {
		got[m.Rel]++
		if m.Mutated == "" {
			continue
		}
		if _, err := ddbexpr.Parse(m.Mutated); err != nil {
			t.Errorf("%s: the mutated condition does not parse, so the simulation's table would refuse it: %v", m.Name(), err)
		}
	}
	for file, n := range wantMutations {
		if got[file] != n {
			t.Errorf("%s: %d mutations, want %d (a condition changed: update wantMutations and run make mutate)", file, got[file], n)
		}
	}
	for file, n := range got {
		if _, ok := wantMutations[file]; !ok {
			t.Errorf("%s: %d mutations in a file the test does not know: add it to wantMutations and run make mutate", file, n)
		}
	}
}

// TestOverlayCompiles: one mutation of each file, applied through an overlay, builds, and changes
// the file only at its condition.
func TestOverlayCompiles(t *testing.T) {
	ms, err := Enumerate(moduleRoot, Targets)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, m := range ms {
		if seen[m.Rel] {
			continue
		}
		seen[m.Rel] = true
		t.Run(filepath.Base(m.File), func(t *testing.T) {
			dir := t.TempDir()
			overlay, err := Overlay(m, dir)
			if err != nil {
				t.Fatal(err)
			}
			mutated, err := os.ReadFile(filepath.Join(dir, filepath.Base(m.File)))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(mutated), m.Replacement) {
				t.Errorf("the mutated copy lacks %s", m.Replacement)
			}
			cmd := exec.Command("go", "build", "-overlay", overlay, "./"+filepath.Dir(m.Rel))
			cmd.Dir = moduleRoot
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("%s: go build -overlay: %v\n%s", m.Name(), err, out)
			}
		})
	}
}

// TestRemovals: each term of a chain, a parenthesized group as a whole and each term inside it; a
// one-clause condition is removed whole.
func TestRemovals(t *testing.T) {
	tests := []struct {
		cond string
		want []string // clause -> what is left ("" : nothing)
	}{
		{"attribute_not_exists(pk)", []string{"attribute_not_exists(pk) -> "}},
		{"version = :v AND jobId = :j", []string{"version = :v -> jobId = :j", "jobId = :j -> version = :v"}},
		{"a = :a AND (b = :b OR c = :c OR NOT d = :d)", []string{
			"a = :a -> (b = :b OR c = :c OR NOT d = :d)",
			"(b = :b OR c = :c OR NOT d = :d) -> a = :a",
			"b = :b -> a = :a AND (c = :c OR NOT d = :d)",
			"c = :c -> a = :a AND (b = :b OR NOT d = :d)",
			"NOT d = :d -> a = :a AND (b = :b OR c = :c)",
		}},
	}
	for _, tt := range tests {
		n, err := ddbexpr.Parse(tt.cond)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range Removals(n) {
			left := ""
			if r.Left != nil {
				left = ddbexpr.String(r.Left)
			}
			got = append(got, r.Clause+" -> "+left)
		}
		if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
			t.Errorf("Removals(%q):\n%s\nwant:\n%s", tt.cond, strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
		}
	}
}
