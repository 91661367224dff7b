package lease_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
	"github.com/sfnlimit/sfnlimit/internal/tools/fakes"
	"github.com/sfnlimit/sfnlimit/internal/tools/testmoto"
)

// endpointEnv names a loopback DynamoDB (moto, for example) to run these tests against as well as
// the in-memory table: SFNLIMIT_TEST_DYNAMODB_ENDPOINT=http://127.0.0.1:5000 go test
// ./internal/lambda/lease/
const endpointEnv = "SFNLIMIT_TEST_DYNAMODB_ENDPOINT"

// table is what the tests need of a DynamoDB client; both the SDK client and the fake have it.
type table interface {
	GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(context.Context, *dynamodb.PutItemInput, ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	DeleteItem(context.Context, *dynamodb.DeleteItemInput, ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
	Query(context.Context, *dynamodb.QueryInput, ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	Scan(context.Context, *dynamodb.ScanInput, ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
}

type backend struct {
	name string
	open func(t *testing.T) (table, string)
}

// backends returns the in-memory table, and a real (emulated) DynamoDB when endpointEnv names one.
func backends(t *testing.T) []backend {
	t.Helper()
	bs := []backend{{"memory", func(t *testing.T) (table, string) {
		db := fakes.NewDynamoDB("leases")
		db.PageSize = 2 // several pages for ListType and All
		return db, "leases"
	}}}
	ep := os.Getenv(endpointEnv)
	if ep == "" {
		return bs
	}
	u, err := url.Parse(ep)
	if err != nil || !isLoopback(u.Hostname()) {
		t.Fatalf("%s=%q: only a loopback endpoint is allowed", endpointEnv, ep)
	}
	client := testmoto.Client(ep)
	return append(bs, backend{"dynamodb", func(t *testing.T) (table, string) {
		return client, testmoto.Table(t, client, "lease-test")
	}})
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// forEachBackend runs f as a subtest on every backend.
func forEachBackend(t *testing.T, f func(t *testing.T, db table, name string, s *lease.Store)) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			db, name := b.open(t)
			f(t, db, name, lease.NewStore(db, name))
		})
	}
}

func sample(typ string, ln int) lease.Lease {
	return lease.Lease{
		Type: typ, Lane: ln, JobID: "r-1001", MessageID: "4f1c7b9e-8e1a-4c4d-9a51-0d2f7c1b2a10",
		ReceiptHandle: "AQEBzbVv1-first", Attempt: 1, Status: lease.Starting,
		StartedAt:   time.Date(2025, 3, 14, 9, 26, 53, 589000000, time.UTC),
		SubmittedAt: time.Date(2025, 3, 14, 9, 26, 50, 0, time.UTC),
	}
}

func TestStoreGetMissingLane(t *testing.T) {
	forEachBackend(t, func(t *testing.T, _ table, _ string, s *lease.Store) {
		got, err := s.Get(context.Background(), lease.Key{Type: "reports", Lane: 1})
		if err != nil || got != nil {
			t.Fatalf("Get(free lane) = %+v, %v, want nil, nil", got, err)
		}
	})
}

func TestStoreRoundTrip(t *testing.T) {
	forEachBackend(t, func(t *testing.T, _ table, _ string, s *lease.Store) {
		ctx := context.Background()
		give := sample("reports", 3)
		give.Status, give.ExecutionArn = lease.Starting, "arn:aws:states:us-east-1:123456789012:execution:sfnlimit-sample:reports-r-1001-1"
		before := time.Now().UTC()
		written, err := s.Put(ctx, give, nil)
		after := time.Now().UTC()
		if err != nil {
			t.Fatalf("Put(free lane) = %v", err)
		}
		if written.Version < 1 {
			t.Errorf("Put(free lane).Version = %d, want a positive version", written.Version)
		}
		if written.UpdatedAt.Before(before) || written.UpdatedAt.After(after) {
			t.Errorf("Put(free lane).UpdatedAt = %v, want between %v and %v", written.UpdatedAt, before, after)
		}
		got, err := s.Get(ctx, give.Key())
		if err != nil || got == nil {
			t.Fatalf("Get(after Put) = %v, %v, want the lease", got, err)
		}
		if !sameLease(*got, written) {
			t.Errorf("Get(after Put) = %+v, want %+v", *got, written)
		}
	})
}

// sameLease compares leases field by field, times by instant.
func sameLease(a, b lease.Lease) bool {
	ta := []time.Time{a.StartedAt, a.UpdatedAt, a.SubmittedAt}
	tb := []time.Time{b.StartedAt, b.UpdatedAt, b.SubmittedAt}
	for i := range ta {
		if !ta[i].Equal(tb[i]) {
			return false
		}
	}
	a.StartedAt, a.UpdatedAt, a.SubmittedAt = time.Time{}, time.Time{}, time.Time{}
	b.StartedAt, b.UpdatedAt, b.SubmittedAt = time.Time{}, time.Time{}, time.Time{}
	return a == b
}

func TestStorePut(t *testing.T) {
	key := lease.Key{Type: "reports", Lane: 2}
	tests := []struct {
		name string
		// setup writes the lane's history and returns the prev the Put under test passes.
		setup func(t *testing.T, s *lease.Store) *lease.Lease
		give  lease.Lease
		// wantNext: the version written is prev's plus one (else any positive version: a new lease's)
		wantNext bool
		wantErr  error // nil, lease.ErrConflict, or errAny
	}{
		{
			name:  "free lane, prev nil",
			setup: func(*testing.T, *lease.Store) *lease.Lease { return nil },
			give:  sample("reports", 2),
		},
		{
			name: "held lane, prev nil",
			setup: func(t *testing.T, s *lease.Store) *lease.Lease {
				mustPut(t, s, sample("reports", 2), nil)
				return nil
			},
			give:    withJob(sample("reports", 2), "r-2002"),
			wantErr: lease.ErrConflict,
		},
		{
			name: "current prev",
			setup: func(t *testing.T, s *lease.Store) *lease.Lease {
				l := mustPut(t, s, sample("reports", 2), nil)
				return &l
			},
			give:     withStatus(sample("reports", 2), lease.Starting),
			wantNext: true,
		},
		{
			name: "stale prev",
			setup: func(t *testing.T, s *lease.Store) *lease.Lease {
				v1 := mustPut(t, s, sample("reports", 2), nil)
				mustPut(t, s, withStatus(v1, lease.Starting), &v1)
				return &v1
			},
			give:    withStatus(sample("reports", 2), lease.Retrying),
			wantErr: lease.ErrConflict,
		},
		{
			name: "prev deleted meanwhile",
			setup: func(t *testing.T, s *lease.Store) *lease.Lease {
				v1 := mustPut(t, s, sample("reports", 2), nil)
				if err := s.Delete(context.Background(), v1); err != nil {
					t.Fatal(err)
				}
				return &v1
			},
			give:    withStatus(sample("reports", 2), lease.Starting),
			wantErr: lease.ErrConflict,
		},
		{
			name: "prev of another lane",
			setup: func(t *testing.T, s *lease.Store) *lease.Lease {
				other := mustPut(t, s, sample("reports", 7), nil)
				return &other
			},
			give:    sample("reports", 2),
			wantErr: errAny,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			forEachBackend(t, func(t *testing.T, _ table, _ string, s *lease.Store) {
				ctx := context.Background()
				prev := tt.setup(t, s)
				before, _ := s.Get(ctx, key)
				got, err := s.Put(ctx, tt.give, prev)
				switch {
				case tt.wantErr == nil && err != nil:
					t.Fatalf("Put() = %v, want no error", err)
				case tt.wantErr == lease.ErrConflict && !errors.Is(err, lease.ErrConflict):
					t.Fatalf("Put() = %v, want an error wrapping lease.ErrConflict", err)
				case tt.wantErr == errAny && (err == nil || errors.Is(err, lease.ErrConflict)):
					t.Fatalf("Put() = %v, want an error that is not lease.ErrConflict", err)
				}
				after, gerr := s.Get(ctx, key)
				if gerr != nil {
					t.Fatal(gerr)
				}
				if err != nil {
					// A refused write leaves the lane as it was.
					if (before == nil) != (after == nil) || (before != nil && !sameLease(*before, *after)) {
						t.Errorf("lane after a refused Put = %+v, want unchanged %+v", after, before)
					}
					return
				}
				if tt.wantNext && got.Version != prev.Version+1 || got.Version < 1 {
					t.Errorf("Put().Version = %d, want prev's %d plus one: %v", got.Version, prev.Version, tt.wantNext)
				}
				if after == nil || !sameLease(*after, got) {
					t.Errorf("Get() after Put = %+v, want %+v", after, got)
				}
			})
		})
	}
}

