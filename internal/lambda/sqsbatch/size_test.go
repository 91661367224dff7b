package sqsbatch_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/sfnlimit/sfnlimit/internal/lambda/sqsbatch"
)

// bigEntries are n entries whose bodies are size bytes each, like jobs near Step Functions' 256 KiB
// input limit.
func bigEntries(n, size int) []types.SendMessageBatchRequestEntry {
	out := entries(n)
	for i := range out {
		out[i].MessageBody = aws.String(strings.Repeat("x", size))
	}
	return out
}

// SQS refuses a whole SendMessageBatch whose messages add up to more than 1 MiB: ten jobs of about
// 256 KiB each must go in several requests, and none may fail.
func TestSendSplitsByBytes(t *testing.T) {
	const limit = 1 << 20 // SQS's total since August 2025
	tests := []struct {
		name      string
		n, size   int
		wantCalls []int // entries per call
	}{
		{name: "ten of 250 KiB", n: 10, size: 250 * 1024, wantCalls: []int{4, 4, 2}},
		{name: "ten of 256 KiB", n: 10, size: 256 * 1024, wantCalls: []int{3, 3, 3, 1}},
		{name: "three of 400 KiB", n: 3, size: 400 * 1024, wantCalls: []int{2, 1}},
		{name: "ten of 100 KiB fit one call", n: 10, size: 100 * 1024, wantCalls: []int{10}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := &fakeSQS{maxBatchBytes: limit}
			s := sqsbatch.NewSender(fake, queueURL)
			sl := &sleeps{}
			s.Sleep = sl.Sleep
			failed, err := s.Send(context.Background(), bigEntries(tt.n, tt.size))
			if err != nil || len(failed) != 0 {
				t.Fatalf("Send() = %v, %v, want no failures", failed, err)
			}
			var sizes []int
			var sent []string
			for _, c := range fake.calls {
				sizes = append(sizes, len(c))
				sent = append(sent, c...)
			}
			if !slices.Equal(sizes, tt.wantCalls) {
				t.Errorf("calls of %v entries, want %v", sizes, tt.wantCalls)
			}
			if !slices.Equal(sent, ids(0, tt.n)) || len(fake.singles) != 0 {
				t.Errorf("sent %v in batches and %v alone, want each entry once in order, in batches", sent, fake.singles)
			}
			checkNoLossNoDouble(t, tt.n, fake, failed)
		})
	}
}

// A batch SQS refuses as too long (a region or queue with a lower limit than the sender counts
// with) is sent again one message at a time: every entry, in order, none failed, no back-off.
func TestSendFallsBackToSingleSends(t *testing.T) {
	fake := &fakeSQS{maxBatchBytes: 256 * 1024} // the limit before August 2025
	s := sqsbatch.NewSender(fake, queueURL)
	sl := &sleeps{}
	s.Sleep = sl.Sleep
	failed, err := s.Send(context.Background(), bigEntries(7, 200*1024))
	if err != nil || len(failed) != 0 {
		t.Fatalf("Send() = %v, %v, want no failures", failed, err)
	}
	if !slices.Equal(fake.singles, ids(0, 7)) {
		t.Errorf("sent alone %v, want %v", fake.singles, ids(0, 7))
	}
	if len(sl.d) != 0 {
		t.Errorf("slept %v before sending alone, want no back-off (the same batch would fail again)", sl.d)
	}
	checkNoLossNoDouble(t, 7, fake, failed)
}

// Sent alone, an entry SQS refuses fails by itself, with SQS's code; one that fails for SQS's own
// reasons is retried; its neighbours are sent.
func TestSingleSendFailures(t *testing.T) {
	tooBig := &smithy.GenericAPIError{Code: "InvalidParameterValue", Message: "One or more parameters are invalid. Reason: Message must be shorter than 262144 bytes.", Fault: smithy.FaultClient}
	fake := &fakeSQS{maxBatchBytes: 256 * 1024, singleErr: func(try int, id string) error {
		switch {
		case id == "1":
			return tooBig
		case id == "2" && try == 0:
			return errors.New("connection reset")
		}
		return nil
	}}
	s := sqsbatch.NewSender(fake, queueURL)
	sl := &sleeps{}
	s.Sleep = sl.Sleep
	failed, err := s.Send(context.Background(), bigEntries(4, 200*1024))
	if err != nil {
		t.Fatalf("Send() error = %v", err)
	}
	if len(failed) != 1 || failed[0].ID != "1" || failed[0].Code != "InvalidParameterValue" || !strings.Contains(failed[0].Message, "shorter than") {
		t.Errorf("failed = %+v, want entry 1 alone with InvalidParameterValue", failed)
	}
	if want := []string{"0", "1", "2", "2", "3"}; !slices.Equal(fake.singles, want) {
		t.Errorf("sent alone %v, want %v (entry 1 not retried, entry 2 retried)", fake.singles, want)
	}
	checkNoLossNoDouble(t, 4, fake, failed)
}

