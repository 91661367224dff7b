package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sfnlimit/sfnlimit/internal/tools/ops"
	"github.com/sfnlimit/sfnlimit/internal/tools/resources"
)

func newDLQ() *cobra.Command {
	var tgt target
	cmd := &cobra.Command{
		Use:   "dlq",
		Short: "List dead letters and send them back to the general queue",
		Long: `dlq looks at the dead-letter queue: jobs the router refused (with a reason), jobs out of attempts,
stopped jobs, and general-queue messages the router failed on 5 times (receive_count_exceeded).
` + targetHelp,
		Example: `  sfnlimit dlq list
  sfnlimit dlq redrive --type payments --reason attempts_exhausted`,
		Args: commandArgs,
		RunE: showHelp,
	}
	registerTarget(cmd, &tgt)
	cmd.AddCommand(newDLQList(&tgt), newDLQRedrive(&tgt))
	return cmd
}

// dlqFilter holds the flags that pick dead letters.
type dlqFilter struct {
	types, reasons, ids []string
	max                 int
}

func (f *dlqFilter) register(fs *pflag.FlagSet, maxDefault int, maxHelp string) {
	fs.StringSliceVar(&f.types, "type", nil, "only dead letters of these types (repeatable, or comma separated)")
	fs.StringSliceVar(&f.reasons, "reason", nil, "only dead letters with these reasons: "+strings.Join(ops.Reasons, ", "))
	fs.StringSliceVar(&f.ids, "id", nil, "only dead letters of these job ids")
	fs.IntVar(&f.max, "max", maxDefault, maxHelp)
}

func (f *dlqFilter) filter() (ops.Filter, error) {
	if f.max < 0 {
		return ops.Filter{}, usageError{fmt.Errorf("--max %d must be 0 (all) or more", f.max)}
	}
	for _, t := range f.types {
		if err := ops.ValidateTypeArg(t); err != nil {
			return ops.Filter{}, err
		}
	}
	if err := ops.ValidateReasons(f.reasons); err != nil {
		return ops.Filter{}, err
	}
	return ops.Filter{Types: f.types, Reasons: f.reasons, IDs: f.ids}, nil
}

// deadLetters opens the dead-letter queue; hold is how long a scan keeps the messages it looked at.
func (t *target) deadLetters(ctx context.Context, hold time.Duration) (*session, ops.DLQ, error) {
	s, err := t.session(ctx)
	if err != nil {
		return nil, ops.DLQ{}, err
	}
	outs, err := s.t.Outputs(ctx, resources.DeadLetterQueueURL, resources.GeneralQueueURL)
	if err != nil {
		return nil, ops.DLQ{}, s.explain(err)
	}
	d := ops.DLQ{SQS: s.sqs, URL: outs[resources.DeadLetterQueueURL], General: outs[resources.GeneralQueueURL], Hold: hold}
	// A stack deployed before this output has none: the router's held copies SQS moved there are
	// then read as the router's (their SenderId's).
	if v, err := s.t.Output(ctx, resources.RouterRoleID); err == nil {
		d.Router = v
	}
	return s, d, nil
}

func newDLQList(tgt *target) *cobra.Command {
	var (
		f      dlqFilter
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List dead letters without consuming them",
		Long: `list shows the dead letters, oldest first: age, reason, type, key, job id, sender, attempt, which function
sent it and the error. It reads them without consuming them: each message is received with a short
visibility timeout (60 s) and made visible again at the end, so while it runs other readers do not
see them, and if it is killed they come back after the timeout. --json adds the cause and the body.
` + targetHelp,
		Example: `  sfnlimit dlq list
  sfnlimit dlq list --type payments --reason attempts_exhausted
  sfnlimit dlq list --json | jq -r '.deadLetters[].body'`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			flt, err := f.filter()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			s, d, err := tgt.deadLetters(ctx, time.Minute)
			if err != nil {
				return err
			}
			list, total, err := d.List(ctx, flt, f.max)
			if err != nil {
				return s.explain(err)
			}
			out := cmd.OutOrStdout()
			if asJSON {
				if list == nil {
					list = []ops.DeadLetter{}
				}
				return print(out, true, struct {
					Seen        int              `json:"seen"`
					DeadLetters []ops.DeadLetter `json:"deadLetters"`
				}{total, list}, nil)
			}
			return ops.WriteDeadLetters(out, list, total, time.Now())
		},
	}
	f.register(cmd.Flags(), 1000, "list at most this many (0: all)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON, with causes and bodies")
	return cmd
}

