package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	ledger "github.com/sfnlimit/sfnlimit/internal/lambda/batch"
	"github.com/sfnlimit/sfnlimit/internal/tools/ops"
	"github.com/sfnlimit/sfnlimit/internal/tools/resources"
)

// batchExitHelp is the part of the batch commands' help that gives their own exit codes.
const batchExitHelp = `
Waiting (batch wait, submit --wait) ends with exit 0 when the batch closed with no job
dead-lettered or refused (cancelled and skipped jobs are no failure), 3 when it closed with jobs
dead-lettered or refused, 4 when --timeout passed before it closed (the
batch goes on; wait again), 1 on an error, 2 on a usage error, 130 when interrupted (Ctrl-C: it
stops waiting, the batch goes on, and it prints the command that waits again).`

func newBatch() *cobra.Command {
	var tgt target
	cmd := &cobra.Command{
		Use:   "batch",
		Short: "Open, show and wait for batches of jobs",
		Long: `A batch is a set of jobs that closes when every one of them has ended: succeeded,
dead-lettered or refused. Its jobs name it ("batch": NAME; 1-64 characters of A-Z a-z 0-9 _ - . :),
and it is opened with its size: by "sfnlimit batch open", by "sfnlimit submit FILE --batch NAME",
or by the first job routed that carries "batchSize". The record that closes it sends one
EventBridge event (source "sfnlimit", detail-type "sfnlimit Batch Completed") to the default bus.
` + targetHelp + batchExitHelp,
		Example: `  sfnlimit batch open nightly-2026-03-01 --size 5000
  sfnlimit batch show nightly-2026-03-01
  sfnlimit batch wait nightly-2026-03-01 --timeout 2h`,
		Args: commandArgs,
		RunE: showHelp,
	}
	registerTarget(cmd, &tgt)
	cmd.AddCommand(newBatchOpen(&tgt), newBatchShow(&tgt), newBatchWait(&tgt))
	return cmd
}