var errAny = errors.New("any error but a conflict")

func withJob(l lease.Lease, id string) lease.Lease          { l.JobID = id; return l }
func withStatus(l lease.Lease, st lease.Status) lease.Lease { l.Status = st; return l }

func mustPut(t *testing.T, s *lease.Store, next lease.Lease, prev *lease.Lease) lease.Lease {
	t.Helper()
	l, err := s.Put(context.Background(), next, prev)
	if err != nil {
		t.Fatalf("Put(%s) = %v", next.Key(), err)
	}
	return l
}

func TestStoreDelete(t *testing.T) {
	tests := []struct {
		name         string
		setup        func(t *testing.T, s *lease.Store) lease.Lease // returns the lease to delete
		wantErr      bool
		wantLeft     bool // the lane still has a lease afterwards
		wantLeftNext bool // the lease left is the next version of the one given
	}{
		{
			name:  "current version",
			setup: func(t *testing.T, s *lease.Store) lease.Lease { return mustPut(t, s, sample("reports", 1), nil) },
		},
		{
			name: "stale version",
			setup: func(t *testing.T, s *lease.Store) lease.Lease {
				v1 := mustPut(t, s, sample("reports", 1), nil)
				next := v1
				next.ReceiptHandle = "AQEBzbVv1-second"
				mustPut(t, s, next, &v1)
				return v1
			},
			wantErr: true, wantLeft: true, wantLeftNext: true,
		},
		{
			name: "already deleted",
			setup: func(t *testing.T, s *lease.Store) lease.Lease {
				v1 := mustPut(t, s, sample("reports", 1), nil)
				if err := s.Delete(context.Background(), v1); err != nil {
					t.Fatal(err)
				}
				return v1
			},
			wantErr: true,
		},
		{
			name: "never written",
			setup: func(*testing.T, *lease.Store) lease.Lease {
				l := sample("reports", 1)
				l.Version = 1
				return l
			},
			wantErr: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			forEachBackend(t, func(t *testing.T, _ table, _ string, s *lease.Store) {
				ctx := context.Background()
				give := tt.setup(t, s)
				err := s.Delete(ctx, give)
				if tt.wantErr != errors.Is(err, lease.ErrConflict) || (!tt.wantErr && err != nil) {
					t.Fatalf("Delete(version %d) = %v, want conflict %v", give.Version, err, tt.wantErr)
				}
				left, gerr := s.Get(ctx, give.Key())
				if gerr != nil {
					t.Fatal(gerr)
				}
				if (left != nil) != tt.wantLeft {
					t.Fatalf("Get() after Delete = %+v, want a lease left: %v", left, tt.wantLeft)
				}
				if left != nil && tt.wantLeftNext && left.Version != give.Version+1 {
					t.Errorf("version left after Delete = %d, want %d", left.Version, give.Version+1)
				}
			})
		})
	}
}

