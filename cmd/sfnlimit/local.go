package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sfnlimit/sfnlimit/internal/tools/local/stack"
	"github.com/sfnlimit/sfnlimit/internal/tools/samconfig"
)

func newLocal() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "local",
		Short:   "Run the limiter on local emulators",
		Example: "  sfnlimit local up --info local.json --limits payments=2,reports=5",
	}
	cmd.AddCommand(newLocalUp())
	return cmd
}

func newLocalUp() *cobra.Command {
	var (
		info     string
		params   []string
		limits   string
		fauxqs   bool
		force    bool
		verbose  bool
		dropRate float64
		samcfg   string
		cfgEnv   string
	)
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Run the local stack in the foreground until interrupted",
		Long: `up reads the template parameters samconfig.toml deploys with (--param and --limits override
them), starts moto (and fauxqs with --fauxqs), creates template.yaml's queues, table and state
machine on them, and runs the router, starter and releaser handlers with Lambda's event-source
semantics and EventBridge's status events, until SIGINT or SIGTERM. It writes the endpoint, region and
the template's Outputs as JSON to --info, so any AWS client can use the stack, and removes that file
when it stops (unless another stack wrote it since). An --info file that names a stack still
running (it answers at its endpoint), that another local up claims (it holds FILE.lock from its
start until it stops), or that is not an info file, is refused before anything starts (exit 2):
overwriting it would leave that stack running but unreachable through it. --force writes it
anyway. The file of a stack that stopped is replaced.

  aws --endpoint-url "$(jq -r .endpoint local.json)" --region us-east-1 sqs send-message \
    --queue-url "$(jq -r .outputs.GeneralQueueUrl local.json)" \
    --message-body '{"type":"demo","id":"job-1","input":{"seconds":3}}'`,
		Example: `  sfnlimit local up --info local.json
  sfnlimit local up --info local.json --limits payments=2,reports=5 --fauxqs
  sfnlimit local up --info local.json --param FifoVisibilityTimeout=60`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Parameters as sam deploy would use them, then the flags.
			p, err := samconfig.ParametersIfPresent(samcfg, cfgEnv)
			if err != nil {
				return err
			}
			for _, kv := range params {
				k, v, ok := strings.Cut(kv, "=")
				if !ok {
					return usageError{fmt.Errorf("--param %q is not Name=Value", kv)}
				}
				p[k] = v
			}
			if limits != "" {
				p["TypeLimits"] = limits
			}
			if info != "" {
				// Claimed from here until the stack stops, so that another local up with the
				// same --info, started before this one writes the file, is refused.
				claim, err := stack.ClaimInfoFile(cmd.Context(), info, force)
				var inUse *stack.InfoFileInUseError
				switch {
				case errors.As(err, &inUse):
					return usageError{fmt.Errorf("%w, or add --force to write it anyway", err)}
				case err != nil:
					return err
				case claim.Stale != nil:
					fmt.Fprintf(cmd.OutOrStdout(), "replacing info file %s: the stack it names (%s) no longer answers\n", info, claim.Stale.Endpoint)
				}
				defer claim.Release()
			}
			level := slog.LevelWarn
			if verbose {
				level = slog.LevelInfo
			}
			log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
			ctx := cmd.Context()
			began := time.Now()
			for _, k := range []string{"TypeLimits", "DefaultLimit"} {
				if v, ok := p[k]; ok {
					fmt.Fprintf(cmd.OutOrStdout(), "%s=%s\n", k, v)
				}
			}
			s, err := stack.Start(ctx, stack.Options{Parameters: p, Fauxqs: fauxqs, Log: log, EventDropRate: dropRate})
			if err != nil {
				return err
			}
			defer s.Close()
			if err := s.StartRuntime(ctx); err != nil {
				return err
			}
			if info != "" {
				f, err := os.Create(info)
				if err != nil {
					return fmt.Errorf("write info file: %w", err)
				}
				if err := s.Info().WriteJSON(f); err != nil {
					f.Close()
					return fmt.Errorf("write info file: %w", err)
				}
				if err := f.Close(); err != nil {
					return fmt.Errorf("write info file: %w", err)
				}
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "sfnlimit local stack up in %.1fs at %s (region %s)\n", time.Since(began).Seconds(), s.Info().Endpoint, s.Info().Region)
			fmt.Fprintf(out, "  general queue: %s\n  state machine: %s\n", s.Info().Output("GeneralQueueUrl"), s.Info().Output("SampleStateMachineArn"))
			if info != "" {
				fmt.Fprintf(out, "  info: %s\n", info)
			}
			fmt.Fprintln(out, "Press Ctrl-C to stop.")
			<-ctx.Done()
			fmt.Fprintln(out, "stopping: pollers stop, unhandled messages go back to their queues")
			s.StopRuntime()
			if info != "" {
				_ = stack.RemoveInfoFile(info, s.Info().Endpoint)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&info, "info", "", "write the endpoint, region and Outputs as JSON to this file (removed on exit); refused if it names a stack still running")
	cmd.Flags().StringArrayVar(&params, "param", nil, "override a template parameter, Name=Value (repeatable)")
	cmd.Flags().StringVar(&limits, "limits", "", "per-type limits, as the TypeLimits parameter (type=n,...); overrides samconfig.toml")
	cmd.Flags().StringVar(&samcfg, "samconfig", "samconfig.toml", "read parameter_overrides from this samconfig file (skipped if absent)")
	cmd.Flags().StringVar(&cfgEnv, "config-env", "default", "samconfig environment to read")
	cmd.Flags().BoolVar(&fauxqs, "fauxqs", false, "run SQS on fauxqs instead of moto")
	cmd.Flags().BoolVar(&force, "force", false, "write --info even over the file of a stack still running, or a file that is not an info file")
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "log every handler line (JSON) to stderr")
	cmd.Flags().Float64Var(&dropRate, "drop-status-events", 0, "share of status-change events not delivered (exercises the sweep)")
	return cmd
}
