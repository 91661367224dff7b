package ops

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sfnlimit/sfnlimit/internal/config"
	"github.com/sfnlimit/sfnlimit/internal/fakes"
	"github.com/sfnlimit/sfnlimit/internal/lease"
)

type attrsFunc func(url string) map[string]string

func (f attrsFunc) GetQueueAttributes(_ context.Context, in *sqs.GetQueueAttributesInput, _ ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error) {
	return &sqs.GetQueueAttributesOutput{Attributes: f(aws.ToString(in.QueueUrl))}, nil
}

func TestStatusRead(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	leases := fakes.NewLeaseStore(func() time.Time { return now })
	for _, l := range []lease.Lease{
		{Type: "payments", Lane: 1, JobID: "p-new", Attempt: 1, Status: lease.Running, StartedAt: now.Add(-time.Minute)},
		{Type: "payments", Lane: 2, JobID: "p-old", Attempt: 2, Status: lease.Retrying, StartedAt: now.Add(-3*time.Minute - 12*time.Second)},
		{Type: "gone", Lane: 1, JobID: "g-1", Attempt: 1, Status: lease.Starting, StartedAt: now.Add(-5 * time.Second)},
	} {
		leases.Set(l)
	}
	r, err := config.NewResolver(defaults(), staticStore{{Type: "reports", Limit: 8}}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	sqsAttrs := attrsFunc(func(url string) map[string]string {
		switch url {
		case "general":
			return map[string]string{"ApproximateNumberOfMessages": "120", "ApproximateNumberOfMessagesNotVisible": "10"}
		case "lanes":
			return map[string]string{"ApproximateNumberOfMessages": "30", "ApproximateNumberOfMessagesNotVisible": "3", "ApproximateNumberOfMessagesDelayed": "1"}
		default:
			return map[string]string{"ApproximateNumberOfMessages": "2"}
		}
	})
	st, err := StatusReader{
		SQS: sqsAttrs, Leases: leases, Config: r.All, General: "general", Lanes: "lanes", DeadQueue: "dlq",
		Now: func() time.Time { return now },
	}.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Types) != 3 {
		t.Fatalf("Read() types = %+v, want gone, payments, reports", st.Types)
	}
	gone, payments, reports := st.Types[0], st.Types[1], st.Types[2]
	if gone.Type != "gone" || gone.Limit != 0 || gone.Source != "none" || gone.Running != 1 {
		t.Errorf("gone = %+v, want a lease of a type with no limit", gone)
	}
	if payments.Limit != 2 || payments.Source != "default" || payments.Running != 2 || payments.ByStatus["retrying"] != 1 {
		t.Errorf("payments = %+v", payments)
	}
	if o := payments.Oldest; o == nil || o.ID != "p-old" || o.Lane != 2 || o.Attempt != 2 || o.AgeSeconds != 192 {
		t.Errorf("payments oldest = %+v, want p-old, 192 s", payments.Oldest)
	}
	if reports.Limit != 8 || reports.Source != "override" || reports.Running != 0 || reports.Oldest != nil {
		t.Errorf("reports = %+v", reports)
	}
	if st.Queues.General != (QueueDepth{Waiting: 120, InFlight: 10}) || st.Queues.Lanes != (QueueDepth{Waiting: 30, InFlight: 3, Delayed: 1}) || st.Queues.DeadLetter.Waiting != 2 {
		t.Errorf("queues = %+v", st.Queues)
	}
	if st.Lanes != 10 || st.LanesInUse != 3 {
		t.Errorf("lanes %d in use of %d, want 3 of 10", st.LanesInUse, st.Lanes)
	}
	var b strings.Builder
	if err := st.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"payments  2      default   2        p-old (lane 2, attempt 2, retrying, 3m12s)",
		"gone      -      none      1",
		"lanes (FIFO)  31       3",
		"3 of 10 lanes in use",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("WriteTable() lacks %q:\n%s", want, b.String())
		}
	}
}

func TestAge(t *testing.T) {
	tests := []struct {
		give time.Duration
		want string
	}{
		{-time.Second, "0s"}, {45 * time.Second, "45s"}, {192 * time.Second, "3m12s"},
		{2*time.Hour + 5*time.Minute, "2h05m"}, {76 * time.Hour, "3d04h"},
	}
	for _, tt := range tests {
		if got := Age(tt.give); got != tt.want {
			t.Errorf("Age(%v) = %s, want %s", tt.give, got, tt.want)
		}
	}
}
