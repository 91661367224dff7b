package batch_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sfnlimit/sfnlimit/internal/lambda/batch"
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
	TransactWriteItems(context.Context, *dynamodb.TransactWriteItemsInput, ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
}

// meter counts what the ledger writes: the items of each committed transaction (by partition key)
// and their sizes, for the write units a job costs.
type meter struct {
	db
	mu sync.Mutex
	// txItems and txWCU are summed over committed transactions; putWCU over PutItems.
	txns, txItems, txWCU, putWCU int
	byPK                         map[string]int
	maxSize                      int
	// written is the last item each committed write put, by "pk|sk"; table is the table written.
	written map[string]map[string]ddbtypes.AttributeValue
	table   string
}

func (m *meter) wrote(it map[string]ddbtypes.AttributeValue) {
	if m.written == nil {
		m.written = map[string]map[string]ddbtypes.AttributeValue{}
	}
	key := it["pk"].(*ddbtypes.AttributeValueMemberS).Value + "|" + it["sk"].(*ddbtypes.AttributeValueMemberS).Value
	m.written[key] = it
}

func (m *meter) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, o ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	out, err := m.db.TransactWriteItems(ctx, in, o...)
	if err != nil {
		return out, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.txns++
	for _, it := range in.TransactItems {
		size := itemSize(it.Put.Item)
		m.maxSize = max(m.maxSize, size)
		m.txItems++
		// DynamoDB: a transactional write costs 2 write units per item per KB started.
		m.txWCU += 2 * ((size + 1023) / 1024)
		m.byPK[it.Put.Item["pk"].(*ddbtypes.AttributeValueMemberS).Value]++
		m.wrote(it.Put.Item)
	}
	return out, nil
}

func (m *meter) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	out, err := m.db.PutItem(ctx, in, o...)
	m.mu.Lock()
	defer m.mu.Unlock()
	// A failed conditional put is billed too.
	m.putWCU += (itemSize(in.Item) + 1023) / 1024
	if err == nil {
		m.wrote(in.Item)
		m.table = *in.TableName
	}
	return out, err
}

// itemSize is DynamoDB's item size: attribute names plus values (strings in bytes, numbers about one
// byte per two digits plus one).
func itemSize(it map[string]ddbtypes.AttributeValue) int {
	size := 0
	for k, v := range it {
		size += len(k)
		switch v := v.(type) {
		case *ddbtypes.AttributeValueMemberS:
			size += len(v.Value)
		case *ddbtypes.AttributeValueMemberN:
			size += (len(v.Value)+1)/2 + 1
		default:
			size++
		}
	}
	return size
}

// forBoth runs f on moto and on the in-memory table, with shards of perShard jobs.
func forBoth(t *testing.T, perShard int, f func(t *testing.T, l *batch.Ledger, m *meter)) {
	t.Run("dynamodb", func(t *testing.T) {
		m := &meter{db: moto, byPK: map[string]int{}}
		l := batch.New(m, testmoto.Table(t, moto, "batch"))
		l.PerShard = perShard
		f(t, l, m)
	})
	t.Run("fake", func(t *testing.T) {
		m := &meter{db: fakes.NewDynamoDB("t"), byPK: map[string]int{}}
		l := batch.New(m, "t")
		l.PerShard = perShard
		f(t, l, m)
	})
}

var t0 = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

func record(t *testing.T, l *batch.Ledger, id, job string, redrive int, o batch.Outcome, at time.Duration) batch.Recorded {
	t.Helper()
	r, err := l.Record(context.Background(), id, job, redrive, o, t0.Add(at))
	if err != nil {
		t.Fatalf("Record(%s, %s, redrive %d, %s) = %v", id, job, redrive, o, err)
	}
	return r
}

