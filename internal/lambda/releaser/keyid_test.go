package releaser_test

import (
	"context"
	"testing"

	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
	"github.com/sfnlimit/sfnlimit/internal/lambda/releaser"
	"github.com/sfnlimit/sfnlimit/internal/tools/fakes"
)

// A job is its type, key and id: a late release of acme's r-1001 (its workflow's Release step, sent
// without executionArn, or a status event) finds the lane taken by beta's r-1001 at the same attempt,
// and frees nothing; beta's own release frees it.
func TestReleaseOfOneKeysJobLeavesAnotherKeysLease(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	l := held("reports", 1, "r-1001", 1, lease.Starting)
	l.JobKey = "beta"
	l.ExecutionArn = fakes.ExecutionArn(smArn, job.RunName("reports", "", "beta", "r-1001", 0, 1))
	r.leases.Set(l)
	for _, tt := range []struct {
		name string
		give releaser.Request
	}{
		{"without executionArn", keyedReq("acme", req("reports", 1, "r-1001", 1, releaser.Succeeded, "", ""))},
		{"with executionArn", func() releaser.Request {
			q := keyedReq("acme", req("reports", 1, "r-1001", 1, releaser.Succeeded, "", ""))
			q.ExecutionArn = fakes.ExecutionArn(smArn, job.RunName("reports", "", "acme", "r-1001", 0, 1))
			return q
		}()},
		{"of the default key", req("reports", 1, "r-1001", 1, releaser.Failed, "JobFailed", "")},
	} {
		if got, err := r.svc.Release(ctx, tt.give); err != nil || got != releaser.Noop {
			t.Errorf("%s: Release(acme's r-1001) = %q, %v; want noop: the lane is beta's r-1001", tt.name, got, err)
		}
	}
	if _, ok := r.leases.Lease(l.Key()); !ok || len(r.sqs.Deletes()) != 0 || len(r.sqs.Sent(dlqURL)) != 0 {
		t.Fatalf("beta's lease held: %v, deletes %v, dead letters %v; want the lease kept, nothing deleted or dead-lettered",
			ok, r.sqs.Deletes(), r.sqs.Sent(dlqURL))
	}
	if got, err := r.svc.Release(ctx, keyedReq("beta", req("reports", 1, "r-1001", 1, releaser.Succeeded, "", ""))); err != nil || got != releaser.Deleted {
		t.Errorf("Release(beta's r-1001) = %q, %v; want deleted", got, err)
	}
}

// A job is its type, sender, key and id: a release of mallory's job naming acme's key and id (its
// Release step, or a status event of its execution) finds the lane taken by acme's job at the same
// attempt and frees nothing; acme's own release frees it.
func TestReleaseOfOneSendersJobLeavesAnotherSendersLease(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	l := held("reports", 1, "r-1001", 1, lease.Starting)
	l.JobKey, l.JobSender = "acme", "AROAACME"
	l.ExecutionArn = fakes.ExecutionArn(smArn, job.RunName("reports", "AROAACME", "acme", "r-1001", 0, 1))
	r.leases.Set(l)
	of := func(sender string, withArn bool) releaser.Request {
		q := keyedReq("acme", req("reports", 1, "r-1001", 1, releaser.Succeeded, "", ""))
		q.JobSender = sender
		if withArn {
			q.ExecutionArn = fakes.ExecutionArn(smArn, job.RunName("reports", sender, "acme", "r-1001", 0, 1))
		}
		return q
	}
	for _, tt := range []struct {
		name string
		give releaser.Request
	}{
		{"another sender, without executionArn", of("AROAMALLORY", false)},
		{"another sender, with executionArn", of("AROAMALLORY", true)},
		{"no sender (routed before senders)", of("", false)},
	} {
		if got, err := r.svc.Release(ctx, tt.give); err != nil || got != releaser.Noop {
			t.Errorf("%s: Release = %q, %v; want noop: the lane is AROAACME's job", tt.name, got, err)
		}
	}
	if _, ok := r.leases.Lease(l.Key()); !ok || len(r.sqs.Deletes()) != 0 || len(r.sqs.Sent(dlqURL)) != 0 {
		t.Fatalf("acme's lease held: %v, deletes %v, dead letters %v; want the lease kept, nothing deleted or dead-lettered",
			ok, r.sqs.Deletes(), r.sqs.Sent(dlqURL))
	}
	if got, err := r.svc.Release(ctx, of("AROAACME", true)); err != nil || got != releaser.Deleted {
		t.Errorf("Release(AROAACME's job) = %q, %v; want deleted", got, err)
	}
}
