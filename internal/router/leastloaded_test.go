package router_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/sfnlimit/sfnlimit/internal/fakes"
	"github.com/sfnlimit/sfnlimit/internal/job"
	"github.com/sfnlimit/sfnlimit/internal/lane"
	"github.com/sfnlimit/sfnlimit/internal/occupancy"
)

// sqs-payments-burst.json: six payments jobs (order-10 .. order-15), then one reports job (r-7).
const burstReports = "b2000000-0000-4000-8000-000000000007"

// failingOcc fails Join for some jobs, and Counts for some types, on top of a fake store.
type failingOcc struct {
	*fakes.Occupancy
	joinFails   map[string]bool // job ids
	countsFails map[string]bool // types
}

func (f *failingOcc) Counts(ctx context.Context, typ string, limit int) ([]int, error) {
	if f.countsFails[typ] {
		return nil, errors.New("ProvisionedThroughputExceededException")
	}
	return f.Occupancy.Counts(ctx, typ, limit)
}

func (f *failingOcc) Join(ctx context.Context, j occupancy.Job, ln int) (occupancy.Joined, error) {
	if f.joinFails[j.ID] {
		return occupancy.Joined{}, errors.New("TransactionConflict")
	}
	return f.Occupancy.Join(ctx, j, ln)
}

type sentJob struct {
	id      string
	lane    int
	counted bool
}

func sentJobs(t *testing.T, s *fakeSender, typ string) []sentJob {
	t.Helper()
	var out []sentJob
	for _, e := range s.entries() {
		var j job.Job
		if err := json.Unmarshal([]byte(aws.ToString(e.MessageBody)), &j); err != nil {
			t.Fatalf("lanes-queue body %q: %v", aws.ToString(e.MessageBody), err)
		}
		gt, ln, err := job.ParseGroupID(aws.ToString(e.MessageGroupId))
		if err != nil || gt != j.Type {
			t.Fatalf("group %q for a %s job: %v", aws.ToString(e.MessageGroupId), j.Type, err)
		}
		if j.Type == typ {
			out = append(out, sentJob{j.ID, ln, j.Counted})
		}
	}
	return out
}

func failedIDs(resp events.SQSEventResponse) []string {
	var ids []string
	for _, f := range resp.BatchItemFailures {
		ids = append(ids, f.ItemIdentifier)
	}
	return ids
}

func TestLeastLoadedRouting(t *testing.T) {
	burst := loadEvent(t, "sqs-payments-burst.json")
	payments := burst.Records[:6]
	tests := []struct {
		name string
		// before: payments' lane counts (lanes 1..3) before the batch
		before      []int
		joinFails   map[string]bool
		countsFails bool
		sendFails   map[string]bool
		// wantCounts: payments' lane counts after the batch, sorted
		wantCounts []int
		// wantFailed: message ids reported as failures
		wantFailed []string
		// wantCountsCalls: queries of the counts for the batch
		wantCountsCalls int
	}{
		{
			name: "a burst into empty lanes fills them evenly", before: []int{0, 0, 0},
			wantCounts: []int{2, 2, 2}, wantCountsCalls: 1,
		},
		{
			name: "busy lanes get fewer of the burst", before: []int{3, 0, 1},
			wantCounts: []int{3, 3, 4}, wantCountsCalls: 1, // lanes 2 and 3 take 3 and 2 of the 6
		},
		{
			name: "a failed send takes its count back and is delivered again", before: []int{0, 0, 0},
			sendFails: map[string]bool{"order-12": true}, wantCounts: []int{1, 2, 2}, wantFailed: []string{payments[2].MessageId},
			wantCountsCalls: 1,
		},
		{
			name: "a failed count fails only its job", before: []int{0, 0, 0},
			joinFails: map[string]bool{"order-11": true}, wantCounts: []int{1, 2, 2}, wantFailed: []string{payments[1].MessageId},
			wantCountsCalls: 1,
		},
		{
			name: "unreadable counts fail the type's jobs and no other", before: []int{1, 0, 0}, countsFails: true,
			wantCounts: []int{0, 0, 1}, wantFailed: []string{
				payments[0].MessageId, payments[1].MessageId, payments[2].MessageId,
				payments[3].MessageId, payments[4].MessageId, payments[5].MessageId,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			occ := &failingOcc{Occupancy: fakes.NewOccupancy(nil), joinFails: tt.joinFails, countsFails: map[string]bool{"payments": tt.countsFails}}
			for ln, n := range tt.before {
				for k := range n {
					if _, err := occ.Occupancy.Join(ctx, occupancy.Job{Type: "payments", ID: "earlier-" + string(rune('a'+ln)) + string(rune('a'+k))}, ln+1); err != nil {
						t.Fatal(err)
					}
				}
			}
			cfg := &fakeConfig{limits: limits, strategy: map[string]string{"payments": lane.LeastLoaded}}
			sender := &fakeSender{fail: tt.sendFails}
			r := newRouter(cfg, sender, &fakeDLQ{}, nil)
			r.Occupancy = occ
			resp, err := r.Handle(ctx, burst)
			if err != nil {
				t.Fatalf("Handle() error = %v", err)
			}
			got := failedIDs(resp)
			slices.Sort(got)
			want := slices.Clone(tt.wantFailed)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("batch item failures = %v, want %v", got, want)
			}
			if n := occ.Calls("Counts"); n != tt.wantCountsCalls {
				t.Errorf("counts read %d times, want %d (once per type per batch)", n, tt.wantCountsCalls)
			}
			// Ties are broken by a hash of the job, so compare the counts as a multiset.
			counts, _ := occ.Occupancy.Counts(ctx, "payments", 3)
			slices.Sort(counts)
			if !slices.Equal(counts, tt.wantCounts) {
				t.Errorf("payments lane counts, sorted = %v, want %v", counts, tt.wantCounts)
			}
			// Every payments job sent is counted, in the lane it was sent to.
			for _, sj := range sentJobs(t, sender, "payments") {
				m, err := occ.Get(ctx, occupancy.Job{Type: "payments", ID: sj.id})
				if tt.sendFails[sj.id] {
					// Its count taken back without a tombstone: the redelivery counts it afresh.
					if m != nil || err != nil {
						t.Errorf("job %s whose send failed has count marker %+v, %v; want none", sj.id, m, err)
					}
					continue
				}
				if err != nil || m == nil || m.Lane != sj.lane || !sj.counted {
					t.Errorf("job %s sent to lane %d (counted %v), its count marker is %+v, %v", sj.id, sj.lane, sj.counted, m, err)
				}
			}
			// The reports job (random strategy) is routed as before, uncounted.
			rep := sentJobs(t, sender, "reports")
			if len(rep) != 1 || rep[0].counted || slices.Contains(got, burstReports) {
				t.Errorf("reports job: sent %+v, failures %v; want sent once, uncounted", rep, got)
			}
		})
	}
}

