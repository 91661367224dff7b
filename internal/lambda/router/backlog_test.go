package router_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lane"
	"github.com/sfnlimit/sfnlimit/internal/lambda/router"
)

type fakeGauge struct {
	full  bool
	depth int
	err   error
}

func (g fakeGauge) Reserve(_ context.Context, n map[string]int) (map[string]bool, int, error) {
	if !g.full || g.err != nil {
		return nil, g.depth, g.err
	}
	held := map[string]bool{}
	for t := range n {
		held[t] = true
	}
	return held, g.depth, nil
}

// While the lanes queue is full, valid jobs go back to the general queue, delayed, each naming its
// id and submission time and grouped by key (a fair queue); bad jobs are still dead-lettered; a job
// whose hold failed is delivered again. With room, or when the depth cannot be read, jobs route.
func TestHoldWhileLanesQueueFull(t *testing.T) {
	tests := []struct {
		name      string
		gauge     fakeGauge
		failHold  map[string]bool
		wantHeld  int
		wantSent  int
		wantFails int
	}{
		{name: "full: held", gauge: fakeGauge{full: true, depth: 50001}, wantHeld: 3},
		{name: "full, one hold fails", gauge: fakeGauge{full: true, depth: 50001}, failHold: map[string]bool{"doc-1": true}, wantHeld: 3, wantFails: 1},
		{name: "room: routed", gauge: fakeGauge{depth: 10}, wantSent: 3},
		{name: "depth unknown: routed", gauge: fakeGauge{err: errors.New("throttled")}, wantSent: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev := loadEvent(t, "sqs-keyed-batch.json")
			// The third record has no id in a variant: the hold must write the one it was given.
			var sub map[string]any
			_ = json.Unmarshal([]byte(ev.Records[2].Body), &sub)
			delete(sub, "id")
			b, _ := json.Marshal(sub)
			ev.Records[2].Body = string(b)
			// The first is high priority: held, it must stay so (found in review: the hold dropped it).
			var first map[string]any
			_ = json.Unmarshal([]byte(ev.Records[0].Body), &first)
			first["priority"] = "high"
			b, _ = json.Marshal(first)
			ev.Records[0].Body = string(b)
			highID, _ := first["id"].(string)
			lanes, held, dlq := &fakeSender{}, &fakeSender{fail: tt.failHold}, &fakeDLQ{}
			r := newRouter(&fakeConfig{limits: map[string]int{"llm": 20}, strategy: map[string]string{"llm": lane.FirstFree}}, lanes, dlq, nil)
			r.Backlog, r.Hold, r.HoldFor = tt.gauge, held, 2*time.Second
			resp, err := r.Handle(context.Background(), ev)
			if err != nil {
				t.Fatal(err)
			}
			if len(resp.BatchItemFailures) != tt.wantFails {
				t.Errorf("batch item failures = %+v, want %d", resp.BatchItemFailures, tt.wantFails)
			}
			if n := len(lanes.entries()); n != tt.wantSent {
				t.Errorf("sent to the lanes queue = %d, want %d", n, tt.wantSent)
			}
			if len(dlq.sent) != 1 || dlq.sent[0].Reason != string(job.ReasonInvalidKey) {
				t.Errorf("dead letters = %+v, want the bad key refused whatever the backlog", dlq.sent)
			}
			es := held.entries()
			if len(es) != tt.wantHeld {
				t.Fatalf("held = %d entries, want %d", len(es), tt.wantHeld)
			}
			for _, e := range es {
				var s job.Submission
				if err := json.Unmarshal([]byte(aws.ToString(e.MessageBody)), &s); err != nil {
					t.Fatal(err)
				}
				if s.ID == "" || e.DelaySeconds != 2 {
					t.Errorf("held %s: id %q, delay %d; want an id and the 2 s hold", aws.ToString(e.MessageBody), s.ID, e.DelaySeconds)
				}
				if p, _ := job.ParsePriority(s.Priority); s.ID == highID && p != job.HighPriority {
					t.Errorf("held %s with priority %s, want high kept", s.ID, s.Priority)
				}
				wantGroup := s.Key
				if wantGroup == "" {
					wantGroup = s.Type
				}
				if g := aws.ToString(e.MessageGroupId); g != wantGroup {
					t.Errorf("held %s in group %q, want %q (its key, else its type)", s.ID, g, wantGroup)
				}
				at := e.MessageAttributes[router.SubmittedAtAttribute]
				if at.StringValue == nil || *at.StringValue != strconv.FormatInt(1709978400123, 10) {
					t.Errorf("held %s submittedAt attribute = %+v, want the first SentTimestamp", s.ID, at)
				}
				if by := e.MessageAttributes[router.SenderAttribute]; by.StringValue == nil || *by.StringValue != "AIDAIENQZJOLO23YVJ4VO" {
					t.Errorf("held %s sender attribute = %+v, want the producer's principal", s.ID, by)
				}
			}
		})
	}
}

