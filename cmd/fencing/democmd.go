package main

import (
	"errors"
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
			err := runDemo(cmd.Context(), cmd.OutOrStdout(), args)
			if errors.Is(err, demo.ErrUsage) {
				return usageError{err}
			}
			return err
		}),
	}
	cmd.Flags().AddGoFlagSet(fs)
	return cmd
}

// usageError is an error of the demo's own usage check, which is also this
// tool's errUsage (exit 2), with the demo's message.
type usageError struct{ err error }

func (e usageError) Error() string   { return e.err.Error() }
func (e usageError) Unwrap() []error { return []error{errUsage, e.err} }
