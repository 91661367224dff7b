package releaser_test

import (
	"fmt"
	"slices"
	"time"

	"context"
	"encoding/json"
	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/lambda/waitroom"
	"github.com/sfnlimit/sfnlimit/internal/tools/fakes"
	"testing"

	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
	"github.com/sfnlimit/sfnlimit/internal/lambda/releaser"
)

// A keyed job that exhausts its attempts is dead-lettered; the README says the dead letter's body is
// "the job as you sent it", to be sent back unchanged. Its key must travel with it: a redriven job
// that lost its key runs under the default key, outside its tenant's cap.
func TestDeadLetterKeepsTheJobsKey(t *testing.T) {
	r := newRig(t)
	l := held("reports", 1, "r-1001", 3, lease.Running)
	l.JobKey = "acme"
	r.leases.Set(l)
	ex := execution("reports", 1, "r-1001", 3, `{"seconds":3}`, "FAILED", "JobFailed", "")
	in := job.Job{Type: "reports", ID: "r-1001", Key: "acme", Input: json.RawMessage(`{"seconds":3}`), SubmittedAt: submitted}
	ex.Input = string(in.ExecutionInput(1, 3).MustJSON())
	r.sfn.Put(ex)
	got, err := r.svc.Release(context.Background(), req("reports", 1, "r-1001", 3, releaser.Failed, "JobFailed", ""))
	if err != nil || got != releaser.DeadLettered {
		t.Fatalf("Release() = %q, %v; want dead-lettered", got, err)
	}
	dead := r.sqs.Sent(dlqURL)
	if len(dead) != 1 {
		t.Fatalf("dead letters = %+v, want one", dead)
	}
	var s job.Submission
	if err := json.Unmarshal([]byte(dead[0].Body), &s); err != nil || s.Key != "acme" {
		t.Errorf("dead letter body = %s, want it to keep the job's key \"acme\" (redriven as is, it runs under the default key)", dead[0].Body)
	}
}

// After a type's limit is lowered, jobs still running in lanes above it finish there; the lanes
// within the limit are what binds take (lane.Spread(job, limit)). A keyed wake-up counts free lanes
// as limit - every lease, those above the limit included, so a release that leaves lanes within
// the limit free wakes nobody, and a parked key under its cap waits out waitroom.ParkFor with
// lanes idle (the keyless wake-up wakes one group whatever the count).
func TestKeyedWakeAfterALoweredLimit(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	res, err := config.NewResolver(config.Defaults{
		Limits: map[string]int{"llm": 4}, KeyLimits: map[string]int{"llm": 2}, DefaultMaxAttempts: 3, StateMachineArn: smArn,
	}, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	r.svc.Config = res
	room := waitroom.NewStore(fakes.NewDynamoDB("table"), "table")
	r.svc.WaitRoom = room
	if err := room.Park(ctx, waitroom.Waiter{Type: "llm", Group: "llm#qa", MessageID: "m-qa", ReceiptHandle: "h-qa", JobID: "qa-head",
		Key: "qa", SubmittedAt: t0.Add(-time.Hour), ParkedAt: t0.Add(-time.Second)}); err != nil {
		t.Fatal(err)
	}
	// Lane 1 within the limit of 4 is released; lanes 5-8 (the limit was 8) still run other keys'
	// jobs. Lanes 1-4 are then all free.
	for ln, key := range map[int]string{1: "k1", 5: "k5", 6: "k6", 7: "k7", 8: "k8"} {
		l := held("llm", ln, fmt.Sprintf("%s-%d", key, ln), 1, lease.Running)
		l.JobKey = key
		r.leases.Set(l)
	}
	if _, err := r.svc.Release(ctx, req("llm", 1, "k1-1", 1, releaser.Succeeded, "", "")); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, v := range r.sqs.VisibilityChanges() {
		if v.Timeout == 0 {
			got = append(got, v.ReceiptHandle)
		}
	}
	if !slices.Equal(got, []string{"h-qa"}) {
		t.Errorf("parked handles made visible = %v, want [h-qa]: lanes 1-4 are free and qa runs none", got)
	}
}
