package lease_test

import (
	"context"
	"errors"
	"slices"
	"sort"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
	"github.com/sfnlimit/sfnlimit/internal/tools/fakes"
)

// Every type that got a lease is in the registry, and stays there when its leases are gone: the
// sweep reads it instead of scanning the table.
func TestStoreTypesRegistersEveryLeasedType(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db table, name string, s *lease.Store) {
		ctx := context.Background()
		var last lease.Lease
		for _, k := range []lease.Key{{"reports", 1}, {"reports", 2}, {"payments", 1}, {"retired", 3}} {
			last = mustPut(t, s, sample(k.Type, k.Lane), nil)
		}
		if err := s.Delete(ctx, last); err != nil { // retired has no lease left
			t.Fatal(err)
		}
		// A second process (a new store on the same table) sees the same registry.
		other := lease.NewStore(db, name)
		for _, st := range []*lease.Store{s, other} {
			got, err := st.Types(ctx)
			if err != nil {
				t.Fatal(err)
			}
			sort.Strings(got)
			if want := []string{"payments", "reports", "retired"}; !slices.Equal(got, want) {
				t.Errorf("Types() = %q, want %q", got, want)
			}
		}
		// The registry is not taken for a lease.
		all, err := s.All(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(all) != 3 {
			t.Errorf("All() = %s, want the 3 leases only", keysOf(all))
		}
	})
}

// A lease is never written unless its type is registered.
func TestStorePutFailsWhenTheTypeCannotBeRegistered(t *testing.T) {
	db := fakes.NewDynamoDB("leases")
	s := lease.NewStore(db, "leases")
	puts := 0
	db.OnCall = func(op string) error {
		if op == "PutItem" {
			puts++
			if puts == 1 {
				return errors.New("throttled")
			}
		}
		return nil
	}
	if _, err := s.Put(context.Background(), sample("reports", 1), nil); err == nil {
		t.Fatal("Put() = nil error, want the registration's")
	}
	if it := db.Item("LEASE#reports", "LANE#000001"); it != nil {
		t.Errorf("lease written without its type registered: %v", it)
	}
	mustPut(t, s, sample("reports", 1), nil) // the next attempt registers, then writes
	if got, err := s.Types(context.Background()); err != nil || !slices.Equal(got, []string{"reports"}) {
		t.Errorf("Types() = %q, %v; want [reports]", got, err)
	}
}

// Leases written before the registry existed are found by one scan, on the first Types call; later
// calls read the registry only.
func TestStoreTypesScansOnceForLeasesOlderThanTheRegistry(t *testing.T) {
	db := fakes.NewDynamoDB("leases")
	db.PageSize = 2
	ctx := context.Background()
	for _, typ := range []string{"legacy", "reports"} {
		putOldLease(t, db, typ)
	}
	scans := 0
	db.OnCall = func(op string) error {
		if op == "Scan" {
			scans++
		}
		return nil
	}
	afterFirst := 0
	for i := range 3 {
		got, err := lease.NewStore(db, "leases").Types(ctx) // each a fresh process
		if err != nil {
			t.Fatal(err)
		}
		sort.Strings(got)
		if want := []string{"legacy", "reports"}; !slices.Equal(got, want) {
			t.Errorf("call %d: Types() = %q, want %q", i+1, got, want)
		}
		if i == 0 {
			afterFirst = scans
		}
	}
	if afterFirst == 0 {
		t.Error("Types() never scanned: leases older than the registry are not found")
	}
	if scans != afterFirst {
		t.Errorf("Types() scanned again once the registry was complete (%d scans after the first call, %d after three)", afterFirst, scans)
	}
}

// The command line's view reads the same types without writing the registry.
func TestReadOnlyTypesDoesNotWrite(t *testing.T) {
	db := fakes.NewDynamoDB("leases")
	ctx := context.Background()
	if err := db.SetItem(map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: "LEASE#legacy"}, "sk": &types.AttributeValueMemberS{Value: "LANE#000001"},
		"type": &types.AttributeValueMemberS{Value: "legacy"}, "jobId": &types.AttributeValueMemberS{Value: "j-1"},
		"version": &types.AttributeValueMemberN{Value: "1"},
	}); err != nil {
		t.Fatal(err)
	}
	db.OnCall = func(op string) error {
		if op != "Query" && op != "Scan" && op != "GetItem" {
			t.Errorf("read-only Types called %s", op)
		}
		return nil
	}
	got, err := lease.ReadOnly(lease.NewStore(db, "leases")).Types(ctx)
	if err != nil || !slices.Equal(got, []string{"legacy"}) {
		t.Errorf("Types() = %q, %v; want [legacy]", got, err)
	}
}

// The one scan for leases older than the registry reads the whole table, which at millions of jobs a
// day may not finish within one releaser invocation. Each call must keep what it read, and the next
// go on from there: a scan that started over every time would never finish, and the sweep would
// never find those leases.
func TestStoreTypesScanGoesOnWhereTheLastCallStopped(t *testing.T) {
	db := fakes.NewDynamoDB("leases")
	db.PageSize = 1
	ctx := context.Background()
	legacy := []string{"a", "b", "c", "d", "e", "f"}
	for _, typ := range legacy {
		putOldLease(t, db, typ)
	}
	// Each invocation has time for two pages of the scan; the third fails (its deadline).
	scans := 0
	db.OnCall = func(op string) error {
		if op == "Scan" {
			scans++
			if scans > 2 {
				return context.DeadlineExceeded
			}
		}
		return nil
	}
	var got []string
	for call := 1; call <= 2*len(legacy); call++ {
		scans = 0
		var err error
		got, err = lease.NewStore(db, "leases").Types(ctx) // each a fresh invocation
		if err == nil {
			break
		}
	}
	sort.Strings(got)
	if !slices.Equal(got, legacy) {
		t.Fatalf("Types() = %q after %d invocations of two pages each, want %q: the scan never finishes", got, 2*len(legacy), legacy)
	}
	// Done: no call scans again.
	scans = 0
	if got, err := lease.NewStore(db, "leases").Types(ctx); err != nil || len(got) != len(legacy) || scans != 0 {
		t.Errorf("after the scan finished: Types() = %q, %v with %d scans; want %d types and no scan", got, err, scans, len(legacy))
	}
}

// putOldLease writes lane 1's lease of typ straight into the table, as a version before the type
// registry did: no registry item names its type.
func putOldLease(t *testing.T, db *fakes.DynamoDB, typ string) {
	t.Helper()
	if err := db.SetItem(map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: "LEASE#" + typ}, "sk": &types.AttributeValueMemberS{Value: "LANE#000001"},
		"type": &types.AttributeValueMemberS{Value: typ}, "lane": &types.AttributeValueMemberN{Value: "1"},
		"jobId": &types.AttributeValueMemberS{Value: "j-1"}, "version": &types.AttributeValueMemberN{Value: "1"},
	}); err != nil {
		t.Fatal(err)
	}
}
