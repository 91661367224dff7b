package occupancy_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sfnlimit/sfnlimit/internal/fakes"
	"github.com/sfnlimit/sfnlimit/internal/occupancy"
	"github.com/sfnlimit/sfnlimit/internal/testmoto"
)

// store is what the scenarios use: occupancy.Store on moto, and fakes.Occupancy, which the
// router's, starter's and releaser's tests use in its place.
type store interface {
	Counts(ctx context.Context, typ string, limit int) ([]int, error)
	Join(ctx context.Context, j occupancy.Job, lane int) (occupancy.Joined, error)
	Leave(ctx context.Context, j occupancy.Job, lane int) (bool, error)
	Move(ctx context.Context, j occupancy.Job, from, to int) (bool, error)
	JoinEmpty(ctx context.Context, j occupancy.Job, lane int) (occupancy.Joined, error)
	Get(ctx context.Context, j occupancy.Job) (*occupancy.Marker, error)
	Cancel(ctx context.Context, j occupancy.Job, lane int) (bool, error)
}

var moto *dynamodb.Client

func TestMain(m *testing.M) { os.Exit(testmoto.RunDynamoDB(m, &moto)) }

// countingDB counts the store's calls to DynamoDB.
type countingDB struct {
	*dynamodb.Client
	queries, transactions, gets atomic.Int64
}

func (c *countingDB) Query(ctx context.Context, in *dynamodb.QueryInput, o ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	c.queries.Add(1)
	return c.Client.Query(ctx, in, o...)
}

func (c *countingDB) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, o ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	c.transactions.Add(1)
	return c.Client.TransactWriteItems(ctx, in, o...)
}

func (c *countingDB) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	c.gets.Add(1)
	return c.Client.GetItem(ctx, in, o...)
}

func newTable(t *testing.T) string { return testmoto.Table(t, moto, "occupancy") }

// forBoth runs f on the DynamoDB store (on moto) and on the fake, each with its own clock.
func forBoth(t *testing.T, f func(t *testing.T, s store, clock *fakes.Clock)) {
	t.Run("dynamodb", func(t *testing.T) {
		clock := fakes.NewClock(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC))
		f(t, occupancy.NewStore(moto, newTable(t)).WithClock(clock.Now), clock)
	})
	t.Run("fake", func(t *testing.T) {
		clock := fakes.NewClock(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC))
		f(t, fakes.NewOccupancy(clock.Now), clock)
	})
}

func counts(t *testing.T, s store, typ string, limit int) []int {
	t.Helper()
	c, err := s.Counts(context.Background(), typ, limit)
	if err != nil {
		t.Fatalf("Counts(%s, %d) = %v", typ, limit, err)
	}
	return c
}

func equal(a, b []int) bool { return fmt.Sprint(a) == fmt.Sprint(b) }

// step is one operation of a scenario and what it must answer.
type step struct {
	op       string // join, leave, move, wait
	job      occupancy.Job
	lane, to int
	wait     time.Duration
	// For join: the lane, counted and fresh it must report. For leave and move: ok.
	wantLane             int
	wantCounted, wantNew bool
	wantOK               bool
	// For bind: the lane must be refused as busy.
	wantBusy bool
	// wantCounts is lanes 1..len(wantCounts) of type "pay" after the step (nil: not checked).
	wantCounts []int
}

