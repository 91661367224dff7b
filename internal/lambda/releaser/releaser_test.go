package releaser_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/lambda/deadletter"
	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
	"github.com/sfnlimit/sfnlimit/internal/lambda/releaser"
	"github.com/sfnlimit/sfnlimit/internal/tools/fakes"
)

func req(typ string, ln int, jobID string, attempt int, o releaser.Outcome, errName, cause string) releaser.Request {
	return releaser.Request{Key: lease.Key{Type: typ, Lane: ln}, JobID: jobID, Attempt: attempt, Outcome: o, Error: errName, Cause: cause, Source: "workflow"}
}

// keyedReq is r for the job of key: a job is its type, key and id.
func keyedReq(key string, r releaser.Request) releaser.Request {
	r.JobKey = key
	return r
}

func ptr[T any](v T) *T { return &v }

func TestRelease(t *testing.T) {
	const failCause = "the job input asked the work to fail (input.fail is true)"
	reports1 := lease.Key{Type: "reports", Lane: 1}
	tests := []struct {
		name         string
		lease        *lease.Lease
		exec         *fakes.Execution
		onDelete     error // DeleteMessage's answer
		onVisibility error // ChangeMessageVisibility's answer
		give         releaser.Request
		want         releaser.Result
		wantDeleted  []string
		wantVisible  []string
		wantLease    *wantLease
		wantDLQ      []dead
	}{
		{
			name:        "success deletes with the lease's latest handle, then the lease",
			lease:       ptr(held("reports", 1, "r-1001", 1, lease.Starting)),
			give:        req("reports", 1, "r-1001", 1, releaser.Succeeded, "", ""),
			want:        releaser.Deleted,
			wantDeleted: []string{handle("r-1001", 2)},
		},
		{
			name:        "success of an attempt whose start was never confirmed",
			lease:       ptr(held("reports", 1, "r-1001", 1, lease.Starting)),
			give:        req("reports", 1, "r-1001", 1, releaser.Succeeded, "", ""),
			want:        releaser.Deleted,
			wantDeleted: []string{handle("r-1001", 2)},
		},
		{
			name:        "success whose message is already gone (stale handle)",
			lease:       ptr(held("reports", 1, "r-1001", 1, lease.Starting)),
			onDelete:    fakes.APIError("ReceiptHandleIsInvalid", "The input receipt handle is invalid."),
			give:        req("reports", 1, "r-1001", 1, releaser.Succeeded, "", ""),
			want:        releaser.Deleted,
			wantDeleted: []string{handle("r-1001", 2)},
		},
		{
			// The attempt's failure was acted on (a retry), and the job is leaving the lane for its
			// waiting group (a lowered limit): a late release of the attempt frees nothing, keeping
			// the lane from a twin delivery of the moving job's message.
			name:      "late failure of an attempt whose job is moving back to wait",
			lease:     ptr(held("reports", 1, "r-1001", 1, lease.Moving)),
			give:      req("reports", 1, "r-1001", 1, releaser.Failed, "JobFailed", failCause),
			want:      releaser.Noop,
			wantLease: &wantLease{JobID: "r-1001", Status: lease.Moving, Attempt: 1, Handle: handle("r-1001", 2), Version: 4},
		},
		{
			name:      "success after the failure of the same attempt was acted on",
			lease:     ptr(held("reports", 1, "r-1001", 1, lease.Retrying)),
			give:      req("reports", 1, "r-1001", 1, releaser.Succeeded, "", ""),
			want:      releaser.Noop,
			wantLease: &wantLease{JobID: "r-1001", Status: lease.Retrying, Attempt: 1, Handle: handle("r-1001", 2), Version: 4},
		},
		{
			name:        "failure with attempts left: retrying, attempt unchanged, visible at once",
			lease:       ptr(held("reports", 1, "r-1001", 1, lease.Starting)),
			give:        req("reports", 1, "r-1001", 1, releaser.Failed, "JobFailed", failCause),
			want:        releaser.Retried,
			wantVisible: []string{handle("r-1001", 2)},
			wantLease:   &wantLease{JobID: "r-1001", Status: lease.Retrying, Attempt: 1, Handle: handle("r-1001", 2), Version: 5},
		},
		{
			name:        "second of three attempts failed",
			lease:       ptr(held("reports", 1, "r-1001", 2, lease.Starting)),
			give:        req("reports", 1, "r-1001", 2, releaser.Failed, "States.Timeout", ""),
			want:        releaser.Retried,
			wantVisible: []string{handle("r-1001", 2)},
			wantLease:   &wantLease{JobID: "r-1001", Status: lease.Retrying, Attempt: 2, Handle: handle("r-1001", 2)},
		},
		{
			name:        "type's own max attempts (payments=5): third failure retried",
			lease:       ptr(held("payments", 1, "p-77", 3, lease.Starting)),
			give:        req("payments", 1, "p-77", 3, releaser.Failed, "JobFailed", ""),
			want:        releaser.Retried,
			wantVisible: []string{handle("p-77", 2)},
			wantLease:   &wantLease{JobID: "p-77", Status: lease.Retrying, Attempt: 3, Handle: handle("p-77", 2)},
		},
		{
			name:        "failure already decided, release interrupted: made visible again",
			lease:       ptr(held("reports", 1, "r-1001", 1, lease.Retrying)),
			give:        req("reports", 1, "r-1001", 1, releaser.Failed, "JobFailed", failCause),
			want:        releaser.Retried,
			wantVisible: []string{handle("r-1001", 2)},
			wantLease:   &wantLease{JobID: "r-1001", Status: lease.Retrying, Attempt: 1, Handle: handle("r-1001", 2), Version: 4},
		},
		{
			name:         "visibility answered MessageNotInflight, lease unchanged: done",
			lease:        ptr(held("reports", 1, "r-1001", 1, lease.Starting)),
			onVisibility: fakes.APIError("AWS.SimpleQueueService.MessageNotInflight", "Message does not exist or is not available for visibility timeout change."),
			give:         req("reports", 1, "r-1001", 1, releaser.Failed, "JobFailed", failCause),
			want:         releaser.Retried,
			wantVisible:  []string{handle("r-1001", 2)},
			wantLease:    &wantLease{JobID: "r-1001", Status: lease.Retrying, Attempt: 1, Handle: handle("r-1001", 2), Version: 5},
		},
		{
			name:        "attempts exhausted: one dead letter rebuilt from the execution input, message and lease deleted",
			lease:       ptr(held("reports", 1, "r-1001", 3, lease.Starting)),
			exec:        ptr(execution("reports", 1, "r-1001", 3, `{"seconds":3,"fail":true}`, "FAILED", "JobFailed", failCause)),
			give:        req("reports", 1, "r-1001", 3, releaser.Failed, "JobFailed", failCause),
			want:        releaser.DeadLettered,
			wantDeleted: []string{handle("r-1001", 2)},
			wantDLQ: []dead{{
				Reason: deadletter.ReasonAttemptsExhausted, JobID: "r-1001", Attempt: "3", Error: "JobFailed", Cause: failCause,
				Body: `{"type":"reports","id":"r-1001","input":{"seconds":3,"fail":true},"redrive":1}`,
			}},
		},
		{
			// The last attempt's release arrives before the starter confirmed its start: the lease
			// has no execution ARN of its own, yet the dead letter keeps the job's input (the ARN
			// comes from the attempt's deterministic name).
			name:        "attempts exhausted before the start was confirmed: input kept",
			lease:       ptr(held("reports", 1, "r-1001", 3, lease.Starting)),
			exec:        ptr(execution("reports", 1, "r-1001", 3, `{"seconds":3}`, "FAILED", "States.Timeout", "")),
			give:        req("reports", 1, "r-1001", 3, releaser.Failed, "States.Timeout", ""),
			want:        releaser.DeadLettered,
			wantDeleted: []string{handle("r-1001", 2)},
			wantDLQ:     []dead{{Reason: deadletter.ReasonAttemptsExhausted, JobID: "r-1001", Attempt: "3", Error: "States.Timeout", Body: `{"type":"reports","id":"r-1001","input":{"seconds":3},"redrive":1}`}},
		},
		{
			name:        "aborted with attempts left: dead-lettered as aborted",
			lease:       ptr(held("reports", 2, "r-1002", 1, lease.Starting)),
			exec:        ptr(execution("reports", 2, "r-1002", 1, `{"seconds":600}`, "ABORTED", "", "")),
			give:        req("reports", 2, "r-1002", 1, releaser.Aborted, "States.ABORTED", ""),
			want:        releaser.DeadLettered,
			wantDeleted: []string{handle("r-1002", 2)},
			wantDLQ:     []dead{{Reason: releaser.ReasonAborted, JobID: "r-1002", Attempt: "1", Body: `{"type":"reports","id":"r-1002","input":{"seconds":600},"redrive":1}`}},
		},
		{
			// Stopped by a newer job of its key (the overflow rule cancel): the job ends cancelled,
			// its lane freed like a success's, with attempts left and no dead letter.
			name:        "aborted by the overflow rule cancel: cancelled, no dead letter",
			lease:       ptr(held("reports", 2, "r-1002", 1, lease.Starting)),
			exec:        ptr(execution("reports", 2, "r-1002", 1, `{"seconds":600}`, "ABORTED", job.ErrorCancelled, job.CancelCause("r-1003"))),
			give:        req("reports", 2, "r-1002", 1, releaser.Aborted, job.ErrorCancelled, job.CancelCause("r-1003")),
			want:        releaser.Deleted,
			wantDeleted: []string{handle("r-1002", 2)},
		},
		{
			name:      "cancel of an attempt whose failure was acted on: nothing left to do",
			lease:     ptr(held("reports", 1, "r-1001", 1, lease.Retrying)),
			give:      req("reports", 1, "r-1001", 1, releaser.Aborted, job.ErrorCancelled, job.CancelCause("r-1003")),
			want:      releaser.Noop,
			wantLease: &wantLease{JobID: "r-1001", Status: lease.Retrying, Attempt: 1, Handle: handle("r-1001", 2), Version: 4},
		},
		{
			name:      "release of an older attempt",
			lease:     ptr(held("reports", 1, "r-1001", 2, lease.Starting)),
			give:      req("reports", 1, "r-1001", 1, releaser.Failed, "JobFailed", ""),
			want:      releaser.Noop,
			wantLease: &wantLease{JobID: "r-1001", Status: lease.Starting, Attempt: 2, Handle: handle("r-1001", 2), Arn: execArn("reports", "r-1001", 2), Version: 4},
		},
		{
			name:      "release of another job",
			lease:     ptr(held("reports", 1, "r-2002", 1, lease.Starting)),
			give:      req("reports", 1, "r-1001", 1, releaser.Succeeded, "", ""),
			want:      releaser.Noop,
			wantLease: &wantLease{JobID: "r-2002", Status: lease.Starting, Attempt: 1, Handle: handle("r-2002", 2), Arn: execArn("reports", "r-2002", 1), Version: 4},
		},
		{
			name: "lane already free",
			give: req("reports", 1, "r-1001", 1, releaser.Failed, "JobFailed", ""),
			want: releaser.Noop,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t)
			k := reports1
			if tt.lease != nil {
				r.leases.Set(*tt.lease)
				k = tt.lease.Key()
			}
			if tt.exec != nil {
				r.sfn.Put(*tt.exec)
			}
			r.sqs.OnDelete = func(*sqs.DeleteMessageInput) error { return tt.onDelete }
			r.sqs.OnChangeVisibility = func(*sqs.ChangeMessageVisibilityInput) error { return tt.onVisibility }

			got, err := r.svc.Release(context.Background(), tt.give)
			if err != nil || got != tt.want {
				t.Fatalf("Release() = %q, %v, want %q, nil", got, err, tt.want)
			}
			if d := deletedHandles(r.sqs); !equal(d, tt.wantDeleted) {
				t.Errorf("DeleteMessage handles = %q, want %q", d, tt.wantDeleted)
			}
			if v := visibleHandles(r.sqs); !equal(v, tt.wantVisible) {
				t.Errorf("made visible = %q, want %q", v, tt.wantVisible)
			}
			checkLease(t, r.leases, k, tt.wantLease)
			checkDLQ(t, r.sqs, tt.wantDLQ)
			if tt.want == releaser.Noop && r.sqs.Calls() != 0 {
				t.Errorf("SQS calls on a no-op release = %d, want 0", r.sqs.Calls())
			}
		})
	}
}

