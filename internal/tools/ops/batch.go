package ops

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	ledger "github.com/sfnlimit/sfnlimit/internal/lambda/batch"
	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
)

// BatchLedger is what the batch commands use of the batch ledger (batch.Ledger).
type BatchLedger interface {
	OpenBy(ctx context.Context, id string, expected int, owner string, at time.Time) error
	Show(ctx context.Context, id string, withJobs bool) (ledger.Summary, []ledger.Job, error)
}

// ValidateBatchArg checks a batch name given on the command line with the router's rule.
func ValidateBatchArg(id string) error {
	if id == "" {
		return usagef("a batch needs a name: 1-%d characters of A-Z a-z 0-9 _ - . :", job.MaxBatchLen)
	}
	if err := job.ValidateBatch(id, 0); err != nil {
		return UsageError{err}
	}
	return nil
}

// ValidateBatchSize checks a batch's size against the router's bounds.
func ValidateBatchSize(size int) error {
	if size < 1 || size > job.MaxBatchSize {
		return usagef("batch size %d must be 1-%d", size, job.MaxBatchSize)
	}
	return nil
}

// BatchOpened is what opening a batch did.
type BatchOpened struct {
	Batch    string    `json:"batch"`
	Size     int       `json:"size"`
	OpenedAt time.Time `json:"openedAt"`
	// Already: the batch was open with this size before (opening it again changes nothing).
	Already bool `json:"already,omitempty"`
}

// OpenBatch opens batch id for size jobs at now, owned by owner (resources.Target.Caller: only jobs
// its principal sends are counted in it). A batch open already with the same size and owner is left
// as it is (Already); with another size it is an error that names both sizes: a batch's size never
// changes; opened by another principal it is an error too.
func OpenBatch(ctx context.Context, l BatchLedger, id string, size int, owner string, now time.Time) (BatchOpened, error) {
	if err := ValidateBatchArg(id); err != nil {
		return BatchOpened{}, err
	}
	if err := ValidateBatchSize(size); err != nil {
		return BatchOpened{}, err
	}
	now = now.UTC()
	err := l.OpenBy(ctx, id, size, owner, now)
	if errors.Is(err, ledger.ErrNotOwned) {
		return BatchOpened{}, usagef("open batch %s: another principal than yours (%s) opened it, and only its owner's jobs count in it: give your batch another name: %w",
			id, owner, ledger.ErrNotOwned)
	}
	if errors.Is(err, ledger.ErrSizeMismatch) {
		sum, _, serr := l.Show(ctx, id, false)
		if serr != nil {
			return BatchOpened{}, fmt.Errorf("open batch %s for %d jobs: it is open with another size: %w", id, size, err)
		}
		return BatchOpened{}, usagef("open batch %s for %d jobs: it was opened at %s for %d jobs, and a batch's size never changes: give the batch another name: %w",
			id, size, stamp(sum.OpenedAt), sum.Expected, ledger.ErrSizeMismatch)
	}
	if err != nil {
		return BatchOpened{}, fmt.Errorf("open batch %s: %w", id, err)
	}
	sum, _, err := l.Show(ctx, id, false)
	if err != nil {
		return BatchOpened{}, fmt.Errorf("read batch %s after opening it: %w", id, err)
	}
	return BatchOpened{Batch: id, Size: sum.Expected, OpenedAt: sum.OpenedAt, Already: !sum.OpenedAt.Equal(now)}, nil
}

// WriteBatchOpened prints what OpenBatch did.
func WriteBatchOpened(w io.Writer, o BatchOpened) {
	if o.Already {
		fmt.Fprintf(w, "batch %s was open already for %d jobs (since %s); nothing changed\n", o.Batch, o.Size, stamp(o.OpenedAt))
		return
	}
	fmt.Fprintf(w, "batch %s opened for %d jobs at %s; it closes when %s ended\n", o.Batch, o.Size, stamp(o.OpenedAt), plural(o.Size, "job has", "jobs have"))
}