func TestCountsChangeExactlyOncePerJob(t *testing.T) {
	a := occupancy.Job{Type: "pay", ID: "a"}
	b := occupancy.Job{Type: "pay", ID: "b"}
	aRedriven := occupancy.Job{Type: "pay", ID: "a", Redrive: 1}
	other := occupancy.Job{Type: "mail", ID: "a"}
	c := occupancy.Job{Type: "pay", ID: "c"}
	cases := []struct {
		name  string
		steps []step
	}{
		{"a job joins once; a second join answers the first lane", []step{
			{op: "join", job: a, lane: 2, wantLane: 2, wantCounted: true, wantNew: true, wantCounts: []int{0, 1, 0}},
			{op: "join", job: a, lane: 3, wantLane: 2, wantCounted: true, wantCounts: []int{0, 1, 0}},
			{op: "join", job: b, lane: 2, wantLane: 2, wantCounted: true, wantNew: true, wantCounts: []int{0, 2, 0}},
		}},
		{"a job leaves once, and only the lane it is counted in", []step{
			{op: "join", job: a, lane: 1, wantLane: 1, wantCounted: true, wantNew: true, wantCounts: []int{1, 0, 0}},
			{op: "leave", job: a, lane: 2, wantOK: false, wantCounts: []int{1, 0, 0}},
			{op: "leave", job: a, lane: 1, wantOK: true, wantCounts: []int{0, 0, 0}},
			{op: "leave", job: a, lane: 1, wantOK: false, wantCounts: []int{0, 0, 0}},
			{op: "leave", job: b, lane: 1, wantOK: false, wantCounts: []int{0, 0, 0}},
		}},
		{"a job routed again within the deduplication window is not counted again", []step{
			{op: "join", job: a, lane: 3, wantLane: 3, wantCounted: true, wantNew: true},
			{op: "leave", job: a, lane: 3, wantOK: true},
			{op: "wait", wait: occupancy.DedupWindow - time.Second},
			{op: "join", job: a, lane: 1, wantLane: 3, wantCounted: false, wantCounts: []int{0, 0, 0}},
			{op: "leave", job: a, lane: 3, wantOK: false, wantCounts: []int{0, 0, 0}},
		}},
		{"after the deduplication window a copy is delivered, so it counts", []step{
			{op: "join", job: a, lane: 3, wantLane: 3, wantCounted: true, wantNew: true},
			{op: "leave", job: a, lane: 3, wantOK: true},
			{op: "wait", wait: occupancy.DedupWindow + 2*time.Second},
			{op: "join", job: a, lane: 1, wantLane: 1, wantCounted: true, wantNew: true, wantCounts: []int{1, 0, 0}},
			{op: "leave", job: a, lane: 1, wantOK: true, wantCounts: []int{0, 0, 0}},
		}},
		{"a cancelled join leaves no tombstone: the job's next routing counts it", []step{
			{op: "join", job: a, lane: 3, wantLane: 3, wantCounted: true, wantNew: true},
			{op: "cancel", job: a, lane: 2, wantOK: false, wantCounts: []int{0, 0, 1}},
			{op: "cancel", job: a, lane: 3, wantOK: true, wantCounts: []int{0, 0, 0}},
			{op: "cancel", job: a, lane: 3, wantOK: false, wantCounts: []int{0, 0, 0}},
			{op: "join", job: a, lane: 1, wantLane: 1, wantCounted: true, wantNew: true, wantCounts: []int{1, 0, 0}},
			{op: "leave", job: a, lane: 1, wantOK: true},
			{op: "cancel", job: a, lane: 1, wantOK: false, wantCounts: []int{0, 0, 0}},
		}},
		{"a job moves once, from the lane it is counted in", []step{
			{op: "join", job: a, lane: 3, wantLane: 3, wantCounted: true, wantNew: true},
			{op: "move", job: a, lane: 3, to: 1, wantOK: true, wantCounts: []int{1, 0, 0}},
			{op: "move", job: a, lane: 3, to: 2, wantOK: false, wantCounts: []int{1, 0, 0}},
			{op: "leave", job: a, lane: 3, wantOK: false, wantCounts: []int{1, 0, 0}},
			{op: "leave", job: a, lane: 1, wantOK: true, wantCounts: []int{0, 0, 0}},
			{op: "move", job: a, lane: 1, to: 2, wantOK: false, wantCounts: []int{0, 0, 0}},
		}},
		{"a redriven job and another type's job of the same id count apart", []step{
			{op: "join", job: a, lane: 1, wantLane: 1, wantCounted: true, wantNew: true},
			{op: "join", job: aRedriven, lane: 2, wantLane: 2, wantCounted: true, wantNew: true},
			{op: "join", job: other, lane: 3, wantLane: 3, wantCounted: true, wantNew: true, wantCounts: []int{1, 1, 0}},
			{op: "leave", job: a, lane: 1, wantOK: true, wantCounts: []int{0, 1, 0}},
		}},
		{"a bind takes an empty lane only, once per job", []step{
			{op: "join", job: a, lane: 1, wantLane: 1, wantCounted: true, wantNew: true},
			{op: "bind", job: b, lane: 1, wantBusy: true, wantCounts: []int{1, 0, 0}},
			{op: "bind", job: b, lane: 2, wantLane: 2, wantCounted: true, wantNew: true, wantCounts: []int{1, 1, 0}},
			{op: "bind", job: b, lane: 3, wantLane: 2, wantCounted: true, wantCounts: []int{1, 1, 0}},
			{op: "bind", job: b, lane: 2, wantLane: 2, wantCounted: true, wantCounts: []int{1, 1, 0}},
			{op: "leave", job: a, lane: 1, wantOK: true},
			{op: "bind", job: other, lane: 1, wantLane: 1, wantCounted: true, wantNew: true, wantCounts: []int{0, 1, 0}},
			{op: "bind", job: aRedriven, lane: 1, wantLane: 1, wantCounted: true, wantNew: true, wantCounts: []int{1, 1, 0}},
			{op: "bind", job: c, lane: 1, wantBusy: true, wantCounts: []int{1, 1, 0}},
		}},
		{"lanes above the limit are not read", []step{
			{op: "join", job: a, lane: 5, wantLane: 5, wantCounted: true, wantNew: true, wantCounts: []int{0, 0, 0}},
			{op: "join", job: b, lane: 3, wantLane: 3, wantCounted: true, wantNew: true, wantCounts: []int{0, 0, 1}},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			forBoth(t, func(t *testing.T, s store, clock *fakes.Clock) {
				ctx := context.Background()
				for i, st := range tc.steps {
					switch st.op {
					case "wait":
						clock.Advance(st.wait)
					case "join":
						got, err := s.Join(ctx, st.job, st.lane)
						want := occupancy.Joined{Lane: st.wantLane, Counted: st.wantCounted, Fresh: st.wantNew}
						if err != nil || got != want {
							t.Fatalf("step %d: Join(%s, %d) = %+v, %v; want %+v", i, st.job, st.lane, got, err, want)
						}
					case "bind":
						got, err := s.JoinEmpty(ctx, st.job, st.lane)
						if st.wantBusy {
							if !errors.Is(err, occupancy.ErrLaneBusy) {
								t.Fatalf("step %d: JoinEmpty(%s, %d) = %+v, %v; want ErrLaneBusy", i, st.job, st.lane, got, err)
							}
							break
						}
						want := occupancy.Joined{Lane: st.wantLane, Counted: st.wantCounted, Fresh: st.wantNew}
						if err != nil || got != want {
							t.Fatalf("step %d: JoinEmpty(%s, %d) = %+v, %v; want %+v", i, st.job, st.lane, got, err, want)
						}
					case "leave":
						ok, err := s.Leave(ctx, st.job, st.lane)
						if err != nil || ok != st.wantOK {
							t.Fatalf("step %d: Leave(%s, %d) = %v, %v; want %v", i, st.job, st.lane, ok, err, st.wantOK)
						}
					case "cancel":
						ok, err := s.Cancel(ctx, st.job, st.lane)
						if err != nil || ok != st.wantOK {
							t.Fatalf("step %d: Cancel(%s, %d) = %v, %v; want %v", i, st.job, st.lane, ok, err, st.wantOK)
						}
					case "move":
						ok, err := s.Move(ctx, st.job, st.lane, st.to)
						if err != nil || ok != st.wantOK {
							t.Fatalf("step %d: Move(%s, %d, %d) = %v, %v; want %v", i, st.job, st.lane, st.to, ok, err, st.wantOK)
						}
					}
					if st.wantCounts != nil {
						if got := counts(t, s, "pay", len(st.wantCounts)); !equal(got, st.wantCounts) {
							t.Fatalf("step %d (%s): counts = %v, want %v", i, st.op, got, st.wantCounts)
						}
					}
				}
			})
		})
	}
}

