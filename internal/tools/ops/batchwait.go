package ops

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	ledger "github.com/sfnlimit/sfnlimit/internal/lambda/batch"
)

// ErrWaitTimeout: the batch did not close within the time given; it goes on without the waiter.
var ErrWaitTimeout = errors.New("stopped waiting")

// BatchFailedError is a batch that closed with jobs dead-lettered or refused.
type BatchFailedError struct {
	Batch  string
	Failed int
	Of     int
}

func (e BatchFailedError) Error() string {
	return fmt.Sprintf("batch %s closed with %d of %d jobs dead-lettered or refused", e.Batch, e.Failed, e.Of)
}

// Defaults of a BatchWaiter.
const (
	// DefaultWaitEvery is how often a waiter reads the batch.
	DefaultWaitEvery = time.Second
	// DefaultOpenGrace is how long a waiter waits for a batch to be opened: a batch whose jobs carry
	// batchSize is opened by the router when it takes the first of them, seconds after they are sent.
	DefaultOpenGrace = time.Minute
	// DefaultAnnounceGrace is how long a waiter reads a closed batch for its completion event to be
	// marked sent: the closing job's handler sends it right after the close.
	DefaultAnnounceGrace = 5 * time.Second
	// finalReadTimeout bounds the read of a batch never seen open, at the end of a wait's timeout.
	finalReadTimeout = 10 * time.Second
)