func TestSize(t *testing.T) {
	entry := func(body string) types.SendMessageBatchRequestEntry {
		return types.SendMessageBatchRequestEntry{Id: aws.String("0"), MessageBody: aws.String(body)}
	}
	withAttrs := entry("hello")
	withAttrs.MessageAttributes = map[string]types.MessageAttributeValue{
		"reason": {DataType: aws.String("String"), StringValue: aws.String("unknown_type")},
		"blob":   {DataType: aws.String("Binary"), BinaryValue: []byte{1, 2, 3}},
	}
	withSystem := entry("hello")
	withSystem.MessageSystemAttributes = map[string]types.MessageSystemAttributeValue{
		"AWSTraceHeader": {DataType: aws.String("String"), StringValue: aws.String("Root=1-abc")},
	}
	fifo := entry("hello")
	fifo.MessageGroupId = aws.String("payments-3")
	fifo.MessageDeduplicationId = aws.String("payments-job-7")
	tests := []struct {
		name string
		give types.SendMessageBatchRequestEntry
		want int
	}{
		{name: "body and entry id", give: entry("hello"), want: 5 + 1},
		{name: "body counts bytes, not characters", give: entry("héllo"), want: 6 + 1},
		{name: "message attributes: name, type and value", give: withAttrs, want: 5 + 1 + len("reason") + len("String") + len("unknown_type") + len("blob") + len("Binary") + 3},
		{name: "system attributes too", give: withSystem, want: 5 + 1 + len("AWSTraceHeader") + len("String") + len("Root=1-abc")},
		{name: "group and deduplication ids", give: fifo, want: 5 + 1 + len("payments-3") + len("payments-job-7")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := sqsbatch.Size(tt.give); got != tt.want {
				t.Errorf("Size() = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestSplit(t *testing.T) {
	// sized makes entries whose Size is exactly each of sizes (the one-digit entry id counts 1).
	sized := func(sizes ...int) []types.SendMessageBatchRequestEntry {
		out := make([]types.SendMessageBatchRequestEntry, len(sizes))
		for i, n := range sizes {
			out[i] = types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i % 10)), MessageBody: aws.String(strings.Repeat("x", n-1))}
		}
		return out
	}
	const budget = 1000
	tests := []struct {
		name string
		give []types.SendMessageBatchRequestEntry
		want []int // entries per batch
	}{
		{name: "none", give: nil, want: nil},
		{name: "one", give: sized(10), want: []int{1}},
		{name: "exactly the budget", give: sized(500, 500), want: []int{2}},
		{name: "one byte over", give: sized(500, 501), want: []int{1, 1}},
		{name: "fills up, then starts anew", give: sized(400, 400, 201, 400), want: []int{2, 2}},
		{name: "an entry over the budget goes alone", give: sized(10, 1001, 10), want: []int{1, 1, 1}},
		{name: "ten at most", give: sized(1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1), want: []int{10, 2}},
		{name: "budget and count together", give: sized(100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 950, 60), want: []int{10, 1, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := sqsbatch.Split(tt.give, budget)
			var sizes []int
			var flat []types.SendMessageBatchRequestEntry
			for _, b := range got {
				sizes = append(sizes, len(b))
				flat = append(flat, b...)
				total := 0
				for _, e := range b {
					total += sqsbatch.Size(e)
				}
				if len(b) > 1 && total > budget {
					t.Errorf("a batch of %d entries holds %d bytes, over %d", len(b), total, budget)
				}
			}
			if !slices.Equal(sizes, tt.want) {
				t.Errorf("Split() sizes = %v, want %v", sizes, tt.want)
			}
			if len(flat) != len(tt.give) {
				t.Fatalf("Split() kept %d entries of %d", len(flat), len(tt.give))
			}
			for i := range flat {
				if flat[i].MessageBody != tt.give[i].MessageBody {
					t.Errorf("Split() moved entry %d", i)
				}
			}
		})
	}
}

// A context cancelled while the entries of a refused batch go one at a time: the entries not sent
// are reported as Cancelled, with the error; none is lost or sent twice.
func TestSingleSendsCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fake := &fakeSQS{maxBatchBytes: 256 * 1024, singleErr: func(try int, id string) error {
		if id == "1" {
			cancel()
			return context.Canceled
		}
		return nil
	}}
	s := sqsbatch.NewSender(fake, queueURL)
	s.Sleep = (&sleeps{}).Sleep
	failed, err := s.Send(ctx, bigEntries(4, 200*1024))
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Send() error = %v, want context.Canceled", err)
	}
	if got := failureIDs(failed); !slices.Equal(got, []string{"1", "2", "3"}) {
		t.Errorf("failed %v, want 1, 2 and 3", got)
	}
	for _, f := range failed[1:] {
		if f.Code != "Cancelled" {
			t.Errorf("entry %s failed with %s, want Cancelled", f.ID, f.Code)
		}
	}
	if !slices.Equal(fake.singles, []string{"0", "1"}) {
		t.Errorf("sent alone %v, want 0 and 1", fake.singles)
	}
	checkNoLossNoDouble(t, 4, fake, failed)
}
