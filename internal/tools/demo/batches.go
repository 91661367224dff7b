package demo

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	ledger "github.com/sfnlimit/sfnlimit/internal/lambda/batch"
	"github.com/sfnlimit/sfnlimit/internal/tools/ops"
)

// BatchResult is how one of the demo's batches ended, and what the workload expected of it.
type BatchResult struct {
	Batch    string         `json:"batch"`
	Jobs     int            `json:"jobs"`
	Want     map[string]int `json:"want"`
	Counts   map[string]int `json:"counts"`
	Closed   bool           `json:"closed"`
	Recorded int            `json:"recorded"`
	// ClosedSeconds is when the batch closed, in seconds from the submission.
	ClosedSeconds float64 `json:"closedSeconds,omitempty"`
	Announced     bool    `json:"announced"`
	Late          int     `json:"late"`
}

// batchWatch opens the demo's batches and reads the ledger until each has closed.
type batchWatch struct {
	ledger ops.BatchLedger
	// owner opens the batches: the principal the demo's jobs are sent as (the local stack's
	// SenderID), whose jobs alone the batches count.
	owner   string
	start   time.Time
	batches []*BatchResult // by batch id
}

// newBatchWatch returns a watch of the jobs' batches, each with the outcomes its jobs should have.
func newBatchWatch(l ops.BatchLedger, jobs []Job) *batchWatch {
	by := map[string]*BatchResult{}
	bw := &batchWatch{ledger: l}
	for _, j := range jobs {
		if j.Batch == "" {
			continue
		}
		b := by[j.Batch]
		if b == nil {
			b = &BatchResult{Batch: j.Batch, Want: map[string]int{}, Counts: map[string]int{}}
			for _, o := range ledger.Outcomes {
				b.Want[string(o)] = 0
			}
			by[j.Batch] = b
			bw.batches = append(bw.batches, b)
		}
		b.Jobs++
		b.Want[string(outcomeOf(j.Expect))]++
	}
	sort.Slice(bw.batches, func(i, k int) bool { return bw.batches[i].Batch < bw.batches[k].Batch })
	return bw
}

// outcomeOf is the ledger's outcome of a job the demo expects to end so.
func outcomeOf(expect string) ledger.Outcome {
	switch expect {
	case "succeeded":
		return ledger.Succeeded
	case "dead-lettered":
		return ledger.DeadLettered
	}
	return ledger.Refused
}

// open opens every batch with its size, as `sfnlimit submit --batch` does before sending.
func (bw *batchWatch) open(ctx context.Context, at time.Time) error {
	for _, b := range bw.batches {
		if _, err := ops.OpenBatch(ctx, bw.ledger, b.Batch, b.Jobs, bw.owner, at); err != nil {
			return fmt.Errorf("demo: %w", err)
		}
	}
	return nil
}

// String lists the batches with their sizes.
func (bw *batchWatch) String() string {
	parts := make([]string, len(bw.batches))
	for i, b := range bw.batches {
		parts[i] = fmt.Sprintf("%s (%d jobs)", b.Batch, b.Jobs)
	}
	return strings.Join(parts, ", ")
}

// poll reads the batches not closed yet and returns a line for each that has closed since.
func (bw *batchWatch) poll(ctx context.Context) ([]string, error) {
	var lines []string
	for _, b := range bw.batches {
		if b.Closed && b.Announced {
			continue
		}
		sum, _, err := bw.ledger.Show(ctx, b.Batch, false)
		if err != nil {
			return nil, fmt.Errorf("demo: read batch %s: %w", b.Batch, err)
		}
		was := b.Closed
		b.Recorded, b.Closed, b.Announced, b.Late = sum.Recorded, sum.Closed, sum.Announced, len(sum.Late)
		for _, o := range ledger.Outcomes {
			b.Counts[string(o)] = sum.Counts[o]
		}
		if b.Closed && !was {
			b.ClosedSeconds = sum.ClosedAt.Sub(bw.start).Seconds()
			lines = append(lines, b.line())
		}
	}
	return lines, nil
}

func (b *BatchResult) line() string {
	return fmt.Sprintf("batch %s closed %.1fs into the run: %d/%d jobs, %d succeeded, %d dead_lettered, %d refused",
		b.Batch, b.ClosedSeconds, b.Recorded, b.Jobs, b.Counts[string(ledger.Succeeded)], b.Counts[string(ledger.DeadLettered)], b.Counts[string(ledger.Refused)])
}

// done says every batch has closed and sent its completion event.
func (bw *batchWatch) done() bool {
	for _, b := range bw.batches {
		if !b.Closed || !b.Announced {
			return false
		}
	}
	return true
}

// settle polls until every batch is done or within has passed, writing each close to out.
func (bw *batchWatch) settle(ctx context.Context, out io.Writer, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		lines, err := bw.poll(ctx)
		if err != nil {
			return err
		}
		for _, l := range lines {
			fmt.Fprintln(out, l)
		}
		if bw.done() || time.Now().After(deadline) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// results are the batches as they ended.
func (bw *batchWatch) results() []BatchResult {
	out := make([]BatchResult, len(bw.batches))
	for i, b := range bw.batches {
		out[i] = *b
	}
	return out
}

// batchMismatches says how batches ended otherwise than their jobs: each closes, once every job
// has ended, with a count per outcome equal to its jobs', no late job, and its event sent.
func batchMismatches(bs []BatchResult) []string {
	var out []string
	for _, b := range bs {
		var what []string
		if !b.Closed {
			what = append(what, fmt.Sprintf("not closed (%d of %d jobs recorded)", b.Recorded, b.Jobs))
		}
		for _, o := range ledger.Outcomes {
			if got, want := b.Counts[string(o)], b.Want[string(o)]; got != want {
				what = append(what, fmt.Sprintf("%s %d, want %d", o, got, want))
			}
		}
		if b.Closed && !b.Announced {
			what = append(what, "completion event not sent")
		}
		if b.Late > 0 {
			what = append(what, fmt.Sprintf("%d late jobs", b.Late))
		}
		if len(what) > 0 {
			out = append(out, fmt.Sprintf("batch %s: %s", b.Batch, strings.Join(what, ", ")))
		}
	}
	return out
}

// printBatches writes the batches' table of the report.
func printBatches(w io.Writer, bs []BatchResult) {
	if len(bs) == 0 {
		return
	}
	fmt.Fprintln(w, "batches (one per type, opened before the submission; each closes when all its jobs have ended):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "batch\tjobs\tsucceeded\tdead_lettered\trefused\tclosed at\tevent\t")
	for _, b := range bs {
		closed, event := "open", "-"
		if b.Closed {
			closed = fmt.Sprintf("%.1fs", b.ClosedSeconds)
			event = map[bool]string{true: "sent", false: "not sent"}[b.Announced]
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\t%s\t\n", b.Batch, b.Jobs, b.Counts[string(ledger.Succeeded)], b.Counts[string(ledger.DeadLettered)], b.Counts[string(ledger.Refused)], closed, event)
	}
	tw.Flush()
}
