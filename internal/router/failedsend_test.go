package router_test

// A job whose send to the lanes queue failed has its count taken back without a tombstone: the
// general queue delivers it again well within SQS's deduplication window (its visibility is 180 s),
// and since the first send never reached SQS, this copy is the one that runs, so it must be counted.

import (
	"context"
	"testing"

	"github.com/sfnlimit/sfnlimit/internal/fakes"
	"github.com/sfnlimit/sfnlimit/internal/lane"
	"github.com/sfnlimit/sfnlimit/internal/occupancy"
)

func TestFailedSendIsCountedAgainOnRedelivery(t *testing.T) {
	ctx := context.Background()
	burst := loadEvent(t, "sqs-payments-burst.json")
	payments := burst.Records[:6]
	occ := fakes.NewOccupancy(nil)
	cfg := &fakeConfig{limits: limits, strategy: map[string]string{"payments": lane.LeastLoaded}}
	r := newRouter(cfg, &fakeSender{fail: map[string]bool{"order-12": true}}, &fakeDLQ{}, nil)
	r.Occupancy = occ
	if _, err := r.Handle(ctx, burst); err != nil {
		t.Fatal(err)
	}
	// The general queue delivers order-12 again (within its 180 s visibility); the send succeeds.
	again := &fakeSender{}
	r.Lanesq = again
	redelivery := burst
	redelivery.Records = payments[2:3]
	if resp, err := r.Handle(ctx, redelivery); err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("Handle(again) = %+v, %v", resp, err)
	}
	sent := sentJobs(t, again, "payments")
	if len(sent) != 1 {
		t.Fatalf("sent %+v", sent)
	}
	counts, _ := occ.Counts(ctx, "payments", 3)
	total := 0
	for _, n := range counts {
		total += n
	}
	m, _ := occ.Get(ctx, occupancy.Job{Type: "payments", ID: "order-12"})
	if !sent[0].counted || total != 6 {
		t.Errorf("order-12 (first send failed, so this copy is the only one) sent counted=%v; lane counts %v (total %d) for 6 jobs in lanes; marker %+v",
			sent[0].counted, counts, total, m)
	}
}
