package releaser_test

import (
	"context"
	"encoding/json"
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
