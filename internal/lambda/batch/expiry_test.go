package batch_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sfnlimit/sfnlimit/internal/lambda/batch"
)

// expiresAt returns the TTL attribute of the last item written under pk and sk, and whether it has one.
func expiresAt(t *testing.T, m *meter, pk, sk string) (time.Time, bool) {
	t.Helper()
	it, ok := m.written[pk+"|"+sk]
	if !ok {
		t.Fatalf("no item %s %s was written", pk, sk)
	}
	v, ok := it["expiresAt"].(*ddbtypes.AttributeValueMemberN)
	if !ok {
		return time.Time{}, false
	}
	sec, err := strconv.ParseInt(v.Value, 10, 64)
	if err != nil {
		t.Fatalf("%s %s expiresAt = %q, want seconds since the epoch", pk, sk, v.Value)
	}
	return time.Unix(sec, 0).UTC(), true
}

// A batch gets its expiry (the table's TTL attribute, in epoch seconds) from the write that closes
// it: never while it is open, and the announcement and a late job's record keep it.
func TestClosingWritesTheExpiryAndOpenBatchesHaveNone(t *testing.T) {
	const retention = 30 * 24 * time.Hour
	forBoth(t, 2, func(t *testing.T, l *batch.Ledger, m *meter) {
		ctx := context.Background()
		l.Retention = retention
		if err := l.Open(ctx, "ttl", 3, t0); err != nil {
			t.Fatal(err)
		}
		if _, has := expiresAt(t, m, "BATCH#ttl", "META"); has {
			t.Errorf("an open batch's item has expiresAt")
		}
		record(t, l, "ttl", "j1", 0, batch.Succeeded, time.Minute)
		record(t, l, "ttl", "j2", 0, batch.Succeeded, 2*time.Minute)
		if _, has := expiresAt(t, m, "BATCH#ttl", "META"); has {
			t.Errorf("a batch with one job to go has expiresAt")
		}
		if r := record(t, l, "ttl", "j3", 0, batch.Refused, 3*time.Minute); r.Result != batch.Closed {
			t.Fatalf("the last job = %s, want closed", r.Result)
		}
		want := t0.Add(3 * time.Minute).Add(retention)
		if got, has := expiresAt(t, m, "BATCH#ttl", "META"); !has || !got.Equal(want) {
			t.Errorf("closed batch expiresAt = %s (%v), want %s", got, has, want)
		}
		if err := l.Announced(ctx, "ttl"); err != nil {
			t.Fatal(err)
		}
		if got, has := expiresAt(t, m, "BATCH#ttl", "META"); !has || !got.Equal(want) {
			t.Errorf("announced batch expiresAt = %s (%v), want %s kept", got, has, want)
		}
		record(t, l, "ttl", "late", 0, batch.Succeeded, time.Hour)
		if got, has := expiresAt(t, m, "BATCH#ttl", "LATE#late#0"); !has || !got.Equal(t0.Add(time.Hour).Add(retention)) {
			t.Errorf("late job expiresAt = %s (%v), want its end + retention", got, has)
		}
		sum, _, err := l.Show(ctx, "ttl", false)
		if err != nil || !sum.ExpiresAt.Equal(want) {
			t.Errorf("Show = ExpiresAt %s, %v; want %s", sum.ExpiresAt, err, want)
		}
	})
}

// Without a retention a closed batch is kept: no item gets expiresAt.
func TestNoRetentionKeepsClosedBatches(t *testing.T) {
	forBoth(t, 2, func(t *testing.T, l *batch.Ledger, m *meter) {
		if err := l.Open(context.Background(), "keep", 1, t0); err != nil {
			t.Fatal(err)
		}
		record(t, l, "keep", "j1", 0, batch.Succeeded, time.Minute)
		if got, has := expiresAt(t, m, "BATCH#keep", "META"); has {
			t.Errorf("closed batch without retention expiresAt = %s, want none", got)
		}
	})
}
