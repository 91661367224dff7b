package ops

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
	"github.com/sfnlimit/sfnlimit/internal/tools/fakes"
)

type attrsFunc func(url string) map[string]string

func (f attrsFunc) GetQueueAttributes(_ context.Context, in *sqs.GetQueueAttributesInput, _ ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error) {
	return &sqs.GetQueueAttributesOutput{Attributes: f(aws.ToString(in.QueueUrl))}, nil
}

// leaseTable is a lease table holding leases, written through lease.Store as the starter writes
// them, and read back through lease.ReadOnly as the command line reads them.
func leaseTable(t *testing.T, leases ...lease.Lease) leaseLister {
	t.Helper()
	store := lease.NewStore(fakes.NewDynamoDB("table"), "table")
	for _, l := range leases {
		if _, err := store.Put(context.Background(), l, nil); err != nil {
			t.Fatal(err)
		}
	}
	return lease.ReadOnly(store)
}

// noQueues is SQS with empty queues.
var noQueues = attrsFunc(func(string) map[string]string { return nil })

func TestStatusRead(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	leases := leaseTable(t,
		lease.Lease{Type: "payments", Lane: 1, JobID: "p-new", Attempt: 1, Status: lease.Starting, StartedAt: now.Add(-time.Minute)},
		lease.Lease{Type: "payments", Lane: 2, JobID: "p-old", Attempt: 2, Status: lease.Retrying, StartedAt: now.Add(-3*time.Minute - 12*time.Second)},
		lease.Lease{Type: "gone", Lane: 1, JobID: "g-1", Attempt: 1, Status: lease.Starting, StartedAt: now.Add(-5 * time.Second)},
		lease.Lease{Type: "reports", Lane: 3, JobID: "r-1", Attempt: 1, Status: lease.Bound},
	)
	sqsAttrs := attrsFunc(func(url string) map[string]string {
		switch url {
		case "general":
			return map[string]string{"ApproximateNumberOfMessages": "120", "ApproximateNumberOfMessagesNotVisible": "10"}
		case "lanes":
			return map[string]string{"ApproximateNumberOfMessages": "30", "ApproximateNumberOfMessagesNotVisible": "3", "ApproximateNumberOfMessagesDelayed": "1"}
		default:
			return map[string]string{"ApproximateNumberOfMessages": "2"}
		}
	})
	// payments is on the deployment's strategy, configured least-loaded: it runs first-free and
	// says so. reports has a live item on random.
	d := defaults()
	d.Strategy = "least-loaded"
	st, err := StatusReader{
		SQS: sqsAttrs, Leases: leases, Defaults: d, Overrides: staticStore{{Type: "reports", Limit: 8, Strategy: "random", Release: "events"}},
		General: "general", Lanes: "lanes", DeadQueue: "dlq", Now: func() time.Time { return now },
	}.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Types) != 3 {
		t.Fatalf("Read() types = %+v, want gone, payments, reports", st.Types)
	}
	gone, payments, reports := st.Types[0], st.Types[1], st.Types[2]
	if gone.Type != "gone" || gone.Limit != 0 || gone.Source != "none" || gone.Running != 1 || gone.Strategy != "" || gone.Free != 0 || gone.RetiredStrategy != "" {
		t.Errorf("gone = %+v, want a lease of a type with no limit", gone)
	}
	if payments.Strategy != "first-free" || payments.RetiredStrategy != "least-loaded" {
		t.Errorf("payments strategy %q (retired %q), want first-free, configured least-loaded", payments.Strategy, payments.RetiredStrategy)
	}
	if reports.Strategy != "random" || reports.RetiredStrategy != "" {
		t.Errorf("reports strategy %q (retired %q), want random from its live item", reports.Strategy, reports.RetiredStrategy)
	}
	// The release mode of each type: its live item's, else the deployment's default.
	if gone.Release != "" || payments.Release != "step" || reports.Release != "events" {
		t.Errorf("release modes %q, %q, %q; want none for gone, step for payments, events for reports", gone.Release, payments.Release, reports.Release)
	}
	if payments.Limit != 2 || payments.Source != "default" || payments.Running != 2 || payments.Free != 0 || payments.ByStatus["retrying"] != 1 || payments.ByStatus["started"] != 1 {
		t.Errorf("payments = %+v", payments)
	}
	// A claim shows as started.
	wantLeases := []LaneLease{{Lane: 1, Status: "started", JobID: "p-new", Attempt: 1}, {Lane: 2, Status: "retrying", JobID: "p-old", Attempt: 2}}
	if !slices.Equal(payments.Leases, wantLeases) {
		t.Errorf("payments leases = %+v, want %+v", payments.Leases, wantLeases)
	}
	if o := payments.Oldest; o == nil || o.ID != "p-old" || o.Lane != 2 || o.Attempt != 2 || o.AgeSeconds != 192 {
		t.Errorf("payments oldest = %+v, want p-old, 192 s", payments.Oldest)
	}
	// A bound lease holds its lane before its execution starts.
	if reports.Limit != 8 || reports.Source != "override" || reports.Running != 1 || reports.Free != 7 || reports.ByStatus["bound"] != 1 {
		t.Errorf("reports = %+v, want one bound lane of 8", reports)
	}
	if st.Queues.General != (QueueDepth{Waiting: 120, InFlight: 10}) || st.Queues.Lanes != (QueueDepth{Waiting: 30, InFlight: 3, Delayed: 1}) || st.Queues.DeadLetter.Waiting != 2 {
		t.Errorf("queues = %+v", st.Queues)
	}
	if st.Lanes != 10 || st.LanesInUse != 4 {
		t.Errorf("lanes %d in use of %d, want 4 of 10", st.LanesInUse, st.Lanes)
	}
	var b strings.Builder
	if err := st.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"TYPE      LIMIT  SOURCE    STRATEGY     RELEASE  HELD  FREE  OLDEST LEASE\n",
		"payments  2      default   first-free*  step     2     0     p-old (lane 2, attempt 2, retrying, 3m12s)\n",
		"gone      -      none      -            -        1     -     g-1 (lane 1, attempt 1, started, 5s)\n",
		// A lease with no start time has no age: it is not the oldest.
		"reports   8      override  random       events   1     7     -\n",
		"* configured with a retired lane strategy, run as the one shown: payments (least-loaded). See sfnlimit config get.\n",
		"TYPE      LEASES BY STATUS: HOW MANY (WHICH LANES)\n",
		"gone      started 1 (1)\n",
		"payments  started 1 (1); retrying 1 (2)\n",
		"reports   bound 1 (3)\n",
		"lanes (FIFO)  31       3",
		"4 of 10 lanes in use",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("WriteTable() lacks %q:\n%s", want, b.String())
		}
	}
	for _, gone := range []string{"JOBS PER LANE", "not counted", "least-loaded*"} {
		if strings.Contains(b.String(), gone) {
			t.Errorf("WriteTable() still says %q:\n%s", gone, b.String())
		}
	}
}

