package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"
	"github.com/spf13/cobra"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
)

// Exit codes. A command run by hold exits with its own code; these are the
// tool's own (see docs/cli.md).
const (
	exitOK          = 0
	exitError       = 1 // anything else
	exitUsage       = 2 // bad flags or arguments
	exitHeld        = 3 // the key is held by a live lease
	exitLost        = 4 // the lease ended: expired, released, lost while holding
	exitUnreachable = 5 // the server did not answer, or the outcome is unknown
	exitAuth        = 6 // the server refused the credentials or the user's permission
)

// errUsage marks a command line that could not be understood; the tool
// exits with status 2 for it.
var errUsage = errors.New("usage error")

// errUnreachable marks a server that could not be reached.
var errUnreachable = errors.New("server unreachable")

// errAuth marks a server that refused the credentials (a wrong or missing
// password), errPermission one that refused the user a command (an ACL).
var (
	errAuth       = errors.New("authentication failed")
	errPermission = errors.New("permission denied")
)

// exitError carries an exit code chosen by a command (hold passes on its
// child's) with nothing to print.
type exitCode int

func (c exitCode) Error() string { return fmt.Sprintf("exit status %d", int(c)) }

func main() {
	if len(os.Args) > 1 && os.Args[1] == watchdogArg {
		os.Exit(watchdogMain(os.Args[2:]))
	}
	// go-redis logs its dial retries to stderr; the errors it returns say
	// the same, once, in fencing's own words.
	redis.SetLogger(&logging.VoidLogger{})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(report(os.Stderr, err))
}

// run executes the command line args (without the program name).
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	root := rootCommand()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err != nil && !isCommandError(err) {
		// cobra's own parse errors (unknown flag or command, bad value)
		// are plain errors: show the usage line and mark them.
		if cmd != nil {
			fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
		}
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	return err
}

// commandError wraps the errors the commands return, so that run can tell
// them from cobra's flag errors.
type commandError struct{ err error }

func (e commandError) Error() string { return e.err.Error() }
func (e commandError) Unwrap() error { return e.err }

func isCommandError(err error) bool {
	var ce commandError
	return errors.As(err, &ce)
}

// runE adapts a command's function: its errors are marked as the command's.
func runE(f func(cmd *cobra.Command, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		if err := f(cmd, args); err != nil {
			return commandError{err}
		}
		return nil
	}
}

func rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "fencing",
		Short: "Leases with fencing tokens, from the shell",
		Long: `fencing takes, inspects and breaks leases with fencing tokens on a SQLite file,
PostgreSQL, MySQL or MariaDB, etcd, Redis, Kubernetes (Lease objects), NATS
(a JetStream key-value bucket) or the in-memory backend, and runs commands
under a lease.

Choose the backend with --backend or FENCING_BACKEND (sqlite, postgres, mysql,
memory, etcd, redis, kube, nats); with neither, --etcd-endpoints, --redis-addr, --postgres-dsn
or --mysql-dsn (or their environment variables) pick it, and without those the
default is the SQLite file fencing.db in the user's state directory ($XDG_STATE_HOME/fencing, else
~/.local/state/fencing), so invocations on one machine exclude each other.
Every flag of the backend has an environment variable: FENCING_ and the flag's name
in capitals with '-' as '_' (FENCING_ETCD_ENDPOINTS, FENCING_REDIS_PASSWORD...).

Exit codes: 0 done, 1 error, 2 bad flags or arguments, 3 key held by a live lease,
4 lease ended or lost, 5 server unreachable or outcome unknown, 6 authentication
failed or permission denied; hold passes on its command's own code.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(demoCommand(), getCommand(), listCommand(), statsCommand(), grantCommand(), renewCommand(), releaseCommand(), holdCommand(), watchCommand(), topCommand())
	root.AddCommand(electCommand(), leaderCommand(), semCommand())
	root.AddCommand(fenceCommand())
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error { return err })
	return root
}

// report prints err (unless it has been explained already) and returns the
// exit code for it.
func report(stderr io.Writer, err error) int {
	if err == nil {
		return exitOK
	}
	var code exitCode
	if errors.As(err, &code) {
		return int(code)
	}
	fmt.Fprintln(stderr, "fencing:", err)
	return exitCodeOf(err)
}

func exitCodeOf(err error) int {
	var oe *fencing.OutcomeError
	switch {
	case errors.Is(err, errUsage), errors.Is(err, fencing.ErrInvalidKey), errors.Is(err, fencing.ErrInvalidTimeout),
		errors.Is(err, fencing.ErrInvalidMargin), errors.Is(err, fencing.ErrInvalidOption):
		return exitUsage
	case errors.Is(err, fencing.ErrLeaseHeld):
		return exitHeld
	case errors.Is(err, fencing.ErrLeaseLost), errors.Is(err, fencing.ErrLeaseExpired), errors.Is(err, fencing.ErrLeaseNotFound):
		return exitLost
	case errors.Is(err, errAuth), errors.Is(err, errPermission), errors.Is(err, backend.ErrAuthRefused), errors.Is(err, backend.ErrPermissionDenied),
		errors.Is(err, backend.ErrAuthRefused), errors.Is(err, backend.ErrPermissionDenied):
		return exitAuth
	case errors.Is(err, errUnreachable), errors.Is(err, backend.ErrUnreachable), errors.As(err, &oe), errors.Is(err, fencing.ErrOutcomeUnknown),
		errors.Is(err, context.DeadlineExceeded):
		return exitUnreachable
	}
	return exitError
}