func TestStoreVersionsIncrement(t *testing.T) {
	forEachBackend(t, func(t *testing.T, _ table, _ string, s *lease.Store) {
		ctx := context.Background()
		l := mustPut(t, s, sample("payments", 4), nil)
		first := l.Version
		statuses := []lease.Status{lease.Starting, lease.Starting, lease.Retrying, lease.Starting, lease.Starting}
		for i, st := range statuses {
			next := l
			next.Status = st
			next.ReceiptHandle = fmt.Sprintf("AQEBhandle-%d", i+2)
			var err error
			if l, err = s.Put(ctx, next, &l); err != nil {
				t.Fatalf("Put #%d = %v", i+2, err)
			}
			if l.Version != first+int64(i+1) {
				t.Fatalf("Put #%d version = %d, want %d", i+2, l.Version, first+int64(i+1))
			}
			got, err := s.Get(ctx, l.Key())
			if err != nil || got == nil || got.Version != l.Version || got.ReceiptHandle != next.ReceiptHandle {
				t.Fatalf("Get() after Put #%d = %+v, %v, want version %d handle %s", i+2, got, err, l.Version, next.ReceiptHandle)
			}
		}
	})
}

func TestStoreConcurrentClaimsOneWins(t *testing.T) {
	forEachBackend(t, func(t *testing.T, _ table, _ string, s *lease.Store) {
		const n = 8
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i] = s.Put(context.Background(), withJob(sample("reports", 1), fmt.Sprintf("r-%d", i)), nil)
			}()
		}
		wg.Wait()
		won := 0
		for i, err := range errs {
			switch {
			case err == nil:
				won++
			case !errors.Is(err, lease.ErrConflict):
				t.Errorf("claim %d = %v, want nil or lease.ErrConflict", i, err)
			}
		}
		if won != 1 {
			t.Errorf("claims won = %d, want 1", won)
		}
	})
}

