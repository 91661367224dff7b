package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
	"github.com/sfnlimit/sfnlimit/internal/lambda/waitroom"
	"github.com/sfnlimit/sfnlimit/internal/tools/ops"
	"github.com/sfnlimit/sfnlimit/internal/tools/resources"
)

func newStatus() *cobra.Command {
	var (
		tgt      target
		asJSON   bool
		watch    bool
		interval time.Duration
		keys     int
	)
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show each type's limit, the leases of its lanes, and the queues",
		Long: `status shows, per job type, its limit and where it comes from (default: the TypeLimits
parameter; fallback: DefaultLimit; override: a live config item), its lane strategy, how many lanes
its jobs hold (their leases, whatever their state; "9/4 over cap (lowered)" when they are more than
its limit, which was lowered while they ran), how many of its lanes are free (no lease) and its
oldest lease. A type configured with the retired least-loaded strategy is marked: it runs as
first-free. Then each type's leases lane by lane, status by status: bound (a first-free job bound
to the lane, its execution not yet started), started (its execution was started, or is being
started: status reads leases only; job show tells a running one), retrying and dead-lettering, each
with the lanes it holds. Then the queues: the general queue (jobs not yet routed), the lanes queue
(waiting, and in flight: holding a lane or heading a parked waiting group) and the dead-letter
queue. Queue counts are SQS's approximate ones: SQS cannot count one type's messages.
Once a type has keyed work (key caps, or jobs with a key holding a lane or waiting), the main table
gets a KEYS column (keys running, how many at their cap, how many over it, keys waiting), and each
such type where a key runs or waits gets a section: its keys running, most lanes first, with their
cap ("at its cap", or "6/3 over cap (lowered)" for a key whose cap was lowered below what it ran), and its keys
waiting, parked longest first, with what they wait for (a free lane, or their key to fall under its
cap); the first --keys of each (default 5; --json lists all). Jobs without a key are the default
key. Keys come from the leases and from the parked records of first-free types (a Query per type);
a key whose group is not parked (its next job not yet looked at) is not seen waiting.
With --watch it refreshes every --interval until interrupted (--json then prints one object a line).
` + targetHelp,
		Example: `  sfnlimit status
  sfnlimit status --watch --interval 5s
  sfnlimit status --json | jq '.types[] | select(.free == 0) | .type'
  sfnlimit status --json | jq -c '.types[] | {type, leases: [.leases[]? | [.lane, .status]]}'
  sfnlimit status --keys 20
  sfnlimit status --json | jq -c '.types[] | select(.keys) | {type, atCap: [.keys.running[] | select(.atCap) | .key]}'
  sfnlimit status --local local.json`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if keys < 0 {
				return usageError{fmt.Errorf("--keys %d must be 0 or more", keys)}
			}
			if interval < 100*time.Millisecond {
				return usageError{fmt.Errorf("--interval %s is too short (at least 100ms)", interval)}
			}
			s, err := tgt.session(ctx)
			if err != nil {
				return err
			}
			reader, err := s.statusReader(ctx)
			if err != nil {
				return s.explain(err)
			}
			out := cmd.OutOrStdout()
			clear := watch && !asJSON && isTerminal(out)
			for frame := 0; ; frame++ {
				st, err := reader.Read(ctx)
				if err != nil {
					if watch && ctx.Err() != nil {
						return nil
					}
					return s.explain(err)
				}
				switch {
				case asJSON:
					if err := json.NewEncoder(out).Encode(struct {
						Target string `json:"target"`
						ops.Status
					}{s.t.String(), st}); err != nil {
						return err
					}
				default:
					if clear {
						fmt.Fprint(out, "\033[H\033[2J")
					} else if frame > 0 {
						fmt.Fprintln(out)
					}
					fmt.Fprintf(out, "%s\n\n", s.t)
					if err := st.WriteTableKeys(out, keys); err != nil {
						return err
					}
				}
				if !watch {
					return nil
				}
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(interval):
				}
			}
		},
	}
	registerTarget(cmd, &tgt)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "refresh until interrupted")
	cmd.Flags().DurationVar(&interval, "interval", 2*time.Second, "refresh interval of --watch")
	cmd.Flags().IntVar(&keys, "keys", ops.KeysShown, "keys running and waiting listed per type with keyed work (0: the KEYS column only)")
	return cmd
}

// statusReader reads what the limiter is doing, for status and for what config reset would leave.
func (s *session) statusReader(ctx context.Context) (ops.StatusReader, error) {
	outs, err := s.t.Outputs(ctx, resources.GeneralQueueURL, resources.LanesQueueURL, resources.DeadLetterQueueURL, resources.TableName)
	if err != nil {
		return ops.StatusReader{}, err
	}
	d, _, err := s.t.Defaults(ctx)
	if err != nil {
		return ops.StatusReader{}, err
	}
	return ops.StatusReader{
		SQS: s.sqs, Leases: lease.ReadOnly(lease.NewStore(s.ddb, outs[resources.TableName])),
		Defaults: d, Overrides: config.NewDynamoStore(s.ddb, outs[resources.TableName]),
		Parked:  waitroom.NewStore(s.ddb, outs[resources.TableName]),
		General: outs[resources.GeneralQueueURL], Lanes: outs[resources.LanesQueueURL], DeadQueue: outs[resources.DeadLetterQueueURL],
	}, nil
}