// Retried and racing calls, as a router, starter and releaser retrying at once would make them:
// every job's join, move and leave runs several times concurrently, and the counts still end at 0
// after passing through exactly one count per job.
func TestRacingRetriesCountEachJobOnce(t *testing.T) {
	forBoth(t, func(t *testing.T, s store, _ *fakes.Clock) {
		ctx := context.Background()
		const jobs, copies, limit = 24, 4, 4
		var fresh atomic.Int64
		var wg sync.WaitGroup
		for i := range jobs {
			j := occupancy.Job{Type: "pay", ID: fmt.Sprintf("job-%d", i)}
			for c := range copies {
				wg.Add(1)
				go func() {
					defer wg.Done()
					got, err := s.Join(ctx, j, 1+(i+c)%limit) // each copy asks for another lane
					if err != nil {
						t.Errorf("Join(%s) = %v", j, err)
						return
					}
					if got.Fresh {
						fresh.Add(1)
					}
				}()
			}
		}
		wg.Wait()
		if fresh.Load() != jobs {
			t.Fatalf("%d joins counted a job, want one per job (%d)", fresh.Load(), jobs)
		}
		c := counts(t, s, "pay", limit)
		total := 0
		for _, n := range c {
			total += n
		}
		if total != jobs {
			t.Fatalf("counts %v sum to %d, want %d", c, total, jobs)
		}
		// Each job moves to lane 1 and leaves it, every call made by several racers.
		var moved, left atomic.Int64
		for i := range jobs {
			j := occupancy.Job{Type: "pay", ID: fmt.Sprintf("job-%d", i)}
			m, err := s.Get(ctx, j)
			if err != nil || m == nil {
				t.Fatalf("Get(%s) = %v, %v", j, m, err)
			}
			for range copies {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if ok, err := s.Move(ctx, j, m.Lane, 1); err != nil {
						t.Errorf("Move(%s) = %v", j, err)
					} else if ok && m.Lane != 1 {
						moved.Add(1)
					}
					ok, err := s.Leave(ctx, j, 1)
					if err != nil {
						t.Errorf("Leave(%s) = %v", j, err)
					} else if ok {
						left.Add(1)
					}
				}()
			}
		}
		wg.Wait()
		if left.Load() != jobs {
			t.Fatalf("%d leaves uncounted a job, want one per job (%d)", left.Load(), jobs)
		}
		if got := counts(t, s, "pay", limit); !equal(got, make([]int, limit)) {
			t.Fatalf("counts after every job left = %v, want all 0 (moved %d)", got, moved.Load())
		}
	})
}

