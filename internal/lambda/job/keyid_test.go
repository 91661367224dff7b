package job_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
)

// A job is its type, key and id. No two distinct runs (type, key, id, redrive generation, attempt)
// share an execution name: not two keys' jobs with one id, not a keyed job and a job without a key,
// and every name is a valid one of at most 80 characters.
func TestRunNameNeverSharedAcrossKeys(t *testing.T) {
	prefix := strings.Repeat("customer-42.invoice:", 6)
	ids := []string{"1", "order-1", "a.b", "a:b", "a_b", "a__b", "kabc", "x__g1", "order-1__k0123456789abcdef",
		strings.Repeat("a", 76), strings.Repeat("a", 77), prefix + "0001", prefix + "0002", strings.Repeat("i", 128)}
	keys := []string{"", "acme", "beta", "g1", "k", "a.b", "a:b", strings.Repeat("k", 64)}
	types := []string{"t", "payments", "t__k", strings.Repeat("T", 40)}
	seen := map[string]string{}
	for _, typ := range types {
		for _, key := range keys {
			for _, id := range ids {
				for _, redrive := range []int{0, 1, 12, 999} {
					for _, attempt := range []int{1, 2, 99} {
						run := fmt.Sprintf("%s/%s/%s g%d #%d", typ, key, id, redrive, attempt)
						n := job.RunName(typ, "", key, id, redrive, attempt)
						if !nameRe.MatchString(n) {
							t.Fatalf("RunName of %s = %q (%d characters), want 1-80 of [A-Za-z0-9_-]", run, n, len(n))
						}
						if again := job.RunName(typ, "", key, id, redrive, attempt); again != n {
							t.Fatalf("RunName of %s = %q then %q, want stable", run, n, again)
						}
						if prev, ok := seen[n]; ok {
							t.Fatalf("RunName of %s = RunName of %s = %q, want different names", run, prev, n)
						}
						seen[n] = run
					}
				}
			}
		}
	}
	// Jobs without a key keep the names they had before keys were part of a job's identity.
	if got, want := job.RunName("payments", "", "", "order-1", 0, 1), job.ExecutionName("payments", "order-1", 1); got != want || got != "payments-order-1-1" {
		t.Errorf("RunName(payments, \"\", order-1, 0, 1) = %q, want %q as before", got, want)
	}
}

// A batch's ledger counts two keys' jobs with one id as two jobs; a job without a key keeps the name
// it was counted under before keys were part of a job's identity.
func TestBatchJobIDOfKeys(t *testing.T) {
	for _, tt := range []struct{ typ, key, id, want string }{
		{"payments", "", "order-1", "payments/order-1"},
		{"payments", "acme", "order-1", "payments/order-1/acme"},
		{"payments", "beta", "order-1", "payments/order-1/beta"},
		// A refused job's key out of the contract is named by its hash.
		{"payments", "acme/eu", "order-1", "payments/order-1/#" + sha16("acme/eu")},
	} {
		if got := job.BatchJobID(tt.typ, tt.key, tt.id); got != tt.want {
			t.Errorf("BatchJobID(%q, %q, %q) = %q, want %q", tt.typ, tt.key, tt.id, got, tt.want)
		}
	}
}
