// Command sfnlimit runs the limiter locally (the demo and a local stack) and, against a deployed
// stack or a local one, helps operators submit, watch and tune it.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

// Exit codes.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := newRoot()
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "sfnlimit:", err)
		var ue usageError
		if errors.As(err, &ue) {
			os.Exit(exitUsage)
		}
		os.Exit(exitError)
	}
}

type usageError struct{ error }

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "sfnlimit",
		Short: "Cap how many Step Functions executions of each job type run at once",
		Long: `sfnlimit caps how many AWS Step Functions executions of each job type run at once,
with SQS FIFO message groups as lanes. This tool runs it locally on emulators.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(newDemo(), newLocal())
	return root
}