// Opening an open batch with its size is a no-op; with another size it is refused; a record of a
// batch never opened is refused.
func TestOpen(t *testing.T) {
	forBoth(t, 2, func(t *testing.T, l *batch.Ledger, _ *meter) {
		ctx := context.Background()
		for _, tt := range []struct {
			name     string
			id       string
			expected int
			want     error
		}{
			{"first open", "b1", 5, nil},
			{"same size again", "b1", 5, nil},
			{"another size", "b1", 6, batch.ErrSizeMismatch},
			{"another batch", "b2", 6, nil},
		} {
			if err := l.Open(ctx, tt.id, tt.expected, t0); !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Errorf("%s: Open(%s, %d) = %v, want %v", tt.name, tt.id, tt.expected, err, tt.want)
			}
		}
		if sum, _, err := l.Show(ctx, "b1", false); err != nil || sum.Expected != 5 || sum.Shards != 3 || sum.Closed {
			t.Errorf("Show(b1) = %+v, %v; want 5 jobs over 3 shards of 2, open", sum, err)
		}
		if _, err := l.Record(ctx, "never", "j", 0, batch.Succeeded, t0); !errors.Is(err, batch.ErrNotOpen) {
			t.Errorf("Record of a batch never opened = %v, want ErrNotOpen", err)
		}
	})
}

// A batch belongs to the principal that opened it: another principal's open is ErrNotOwned whatever
// size it gives, and changes nothing; Owner and Show name the owner; a batch opened without an
// owner takes anyone's jobs.
func TestOpenByOwner(t *testing.T) {
	forBoth(t, 2, func(t *testing.T, l *batch.Ledger, _ *meter) {
		ctx := context.Background()
		if err := l.OpenBy(ctx, "b1", 5, "AIDAOWNER", t0); err != nil {
			t.Fatal(err)
		}
		for _, tt := range []struct {
			owner    string
			expected int
			want     error
		}{
			{"AIDAOWNER", 5, nil},
			{"AIDAOWNER", 6, batch.ErrSizeMismatch},
			{"AROAOTHER", 5, batch.ErrNotOwned},
			{"AROAOTHER", 6, batch.ErrNotOwned},
			{"", 5, batch.ErrNotOwned},
		} {
			if err := l.OpenBy(ctx, "b1", tt.expected, tt.owner, t0); !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Errorf("OpenBy(b1, %d, %q) = %v, want %v", tt.expected, tt.owner, err, tt.want)
			}
		}
		if owner, err := l.Owner(ctx, "b1"); err != nil || owner != "AIDAOWNER" {
			t.Errorf("Owner(b1) = %q, %v; want AIDAOWNER", owner, err)
		}
		if sum, _, err := l.Show(ctx, "b1", false); err != nil || sum.Owner != "AIDAOWNER" || sum.Expected != 5 {
			t.Errorf("Show(b1) = %+v, %v; want owner AIDAOWNER, 5 jobs", sum, err)
		}
		if err := l.Open(ctx, "b2", 3, t0); err != nil {
			t.Fatal(err)
		}
		if err := l.OpenBy(ctx, "b2", 3, "AROAOTHER", t0); err != nil {
			t.Errorf("OpenBy of a batch opened without an owner = %v, want nil", err)
		}
		if !batch.Owns("", "AROAOTHER") || batch.Owns("AIDAOWNER", "AROAOTHER") || !batch.Owns("AIDAOWNER", "AIDAOWNER") {
			t.Error("Owns: want an ownerless batch to admit anyone, an owned one only its owner")
		}
	})
}

