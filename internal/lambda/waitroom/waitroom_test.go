package waitroom_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sfnlimit/sfnlimit/internal/lambda/waitroom"
	"github.com/sfnlimit/sfnlimit/internal/tools/fakes"
	"github.com/sfnlimit/sfnlimit/internal/tools/testmoto"
)

var moto *dynamodb.Client

func TestMain(m *testing.M) { os.Exit(testmoto.RunDynamoDB(m, &moto)) }

type db interface {
	GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(context.Context, *dynamodb.PutItemInput, ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	DeleteItem(context.Context, *dynamodb.DeleteItemInput, ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
	Query(context.Context, *dynamodb.QueryInput, ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
}

// forBoth runs f on moto and on the in-memory table the starter's and releaser's tests use.
func forBoth(t *testing.T, f func(t *testing.T, s *waitroom.Store)) {
	t.Run("dynamodb", func(t *testing.T) {
		name := testmoto.Table(t, moto, "waitroom")
		f(t, waitroom.NewStore(moto, name))
	})
	t.Run("fake", func(t *testing.T) {
		var d db = fakes.NewDynamoDB("t")
		f(t, waitroom.NewStore(d, "t"))
	})
}

var t0 = time.Date(2026, 11, 22, 2, 0, 0, 0, time.UTC)

// waiter is the head of waiting group g of typ, job id, submitted at t0+at and parked a second later.
func waiter(typ, g, id string, at time.Duration) waitroom.Waiter {
	return waitroom.Waiter{Type: typ, Group: typ + "-" + g, MessageID: "msg-" + id, ReceiptHandle: "AQEB-" + id, JobID: id,
		SubmittedAt: t0.Add(at), ParkedAt: t0.Add(at + time.Second)}
}

// A release takes the parked group whose head was submitted earliest, not the one parked first; a
// group parked again keeps one record, its latest head's; an unpark removes only its own head's.
func TestTakeOldestHeadFirst(t *testing.T) {
	forBoth(t, func(t *testing.T, s *waitroom.Store) {
		ctx := context.Background()
		late := waiter("pay", "w1", "b", 2*time.Second)
		late.ParkedAt = t0 // parked before the others, its head submitted after a's
		for _, w := range []waitroom.Waiter{
			late, waiter("pay", "0", "a", time.Second), waiter("mail", "0", "m", 0), waiter("pay", "w2", "c", 3*time.Second),
			waiter("pay", "w3", "x", 0),
		} {
			if err := s.Park(ctx, w); err != nil {
				t.Fatal(err)
			}
		}
		// Group w3's head found a lane: its record goes. An unpark by a head that is no longer the
		// group's (w2's record is c's) leaves the record.
		if err := s.Unpark(ctx, waiter("pay", "w3", "x", 0)); err != nil {
			t.Fatal(err)
		}
		if err := s.Unpark(ctx, waiter("pay", "w2", "old-head", 0)); err != nil {
			t.Fatal(err)
		}
		listed, err := s.List(ctx, "pay")
		if err != nil || len(listed) != 3 {
			t.Errorf("List(pay) = %+v, %v; want the records of groups 0, w1, w2", listed, err)
		}
		var got []string
		for {
			w, err := take(ctx, s, "pay")
			if err != nil {
				t.Fatal(err)
			}
			if w == nil {
				break
			}
			got = append(got, w.JobID)
			if w.JobID == "a" {
				if want := waiter("pay", "0", "a", time.Second); *w != want {
					t.Errorf("Take = %+v, want %+v", *w, want)
				}
			}
		}
		if fmt.Sprint(got) != "[a b c]" {
			// With what was parked: a record missing before the takes is not an ordering fault.
			t.Errorf("taken in order %v, want [a b c] (oldest head first; x unparked; mail is another type); listed before: %+v", got, listed)
		}
		// A group parked again by its head: one record, the newer one. Another message of the group
		// cannot replace a record parked less than ParkFor ago (only a queue that hands out two
		// messages of one group at once gets there); after that it can.
		d := waiter("pay", "0", "d", 5*time.Second)
		for range 2 {
			if err := s.Park(ctx, d); err != nil {
				t.Fatal(err)
			}
		}
		e := waiter("pay", "0", "e", 6*time.Second)
		if err := s.Park(ctx, e); !errors.Is(err, waitroom.ErrGroupParked) {
			t.Errorf("Park(e) over d's fresh record = %v, want ErrGroupParked", err)
		}
		e.ParkedAt = d.ParkedAt.Add(waitroom.ParkFor + time.Second)
		if err := s.Park(ctx, e); err != nil {
			t.Errorf("Park(e) after d's record is due = %v, want it parked", err)
		}
		if w, err := take(ctx, s, "pay"); err != nil || w == nil || w.JobID != "e" {
			t.Errorf("Take after parking group 0 again = %+v, %v; want its latest head e", w, err)
		}
		if w, err := take(ctx, s, "pay"); err != nil || w != nil {
			t.Errorf("Take of an empty room = %+v, %v; want nil", w, err)
		}
		if w, err := take(ctx, s, "mail"); err != nil || w == nil || w.JobID != "m" {
			t.Errorf("Take(mail) = %+v, %v", w, err)
		}
	})
}

// Releases racing to wake parked jobs each wake a different one.
func TestConcurrentTakesNeverShare(t *testing.T) {
	forBoth(t, func(t *testing.T, s *waitroom.Store) {
		ctx := context.Background()
		const parked = 6
		for i := range parked {
			if err := s.Park(ctx, waiter("pay", fmt.Sprint("w", i+1), fmt.Sprint(i), time.Duration(i)*time.Millisecond)); err != nil {
				t.Fatal(err)
			}
		}
		var mu sync.Mutex
		seen := map[string]int{}
		var wg sync.WaitGroup
		for range parked + 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				w, err := take(ctx, s, "pay")
				if err != nil {
					// Three lost races in a row is allowed to fail; the release logs it and the
					// parked job looks again after ParkFor.
					return
				}
				if w != nil {
					mu.Lock()
					seen[w.JobID]++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		for id, n := range seen {
			if n != 1 {
				t.Errorf("parked job %s taken %d times, want once", id, n)
			}
		}
		if len(seen) == 0 {
			t.Error("no parked job taken")
		}
	})
}

// A record written before a type had several waiting groups (keyed by message id, with no
// submittedAt or messageId) is taken first, so the release that takes it either wakes that message
// or skips its dead handle; nothing of it is left.
func TestTakeAnUpgradedRecord(t *testing.T) {
	for name, d := range map[string]db{"dynamodb": nil, "fake": fakes.NewDynamoDB("t")} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			table := "t"
			if d == nil {
				d, table = moto, testmoto.Table(t, moto, "waitroom")
			}
			s := waitroom.NewStore(d, table)
			if err := s.Park(ctx, waiter("pay", "0", "new", time.Second)); err != nil {
				t.Fatal(err)
			}
			if _, err := d.PutItem(ctx, &dynamodb.PutItemInput{TableName: &table, Item: map[string]ddbtypes.AttributeValue{
				"pk": &ddbtypes.AttributeValueMemberS{Value: "WAIT#pay"}, "sk": &ddbtypes.AttributeValueMemberS{Value: "msg-old"},
				"receiptHandle": &ddbtypes.AttributeValueMemberS{Value: "AQEB-old"}, "jobId": &ddbtypes.AttributeValueMemberS{Value: "old"},
				"parkedAt": &ddbtypes.AttributeValueMemberS{Value: "2026-11-20T01:00:00Z"},
			}}); err != nil {
				t.Fatal(err)
			}
			w, err := take(ctx, s, "pay")
			if err != nil || w == nil || w.ReceiptHandle != "AQEB-old" {
				t.Fatalf("Take = %+v, %v; want the old record first", w, err)
			}
			if ws, err := s.List(ctx, "pay"); err != nil || len(ws) != 1 || ws[0].JobID != "new" {
				t.Errorf("List after taking the old record = %+v, %v; want only the new one", ws, err)
			}
		})
	}
}

// A delivery of a message that binds after a release woke the message (so the message was received
// again, and that later delivery parked) must not remove the later delivery's record: it is the
// only way a release wakes the message again (found by CI's throttling scenario on fauxqs: the group
// waited the whole park period). Its own record, and an earlier delivery's, go.
func TestUnparkLeavesALaterDeliverysRecord(t *testing.T) {
	forBoth(t, func(t *testing.T, s *waitroom.Store) {
		ctx := context.Background()
		delivery := func(n int) waitroom.Waiter {
			w := waiter("pay", "0", "a", time.Second)
			w.ReceiptHandle, w.Receives = fmt.Sprint("AQEB-a-", n), n
			return w
		}
		parked := func() []string {
			ws, err := s.List(ctx, "pay")
			if err != nil {
				t.Fatal(err)
			}
			var hs []string
			for _, w := range ws {
				hs = append(hs, fmt.Sprint(w.ReceiptHandle, "/", w.Receives))
			}
			return hs
		}
		for _, tt := range []struct {
			name           string
			parked, unpark waitroom.Waiter
			want           string
		}{
			{"a later delivery's record stays", delivery(3), delivery(2), "[AQEB-a-3/3]"},
			{"its own record goes", delivery(2), delivery(2), "[]"},
			{"an earlier delivery's record goes", delivery(1), delivery(2), "[]"},
			{"another message's record stays", waiter("pay", "0", "b", 0), delivery(2), "[AQEB-b/0]"},
		} {
			if err := s.Park(ctx, tt.parked); err != nil {
				t.Fatal(err)
			}
			if err := s.Unpark(ctx, tt.unpark); err != nil {
				t.Fatal(err)
			}
			if got := fmt.Sprint(parked()); got != tt.want {
				t.Errorf("%s: parked after Unpark = %s, want %s", tt.name, got, tt.want)
			}
			if _, err := take(ctx, s, "pay"); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// A parked group's record keeps what a release orders by and acts on: its head's priority, and
// whether it waits for a resume rather than a lane.
func TestParkKeepsPriorityAndPause(t *testing.T) {
	forBoth(t, func(t *testing.T, s *waitroom.Store) {
		ctx := context.Background()
		w := waiter("pay", "0", "a", 0)
		w.Priority, w.Paused, w.Receives, w.Key = 9, true, 3, "acme"
		if err := s.Park(ctx, w); err != nil {
			t.Fatal(err)
		}
		ws, err := s.List(ctx, "pay")
		if err != nil || len(ws) != 1 || ws[0] != w {
			t.Errorf("List = %+v, %v; want %+v", ws, err, w)
		}
	})
}

// take wakes the parked group of typ whose head was submitted earliest, as a release's wake-up
// does (List, then Claim, looking again when another claimer won): nil when none is parked.
func take(ctx context.Context, s *waitroom.Store, typ string) (*waitroom.Waiter, error) {
	for range 3 {
		ws, err := s.List(ctx, typ)
		if err != nil {
			return nil, err
		}
		var oldest *waitroom.Waiter
		for i, w := range ws {
			if oldest == nil || w.SubmittedAt.Before(oldest.SubmittedAt) ||
				(w.SubmittedAt.Equal(oldest.SubmittedAt) && w.ParkedAt.Before(oldest.ParkedAt)) {
				oldest = &ws[i]
			}
		}
		if oldest == nil {
			return nil, nil
		}
		ok, err := s.Claim(ctx, *oldest)
		if err != nil || ok {
			return oldest, err
		}
	}
	return nil, fmt.Errorf("take a parked group of type %s: claimed by others three times", typ)
}
