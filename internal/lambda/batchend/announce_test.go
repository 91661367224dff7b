package batchend_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/eventbridge"

	"github.com/sfnlimit/sfnlimit/internal/lambda/batch"
	"github.com/sfnlimit/sfnlimit/internal/lambda/batchend"
	"github.com/sfnlimit/sfnlimit/internal/tools/fakes"
)

// publisher counts PutEvents calls; hold, when set, is called inside each call (before it answers)
// with the call's number, from 1.
type publisher struct {
	mu    sync.Mutex
	calls int
	fail  int // the first fail calls fail
	hold  func(n int)
}

func (p *publisher) PutEvents(_ context.Context, _ *eventbridge.PutEventsInput, _ ...func(*eventbridge.Options)) (*eventbridge.PutEventsOutput, error) {
	p.mu.Lock()
	p.calls++
	n, fail, hold := p.calls, p.calls <= p.fail, p.hold
	p.mu.Unlock()
	if hold != nil {
		hold(n)
	}
	if fail {
		return nil, errors.New("InternalException: injected")
	}
	return &eventbridge.PutEventsOutput{}, nil
}

func (p *publisher) sent() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls - min(p.calls, p.fail)
}

func newTracker(t *testing.T, p *publisher) *batchend.Tracker {
	t.Helper()
	tr, _ := newTrackerLedger(t, p)
	return tr
}

func newTrackerLedger(t *testing.T, p *publisher) (*batchend.Tracker, *batch.Ledger) {
	t.Helper()
	l := batch.New(fakes.NewDynamoDB("t"), "t")
	tr := batchend.New(l, p, "stack", fakes.Logger(t))
	tr.AnnounceWait = 300 * time.Millisecond
	if err := l.Open(t.Context(), "b", 1, time.Now()); err != nil {
		t.Fatal(err)
	}
	return tr, l
}

var closer = batchend.End{Batch: "b", Type: "x", ID: "j1", Outcome: batch.Succeeded}

// Two ends of the batch's closing job at once (a status event and the sweep releasing the same
// execution, or a batch delivered twice) send one completion event, not two: the end-to-end
// scenario TestBatchUnderFaults met two events 1.4 s apart, because the ledger answers the
// closer's every record "closed" until the batch is announced, and both sent. The second end
// waits for the first one's announcement, and when it does not come in time fails, to be retried.
func TestConcurrentClosersSendOneEvent(t *testing.T) {
	p := &publisher{}
	tr := newTracker(t, p)
	secondDone := make(chan error, 1)
	p.hold = func(n int) {
		if n == 1 {
			// The first closer is sending; the second end of the same job comes now.
			go func() { secondDone <- tr.Ended(context.Background(), closer) }()
			select {
			case err := <-secondDone:
				secondDone <- err
			case <-time.After(2 * time.Second):
			}
		}
	}
	if err := tr.Ended(t.Context(), closer); err != nil {
		t.Fatalf("first Ended() = %v", err)
	}
	if err := <-secondDone; err == nil {
		t.Logf("second Ended() waited for the announcement and returned nil")
	} else {
		t.Logf("second Ended() = %v (retried later)", err)
	}
	// A retry of the second, after the first announced, is a duplicate.
	if err := tr.Ended(t.Context(), closer); err != nil {
		t.Errorf("Ended() after the announcement = %v", err)
	}
	if p.sent() != 1 {
		t.Errorf("%d completion events sent, want 1", p.sent())
	}
}

// A closer whose PutEvents failed gives its claim back: its own retry sends the event at once,
// not after the claim expires.
func TestFailedAnnouncementIsRetriedAtOnce(t *testing.T) {
	p := &publisher{fail: 1}
	tr := newTracker(t, p)
	if err := tr.Ended(t.Context(), closer); err == nil {
		t.Fatal("Ended() with PutEvents failing = nil, want the error")
	}
	if err := tr.Ended(t.Context(), closer); err != nil {
		t.Fatalf("retried Ended() = %v, want the event sent", err)
	}
	if err := tr.Ended(t.Context(), closer); err != nil {
		t.Fatalf("Ended() after the announcement = %v", err)
	}
	if p.sent() != 1 {
		t.Errorf("%d completion events sent, want 1", p.sent())
	}
}