// A held job delivered again keeps its first submission time, not its new SentTimestamp: the
// router's own copy (its SenderId is the router's role, Router.Self) is trusted.
func TestHeldJobKeepsItsSubmissionTime(t *testing.T) {
	ev := loadEvent(t, "sqs-keyed-batch.json")
	m := ev.Records[0]
	m.Attributes["SentTimestamp"] = "1709978999000"
	m.Attributes["SenderId"] = "AROAROUTERROLE:sfnlimit-RouterFunction-abc"
	m.MessageAttributes = map[string]events.SQSMessageAttribute{
		router.SubmittedAtAttribute: {DataType: "Number", StringValue: aws.String("1709978400123")},
	}
	lanes := &fakeSender{}
	r := newRouter(&fakeConfig{limits: map[string]int{"llm": 20}, strategy: map[string]string{"llm": lane.FirstFree}}, lanes, &fakeDLQ{}, nil)
	r.Self = "AROAROUTERROLE"
	if _, err := r.Handle(context.Background(), events.SQSEvent{Records: []events.SQSMessage{m}}); err != nil {
		t.Fatal(err)
	}
	var j job.Job
	if err := json.Unmarshal([]byte(aws.ToString(lanes.entries()[0].MessageBody)), &j); err != nil {
		t.Fatal(err)
	}
	if want := time.UnixMilli(1709978400123).UTC(); !j.SubmittedAt.Equal(want) {
		t.Errorf("submittedAt = %s, want %s", j.SubmittedAt, want)
	}
}

// A producer cannot make its job older than it is: the submission-time attribute on a message the
// router did not send (another SenderId, or no router role known) is ignored, and the job's age is
// its own SentTimestamp's, so priority ageing does not serve it before older jobs.
func TestForgedSubmissionTimeIgnored(t *testing.T) {
	for _, tt := range []struct{ name, self, sender string }{
		{"producer", "AROAROUTERROLE", "AIDAPRODUCER"},
		{"producer in a role session named like the router", "AROAROUTERROLE", "AROAPRODUCER:AROAROUTERROLE"},
		{"no router role configured", "", "AROAROUTERROLE:sfnlimit-RouterFunction-abc"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ev := loadEvent(t, "sqs-keyed-batch.json")
			m := ev.Records[0]
			m.Attributes["SentTimestamp"] = "1709978999000"
			m.Attributes["SenderId"] = tt.sender
			m.MessageAttributes = map[string]events.SQSMessageAttribute{
				router.SubmittedAtAttribute: {DataType: "Number", StringValue: aws.String("1000")},
			}
			lanes := &fakeSender{}
			r := newRouter(&fakeConfig{limits: map[string]int{"llm": 20}, strategy: map[string]string{"llm": lane.FirstFree}}, lanes, &fakeDLQ{}, nil)
			r.Self = tt.self
			if _, err := r.Handle(context.Background(), events.SQSEvent{Records: []events.SQSMessage{m}}); err != nil {
				t.Fatal(err)
			}
			var j job.Job
			if err := json.Unmarshal([]byte(aws.ToString(lanes.entries()[0].MessageBody)), &j); err != nil {
				t.Fatal(err)
			}
			if want := time.UnixMilli(1709978999000).UTC(); !j.SubmittedAt.Equal(want) {
				t.Errorf("submittedAt = %s, want the message's own SentTimestamp %s", j.SubmittedAt, want)
			}
		})
	}
}

type fakeAttrs struct {
	calls int
	depth []string // visible, not visible, delayed
	err   error
}