func TestStoreListTypeAndAll(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db table, name string, s *lease.Store) {
		ctx := context.Background()
		for _, k := range []lease.Key{{"reports", 10}, {"reports", 2}, {"payments", 1}, {"reports", 1}, {"payments", 3}} {
			mustPut(t, s, sample(k.Type, k.Lane), nil)
		}
		// Live config shares the table and must not be taken for a lease.
		if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &name, Item: map[string]types.AttributeValue{
			"pk": &types.AttributeValueMemberS{Value: "CONFIG"}, "sk": &types.AttributeValueMemberS{Value: "TYPE#reports"},
			"limit": &types.AttributeValueMemberN{Value: "5"},
		}}); err != nil {
			t.Fatal(err)
		}
		got, err := s.ListType(ctx, "reports")
		if err != nil {
			t.Fatal(err)
		}
		if keys := keysOf(got); keys != "reports-1 reports-2 reports-10" {
			t.Errorf("ListType(reports) = %s, want reports-1 reports-2 reports-10", keys)
		}
		all, err := s.All(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(all) != 5 {
			t.Errorf("All() = %s, want the 5 leases and no config item", keysOf(all))
		}
		for _, l := range all {
			if l.Type == "" || l.Lane == 0 || l.JobID != "r-1001" {
				t.Errorf("All() lease %+v lacks its fields", l)
			}
		}
	})
}

func keysOf(ls []lease.Lease) string {
	var ks []string
	for _, l := range ls {
		ks = append(ks, l.Key().String())
	}
	return strings.Join(ks, " ")
}

func TestStoreAllRecoversTypeOfHandWrittenItem(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db table, name string, s *lease.Store) {
		ctx := context.Background()
		if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &name, Item: map[string]types.AttributeValue{
			"pk": &types.AttributeValueMemberS{Value: "LEASE#reports"}, "sk": &types.AttributeValueMemberS{Value: "LANE#000003"},
			"jobId": &types.AttributeValueMemberS{Value: "r-0042"}, "version": &types.AttributeValueMemberN{Value: "1"},
		}}); err != nil {
			t.Fatal(err)
		}
		all, err := s.All(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(all) != 1 || all[0].Type != "reports" || all[0].JobID != "r-0042" {
			t.Errorf("All() = %+v, want one lease of type reports for job r-0042", all)
		}
	})
}

// An earlier version named a claim's execution on a version or alias of its state machine with the
// qualifier (...:execution:work:3:NAME), which no execution has: Step Functions names it under the
// state machine (...:execution:work:NAME). Every reader of such a lease, the starter's as well as
// the releaser's, reads it as Step Functions names it. The same versions wrote status "running" once
// a start was confirmed: it is read as a claim (starting), which every reader takes for a running job.
func TestStoreReadsAnEarlierVersionsLeaseAsToday(t *testing.T) {
	const stored = "arn:aws:states:us-east-1:123456789012:execution:work:3:reports-r-1-1"
	const want = "arn:aws:states:us-east-1:123456789012:execution:work:reports-r-1-1"
	forEachBackend(t, func(t *testing.T, db table, name string, s *lease.Store) {
		ctx := context.Background()
		if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &name, Item: map[string]types.AttributeValue{
			"pk": &types.AttributeValueMemberS{Value: "LEASE#reports"}, "sk": &types.AttributeValueMemberS{Value: "LANE#000001"},
			"type": &types.AttributeValueMemberS{Value: "reports"}, "lane": &types.AttributeValueMemberN{Value: "1"},
			"jobId": &types.AttributeValueMemberS{Value: "r-1"}, "version": &types.AttributeValueMemberN{Value: "7"},
			"status": &types.AttributeValueMemberS{Value: "running"}, "executionArn": &types.AttributeValueMemberS{Value: stored},
		}}); err != nil {
			t.Fatal(err)
		}
		got, err := s.Get(ctx, lease.Key{Type: "reports", Lane: 1})
		if err != nil || got == nil || got.ExecutionArn != want || got.Status != lease.Starting {
			t.Errorf("Get() = %+v, %v; want executionArn %s, status starting", got, err, want)
		}
		for _, list := range []func(context.Context) ([]lease.Lease, error){
			func(ctx context.Context) ([]lease.Lease, error) { return s.ListType(ctx, "reports") }, s.All,
		} {
			ls, err := list(ctx)
			if err != nil || len(ls) != 1 || ls[0].ExecutionArn != want || ls[0].Status != lease.Starting {
				t.Errorf("listed %+v, %v; want one lease with executionArn %s, status starting", ls, err, want)
			}
		}
	})
}

