package starter_test

import (
	"context"
	"encoding/json"
	"slices"
	"sort"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/sfnlimit/sfnlimit/internal/job"
	"github.com/sfnlimit/sfnlimit/internal/lane"
	"github.com/sfnlimit/sfnlimit/internal/lease"
	"github.com/sfnlimit/sfnlimit/internal/occupancy"
	"github.com/sfnlimit/sfnlimit/internal/releaser"
	"github.com/sfnlimit/sfnlimit/internal/waitroom"
)

// waiting is the receive-th delivery of a job waiting in its type's waiting group ("{type}-0").
func waiting(t *testing.T, typ, jobID string, receive int) events.SQSMessage {
	t.Helper()
	return message(t, job.GroupID(typ, job.WaitingLane), jobID, jobBody(typ, jobID, 0), receive)
}

// bound is a copy the starter sent from the waiting group to a lane.
type bound struct {
	id      string
	lane    int
	counted bool
	dedup   string
}

func boundCopies(t *testing.T, r *rig) []bound {
	t.Helper()
	var out []bound
	for _, c := range r.sqs.Sent(lanesURL) {
		var j job.Job
		if err := json.Unmarshal([]byte(c.Body), &j); err != nil {
			t.Fatal(err)
		}
		_, ln, err := job.ParseGroupID(c.MessageGroupID)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, bound{j.ID, ln, j.Counted, c.MessageDeduplicationID})
	}
	return out
}

// A waiting group's batch binds its jobs to the free lanes in order, parks the first that finds
// none, and sends the rest back to wait behind it.
func TestBindWaitingJobsToFreeLanes(t *testing.T) {
	ctx := context.Background()
	r := newRigStrategy(t, nil, lane.FirstFree) // reports=3
	ev := events.SQSEvent{Records: []events.SQSMessage{
		waiting(t, "reports", "w-1", 1), waiting(t, "reports", "w-2", 1), waiting(t, "reports", "w-3", 1),
		waiting(t, "reports", "w-4", 1), waiting(t, "reports", "w-5", 1),
	}}
	resp, err := r.st.Handle(ctx, ev)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := failures(resp), sorted("msg-w-4", "msg-w-5"); !equal(got, want) {
		t.Errorf("batch item failures = %v, want %v (w-4 parked, w-5 behind it)", got, want)
	}
	copies := boundCopies(t, r)
	lanes := map[int]string{}
	for _, c := range copies {
		if !c.counted || c.lane < 1 || c.lane > 3 {
			t.Errorf("copy of %s to lane %d counted=%v, want a counted copy in lanes 1..3", c.id, c.lane, c.counted)
		}
		if prev, dup := lanes[c.lane]; dup {
			t.Errorf("lane %d bound to %s and %s", c.lane, prev, c.id)
		}
		lanes[c.lane] = c.id
	}
	if len(copies) != 3 {
		t.Fatalf("copies = %+v, want w-1..w-3 bound", copies)
	}
	if got := r.counts(t, "reports", 3); !slices.Equal(got, []int{1, 1, 1}) {
		t.Errorf("counts = %v, want [1 1 1]", got)
	}
	// w-4 parked for ParkFor, w-5 back at once; nothing started from the waiting group.
	checkVisibility(t, r.sqs, []visibility{
		{Handle: handle("w-4", 1), Min: int32(waitroom.ParkFor.Seconds()), Max: int32(waitroom.ParkFor.Seconds())},
		{Handle: handle("w-5", 1), Min: 0, Max: 0},
	})
	if starts := r.sfn.Starts(); len(starts) != 0 {
		t.Errorf("StartExecution calls = %+v, want none from the waiting group", starts)
	}

	// The bound copies start in their lanes; w-1's job succeeds and its release wakes w-4.
	var copyEvents []events.SQSMessage
	for _, c := range copies {
		m := message(t, job.GroupID("reports", c.lane), c.id, r.sqs.Sent(lanesURL)[slices.IndexFunc(copies, func(b bound) bool { return b == c })].Body, 1)
		copyEvents = append(copyEvents, m)
	}
	if _, err := r.st.Handle(ctx, events.SQSEvent{Records: copyEvents}); err != nil {
		t.Fatal(err)
	}
	if n := len(r.sfn.Starts()); n != 3 {
		t.Fatalf("starts = %d, want the 3 bound jobs", n)
	}
	freed := copies[0].lane
	l, _ := r.leases.Get(ctx, lease.Key{Type: "reports", Lane: freed})
	res, err := r.rel.Release(ctx, releaser.Request{Key: l.Key(), JobID: l.JobID, Attempt: 1, Outcome: releaser.Succeeded, Source: "workflow"})
	if err != nil || res != releaser.Deleted {
		t.Fatalf("release = %s, %v", res, err)
	}
	woke := false
	for _, v := range r.sqs.VisibilityChanges() {
		if v.ReceiptHandle == handle("w-4", 1) && v.Timeout == 0 {
			woke = true
		}
	}
	if !woke {
		t.Fatalf("the release did not make parked w-4 visible: %+v", r.sqs.VisibilityChanges())
	}
	// w-4 comes back and takes the freed lane; w-5 parks.
	resp, err = r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{waiting(t, "reports", "w-4", 2), waiting(t, "reports", "w-5", 2)}})
	if err != nil {
		t.Fatal(err)
	}
	if got := failures(resp); !equal(got, []string{"msg-w-5"}) {
		t.Errorf("failures = %v, want w-5 parked", got)
	}
	copies = boundCopies(t, r)
	if last := copies[len(copies)-1]; last.id != "w-4" || last.lane != freed {
		t.Errorf("last copy = %+v, want w-4 in the freed lane %d", last, freed)
	}
}

