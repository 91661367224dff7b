package releaser_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sfnlimit/sfnlimit/internal/lambda/batch"
	"github.com/sfnlimit/sfnlimit/internal/lambda/batchend"
	"github.com/sfnlimit/sfnlimit/internal/lambda/deadletter"
	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
	"github.com/sfnlimit/sfnlimit/internal/lambda/releaser"
	"github.com/sfnlimit/sfnlimit/internal/tools/fakes"
)

// failingEnder fails every record, as a throttled table would.
type failingEnder struct{ calls int }

func (f *failingEnder) EndedAs(context.Context, batchend.End) (batch.Outcome, error) {
	f.calls++
	return "", errors.New("ProvisionedThroughputExceeded")
}

// A release records its job in the job's batch (named by the lease): a success as succeeded, an
// exhausted job as dead-lettered with the lease's redrive generation (through the dead-letter
// sender), a job stopped by a newer one of its key (the overflow rule cancel) as cancelled, with no
// dead letter, and a duplicate release counts nothing more.
func TestReleaseRecordsTheBatch(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	ledger := batch.New(fakes.NewDynamoDB("t"), "t")
	bus := &flakyEvents{}
	tracker := batchend.New(ledger, bus, "s", fakes.Logger(t))
	r.svc.Batches = tracker
	r.svc.DLQ = batchend.DeadLetters{Next: deadletter.New(r.sqs, dlqURL), Tracker: tracker}
	if err := ledger.Open(ctx, "up", 3, t0); err != nil {
		t.Fatal(err)
	}
	ok := held("reports", 1, "r-1", 1, lease.Starting)
	ok.Batch = "up"
	r.leases.Set(ok)
	bad := held("reports", 2, "r-2", 3, lease.Starting)
	bad.Batch, bad.Redrive = "up", 2
	r.leases.Set(bad)
	r.sfn.Put(execution("reports", 2, "r-2", 3, `{}`, "FAILED", "JobFailed", ""))
	gone := held("reports", 3, "r-3", 1, lease.Starting)
	gone.Batch = "up"
	r.leases.Set(gone)

	for _, rq := range []releaser.Request{
		req("reports", 1, "r-1", 1, releaser.Succeeded, "", ""),
		req("reports", 1, "r-1", 1, releaser.Succeeded, "", ""), // the status event after the workflow's step
		req("reports", 3, "r-3", 1, releaser.Aborted, job.ErrorCancelled, job.CancelCause("r-4")),
		req("reports", 3, "r-3", 1, releaser.Aborted, job.ErrorCancelled, job.CancelCause("r-4")), // the sweep's, after the status event's
	} {
		if _, err := r.svc.Release(ctx, rq); err != nil {
			t.Fatal(err)
		}
	}
	rq := req("reports", 2, "r-2", 3, releaser.Failed, "JobFailed", "")
	rq.Redrive = 2
	if got, err := r.svc.Release(ctx, rq); err != nil || got != releaser.DeadLettered {
		t.Fatalf("Release(exhausted) = %s, %v, want dead-lettered", got, err)
	}
	sum, jobs, err := ledger.Show(ctx, "up", true)
	if err != nil {
		t.Fatal(err)
	}
	if !sum.Closed || sum.Counts[batch.Succeeded] != 1 || sum.Counts[batch.DeadLettered] != 1 || sum.Counts[batch.Cancelled] != 1 || bus.sent != 1 {
		t.Errorf("batch closed %v, counts %v, %d events; want closed, 1 succeeded 1 dead-lettered 1 cancelled, 1 event", sum.Closed, sum.Counts, bus.sent)
	}
	for _, j := range jobs {
		if j.ID == "reports/r-2" && j.Redrive != 2 {
			t.Errorf("r-2 recorded with redrive %d, want the lease's 2", j.Redrive)
		}
	}
	if got := r.sqs.Sent(dlqURL); len(got) != 1 {
		t.Errorf("%d dead letters, want 1", len(got))
	}
}

// A success whose batch record fails keeps the message and the lease: the next release records it.
func TestReleaseKeepsTheLaneWhenTheBatchRecordFails(t *testing.T) {
	r := newRig(t)
	f := &failingEnder{}
	r.svc.Batches = f
	l := held("reports", 1, "r-1", 1, lease.Starting)
	l.Batch = "up"
	r.leases.Set(l)
	if _, err := r.svc.Release(context.Background(), req("reports", 1, "r-1", 1, releaser.Succeeded, "", "")); err == nil {
		t.Fatal("Release with the batch record failing = nil error, want the error")
	}
	if f.calls != 1 || len(deletedHandles(r.sqs)) != 0 {
		t.Errorf("batch record calls %d, deletes %v; want 1 and none", f.calls, deletedHandles(r.sqs))
	}
	checkLease(t, r.leases, l.Key(), &wantLease{JobID: "r-1", Status: lease.Starting, Attempt: 1, Handle: handle("r-1", 2), Arn: l.ExecutionArn})
	// A job without a batch does not call it.
	r2 := newRig(t)
	f2 := &failingEnder{}
	r2.svc.Batches = f2
	r2.leases.Set(held("reports", 1, "r-9", 1, lease.Starting))
	if got, err := r2.svc.Release(context.Background(), req("reports", 1, "r-9", 1, releaser.Succeeded, "", "")); err != nil || got != releaser.Deleted {
		t.Errorf("Release without a batch = %s, %v, want deleted", got, err)
	}
	if f2.calls != 0 {
		t.Errorf("batch record called %d times for a job without a batch", f2.calls)
	}
}