func TestReleaseTwiceIsNoop(t *testing.T) {
	tests := []struct {
		name      string
		lease     lease.Lease
		give      releaser.Request
		wantFirst releaser.Result
	}{
		{"success", held("reports", 1, "r-1001", 1, lease.Starting), req("reports", 1, "r-1001", 1, releaser.Succeeded, "", ""), releaser.Deleted},
		{"attempts exhausted", held("reports", 1, "r-1001", 3, lease.Starting), req("reports", 1, "r-1001", 3, releaser.Failed, "JobFailed", "boom"), releaser.DeadLettered},
		{"aborted", held("reports", 1, "r-1001", 1, lease.Starting), req("reports", 1, "r-1001", 1, releaser.Aborted, "States.ABORTED", ""), releaser.DeadLettered},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t)
			r.leases.Set(tt.lease)
			r.sfn.Put(execution("reports", 1, "r-1001", tt.lease.Attempt, `{}`, "FAILED", "JobFailed", "boom"))
			ctx := context.Background()
			if got, err := r.svc.Release(ctx, tt.give); err != nil || got != tt.wantFirst {
				t.Fatalf("first Release() = %q, %v, want %q", got, err, tt.wantFirst)
			}
			calls, dlq := r.sqs.Calls(), len(r.sqs.Sent(dlqURL))
			if got, err := r.svc.Release(ctx, tt.give); err != nil || got != releaser.Noop {
				t.Fatalf("second Release() = %q, %v, want noop", got, err)
			}
			if r.sqs.Calls() != calls {
				t.Errorf("second Release() made %d SQS calls, want none", r.sqs.Calls()-calls)
			}
			if dlq > 1 {
				t.Errorf("dead letters = %d, want at most 1", dlq)
			}
		})
	}
}

