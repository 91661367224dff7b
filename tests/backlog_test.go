package tests

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sfnlimit/sfnlimit/internal/tools/local/stack"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// Scenario 16: the lanes queue's backlog stays bounded. SQS FIFO looks only at a queue's first
// 120,000 messages for groups to serve, so the router holds jobs back in the general queue once
// the lanes queue holds MaxLanesBacklog waiting messages (here 6) beyond its lanes' (2), sending
// them back delayed BacklogHoldSeconds. 80 jobs for 2 lanes: the lanes queue never holds much more
// than the bound (one batch of ten per reading of its depth, a bound job's copy), every job still
// runs once, with the submission time of its first send, and every invariant of the suite holds.
func TestLanesBacklogBounded(t *testing.T) {
	forBackends(t, sqsFacing, func(t *testing.T, b backend) {
		ctx := t.Context()
		const bound, jobs = 6, 80
		r := newRig(t, rigOptions{backend: b, params: map[string]string{
			"TypeLimits": "b=2", "MaxLanesBacklog": strconv.Itoa(bound), "BacklogHoldSeconds": "2",
		}})
		var (
			mu      sync.Mutex
			deepest int
		)
		watch, stop := context.WithCancel(ctx)
		defer stop()
		done := make(chan struct{})
		go func() {
			defer close(done)
			for watch.Err() == nil {
				if d, err := depth(watch, r); err == nil {
					mu.Lock()
					deepest = max(deepest, d)
					mu.Unlock()
				}
				time.Sleep(100 * time.Millisecond)
			}
		}()
		var js []job
		for i := range jobs {
			js = append(js, job{Type: "b", ID: fmt.Sprintf("b-%02d", i), Input: work{Seconds: 1}})
		}
		r.submit(ctx, js...)
		submitted := time.Now()
		out := r.settle(ctx, settleWithin)
		stop()
		<-done
		r.checkInvariants(ctx, out, nil)

		held := r.logs.count("lanes queue full; job held in the general queue")
		t.Logf("%s: lanes queue at most %d messages (bound %d); %d holds", b.name, deepest, bound, held)
		if held == 0 {
			t.Errorf("no job was held back, want the router to hold jobs once the lanes queue held %d", bound)
		}
		// Without the bound all 80 would be in the lanes queue at once. With it (6 waiting on top of
		// the 2 lanes), each router invocation's reading of the depth lets at most one batch (10)
		// past it, and the invocations that run at once may each read it before another's batch
		// lands; a bind adds its copy for a moment.
		if limit := bound + 2 + stack.PollerConcurrency*10 + 4; deepest > limit {
			t.Errorf("the lanes queue held %d messages, want at most %d (bound %d)", deepest, limit, bound)
		}
		// A held job keeps its first submission time: every one was sent before submit returned.
		for _, x := range out.xs {
			if x.Job.SubmittedAt.After(submitted.Add(time.Second)) {
				t.Errorf("job %s submittedAt %s, after its submission (%s): the hold lost it", x.Job.ID, stamp(x.Job.SubmittedAt), stamp(submitted))
			}
		}
	})
}

// depth is the lanes queue's approximate count of visible, in-flight and delayed messages.
func depth(ctx context.Context, r *rig) (int, error) {
	out, err := r.c.SQS.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: &r.lanes, AttributeNames: []sqstypes.QueueAttributeName{
		sqstypes.QueueAttributeNameApproximateNumberOfMessages, sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
		sqstypes.QueueAttributeNameApproximateNumberOfMessagesDelayed,
	}})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, v := range out.Attributes {
		k, _ := strconv.Atoi(v)
		n += k
	}
	return n, nil
}