// A waiting message delivered again after its bind (the acknowledgement was lost) sends the same
// copy to the same lane and counts nothing twice.
func TestBindIsIdempotent(t *testing.T) {
	ctx := context.Background()
	r := newRigStrategy(t, nil, lane.FirstFree)
	for receive := 1; receive <= 2; receive++ {
		resp, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{waiting(t, "reports", "w-1", receive)}})
		if err != nil || len(resp.BatchItemFailures) != 0 {
			t.Fatalf("receive %d: %+v, %v", receive, resp, err)
		}
	}
	c := boundCopies(t, r)
	if len(c) != 2 || c[0] != c[1] {
		t.Errorf("copies = %+v, want the same copy (lane, deduplication id) twice", c)
	}
	got := r.counts(t, "reports", 3)
	sort.Ints(got)
	if !slices.Equal(got, []int{0, 0, 1}) {
		t.Errorf("counts = %v, want one lane counted once", got)
	}
}

// A release that frees a lane between the binder's look and its parking is not missed: the binder
// looks again after parking, binds, and takes its parked record back.
func TestBindLooksAgainAfterParking(t *testing.T) {
	ctx := context.Background()
	r := newRigStrategy(t, map[string]int{"reports": 1}, lane.FirstFree)
	busy := occupancy.Job{Type: "reports", ID: "busy"}
	if _, err := r.occ.Join(ctx, busy, 1); err != nil {
		t.Fatal(err)
	}
	r.st.WaitRoom = parkHook{r.room, func() {
		if ok, err := r.occ.Leave(ctx, busy, 1); !ok || err != nil { // the release lands now
			t.Errorf("Leave = %v, %v", ok, err)
		}
	}}
	resp, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{waiting(t, "reports", "w-1", 1)}})
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("Handle = %+v, %v; want w-1 bound", resp, err)
	}
	if c := boundCopies(t, r); len(c) != 1 || c[0].lane != 1 {
		t.Errorf("copies = %+v, want w-1 in lane 1", c)
	}
	if w, err := r.room.Take(ctx, "reports"); err != nil || w != nil {
		t.Errorf("parked records left: %+v, %v; want none", w, err)
	}
}

type parkHook struct {
	*waitroom.Store
	onPark func()
}

func (p parkHook) Park(ctx context.Context, w waitroom.Waiter) error {
	if err := p.Store.Park(ctx, w); err != nil {
		return err
	}
	p.onPark()
	return nil
}

// A waiting job whose type left first-free is routed as the type's strategy says now; a waiting
// job of a type with no limit is dead-lettered.
func TestWaitingJobOfAnotherStrategy(t *testing.T) {
	tests := []struct {
		name        string
		strategy    string
		typ         string
		wantCounted bool
		wantDead    []dead
	}{
		{name: "random now", strategy: lane.Random, typ: "reports"},
		{name: "least-loaded now", strategy: lane.LeastLoaded, typ: "reports", wantCounted: true},
		{name: "no limit", strategy: lane.FirstFree, typ: "nope", wantDead: []dead{{"unknown_type", "w-1"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRigStrategy(t, nil, tt.strategy)
			resp, err := r.st.Handle(context.Background(), events.SQSEvent{Records: []events.SQSMessage{waiting(t, tt.typ, "w-1", 1)}})
			if err != nil || len(resp.BatchItemFailures) != 0 {
				t.Fatalf("Handle = %+v, %v", resp, err)
			}
			checkDLQ(t, r.sqs, tt.wantDead)
			c := boundCopies(t, r)
			if tt.wantDead != nil {
				if len(c) != 0 {
					t.Errorf("copies = %+v, want none", c)
				}
				return
			}
			if len(c) != 1 || c[0].lane < 1 || c[0].lane > 3 || c[0].counted != tt.wantCounted {
				t.Errorf("copies = %+v, want one in lanes 1..3, counted %v", c, tt.wantCounted)
			}
		})
	}
}

// A copy of a job that left its lane moments ago (resubmitted within SQS's deduplication window)
// goes where the first went, uncounted: SQS drops it, and no lane is taken for it.
func TestBindCopyOfAJobThatJustLeft(t *testing.T) {
	ctx := context.Background()
	r := newRigStrategy(t, nil, lane.FirstFree)
	oj := occupancy.Job{Type: "reports", ID: "w-1"}
	if _, err := r.occ.JoinEmpty(ctx, oj, 2); err != nil {
		t.Fatal(err)
	}
	if ok, err := r.occ.Leave(ctx, oj, 2); !ok || err != nil {
		t.Fatalf("Leave = %v, %v", ok, err)
	}
	resp, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{waiting(t, "reports", "w-1", 1)}})
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("Handle = %+v, %v", resp, err)
	}
	if c := boundCopies(t, r); len(c) != 1 || c[0].lane != 2 || c[0].counted {
		t.Errorf("copies = %+v, want one to lane 2, uncounted", c)
	}
	if got := r.counts(t, "reports", 3); !slices.Equal(got, []int{0, 0, 0}) {
		t.Errorf("counts = %v, want none taken", got)
	}
}