func TestStoreErrorsAreNotConflicts(t *testing.T) {
	throttled := fakes.APIError("ProvisionedThroughputExceededException", "The level of configured provisioned throughput for the table was exceeded")
	db := fakes.NewDynamoDB("leases")
	s := lease.NewStore(db, "leases")
	ctx := context.Background()
	l := mustPut(t, s, sample("reports", 1), nil)
	db.OnCall = func(string) error { return throttled }

	calls := []struct {
		name string
		call func() error
	}{
		{"Get", func() error { _, err := s.Get(ctx, l.Key()); return err }},
		{"Put", func() error { _, err := s.Put(ctx, l, &l); return err }},
		{"Delete", func() error { return s.Delete(ctx, l) }},
		{"ListType", func() error { _, err := s.ListType(ctx, "reports"); return err }},
		{"All", func() error { _, err := s.All(ctx); return err }},
	}
	for _, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			err := c.call()
			var ae smithy.APIError
			if !errors.As(err, &ae) || ae.ErrorCode() != "ProvisionedThroughputExceededException" {
				t.Errorf("%s() = %v, want the service error wrapped", c.name, err)
			}
			if errors.Is(err, lease.ErrConflict) {
				t.Errorf("%s() = %v, want it not taken for a conflict", c.name, err)
			}
		})
	}
}

// A lane's lease deleted and written again for another job does not take the old lease's
// versions: a release still holding the old lease (a sweep that read it before the status event
// released it) must not delete or overwrite the new one. Seen in the demo: the sweep deleted the
// lease of the job bound to the lane since, a third job was bound to the same lane, and two jobs
// waited behind each other in one lane until the lanes queue's visibility timeout.
func TestStoreStaleLeaseOfAFormerJob(t *testing.T) {
	forEachBackend(t, func(t *testing.T, _ table, _ string, s *lease.Store) {
		ctx := context.Background()
		old := mustPut(t, s, sample("llm", 2), nil)
		old = mustPut(t, s, withStatus(old, lease.Starting), &old) // what the sweep read
		if err := s.Delete(ctx, old); err != nil {                 // the status event's release
			t.Fatal(err)
		}
		next := mustPut(t, s, withStatus(withJob(sample("llm", 2), "r-2002"), lease.Bound), nil)
		next = mustPut(t, s, withStatus(next, lease.Starting), &next)

		if err := s.Delete(ctx, old); !errors.Is(err, lease.ErrConflict) {
			t.Errorf("Delete(the former job's lease) = %v, want a conflict", err)
		}
		if _, err := s.Put(ctx, withStatus(old, lease.Retrying), &old); !errors.Is(err, lease.ErrConflict) {
			t.Errorf("Put(over the former job's lease) = %v, want a conflict", err)
		}
		got, err := s.Get(ctx, next.Key())
		if err != nil || got == nil || !sameLease(*got, next) {
			t.Errorf("lane holds %+v, %v; want the new job's lease %+v", got, err, next)
		}
	})
}

// A release that read a lane's lease, and deletes or rewrites it after the lane was freed and taken
// by another job whose lease reached the same version, must not touch the other job's lease (ABA):
// versions restart at 1 with each new lease. TestBatchUnderFaults (tests/batch_test.go) met it: a
// late status-event release of one job, slowed by its batch record, deleted the lease of the job
// bound to the lane since the sweep released it, and that job was claimed and started again.
func TestStaleLeaseOfAnotherJobIsNotTouched(t *testing.T) {
	forEachBackend(t, func(t *testing.T, tb table, tableName string, s *lease.Store) {
		ctx := context.Background()
		a1 := mustPut(t, s, withJob(sample("reports", 1), "job-a"), nil)
		a2 := mustPut(t, s, withStatus(withJob(sample("reports", 1), "job-a"), lease.Starting), &a1) // what the late release read
		if err := s.Delete(ctx, a2); err != nil {
			t.Fatal(err) // the sweep released job-a
		}
		b1 := mustPut(t, s, withJob(sample("reports", 1), "job-b"), nil)
		b2 := mustPut(t, s, withStatus(withJob(sample("reports", 1), "job-b"), lease.Starting), &b1)
		// A new lease draws a random first version; give job-b's the stale one's, as a lane whose
		// leases restarted at 1 (before random versions) would have, to check the job condition.
		b2 = forceVersion(t, tb, tableName, b2, a2.Version)
		if err := s.Delete(ctx, a2); !errors.Is(err, lease.ErrConflict) {
			t.Errorf("Delete(job-a's stale lease) = %v, want ErrConflict", err)
		}
		if _, err := s.Put(ctx, withStatus(a2, lease.Retrying), &a2); !errors.Is(err, lease.ErrConflict) {
			t.Errorf("Put over job-a's stale lease = %v, want ErrConflict", err)
		}
		left, err := s.Get(ctx, a2.Key())
		if err != nil || left == nil || left.JobID != "job-b" || left.Status != lease.Starting {
			t.Errorf("lane holds %+v (%v), want job-b's running lease", left, err)
		}
	})
}