// TestReleaseReceiptHandleRefreshedDuringRelease: the starter receives the message again (new receipt
// handle in the lease) between the release's read and its conditional lease delete.
func TestReleaseReceiptHandleRefreshedDuringRelease(t *testing.T) {
	tests := []struct {
		name        string
		attempt     int
		give        releaser.Outcome
		want        releaser.Result
		wantDLQ     int
		wantReasons string
	}{
		{name: "success", attempt: 1, give: releaser.Succeeded, want: releaser.Deleted},
		{name: "attempts exhausted", attempt: 3, give: releaser.Failed, want: releaser.DeadLettered, wantDLQ: 1, wantReasons: deadletter.ReasonAttemptsExhausted},
		{name: "aborted", attempt: 1, give: releaser.Aborted, want: releaser.DeadLettered, wantDLQ: 1, wantReasons: releaser.ReasonAborted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t)
			l := r.leases.Set(held("reports", 1, "r-1001", tt.attempt, lease.Starting))
			r.sfn.Put(execution("reports", 1, "r-1001", tt.attempt, `{"seconds":3}`, "FAILED", "JobFailed", "boom"))
			bumped := false
			r.leases.BeforeDelete = func(lease.Lease) error {
				if !bumped {
					bumped = true
					r.leases.Update(l.Key(), func(x *lease.Lease) { x.ReceiptHandle = handle("r-1001", 3) })
				}
				return nil
			}
			got, err := r.svc.Release(context.Background(), req("reports", 1, "r-1001", tt.attempt, tt.give, "JobFailed", "boom"))
			if err != nil || got != tt.want {
				t.Fatalf("Release() = %q, %v, want %q", got, err, tt.want)
			}
			d := deletedHandles(r.sqs)
			if len(d) == 0 || d[len(d)-1] != handle("r-1001", 3) {
				t.Errorf("DeleteMessage handles = %q, want the last one to be the refreshed %q", d, handle("r-1001", 3))
			}
			checkLease(t, r.leases, l.Key(), nil)
			sent := r.sqs.Sent(dlqURL)
			if len(sent) != tt.wantDLQ {
				t.Fatalf("dead letters = %d, want %d", len(sent), tt.wantDLQ)
			}
			if tt.wantDLQ > 0 && sent[0].Attributes[deadletter.AttrReason] != tt.wantReasons {
				t.Errorf("dead letter reason = %q, want %q", sent[0].Attributes[deadletter.AttrReason], tt.wantReasons)
			}
		})
	}
}

