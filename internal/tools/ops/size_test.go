package ops

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/sfnlimit/sfnlimit/internal/lambda/deadletter"
)

// Jobs near Step Functions' 256 KiB input limit: ten of them are 2.5 MiB, more than one
// SendMessageBatch may hold (1 MiB in all, enforced by the local stack's gateway as by SQS).

func bigBody(i int) string {
	return fmt.Sprintf(`{"type":"payments","id":"big-%d","input":{"data":%q},"redrive":1}`, i, strings.Repeat("x", 250*1024))
}

func bigBodies(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = bigBody(i)
	}
	sort.Strings(out)
	return out
}

// dlq redrive moves every one of them, none left behind as a failed send.
func TestDLQRedriveJobsNearTheInputLimit(t *testing.T) {
	t.Parallel()
	c := sqsClient(t)
	url, general := queues(t, c)
	want := bigBodies(10)
	for i, b := range want {
		deadLetter(t, c, url, deadletter.Entry{Reason: deadletter.ReasonAttemptsExhausted, Source: "releaser", Type: "payments", JobID: fmt.Sprint("big-", i), Attempt: 3, Body: b})
	}
	res, err := DLQ{SQS: c, URL: url, General: general}.Redrive(t.Context(), Filter{}, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Redriven != 10 || len(res.SendFailed)+len(res.DeleteFailed)+len(res.Refused) != 0 {
		t.Errorf("Redrive() = redriven %d, send failed %d (first: %+v), want 10 redriven and no failure", res.Redriven, len(res.SendFailed), first(res.SendFailed))
	}
	if got := drain(t, c, general); !slices.Equal(got, want) {
		t.Errorf("general queue holds %d bodies, want the 10 redriven unchanged", len(got))
	}
	if got := drain(t, c, url); len(got) != 0 {
		t.Errorf("dead-letter queue still holds %d", len(got))
	}
}

// submit sends every one of them.
func TestSubmitJobsNearTheInputLimit(t *testing.T) {
	t.Parallel()
	c := sqsClient(t)
	_, general := queues(t, c)
	want := bigBodies(10)
	var lines []Line
	for i, b := range want {
		lines = append(lines, Line{No: i + 1, Body: []byte(b), Type: "payments", ID: fmt.Sprint("big-", i)})
	}
	res := Submitter{SQS: c, QueueURL: general}.Send(t.Context(), lines, nil)
	if res.Sent != 10 || len(res.Failed) != 0 {
		t.Errorf("Send() = sent %d, failed %+v, want 10 sent", res.Sent, res.Failed)
	}
	if got := drain(t, c, general); !slices.Equal(got, want) {
		t.Errorf("general queue holds %d bodies, want the 10 sent", len(got))
	}
}

func first[T any](xs []T) (x T) {
	if len(xs) > 0 {
		x = xs[0]
	}
	return x
}