func newDLQRedrive(tgt *target) *cobra.Command {
	var (
		f                        dlqFilter
		asJSON, dryRun, skipType bool
	)
	cmd := &cobra.Command{
		Use:   "redrive",
		Short: "Send dead letters back to the general queue",
		Long: `redrive sends dead letters (all, or those that match --type, --reason and --id) back to the
general queue unchanged: a dead letter's body is the job as submitted, with "redrive": n, so it runs
again under fresh execution names. Each message is deleted from the dead-letter queue only after
its send succeeded; one whose send fails stays there, and one sent but not deleted stays in both
(redriving it again finds the same executions). Nothing is lost on a partial failure. Dead letters
whose body the router would refuse again (not JSON, bad type or id, a type with no limit) are left
and listed, and a job that fails again while the redrive runs is not sent a second time. It lists
each dead letter it moved (message id, type/id, reason), and counts those left: not matching the
filter, and matching but held back by --max (the scan stops once --max are chosen, so dead letters
after them are not looked at). Exit 1 if any matching dead letter was not moved for another reason
than --max. --dry-run makes the same decisions, the router's refusals included, lists what it
would move, and moves nothing (exit 1 if any matching dead letter would not be moved).
` + targetHelp,
		Example: `  sfnlimit dlq redrive --dry-run
  sfnlimit dlq redrive --reason attempts_exhausted --type payments
  sfnlimit config set reports --limit 5 && sfnlimit dlq redrive --reason unknown_type --type reports`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			flt, err := f.filter()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			s, d, err := tgt.deadLetters(ctx, 5*time.Minute)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			// A dry run goes through the same decisions as a redrive (filter, --max, the router's
			// refusals, once per run) and moves nothing.
			d.DryRun = dryRun
			// Who the redrive sends as: a batch job SQS moved here is redriven only by its sender.
			// Unknown (no sts:GetCallerIdentity), none of those is.
			if caller, err := s.t.Caller(ctx); err == nil {
				d.Caller = caller
			}
			if !skipType {
				r, _, _, err := s.resolver(ctx)
				if err != nil {
					return s.explain(fmt.Errorf("%w (--skip-type-check redrives without checking the types' limits)", err))
				}
				d.CheckType = ops.ResolverCheck(r)
			}
			errw := cmd.ErrOrStderr()
			res, err := d.Redrive(ctx, flt, f.max, func(n int) {
				if !asJSON && n > 0 && n%100 == 0 {
					fmt.Fprintf(errw, "redriven %d\n", n)
				}
			})
			if err != nil {
				return s.explain(err)
			}
			if err := print(out, asJSON, res, func(w io.Writer) error { return res.WriteTable(w) }); err != nil {
				return err
			}
			if n := len(res.SendFailed) + len(res.DeleteFailed) + len(res.Refused); n > 0 {
				if dryRun {
					return fmt.Errorf("dry run: %d matching dead letters would not be moved (see above)", n)
				}
				return fmt.Errorf("%d matching dead letters were not moved (see above)", n)
			}
			return nil
		},
	}
	f.register(cmd.Flags(), 0, "redrive at most this many (0: all)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "decide as a redrive would (refusals included) and list what it would send; move nothing")
	cmd.Flags().BoolVar(&skipType, "skip-type-check", false, "redrive jobs even of types with no limit (the router refuses them again)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