// BatchWaiter waits for a batch to close, reading its ledger.
type BatchWaiter struct {
	Ledger BatchLedger
	// Every is how often the batch is read (DefaultWaitEvery when 0).
	Every time.Duration
	// OpenGrace is how long a batch not open yet is waited for (DefaultOpenGrace when 0).
	OpenGrace time.Duration
	// AnnounceGrace is how long a closed batch is read again until its completion event is marked
	// sent (DefaultAnnounceGrace when 0).
	AnnounceGrace time.Duration
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

func (bw BatchWaiter) now() time.Time {
	if bw.Now != nil {
		return bw.Now()
	}
	return time.Now()
}

// Wait reads batch id every bw.Every until it closes (and, for up to AnnounceGrace more, until its
// completion event is marked sent), calling progress (if not nil) with each
// reading (open false while the batch is not open yet). It returns the closed batch's view, or,
// after timeout (none when 0), the last one read with an error wrapping ErrWaitTimeout. A batch not
// open after OpenGrace is an error wrapping batch.ErrNotOpen; so is one not open when timeout
// passes (a NoBatchError, as ShowBatch's).
func (bw BatchWaiter) Wait(ctx context.Context, id string, timeout time.Duration, progress func(v BatchView, open bool)) (BatchView, error) {
	if err := ValidateBatchArg(id); err != nil {
		return BatchView{}, err
	}
	every, grace, announce := bw.Every, bw.OpenGrace, bw.AnnounceGrace
	if every <= 0 {
		every = DefaultWaitEvery
	}
	if grace <= 0 {
		grace = DefaultOpenGrace
	}
	if announce <= 0 {
		announce = DefaultAnnounceGrace
	}
	parent := ctx
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	began := bw.now()
	tick := time.NewTicker(every)
	defer tick.Stop()
	var (
		last     BatchView
		closedAt time.Time // when this waiter first saw the batch closed
	)
	for {
		v, open, err := bw.read(ctx, id)
		switch {
		case ctx.Err() != nil:
			return bw.stopped(parent, id, timeout, last)
		case err != nil:
			return last, err
		case !open && bw.now().Sub(began) >= grace:
			return last, fmt.Errorf("batch %s does not exist: it was not opened within %s: check its name, open it (sfnlimit batch open %s --size N), or give its jobs batchSize: %w",
				id, grace, id, ledger.ErrNotOpen)
		}
		if open {
			last = v
		}
		if progress != nil && closedAt.IsZero() { // a closed batch is shown once
			progress(v, open)
		}
		if open && v.State == "closed" {
			if closedAt.IsZero() {
				closedAt = bw.now()
			}
			if v.Announced || bw.now().Sub(closedAt) >= announce {
				return v, nil
			}
		}
		select {
		case <-ctx.Done():
			return bw.stopped(parent, id, timeout, last)
		case <-tick.C:
		}
	}
}

// read reads the batch; open is false while it is not open.
func (bw BatchWaiter) read(ctx context.Context, id string) (BatchView, bool, error) {
	sum, _, err := bw.Ledger.Show(ctx, id, false)
	if errors.Is(err, ledger.ErrNotOpen) {
		return BatchView{Batch: id}, false, nil
	}
	if err != nil {
		return BatchView{}, false, fmt.Errorf("read batch %s: %w", id, err)
	}
	return BatchViewOf(sum, bw.now()), true, nil
}

// stopped ends a wait cut short: by its timeout, or by its caller. A batch seen closed (its
// completion event not yet marked sent) is no error.
func (bw BatchWaiter) stopped(parent context.Context, id string, timeout time.Duration, last BatchView) (BatchView, error) {
	if last.State == "closed" {
		return last, nil
	}
	if parent.Err() != nil {
		return last, fmt.Errorf("stopped waiting for batch %s: %w", id, parent.Err())
	}
	if last.Batch == "" {
		// Never seen open: read it once more at the end of the wait. A batch that does not exist
		// then is said not to, as batch show says it (exit 1): reported as a timeout ("it goes
		// on", exit 4), a misspelt name would be waited for again and again.
		rctx, cancel := context.WithTimeout(parent, finalReadTimeout)
		v, open, err := bw.read(rctx, id)
		cancel()
		switch {
		case err != nil:
			return last, err
		case !open:
			return last, NoBatchError{Batch: id}
		}
		last = v
		if last.State == "closed" {
			return last, nil
		}
	}
	where := fmt.Sprintf("%d of %d jobs recorded", last.Recorded, last.Expected)
	return last, fmt.Errorf("batch %s did not close within %s (%s); it goes on without us: \"sfnlimit batch wait %s\" waits again: %w",
		id, timeout, where, id, ErrWaitTimeout)
}

// WaitResult is the error a finished wait ends with: a BatchFailedError when the closed batch has
// jobs dead-lettered or refused, nil when every job succeeded, was cancelled (stopped by a newer
// job of its key: the overflow rule cancel) or skipped (ended without running: the overflow rule
// skip); neither is a failure.
func WaitResult(v BatchView) error {
	if v.State == "closed" && v.Failed > 0 {
		return BatchFailedError{Batch: v.Batch, Failed: v.Failed, Of: v.Expected}
	}
	return nil
}

// BatchProgress shows a waited batch's progress: one line redrawn in place on a terminal, else a
// plain line at most every Every (and at the first reading).
type BatchProgress struct {
	W   io.Writer
	TTY bool
	// Every is how often a plain line is written (10 s when 0).
	Every time.Duration
	// Now is the clock (time.Now when nil).
	Now func() time.Time

	last  time.Time
	drawn bool
}

// Update shows one reading of the batch (BatchWaiter.Wait's progress).
func (p *BatchProgress) Update(v BatchView, open bool) {
	now := time.Now()
	if p.Now != nil {
		now = p.Now()
	}
	every := p.Every
	if every <= 0 {
		every = 10 * time.Second
	}
	line := progressLine(v, open)
	if p.TTY {
		fmt.Fprintf(p.W, "\r\033[K%s", line)
		p.drawn = true
		return
	}
	if !p.last.IsZero() && now.Sub(p.last) < every && v.State != "closed" {
		return
	}
	p.last = now
	fmt.Fprintln(p.W, line)
}

// Done ends the line drawn on a terminal.
func (p *BatchProgress) Done() {
	if p.TTY && p.drawn {
		fmt.Fprintln(p.W)
		p.drawn = false
	}
}

const barWidth = 30

func progressLine(v BatchView, open bool) string {
	if !open {
		return fmt.Sprintf("batch %s: not open yet (its first job with batchSize opens it)", v.Batch)
	}
	filled := 0
	if v.Expected > 0 {
		filled = min(barWidth*v.Recorded/v.Expected, barWidth)
	}
	bar := strings.Repeat("#", filled) + strings.Repeat(".", barWidth-filled)
	// cancelled (stopped by a newer job of their key) and skipped (ended without running behind an
	// older job of their key and sender) only once some are: most types have no overflow rule.
	cancelled := ""
	for _, o := range []ledger.Outcome{ledger.Cancelled, ledger.Skipped} {
		if n := v.Counts[string(o)]; n > 0 {
			cancelled += fmt.Sprintf(", %d %s", n, o)
		}
	}
	return fmt.Sprintf("batch %s [%s] %d/%d (%s%%) %d succeeded, %d dead_lettered, %d refused%s, %s %s",
		v.Batch, bar, v.Recorded, v.Expected, trimPercent(v.Percent),
		v.Counts[string(ledger.Succeeded)], v.Counts[string(ledger.DeadLettered)], v.Counts[string(ledger.Refused)], cancelled,
		v.State, duration(v.Seconds))
}
