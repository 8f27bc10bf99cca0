package main

import (
	"flag"

	"github.com/spf13/cobra"
)

// demoCommand wires demo.go's flags and entry point into cobra as they are.
func demoCommand() *cobra.Command {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	runDemo := demoFlags(fs)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Show a stale writer being stopped by its fencing token",
		Long: `Demo plays the classic failure of leases without fencing on the in-memory
backend: worker A takes a lease, stalls past it, worker B takes the key with a
larger token and writes, and A's late write is rejected by the store's token
check. It exits with status 0 when the stale write was rejected.`,
		Args: cobra.NoArgs,
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			return runDemo(cmd.Context(), cmd.OutOrStdout(), args)
		}),
	}
	cmd.Flags().AddGoFlagSet(fs)
	return cmd
}
