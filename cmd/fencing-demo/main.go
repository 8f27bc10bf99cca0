// Command fencing-demo shows a stale writer being stopped by its fencing
// token, on the in-memory backend: the fencing CLI's demo command, as a
// program that needs nothing but the root package, memorybackend and guard,
// so that
//
//	go run ./cmd/fencing-demo
//
// builds quickly from a cold module cache. It exits 0 when the stale write
// was rejected, 1 when it was accepted (-fence=false), 2 for bad flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"

	"github.com/fencing-go/fencing/internal/demo"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run runs the demo with the command line args and returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("fencing-demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: fencing-demo [flags]\n\n%s\n\nFlags:\n", demo.Description)
		fs.PrintDefaults()
	}
	runDemo := demo.Flags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	err := runDemo(ctx, stdout, fs.Args())
	switch {
	case err == nil:
		return 0
	case errors.Is(err, demo.ErrUsage):
		fmt.Fprintln(stderr, "fencing-demo:", err)
		return 2
	}
	fmt.Fprintln(stderr, "fencing-demo:", err)
	return 1
}