// Binders racing for the lanes of one type: each lane is taken by exactly one job.
func TestRacingBindsTakeEachLaneOnce(t *testing.T) {
	forBoth(t, func(t *testing.T, s store, _ *fakes.Clock) {
		ctx := context.Background()
		const jobs, limit = 12, 4
		var mu sync.Mutex
		byLane := map[int][]string{}
		var wg sync.WaitGroup
		for i := range jobs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				j := occupancy.Job{Type: "pay", ID: fmt.Sprintf("job-%d", i)}
				for ln := 1; ln <= limit; ln++ {
					got, err := s.JoinEmpty(ctx, j, ln)
					if errors.Is(err, occupancy.ErrLaneBusy) {
						continue
					}
					if err != nil {
						t.Errorf("JoinEmpty(%s, %d) = %v", j, ln, err)
						return
					}
					mu.Lock()
					byLane[got.Lane] = append(byLane[got.Lane], j.ID)
					mu.Unlock()
					return
				}
			}()
		}
		wg.Wait()
		if len(byLane) != limit {
			t.Errorf("lanes bound: %v, want each of %d lanes once", byLane, limit)
		}
		for ln, ids := range byLane {
			if len(ids) != 1 {
				t.Errorf("lane %d bound to %v, want one job", ln, ids)
			}
		}
		if got := counts(t, s, "pay", limit); !equal(got, []int{1, 1, 1, 1}) {
			t.Errorf("counts = %v, want one job per lane", got)
		}
	})
}

// The router's read is one query per type however many lanes it has, and a join or a leave one
// transaction: the cost per job the README states.
func TestCostPerJobIsBounded(t *testing.T) {
	db := &countingDB{Client: moto}
	s := occupancy.NewStore(db, newTable(t))
	ctx := context.Background()
	const limit = 500
	for i := range 40 {
		if _, err := s.Join(ctx, occupancy.Job{Type: "pay", ID: fmt.Sprint(i)}, 1+i*12%limit); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Counts(ctx, "pay", limit); err != nil {
		t.Fatal(err)
	}
	if got := db.queries.Load(); got != 1 {
		t.Errorf("Counts over %d lanes made %d queries, want 1", limit, got)
	}
	if got := db.transactions.Load(); got != 40 {
		t.Errorf("40 joins made %d transactions, want 40", got)
	}
	if got := db.gets.Load(); got != 0 {
		t.Errorf("40 first joins made %d reads, want 0", got)
	}
	if _, err := s.Leave(ctx, occupancy.Job{Type: "pay", ID: "0"}, 1); err != nil {
		t.Fatal(err)
	}
	if got := db.transactions.Load(); got != 41 {
		t.Errorf("a leave made %d transactions, want 1", got-40)
	}
}

func TestCountsRefusesNoLanes(t *testing.T) {
	forBoth(t, func(t *testing.T, s store, _ *fakes.Clock) {
		if _, err := s.Counts(context.Background(), "pay", 0); err == nil {
			t.Fatal("Counts(limit 0) = nil error, want one")
		}
		if _, err := s.Join(context.Background(), occupancy.Job{Type: "pay", ID: "a"}, 0); err == nil {
			t.Fatal("Join(lane 0) = nil error, want one")
		}
	})
}

// conflictingDB cancels the next conflicts transactions as DynamoDB does when another transaction
// holds one of their items (reason TransactionConflict on that item, None on the others), without
// applying them, and counts every transaction.
type conflictingDB struct {
	*dynamodb.Client
	conflicts    atomic.Int64
	transactions atomic.Int64
}

func (c *conflictingDB) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, o ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	c.transactions.Add(1)
	if c.conflicts.Add(-1) >= 0 {
		reasons := make([]types.CancellationReason, len(in.TransactItems))
		for i := range reasons {
			reasons[i].Code = aws.String("None")
		}
		reasons[len(reasons)-1].Code = aws.String("TransactionConflict") // the lane counter: the shared item
		return nil, &types.TransactionCanceledException{Message: aws.String("Transaction cancelled"), CancellationReasons: reasons}
	}
	return c.Client.TransactWriteItems(ctx, in, o...)
}

