package fakes_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"

	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
	"github.com/sfnlimit/sfnlimit/internal/tools/fakes"
)

type leaseStore interface {
	Get(ctx context.Context, k lease.Key) (*lease.Lease, error)
	Put(ctx context.Context, next lease.Lease, prev *lease.Lease) (lease.Lease, error)
	Delete(ctx context.Context, prev lease.Lease) error
	All(ctx context.Context) ([]lease.Lease, error)
}

// TestLeaseStoreMatchesStore runs one history against the in-memory lease store and against
// lease.Store on the fake table, and wants the same answer at every step: the starter's and
// releaser's tests rely on the in-memory store behaving as the real one.
func TestLeaseStoreMatchesStore(t *testing.T) {
	now := func() time.Time { return time.Date(2025, 3, 14, 9, 27, 0, 0, time.UTC) }
	stores := map[string]leaseStore{
		"memory":      fakes.NewLeaseStore(now),
		"lease.Store": lease.NewStore(fakes.NewDynamoDB("t"), "t"),
	}
	k := lease.Key{Type: "reports", Lane: 1}
	base := lease.Lease{Type: "reports", Lane: 1, JobID: "r-1001", ReceiptHandle: "h1", Attempt: 1, Status: lease.Starting}
	other := base
	other.Lane = 2
	for name, s := range stores {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			step := func(what string, l lease.Lease, err error, want error) lease.Lease {
				t.Helper()
				if !errors.Is(err, want) || (want == nil && err != nil) {
					t.Fatalf("%s = %+v, %v, want error %v", what, l, err, want)
				}
				return l
			}
			if l, err := s.Get(ctx, k); err != nil || l != nil {
				t.Fatalf("get free lane = %+v, %v, want nil", l, err)
			}
			v1, err := s.Put(ctx, base, nil)
			step("claim free lane", v1, err, nil)
			if v1.Version < 1 {
				t.Fatalf("claim free lane: version %d, want at least 1", v1.Version)
			}
			_, err = s.Put(ctx, base, nil)
			step("claim held lane", lease.Lease{}, err, lease.ErrConflict)
			v2, err := s.Put(ctx, base, &v1)
			step("replace current", v2, err, nil)
			if v2.Version != v1.Version+1 {
				t.Errorf("replace current: version %d, want %d", v2.Version, v1.Version+1)
			}
			_, err = s.Put(ctx, base, &v1)
			step("replace stale", lease.Lease{}, err, lease.ErrConflict)
			if _, err := s.Put(ctx, other, &v2); err == nil || errors.Is(err, lease.ErrConflict) {
				t.Errorf("replace another lane = %v, want an error other than a conflict", err)
			}
			if l, err := s.Get(ctx, k); err != nil || l == nil || l.Version != v2.Version {
				t.Errorf("get held lane = %+v, %v, want version %d", l, err, v2.Version)
			}
			step("delete stale", lease.Lease{}, s.Delete(ctx, v1), lease.ErrConflict)
			step("delete current", lease.Lease{}, s.Delete(ctx, v2), nil)
			step("delete again", lease.Lease{}, s.Delete(ctx, v2), lease.ErrConflict)
			if l, err := s.Get(ctx, k); err != nil || l != nil {
				t.Fatalf("get freed lane = %+v, %v, want nil", l, err)
			}
			// A new lease of the lane never takes a version an earlier one had: a release still
			// holding the former lease must not delete or overwrite it.
			v3, err := s.Put(ctx, base, nil)
			step("claim again", v3, err, nil)
			if v3.Version == v1.Version || v3.Version == v2.Version {
				t.Errorf("claim again: version %d, an earlier lease's (%d, %d)", v3.Version, v1.Version, v2.Version)
			}
			step("delete the former lease from the new one", lease.Lease{}, s.Delete(ctx, v2), lease.ErrConflict)
			all, err := s.All(ctx)
			if err != nil || len(all) != 1 || all[0].Key() != k || all[0].Version != v3.Version {
				t.Errorf("All() = %+v, %v, want the one lease of %s at version %d", all, err, k, v3.Version)
			}
		})
	}
}

func get(s leaseStore, k lease.Key) (int64, error) {
	l, err := s.Get(context.Background(), k)
	if l == nil {
		return 0, err
	}
	return l.Version, err
}

func put(s leaseStore, next lease.Lease, prev *lease.Lease) (int64, error) {
	l, err := s.Put(context.Background(), next, prev)
	return l.Version, err
}

func TestLeaseStoreHooksAndHelpers(t *testing.T) {
	clock := fakes.NewClock(time.Date(2025, 3, 14, 9, 27, 0, 0, time.UTC))
	s := fakes.NewLeaseStore(clock.Now)
	ctx := context.Background()
	l := s.Set(lease.Lease{Type: "reports", Lane: 1, JobID: "r-1001", ReceiptHandle: "h1"})
	if l.Version != 1 || !l.UpdatedAt.Equal(clock.Now()) {
		t.Errorf("Set() = %+v, want version 1 stamped now", l)
	}
	clock.Advance(time.Minute)
	u, ok := s.Update(l.Key(), func(x *lease.Lease) { x.ReceiptHandle = "h2" })
	if !ok || u.Version != 2 || u.ReceiptHandle != "h2" || !u.UpdatedAt.Equal(clock.Now()) {
		t.Errorf("Update() = %+v, %v, want version 2 with h2 stamped now", u, ok)
	}
	boom := errors.New("injected")
	s.BeforeDelete = func(lease.Lease) error { return boom }
	if err := s.Delete(ctx, u); !errors.Is(err, boom) {
		t.Errorf("Delete() with a failing hook = %v, want the hook's error", err)
	}
	if _, ok := s.Lease(l.Key()); !ok {
		t.Errorf("lease deleted although the hook failed the delete")
	}
}