func newBatchOpen(tgt *target) *cobra.Command {
	var (
		size   int
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "open NAME --size N",
		Short: "Open a batch for N jobs, before its jobs are sent",
		Long: `open opens batch NAME for N jobs (1-1000000). Its jobs then need only "batch": NAME, no
batchSize. Opening an open batch again with the same size changes nothing; with another size it is
refused (exit 2): a batch's size never changes, give the other one another name. Jobs of a batch nobody
opened are refused (batch_not_open) after a few deliveries. The batch belongs to the caller: the
principal of your credentials (sts:GetCallerIdentity; on the local stack, its emulator's one sender),
and only jobs sent to the general queue with those credentials count in it; anyone else's jobs naming
it are refused (batch_not_owned).
` + targetHelp,
		Example: `  sfnlimit batch open nightly-2026-03-01 --size 5000
  jq -c '. + {batch: "nightly-2026-03-01"}' jobs.jsonl | sfnlimit submit -
  sfnlimit batch open reindex:eu --size 120 --json`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := ops.ValidateBatchArg(args[0]); err != nil {
				return err
			}
			if err := ops.ValidateBatchSize(size); err != nil {
				return usageError{fmt.Errorf("--size: %w", err)}
			}
			ctx := cmd.Context()
			s, l, err := tgt.ledger(ctx)
			if err != nil {
				return err
			}
			owner, err := s.t.Caller(ctx)
			if err != nil {
				return s.explain(err)
			}
			o, err := ops.OpenBatch(ctx, l, args[0], size, owner, time.Now())
			if err != nil {
				return s.explain(err)
			}
			return print(cmd.OutOrStdout(), asJSON, o, func(w io.Writer) error { ops.WriteBatchOpened(w, o); return nil })
		},
	}
	cmd.Flags().IntVar(&size, "size", 0, "how many jobs the batch holds (required)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func newBatchShow(tgt *target) *cobra.Command {
	var withJobs, asJSON bool
	cmd := &cobra.Command{
		Use:   "show NAME [--jobs]",
		Short: "Show a batch: its counts, times and failed jobs",
		Long: `show reads batch NAME from the limiter's table: whether it is open or closed and whether its
completion event was sent, how many of its jobs ended (recorded of expected, with a percentage)
and how (succeeded, dead_lettered, refused; cancelled: stopped by a newer job of its key; skipped:
ended without running behind an older job of its key and sender; neither is a failure), when it
opened and closed and how long it took (or has been open), the jobs dead-lettered or refused ("{type}/{id}", up to 100, then where to find
the rest), and the late jobs: ones that ended after the batch closed (a redrive, or more jobs than
its size), not counted. --jobs lists every job's outcome, redrive and end time, and every
dead-lettered job. Exit 1 if the batch does not exist (nobody opened it).
` + targetHelp,
		Example: `  sfnlimit batch show nightly-2026-03-01
  sfnlimit batch show nightly-2026-03-01 --jobs
  sfnlimit batch show nightly-2026-03-01 --json | jq '.counts'
  sfnlimit batch show nightly-2026-03-01 --jobs --json | jq -r '.jobs[] | select(.outcome != "succeeded") | .id'`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := ops.ValidateBatchArg(args[0]); err != nil {
				return err
			}
			ctx := cmd.Context()
			s, l, err := tgt.ledger(ctx)
			if err != nil {
				return err
			}
			v, err := ops.ShowBatch(ctx, l, args[0], withJobs, time.Now())
			if err != nil {
				return s.explain(err)
			}
			return print(cmd.OutOrStdout(), asJSON, v, func(w io.Writer) error { return ops.WriteBatch(w, v) })
		},
	}
	cmd.Flags().BoolVar(&withJobs, "jobs", false, "list every job's record and every dead-lettered job")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func newBatchWait(tgt *target) *cobra.Command {
	var (
		timeout time.Duration
		asJSON  bool
	)
	cmd := &cobra.Command{
		Use:   "wait NAME [--timeout DUR]",
		Short: "Wait until a batch closes, showing its progress",
		Long: `wait reads batch NAME every second until it closes, then prints it as "batch show" does.
Its progress goes to standard error: one line redrawn in place on a terminal, else a line every
10 seconds. A batch not open yet is waited for a minute (its jobs' batchSize opens it when the
router takes the first of them); one still not open then, or when --timeout passes, does not exist
(exit 1, as batch show says). Use it for a batch submitted by other means than "submit --batch
--wait".
` + targetHelp + batchExitHelp,
		Example: `  sfnlimit batch wait nightly-2026-03-01
  sfnlimit batch wait nightly-2026-03-01 --timeout 30m || echo "exit $?"
  sfnlimit batch wait nightly-2026-03-01 --json > nightly.json`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := ops.ValidateBatchArg(args[0]); err != nil {
				return err
			}
			if timeout < 0 {
				return usageError{fmt.Errorf("--timeout %s must not be negative", timeout)}
			}
			ctx := cmd.Context()
			s, l, err := tgt.ledger(ctx)
			if err != nil {
				return err
			}
			v, err := waitBatch(ctx, cmd.ErrOrStderr(), tgt, l, args[0], timeout)
			if v.State != "" {
				if perr := print(cmd.OutOrStdout(), asJSON, v, func(w io.Writer) error { return ops.WriteBatch(w, v) }); perr != nil {
					return perr
				}
			}
			if err != nil {
				return s.explain(err)
			}
			return ops.WaitResult(v)
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "stop waiting after this long (exit 4); 0 waits until the batch closes")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the closed batch as JSON")
	return cmd
}

// waitBatch waits for batch id of the limiter tgt names to close, drawing its progress on w. Cut
// short by the command's context (Ctrl-C), it returns a stoppedWaiting that says how to wait again.
func waitBatch(ctx context.Context, w io.Writer, tgt *target, l ops.BatchLedger, id string, timeout time.Duration) (ops.BatchView, error) {
	p := &ops.BatchProgress{W: w, TTY: isTerminal(w)}
	v, err := ops.BatchWaiter{Ledger: l}.Wait(ctx, id, timeout, p.Update)
	p.Done()
	if err != nil && ctx.Err() != nil {
		again := append([]string{"sfnlimit", "batch", "wait", ops.ShellQuote(id)}, tgt.flagArgs()...)
		return v, stoppedWaiting{batch: id, again: strings.Join(again, " ")}
	}
	return v, err
}

// stoppedWaiting is a wait for a batch cut short by its caller: the batch goes on.
type stoppedWaiting struct{ batch, again string }

func (s stoppedWaiting) Error() string {
	return fmt.Sprintf("stopped waiting for batch %s: the batch goes on; wait again with:\n  %s", s.batch, s.again)
}

// ledger opens the target and its batch ledger.
func (t *target) ledger(ctx context.Context) (*session, *ledger.Ledger, error) {
	s, err := t.session(ctx)
	if err != nil {
		return nil, nil, err
	}
	l, err := s.ledger(ctx)
	if err != nil {
		return nil, nil, s.explain(err)
	}
	return s, l, nil
}

// ledger is the batch ledger in the limiter's table.
func (s *session) ledger(ctx context.Context) (*ledger.Ledger, error) {
	table, err := s.t.Output(ctx, resources.TableName)
	if err != nil {
		return nil, fmt.Errorf("find the batches' table: %w", err)
	}
	return ledger.New(s.ddb, table), nil
}