// BatchView is a batch as `sfnlimit batch show` prints it.
type BatchView struct {
	Batch    string `json:"batch"`
	State    string `json:"state"` // open or closed
	Expected int    `json:"expected"`
	Recorded int    `json:"recorded"`
	// Percent is Recorded of Expected, rounded down to a tenth, so an open batch never shows 100.
	Percent float64        `json:"percent"`
	Counts  map[string]int `json:"counts"`
	// Failed counts the jobs dead-lettered or refused; not those cancelled (stopped by a newer job
	// of their key, the overflow rule cancel) or skipped (ended without running behind an older job
	// of their key and sender, the overflow rule skip): neither is a failure.
	Failed   int        `json:"failed"`
	OpenedAt time.Time  `json:"openedAt"`
	ClosedAt *time.Time `json:"closedAt,omitempty"`
	// Seconds is from the open to the close, or to now while the batch is open.
	Seconds   float64 `json:"seconds"`
	ClosedBy  string  `json:"closedBy,omitempty"`
	Announced bool    `json:"announced"`
	// ExpiresAt is when the table's TTL may delete the closed batch (BatchRetentionDays after its
	// close); absent while it is open, and for a batch closed with no retention.
	ExpiresAt    *time.Time `json:"expiresAt,omitempty"`
	FirstEndedAt *time.Time `json:"firstEndedAt,omitempty"`
	LastEndedAt  *time.Time `json:"lastEndedAt,omitempty"`
	// DeadLettered lists up to ledger.MaxListed "{type}/{id}" of jobs dead-lettered or refused (all
	// of them with --jobs); DeadLetteredMore says there are more, DeadLetteredWhere where.
	DeadLettered      []string       `json:"deadLettered"`
	DeadLetteredMore  bool           `json:"deadLetteredMore,omitempty"`
	DeadLetteredWhere string         `json:"deadLetteredWhere,omitempty"`
	Late              []BatchJobView `json:"late"`
	Jobs              []BatchJobView `json:"jobs,omitempty"`
}

// BatchJobView is one job's record in a batch.
type BatchJobView struct {
	ID      string    `json:"id"`
	Outcome string    `json:"outcome"`
	Redrive int       `json:"redrive"`
	At      time.Time `json:"at"`
}

// NoBatchError is a batch that does not exist: nobody opened it. (A batch that exists is open or
// closed.) It wraps batch.ErrNotOpen, the ledger's word for it.
type NoBatchError struct{ Batch string }

func (e NoBatchError) Error() string {
	return fmt.Sprintf("batch %s does not exist: no batch of that name was opened; open it with \"sfnlimit batch open %s --size N\" or \"sfnlimit submit FILE --batch %s\", or give its jobs batchSize",
		e.Batch, e.Batch, e.Batch)
}

func (e NoBatchError) Unwrap() error { return ledger.ErrNotOpen }

// ShowBatch reads batch id (withJobs: every job's record, and every dead-lettered id).
func ShowBatch(ctx context.Context, l BatchLedger, id string, withJobs bool, now time.Time) (BatchView, error) {
	if err := ValidateBatchArg(id); err != nil {
		return BatchView{}, err
	}
	sum, jobs, err := l.Show(ctx, id, withJobs)
	if errors.Is(err, ledger.ErrNotOpen) {
		return BatchView{}, NoBatchError{Batch: id}
	}
	if err != nil {
		return BatchView{}, fmt.Errorf("read batch %s: %w", id, err)
	}
	v := BatchViewOf(sum, now)
	for _, j := range jobs {
		v.Jobs = append(v.Jobs, jobView(j))
	}
	return v, nil
}

