package job_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"

	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
)

// A job is its type, sender, key and id. No two distinct runs (type, sender, key, id, redrive
// generation, attempt) share an execution name: not two keys' or two senders' jobs with one id, not
// a keyed job and a job without a key, not a job with a sender and one without (routed before
// senders were part of a job's identity), and every name is a valid one of at most 80 characters.
func TestRunNameNeverSharedAcrossKeys(t *testing.T) {
	prefix := strings.Repeat("customer-42.invoice:", 6)
	ids := []string{"1", "order-1", "a.b", "a:b", "a_b", "a__b", "kabc", "x__g1", "order-1__k0123456789abcdef",
		strings.Repeat("a", 76), strings.Repeat("a", 77), prefix + "0001", prefix + "0002", strings.Repeat("i", 128)}
	keys := []string{"", "acme", "beta", "g1", "k", "a.b", "a:b", strings.Repeat("k", 64)}
	types := []string{"t", "payments", "t__k", strings.Repeat("T", 40)}
	// Senders that look like keys, and a sender on another's behalf.
	senders := []string{"", "AROAACME", "AROAMALLORY", "acme", "123456789012:bob", "AROAOPS>AROAACME", strings.Repeat("S", 128) + ">" + strings.Repeat("s", 128)}
	seen := map[string]string{}
	for _, typ := range types {
		for _, sender := range senders {
			for _, key := range keys {
				for _, id := range ids {
					for _, redrive := range []int{0, 1, 12, 999} {
						for _, attempt := range []int{1, 2, 99} {
							run := fmt.Sprintf("%s/%s/%s/%s g%d #%d", typ, sender, key, id, redrive, attempt)
							n := job.RunName(typ, sender, key, id, redrive, attempt)
							if !nameRe.MatchString(n) {
								t.Fatalf("RunName of %s = %q (%d characters), want 1-80 of [A-Za-z0-9_-]", run, n, len(n))
							}
							if again := job.RunName(typ, sender, key, id, redrive, attempt); again != n {
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

// A job's sender is the principal that sent it, or that principal's "{principal}>{named}" when
// its message names another: no message makes a job another principal's. A message without a
// SenderId has no sender, and a principal out of the contract is named by its hash.
func TestSender(t *testing.T) {
	for _, tt := range []struct{ principal, named, want string }{
		{"AROAACME", "", "AROAACME"},
		{"AROAACME", "AROAACME", "AROAACME"},
		{"AROAOPS", "AROAACME", "AROAOPS>AROAACME"},
		{"123456789012:bob", "AROAACME", "123456789012:bob>AROAACME"},
		{"AROAMALLORY", "AROAOPS>AROAACME", "AROAMALLORY"}, // only a principal can be named
		{"AROAMALLORY", "acme eu", "AROAMALLORY"},
		{"", "AROAACME", ""},
		{"a principal/with slashes", "", "=" + sha32("a principal/with slashes")},
	} {
		got := job.Sender(tt.principal, tt.named)
		if got != tt.want {
			t.Errorf("Sender(%q, %q) = %q, want %q", tt.principal, tt.named, got, tt.want)
		}
		if err := job.ValidateSender(got); err != nil {
			t.Errorf("Sender(%q, %q) = %q: %v", tt.principal, tt.named, got, err)
		}
		if p := job.SenderPrincipal(got); got != "" && !strings.HasPrefix(got, p) {
			t.Errorf("SenderPrincipal(%q) = %q", got, p)
		}
	}
	if p := job.SenderPrincipal("AROAOPS>AROAACME"); p != "AROAOPS" {
		t.Errorf("SenderPrincipal(AROAOPS>AROAACME) = %q, want AROAOPS (who sent it)", p)
	}
}

func sha32(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:32]
}
