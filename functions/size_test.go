package functions_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The limiter (internal/lambda) stays small enough to review (issue 22): every defect reviews found sat in recovery
// paths, and each fix that added a path grew the next defect's home. These bounds hold the code to
// the size the simulation protects: no file over maxFileLines, and every lease write at one of at
// most maxLeaseWrites call sites (a new one is a new path for a race: fold it into one of these).
const (
	maxFileLines   = 600
	maxLeaseWrites = 10
)

var leaseWrite = regexp.MustCompile(`Leases\.(Put|Delete)\(`)

func TestLimiterStaysSmall(t *testing.T) {
	total, writes := 0, 0
	var sites []string
	err := filepath.WalkDir("../internal/lambda", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		lines := strings.Count(string(b), "\n")
		total += lines
		if lines > maxFileLines {
			t.Errorf("%s has %d lines, more than %d: split it by concern", path, lines, maxFileLines)
		}
		for i, l := range strings.Split(string(b), "\n") {
			if leaseWrite.MatchString(l) && !strings.HasPrefix(strings.TrimSpace(l), "//") {
				writes++
				sites = append(sites, path+":"+strconv.Itoa(i+1))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if writes > maxLeaseWrites {
		t.Errorf("%d lease-write call sites, more than %d:\n%s", writes, maxLeaseWrites, strings.Join(sites, "\n"))
	}
	if writes == 0 || total == 0 {
		t.Fatalf("found no code (%d lines, %d lease writes): the walk looks in the wrong place", total, writes)
	}
	t.Logf("internal/lambda: %d lines of non-test code, %d lease-write call sites", total, writes)
}
