package batch_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
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

// A batch whose item expired cannot be opened again under its id: its jobs' records and counts are
// still in the table, and a new batch would count into them and never close.
func TestAnExpiredBatchsIDCannotBeOpenedAgain(t *testing.T) {
	forBoth(t, 2, func(t *testing.T, l *batch.Ledger, m *meter) {
		ctx := context.Background()
		if err := l.Open(ctx, "gone", 1, t0); err != nil {
			t.Fatal(err)
		}
		record(t, l, "gone", "j1", 0, batch.Succeeded, time.Minute)
		if err := l.Open(ctx, "gone", 1, t0); err != nil {
			t.Errorf("Open of a closed batch not yet expired = %v, want nil (it exists)", err)
		}
		expire(t, m, "BATCH#gone")
		if err := l.Open(ctx, "gone", 1, t0.Add(40*24*time.Hour)); !errors.Is(err, batch.ErrExpired) {
			t.Errorf("Open after the batch item expired = %v, want ErrExpired", err)
		}
		if err := l.Open(ctx, "fresh", 1, t0); err != nil {
			t.Errorf("Open of a new id = %v", err)
		}
	})
}

// expire deletes the batch item pk as DynamoDB's TTL would.
func expire(t *testing.T, m *meter, pk string) {
	t.Helper()
	d, ok := m.db.(interface {
		DeleteItem(context.Context, *dynamodb.DeleteItemInput, ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
	})
	if !ok {
		t.Skip("the table cannot delete items")
	}
	it := m.written[pk+"|META"]
	if _, err := d.DeleteItem(context.Background(), &dynamodb.DeleteItemInput{
		TableName: &m.table, Key: map[string]ddbtypes.AttributeValue{"pk": it["pk"], "sk": it["sk"]},
	}); err != nil {
		t.Fatal(err)
	}
}

// openRacer lets another ledger open a batch and count a job in it between the two reads of an
// Open that found no batch item: just after Open's read of the batch item (absent), as two routers
// taking the first jobs of one batch at once do.
type openRacer struct {
	db
	race func()
}

func (r *openRacer) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	out, err := r.db.GetItem(ctx, in, o...)
	if sk, _ := in.Key["sk"].(*ddbtypes.AttributeValueMemberS); err == nil && out.Item == nil && sk != nil && sk.Value == "META" && r.race != nil {
		race := r.race
		r.race = nil
		race()
	}
	return out, err
}

// A batch opened by another job between Open's read of the batch item and its check for an
// expired batch of the id: shard 0 has a count by then, as an expired batch's does, but the batch
// item is there. Open must take the batch for open (its size checked), not expired: refusing the
// job as invalid_batch counted a valid job of an open batch as refused (seed 10080 of all).
func TestOpenRacingAnotherOpenIsNotExpired(t *testing.T) {
	forBoth(t, 2, func(t *testing.T, l *batch.Ledger, m *meter) {
		ctx := context.Background()
		if err := l.Open(ctx, "table", 1, t0); err != nil { // m.table names the table then
			t.Fatal(err)
		}
		for _, tt := range []struct {
			id   string
			size int
			want error
		}{{"race", 2, nil}, {"race-size", 3, batch.ErrSizeMismatch}} {
			r := &openRacer{db: m, race: func() {
				if err := l.Open(ctx, tt.id, 2, t0); err != nil { // one shard: the job counts in shard 0
					t.Fatal(err)
				}
				record(t, l, tt.id, "first", 0, batch.Refused, 0)
			}}
			racing := batch.New(r, m.table)
			if err := racing.Open(ctx, tt.id, tt.size, t0); !errors.Is(err, tt.want) || (tt.want == nil && err != nil) {
				t.Errorf("Open(%s, %d) racing another open of size 2 = %v, want %v", tt.id, tt.size, err, tt.want)
			}
			if r.race != nil {
				t.Fatalf("Open(%s) never read an absent batch item: the race was not run", tt.id)
			}
		}
	})
}