// A type runs its configured strategy, the retired least-loaded as first-free, and status says
// which types are configured least-loaded, by their live item or by the deployment's LaneStrategy.
func TestStatusStrategy(t *testing.T) {
	tests := []struct {
		name        string
		deployment  string // LaneStrategy
		override    string // the live item's strategy for payments ("": none)
		want        string
		wantRetired string
	}{
		{name: "the built-in default", want: "first-free"},
		{name: "deployment first-free", deployment: "first-free", want: "first-free"},
		{name: "deployment random", deployment: "random", want: "random"},
		{name: "deployment least-loaded", deployment: "least-loaded", want: "first-free", wantRetired: "least-loaded"},
		{name: "live item least-loaded", deployment: "random", override: "least-loaded", want: "first-free", wantRetired: "least-loaded"},
		{name: "live item random over least-loaded", deployment: "least-loaded", override: "random", want: "random"},
		{name: "live item first-free over least-loaded", deployment: "least-loaded", override: "first-free", want: "first-free"},
		{name: "an alias is not retired", override: "hashed", want: "random"},
		{name: "a live item the functions ignore", deployment: "least-loaded", override: "fastest", want: "first-free", wantRetired: "least-loaded"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := defaults()
			d.Strategy = tt.deployment
			var ovs staticStore
			if tt.override != "" {
				ovs = staticStore{{Type: "payments", Limit: 3, Strategy: tt.override}}
			}
			st, err := StatusReader{SQS: noQueues, Leases: leaseTable(t), Defaults: d, Overrides: ovs}.Read(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			var p *TypeStatus
			for i := range st.Types {
				if st.Types[i].Type == "payments" {
					p = &st.Types[i]
				}
			}
			if p == nil || p.Strategy != tt.want || p.RetiredStrategy != tt.wantRetired {
				t.Fatalf("payments = %+v, want strategy %s, retired %q", p, tt.want, tt.wantRetired)
			}
			var b strings.Builder
			if err := st.WriteTable(&b); err != nil {
				t.Fatal(err)
			}
			if got := strings.Contains(b.String(), "payments (least-loaded)"); got != (tt.wantRetired != "") {
				t.Errorf("WriteTable() notes payments as configured least-loaded: %v, want %v:\n%s", got, tt.wantRetired != "", b.String())
			}
		})
	}
}