func (f *fakeAttrs) GetQueueAttributes(_ context.Context, in *sqs.GetQueueAttributesInput, _ ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error) {
	f.calls++
	if f.err != nil {
		return nil, f.err
	}
	return &sqs.GetQueueAttributesOutput{Attributes: map[string]string{
		"ApproximateNumberOfMessages": f.depth[0], "ApproximateNumberOfMessagesNotVisible": f.depth[1], "ApproximateNumberOfMessagesDelayed": f.depth[2],
	}}, nil
}

// The depth counts visible, in-flight and delayed messages, is read once per BacklogTTL, and counts
// what the container routed since, so concurrent batches cannot all pass one stale reading; a
// failed read lets jobs through; a bound of 0 never holds.
func TestBacklogReserve(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 11, 25, 5, 0, 0, 0, time.UTC)
	q := &fakeAttrs{depth: []string{"30", "5", "5"}}
	b := &router.Backlog{Queue: q, URL: "lanes", Max: 50, Now: func() time.Time { return now }}
	// One type throughout, routing more than ShareJobs per reading: the bound holds it.
	reserve := func(b *router.Backlog, n int) (bool, int, error) {
		held, depth, err := b.Reserve(ctx, map[string]int{"t": n})
		return !held["t"], depth, err
	}
	steps := []struct {
		n         int
		advance   time.Duration
		depth     []string
		wantOK    bool
		wantDepth int
		wantReads int
	}{
		{n: 10, wantOK: true, wantDepth: 50, wantReads: 1}, // 40 read + 10 reserved
		{n: 1, wantOK: false, wantDepth: 50, wantReads: 1}, // full on the cached reading
		{n: 1, advance: router.BacklogTTL - time.Second, depth: []string{"0", "0", "0"}, wantOK: false, wantDepth: 50, wantReads: 1},
		{n: 10, advance: 2 * time.Second, depth: []string{"0", "0", "0"}, wantOK: true, wantDepth: 10, wantReads: 2}, // fresh
		{n: 10, wantOK: true, wantDepth: 20, wantReads: 2},
	}
	for i, st := range steps {
		now = now.Add(st.advance)
		if st.depth != nil {
			q.depth = st.depth
		}
		ok, depth, err := reserve(b, st.n)
		if err != nil || ok != st.wantOK || depth != st.wantDepth || q.calls != st.wantReads {
			t.Errorf("step %d: Reserve(%d) = %v, %d, %v after %d reads; want %v, %d, nil after %d",
				i, st.n, ok, depth, err, q.calls, st.wantOK, st.wantDepth, st.wantReads)
		}
	}
	// Running jobs' messages are in the queue: the bound is Max waiting on top of the lanes.
	b.Lanes = func(context.Context) (int, error) { return 30, nil }
	now = now.Add(router.BacklogTTL)
	q.depth = []string{"20", "30", "5"} // 55: 30 running, 25 waiting
	if ok, depth, err := reserve(b, 10); !ok || depth != 65 || err != nil {
		t.Errorf("Reserve(10) at 55 with 30 lanes = %v, %d, %v; want room (bound 80)", ok, depth, err)
	}
	for _, at := range []int{65, 75} {
		if ok, _, _ := reserve(b, 10); !ok {
			t.Errorf("Reserve(10) at %d with 30 lanes = full, want room (bound 80)", at)
		}
	}
	if ok, _, _ := reserve(b, 1); ok {
		t.Error("Reserve(1) at 85 with 30 lanes = room, want full (bound 80)")
	}
	b.Lanes = func(context.Context) (int, error) { return 119000, nil }
	now = now.Add(router.BacklogTTL)
	q.depth = []string{"0", "110000", "0"}
	if ok, _, _ := reserve(b, 1); ok {
		t.Errorf("Reserve(1) at %d = room, want full: never more than HardBound", router.HardBound)
	}
	q.err = errors.New("AccessDenied")
	now = now.Add(router.BacklogTTL)
	if ok, _, err := reserve(b, 1); err == nil || !ok {
		t.Errorf("Reserve() on a failed read = %v, %v; want the jobs through, with the error", ok, err)
	}
	off := &router.Backlog{Queue: q, URL: "lanes"}
	if ok, _, err := reserve(off, 100); !ok || err != nil {
		t.Errorf("Reserve() with no bound = %v, %v; want always", ok, err)
	}
}

