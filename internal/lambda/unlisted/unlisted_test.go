package unlisted_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/sfnlimit/sfnlimit/internal/lambda/unlisted"
	"github.com/sfnlimit/sfnlimit/internal/tools/fakes"
	"github.com/sfnlimit/sfnlimit/internal/tools/testmoto"
)

var moto *dynamodb.Client

func TestMain(m *testing.M) { os.Exit(testmoto.RunDynamoDB(m, &moto)) }

type db interface {
	PutItem(context.Context, *dynamodb.PutItemInput, ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	Query(context.Context, *dynamodb.QueryInput, ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
}

// forBoth runs f on moto and on the in-memory table the router's tests use; container returns the
// slots of a new router container on that table.
func forBoth(t *testing.T, f func(t *testing.T, container func(limit int) *unlisted.Slots)) {
	run := func(t *testing.T, d db, table string) {
		now := time.Date(2026, 11, 25, 5, 0, 0, 0, time.UTC)
		clock.set(now)
		f(t, func(limit int) *unlisted.Slots {
			return &unlisted.Slots{DB: d, Table: table, Limit: limit, Now: clock.now}
		})
	}
	t.Run("dynamodb", func(t *testing.T) { run(t, moto, testmoto.Table(t, moto, "unlisted")) })
	t.Run("fake", func(t *testing.T) { run(t, fakes.NewDynamoDB("t"), "t") })
}

type testClock struct {
	mu sync.Mutex
	at time.Time
}

func (c *testClock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.at }
func (c *testClock) set(t time.Time)     { c.mu.Lock(); defer c.mu.Unlock(); c.at = t }
func (c *testClock) add(d time.Duration) { c.set(c.now().Add(d)) }

var clock = &testClock{}

// At most Limit unlisted types hold slots, whichever container asks; a type holding one takes no
// second; one more type is refused until a slot has expired, HoldFor after its type's last take.
func TestSlotsBoundTheUnlistedTypes(t *testing.T) {
	forBoth(t, func(t *testing.T, container func(int) *unlisted.Slots) {
		ctx := context.Background()
		a, b := container(2), container(2)
		for _, take := range []struct {
			s   *unlisted.Slots
			typ string
		}{{a, "x"}, {b, "y"}, {b, "x"}, {a, "y"}, {a, "x"}} {
			if err := take.s.Take(ctx, take.typ, "AIDA"+take.typ); err != nil {
				t.Fatalf("Take(%s) = %v, want its slot", take.typ, err)
			}
		}
		if err := b.Take(ctx, "z", "AIDAz"); !errors.Is(err, unlisted.ErrFull) {
			t.Fatalf("Take(z) with x and y holding both slots = %v, want ErrFull", err)
		}
		// x routes again a day and a second later: its slot is renewed, y's is not.
		clock.add(24*time.Hour + time.Second)
		if err := a.Take(ctx, "x", "AIDAx"); err != nil {
			t.Fatal(err)
		}
		clock.add(unlisted.HoldFor - 24*time.Hour - 2*time.Second)
		if err := container(2).Take(ctx, "z", "AIDAz"); !errors.Is(err, unlisted.ErrFull) {
			t.Fatalf("Take(z) a second before y's slot expires = %v, want ErrFull", err)
		}
		clock.add(time.Second)
		if err := container(2).Take(ctx, "z", "AIDAz"); err != nil {
			t.Fatalf("Take(z) once y's slot expired = %v, want y's slot", err)
		}
		if err := container(2).Take(ctx, "y", "AIDAy"); !errors.Is(err, unlisted.ErrFull) {
			t.Errorf("Take(y) with x and z holding both slots = %v, want ErrFull", err)
		}
	})
}

// One sender's new types take at most half the slots (Share): however many types it invents,
// other senders' unlisted types still find a slot; a type holding a slot keeps it for anyone.
func TestSlotsShareBySender(t *testing.T) {
	forBoth(t, func(t *testing.T, container func(int) *unlisted.Slots) {
		ctx := context.Background()
		s := container(4)
		for _, typ := range []string{"m1", "m2"} {
			if err := s.Take(ctx, typ, "AROAMALLORY"); err != nil {
				t.Fatalf("Take(%s) = %v, want a slot (within its share)", typ, err)
			}
		}
		if err := s.Take(ctx, "m3", "AROAMALLORY"); !errors.Is(err, unlisted.ErrFull) {
			t.Fatalf("Take(m3) of a sender holding 2 of 4 = %v, want ErrFull (its share)", err)
		}
		for _, typ := range []string{"a1", "m1"} {
			if err := container(4).Take(ctx, typ, "AIDAACME"); err != nil {
				t.Errorf("Take(%s) of another sender = %v, want a slot", typ, err)
			}
		}
		if got := unlisted.Share(1); got != 1 {
			t.Errorf("Share(1) = %d, want 1", got)
		}
	})
}

// Routers racing for the slots never give more types a slot than Limit.
func TestSlotsRace(t *testing.T) {
	forBoth(t, func(t *testing.T, container func(int) *unlisted.Slots) {
		const limit, types = 3, 12
		var (
			wg  sync.WaitGroup
			mu  sync.Mutex
			won = map[string]bool{}
		)
		for i := range types * 2 { // two containers per type
			wg.Add(1)
			go func() {
				defer wg.Done()
				typ := fmt.Sprintf("t%d", i%types)
				err := container(limit).Take(context.Background(), typ, "AIDA"+typ)
				switch {
				case err == nil:
					mu.Lock()
					won[typ] = true
					mu.Unlock()
				case !errors.Is(err, unlisted.ErrFull):
					t.Errorf("Take(%s) = %v", typ, err)
				}
			}()
		}
		wg.Wait()
		if len(won) == 0 || len(won) > limit {
			t.Errorf("%d types took a slot (%v), want 1 to %d", len(won), won, limit)
		}
	})
}
