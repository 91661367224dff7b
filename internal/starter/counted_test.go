package starter_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"

	"github.com/sfnlimit/sfnlimit/internal/job"
	"github.com/sfnlimit/sfnlimit/internal/lease"
	"github.com/sfnlimit/sfnlimit/internal/occupancy"
	"github.com/sfnlimit/sfnlimit/internal/releaser"
)

// countedMessage is the receive-th delivery of a job the router counted in lane ln (least-loaded).
func countedMessage(t *testing.T, typ string, ln int, jobID string, receive int) events.SQSMessage {
	t.Helper()
	b, _ := json.Marshal(job.Job{Type: typ, ID: jobID, Input: json.RawMessage(`{"seconds":3}`), SubmittedAt: submitted, Counted: true})
	return message(t, job.GroupID(typ, ln), jobID, string(b), receive)
}

func (r *rig) counts(t *testing.T, typ string, limit int) []int {
	t.Helper()
	c, err := r.occ.Counts(context.Background(), typ, limit)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Every way a counted job leaves its lane takes it out of the lane's count exactly once.
func TestCountedJobLeavesItsLaneOnce(t *testing.T) {
	tests := []struct {
		name string
		// typ and lane of the job; the router counted it there
		typ  string
		lane int
		// before runs before the delivery (an existing execution, say)
		before func(r *rig)
		// after runs after the first delivery: the rest of the job's life
		after      func(t *testing.T, r *rig, m events.SQSMessage)
		wantCounts []int // lanes 1..3 of typ at the end
		wantDead   []dead
	}{
		{
			name: "started, then succeeded: the release uncounts it, a second release changes nothing",
			typ:  "reports", lane: 2,
			after: func(t *testing.T, r *rig, _ events.SQSMessage) {
				l, _ := r.leases.Get(context.Background(), lease.Key{Type: "reports", Lane: 2})
				if l == nil || !l.Counted {
					t.Fatalf("lease after the start = %+v, want one marked counted", l)
				}
				if got := r.counts(t, "reports", 3); !slices.Equal(got, []int{0, 1, 0}) {
					t.Errorf("counts while running = %v, want [0 1 0]", got)
				}
				req := releaser.Request{Key: l.Key(), JobID: "r-1", Attempt: 1, Outcome: releaser.Succeeded, Source: "workflow"}
				for i, want := range []releaser.Result{releaser.Deleted, releaser.Noop} {
					if res, err := r.rel.Release(context.Background(), req); err != nil || res != want {
						t.Fatalf("release %d = %s, %v; want %s", i+1, res, err, want)
					}
				}
			},
			wantCounts: []int{0, 0, 0},
		},
		{
			name: "out of attempts: dead-lettered by the release and uncounted",
			typ:  "reports", lane: 3,
			after: func(t *testing.T, r *rig, _ events.SQSMessage) {
				l, _ := r.leases.Get(context.Background(), lease.Key{Type: "reports", Lane: 3})
				l.Attempt = 3
				r.leases.Set(*l)
				req := releaser.Request{Key: l.Key(), JobID: "r-1", Attempt: 3, Outcome: releaser.Failed, Error: "Boom", Source: "workflow"}
				if res, err := r.rel.Release(context.Background(), req); err != nil || res != releaser.DeadLettered {
					t.Fatalf("release = %s, %v; want dead-lettered", res, err)
				}
			},
			wantCounts: []int{0, 0, 0},
			wantDead:   []dead{{"attempts_exhausted", "r-1"}},
		},
		{
			name: "failed attempt retried: still in its lane, still counted",
			typ:  "reports", lane: 1,
			after: func(t *testing.T, r *rig, _ events.SQSMessage) {
				l, _ := r.leases.Get(context.Background(), lease.Key{Type: "reports", Lane: 1})
				req := releaser.Request{Key: l.Key(), JobID: "r-1", Attempt: 1, Outcome: releaser.Failed, Error: "Boom", Source: "workflow"}
				if res, err := r.rel.Release(context.Background(), req); err != nil || res != releaser.Retried {
					t.Fatalf("release = %s, %v; want retried", res, err)
				}
			},
			wantCounts: []int{1, 0, 0},
		},
		{
			name: "a type with no limit: refused, dead-lettered and uncounted",
			typ:  "nope", lane: 1,
			wantDead: []dead{{"unknown_type", "r-1"}},
		},
		{
			name: "a duplicate of a job that already ran: dropped and uncounted",
			typ:  "reports", lane: 2,
			before: func(r *rig) {
				r.sfn.Put(execution("reports", 1, "r-1", 1, sfntypes.ExecutionStatusSucceeded, "", ""))
			},
			wantCounts: []int{0, 0, 0},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			r := newRig(t, nil)
			oj := occupancy.Job{Type: tt.typ, ID: "r-1"}
			if _, err := r.occ.Join(ctx, oj, tt.lane); err != nil {
				t.Fatal(err)
			}
			if tt.before != nil {
				tt.before(r)
			}
			m := countedMessage(t, tt.typ, tt.lane, "r-1", 1)
			if _, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{m}}); err != nil {
				t.Fatal(err)
			}
			if tt.after != nil {
				tt.after(t, r, m)
			}
			want := tt.wantCounts
			if want == nil {
				want = []int{0, 0, 0}
			}
			if got := r.counts(t, tt.typ, 3); !slices.Equal(got, want) {
				t.Errorf("counts of %s = %v, want %v", tt.typ, got, want)
			}
			checkDLQ(t, r.sqs, tt.wantDead)
		})
	}
}