// Every delivery after a job's first changes nothing, whatever outcome it says; the counts per
// outcome, the times and the dead-lettered ids are those of the first deliveries; the batch closes
// once, at its last job.
func TestRecordCountsEachJobOnce(t *testing.T) {
	forBoth(t, 2, func(t *testing.T, l *batch.Ledger, _ *meter) {
		ctx := context.Background()
		if err := l.Open(ctx, "up", 5, t0); err != nil {
			t.Fatal(err)
		}
		steps := []struct {
			job     string
			redrive int
			outcome batch.Outcome
			at      time.Duration
			want    batch.Result
		}{
			{"a", 0, batch.Cancelled, 3 * time.Second, batch.Counted},       // stopped by a newer job of its key
			{"a", 0, batch.Succeeded, 4 * time.Second, batch.Duplicate},     // a contrary release
			{"b", 0, batch.DeadLettered, 1 * time.Second, batch.Counted},    // ends first
			{"b", 1, batch.Succeeded, 9 * time.Second, batch.Duplicate},     // redriven while open
			{"c", 0, batch.Refused, 5 * time.Second, batch.Counted},         //
			{"a", 0, batch.DeadLettered, 6 * time.Second, batch.Duplicate},  // a late, contrary status event
			{"d", 0, batch.Skipped, 7 * time.Second, batch.Counted},         // skipped behind an older job of its key
			{"d", 0, batch.Skipped, 7 * time.Second, batch.Duplicate},       // redelivered
			{"e", 0, batch.Succeeded, 8 * time.Second, batch.Closed},        // the fifth job closes
			{"c", 0, batch.Refused, 10 * time.Second, batch.Duplicate},      // after the close: known
			{"e", 0, batch.Succeeded, 11 * time.Second, batch.Closed},       // the closer's redelivery, not yet announced
			{"f", 0, batch.Succeeded, 12 * time.Second, batch.AfterClose},   // a sixth job
			{"b", 2, batch.Succeeded, 13 * time.Second, batch.AfterClose},   // redriven after the close
			{"b", 0, batch.DeadLettered, 14 * time.Second, batch.Duplicate}, // its old generation again
		}
		closed := 0
		for i, st := range steps {
			r := record(t, l, "up", st.job, st.redrive, st.outcome, st.at)
			if r.Result != st.want {
				t.Errorf("step %d: Record(%s, redrive %d, %s) = %s, want %s", i, st.job, st.redrive, st.outcome, r.Result, st.want)
			}
			if r.Result == batch.Closed {
				closed++
				if r.Summary == nil {
					t.Fatalf("step %d: Closed without a summary", i)
				}
			}
		}
		if closed != 2 {
			t.Errorf("Closed answered %d times, want 2 (the closer, and its redelivery before Announced)", closed)
		}
		if err := l.Announced(ctx, "up"); err != nil {
			t.Fatal(err)
		}
		if r := record(t, l, "up", "e", 0, batch.Succeeded, 0); r.Result != batch.Duplicate {
			t.Errorf("closer's redelivery after Announced = %s, want duplicate", r.Result)
		}
		sum, jobs, err := l.Show(ctx, "up", true)
		if err != nil {
			t.Fatal(err)
		}
		want := map[batch.Outcome]int{batch.Succeeded: 1, batch.DeadLettered: 1, batch.Refused: 1, batch.Cancelled: 1, batch.Skipped: 1}
		if fmt.Sprint(sum.Counts) != fmt.Sprint(want) || sum.Recorded != 5 {
			t.Errorf("counts = %v (recorded %d), want %v (5)", sum.Counts, sum.Recorded, want)
		}
		if !sum.Closed || sum.ClosedBy != "e" || !sum.ClosedAt.Equal(t0.Add(8*time.Second)) || !sum.Announced {
			t.Errorf("closed %v by %q at %v, announced %v; want closed by e at +8s, announced", sum.Closed, sum.ClosedBy, sum.ClosedAt, sum.Announced)
		}
		if !sum.First.Equal(t0.Add(time.Second)) || !sum.Last.Equal(t0.Add(8*time.Second)) {
			t.Errorf("first, last = %v, %v; want +1s (b), +8s (e)", sum.First, sum.Last)
		}
		if fmt.Sprint(sum.DeadLetteredIDs) != "[b c]" || sum.DeadLetteredMore { // c was refused: on the dead-letter queue too; d skipped is not
			t.Errorf("dead-lettered = %v (more %v), want [b c]", sum.DeadLetteredIDs, sum.DeadLetteredMore)
		}
		var late []string
		for _, j := range sum.Late {
			late = append(late, fmt.Sprintf("%s/%d/%s", j.ID, j.Redrive, j.Outcome))
		}
		if fmt.Sprint(late) != "[b/2/succeeded f/0/succeeded]" {
			t.Errorf("late jobs = %v, want b's redrive 2 and f", late)
		}
		var got []string
		for _, j := range jobs {
			got = append(got, fmt.Sprintf("%s:%s:%d", j.ID, j.Outcome, j.Redrive))
		}
		if fmt.Sprint(got) != "[a:cancelled:0 b:dead_lettered:0 c:refused:0 d:skipped:0 e:succeeded:0]" {
			t.Errorf("jobs = %v", got)
		}
	})
}

