package ops

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sfnlimit/sfnlimit/internal/config"
	"github.com/sfnlimit/sfnlimit/internal/fakes"
	"github.com/sfnlimit/sfnlimit/internal/lease"
	"github.com/sfnlimit/sfnlimit/internal/occupancy"
)

type attrsFunc func(url string) map[string]string

func (f attrsFunc) GetQueueAttributes(_ context.Context, in *sqs.GetQueueAttributesInput, _ ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error) {
	return &sqs.GetQueueAttributesOutput{Attributes: f(aws.ToString(in.QueueUrl))}, nil
}

func TestStatusRead(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	leases := fakes.NewLeaseStore(func() time.Time { return now })
	for _, l := range []lease.Lease{
		{Type: "payments", Lane: 1, JobID: "p-new", Attempt: 1, Status: lease.Running, StartedAt: now.Add(-time.Minute)},
		{Type: "payments", Lane: 2, JobID: "p-old", Attempt: 2, Status: lease.Retrying, StartedAt: now.Add(-3*time.Minute - 12*time.Second)},
		{Type: "gone", Lane: 1, JobID: "g-1", Attempt: 1, Status: lease.Starting, StartedAt: now.Add(-5 * time.Second)},
	} {
		leases.Set(l)
	}
	r, err := config.NewResolver(defaults(), staticStore{{Type: "reports", Limit: 8, Strategy: "random"}}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
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
	// payments is on the deployment's strategy, least-loaded: three jobs routed, one done. reports is
	// on random: counts left from an earlier least-loaded spell are not shown as if kept.
	occ := fakes.NewOccupancy(func() time.Time { return now })
	for _, j := range []struct {
		typ, id string
		lane    int
	}{{"payments", "p-old", 2}, {"payments", "p-new", 1}, {"payments", "p-next", 2}, {"payments", "p-done", 1}, {"reports", "r-1", 3}} {
		if _, err := occ.Join(context.Background(), occupancy.Job{Type: j.typ, ID: j.id}, j.lane); err != nil {
			t.Fatal(err)
		}
	}
	if ok, err := occ.Leave(context.Background(), occupancy.Job{Type: "payments", ID: "p-done"}, 1); !ok || err != nil {
		t.Fatalf("Leave() = %v, %v", ok, err)
	}
	st, err := StatusReader{
		SQS: sqsAttrs, Leases: leases, Occupancy: occ, Config: r.All, General: "general", Lanes: "lanes", DeadQueue: "dlq",
		Now: func() time.Time { return now },
	}.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Types) != 3 {
		t.Fatalf("Read() types = %+v, want gone, payments, reports", st.Types)
	}
	gone, payments, reports := st.Types[0], st.Types[1], st.Types[2]
	if gone.Type != "gone" || gone.Limit != 0 || gone.Source != "none" || gone.Running != 1 || gone.Strategy != "" || gone.LaneCounts != nil {
		t.Errorf("gone = %+v, want a lease of a type with no limit", gone)
	}
	if lc := payments.LaneCounts; payments.Strategy != "least-loaded" || lc == nil || !slices.Equal(lc.Counts, []int{1, 2}) || lc.Jobs != 3 || lc.Min != 1 || lc.Max != 2 {
		t.Errorf("payments strategy %q, lane counts %+v, want least-loaded and [1 2]", payments.Strategy, payments.LaneCounts)
	}
	if reports.Strategy != "random" || reports.LaneCounts != nil {
		t.Errorf("reports strategy %q, lane counts %+v, want random and none", reports.Strategy, reports.LaneCounts)
	}
	if n := occ.Calls("Counts"); n != 1 {
		t.Errorf("%d Counts calls, want 1: one per least-loaded type", n)
	}
	if payments.Limit != 2 || payments.Source != "default" || payments.Running != 2 || payments.ByStatus["retrying"] != 1 {
		t.Errorf("payments = %+v", payments)
	}
	if o := payments.Oldest; o == nil || o.ID != "p-old" || o.Lane != 2 || o.Attempt != 2 || o.AgeSeconds != 192 {
		t.Errorf("payments oldest = %+v, want p-old, 192 s", payments.Oldest)
	}
	if reports.Limit != 8 || reports.Source != "override" || reports.Running != 0 || reports.Oldest != nil {
		t.Errorf("reports = %+v", reports)
	}
	if st.Queues.General != (QueueDepth{Waiting: 120, InFlight: 10}) || st.Queues.Lanes != (QueueDepth{Waiting: 30, InFlight: 3, Delayed: 1}) || st.Queues.DeadLetter.Waiting != 2 {
		t.Errorf("queues = %+v", st.Queues)
	}
	if st.Lanes != 10 || st.LanesInUse != 3 {
		t.Errorf("lanes %d in use of %d, want 3 of 10", st.LanesInUse, st.Lanes)
	}
	var b strings.Builder
	if err := st.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"payments  2      default   least-loaded  2        p-old (lane 2, attempt 2, retrying, 3m12s)",
		"gone      -      none      -             1",
		"reports   8      override  random        0        -",
		"TYPE      JOBS  JOBS PER LANE (queued or running; lane 1 first)\n",
		"gone      -     no limit: no lanes\n",
		"payments  3     1 2\n",
		"reports   -     not counted: the random strategy keeps no lane counts\n",
		"lanes (FIFO)  31       3",
		"3 of 10 lanes in use",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("WriteTable() lacks %q:\n%s", want, b.String())
		}
	}
}

