// Command sfnlimit runs the limiter locally (the demo and a local stack) and, against a deployed
// stack or a local one, helps operators submit, watch and tune it.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/sfnlimit/sfnlimit/internal/tools/ops"
)

// Exit codes.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
	// exitBatchFailed: a waited batch closed with jobs dead-lettered or refused.
	exitBatchFailed = 3
	// exitTimeout: a wait's --timeout passed before its batch closed.
	exitTimeout = 4
	// exitInterrupted: the command was interrupted (SIGINT, Ctrl-C; or SIGTERM), as shells count
	// a death by SIGINT (128+2).
	exitInterrupted = 130
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes one command line and returns its exit code.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRoot()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return exitOK
	}
	fmt.Fprintln(stderr, "sfnlimit:", err)
	if isUsage(err) {
		if cmd == nil {
			cmd = root
		}
		fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
		return exitUsage
	}
	var failed ops.BatchFailedError
	switch {
	case errors.As(err, &failed):
		return exitBatchFailed
	case errors.Is(err, ops.ErrWaitTimeout):
		return exitTimeout
	case ctx.Err() != nil:
		return exitInterrupted
	}
	return exitError
}

type usageError struct{ error }

func (u usageError) Unwrap() error { return u.error }

func isUsage(err error) bool {
	var ue usageError
	var oe ops.UsageError
	return errors.As(err, &ue) || errors.As(err, &oe)
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "sfnlimit",
		Short: "Cap how many Step Functions executions of each job type run at once",
		Long: `sfnlimit caps how many AWS Step Functions executions of each job type run at once,
with SQS FIFO message groups as lanes. This tool runs it locally on emulators, and operates a
deployed stack or the local one: submit jobs, watch the status, tune live limits and start rates,
pause and resume a type, attach a workflow of your own as a job type, look at and redrive dead
letters, find a job, and run jobs as batches that tell when all of them have ended.`,
		Example: `  sfnlimit local up --info local.json            # a local stack, in another terminal
  sfnlimit submit --local local.json --type demo --id job-1 --input '{"seconds":1}'
  sfnlimit submit nightly.jsonl --batch nightly-2026-03-01 --wait --timeout 2h
  sfnlimit status --stack sfnlimit --region eu-west-1 --watch
  sfnlimit pause partner --reason "partner API down"; sfnlimit resume partner
  sfnlimit attach arn:aws:states:eu-west-1:123456789012:stateMachine:mine --type mine --limit 10
  sfnlimit completion bash > /etc/bash_completion.d/sfnlimit`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          commandArgs,
		RunE:          showHelp,
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(newDemo(), newLocal())
	root.AddCommand(newSubmit(), newStatus(), newConfig(), newPause(), newResume(), newAttach(), newDLQ(), newJob(), newBatch())
	return root
}

// commandArgs refuses arguments to a command that only groups others: they name no subcommand.
func commandArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
		if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
			msg += fmt.Sprintf(" (did you mean %q?)", s[0])
		}
		return usageError{errors.New(msg)}
	}
	return nil
}

// showHelp is what a command that groups others does when given no subcommand.
func showHelp(cmd *cobra.Command, _ []string) error { return cmd.Help() }

// usageArgs makes a positional-argument check's error a usage error (exit 2).
func usageArgs(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := check(cmd, args); err != nil {
			return usageError{err}
		}
		return nil
	}
}
