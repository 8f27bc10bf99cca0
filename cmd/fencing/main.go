// Command fencing is a small tool around the fencing library.
//
// Usage:
//
//	fencing <command> [flags]
//
// The commands are:
//
//	demo    show a stale writer being stopped by its fencing token
//	help    print this help, or a command's help: fencing help demo
//
// Run "fencing help <command>" for a command's flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
)

// command is one subcommand of the tool.
type command struct {
	name    string
	summary string // one line for the command list
	doc     string // a paragraph for the command's help
	// flags declares the command's flags on fs and returns the function
	// that runs the command once fs has parsed its arguments.
	flags func(fs *flag.FlagSet) func(ctx context.Context, stdout io.Writer, args []string) error
}

// commands lists the subcommands in the order help prints them.
func commands() []command {
	return []command{
		{
			name:    "demo",
			summary: "show a stale writer being stopped by its fencing token",
			doc: `Demo plays the classic failure of leases without fencing on the in-memory
backend: worker A takes a lease, stalls past it, worker B takes the key with a
larger token and writes, and A's late write is rejected by the store's token
check. It exits with status 0 when the stale write was rejected.`,
			flags: demoFlags,
		},
	}
}

// errUsage marks a command line that could not be understood; the tool
// exits with status 2 for it, as package flag does.
var errUsage = errors.New("usage error")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err == nil {
		return
	}
	if err != errUsage { // a bare errUsage has been explained already
		fmt.Fprintln(os.Stderr, "fencing:", err)
	}
	if errors.Is(err, errUsage) {
		os.Exit(2)
	}
	os.Exit(1)
}

// run executes the command line args (without the program name).
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		usage(stderr)
		return errUsage
	}
	name, args := args[0], args[1:]
	switch name {
	case "help", "-h", "-help", "--help":
		if len(args) == 0 {
			usage(stdout)
			return nil
		}
		cmd, ok := lookup(args[0])
		if !ok {
			fmt.Fprintf(stderr, "fencing help: unknown command %q\n", args[0])
			usage(stderr)
			return errUsage
		}
		fs, _ := newFlagSet(cmd, stdout)
		fs.Usage()
		return nil
	}
	cmd, ok := lookup(name)
	if !ok {
		fmt.Fprintf(stderr, "fencing: unknown command %q\n", name)
		usage(stderr)
		return errUsage
	}
	fs, runCmd := newFlagSet(cmd, stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return errUsage // fs has printed the problem and the usage
	}
	return runCmd(ctx, stdout, fs.Args())
}

func lookup(name string) (command, bool) {
	for _, c := range commands() {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

// newFlagSet returns cmd's flag set, printing errors and usage to w, and the
// function that runs cmd.
func newFlagSet(cmd command, w io.Writer) (*flag.FlagSet, func(context.Context, io.Writer, []string) error) {
	fs := flag.NewFlagSet("fencing "+cmd.name, flag.ContinueOnError)
	fs.SetOutput(w)
	runCmd := cmd.flags(fs)
	fs.Usage = func() {
		fmt.Fprintf(w, "usage: fencing %s [flags]\n\n%s\n", cmd.name, cmd.doc)
		if hasFlags(fs) {
			fmt.Fprintln(w, "\nFlags:")
			fs.PrintDefaults()
		}
	}
	return fs, runCmd
}

func hasFlags(fs *flag.FlagSet) bool {
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	return n > 0
}

func usage(w io.Writer) {
	fmt.Fprint(w, "usage: fencing <command> [flags]\n\nCommands:\n")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "  %-8s %s\n", "help", "print this help, or a command's: fencing help <command>")
}