// The general queue delivers a batch again (the router timed out after sending): every job goes to
// the lane it went to the first time, where SQS drops the copy, and no count changes.
func TestLeastLoadedRedeliveryCountsNothingTwice(t *testing.T) {
	ctx := context.Background()
	burst := loadEvent(t, "sqs-payments-burst.json")
	occ := fakes.NewOccupancy(nil)
	cfg := &fakeConfig{limits: limits, strategy: map[string]string{"payments": lane.LeastLoaded}}
	first, again := &fakeSender{}, &fakeSender{}
	r := newRouter(cfg, first, &fakeDLQ{}, nil)
	r.Occupancy = occ
	if _, err := r.Handle(ctx, burst); err != nil {
		t.Fatal(err)
	}
	// Meanwhile order-10 ran and left its lane; the others wait.
	sent := sentJobs(t, first, "payments")
	if ok, err := occ.Leave(ctx, occupancy.Job{Type: "payments", ID: sent[0].id}, sent[0].lane); !ok || err != nil {
		t.Fatalf("Leave(%s) = %v, %v", sent[0].id, ok, err)
	}
	before, _ := occ.Counts(ctx, "payments", 3)
	r.Lanesq = again
	resp, err := r.Handle(ctx, burst)
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("Handle(again) = %v, %v", resp, err)
	}
	after, _ := occ.Counts(ctx, "payments", 3)
	if !slices.Equal(before, after) {
		t.Errorf("counts changed on redelivery: %v -> %v", before, after)
	}
	resent := sentJobs(t, again, "payments")
	for i := range sent {
		if resent[i].id != sent[i].id || resent[i].lane != sent[i].lane {
			t.Errorf("job %s went to lane %d, then to lane %d on redelivery", sent[i].id, sent[i].lane, resent[i].lane)
		}
		// The job that left is not counted: its copy (dropped by SQS) must not be uncounted again.
		if wantCounted := i != 0; resent[i].counted != wantCounted {
			t.Errorf("job %s resent with counted=%v, want %v", sent[i].id, resent[i].counted, wantCounted)
		}
	}
}

// A first-free type's jobs wait in its waiting group, uncounted: the starter binds them to lanes.
func TestFirstFreeJobsGoToTheWaitingGroup(t *testing.T) {
	ctx := context.Background()
	burst := loadEvent(t, "sqs-payments-burst.json")
	occ := fakes.NewOccupancy(nil)
	cfg := &fakeConfig{limits: limits, strategy: map[string]string{"payments": lane.FirstFree}}
	sender := &fakeSender{}
	r := newRouter(cfg, sender, &fakeDLQ{}, nil)
	r.Occupancy = occ
	resp, err := r.Handle(ctx, burst)
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("Handle() = %+v, %v", resp, err)
	}
	sent := sentJobs(t, sender, "payments")
	if len(sent) != 6 {
		t.Fatalf("sent %d payments jobs, want 6", len(sent))
	}
	for _, sj := range sent {
		if sj.lane != job.WaitingLane || sj.counted {
			t.Errorf("job %s sent to lane %d (counted %v), want the waiting group payments-0, uncounted", sj.id, sj.lane, sj.counted)
		}
	}
	if occ.Calls("Join") != 0 || occ.Calls("Counts") != 0 {
		t.Errorf("the router counted first-free jobs (%d joins, %d count reads), want none", occ.Calls("Join"), occ.Calls("Counts"))
	}
}