// LanesText lists a type's leases status by status in a lease's order of life, each with its
// lanes as runs, and the lanes held above a lowered limit.
func TestLanesText(t *testing.T) {
	leases := func(status string, lanes ...int) []LaneLease {
		var out []LaneLease
		for _, l := range lanes {
			out = append(out, LaneLease{Lane: l, Status: status, JobID: fmt.Sprint("j", l), Attempt: 1})
		}
		return out
	}
	seq := func(from, to, step int) []int {
		var out []int
		for l := from; l <= to; l += step {
			out = append(out, l)
		}
		return out
	}
	join := func(ls ...[]LaneLease) []LaneLease {
		out := slices.Concat(ls...)
		slices.SortFunc(out, func(a, b LaneLease) int { return a.Lane - b.Lane })
		return out
	}
	tests := []struct {
		name  string
		limit int
		give  []LaneLease
		want  string
	}{
		{name: "no lease", limit: 5, want: "-"},
		{name: "one started", limit: 5, give: leases("started", 4), want: "started 1 (4)"},
		{name: "runs of lanes", limit: 10, give: leases("started", 1, 2, 3, 5, 7, 8), want: "started 6 (1-3, 5, 7-8)"},
		{
			name: "in a lease's order of life, unknown statuses last", limit: 10,
			give: join(leases("dead-lettering", 1), leases("started", 2), leases("bound", 4), leases("retrying", 5), leases("odd", 7)),
			want: "bound 1 (4); started 1 (2); retrying 1 (5); dead-lettering 1 (1); odd 1 (7)",
		},
		{
			// A confirmed start writes nothing after its claim: a claim is a started job (a lease an
			// earlier version wrote as running is read as one: lease.AsRead).
			name: "claims show as started", limit: 10,
			give: join(leases("starting", 2, 3), leases("starting", 6)),
			want: "started 3 (2-3, 6)",
		},
		{name: "a status left empty", limit: 2, give: leases("", 1), want: "- 1 (1)"},
		{name: "above a lowered limit", limit: 3, give: leases("started", 2, 4, 5), want: "started 3 (2, 4-5); above the limit: 4-5"},
		{name: "no limit: nothing is above it", limit: 0, give: leases("started", 1, 9), want: "started 2 (1, 9)"},
		{
			name: "eight runs are listed", limit: 100, give: leases("started", seq(1, 15, 2)...),
			want: "started 8 (1, 3, 5, 7, 9, 11, 13, 15)",
		},
		{
			name: "past eight runs, the rest are counted", limit: 500, give: join(leases("started", seq(1, 200, 2)...), leases("bound", 400)),
			want: "bound 1 (400); started 100 (1, 3, 5, 7, 9, 11, 13, 15 and 92 more)",
		},
		{
			name: "long runs stay short", limit: 500, give: join(leases("started", seq(1, 499, 1)...)),
			want: "started 499 (1-499)",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := (TypeStatus{Limit: tt.limit, Leases: tt.give}).LanesText(); got != tt.want {
				t.Errorf("LanesText() = %q\nwant         %q", got, tt.want)
			}
		})
	}
}