// forceVersion rewrites l's item with version v, as another writer would, and returns l at v.
func forceVersion(t *testing.T, db table, name string, l lease.Lease, v int64) lease.Lease {
	t.Helper()
	ctx := context.Background()
	key := map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: "LEASE#" + l.Type},
		"sk": &types.AttributeValueMemberS{Value: fmt.Sprintf("LANE#%06d", l.Lane)},
	}
	out, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &name, Key: key, ConsistentRead: aws.Bool(true)})
	if err != nil || out.Item == nil {
		t.Fatalf("read lease item %v: %v", key, err)
	}
	out.Item["version"] = &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
	if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &name, Item: out.Item}); err != nil {
		t.Fatal(err)
	}
	l.Version = v
	return l
}

// ambiguous applies a write, loses its answer and sends the same request again, as the SDK does
// when a response is lost: the caller gets the second answer.
type ambiguous struct{ table }

func (a ambiguous) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	_, _ = a.table.PutItem(ctx, in, o...)
	return a.table.PutItem(ctx, in, o...)
}

func (a ambiguous) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, o ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	_, _ = a.table.DeleteItem(ctx, in, o...)
	return a.table.DeleteItem(ctx, in, o...)
}

// A lease write that DynamoDB applied but answered as failed, retried by the SDK, fails its own
// condition the second time: the store must know its own write (it finds the stored lease written
// by this very call) and answer success, or the starter takes a lane it holds for taken and binds
// another (the simulation's seed 9 of profile ambiguous: a lane leaked until the sweep).
func TestStoreKnowsItsOwnAmbiguousWrite(t *testing.T) {
	ctx := context.Background()
	db := fakes.NewDynamoDB("leases")
	s := lease.NewStore(ambiguous{db}, "leases")
	bound := lease.Lease{Type: "reports", Lane: 1, JobID: "r-1", Status: lease.Bound}
	got, err := s.Put(ctx, bound, nil)
	if err != nil {
		t.Fatalf("Put(new lease) applied and retried = %v, want success", err)
	}
	claimed := got
	claimed.Status, claimed.Attempt = lease.Starting, 1
	claimed, err = s.Put(ctx, claimed, &got)
	if err != nil {
		t.Fatalf("Put(next version) applied and retried = %v, want success", err)
	}
	if stored, err := s.Get(ctx, claimed.Key()); err != nil || stored == nil || stored.Version != claimed.Version || stored.Status != lease.Starting {
		t.Errorf("stored = %+v, %v; want the lease as written (version %d)", stored, err, claimed.Version)
	}
	// Another writer's lease is still a conflict.
	other := lease.Lease{Type: "reports", Lane: 1, JobID: "r-2", Status: lease.Bound}
	if _, err := s.Put(ctx, other, nil); !errors.Is(err, lease.ErrConflict) {
		t.Errorf("Put(another job's lease on a held lane) = %v, want ErrConflict", err)
	}
	if _, err := s.Put(ctx, claimed, &got); !errors.Is(err, lease.ErrConflict) {
		t.Errorf("Put(from a stale version) = %v, want ErrConflict", err)
	}
	// A delete applied and answered as failed cannot be told from a lane freed by another release:
	// it is a conflict, and the lane is free.
	if err := s.Delete(ctx, claimed); !errors.Is(err, lease.ErrConflict) {
		t.Errorf("Delete() applied and retried = %v, want ErrConflict", err)
	}
	if stored, _ := s.Get(ctx, claimed.Key()); stored != nil {
		t.Errorf("lease still stored after Delete: %+v", stored)
	}
}