// Regression (issue 10, defect 6): DynamoDB cancels a transaction that meets another one on the lane
// counter, which every join, leave, move and cancel of a lane's jobs updates; the SDK does not retry
// that. Each operation must go through after a few conflicts, counting exactly once.
func TestTransactionConflictsAreRetried(t *testing.T) {
	db := &conflictingDB{Client: moto}
	s := occupancy.NewStore(db, newTable(t))
	ctx := context.Background()
	a, b := occupancy.Job{Type: "pay", ID: "a"}, occupancy.Job{Type: "pay", ID: "b"}
	ops := []struct {
		name string
		do   func() (bool, error)
		want []int
	}{
		{"join", func() (bool, error) { j, err := s.Join(ctx, a, 1); return j.Fresh, err }, []int{1, 0, 0}},
		{"join empty", func() (bool, error) { j, err := s.JoinEmpty(ctx, b, 2); return j.Fresh, err }, []int{1, 1, 0}},
		{"move", func() (bool, error) { return s.Move(ctx, a, 1, 3) }, []int{0, 1, 1}},
		{"leave", func() (bool, error) { return s.Leave(ctx, a, 3) }, []int{0, 1, 0}},
		{"cancel", func() (bool, error) { return s.Cancel(ctx, b, 2) }, []int{0, 0, 0}},
	}
	for _, op := range ops {
		db.conflicts.Store(3)
		before := db.transactions.Load()
		ok, err := op.do()
		if err != nil || !ok {
			t.Fatalf("%s after 3 transaction conflicts = %v, %v; want it done", op.name, ok, err)
		}
		if n := db.transactions.Load() - before; n != 4 {
			t.Errorf("%s made %d transactions, want 4 (3 cancelled by conflicts, 1 applied)", op.name, n)
		}
		if got := counts(t, s, "pay", 3); !equal(got, op.want) {
			t.Errorf("after %s: counts %v, want %v", op.name, got, op.want)
		}
	}
}

// A failed condition is the store's answer (already counted, lane busy, not in that lane): it is
// acted on after one transaction, never retried.
func TestFailedConditionsAreNotRetried(t *testing.T) {
	db := &countingDB{Client: moto}
	s := occupancy.NewStore(db, newTable(t))
	ctx := context.Background()
	a, b := occupancy.Job{Type: "pay", ID: "a"}, occupancy.Job{Type: "pay", ID: "b"}
	if _, err := s.Join(ctx, a, 1); err != nil {
		t.Fatal(err)
	}
	for _, op := range []struct {
		name string
		do   func() error
	}{
		{"join again", func() error { _, err := s.Join(ctx, a, 2); return err }},
		{"bind a busy lane", func() error {
			if _, err := s.JoinEmpty(ctx, b, 1); !errors.Is(err, occupancy.ErrLaneBusy) {
				return fmt.Errorf("JoinEmpty(busy lane) = %v, want ErrLaneBusy", err)
			}
			return nil
		}},
		{"leave the wrong lane", func() error { _, err := s.Leave(ctx, a, 2); return err }},
		{"move from the wrong lane", func() error { _, err := s.Move(ctx, a, 2, 3); return err }},
		{"cancel in the wrong lane", func() error { _, err := s.Cancel(ctx, a, 3); return err }},
	} {
		before := db.transactions.Load()
		if err := op.do(); err != nil {
			t.Fatalf("%s: %v", op.name, err)
		}
		if n := db.transactions.Load() - before; n != 1 {
			t.Errorf("%s made %d transactions, want 1 (a failed condition is an answer)", op.name, n)
		}
	}
}
