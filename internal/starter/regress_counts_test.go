package starter_test

// Regressions found by review: each of these failed before its fix.

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sfnlimit/sfnlimit/internal/config"
	"github.com/sfnlimit/sfnlimit/internal/lane"
	"github.com/sfnlimit/sfnlimit/internal/occupancy"
)

func resolver(t *testing.T, limits map[string]int, strategy string) *config.Resolver {
	t.Helper()
	res, err := config.NewResolver(config.Defaults{
		Limits: limits, MaxAttempts: map[string]int{"payments": 5}, DefaultMaxAttempts: 3, StateMachineArn: smArn, Strategy: strategy,
	}, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// A parked message that comes back after ParkFor and binds at its first look leaves its WAIT#
// record behind (Unpark runs only on the second look). A release then "wakes" the stale record.
func TestStaleParkRecordGoesWhenTheJobBinds(t *testing.T) {
	ctx := context.Background()
	r := newRigStrategy(t, map[string]int{"reports": 1}, lane.FirstFree)
	busy := occupancy.Job{Type: "reports", ID: "busy"}
	if _, err := r.occ.Join(ctx, busy, 1); err != nil {
		t.Fatal(err)
	}
	// Receive 1: every lane taken, w-1 parks.
	if resp, _ := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{waiting(t, "reports", "w-1", 1)}}); len(resp.BatchItemFailures) != 1 {
		t.Fatalf("want w-1 parked: %+v", resp)
	}
	// The lane frees by a path that does not wake (a starter refusal, a duplicate dropped, a stale
	// lease taken back, a raised limit): w-1 comes back after ParkFor and binds at its first look.
	if ok, _ := r.occ.Leave(ctx, busy, 1); !ok {
		t.Fatal("leave")
	}
	if resp, _ := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{waiting(t, "reports", "w-1", 2)}}); len(resp.BatchItemFailures) != 0 {
		t.Fatalf("want w-1 bound: %+v", resp)
	}
	if w, err := r.room.Take(ctx, "reports"); err != nil || w != nil {
		t.Errorf("parked record left after w-1 was bound: %+v, %v (a release spends a wake on it)", w, err)
	}
}

// A first-free bind whose JoinEmpty went through but whose send failed, and whose type then
// becomes unknown: the waiting message sends the job to the lane it took, and the job is refused
// there, giving the lane back. One dead letter, no lane left counted.
func TestRefusedAfterBindGivesTheLaneBack(t *testing.T) {
	ctx := context.Background()
	r := newRigStrategy(t, nil, lane.FirstFree)
	r.sqs.OnSend = func(in *sqs.SendMessageInput) error {
		if *in.QueueUrl == lanesURL {
			return errors.New("InternalError")
		}
		return nil
	}
	if resp, _ := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{waiting(t, "reports", "w-1", 1)}}); len(resp.BatchItemFailures) != 1 {
		t.Fatalf("want w-1 held after the failed send: %+v", resp)
	}
	r.sqs.OnSend = nil
	r.st.Config = resolver(t, map[string]int{"payments": 50}, lane.FirstFree) // reports removed
	if resp, _ := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{waiting(t, "reports", "w-1", 2)}}); len(resp.BatchItemFailures) != 0 {
		t.Fatalf("want w-1 sent to its lane: %+v", resp)
	}
	c := boundCopies(t, r)
	last := c[len(c)-1]
	if last.id != "w-1" || !last.counted {
		t.Fatalf("copies = %+v, want w-1 sent counted to the lane it took", c)
	}
	resp, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{countedMessage(t, "reports", last.lane, "w-1", 1)}})
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("want w-1 refused in its lane: %+v, %v", resp, err)
	}
	checkDLQ(t, r.sqs, []dead{{"unknown_type", "w-1"}})
	if got := r.counts(t, "reports", 3); !slices.Equal(got, []int{0, 0, 0}) {
		t.Errorf("counts = %v after w-1 was dead-lettered, want no lane counted", got)
	}
}

// Limit lowered twice while a counted job's move is being retried: the second try moves "from"
// the job's message lane although the marker is in the first target; Move answers false (ignored)
// and the job is sent counted to a lane that does not count it, while the first target stays
// counted for good.
func TestMoveRetriedUnderALowerLimitMovesTheCount(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, map[string]int{"reports": 5, "payments": 50})
	oj := occupancy.Job{Type: "reports", ID: "r-1"}
	if _, err := r.occ.Join(ctx, oj, 5); err != nil {
		t.Fatal(err)
	}
	for i, ln := range []int{1, 2, 3} { // lane 4 is the least loaded under a limit of 4
		if _, err := r.occ.Join(ctx, occupancy.Job{Type: "reports", ID: "other-" + string(rune('a'+i))}, ln); err != nil {
			t.Fatal(err)
		}
	}
	r.st.Config = resolver(t, map[string]int{"reports": 4, "payments": 50}, "")
	r.sqs.OnSend = func(*sqs.SendMessageInput) error { return errors.New("InternalError") }
	if resp, _ := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{countedMessage(t, "reports", 5, "r-1", 1)}}); len(resp.BatchItemFailures) != 1 {
		t.Fatalf("want the move held: %+v", resp)
	}
	r.sqs.OnSend = nil
	r.st.Config = resolver(t, map[string]int{"reports": 3, "payments": 50}, "")
	if resp, _ := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{countedMessage(t, "reports", 5, "r-1", 2)}}); len(resp.BatchItemFailures) != 0 {
		t.Fatalf("want the move done: %+v", resp)
	}
	sent := boundCopies(t, r)
	last := sent[len(sent)-1]
	m, _ := r.occ.Get(ctx, oj)
	all, _ := r.occ.Counts(ctx, "reports", 5)
	if m == nil || m.Lane != last.lane {
		t.Errorf("copy sent to lane %d (counted=%v) but the marker is %+v; counts lanes 1..5 = %v", last.lane, last.counted, m, all)
	}
}