func TestSFNNameIdempotency(t *testing.T) {
	f := fakes.NewSFN(nil)
	ctx := context.Background()
	sm := "arn:aws:states:us-east-1:123456789012:stateMachine:sample"
	start := func(name, input string) (string, error) {
		out, err := f.StartExecution(ctx, &sfn.StartExecutionInput{StateMachineArn: &sm, Name: &name, Input: &input})
		if err != nil {
			return "", err
		}
		return aws.ToString(out.ExecutionArn), nil
	}
	arn, err := start("job-1", `{"a":1}`)
	if err != nil || arn != "arn:aws:states:us-east-1:123456789012:execution:sample:job-1" {
		t.Fatalf("first start = %q, %v", arn, err)
	}
	tests := []struct {
		name, input string
		close       bool
		wantExists  bool
	}{
		{name: "same name and input while running", input: `{"a":1}`},
		{name: "same name, other input", input: `{"a":2}`, wantExists: true},
		{name: "same name and input after it closed", input: `{"a":1}`, close: true, wantExists: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.close {
				f.Close(arn, sfntypes.ExecutionStatusSucceeded, "", "")
			}
			got, err := start("job-1", tt.input)
			var exists *sfntypes.ExecutionAlreadyExists
			if errors.As(err, &exists) != tt.wantExists || (!tt.wantExists && got != arn) {
				t.Errorf("start = %q, %v, want already-exists %v", got, err, tt.wantExists)
			}
		})
	}
	if _, err := f.DescribeExecution(ctx, &sfn.DescribeExecutionInput{ExecutionArn: aws.String(arn + "-nope")}); !isErr[*sfntypes.ExecutionDoesNotExist](err) {
		t.Errorf("describe unknown = %v, want ExecutionDoesNotExist", err)
	}
	if n := len(f.Starts()); n != 4 {
		t.Errorf("recorded starts = %d, want 4", n)
	}
}

// As on AWS, a start through a version or alias ARN names its execution under the state machine
// itself; ListExecutions of the state machine lists it, and so does one of the version or alias it
// was started through, but not another's.
func TestSFNVersionAndAliasExecutions(t *testing.T) {
	const sm = "arn:aws:states:us-east-1:123456789012:stateMachine:work"
	ctx := context.Background()
	f := fakes.NewSFN(nil)
	out, err := f.StartExecution(ctx, &sfn.StartExecutionInput{StateMachineArn: aws.String(sm + ":prod"), Name: aws.String("job-1"), Input: aws.String("{}")})
	if err != nil {
		t.Fatalf("StartExecution(alias) error: %v", err)
	}
	if got, want := aws.ToString(out.ExecutionArn), "arn:aws:states:us-east-1:123456789012:execution:work:job-1"; got != want {
		t.Errorf("StartExecution(alias) ARN = %q, want %q", got, want)
	}
	d, err := f.DescribeExecution(ctx, &sfn.DescribeExecutionInput{ExecutionArn: out.ExecutionArn})
	if err != nil || aws.ToString(d.StateMachineArn) != sm {
		t.Errorf("DescribeExecution = %v, %v; want state machine %s", d, err, sm)
	}
	for _, tt := range []struct {
		of   string
		want int
	}{{sm, 1}, {sm + ":prod", 1}, {sm + ":3", 0}} {
		l, err := f.ListExecutions(ctx, &sfn.ListExecutionsInput{StateMachineArn: aws.String(tt.of)})
		if err != nil {
			t.Fatal(err)
		}
		if len(l.Executions) != tt.want {
			t.Errorf("ListExecutions(%s) = %d executions, want %d", tt.of, len(l.Executions), tt.want)
		}
	}
}

func TestSQSRecordsCallsAndErrors(t *testing.T) {
	q := &fakes.SQS{}
	ctx := context.Background()
	q.OnChangeVisibility = func(*sqs.ChangeMessageVisibilityInput) error {
		return fakes.APIError("MessageNotInflight", "not in flight")
	}
	_, err := q.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String("q"), ReceiptHandle: aws.String("h"), VisibilityTimeout: 7})
	var ae smithy.APIError
	if !errors.As(err, &ae) || ae.ErrorCode() != "MessageNotInflight" {
		t.Errorf("ChangeMessageVisibility() = %v, want MessageNotInflight", err)
	}
	if _, err := q.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String("q"), ReceiptHandle: aws.String("h")}); err != nil {
		t.Fatal(err)
	}
	if _, err := q.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String("d"), MessageBody: aws.String("{}")}); err != nil {
		t.Fatal(err)
	}
	v := q.VisibilityChanges()
	if len(v) != 1 || v[0].Timeout != 7 || v[0].Err == nil {
		t.Errorf("VisibilityChanges() = %+v, want one failed change to 7 s", v)
	}
	if d := q.Deletes(); len(d) != 1 || d[0].ReceiptHandle != "h" {
		t.Errorf("Deletes() = %+v", d)
	}
	if s := q.Sent("d"); len(s) != 1 || s[0].Body != "{}" {
		t.Errorf("Sent(d) = %+v", s)
	}
	if q.Calls() != 3 {
		t.Errorf("Calls() = %d, want 3", q.Calls())
	}
}

func isErr[T error](err error) bool {
	var t T
	return errors.As(err, &t)
}