// BatchViewOf is the view of a batch's summary, its duration taken to now while it is open.
func BatchViewOf(sum ledger.Summary, now time.Time) BatchView {
	v := BatchView{
		Batch: sum.Batch, State: "open", Expected: sum.Expected, Recorded: sum.Recorded, Counts: map[string]int{},
		OpenedAt: sum.OpenedAt, ClosedBy: sum.ClosedBy, Announced: sum.Announced,
		DeadLettered: append([]string{}, sum.DeadLetteredIDs...), DeadLetteredMore: sum.DeadLetteredMore,
		Late: []BatchJobView{},
	}
	if sum.Expected > 0 {
		v.Percent = float64(sum.Recorded*1000/sum.Expected) / 10
	}
	for _, o := range ledger.Outcomes {
		v.Counts[string(o)] = sum.Counts[o]
	}
	v.Failed = sum.Counts[ledger.DeadLettered] + sum.Counts[ledger.Refused]
	end := now
	if sum.Closed {
		v.State, end = "closed", sum.ClosedAt
		v.ClosedAt = ptrTime(sum.ClosedAt)
		if !sum.ExpiresAt.IsZero() {
			v.ExpiresAt = ptrTime(sum.ExpiresAt)
		}
	}
	v.Seconds = end.Sub(sum.OpenedAt).Seconds()
	if !sum.First.IsZero() {
		v.FirstEndedAt, v.LastEndedAt = ptrTime(sum.First), ptrTime(sum.Last)
	}
	if v.DeadLetteredMore {
		v.DeadLetteredWhere = sum.DeadLetteredWhere
	}
	for _, j := range sum.Late {
		v.Late = append(v.Late, jobView(j))
	}
	return v
}

func jobView(j ledger.Job) BatchJobView {
	return BatchJobView{ID: j.ID, Outcome: string(j.Outcome), Redrive: j.Redrive, At: j.At.UTC()}
}