func TestReleaseRetryRaces(t *testing.T) {
	newHandle := handle("r-1001", 3)
	tests := []struct {
		name string
		// race installs the racing writer.
		race        func(r *rig, k lease.Key)
		wantVisible []string
		wantHandle  string
	}{
		{
			name: "handle refreshed before the retrying write",
			race: func(r *rig, k lease.Key) {
				once := false
				r.leases.BeforePut = func(lease.Lease, *lease.Lease) error {
					if !once {
						once = true
						r.leases.Update(k, func(x *lease.Lease) { x.ReceiptHandle = newHandle })
					}
					return nil
				}
			},
			wantVisible: []string{newHandle},
			wantHandle:  newHandle,
		},
		{
			name: "handle refreshed after the retrying write: visibility answers MessageNotInflight",
			race: func(r *rig, k lease.Key) {
				r.sqs.OnChangeVisibility = func(in *sqs.ChangeMessageVisibilityInput) error {
					if *in.ReceiptHandle == newHandle {
						return nil
					}
					// The message was received again meanwhile: its old handle is dead and the
					// starter stored the new one in the (still retrying) lease.
					r.leases.Update(k, func(x *lease.Lease) { x.ReceiptHandle = newHandle })
					return fakes.APIError("MessageNotInflight", "Message does not exist or is not available for visibility timeout change.")
				}
			},
			wantVisible: []string{handle("r-1001", 2), newHandle},
			wantHandle:  newHandle,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t)
			l := r.leases.Set(held("reports", 1, "r-1001", 1, lease.Starting))
			tt.race(r, l.Key())
			got, err := r.svc.Release(context.Background(), req("reports", 1, "r-1001", 1, releaser.Failed, "JobFailed", ""))
			if err != nil || got != releaser.Retried {
				t.Fatalf("Release() = %q, %v, want retried", got, err)
			}
			if v := visibleHandles(r.sqs); !equal(v, tt.wantVisible) {
				t.Errorf("ChangeMessageVisibility handles = %q, want %q", v, tt.wantVisible)
			}
			checkLease(t, r.leases, l.Key(), &wantLease{JobID: "r-1001", Status: lease.Retrying, Attempt: 1, Handle: tt.wantHandle})
		})
	}
}