// Records racing to close the batch, each job delivered twice at once: exactly one closer, every
// job counted once.
func TestRacingRecordsCloseOnce(t *testing.T) {
	forBoth(t, 10, func(t *testing.T, l *batch.Ledger, _ *meter) {
		ctx := context.Background()
		const jobs = 50
		if err := l.Open(ctx, "race", jobs, t0); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		results := map[batch.Result]int{}
		var closer string
		var wg sync.WaitGroup
		for i := range 2 * jobs {
			wg.Go(func() {
				job := fmt.Sprint("j", i%jobs)
				r, err := l.Record(ctx, "race", job, 0, batch.Succeeded, t0.Add(time.Duration(i)*time.Millisecond))
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					t.Errorf("Record(%s) = %v", job, err)
					return
				}
				results[r.Result]++
				if r.Result == batch.Closed {
					closer = job
				}
			})
		}
		wg.Wait()
		// The closing job's own duplicate may also answer Closed (not yet announced): count closers
		// by job.
		if results[batch.Counted] != jobs-1 || results[batch.Closed]+results[batch.Duplicate] != jobs+1 || results[batch.Closed] < 1 {
			t.Errorf("results = %v, want %d counted, 1 closer (and its duplicate perhaps), the rest duplicates", results, jobs-1)
		}
		sum, _, err := l.Show(ctx, "race", false)
		if err != nil {
			t.Fatal(err)
		}
		if sum.Recorded != jobs || sum.Counts[batch.Succeeded] != jobs || sum.ClosedBy != closer {
			t.Errorf("recorded %d (%v), closed by %q; want %d, closed by %q", sum.Recorded, sum.Counts, sum.ClosedBy, jobs, closer)
		}
	})
}