// A claim whose holder crashed (it never announced nor gave the claim back) expires: the closing
// job's next end sends the event then, not before.
func TestCrashedClaimExpires(t *testing.T) {
	p := &publisher{}
	tr, l := newTrackerLedger(t, p)
	now := time.Now()
	tr.Now = func() time.Time { return now }
	if _, err := l.Record(t.Context(), "b", "x/j1", 0, batch.Succeeded, now); err != nil {
		t.Fatal(err)
	}
	if ok, err := l.ClaimAnnouncement(t.Context(), "b", "crashed", now, 30*time.Second); !ok || err != nil {
		t.Fatalf("ClaimAnnouncement() = %v, %v", ok, err)
	}
	if err := tr.Ended(t.Context(), closer); !errors.Is(err, batch.ErrAnnouncing) {
		t.Errorf("Ended() while the crashed claim runs = %v, want ErrAnnouncing", err)
	}
	now = now.Add(31 * time.Second)
	if err := tr.Ended(t.Context(), closer); err != nil {
		t.Errorf("Ended() after the claim expired = %v", err)
	}
	if p.sent() != 1 {
		t.Errorf("%d completion events sent, want 1", p.sent())
	}
}

// flakyAnnounce is the ledger with its first failAnnounced Announced calls failing, as a
// throttled or failed DynamoDB write does after the SDK's own retries.
type flakyAnnounce struct {
	*batch.Ledger
	mu             sync.Mutex
	failAnnounced  int
	announcedCalls int
}

func (f *flakyAnnounce) Announced(ctx context.Context, id string) error {
	f.mu.Lock()
	f.announcedCalls++
	fail := f.announcedCalls <= f.failAnnounced
	f.mu.Unlock()
	if fail {
		return errors.New("ProvisionedThroughputExceededException: injected")
	}
	return f.Ledger.Announced(ctx, id)
}

// The completion event went out, and marking the batch announced failed for a moment: that write
// is tried again where it failed, so the closing job's next end (its retry once the claim has
// expired) finds the batch announced and sends nothing. Without it, the event went out twice
// with no crash at all.
func TestAnnouncementMarkedAfterATransientFailure(t *testing.T) {
	p := &publisher{}
	_, l := newTrackerLedger(t, p)
	flaky := &flakyAnnounce{Ledger: l, failAnnounced: 2}
	tr := batchend.New(flaky, p, "stack", fakes.Logger(t))
	now := time.Now()
	tr.Now = func() time.Time { return now }
	err := tr.Ended(t.Context(), closer)
	if err != nil {
		t.Logf("Ended() = %v (retried later)", err)
	}
	now = now.Add(31 * time.Second) // any claim has expired: a retry may send again
	if err := tr.Ended(t.Context(), closer); err != nil {
		t.Fatalf("Ended() again = %v", err)
	}
	if p.sent() != 1 {
		t.Errorf("%d completion events sent, want 1", p.sent())
	}
	sum, _, err := l.Show(t.Context(), "b", false)
	if err != nil || !sum.Announced {
		t.Errorf("batch announced = %v (%v), want true", sum.Announced, err)
	}
}

// A closer whose PutEvents failed leaves its batch on the pending list (ErrAnnouncementPending):
// the sweep sends the event once the closer has had SweepMinAge to do it, once, and the batch leaves
// the list.
func TestPendingBatchAnnouncedBySweep(t *testing.T) {
	p := &publisher{fail: 1}
	tr, l := newTrackerLedger(t, p)
	now := time.Now()
	tr.Now = func() time.Time { return now }
	if err := tr.Ended(t.Context(), closer); !errors.Is(err, batchend.ErrAnnouncementPending) {
		t.Fatalf("Ended() with PutEvents failing = %v, want ErrAnnouncementPending", err)
	}
	if n, err := tr.AnnouncePending(t.Context(), time.Minute); n != 0 || err != nil {
		t.Errorf("AnnouncePending() at once = %d, %v; want the closer given a minute", n, err)
	}
	now = now.Add(61 * time.Second)
	if n, err := tr.AnnouncePending(t.Context(), time.Minute); n != 1 || err != nil {
		t.Fatalf("AnnouncePending() = %d, %v; want the event sent", n, err)
	}
	if n, err := tr.AnnouncePending(t.Context(), time.Minute); n != 0 || err != nil {
		t.Errorf("AnnouncePending() again = %d, %v; want nothing left", n, err)
	}
	if err := tr.Ended(t.Context(), closer); err != nil {
		t.Errorf("the closer's retry after the sweep = %v", err)
	}
	if p.sent() != 1 {
		t.Errorf("%d completion events sent, want 1", p.sent())
	}
	if ids, err := l.Pending(t.Context(), now.Add(time.Hour)); len(ids) != 0 || err != nil {
		t.Errorf("Pending() = %v, %v; want none", ids, err)
	}
}