// TestReleaseFailuresKeepTheLease: when SQS fails, the release reports an error and leaves the lease,
// so a retried release finds the job where it was.
func TestReleaseFailuresKeepTheLease(t *testing.T) {
	throttled := fakes.APIError("RequestThrottled", "Rate exceeded")
	tests := []struct {
		name    string
		attempt int
		give    releaser.Outcome
		setup   func(r *rig)
		// then is what the retried release gives once SQS answers again.
		then        releaser.Result
		wantDLQ     int
		wantDeleted int // DeleteMessage calls in total
	}{
		{
			name: "delete fails on success", attempt: 1, give: releaser.Succeeded,
			setup: func(r *rig) { r.sqs.OnDelete = onceErr[*sqs.DeleteMessageInput](throttled) },
			then:  releaser.Deleted, wantDeleted: 2,
		},
		{
			name: "dead letter fails on exhaustion", attempt: 3, give: releaser.Failed,
			setup: func(r *rig) {
				r.sqs.OnSend = onceErr[*sqs.SendMessageInput](throttled)
			},
			then: releaser.DeadLettered, wantDLQ: 1, wantDeleted: 1,
		},
		{
			name: "visibility fails on retry", attempt: 1, give: releaser.Failed,
			setup: func(r *rig) { r.sqs.OnChangeVisibility = onceErr[*sqs.ChangeMessageVisibilityInput](throttled) },
			then:  releaser.Retried,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t)
			l := r.leases.Set(held("reports", 1, "r-1001", tt.attempt, lease.Starting))
			r.sfn.Put(execution("reports", 1, "r-1001", tt.attempt, `{}`, "FAILED", "JobFailed", ""))
			tt.setup(r)
			rq := req("reports", 1, "r-1001", tt.attempt, tt.give, "JobFailed", "")
			ctx := context.Background()
			got, err := r.svc.Release(ctx, rq)
			var ae smithy.APIError
			if !errors.As(err, &ae) || ae.ErrorCode() != "RequestThrottled" {
				t.Fatalf("Release() = %q, %v, want the SQS error", got, err)
			}
			if _, ok := r.leases.Lease(l.Key()); !ok {
				t.Fatalf("lease deleted by a release that failed, want it kept")
			}
			if got, err := r.svc.Release(ctx, rq); err != nil || got != tt.then {
				t.Fatalf("retried Release() = %q, %v, want %q", got, err, tt.then)
			}
			if n := len(okSends(r.sqs.Sent(dlqURL))); n != tt.wantDLQ {
				t.Errorf("dead letters sent = %d, want %d", n, tt.wantDLQ)
			}
			if n := len(r.sqs.Deletes()); n != tt.wantDeleted {
				t.Errorf("DeleteMessage calls = %d, want %d", n, tt.wantDeleted)
			}
		})
	}
}