// A counted job above a lowered limit moves its count with it; when its original comes back (its
// delete failed), the move goes to the same lane and counts nothing again.
func TestCountedJobMovesItsCount(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, nil) // reports=3
	oj := occupancy.Job{Type: "reports", ID: "r-1"}
	for i, ln := range []int{1, 1, 3} { // lane 2 is the least loaded
		if _, err := r.occ.Join(ctx, occupancy.Job{Type: "reports", ID: "other-" + string(rune('a'+i))}, ln); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.occ.Join(ctx, oj, 7); err != nil {
		t.Fatal(err)
	}
	wantCounts := [][]int{nil, {2, 1, 1}, {2, 2, 1}}
	for receive := 1; receive <= 2; receive++ {
		if receive == 2 {
			// Lane 2 fills meanwhile: the least-loaded lane is now 3, but the job is counted in 2.
			if _, err := r.occ.Join(ctx, occupancy.Job{Type: "reports", ID: "other-d"}, 2); err != nil {
				t.Fatal(err)
			}
		}
		m := countedMessage(t, "reports", 7, "r-1", receive)
		resp, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{m}})
		if err != nil || len(resp.BatchItemFailures) != 0 {
			t.Fatalf("receive %d: Handle = %+v, %v; want the original acknowledged", receive, resp, err)
		}
		if got := r.counts(t, "reports", 3); !slices.Equal(got, wantCounts[receive]) {
			t.Errorf("receive %d: counts = %v, want %v (the job counted in lane 2)", receive, got, wantCounts[receive])
		}
		if got, _ := r.occ.Counts(ctx, "reports", 7); got[6] != 0 {
			t.Errorf("receive %d: lane 7 still counts %d", receive, got[6])
		}
	}
	sent := r.sqs.Sent(lanesURL)
	if len(sent) != 2 {
		t.Fatalf("copies sent = %d, want 2 (one per receive)", len(sent))
	}
	for _, c := range sent {
		var j job.Job
		_ = json.Unmarshal([]byte(c.Body), &j)
		if c.MessageGroupID != "reports-2" || !j.Counted || c.MessageDeduplicationID != sent[0].MessageDeduplicationID {
			t.Errorf("copy to %s counted=%v dedup %s; want reports-2, counted, one deduplication id", c.MessageGroupID, j.Counted, c.MessageDeduplicationID)
		}
	}
}

// The lane's next message arrives while the release that deleted the message before it has not yet
// deleted that job's lease: with HandoverWait the starter waits for the lease to go and starts at
// once; without it, it backs off for RetryDelay.
func TestHandoverWaitsForTheReleasesLease(t *testing.T) {
	for _, wait := range []time.Duration{0, 30 * time.Second} { // a long wait ends as soon as the lease goes
		t.Run(fmt.Sprint("HandoverWait ", wait), func(t *testing.T) {
			ctx := context.Background()
			r := newRig(t, nil)
			r.st.HandoverWait = wait
			prev := leaseOf("reports", 1, "r-0", 1, lease.Running, 1)
			r.leases.Set(prev)
			r.sfn.Put(execution("reports", 1, "r-0", 1, sfntypes.ExecutionStatusRunning, "", ""))
			gets := 0
			r.leases.BeforeGet = func(lease.Key) error {
				if gets++; gets == 3 { // the release's lease delete lands during the wait
					r.leases.Remove(prev.Key())
				}
				return nil
			}
			resp, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{jobMessage(t, "reports", 1, "r-1", 0, 1)}})
			if err != nil {
				t.Fatal(err)
			}
			started := slices.Contains(startNames(r.sfn), execName("reports", "r-1", 1))
			if wait > 0 && !started {
				t.Errorf("with HandoverWait %v: starts %v, want r-1 started once the lease went (failures %v)", wait, startNames(r.sfn), failures(resp))
			}
			if wait == 0 && started {
				t.Errorf("without HandoverWait: r-1 started, want it backed off")
			}
		})
	}
}