type pendingFunc func(context.Context, time.Duration) (int, error)

func (f pendingFunc) AnnouncePending(ctx context.Context, minAge time.Duration) (int, error) {
	return f(ctx, minAge)
}

// The sweep sends the completion events of batches closed without one (a refused closer's dead
// letter goes out while EventBridge is down, batchend.DeadLetters), giving their closers
// SweepMinAge to send it themselves; a failure waits for the next sweep.
func TestSweepAnnouncesBatchesLeftPending(t *testing.T) {
	r := newRig(t)
	var ages []time.Duration
	r.h.Batches = pendingFunc(func(_ context.Context, minAge time.Duration) (int, error) {
		ages = append(ages, minAge)
		return 0, errors.New("InternalException: injected")
	})
	if _, err := r.h.Sweep(context.Background()); err != nil {
		t.Fatalf("Sweep() = %v, want a batch left unannounced logged, not failing the sweep", err)
	}
	if len(ages) != 1 || ages[0] != r.h.SweepMinAge {
		t.Errorf("AnnouncePending called with %v, want once with SweepMinAge %s", ages, r.h.SweepMinAge)
	}
}

// A release whose batch already counted the job otherwise, by an earlier release of the attempt that
// stopped before it acted, ends the job as that count says: the batch and its completion event are
// what producers read. At seed 372 of all+cancel, a workflow's Release step counted the last attempt
// dead_lettered and failed on the completion event; a newer job's stop (the overflow rule cancel)
// then ended the job cancelled, and the dead letter the batch listed was never sent.
func TestReleaseEndsTheJobAsItsBatchCountedIt(t *testing.T) {
	tests := []struct {
		name     string
		counted  batch.Outcome
		redriven bool // the lease is of the job's next generation (redrive 1), the count of its first
		give     releaser.Request
		want     releaser.Result
		wantDead bool
	}{
		{"cancel after a failure was counted: dead-lettered", batch.DeadLettered, false,
			req("reports", 1, "r-1", 3, releaser.Aborted, job.ErrorCancelled, job.CancelCause("r-9")), releaser.DeadLettered, true},
		{"success after a failed Release step was counted: dead-lettered", batch.DeadLettered, false,
			req("reports", 1, "r-1", 3, releaser.Succeeded, "", ""), releaser.DeadLettered, true},
		{"cancel after a success was counted: done, no dead letter", batch.Succeeded, false,
			req("reports", 1, "r-1", 3, releaser.Aborted, job.ErrorCancelled, job.CancelCause("r-9")), releaser.Deleted, false},
		{"cancel counted cancelled: done, no dead letter", batch.Cancelled, false,
			req("reports", 1, "r-1", 3, releaser.Aborted, job.ErrorCancelled, job.CancelCause("r-9")), releaser.Deleted, false},
		// A redriven job runs again and ends as it ends; its batch keeps the first generation's count.
		{"success of a redrive after the first generation was counted dead-lettered: done", batch.DeadLettered, true,
			req("reports", 1, "r-1", 3, releaser.Succeeded, "", ""), releaser.Deleted, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			r := newRig(t)
			ledger := batch.New(fakes.NewDynamoDB("t"), "t")
			tracker := batchend.New(ledger, &flakyEvents{}, "s", fakes.Logger(t))
			r.svc.Batches = tracker
			r.svc.DLQ = batchend.DeadLetters{Next: deadletter.New(r.sqs, dlqURL), Tracker: tracker}
			if err := ledger.Open(ctx, "up", 2, t0); err != nil {
				t.Fatal(err)
			}
			l := held("reports", 1, "r-1", 3, lease.Starting)
			l.Batch = "up"
			if tt.redriven {
				l.Redrive, tt.give.Redrive = 1, 1
			}
			r.leases.Set(l)
			r.sfn.Put(execution("reports", 1, "r-1", 3, `{}`, "ABORTED", "", ""))
			// The earlier release's count, which stopped before it acted.
			if err := tracker.Ended(ctx, batchend.End{Batch: "up", Type: "reports", ID: "r-1", Outcome: tt.counted}); err != nil {
				t.Fatal(err)
			}
			got, err := r.svc.Release(ctx, tt.give)
			if err != nil || got != tt.want {
				t.Fatalf("Release() = %s, %v, want %s", got, err, tt.want)
			}
			if n := len(r.sqs.Sent(dlqURL)); (n == 1) != tt.wantDead || n > 1 {
				t.Errorf("%d dead letters, want dead-lettered %v", n, tt.wantDead)
			}
			sum, _, err := ledger.Show(ctx, "up", false)
			if err != nil {
				t.Fatal(err)
			}
			if sum.Recorded != 1 || sum.Counts[tt.counted] != 1 {
				t.Errorf("batch counts %v (recorded %d), want the job counted once, %s", sum.Counts, sum.Recorded, tt.counted)
			}
			if _, ok := r.leases.Lease(l.Key()); ok {
				t.Errorf("lane 1 still leased after the job ended")
			}
		})
	}
}