func onceErr[In any](err error) func(In) error {
	done := false
	return func(In) error {
		if done {
			return nil
		}
		done = true
		return err
	}
}

func okSends(ms []fakes.SentMessage) []fakes.SentMessage {
	var out []fakes.SentMessage
	for _, m := range ms {
		if m.Err == nil {
			out = append(out, m)
		}
	}
	return out
}

// DescribeExecution can fail right when the last attempt's release reads the job's input for its
// dead letter (it is eventually consistent, and throttled like any call). The release fails and is
// retried; the retry must dead-letter the job at once, not find a dead-lettering lease left by the
// failed try and leave the lane held until DeadLetterTakeover.
func TestDeadLetterAfterAFailedInputRead(t *testing.T) {
	r := newRig(t)
	r.leases.Set(held("reports", 1, "r-1001", 3, lease.Starting))
	r.sfn.Put(execution("reports", 1, "r-1001", 3, `{"seconds":3}`, "FAILED", "JobFailed", ""))
	fails := 1
	r.sfn.OnDescribe = func(arn string) error {
		if fails > 0 {
			fails--
			return &sfntypes.ExecutionDoesNotExist{Message: aws.String("Execution Does Not Exist: '" + arn + "'")}
		}
		return nil
	}
	ctx := context.Background()
	give := req("reports", 1, "r-1001", 3, releaser.Failed, "JobFailed", "")
	if _, err := r.svc.Release(ctx, give); err == nil {
		t.Fatalf("Release() with the input unreadable = nil error, want one (to be retried)")
	}
	got, err := r.svc.Release(ctx, give) // the workflow's Release step retries at once
	if err != nil || got != releaser.DeadLettered {
		t.Fatalf("retried Release() = %q, %v; want dead-lettered at once", got, err)
	}
	if dead := r.sqs.Sent(dlqURL); len(dead) != 1 || dead[0].Body != `{"type":"reports","id":"r-1001","input":{"seconds":3},"redrive":1}` {
		t.Errorf("dead letters = %+v, want one with the job's input", dead)
	}
	if l, ok := r.leases.Lease(lease.Key{Type: "reports", Lane: 1}); ok {
		t.Errorf("lane keeps lease %+v, want it free", l)
	}
}