// Jobs spread over the shards by their ids' hash, no shard is counted past its share, and the
// filled shards make the batch item a write per shard, not per job. It also measures the write
// units a job costs.
func TestShardsSpreadWrites(t *testing.T) {
	forBoth(t, 25, func(t *testing.T, l *batch.Ledger, m *meter) {
		ctx := context.Background()
		const jobs = 400
		if err := l.Open(ctx, "wide", jobs, t0); err != nil {
			t.Fatal(err)
		}
		shards := l.ShardsFor(jobs)
		homes := make([]int, shards)
		closed := 0
		for i := range jobs {
			job := fmt.Sprintf("doc-%05d", i)
			homes[batch.Home(job, shards)]++
			o := batch.Succeeded
			if i%40 == 0 {
				o = batch.DeadLettered
			}
			if r := record(t, l, "wide", job, 0, o, time.Duration(i)*time.Millisecond); r.Result == batch.Closed {
				closed++
			} else if r.Result != batch.Counted {
				t.Errorf("Record(%s) = %s, want counted", job, r.Result)
			}
		}
		if closed != 1 {
			t.Errorf("closed %d times, want once", closed)
		}
		share := jobs / shards
		// A hash spreads 400 ids over 16 shards binomially: mean 25, deviation 4.8; 3.5 deviations of slack.
		slack := 17
		for k, h := range homes {
			if h > share+slack {
				t.Errorf("shard %d is home to %d jobs, want at most %d + %d", k, h, share, slack)
			}
		}
		// Counter writes per shard: exactly its capacity (a job counted where it has room).
		for k := range shards {
			pk := fmt.Sprintf("BATCH#wide#S%03d", k)
			counted := 0
			for key, c := range m.byPK {
				if key == pk {
					counted = c
				}
			}
			// Items written under a shard's key: its counter writes plus the job and dead items homed there.
			if counted > 2*(share+slack)+jobs/40 {
				t.Errorf("shard %d took %d writes", k, counted)
			}
		}
		if got := m.byPK["BATCH#wide"]; got != shards {
			t.Errorf("batch item written %d times in transactions, want once per shard (%d)", got, shards)
		}
		if m.maxSize > 1024 {
			t.Errorf("largest item written %d bytes, want at most 1 KB (2 write units a transactional write)", m.maxSize)
		}
		if m.txns != jobs {
			t.Errorf("%d transactions committed, want one per job (%d)", m.txns, jobs)
		}
		perJob := float64(m.txWCU+m.putWCU) / jobs
		t.Logf("write units: %d transactional items in %d jobs (%.3f items a job), %d WCU (%.3f a job) + open %d WCU; largest item %d bytes; %d shards",
			m.txItems, jobs, float64(m.txItems)/jobs, m.txWCU, float64(m.txWCU)/jobs, m.putWCU, m.maxSize, shards)
		// 4 (job item + shard counter), + 2 per dead letter (1 in 40), + 2 per shard filled, + 2 once
		// for the closed batch's pending-announcement item.
		if want := 4.0 + 2.0/40 + 2.0*float64(shards)/jobs + 2.0/jobs + float64(m.putWCU)/jobs; perJob != want {
			t.Errorf("write units a job = %.4f, want %.4f", perJob, want)
		}
		sum, _, err := l.Show(ctx, "wide", false)
		if err != nil || sum.Recorded != jobs || sum.Counts[batch.DeadLettered] != jobs/40 || len(sum.DeadLetteredIDs) != jobs/40 {
			t.Errorf("Show = %+v, %v", sum, err)
		}
		if !strings.Contains(sum.DeadLetteredWhere, "batch show wide") {
			t.Errorf("DeadLetteredWhere = %q", sum.DeadLetteredWhere)
		}
	})
}

// A summary lists at most MaxListed dead-lettered jobs and says there are more.
func TestSummaryCapsDeadLettered(t *testing.T) {
	l := batch.New(fakes.NewDynamoDB("t"), "t")
	ctx := context.Background()
	const jobs = batch.MaxListed + 5
	if err := l.Open(ctx, "bad", jobs, t0); err != nil {
		t.Fatal(err)
	}
	var last batch.Recorded
	for i := range jobs {
		last = record(t, l, "bad", fmt.Sprint("j", i), 0, batch.DeadLettered, 0)
	}
	if last.Result != batch.Closed || len(last.Summary.DeadLetteredIDs) != batch.MaxListed || !last.Summary.DeadLetteredMore ||
		last.Summary.Counts[batch.DeadLettered] != jobs {
		t.Errorf("last record = %s, %d ids listed (more %v) of %d", last.Result, len(last.Summary.DeadLetteredIDs), last.Summary.DeadLetteredMore, last.Summary.Counts[batch.DeadLettered])
	}
}

// gate holds the first two reads of a batch item until both have happened, so two records that
// fill shards race for the batch item with the same version read.
type gate struct {
	db
	mu      sync.Mutex
	armed   bool
	arrived int
	both    chan struct{}
}

func (g *gate) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	out, err := g.db.GetItem(ctx, in, o...)
	if sk, _ := in.Key["sk"].(*ddbtypes.AttributeValueMemberS); sk != nil && sk.Value == "META" {
		g.mu.Lock()
		if !g.armed {
			g.mu.Unlock()
			return out, err
		}
		g.arrived++
		n := g.arrived
		if n == 2 {
			close(g.both)
		}
		g.mu.Unlock()
		if n <= 2 {
			select {
			case <-g.both:
			case <-time.After(5 * time.Second):
			}
		}
	}
	return out, err
}

