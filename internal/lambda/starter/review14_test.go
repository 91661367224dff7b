package starter_test

import (
	"context"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lane"
)

// Issue 14: "sfnlimit resume TYPE starts them again in order". A job bound to a lane a moment before
// the pause reached the starter (its bind took it out of the waiting group, whose next jobs stayed
// there) is sent back to its waiting group by its lane copy (starter.go, the cfg.Paused() branch of
// process, then move): a new message of a FIFO group, so it waits behind every job that was behind
// it, and after the resume those start first. Here r-1 was bound from the head of reports' waiting
// group while w-2, submitted after it, still waits there: r-1 must not be queued behind w-2.
func TestPauseKeepsABoundJobsPlaceInLine(t *testing.T) {
	ctx := context.Background()
	r := newRigStrategy(t, nil, lane.FirstFree)
	withLiveConfig(t, r, &liveConfig{list: []config.Override{paused("reports")}}, reportsDefaults)
	r.leases.Set(boundLease("reports", 1, "r-1"))
	resp, err := r.st.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{jobMessage(t, "reports", 1, "r-1", 0, 1)}})
	if err != nil {
		t.Fatalf("Handle = %+v, %v", resp, err)
	}
	if got := startNames(r.sfn); len(got) != 0 {
		t.Errorf("starts = %v, want none while paused", got)
	}
	for _, c := range copies(t, r) {
		if c.id == "r-1" && c.lane == job.WaitingLane {
			t.Errorf("r-1, bound before the pause, was sent to the back of waiting group %s: every job that waited behind it (w-2) starts before it after the resume", c.group)
		}
	}
}