// A dead-lettered job keeps its key and priority: sent back to the general queue, a tenant's job
// runs under its tenant's cap again, at its priority (found in review: the key was dropped).
func TestDeadLetterKeepsKeyAndPriority(t *testing.T) {
	r := newRig(t)
	l := held("reports", 1, "r-1001", 3, lease.Starting)
	l.JobKey = "acme"
	r.leases.Set(l)
	x := execution("reports", 1, "r-1001", 3, `{"seconds":3}`, "FAILED", "JobFailed", "")
	x.Input = string(job.Job{Type: "reports", ID: "r-1001", Key: "acme", Priority: 9, Input: json.RawMessage(`{"seconds":3}`), SubmittedAt: submitted}.
		ExecutionInput(1, 3).MustJSON())
	r.sfn.Put(x)
	if got, err := r.svc.Release(context.Background(), keyedReq("acme", req("reports", 1, "r-1001", 3, releaser.Failed, "JobFailed", ""))); err != nil || got != releaser.DeadLettered {
		t.Fatalf("Release() = %q, %v; want dead-lettered", got, err)
	}
	want := `{"type":"reports","id":"r-1001","key":"acme","input":{"seconds":3},"priority":9,"redrive":1}`
	if dead := r.sqs.Sent(dlqURL); len(dead) != 1 || dead[0].Body != want {
		t.Errorf("dead letters = %+v, want one with body %s", dead, want)
	}
}

// A keyed job that exhausts its attempts is dead-lettered; the README says the dead letter's body is
// "the job as you sent it", to be sent back unchanged. Its key must travel with it: a redriven job
// that lost its key runs under the default key, outside its tenant's cap.
func TestDeadLetterKeepsTheJobsKey(t *testing.T) {
	r := newRig(t)
	l := held("reports", 1, "r-1001", 3, lease.Starting)
	l.JobKey = "acme"
	r.leases.Set(l)
	ex := execution("reports", 1, "r-1001", 3, `{"seconds":3}`, "FAILED", "JobFailed", "")
	in := job.Job{Type: "reports", ID: "r-1001", Key: "acme", Input: json.RawMessage(`{"seconds":3}`), SubmittedAt: submitted}
	ex.Input = string(in.ExecutionInput(1, 3).MustJSON())
	r.sfn.Put(ex)
	got, err := r.svc.Release(context.Background(), keyedReq("acme", req("reports", 1, "r-1001", 3, releaser.Failed, "JobFailed", "")))
	if err != nil || got != releaser.DeadLettered {
		t.Fatalf("Release() = %q, %v; want dead-lettered", got, err)
	}
	dead := r.sqs.Sent(dlqURL)
	if len(dead) != 1 {
		t.Fatalf("dead letters = %+v, want one", dead)
	}
	if k := dead[0].Attributes[deadletter.AttrKey]; k != "acme" {
		t.Errorf("dead letter's key attribute = %q, want acme: a job is its type, key and id", k)
	}
	var s job.Submission
	if err := json.Unmarshal([]byte(dead[0].Body), &s); err != nil || s.Key != "acme" {
		t.Errorf("dead letter body = %s, want it to keep the job's key \"acme\" (redriven as is, it runs under the default key)", dead[0].Body)
	}
}

// flakyOverrides is a config store whose reads fail while down (a throttled table).
type flakyOverrides struct{ down bool }

func (f *flakyOverrides) ListOverrides(context.Context) ([]config.Override, error) {
	if f.down {
		return nil, errors.New("ProvisionedThroughputExceededException")
	}
	return nil, nil
}