// Free counts the lanes within the limit that no lease holds; leases above a lowered limit hold no
// lane of it.
func TestStatusFree(t *testing.T) {
	leases := leaseTable(t,
		lease.Lease{Type: "payments", Lane: 1, JobID: "a", Attempt: 1, Status: lease.Starting},
		lease.Lease{Type: "payments", Lane: 5, JobID: "b", Attempt: 1, Status: lease.Starting},
		lease.Lease{Type: "payments", Lane: 6, JobID: "c", Attempt: 1, Status: lease.Bound},
	)
	tests := []struct {
		limit    int
		wantFree int
	}{{limit: 2, wantFree: 1}, {limit: 5, wantFree: 3}, {limit: 6, wantFree: 3}, {limit: 9, wantFree: 6}}
	for _, tt := range tests {
		t.Run(fmt.Sprint("limit ", tt.limit), func(t *testing.T) {
			st, err := StatusReader{
				SQS: noQueues, Leases: leases, Defaults: defaults(), Overrides: staticStore{{Type: "payments", Limit: tt.limit}},
			}.Read(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			for _, ts := range st.Types {
				if ts.Type == "payments" && (ts.Free != tt.wantFree || ts.Running != 3 || ts.Oldest != nil) {
					t.Errorf("payments = %+v, want %d free of %d, 3 held, no oldest (no lease has a start time)", ts, tt.wantFree, tt.limit)
				}
			}
		})
	}
}

// A type that holds more lanes than its limit (lowered while its jobs ran) is shown over its cap,
// with how many it holds of how many, not as a type with lanes free or at its cap.
func TestStatusOverCap(t *testing.T) {
	var held []lease.Lease
	for ln := 1; ln <= 9; ln++ {
		held = append(held, lease.Lease{Type: "payments", Lane: ln, JobID: fmt.Sprint("p-", ln), Attempt: 1, Status: lease.Starting})
	}
	held = append(held, lease.Lease{Type: "reports", Lane: 1, JobID: "r-1", Attempt: 1, Status: lease.Starting})
	st, err := StatusReader{
		SQS: noQueues, Leases: leaseTable(t, held...), Defaults: defaults(), Overrides: staticStore{{Type: "payments", Limit: 4}},
	}.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	over := map[string]int{}
	for _, ts := range st.Types {
		over[ts.Type] = ts.Over
	}
	if over["payments"] != 5 || over["reports"] != 0 {
		t.Errorf("over = %v, want payments 5 over its limit of 4, reports 0", over)
	}
	var b strings.Builder
	if err := st.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"payments  4      override  first-free  step     9/4 over cap (lowered)  0     -\n",
		"reports   5      default   first-free  step     1                       4     -\n",
		"payments  started 9 (1-9); above the limit: 5-9\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("WriteTable() lacks %q:\n%s", want, b.String())
		}
	}
}

// overridesFunc is a function-type fake of the live overrides.
type overridesFunc func() ([]config.Override, error)

func (f overridesFunc) ListOverrides(context.Context) ([]config.Override, error) { return f() }

// A status fails when the live overrides cannot be read, as it does for the leases and the queues:
// it does not show the defaults as if they were in force.
func TestStatusOverridesError(t *testing.T) {
	_, err := StatusReader{
		SQS: noQueues, Leases: leaseTable(t), Defaults: defaults(),
		Overrides: overridesFunc(func() ([]config.Override, error) { return nil, errors.New("throttled") }),
	}.Read(context.Background())
	if err == nil || !strings.Contains(err.Error(), "throttled") {
		t.Errorf("Read() = %v, want the overrides' error", err)
	}
}

func TestAge(t *testing.T) {
	tests := []struct {
		give time.Duration
		want string
	}{
		{-time.Second, "0s"}, {45 * time.Second, "45s"}, {192 * time.Second, "3m12s"},
		{2*time.Hour + 5*time.Minute, "2h05m"}, {76 * time.Hour, "3d04h"},
	}
	for _, tt := range tests {
		if got := Age(tt.give); got != tt.want {
			t.Errorf("Age(%v) = %s, want %s", tt.give, got, tt.want)
		}
	}
}

// A status reads leases type by type (a Query each, config types and the type registry), never by
// scanning the table, which holds other items too; a type with leases and no config still shows.
func TestStatusReadsLeasesTypeByType(t *testing.T) {
	leases := fakes.NewLeaseStore(time.Now)
	leases.BeforeAll = func() error { return errors.New("status scanned the table") }
	leases.Set(lease.Lease{Type: "gone", Lane: 1, JobID: "g-1", Attempt: 1, Status: lease.Starting, StartedAt: time.Now()})
	st, err := StatusReader{
		SQS: noQueues, Leases: leases, Defaults: defaults(),
	}.Read(context.Background())
	if err != nil {
		t.Fatalf("Read() = %v", err)
	}
	found := false
	for _, ts := range st.Types {
		found = found || ts.Type == "gone" && ts.Running == 1
	}
	if !found {
		t.Errorf("Read() types = %+v, want the lease of type gone", st.Types)
	}
}