// A status fails when lane counts cannot be read, as it does for the leases and the queues.
func TestStatusCountsError(t *testing.T) {
	r, err := config.NewResolver(defaults(), nil, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	occ := fakes.NewOccupancy(nil)
	occ.Err = errors.New("throttled")
	_, err = StatusReader{
		SQS: attrsFunc(func(string) map[string]string { return nil }), Leases: fakes.NewLeaseStore(time.Now), Occupancy: occ, Config: r.All,
	}.Read(context.Background())
	if err == nil || !strings.Contains(err.Error(), "throttled") {
		t.Errorf("Read() = %v, want the counts' error", err)
	}
}

func TestLaneCountsString(t *testing.T) {
	seq := func(n int, f func(i int) int) []int {
		out := make([]int, n)
		for i := range out {
			out[i] = f(i)
		}
		return out
	}
	tests := []struct {
		name string
		give []int
		want string
	}{
		{name: "one lane", give: []int{0}, want: "0"},
		{name: "a few lanes, lane 1 first", give: []int{3, 0, 1}, want: "3 0 1"},
		{
			name: "20 lanes are listed", give: seq(20, func(i int) int { return i % 3 }),
			want: "0 1 2 0 1 2 0 1 2 0 1 2 0 1 2 0 1 2 0 1",
		},
		{
			name: "21 lanes are summarised", give: seq(21, func(i int) int { return i % 3 }),
			want: "21 lanes: min 0, mean 1.0, max 2, 7 empty; busiest (lane:jobs) 3:2 6:2 9:2 12:2 15:2",
		},
		{
			name: "busiest first, ties by lane", give: seq(500, func(i int) int { return map[int]int{499: 9, 6: 4, 0: 4, 250: 7}[i] }),
			want: "500 lanes: min 0, mean 0.0, max 9, 496 empty; busiest (lane:jobs) 500:9 251:7 1:4 7:4",
		},
		{name: "all empty", give: make([]int, 64), want: "64 lanes: min 0, mean 0.0, max 0, 64 empty"},
		{name: "none empty", give: seq(30, func(i int) int { return 2 + i%2 }), want: "30 lanes: min 2, mean 2.5, max 3, 0 empty; busiest (lane:jobs) 2:3 4:3 6:3 8:3 10:3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := newLaneCounts(tt.give).String(); got != tt.want {
				t.Errorf("String() = %q\nwant       %q", got, tt.want)
			}
		})
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
// scanning the table, which holds a lane-count marker per recent job; a type with leases and no
// config still shows.
func TestStatusReadsLeasesTypeByType(t *testing.T) {
	r, err := config.NewResolver(defaults(), nil, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	leases := fakes.NewLeaseStore(time.Now)
	leases.BeforeAll = func() error { return errors.New("status scanned the table") }
	leases.Set(lease.Lease{Type: "gone", Lane: 1, JobID: "g-1", Attempt: 1, Status: lease.Running, StartedAt: time.Now()})
	st, err := StatusReader{
		SQS: attrsFunc(func(string) map[string]string { return nil }), Leases: leases, Config: r.All,
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