// A claim written before claims recorded their execution names its state machine only through the
// type's config. When that config cannot be read (the table throttled), the resolver no longer
// answers from older overrides: the release must fail and be retried, not dead-letter the job with
// a body built without its execution, whose input is then lost for good (a redrive runs an empty job).
func TestDeadLetterOfAnOldClaimWaitsForItsConfig(t *testing.T) {
	r := newRig(t)
	store := &flakyOverrides{}
	res, err := config.NewResolver(config.Defaults{Limits: map[string]int{"reports": 3}, DefaultMaxAttempts: 3, StateMachineArn: smArn}, store, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	res.SetClock(r.clock.Now)
	r.svc.Config = res
	ctx := context.Background()
	if _, err := res.Get(ctx, "reports"); err != nil { // a warm container: the config was read once
		t.Fatal(err)
	}
	old := held("reports", 1, "r-1001", 3, lease.Starting)
	old.ExecutionArn = "" // an earlier version's claim: no execution, no state machine recorded
	r.leases.Set(old)
	r.sfn.Put(execution("reports", 1, "r-1001", 3, `{"seconds":3}`, "FAILED", "JobFailed", ""))
	r.clock.Advance(2 * time.Second)
	store.down = true
	give := req("reports", 1, "r-1001", 3, releaser.Failed, "JobFailed", "")
	if got, err := r.svc.Release(ctx, give); err == nil {
		t.Fatalf("Release() with the config unreadable = %q, nil; want an error (to be retried), not a dead letter without the job's input", got)
	}
	store.down = false
	r.clock.Advance(2 * time.Second)
	if got, err := r.svc.Release(ctx, give); err != nil || got != releaser.DeadLettered {
		t.Fatalf("retried Release() = %q, %v; want dead-lettered", got, err)
	}
	if dead := r.sqs.Sent(dlqURL); len(dead) != 1 || dead[0].Body != `{"type":"reports","id":"r-1001","input":{"seconds":3},"redrive":1}` {
		t.Errorf("dead letters = %+v, want one with the job's input", dead)
	}
}

// attemptsOverride is a config store whose one override raises reports' attempts to 5, unreadable
// while down.
type attemptsOverride struct{ down bool }

func (a *attemptsOverride) ListOverrides(context.Context) ([]config.Override, error) {
	if a.down {
		return nil, errors.New("ProvisionedThroughputExceededException")
	}
	return []config.Override{{Type: "reports", MaxAttempts: 5}}, nil
}

// A releaser container that has never read the table (a cold start while it is throttled) knows
// only the deployment's attempts (3), which an override raised to 5: its release of a failed third
// attempt must be retried, not dead-letter a job that has two attempts left.
func TestColdReleaseWaitsForRaisedAttempts(t *testing.T) {
	r := newRig(t)
	store := &attemptsOverride{down: true}
	res, err := config.NewResolver(config.Defaults{Limits: map[string]int{"reports": 3}, DefaultMaxAttempts: 3, StateMachineArn: smArn}, store, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	res.SetClock(r.clock.Now)
	r.svc.Config = res
	r.leases.Set(held("reports", 1, "r-1001", 3, lease.Starting))
	r.sfn.Put(execution("reports", 1, "r-1001", 3, `{"seconds":3}`, "FAILED", "JobFailed", ""))
	ctx := context.Background()
	give := req("reports", 1, "r-1001", 3, releaser.Failed, "JobFailed", "")
	if got, err := r.svc.Release(ctx, give); err == nil {
		t.Fatalf("Release() before any config was read = %q, nil; want an error (to be retried), not a decision on the deployment's attempts", got)
	}
	if dead := r.sqs.Sent(dlqURL); len(dead) != 0 {
		t.Fatalf("dead letters = %+v, want none: the job has attempts left", dead)
	}
	store.down = false
	r.clock.Advance(2 * time.Second)
	if got, err := r.svc.Release(ctx, give); err != nil || got != releaser.Retried {
		t.Fatalf("retried Release() = %q, %v; want retried (attempt 3 of 5)", got, err)
	}
}
