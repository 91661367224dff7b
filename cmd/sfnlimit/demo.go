package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lane"
	"github.com/sfnlimit/sfnlimit/internal/tools/demo"
)

func newDemo() *cobra.Command {
	var (
		out      string
		sqsEmu   string
		fauxqs   bool
		timeout  time.Duration
		scale    float64
		strategy string
		release  string
	)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run a mixed workload on the local stack and report what the limiter did",
		Long: `demo starts the local stack (moto, with SQS on fauxqs unless --sqs moto), submits three job types with
limits 2, 5 and 10 (varied durations, some failing, a few malformed; llm on the bare workflow released
by its status events, the others on the sample workflow released by its Release state), shows each type's running
executions against its limit while they run, and ends with a report: peak concurrency per type,
outcomes, utilization while backlogged, waits, API calls per job and cost per million jobs. It also
writes report.md, report.json, concurrency.svg (a chart) and limiter.log to --out.`,
		Example: `  sfnlimit demo
  sfnlimit demo --out /tmp/demo --sqs moto   # SQS on moto too
  sfnlimit demo --scale 0.5   # half the jobs
  sfnlimit demo --strategy random   # the same jobs on another lane strategy
  sfnlimit demo --release events    # every type on the bare workflow, released by status events`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if strategy != "" {
				s, err := lane.CheckChoosable(strategy)
				if err != nil {
					return usageError{fmt.Errorf("--strategy: %w", err)}
				}
				strategy = s // the template's AllowedValues know no alias
			}
			switch {
			case fauxqs:
				sqsEmu = "fauxqs"
			case sqsEmu != "fauxqs" && sqsEmu != "moto":
				return usageError{fmt.Errorf("--sqs %q: want fauxqs or moto", sqsEmu)}
			}
			if release != "" {
				if _, err := config.ParseReleaseMode(release); err != nil {
					return usageError{fmt.Errorf("--release: %w", err)}
				}
			}
			w := demo.DefaultWorkload()
			for i := range w.Types {
				w.Types[i].Jobs = max(1, int(float64(w.Types[i].Jobs)*scale))
			}
			rep, err := demo.Run(cmd.Context(), demo.Options{
				Workload: w, OutDir: out, Fauxqs: sqsEmu == "fauxqs", Timeout: timeout,
				Out: cmd.OutOrStdout(), Live: term.IsTerminal(int(os.Stdout.Fd())), Strategy: strategy, Release: release,
			})
			if err != nil {
				return err
			}
			if !rep.LimitHeld || len(rep.Mismatches) > 0 {
				return errDemoFailed
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "out/demo", "directory for the report, chart and logs")
	// fauxqs by default: it keeps SQS's receipt-handle rules and, in its own process, leaves moto's one
	// core to DynamoDB and Step Functions, so the demo measures the limiter more than the emulator.
	cmd.Flags().StringVar(&sqsEmu, "sqs", "fauxqs", "SQS emulator: fauxqs (stricter about receipt handles, faster) or moto")
	cmd.Flags().BoolVar(&fauxqs, "fauxqs", false, "same as --sqs fauxqs")
	_ = cmd.Flags().MarkDeprecated("fauxqs", "fauxqs is the default; use --sqs moto for moto")
	_ = cmd.RegisterFlagCompletionFunc("sqs", cobra.FixedCompletions([]string{"fauxqs", "moto"}, cobra.ShellCompDirectiveNoFileComp))
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Minute, "give up after this long")
	cmd.Flags().Float64Var(&scale, "scale", 1, "multiply the number of jobs of each type")
	cmd.Flags().StringVar(&strategy, "strategy", "", "lane strategy of every type: "+strings.Join(lane.Strategies, ", ")+" (default: the template's)")
	_ = cmd.RegisterFlagCompletionFunc("strategy", completeStrategies)
	cmd.Flags().StringVar(&release, "release", "", "release mode of every type: step (the sample workflow's Release state) or events (the bare workflow, released by its status events); default: llm events, the others step")
	_ = cmd.RegisterFlagCompletionFunc("release", cobra.FixedCompletions(config.ReleaseModes, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

type demoError string

func (e demoError) Error() string { return string(e) }

const errDemoFailed = demoError("the demo found a broken limit or a job that did not end as expected (see the report)")
