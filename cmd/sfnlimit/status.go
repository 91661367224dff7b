package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/sfnlimit/sfnlimit/internal/config"
	"github.com/sfnlimit/sfnlimit/internal/lease"
	"github.com/sfnlimit/sfnlimit/internal/occupancy"
	"github.com/sfnlimit/sfnlimit/internal/ops"
	"github.com/sfnlimit/sfnlimit/internal/resources"
)

func newStatus() *cobra.Command {
	var (
		tgt      target
		asJSON   bool
		watch    bool
		interval time.Duration
	)
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show each type's limit, running jobs and lane counts, and the queues",
		Long: `status shows, per job type, its limit and where it comes from (default: the TypeLimits
parameter; fallback: DefaultLimit; override: a live config item), its lane strategy, how many lanes
its jobs hold now (their leases, whatever their state) and its oldest running job. For a type on
the least-loaded strategy it then shows the jobs queued or running in each lane, as the router
counts them (one DynamoDB query per type); past 20 lanes, their min, mean and max and the busiest
lanes. The random strategy keeps no counts. Then the queues: the general queue (jobs not yet
routed), the lanes queue (waiting for a lane, and in flight: started and holding their lane) and
the dead-letter queue. Queue counts are SQS's approximate ones.
With --watch it refreshes every --interval until interrupted (--json then prints one object a line).
` + targetHelp,
		Example: `  sfnlimit status
  sfnlimit status --watch --interval 5s
  sfnlimit status --json | jq '.types[] | select(.running == .limit)'
  sfnlimit status --json | jq '.types[] | {type, lanes: .laneCounts.counts}'
  sfnlimit status --local local.json`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
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
					if err := st.WriteTable(out); err != nil {
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
	store := config.NewDynamoStore(s.ddb, outs[resources.TableName])
	return ops.StatusReader{
		SQS: s.sqs, Leases: lease.ReadOnly(lease.NewStore(s.ddb, outs[resources.TableName])),
		Occupancy: occupancy.NewStore(s.ddb, outs[resources.TableName]),
		// A fresh resolver each time: status shows the overrides as stored now.
		Config: func(ctx context.Context) ([]config.TypeConfig, error) {
			r, err := config.NewResolver(d, store, time.Second)
			if err != nil {
				return nil, err
			}
			return r.All(ctx)
		},
		General: outs[resources.GeneralQueueURL], Lanes: outs[resources.LanesQueueURL], DeadQueue: outs[resources.DeadLetterQueueURL],
	}, nil
}
