package releaser_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sfnlimit/sfnlimit/internal/fakes"
	"github.com/sfnlimit/sfnlimit/internal/lease"
	"github.com/sfnlimit/sfnlimit/internal/releaser"
	"github.com/sfnlimit/sfnlimit/internal/waitroom"
)

// A release that frees a lane makes the oldest parked job of its type visible, skipping parked
// records whose message was received again meanwhile; a release that frees nothing wakes nobody.
func TestReleaseWakesTheOldestParkedJob(t *testing.T) {
	tests := []struct {
		name   string
		lease  lease.Lease
		give   releaser.Request
		parked []waitroom.Waiter
		stale  map[string]bool // receipt handles SQS calls stale
		want   []string        // handles made visible (timeout 0), in order
	}{
		{
			name: "success wakes the oldest", lease: held("reports", 1, "r-1001", 1, lease.Running),
			give: req("reports", 1, "r-1001", 1, releaser.Succeeded, "", ""),
			parked: []waitroom.Waiter{
				{Type: "reports", MessageID: "m-2", ReceiptHandle: "h-2", JobID: "w-2", ParkedAt: t0.Add(2 * time.Second)},
				{Type: "reports", MessageID: "m-1", ReceiptHandle: "h-1", JobID: "w-1", ParkedAt: t0.Add(time.Second)},
				{Type: "payments", MessageID: "m-p", ReceiptHandle: "h-p", JobID: "p-1", ParkedAt: t0},
			},
			want: []string{"h-1"},
		},
		{
			name: "a stale parked record is skipped", lease: held("reports", 1, "r-1001", 3, lease.Running),
			give: req("reports", 1, "r-1001", 3, releaser.Failed, "JobFailed", "boom"),
			parked: []waitroom.Waiter{
				{Type: "reports", MessageID: "m-1", ReceiptHandle: "h-1", JobID: "w-1", ParkedAt: t0.Add(time.Second)},
				{Type: "reports", MessageID: "m-2", ReceiptHandle: "h-2", JobID: "w-2", ParkedAt: t0.Add(2 * time.Second)},
			},
			stale: map[string]bool{"h-1": true},
			want:  []string{"h-1", "h-2"},
		},
		{
			name: "a retry keeps its lane and wakes nobody", lease: held("reports", 1, "r-1001", 1, lease.Running),
			give: req("reports", 1, "r-1001", 1, releaser.Failed, "JobFailed", "boom"),
			parked: []waitroom.Waiter{
				{Type: "reports", MessageID: "m-1", ReceiptHandle: "h-1", JobID: "w-1", ParkedAt: t0},
			},
			want: nil,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			r := newRig(t)
			room := waitroom.NewStore(fakes.NewDynamoDB("table"), "table")
			r.svc.WaitRoom = room
			for _, w := range tt.parked {
				if err := room.Park(ctx, w); err != nil {
					t.Fatal(err)
				}
			}
			r.sqs.OnChangeVisibility = func(in *sqs.ChangeMessageVisibilityInput) error {
				if tt.stale[*in.ReceiptHandle] {
					return fakes.APIError("ReceiptHandleIsInvalid", "stale")
				}
				return nil
			}
			r.leases.Set(tt.lease)
			r.sfn.Put(execution("reports", 1, "r-1001", tt.lease.Attempt, `{}`, "FAILED", "JobFailed", "boom"))
			if _, err := r.svc.Release(ctx, tt.give); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, v := range r.sqs.VisibilityChanges() {
				if v.Timeout == 0 && v.ReceiptHandle != tt.lease.ReceiptHandle {
					got = append(got, v.ReceiptHandle)
				}
			}
			if len(got) != len(tt.want) || (len(got) > 0 && got[len(got)-1] != tt.want[len(tt.want)-1]) {
				t.Errorf("parked handles made visible = %v, want %v", got, tt.want)
			}
		})
	}
}