func ptrTime(t time.Time) *time.Time {
	u := t.UTC()
	return &u
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// Duration renders a batch's duration to the second (to the millisecond under a second).
func duration(sec float64) string {
	d := time.Duration(sec * float64(time.Second))
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// WriteBatch prints a batch: its state, counts, times, dead-lettered and late jobs, and its jobs'
// records when it has them (--jobs).
func WriteBatch(w io.Writer, v BatchView) error {
	state := "open"
	if v.State == "closed" {
		state = "closed, completion event not sent yet"
		if v.Announced {
			state = "closed, completion event sent"
		}
	}
	fmt.Fprintf(w, "batch %s: %s\n", v.Batch, state)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  recorded\t%d/%d (%s%%)\n", v.Recorded, v.Expected, trimPercent(v.Percent))
	for _, o := range ledger.Outcomes {
		fmt.Fprintf(tw, "  %s\t%d\n", o, v.Counts[string(o)])
	}
	fmt.Fprintf(tw, "  opened\t%s\n", stamp(v.OpenedAt))
	if v.ClosedAt != nil {
		by := ""
		if v.ClosedBy != "" {
			by = "; closed by " + v.ClosedBy
		}
		fmt.Fprintf(tw, "  closed\t%s (after %s%s)\n", stamp(*v.ClosedAt), duration(v.Seconds), by)
	} else {
		fmt.Fprintf(tw, "  open for\t%s; %d jobs to go\n", duration(v.Seconds), max(v.Expected-v.Recorded, 0))
	}
	if v.FirstEndedAt != nil {
		fmt.Fprintf(tw, "  job ends\t%s to %s\n", stamp(*v.FirstEndedAt), stamp(*v.LastEndedAt))
	}
	fmt.Fprintf(tw, "  expires\t%s\n", expiry(v))
	if err := tw.Flush(); err != nil {
		return err
	}
	writeDeadLettered(w, v)
	if len(v.Late) > 0 {
		fmt.Fprintf(w, "late (ended after the batch closed, not counted): %d\n", len(v.Late))
		if err := writeBatchJobs(w, v.Late); err != nil {
			return err
		}
	}
	if len(v.Jobs) > 0 {
		fmt.Fprintf(w, "jobs: %d\n", len(v.Jobs))
		return writeBatchJobs(w, v.Jobs)
	}
	return nil
}

// expiry says when the table's TTL may delete the batch: never while it is open.
func expiry(v BatchView) string {
	switch {
	case v.ClosedAt == nil:
		return "not while open (BatchRetentionDays after the close)"
	case v.ExpiresAt == nil:
		return "never (closed with no retention)"
	}
	return stamp(*v.ExpiresAt) + " (DynamoDB's TTL deletes it within days after)"
}

func trimPercent(p float64) string { return strings.TrimSuffix(fmt.Sprintf("%.1f", p), ".0") }

func writeDeadLettered(w io.Writer, v BatchView) {
	if v.Failed == 0 {
		return
	}
	fmt.Fprintf(w, "dead-lettered or refused: %d (their messages are on the dead-letter queue: sfnlimit dlq list)\n", v.Failed)
	for _, id := range v.DeadLettered {
		fmt.Fprintf(w, "  %s\n", id)
	}
	if v.DeadLetteredMore {
		fmt.Fprintf(w, "  ... and %d more: %s\n", v.Failed-len(v.DeadLettered), v.DeadLetteredWhere)
	}
}

func writeBatchJobs(w io.Writer, jobs []BatchJobView) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  JOB\tOUTCOME\tREDRIVE\tENDED")
	for _, j := range jobs {
		fmt.Fprintf(tw, "  %s\t%s\t%d\t%s\n", j.ID, j.Outcome, j.Redrive, j.At.UTC().Format("2006-01-02T15:04:05.000Z07:00"))
	}
	return tw.Flush()
}

// BatchSize is how many jobs of a batch the lines make: the limiter runs a job once, so lines that
// repeat a job's type and id count once (and each line without an id is a job of its own).
func BatchSize(jobs []Line) int {
	seen := map[string]bool{}
	n := 0
	for _, l := range jobs {
		if l.ID != "" {
			key := l.Type + "\x00" + l.ID
			if seen[key] {
				continue
			}
			seen[key] = true
		}
		n++
	}
	return n
}

// BatchMembers is the jobs of batch id among an input's valid jobs: those not submitted before,
// and those found submitted before as jobs of this batch. The second are the jobs an earlier
// submission of the same input with the same --batch sent (the documented recovery after SQS failed
// some): they are not sent again, and the batch counts them as they end or ended, so its size is the
// same as the first time. A job submitted before outside this batch is none of its jobs: it is not
// sent, and no end of it is recorded in this batch.
func BatchMembers(jobs []Line, found []Earlier, id string) []Line {
	other := map[int]bool{}
	for _, e := range found {
		if e.Batch != id {
			other[e.No] = true
		}
	}
	if len(other) == 0 {
		return jobs
	}
	out := make([]Line, 0, len(jobs))
	for _, l := range jobs {
		if !other[l.No] {
			out = append(out, l)
		}
	}
	return out
}

// SubmitBatch opens batch id for its members (BatchMembers, counted by BatchSize), then sends send
// with s: the jobs name the batch already (Parser.Batch). Nothing is sent when the batch cannot be
// opened, or when a job carries a batchSize of its own that is not the batch's.
func SubmitBatch(ctx context.Context, l BatchLedger, s Submitter, id string, members, send []Line, owner string, now time.Time, progress func(done int)) (BatchOpened, SendResult, error) {
	if len(send) == 0 {
		return BatchOpened{}, SendResult{}, fmt.Errorf("batch %s: no valid job to send, so it is not opened", id)
	}
	size := BatchSize(members)
	for _, j := range members {
		if j.BatchSize != 0 && j.BatchSize != size {
			return BatchOpened{}, SendResult{}, fmt.Errorf("%s carries batchSize %d, but the batch %s of this input holds %d jobs: remove its batchSize (--batch sizes the batch): nothing sent",
				lineName(j.No), j.BatchSize, id, size)
		}
	}
	opened, err := OpenBatch(ctx, l, id, size, owner, now)
	if err != nil {
		return BatchOpened{}, SendResult{}, fmt.Errorf("%w: nothing sent", err)
	}
	return opened, s.Send(ctx, send, progress), nil
}
