package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/tools/ops"
	"github.com/sfnlimit/sfnlimit/internal/tools/resources"
	"github.com/sfnlimit/sfnlimit/internal/tools/samconfig"
)

func newAttach() *cobra.Command {
	var (
		tgt             target
		typ, release    string
		limit, attempts int
		asJSON          bool
	)
	cmd := &cobra.Command{
		Use:   "attach STATE_MACHINE_ARN --type TYPE --limit N [--release events|step] [--max-attempts K]",
		Short: "Limit a Standard workflow of your own as a job type, after checking what would stop it",
		Long: `attach makes a Standard workflow a job type: it checks everything it can, says what it found,
and writes the type's live override (limit, state machine, release mode, and attempts if given; a
stored lane strategy stays) only if nothing stops the type from running:

  - the state machine exists (DescribeStateMachine), is STANDARD and ACTIVE, and is in the stack's
    region and account. Express workflows are refused: they send no status events, and their starts
    are neither idempotent by name nor visible to DescribeExecution, which the limiter relies on;
  - the stack's roles may start it: it is the stack's own sample or bare workflow, or listed in the
    stack's ExtraStateMachineArns parameter (DescribeStacks; for --local, the parameters the local
    stack runs with). The status-change rules match the same list. If it is not listed, attach
    writes nothing and prints the command that redeploys the stack with it added (sam deploy, or
    sfnlimit local up for the local stack); run attach again after it;
  - the limits, with the new one, stay under the SQS FIFO in-flight quota of 120,000; a warning when
    they outgrow what Step Functions' StartExecution quota starts at once;
  - the release mode fits the workflow: events (the default: the execution's own status-change
    event releases its lane, so the workflow runs unchanged) or step (its Release state calls the
    releaser, the lower handover latency); a warning when its definition says otherwise.

Then it shows the configuration and how to submit a job. A refusal writes nothing and exits 1.
` + targetHelp,
		Example: `  sfnlimit attach arn:aws:states:eu-west-1:123456789012:stateMachine:thumbnails --type thumbs --limit 20
  sfnlimit attach arn:aws:states:eu-west-1:123456789012:stateMachine:reports --type reports --limit 5 --release step
  sfnlimit attach "$(jq -r .outputs.SampleStateMachineArn local.json)" --type demo2 --limit 2 --local local.json`,
		Args:              usageArgs(cobra.ExactArgs(1)),
		ValidArgsFunction: cobra.NoFileCompletions,
		RunE: func(cmd *cobra.Command, args []string) error {
			a := ops.Attach{StateMachineArn: args[0], Type: typ, Limit: limit, Release: release}
			if cmd.Flags().Changed("release") && release == "" {
				return usageError{fmt.Errorf("--release needs a mode (known: %s)", strings.Join(config.ReleaseModes, ", "))}
			}
			if cmd.Flags().Changed("max-attempts") {
				a.MaxAttempts = &attempts
			}
			if err := a.Validate(); err != nil {
				return err
			}
			ctx := cmd.Context()
			s, e, err := tgt.editor(ctx)
			if err != nil {
				return err
			}
			e.Stack = s.stackAccess(ctx, &tgt)
			res, err := e.Attach(ctx, a)
			if res.Written != nil {
				res.Submit = submitLine(&tgt, a.Type)
			}
			if len(res.Checks) > 0 {
				if perr := print(cmd.OutOrStdout(), asJSON, res, res.WriteTable); perr != nil && err == nil {
					err = perr
				}
			}
			if errors.Is(err, ops.ErrAttachRefused) {
				return err
			}
			return s.explain(err)
		},
	}
	registerTarget(cmd, &tgt)
	cmd.Flags().StringVar(&typ, "type", "", "the job type to run it as (1-40 characters of A-Z a-z 0-9 _)")
	cmd.Flags().IntVar(&limit, "limit", 0, "lanes: executions of the type at once")
	cmd.Flags().StringVar(&release, "release", "", "how its lanes are released: events (default) or step")
	cmd.Flags().IntVar(&attempts, "max-attempts", 0, "executions per job before it is dead-lettered, 1-999 (default: the type's current, else DefaultMaxAttempts)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	_ = cmd.RegisterFlagCompletionFunc("release", completeReleaseModes)
	_ = cmd.RegisterFlagCompletionFunc("type", completeTypes(&tgt))
	return cmd
}

// stackAccess reads what the stack lets the limiter start: its own state machines (outputs), the
// ExtraStateMachineArns parameter, and how to redeploy it with another one listed.
func (s *session) stackAccess(ctx context.Context, tgt *target) *ops.StackAccess {
	a := &ops.StackAccess{Own: map[string]string{}, Region: s.t.Config.Region}
	// A stack deployed before the bare workflow has no such output: it simply is not one of them.
	for _, name := range []string{resources.SampleStateMachineArn, resources.BareStateMachineArn} {
		if v, err := s.t.Output(ctx, name); err == nil {
			a.Own[name] = v
		}
	}
	if v, err := s.t.Output(ctx, resources.ReleaserFunctionName); err == nil {
		a.Releaser = v
	}
	params, err := s.t.Parameters(ctx)
	if err != nil {
		a.ExtraErr = s.explain(err)
	} else {
		a.Extra = ops.ParseArnList(params[resources.ExtraStateMachineArns])
	}
	a.Status = s.t.StackStatus()
	if s.t.Kind == resources.Local {
		a.Redeploy = ops.LocalUp{Info: s.t.Name, Params: params}.Command
		a.RedeployNotes = []string{"the local stack starts empty each time: stop it, start it with that line, create your state machine in it again"}
		return a
	}
	a.Redeploy = ops.SamDeploy{Stack: s.t.Name, Region: s.t.Config.Region, Profile: tgt.profile, ConfigEnv: tgt.configEnv}.Command
	a.RedeployNotes = []string{"parameters not on that line keep the stack's current values; it replaces samconfig.toml's parameter_overrides for this deploy"}
	if p, err := samconfig.ParametersIfPresent(tgt.samconfig, tgt.configEnv); err == nil {
		if _, ok := p[resources.ExtraStateMachineArns]; ok {
			a.RedeployNotes = append(a.RedeployNotes, tgt.samconfig+" sets ExtraStateMachineArns too: change it there as well, or the next plain sam deploy takes it back")
		}
	}
	return a
}

// submitLine is a command that submits one job of typ to the limiter the command was given.
func submitLine(tgt *target, typ string) string {
	parts := []string{"sfnlimit", "submit", "--type", typ, "--id", "job-1", "--input", "'{}'"}
	return strings.Join(append(parts, tgt.flagArgs()...), " ")
}
