package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
	"github.com/sfnlimit/sfnlimit/internal/tools/ops"
	"github.com/sfnlimit/sfnlimit/internal/tools/resources"
)

// maxListed is how many invalid or failed lines a summary lists (--json lists all).
const maxListed = 20

func newSubmit() *cobra.Command {
	var (
		tgt                      target
		typ, id, key, input      string
		priority                 string
		parallel                 int
		strict, dryRun, skipType bool
		asJSON, noProgress       bool
		batchName                string
		wait                     bool
		timeout                  time.Duration
	)
	cmd := &cobra.Command{
		Use:   "submit [FILE | -]",
		Short: "Send jobs to the general queue, validated as the router validates them",
		Long: `submit sends one job given by flags, or many from a JSON Lines file (one job a line, as
{"type": "...", "id": "...", "key": "...", "priority": "high", "input": {...}}), or from standard
input ("-", or when it is not a terminal). --priority gives the job, or every line without a
priority of its own, a priority: low, normal (the default), high, or 1-9; among a type's waiting
jobs, higher starts first, and a job that has waited long ranks higher (PriorityAgingSeconds), so
low ones are not starved. Every line is first checked with the router's own rules (type, id, key,
priority, input size) and
against the limits (a type with no limit is refused as unknown_type); invalid lines are reported
with their line numbers and not sent, the others are sent (--strict: nothing is sent if any line is
invalid). Jobs go out with SendMessageBatch in tens, several batches at once; entries SQS fails are
retried with exponential back-off and jitter. A progress bar is shown on a terminal. The summary
counts what was sent and what failed, with SQS's reasons.
A job whose type and id were submitted before never runs again (its executions' names,
{type}-{id}-{attempt}, are taken for 90 days, and the lanes queue drops a copy within 5 minutes):
submit looks up the first 10 jobs with an id as "sfnlimit job show" does (a lease, or an
execution), and sends none it finds, listing each as already submitted. The other jobs of a larger
input are not looked up (a few Step Functions calls each); neither are jobs with
--skip-type-check. A job waiting in a queue, not yet started, is not found either.
Exit 1 if any job was not sent (invalid, already submitted, or failed). A job
given by flags that breaks a rule (its type, id, key, priority or input; a type with no limit) is a
usage error, exit 2, naming the flag; so is an input that holds no job.

--batch NAME sends the jobs as one batch: it counts the valid jobs (a line repeating a job's type
and id counts once), opens batch NAME for that many before sending anything, and sends each job with
"batch": NAME. A job naming another batch, or carrying another batchSize, stops the submission
before anything is sent; so does a batch NAME open already with another size. The same input sent
again with the same --batch (after SQS failed some of its jobs) sizes the batch as the first time:
its jobs found submitted before as jobs of batch NAME count, and are not sent again. --wait then waits
until the batch closes (every job ended: succeeded, dead-lettered, refused, cancelled or skipped), drawing its progress on
standard error, and prints it as "sfnlimit batch show" does; --timeout bounds the wait.
` + targetHelp + batchExitHelp,
		Example: `  sfnlimit submit --type payments --id order-1 --input '{"amount":42}'
  sfnlimit submit --type llm --id req-1 --key acme      # a job of tenant acme
  sfnlimit submit --type llm --id req-2 --priority high # starts before normal and low jobs waiting
  sfnlimit submit backfill.jsonl --priority low         # lines with their own "priority" keep it
  sfnlimit submit jobs.jsonl
  generate-jobs | sfnlimit submit - --parallel 32
  sfnlimit submit jobs.jsonl --dry-run        # validate only
  sfnlimit submit nightly.jsonl --batch nightly-2026-03-01                     # one batch, sized from the file
  sfnlimit submit nightly.jsonl --batch nightly-2026-03-01 --wait --timeout 2h # exit 0: no job failed
  sfnlimit submit --local local.json --type demo --id job-1 --input '{"seconds":1}'`,
		Args: usageArgs(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if cmd.Flags().Changed("priority") {
				// The router's own rule and words (job.PriorityFromString).
				if _, err := job.PriorityFromString(priority); err != nil {
					return usageError{fmt.Errorf("--priority: %w", err)}
				}
			} else {
				priority = ""
			}
			if err := checkBatchFlags(cmd, batchName, wait, dryRun); err != nil {
				return err
			}
			byFlags := cmd.Flags().Changed("type") || cmd.Flags().Changed("id") || cmd.Flags().Changed("key") || cmd.Flags().Changed("input")
			var in io.Reader
			source := ""
			switch {
			case byFlags && len(args) > 0:
				return usageError{fmt.Errorf("give a job by --type/--id/--key/--input or a file %q, not both", args[0])}
			case byFlags:
				if typ == "" {
					return usageError{fmt.Errorf("--type is required for a job given by flags")}
				}
				if !json.Valid([]byte(input)) {
					return usageError{fmt.Errorf("--input %q is not JSON", input)}
				}
			case len(args) == 1 && args[0] != "-":
				f, err := os.Open(args[0])
				if err != nil {
					return err
				}
				defer f.Close()
				in, source = f, args[0]
			default:
				if len(args) == 0 && isTerminal(cmd.InOrStdin()) {
					return usageError{fmt.Errorf("give a job (--type, --id, --input), a JSON Lines file, or - for standard input")}
				}
				in, source = cmd.InOrStdin(), "standard input"
			}
			if parallel < 1 {
				return usageError{fmt.Errorf("--parallel %d must be at least 1", parallel)}
			}
			s, err := tgt.session(ctx)
			if err != nil {
				return err
			}
			queue, err := s.t.Output(ctx, resources.GeneralQueueURL)
			if err != nil {
				return s.explain(err)
			}
			var (
				check    ops.TypeChecker
				resolver *config.Resolver
				finder   *ops.JobFinder // looks up jobs submitted before; nil with --skip-type-check
			)
			if !skipType {
				r, d, _, err := s.resolver(ctx)
				resolver = r
				if err != nil {
					return s.explain(fmt.Errorf("%w (--skip-type-check sends without checking the types' limits)", err))
				}
				check = ops.ResolverCheck(r)
				if table, err := s.t.Output(ctx, resources.TableName); err == nil {
					finder = &ops.JobFinder{Leases: lease.ReadOnly(lease.NewStore(s.ddb, table)), SFN: s.sfn, Config: r, Defaults: d}
					// The jobs are sent as the caller's: a line repeats only the caller's own job.
					if caller, err := s.t.Caller(ctx); err == nil {
						finder.Caller = caller
					}
				}
			}
			var parsed ops.Parsed
			parser := ops.Parser{Check: check, Priority: priority, Batch: batchName}
			if byFlags {
				body, _ := json.Marshal(job.Submission{Type: typ, ID: id, Key: key, Input: json.RawMessage(input)})
				parsed, err = parser.ParseJob(ctx, body)
				source = "flags"
			} else {
				parsed, err = parser.ParseJobs(ctx, in)
			}
			if err != nil {
				return s.explain(err)
			}
			if byFlags && len(parsed.Invalid) > 0 {
				// A job given by flags is judged as the command line is: a usage error, naming the flag.
				x := parsed.Invalid[0]
				hint := ""
				if x.Reason == string(job.ReasonUnknownType) && resolver != nil {
					if near := ops.SuggestType(ctx, resolver, typ); near != "" {
						hint = fmt.Sprintf(" (did you mean %s?)", near)
					}
				}
				return usageError{fmt.Errorf("%s: %s: %s%s", flagOf(x.Reason), x.Reason, x.Detail, hint)}
			}
			if len(parsed.Jobs)+len(parsed.Invalid) == 0 {
				where := "in " + source
				if source == "standard input" {
					where = "on standard input"
				}
				return usageError{fmt.Errorf("no jobs %s: give one JSON object a line, a job by --type, --id and --input, or a file", where)}
			}
			out := cmd.OutOrStdout()
			sum := submitSummary{Source: source, Target: s.t.String(), Jobs: len(parsed.Jobs) + len(parsed.Invalid), Invalid: parsed.Invalid, Duplicates: parsed.Duplicates, NoID: parsed.NoID}
			valid := parsed.Jobs
			if finder != nil {
				// A job submitted before never runs again: say so, and send it not.
				found, checked, unchecked, err := finder.FindEarlier(ctx, parsed.Jobs)
				sum.Checked = checked
				if err != nil && ctx.Err() != nil {
					// Interrupted (Ctrl-C): stop here, before sending anything (exit 130).
					return errors.New("interrupted while looking up whether the jobs were submitted before: nothing sent")
				}
				switch {
				case err != nil:
					sum.EarlierCheck = fmt.Sprintf("could not look up whether the jobs were submitted before (%v): sent as they are; one submitted before will not run again", s.explain(err))
				case len(found) > 0 && unchecked > 0:
					sum.EarlierCheck = fmt.Sprintf("only the first %d jobs with an id were looked up; the other %d were sent as they are, and any of them submitted before will not run again either", checked, unchecked)
				}
				if err == nil {
					sum.Already = found
					parsed.Jobs = ops.WithoutEarlier(parsed.Jobs, found)
				}
			}
			send := parsed.Jobs
			switch {
			case dryRun:
				send = nil
				sum.DryRun = true
			case strict && len(parsed.Invalid) > 0:
				send = nil
				sum.Held = len(parsed.Jobs)
			}
			// The batch's jobs: those sent now, and those an earlier submission of this input with
			// this --batch sent (found above, not sent again), so that the size is the same.
			members := ops.BatchMembers(valid, sum.Already, batchName)
			if batchName != "" {
				sum.Batch = batchName
				if len(send) > 0 || dryRun {
					sum.BatchSize = ops.BatchSize(members)
				}
			}
			if len(send) > 0 {
				progress := newProgress(cmd.ErrOrStderr(), len(send), noProgress || asJSON && !isTerminal(cmd.ErrOrStderr()))
				submitter := ops.Submitter{SQS: s.sqs, QueueURL: queue, Parallel: parallel}
				var res ops.SendResult
				if batchName == "" {
					res = submitter.Send(ctx, send, progress.update)
				} else {
					l, err := s.ledger(ctx)
					if err != nil {
						return s.explain(err)
					}
					owner, err := s.t.Caller(ctx)
					if err != nil {
						return s.explain(err)
					}
					var opened ops.BatchOpened
					opened, res, err = ops.SubmitBatch(ctx, l, submitter, batchName, members, send, owner, time.Now(), progress.update)
					if err != nil {
						progress.finish()
						return s.explain(err)
					}
					sum.BatchOpenedAt, sum.BatchWasOpen = &opened.OpenedAt, opened.Already
				}
				progress.finish()
				sum.Sent, sum.Failed, sum.Seconds = res.Sent, res.Failed, res.Elapsed.Seconds()
			}
			allSent := sum.Jobs == sum.Sent+sum.inBatch() && !dryRun
			if wait && allSent {
				if !asJSON {
					sum.write(out)
				}
				l, err := s.ledger(ctx)
				if err != nil {
					return s.explain(err)
				}
				v, werr := waitBatch(ctx, cmd.ErrOrStderr(), &tgt, l, batchName, timeout)
				if v.State != "" {
					sum.BatchResult = &v
				}
				if asJSON {
					if err := writeJSON(out, sum); err != nil {
						return err
					}
				} else if v.State != "" {
					fmt.Fprintln(out)
					if err := ops.WriteBatch(out, v); err != nil {
						return err
					}
				}
				if werr != nil {
					return s.explain(werr)
				}
				return ops.WaitResult(v)
			}
			if asJSON {
				if err := writeJSON(out, sum); err != nil {
					return err
				}
			} else {
				sum.write(out)
			}
			if notSent := sum.Jobs - sum.Sent; notSent > 0 && !dryRun {
				err := fmt.Errorf("%d of %d jobs not sent (%s)%s", notSent, sum.Jobs, sum.whyNotSent(), sum.batchNotSent(source))
				if len(sum.Failed) > 0 {
					return s.explain(err)
				}
				return err
			}
			if dryRun && len(sum.Invalid)+len(sum.Already) > 0 {
				return fmt.Errorf("dry run: %d of %d jobs would not be sent (%s)", len(sum.Invalid)+len(sum.Already), sum.Jobs, sum.whyNotSent())
			}
			return nil
		},
	}
	registerTarget(cmd, &tgt)
	f := cmd.Flags()
	f.StringVar(&typ, "type", "", "type of a single job")
	f.StringVar(&id, "id", "", "id of a single job (default: the SQS message id); a job whose type and id were submitted before is reported and not sent (exit 1)")
	f.StringVar(&key, "key", "", "concurrency key of a single job (a tenant, say: 1-64 of A-Z a-z 0-9 _ - . :); default: none")
	f.StringVar(&input, "input", "{}", "input of a single job, JSON")
	f.StringVar(&priority, "priority", "", "priority of the job, or of every line without its own: low, normal, high or 1-9 (higher starts first; default normal)")
	f.IntVar(&parallel, "parallel", 16, "batches of ten in flight at once")
	f.BoolVar(&strict, "strict", false, "send nothing if any line is invalid")
	f.BoolVar(&dryRun, "dry-run", false, "validate only; send nothing")
	f.BoolVar(&skipType, "skip-type-check", false, "do not check that each type has a limit (needs no access to the defaults or the table)")
	f.BoolVar(&asJSON, "json", false, "print the summary as JSON")
	f.BoolVar(&noProgress, "no-progress", false, "show no progress")
	f.StringVar(&batchName, "batch", "", "send the jobs as batch `NAME`, opened first for as many jobs as the input holds")
	f.BoolVar(&wait, "wait", false, "with --batch: wait until the batch closes, then print it (exit 3 if a job was dead-lettered or refused)")
	f.DurationVar(&timeout, "timeout", 0, "with --wait: stop waiting after this long (exit 4); 0 waits until the batch closes")
	_ = cmd.RegisterFlagCompletionFunc("type", completeTypes(&tgt))
	_ = cmd.RegisterFlagCompletionFunc("priority", cobra.FixedCompletions([]cobra.Completion{"low", "normal", "high"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// flagOf is the flag of `submit --type ...` that a job's refusal reason (job.Reason) is about.
func flagOf(reason string) string {
	switch job.Reason(reason) {
	case job.ReasonMissingType, job.ReasonInvalidType, job.ReasonUnknownType:
		return "--type"
	case job.ReasonInvalidID:
		return "--id"
	case job.ReasonInvalidKey:
		return "--key"
	case job.ReasonInvalidPriority:
		return "--priority"
	case job.ReasonInvalidBatch:
		return "--batch"
	}
	return "--input" // not_json, input_too_large
}

// submitSummary is what submit reports.
type submitSummary struct {
	Source     string        `json:"source"`
	Target     string        `json:"target"`
	Jobs       int           `json:"jobs"`
	Sent       int           `json:"sent"`
	Invalid    []ops.Invalid `json:"invalid"`
	Failed     []ops.Failed  `json:"failed"`
	Duplicates int           `json:"duplicates"`
	NoID       int           `json:"withoutId"`
	// Already are jobs submitted before (a lease or an execution of the same type and id): not
	// sent, as they would never run again. Checked counts the jobs looked up (the first
	// ops.MaxEarlierChecks with an id), and EarlierCheck says what was not looked up, or why not.
	Already      []ops.Earlier `json:"alreadySubmitted,omitempty"`
	Checked      int           `json:"checkedForEarlier"`
	EarlierCheck string        `json:"earlierCheck,omitempty"`
	Seconds      float64       `json:"seconds"`
	DryRun       bool          `json:"dryRun,omitempty"`
	// Held counts valid jobs not sent because --strict found invalid ones.
	Held int `json:"heldByStrict,omitempty"`
	// Batch is the batch the jobs were sent as (--batch), BatchSize how many jobs it holds; an
	// opened batch has BatchOpenedAt, and BatchWasOpen when it was open already. BatchResult is the
	// batch when --wait ends.
	Batch         string         `json:"batch,omitempty"`
	BatchSize     int            `json:"batchSize,omitempty"`
	BatchOpenedAt *time.Time     `json:"batchOpenedAt,omitempty"`
	BatchWasOpen  bool           `json:"batchWasOpen,omitempty"`
	BatchResult   *ops.BatchView `json:"batchResult,omitempty"`
}

// whyNotSent counts, for an error, why jobs were not sent.
func (s submitSummary) whyNotSent() string {
	var parts []string
	if n := len(s.Invalid); n > 0 {
		parts = append(parts, fmt.Sprintf("%d invalid", n))
	}
	if n := len(s.Already); n > 0 {
		parts = append(parts, fmt.Sprintf("%d already submitted", n))
	}
	if n := len(s.Failed); n > 0 {
		parts = append(parts, fmt.Sprintf("%d failed: %s", n, s.Failed[0].Message))
	}
	if s.Held > 0 {
		parts = append(parts, fmt.Sprintf("%d held by --strict", s.Held))
	}
	return strings.Join(parts, ", ")
}

// inBatch counts the jobs found submitted before as jobs of the batch: sent by an earlier
// submission of the same input with the same --batch, they are the batch's, and a wait waits for
// them too.
func (s submitSummary) inBatch() int {
	n := 0
	for _, e := range s.Already {
		if s.Batch != "" && e.Batch == s.Batch {
			n++
		}
	}
	return n
}

// batchNotSent says what a batch whose jobs were not all sent needs, to be added to the error.
func (s submitSummary) batchNotSent(source string) string {
	if s.Batch == "" || s.BatchOpenedAt == nil {
		return ""
	}
	if len(s.Failed) == 0 {
		return fmt.Sprintf("; batch %s is open for %d jobs (sfnlimit batch wait %s waits for it)", s.Batch, s.BatchSize, s.Batch)
	}
	return fmt.Sprintf("\n  batch %s was opened for %d jobs and closes only when they have all ended: send the same input again with --batch %s (jobs with ids are counted once)",
		s.Batch, s.BatchSize, s.Batch)
}

// checkBatchFlags checks --batch, --wait and --timeout together.
func checkBatchFlags(cmd *cobra.Command, name string, wait, dryRun bool) error {
	if cmd.Flags().Changed("batch") {
		if err := ops.ValidateBatchArg(name); err != nil {
			return usageError{fmt.Errorf("--batch: %w", err)}
		}
	}
	switch {
	case wait && name == "":
		return usageError{fmt.Errorf("--wait needs --batch NAME: it waits for that batch to close (sfnlimit batch wait NAME waits for a batch sent otherwise)")}
	case wait && dryRun:
		return usageError{fmt.Errorf("--wait with --dry-run: nothing is sent to wait for")}
	case cmd.Flags().Changed("timeout") && !wait:
		return usageError{fmt.Errorf("--timeout needs --wait")}
	}
	if t, _ := cmd.Flags().GetDuration("timeout"); t < 0 {
		return usageError{fmt.Errorf("--timeout %s must not be negative", t)}
	}
	return nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func (s submitSummary) write(w io.Writer) {
	switch {
	case s.DryRun && len(s.Already) > 0:
		fmt.Fprintf(w, "dry run: %d of %d jobs from %s are valid, %d of them submitted before; nothing sent\n", s.Jobs-len(s.Invalid), s.Jobs, s.Source, len(s.Already))
	case s.DryRun:
		fmt.Fprintf(w, "dry run: %d of %d jobs from %s are valid; nothing sent\n", s.Jobs-len(s.Invalid), s.Jobs, s.Source)
	case s.Held > 0:
		fmt.Fprintf(w, "sent nothing: --strict and %d of %d jobs from %s are invalid\n", len(s.Invalid), s.Jobs, s.Source)
	default:
		rate := ""
		if s.Seconds > 0 && s.Sent > 0 {
			rate = fmt.Sprintf(" (%.0f jobs/s)", float64(s.Sent)/s.Seconds)
		}
		fmt.Fprintf(w, "sent %d of %d jobs from %s to %s in %s%s\n", s.Sent, s.Jobs, s.Source, s.Target, time.Duration(s.Seconds*float64(time.Second)).Round(time.Millisecond), rate)
	}
	switch {
	case s.Batch == "":
	case s.BatchOpenedAt != nil && s.BatchWasOpen:
		fmt.Fprintf(w, "batch %s: open already for %d jobs since %s\n", s.Batch, s.BatchSize, s.BatchOpenedAt.Format(time.RFC3339))
	case s.BatchOpenedAt != nil:
		fmt.Fprintf(w, "batch %s: opened for %d jobs at %s (sfnlimit batch show %s)\n", s.Batch, s.BatchSize, s.BatchOpenedAt.Format(time.RFC3339), s.Batch)
	case s.DryRun:
		fmt.Fprintf(w, "batch %s would be opened for %d jobs\n", s.Batch, s.BatchSize)
	default:
		fmt.Fprintf(w, "batch %s: not opened\n", s.Batch)
	}
	if len(s.Invalid) > 0 {
		fmt.Fprintf(w, "invalid, not sent: %d\n", len(s.Invalid))
		for i, x := range s.Invalid {
			if i == maxListed {
				fmt.Fprintf(w, "  ... and %d more (--json lists all)\n", len(s.Invalid)-maxListed)
				break
			}
			fmt.Fprintf(w, "  %s: %s: %s\n", lineName(x.No), x.Reason, x.Detail)
		}
	}
	if len(s.Already) > 0 {
		fmt.Fprintf(w, "already submitted, not sent: %d\n", len(s.Already))
		for i, x := range s.Already {
			if i == maxListed {
				fmt.Fprintf(w, "  ... and %d more (--json lists all)\n", len(s.Already)-maxListed)
				break
			}
			if x.No > 0 {
				fmt.Fprintf(w, "  %s: %s\n", lineName(x.No), x.Text())
			} else {
				fmt.Fprintf(w, "  %s\n", x.Text())
			}
		}
	}
	if n := s.inBatch(); n > 0 {
		fmt.Fprintf(w, "note: %s sent before as jobs of batch %s, which counts each as it ends\n", plural(n, "job was", "jobs were"), s.Batch)
	}
	if s.EarlierCheck != "" {
		fmt.Fprintf(w, "note: %s\n", s.EarlierCheck)
	}
	if len(s.Failed) > 0 {
		fmt.Fprintf(w, "failed after retries, not sent: %d\n", len(s.Failed))
		for i, x := range s.Failed {
			if i == maxListed {
				fmt.Fprintf(w, "  ... and %d more (--json lists all)\n", len(s.Failed)-maxListed)
				break
			}
			fmt.Fprintf(w, "  %s (%s/%s): %s: %s\n", lineName(x.No), x.Type, x.ID, x.Code, x.Message)
		}
	}
	if s.Duplicates > 0 {
		fmt.Fprintf(w, "note: %s the type, key and id of an earlier line; the limiter runs such a job once\n", plural(s.Duplicates, "line repeats", "lines repeat"))
	}
	if s.NoID > 0 {
		fmt.Fprintf(w, "note: %s no id; each takes its SQS message id, so sending one again runs it again\n", plural(s.NoID, "job has", "jobs have"))
	}
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

func lineName(no int) string {
	if no == 0 {
		return "job"
	}
	return fmt.Sprintf("line %d", no)
}

// progress shows how many jobs are done: a bar on a terminal, a line per tenth otherwise.
type progress struct {
	bar   *progressbar.ProgressBar
	w     io.Writer
	total int
	next  int // the count at which the next plain line is due
	off   bool
}

func newProgress(w io.Writer, total int, off bool) *progress {
	p := &progress{w: w, total: total, off: off || total <= 100}
	if p.off {
		return p
	}
	if isTerminal(w) {
		p.bar = progressbar.NewOptions(total,
			progressbar.OptionSetWriter(w),
			progressbar.OptionSetDescription("sending"),
			progressbar.OptionShowCount(),
			progressbar.OptionShowIts(),
			progressbar.OptionSetItsString("jobs"),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionClearOnFinish(),
		)
		return p
	}
	p.next = max(total/10, 1)
	return p
}

// update is called with the number of jobs done, never concurrently.
func (p *progress) update(done int) {
	switch {
	case p.off:
	case p.bar != nil:
		_ = p.bar.Set(done)
	case done >= p.next && done < p.total:
		fmt.Fprintf(p.w, "sent %d/%d\n", done, p.total)
		for p.next <= done {
			p.next += max(p.total/10, 1)
		}
	}
}

func (p *progress) finish() {
	if p.bar != nil {
		_ = p.bar.Finish()
	}
}

// isTerminal reports whether a reader or writer is a terminal.
func isTerminal(v any) bool {
	f, ok := v.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