// Two records that each fill a shard, having read the batch item at the same version: one writes
// it, the other reads again, and the second fill closes the batch (a lost update of the filled
// count would leave it open forever).
func TestFillsRaceForTheBatchItem(t *testing.T) {
	for name, d := range map[string]db{"dynamodb": nil, "fake": fakes.NewDynamoDB("t")} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			table := "t"
			if d == nil {
				d, table = moto, testmoto.Table(t, moto, "batch")
			}
			g := &gate{db: d, both: make(chan struct{})}
			l := batch.New(g, table)
			l.PerShard = 1 // two shards of one job: each record fills one
			if err := l.Open(ctx, "two", 2, t0); err != nil {
				t.Fatal(err)
			}
			// Show learns the batch's shape, so the gate holds the fills' reads only.
			if sum, _, err := l.Show(ctx, "two", false); err != nil || sum.Shards != 2 {
				t.Fatalf("Show = %+v, %v; want 2 shards", sum, err)
			}
			g.mu.Lock()
			g.armed = true
			g.mu.Unlock()
			// Two jobs of different home shards: each fills its own, so they meet at the batch item only.
			ids := []string{"j0"}
			for i := 1; len(ids) < 2; i++ {
				if id := fmt.Sprint("j", i); batch.Home(id, 2) != batch.Home(ids[0], 2) {
					ids = append(ids, id)
				}
			}
			var wg sync.WaitGroup
			results := make([]batch.Result, 2)
			for i, id := range ids {
				wg.Go(func() {
					r, err := l.Record(ctx, "two", id, 0, batch.Succeeded, t0)
					if err != nil {
						t.Errorf("Record(%s) = %v", id, err)
					}
					results[i] = r.Result
				})
			}
			wg.Wait()
			if got := fmt.Sprint(results); got != "[counted closed]" && got != "[closed counted]" {
				t.Errorf("results = %s, want one counted and one closed", got)
			}
			if sum, _, err := l.Show(ctx, "two", false); err != nil || !sum.Closed || sum.Recorded != 2 {
				t.Errorf("Show = %+v, %v; want closed with 2 recorded", sum, err)
			}
		})
	}
}

// A principal is a SenderId (or STS UserId) up to its first ':': an IAM user's id whole, a role's
// id without the session name of an assumed role or a Lambda function's role.
func TestPrincipal(t *testing.T) {
	for give, want := range map[string]string{
		"AIDAIENQZJOLO23YVJ4VO":                       "AIDAIENQZJOLO23YVJ4VO",
		"AROAEXAMPLEID:my-session":                    "AROAEXAMPLEID",
		"AROAEXAMPLEID:sfnlimit-RouterFunction-Ab12c": "AROAEXAMPLEID",
		"AROAEXAMPLEID:a:b":                           "AROAEXAMPLEID",
		"123456789012":                                "123456789012",
		"":                                            "",
	} {
		if got := batch.Principal(give); got != want {
			t.Errorf("Principal(%q) = %q, want %q", give, got, want)
		}
	}
}

// A federated user's SenderId (sts:GetFederationToken) is "{account}:{caller-specified name}"
// (IAM User Guide, policy variables, aws:userid); the root user's is the account id. Cut at the
// ':', every federated user of an account would be one principal with the account's root: one
// could name, fill and close another's batch. Two federated users are two principals, and
// neither is the root.
func TestPrincipalFederatedUsersAreNotOne(t *testing.T) {
	alice, bob, root := batch.Principal("123456789012:alice"), batch.Principal("123456789012:bob"), batch.Principal("123456789012")
	if alice == bob {
		t.Errorf("federated users alice and bob of one account are one principal %q, want two", alice)
	}
	if alice == root || bob == root {
		t.Errorf("a federated user is the account's root principal %q, want its own", root)
	}
	if batch.Owns(batch.Principal("123456789012:alice"), batch.Principal("123456789012:mallory")) {
		t.Errorf("alice's batch admits mallory's jobs (both federated users of one account)")
	}
}