// sqsJob is a general-queue message of a job of type typ.
func sqsJob(typ, id string) events.SQSMessage {
	return events.SQSMessage{
		MessageId: "m-" + id, Body: `{"type":"` + typ + `","id":"` + id + `","input":{}}`,
		Attributes: map[string]string{"SentTimestamp": "1709978400123", "ApproximateReceiveCount": "1"},
	}
}

// With the bound reached by one type's flood, a batch mixing that type's jobs with another type's
// routes the other's and holds only the flooding type's, at this reading and the next ones for a
// hold while the queue stays over the bound: one type filling the backlog holds back no other.
func TestBacklogHoldsOnlyTheFloodingType(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 11, 25, 5, 0, 0, 0, time.UTC)
	q := &fakeAttrs{depth: []string{"0", "0", "0"}}
	lanes, held := &fakeSender{}, &fakeSender{}
	r := newRouter(&fakeConfig{limits: map[string]int{"flood": 2, "quiet": 2}}, lanes, &fakeDLQ{}, nil)
	r.Backlog, r.Hold = &router.Backlog{Queue: q, URL: "lanes", Max: 20, Now: func() time.Time { return now }}, held
	n := 0
	batch := func(types ...string) events.SQSEvent {
		var ev events.SQSEvent
		for _, typ := range types {
			n++
			ev.Records = append(ev.Records, sqsJob(typ, typ+"-"+strconv.Itoa(n)))
		}
		return ev
	}
	count := func(es []types.SendMessageBatchRequestEntry, typ string) int {
		c := 0
		for _, e := range es {
			var s job.Submission
			if err := json.Unmarshal([]byte(aws.ToString(e.MessageBody)), &s); err == nil && s.Type == typ {
				c++
			}
		}
		return c
	}
	for range 3 { // the flood: 20 fill the bound, the third ten are held
		if _, err := r.Handle(ctx, batch(slices.Repeat([]string{"flood"}, 10)...)); err != nil {
			t.Fatal(err)
		}
	}
	if got, h := count(lanes.entries(), "flood"), count(held.entries(), "flood"); got != 20 || h != 10 {
		t.Fatalf("flood: %d routed, %d held; want 20 routed to the bound, 10 held", got, h)
	}
	for i, reading := range []string{"", "25"} {
		if reading != "" { // the next reading: still over the bound
			now = now.Add(router.BacklogTTL)
			q.depth = []string{reading, "0", "0"}
		}
		if _, err := r.Handle(ctx, batch("flood", "quiet", "flood", "quiet", "flood")); err != nil {
			t.Fatal(err)
		}
		if got := count(lanes.entries(), "quiet"); got != 2*(i+1) {
			t.Errorf("reading %d: %d quiet jobs routed, want %d: the flood holds back only its own type", i, got, 2*(i+1))
		}
		if got, h := count(lanes.entries(), "flood"), count(held.entries(), "flood"); got != 20 || h != 13+3*i {
			t.Errorf("reading %d: flood %d routed, %d held; want 20 routed, %d held", i, got, h, 13+3*i)
		}
	}
	// HoldFor later, the queue still over the bound (the quiet type's jobs, say), the flooding
	// type gets its share again: its own jobs may have drained, its lanes gone idle.
	now = now.Add(router.DefaultHoldFor)
	if _, err := r.Handle(ctx, batch("flood", "flood", "flood")); err != nil {
		t.Fatal(err)
	}
	if got := count(lanes.entries(), "flood"); got != 23 {
		t.Errorf("a hold later: %d flood jobs routed, want 23", got)
	}
	// At HardBound every type waits.
	now = now.Add(router.BacklogTTL)
	q.depth = []string{strconv.Itoa(router.HardBound), "0", "0"}
	if _, err := r.Handle(ctx, batch("quiet")); err != nil {
		t.Fatal(err)
	}
	if got := count(lanes.entries(), "quiet"); got != 4 {
		t.Errorf("at HardBound: %d quiet jobs routed, want none more than the 4 before", got)
	}
	// A reading under the bound ends the flood: its type routes again.
	now = now.Add(router.BacklogTTL)
	q.depth = []string{"0", "0", "0"}
	if _, err := r.Handle(ctx, batch("flood")); err != nil {
		t.Fatal(err)
	}
	if got := count(lanes.entries(), "flood"); got != 24 {
		t.Errorf("after the flood drained: %d flood jobs routed, want 24", got)
	}
}
