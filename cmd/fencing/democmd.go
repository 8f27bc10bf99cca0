package main

import (
	"flag"

	"github.com/spf13/cobra"

	"github.com/fencing-go/fencing/internal/demo"
)

// demoCommand wires the demo's flags and entry point (internal/demo, which
// cmd/fencing-demo runs too) into cobra as they are.
func demoCommand() *cobra.Command {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	runDemo := demo.Flags(fs)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Show a stale writer being stopped by its fencing token",
		Long:  demo.Description,
		Args:  cobra.NoArgs,
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			return runDemo(cmd.Context(), cmd.OutOrStdout(), args)
		}),
	}
	cmd.Flags().AddGoFlagSet(fs)
	return cmd
}
