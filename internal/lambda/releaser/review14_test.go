package releaser_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
	"github.com/sfnlimit/sfnlimit/internal/lambda/releaser"
	"github.com/sfnlimit/sfnlimit/internal/lambda/waitroom"
	"github.com/sfnlimit/sfnlimit/internal/tools/fakes"
)

// liveOverrides is a config store whose overrides change, as the table's do when an operator pauses
// and resumes a type.
type liveOverrides struct {
	mu sync.Mutex
	os []config.Override
}

func (l *liveOverrides) ListOverrides(context.Context) ([]config.Override, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]config.Override(nil), l.os...), nil
}

func (l *liveOverrides) set(os ...config.Override) {
	l.mu.Lock()
	l.os = os
	l.mu.Unlock()
}

// A type paused while its lanes are busy: its waiting group's head is parked for a lane (not for the
// pause; it parked before the pause), and every release during the pause frees a lane and wakes
// nobody (TestReleaseOfAPausedTypeWakesNobody). After the resume every lane is free, but the resume
// (WakeResumed, which `sfnlimit resume` calls) and the sweep after it wake only groups parked *for
// the pause*: the head parked for a lane stays invisible until waitroom.ParkFor (60 s) runs out,
// with all the type's lanes idle. Found by e2e scenario 17 (tests/flow_test.go): the first start
// after the resume came 35 s after it, at the head's park plus 60 s.
func TestResumeWakesAGroupParkedForALaneBeforeThePause(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	r.svc.Now = r.clock.Now
	live := &liveOverrides{}
	res, err := config.NewResolver(config.Defaults{Limits: map[string]int{"reports": 3}, DefaultMaxAttempts: 3, StateMachineArn: smArn}, live, 0)
	if err != nil {
		t.Fatal(err)
	}
	r.svc.Config = res
	room := waitroom.NewStore(fakes.NewDynamoDB("table"), "table")
	r.svc.WaitRoom = room

	// All three lanes run; the waiting group's head parked for a lane a moment before the pause.
	for ln, id := range map[int]string{1: "r-1", 2: "r-2", 3: "r-3"} {
		r.leases.Set(held("reports", ln, id, 1, lease.Running))
	}
	if err := room.Park(ctx, waitroom.Waiter{Type: "reports", Group: "reports-0", MessageID: "m-4", ReceiptHandle: "h-head", JobID: "r-4",
		SubmittedAt: t0.Add(-10 * time.Second), ParkedAt: t0.Add(-time.Second)}); err != nil {
		t.Fatal(err)
	}
	live.set(config.Override{Type: "reports", Pause: &config.Pause{Reason: "INC-14", Since: t0}})
	for ln, id := range map[int]string{1: "r-1", 2: "r-2", 3: "r-3"} {
		if got, err := r.svc.Release(ctx, req("reports", ln, id, 1, releaser.Succeeded, "", "")); err != nil || got != releaser.Deleted {
			t.Fatalf("Release(%s) = %q, %v; want deleted", id, got, err)
		}
	}

	// Resumed 25 s later, well within the head's park: the resume and a sweep.
	r.clock.Advance(25 * time.Second)
	live.set()
	n, err := r.svc.WakeResumed(ctx, "reports")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.h.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	woken := false
	for _, v := range r.sqs.VisibilityChanges() {
		if v.ReceiptHandle == "h-head" && v.Timeout == 0 {
			woken = true
		}
	}
	if !woken {
		ws, _ := room.List(ctx, "reports")
		t.Errorf("after the resume (WakeResumed woke %d) and a sweep, with all 3 lanes free, the head parked for a lane before the pause was not woken "+
			"(parked: %+v): it waits until waitroom.ParkFor (%v) runs out", n, ws, waitroom.ParkFor)
	}
}
