package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/lambda/lease"
	"github.com/sfnlimit/sfnlimit/internal/lambda/pool"
	"github.com/sfnlimit/sfnlimit/internal/lambda/waitroom"
	"github.com/sfnlimit/sfnlimit/internal/tools/ops"
	"github.com/sfnlimit/sfnlimit/internal/tools/resources"
)

// Flow control from the command line (issue 14): pause and resume. A type's start rate is set with
// config set --rate, and a job's priority with submit --priority.

func newPause() *cobra.Command {
	var (
		tgt    target
		reason string
		pool   string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "pause TYPE [--reason TEXT] | pause --pool POOL [--reason TEXT]",
		Short: "Stop a type's new starts; its running jobs finish and its waiting jobs wait",
		Long: `pause stops the new starts of a type, live, for an incident or a partner's outage. It writes a
pause into the type's live override; within ConfigCacheSeconds no new execution of the type starts.
Its running executions finish and release their lanes as usual. Its waiting jobs wait in their
queue, in order: none is dead-lettered, no attempt is used, and none expires unless it waits longer
than the lanes queue's retention (14 days since it was submitted). Each waiting group's first job is
parked for 15 minutes at a time, so a long pause costs a few SQS calls per group an hour, however
many jobs wait. New jobs of the type are still accepted and wait too.
--reason says why (at most 200 characters, no control characters); status and config get show it
with how long the type has been paused, and the stack's paused alarm fires once a pause is older
than PauseAlarmSeconds. Pausing a paused type keeps the time its pause began and, with --reason,
replaces the reason. resume starts the type again. --pool POOL pauses every member type of the
pool (as the config names them now), one by one; resume --pool POOL resumes them.
` + targetHelp,
		Example: `  sfnlimit pause partner --reason "partner API down, INC-4711"
  sfnlimit pause reports                                  # no reason
  sfnlimit pause partner --reason "still down, ETA 14:00"  # a new reason, the same start
  sfnlimit status                                         # PAUSED: how long, and why
  sfnlimit resume partner
  sfnlimit pause --pool llm_api --reason "provider incident"`,
		Args:              usageArgs(cobra.MaximumNArgs(1)),
		ValidArgsFunction: completeTypeArg(&tgt),
		RunE: func(cmd *cobra.Command, args []string) error {
			types, err := typesOrPool(cmd, &tgt, args, pool)
			if err != nil {
				return err
			}
			var why *string
			if cmd.Flags().Changed("reason") {
				if err := ops.ValidatePauseReason(types[0], reason); err != nil {
					return err
				}
				why = &reason
			}
			ctx := cmd.Context()
			s, e, err := tgt.editor(ctx)
			if err != nil {
				return err
			}
			for _, typ := range types {
				res, err := e.Pause(ctx, typ, why)
				if err != nil {
					return s.explain(err)
				}
				if err := print(cmd.OutOrStdout(), asJSON, res, res.WriteTable); err != nil {
					return err
				}
			}
			return nil
		},
	}
	registerTarget(cmd, &tgt)
	cmd.Flags().StringVar(&reason, "reason", "", "why the type is paused, shown by status and config get (at most 200 characters)")
	cmd.Flags().StringVar(&pool, "pool", "", "pause every member type of this pool instead of one type")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func newResume() *cobra.Command {
	var (
		tgt    target
		pool   string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "resume TYPE | resume --pool POOL",
		Short: "Start a paused type again, its waiting jobs first",
		Long: `resume lifts a type's pause (from its live override; the item goes if the pause was all it held)
and wakes at once the type's waiting groups parked by the pause, so their jobs bind to free lanes
again without waiting out their park: higher priority and older first, and the jobs behind each
group's first follow in the group's order. It says how long the type was paused and how many
groups it woke. Functions that read the config in the last ConfigCacheSeconds start new jobs once
they read it again. If the wake-up fails after the pause is lifted, it says so and exits 1: the
releaser's sweep wakes those groups within a minute, and resume can be run again.
Resuming a type that is not paused changes nothing and exits 0; it still wakes any group an
earlier, interrupted resume left parked.
` + targetHelp,
		Example: `  sfnlimit resume partner
  sfnlimit resume partner --json | jq .woken
  sfnlimit resume --pool llm_api`,
		Args:              usageArgs(cobra.MaximumNArgs(1)),
		ValidArgsFunction: completeTypeArg(&tgt),
		RunE: func(cmd *cobra.Command, args []string) error {
			types, err := typesOrPool(cmd, &tgt, args, pool)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			s, e, err := tgt.editor(ctx)
			if err != nil {
				return err
			}
			w, err := s.waker(ctx)
			if err != nil {
				return s.explain(err)
			}
			for _, typ := range types {
				res, err := e.Resume(ctx, typ, w)
				if err := s.printDone(cmd.OutOrStdout(), asJSON, res.Type != "", res, res.WriteTable, err); err != nil {
					return err
				}
			}
			return nil
		},
	}
	registerTarget(cmd, &tgt)
	cmd.Flags().StringVar(&pool, "pool", "", "resume every member type of this pool instead of one type")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// typesOrPool returns the types a pause or resume acts on: its TYPE argument, or with --pool the
// pool's member types as the config names them now (exactly one of the two).
func typesOrPool(cmd *cobra.Command, tgt *target, args []string, pool string) ([]string, error) {
	switch {
	case pool != "" && len(args) > 0:
		return nil, ops.UsageError{Err: errors.New("give a TYPE or --pool POOL, not both")}
	case pool == "" && len(args) == 0:
		return nil, ops.UsageError{Err: errors.New("give a TYPE, or --pool POOL for every member type of a pool")}
	case pool == "":
		if err := ops.ValidateTypeArg(args[0]); err != nil {
			return nil, err
		}
		return args, nil
	}
	if err := config.ValidatePoolName(pool); err != nil {
		return nil, ops.UsageError{Err: fmt.Errorf("--pool: %w", err)}
	}
	s, e, err := tgt.editor(cmd.Context())
	if err != nil {
		return nil, err
	}
	types, err := e.PoolMembers(cmd.Context(), pool)
	if err != nil {
		return nil, s.explain(err)
	}
	return types, nil
}

// waker wakes parked jobs on the stack's lanes queue and table, as the releaser does (resume, and a
// raised pool cap).
func (s *session) waker(ctx context.Context) (ops.Waker, error) {
	outs, err := s.t.Outputs(ctx, resources.LanesQueueURL, resources.TableName)
	if err != nil {
		return ops.Waker{}, err
	}
	table := outs[resources.TableName]
	return ops.Waker{Queue: s.sqs, QueueURL: outs[resources.LanesQueueURL], WaitRoom: waitroom.NewStore(s.ddb, table),
		Leases: lease.NewStore(s.ddb, table), Pools: pool.NewStore(s.ddb, table)}, nil
}
