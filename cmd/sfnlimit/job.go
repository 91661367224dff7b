package main

import (
	"errors"
	"io"

	"github.com/spf13/cobra"

	"github.com/sfnlimit/sfnlimit/internal/lambda/admission"
	"github.com/sfnlimit/sfnlimit/internal/lambda/job"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
	"github.com/sfnlimit/sfnlimit/internal/tools/ops"
	"github.com/sfnlimit/sfnlimit/internal/tools/resources"
)

func newJob() *cobra.Command {
	var tgt target
	cmd := &cobra.Command{
		Use:   "job",
		Short: "Find a job",
		Long: `job finds a job from its lease and its executions.
` + targetHelp,
		Example: `  sfnlimit job show order-1234 --type payments`,
		Args:    commandArgs,
		RunE:    showHelp,
	}
	registerTarget(cmd, &tgt)
	cmd.AddCommand(newJobShow(&tgt))
	return cmd
}

func newJobShow(tgt *target) *cobra.Command {
	var (
		typ    string
		key    string
		sender string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "show ID [--type TYPE] [--key KEY] [--sender SENDER]",
		Short: "Show a job's lane, attempts, executions and state",
		Long: `show finds a job by its id: the lease of the lane it holds (lane, status, attempt, execution),
and its executions, found by their deterministic names ({type}-{id}-{attempt}, and the redriven
runs' names) with DescribeExecution: status, start and stop, error. It works out the job's state:
bound (a first-free job bound to a lane, its execution not yet started), starting (its execution
not found yet), running, retrying, dead-lettering (it holds a lane), succeeded, dead-lettered,
cancelled (stopped by a newer job of its key, overflow rule cancel: the detail names that job),
skipped (ended without running, its key at its cap with an older job of its sender holding a lane,
overflow rule skip: the detail names that job; not dead-lettered), or not-started (no lease, no
execution: it waits in a queue, was refused, or was never sent). Without
--type, every type with a limit or a lease is searched. It names the job's concurrency key (from
its lease, else its last execution's input), with the cap that key has now when the type caps
keys. A job is its type, sender, key and id: --key names a tenant's job (without it, the job of the
default key, and the job of any key that holds a lane). The sender is the principal that sent the
job (for an operator's dlq redrive, "{operator}>{producer}"); an execution's name hashes it in, so a
job is found only under senders looked for: --sender names one, and without it show lists every
match of a job without a sender (sent before senders were part of a job), your own (the principal
of your credentials, as for batches) and any sender's job that holds a lane. Exit 1 if the job is
not found.
` + targetHelp,
		Example: `  sfnlimit job show order-1234 --type payments
  sfnlimit job show order-1234
  sfnlimit job show order-1234 --type payments --json | jq -r '.[0].executions[-1].status'
  sfnlimit job show order-1234 --json | jq -r '.[0].key'
  sfnlimit job show doc-1 --type llm --key acme
  sfnlimit job show doc-1 --type llm --key acme --sender AROAEXAMPLEPRODUCER`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if typ != "" {
				if err := ops.ValidateTypeArg(typ); err != nil {
					return err
				}
			}
			if err := job.ValidateID(args[0]); err != nil {
				return usageError{err}
			}
			if err := job.ValidateKey(key); err != nil {
				return usageError{err}
			}
			if err := job.ValidateSender(sender); err != nil {
				return usageError{err}
			}
			ctx := cmd.Context()
			s, err := tgt.session(ctx)
			if err != nil {
				return err
			}
			r, d, _, err := s.resolver(ctx)
			if err != nil {
				return s.explain(err)
			}
			table, err := s.t.Output(ctx, resources.TableName)
			if err != nil {
				return s.explain(err)
			}
			f := ops.JobFinder{Leases: lease.ReadOnly(lease.NewStore(s.ddb, table)), SFN: s.sfn, Admission: admission.NewStore(s.ddb, table), Config: r, Defaults: d}
			if sender != "" {
				f.Senders = []string{sender}
			} else if caller, err := s.t.Caller(ctx); err == nil {
				f.Caller = caller // unknown (no sts:GetCallerIdentity): not looked for
			}
			views, err := f.Show(ctx, typ, key, args[0])
			if err != nil && !errors.Is(err, ops.ErrJobNotFound) {
				return s.explain(err)
			}
			if views == nil {
				views = []ops.JobView{}
			}
			if perr := print(cmd.OutOrStdout(), asJSON, views, func(w io.Writer) error { return ops.WriteJobs(w, views) }); perr != nil {
				return perr
			}
			return err
		},
	}
	cmd.Flags().StringVar(&typ, "type", "", "the job's type (default: search every type)")
	cmd.Flags().StringVar(&key, "key", "", "the job's concurrency key (default: the default key, and any key holding a lane)")
	cmd.Flags().StringVar(&sender, "sender", "", "the job's sender, a principal (default: no sender, yours, and any holding a lane)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	_ = cmd.RegisterFlagCompletionFunc("type", completeTypes(tgt))
	return cmd
}
