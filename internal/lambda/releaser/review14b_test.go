package releaser_test

import (
	"context"
	"testing"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/lambda/waitroom"
	"github.com/sfnlimit/sfnlimit/internal/tools/fakes"
)

// Review of issue 14. A type that takes its limit from DEFAULT_LIMIT was paused (its live override
// held the pause alone) and resumed: `sfnlimit resume` deletes the item, and if its wake-up was cut
// short, "the releaser's sweep wakes those groups within a minute" (resume's help, docs/design.md).
// The sweep's wakeResumed walks Config.All, which lists types with a TYPE_LIMITS entry or an override
// only: the resumed type is in neither, so its heads parked by the pause wait out PausedParkFor
// (15 minutes), with every lane idle. `config reset --force` of a paused override-only type says the
// same and is worse: the type is unknown, its lane park records are never removed.
func TestSweepWakesResumedTypeWithTheFallbackLimit(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	r.svc.Now = r.clock.Now
	res, err := config.NewResolver(config.Defaults{Limits: map[string]int{"reports": 3}, FallbackLimit: 4, DefaultMaxAttempts: 3, StateMachineArn: smArn}, &liveOverrides{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	r.svc.Config = res
	room := waitroom.NewStore(fakes.NewDynamoDB("table"), "table")
	r.svc.WaitRoom = room
	// The starter registers a type whose jobs it parks for a pause (it may never have held a lease).
	if err := r.leases.RegisterType(ctx, "partner"); err != nil {
		t.Fatal(err)
	}
	if err := room.Park(ctx, waitroom.Waiter{Type: "partner", Group: "partner-0", MessageID: "m-1", ReceiptHandle: "h-1", JobID: "w-1", SubmittedAt: t0, ParkedAt: t0, Paused: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.h.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	woken := false
	for _, v := range r.sqs.VisibilityChanges() {
		woken = woken || (v.ReceiptHandle == "h-1" && v.Timeout == 0)
	}
	if !woken {
		t.Errorf("head parked by the pause of resumed type partner (DEFAULT_LIMIT) not woken by the sweep")
	}
	if ws, _ := room.List(ctx, "partner"); len(ws) != 0 {
		t.Errorf("parked after the sweep = %+v, want the record claimed", ws)
	}
}
