package waitroom_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/sfnlimit/sfnlimit/internal/fakes"
	"github.com/sfnlimit/sfnlimit/internal/testmoto"
	"github.com/sfnlimit/sfnlimit/internal/waitroom"
)

var moto *dynamodb.Client

func TestMain(m *testing.M) { os.Exit(testmoto.RunDynamoDB(m, &moto)) }

type db interface {
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

func waiter(typ, id string, at time.Duration) waitroom.Waiter {
	return waitroom.Waiter{Type: typ, MessageID: "msg-" + id, ReceiptHandle: "AQEB-" + id, JobID: id, ParkedAt: t0.Add(at)}
}

func TestTakeOldestFirst(t *testing.T) {
	forBoth(t, func(t *testing.T, s *waitroom.Store) {
		ctx := context.Background()
		for _, w := range []waitroom.Waiter{
			waiter("pay", "b", 2*time.Second), waiter("pay", "a", time.Second), waiter("mail", "m", 0), waiter("pay", "c", 3*time.Second),
		} {
			if err := s.Park(ctx, w); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Unpark(ctx, waiter("pay", "b", 2*time.Second)); err != nil {
			t.Fatal(err)
		}
		var got []string
		for {
			w, err := s.Take(ctx, "pay")
			if err != nil {
				t.Fatal(err)
			}
			if w == nil {
				break
			}
			if want := waiter("pay", w.JobID, w.ParkedAt.Sub(t0)); *w != want {
				t.Errorf("Take = %+v, want %+v", *w, want)
			}
			got = append(got, w.JobID)
		}
		// Parked again with a new handle: one item, the new handle, the new time.
		again := waiter("pay", "d", 5*time.Second)
		for i, at := range []time.Duration{4 * time.Second, 5 * time.Second} {
			w := waiter("pay", "d", at)
			w.ReceiptHandle += fmt.Sprint("-", i)
			if err := s.Park(ctx, w); err != nil {
				t.Fatal(err)
			}
			again = w
		}
		if w, err := s.Take(ctx, "pay"); err != nil || w == nil || *w != again {
			t.Errorf("Take after parking twice = %+v, %v; want %+v", w, err, again)
		}
		if w, err := s.Take(ctx, "pay"); err != nil || w != nil {
			t.Errorf("Take of an empty room = %+v, %v; want nil", w, err)
		}
		if fmt.Sprint(got) != "[a c]" {
			t.Errorf("taken in order %v, want [a c] (b unparked; mail is another type)", got)
		}
		if w, err := s.Take(ctx, "mail"); err != nil || w == nil || w.JobID != "m" {
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
			if err := s.Park(ctx, waiter("pay", fmt.Sprint(i), time.Duration(i)*time.Millisecond)); err != nil {
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
				w, err := s.Take(ctx, "pay")
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
