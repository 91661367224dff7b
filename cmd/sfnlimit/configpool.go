package main

import (
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/sfnlimit/sfnlimit/internal/lambda/config"
	"github.com/sfnlimit/sfnlimit/internal/tools/ops"
)

func newConfigPool(tgt *target) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "pool",
		Short: "Set or unset a shared pool's live cap",
		Long: `pool changes the live cap of a shared pool: a cap that the running jobs of all its member types
count toward together, beside each type's own limit. A type joins pools with
sfnlimit config set TYPE --pools P[+Q]; config get lists every pool, its cap, the cap's source and
its members.
` + targetHelp,
		Example: `  sfnlimit config pool set llm_api --cap 40
  sfnlimit config pool unset llm_api`,
		Args: commandArgs,
		RunE: showHelp,
	}
	cmd.AddCommand(newConfigPoolSet(tgt), newConfigPoolUnset(tgt))
	return cmd
}

func newConfigPoolSet(tgt *target) *cobra.Command {
	var (
		capN   int
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "set NAME --cap N",
		Short: "Set a pool's live cap, over the Pools parameter's",
		Long: `set writes the live cap of pool NAME (1-40 characters of A-Z a-z 0-9 _, as a type's name): at most
N (1-` + strconv.Itoa(config.MaxPoolCap) + `) jobs of all its member types run at once. It replaces the pool's Pools entry,
if any, until config pool unset. The functions pick it up within ConfigCacheSeconds; a raise wakes
the pool's waiting jobs at once, one per slot it adds, fairly across its members (if that fails,
set says so and exits 1, and the releaser's sweep wakes them within a minute). A pool no type is in
caps nothing until one joins it (config set TYPE --pools NAME); set says so.
` + targetHelp,
		Example: `  sfnlimit config pool set llm_api --cap 40
  sfnlimit config pool set pay --cap 20 --json`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("cap") {
				return usageError{fmt.Errorf("config pool set needs --cap N, the pool's cap (1-%d); config pool unset removes a live cap", config.MaxPoolCap)}
			}
			if err := ops.ValidatePoolArg(args[0], &capN); err != nil {
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
			res, err := e.SetPool(ctx, args[0], capN, w)
			return s.printDone(cmd.OutOrStdout(), asJSON, res.After.Name != "", res, res.WriteTable, err)
		},
	}
	cmd.Flags().IntVar(&capN, "cap", 0, "jobs of all the pool's member types running at once, 1-"+strconv.Itoa(config.MaxPoolCap))
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func newConfigPoolUnset(tgt *target) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "unset NAME",
		Short: "Remove a pool's live cap, so the Pools parameter's applies again",
		Long: `unset deletes the live cap of pool NAME. Its Pools entry applies again within ConfigCacheSeconds;
a pool without one caps nothing, and its member types run on their own limits (unset says so).
When that leaves the pool more room, its waiting jobs are woken at once, as by set.
` + targetHelp,
		Example: `  sfnlimit config pool unset llm_api`,
		Args:    usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := ops.ValidatePoolArg(args[0], nil); err != nil {
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
			res, err := e.UnsetPool(ctx, args[0], w)
			return s.printDone(cmd.OutOrStdout(), asJSON, res.After.Name != "", res, res.WriteTable, err)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
