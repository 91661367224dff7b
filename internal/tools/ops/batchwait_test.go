package ops

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	ledger "github.com/sfnlimit/sfnlimit/internal/lambda/batch"
)

// scripted is a ledger whose batch moves on as it is read: before its nth read, step(n) runs.
type scripted struct {
	*ledger.Ledger
	reads int
	step  func(n int)
}

func (s *scripted) Show(ctx context.Context, id string, withJobs bool) (ledger.Summary, []ledger.Job, error) {
	s.reads++
	if s.step != nil {
		s.step(s.reads)
	}
	return s.Ledger.Show(ctx, id, withJobs)
}

// wait waits for a batch of three jobs (a/1, a/2, a/3) that ends[n-1] ends at the nth read, opened
// at read openAt (0: before the wait).
func TestBatchWait(t *testing.T) {
	tests := []struct {
		name          string
		openAt        int
		ends          []ledger.Outcome // the job each read ends, in order; fewer than 3: never closes
		announceAt    int              // the read before which the completion event is marked sent (0: never)
		timeout       time.Duration
		grace         time.Duration
		wantErr       error
		wantMsg       string
		wantState     string
		wantFail      bool // WaitResult is a BatchFailedError
		wantSeen      []int
		wantAnnounced bool
	}{
		{
			name: "read again until the completion event is sent", ends: []ledger.Outcome{ledger.Succeeded, ledger.Succeeded, ledger.Succeeded}, announceAt: 5,
			wantState: "closed", wantSeen: []int{1, 2, 3}, wantAnnounced: true,
		},
		{
			name: "every job succeeds", ends: []ledger.Outcome{ledger.Succeeded, ledger.Succeeded, ledger.Succeeded},
			wantState: "closed", wantSeen: []int{1, 2, 3},
		},
		{
			name: "one dead-lettered", ends: []ledger.Outcome{ledger.Succeeded, ledger.DeadLettered, ledger.Succeeded},
			wantState: "closed", wantFail: true, wantSeen: []int{1, 2, 3},
		},
		{
			name: "opened by its first job while waited for", openAt: 3, ends: []ledger.Outcome{"", "", ledger.Succeeded, ledger.Refused, ledger.Succeeded},
			wantState: "closed", wantFail: true, wantSeen: []int{-1, -1, 1, 2, 3},
		},
		{
			name: "timeout", ends: []ledger.Outcome{ledger.Succeeded}, timeout: 50 * time.Millisecond,
			wantErr: ErrWaitTimeout, wantMsg: "batch b did not close within 50ms (1 of 3 jobs recorded); it goes on without us: \"sfnlimit batch wait b\" waits again",
			wantState: "open",
		},
		{
			// A typo in the name: as batch show says, not "did not close... it goes on" (exit 4),
			// which a script would take for "still running" and wait again forever.
			name: "never opened by the end of the timeout", openAt: 1 << 30, timeout: 30 * time.Millisecond,
			wantErr: NoBatchError{Batch: "b"}, wantMsg: "batch b does not exist: no batch of that name was opened",
		},
		{
			name: "never opened", openAt: 1 << 30, grace: 20 * time.Millisecond,
			wantErr: ledger.ErrNotOpen, wantMsg: "batch b does not exist: it was not opened within 20ms",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			l := &scripted{Ledger: newLedger()}
			ids := []string{"a/1", "a/2", "a/3"}
			next := 0
			open := func() {
				if err := l.Ledger.Open(ctx, "b", 3, batchNow); err != nil {
					t.Fatal(err)
				}
			}
			if tt.openAt == 0 {
				open()
			}
			l.step = func(n int) {
				if n == tt.openAt {
					open()
				}
				if n <= len(tt.ends) && tt.ends[n-1] != "" {
					if _, err := l.Ledger.Record(ctx, "b", ids[next], 0, tt.ends[n-1], batchNow); err != nil {
						t.Fatal(err)
					}
					next++
				}
				if n == tt.announceAt {
					if err := l.Ledger.Announced(ctx, "b"); err != nil {
						t.Fatal(err)
					}
				}
			}
			var seen []int
			ctx, cancel := context.WithTimeout(ctx, 10*time.Second) // a wait that never ends fails here
			defer cancel()
			w := BatchWaiter{Ledger: l, Every: time.Millisecond, OpenGrace: tt.grace, AnnounceGrace: time.Millisecond}
			if tt.announceAt > 0 {
				w.AnnounceGrace = time.Minute
			}
			v, err := w.Wait(ctx, "b", tt.timeout, func(v BatchView, open bool) {
				if !open {
					seen = append(seen, -1)
					return
				}
				seen = append(seen, v.Recorded)
			})
			if !errors.Is(err, tt.wantErr) || tt.wantErr != nil && !strings.Contains(err.Error(), tt.wantMsg) {
				t.Fatalf("Wait() error = %v, want %v with %q", err, tt.wantErr, tt.wantMsg)
			}
			if v.State != tt.wantState || v.Announced != tt.wantAnnounced {
				t.Errorf("Wait() state %q, announced %v; want %q, %v", v.State, v.Announced, tt.wantState, tt.wantAnnounced)
			}
			if tt.wantSeen != nil && !equalInts(seen, tt.wantSeen) {
				t.Errorf("progress saw %v, want %v", seen, tt.wantSeen)
			}
			var failed BatchFailedError
			if got := errors.As(WaitResult(v), &failed); got != tt.wantFail {
				t.Errorf("WaitResult() = %v, want a failed batch: %v", WaitResult(v), tt.wantFail)
			}
		})
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Off a terminal, progress is a plain line at the first reading, then at most every 10 s, and at
// the close; on a terminal it is one line redrawn in place.
func TestBatchProgress(t *testing.T) {
	view := func(rec int, state string) BatchView {
		return BatchView{Batch: "b", Expected: 4, Recorded: rec, Percent: float64(rec * 25), State: state, Seconds: float64(rec),
			Counts: map[string]int{"succeeded": rec}}
	}
	clock := batchNow
	var out bytes.Buffer
	p := &BatchProgress{W: &out, Now: func() time.Time { return clock }}
	for _, step := range []struct {
		after time.Duration
		rec   int
		state string
	}{{0, 0, "open"}, {3 * time.Second, 1, "open"}, {7 * time.Second, 2, "open"}, {2 * time.Second, 2, "open"}, {9 * time.Second, 3, "open"}, {time.Second, 4, "closed"}} {
		clock = clock.Add(step.after)
		p.Update(view(step.rec, step.state), true)
	}
	p.Done()
	want := "batch b [..............................] 0/4 (0%) 0 succeeded, 0 dead_lettered, 0 refused, open 0s\n" +
		"batch b [###############...............] 2/4 (50%) 2 succeeded, 0 dead_lettered, 0 refused, open 2s\n" +
		"batch b [######################........] 3/4 (75%) 3 succeeded, 0 dead_lettered, 0 refused, open 3s\n" +
		"batch b [##############################] 4/4 (100%) 4 succeeded, 0 dead_lettered, 0 refused, closed 4s\n"
	if out.String() != want {
		t.Errorf("plain progress:\n%s\nwant:\n%s", out.String(), want)
	}

	// Cancelled jobs (the overflow rule cancel) are shown once there are some; a batch closed with
	// them and no failure is a success.
	out.Reset()
	p = &BatchProgress{W: &out}
	done := BatchView{Batch: "b", Expected: 4, Recorded: 4, Percent: 100, State: "closed", Seconds: 4, Counts: map[string]int{"succeeded": 3, "cancelled": 1}}
	p.Update(done, true)
	if want := "batch b [##############################] 4/4 (100%) 3 succeeded, 0 dead_lettered, 0 refused, 1 cancelled, closed 4s\n"; out.String() != want {
		t.Errorf("progress with a cancelled job:\n%s\nwant:\n%s", out.String(), want)
	}
	if err := WaitResult(done); err != nil {
		t.Errorf("WaitResult(3 succeeded, 1 cancelled) = %v, want nil: a cancelled job is not a failure", err)
	}

	// Skipped jobs (the overflow rule skip) likewise: shown once there are some, not a failure.
	out.Reset()
	p = &BatchProgress{W: &out}
	done = BatchView{Batch: "b", Expected: 5, Recorded: 5, Percent: 100, State: "closed", Seconds: 4, Counts: map[string]int{"succeeded": 2, "cancelled": 1, "skipped": 2}}
	p.Update(done, true)
	if want := "batch b [##############################] 5/5 (100%) 2 succeeded, 0 dead_lettered, 0 refused, 1 cancelled, 2 skipped, closed 4s\n"; out.String() != want {
		t.Errorf("progress with skipped jobs:\n%s\nwant:\n%s", out.String(), want)
	}
	if err := WaitResult(done); err != nil {
		t.Errorf("WaitResult(2 succeeded, 1 cancelled, 2 skipped) = %v, want nil: a skipped job is not a failure", err)
	}

	out.Reset()
	p = &BatchProgress{W: &out, TTY: true}
	p.Update(BatchView{Batch: "b"}, false)
	p.Update(view(1, "open"), true)
	p.Done()
	want = "\r\033[Kbatch b: not open yet (its first job with batchSize opens it)" +
		"\r\033[Kbatch b [#######.......................] 1/4 (25%) 1 succeeded, 0 dead_lettered, 0 refused, open 1s\n"
	if out.String() != want {
		t.Errorf("terminal progress %q, want %q", out.String(), want)
	}
}
