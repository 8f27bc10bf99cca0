package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/election"
)

// termFlags are the flags of elect and sem: the term's or permit's lease,
// and how its command is stopped.
type termFlags struct {
	ttl           time.Duration
	margin        time.Duration
	renewInterval time.Duration
	grace         time.Duration
}

func (f *termFlags) add(cmd *cobra.Command, what string) {
	fs := cmd.Flags()
	fs.DurationVar(&f.ttl, "ttl", 10*time.Second, "how long a "+what+" lasts without renewal: how long a stalled holder keeps it")
	fs.DurationVar(&f.margin, "margin", fencing.DefaultMargin, "the coordinator's safety margin past the TTL")
	fs.DurationVar(&f.renewInterval, "renew-interval", 0, "renew this long after each confirmed renewal (default a third of --ttl)")
	fs.DurationVar(&f.grace, "grace", 10*time.Second, "after the "+what+" is lost: how long the command has between SIGTERM and SIGKILL")
}

func (f *termFlags) check() error {
	if f.grace < 0 {
		return fmt.Errorf("%w: --grace %v is negative", errUsage, f.grace)
	}
	return nil
}

func (f *termFlags) holdOptions() []fencing.HoldOption {
	opts := []fencing.HoldOption{fencing.WithMargin(f.margin)}
	if f.renewInterval > 0 {
		opts = append(opts, fencing.WithRenewInterval(f.renewInterval))
	}
	return opts
}

func electCommand() *cobra.Command {
	var (
		conn     *connFlags
		tf       termFlags
		identity string
		once     bool
	)
	cmd := &cobra.Command{
		Use:   "elect KEY [--identity ID] [--once] -- COMMAND [ARG...]",
		Short: "Campaign for leadership of KEY and run a command while leader",
		Long: `Elect campaigns in the election KEY (waiting while another candidate leads), and
once this candidate leads, runs COMMAND with FENCING_KEY, FENCING_TOKEN (the
term's fencing token) and FENCING_IDENTITY in its environment, renewing the term
in the background. The command must send $FENCING_TOKEN with its writes.

If leadership is lost while the command runs (a renewal refused, for instance
after "release --force", or none confirmed before the term's deadline), elect
stops the command as hold does (SIGTERM, SIGKILL after --grace), waits for it to
exit, and campaigns again; with --once it exits with status 4 instead. When the
command exits by itself, elect resigns (the next candidate takes over at once)
and exits with the command's status. SIGINT, SIGTERM and SIGHUP are passed on to
the command; while campaigning they end elect.

--identity (default: host name and PID) is the candidate's public label: "fencing
leader KEY" shows it.`,
		Example: `  fencing elect jobs/scheduler --identity "$(hostname)" --ttl 15s -- ./scheduler --token-env FENCING_TOKEN
  fencing elect jobs/report --once -- sh -c 'run-report --fence "$FENCING_TOKEN"'`,
		Args: func(cmd *cobra.Command, args []string) error {
			if cmd.ArgsLenAtDash() != 1 || len(args) < 2 {
				return errors.New("want KEY -- COMMAND [ARG...]: the key, then \"--\", then the command")
			}
			return nil
		},
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			if err := tf.check(); err != nil {
				return err
			}
			return elect(cmd, conn, tf, args[0], identity, once, args[1:])
		}),
	}
	tf.add(cmd, "term")
	cmd.Flags().StringVar(&identity, "identity", defaultOwner(), "this candidate's public label, shown by \"fencing leader\"")
	cmd.Flags().BoolVar(&once, "once", false, "exit with status 4 when leadership is lost, instead of campaigning again")
	conn = addBackendFlags(cmd)
	return cmd
}

func elect(cmd *cobra.Command, conn *connFlags, tf termFlags, key, identity string, once bool, argv []string) error {
	s, err := conn.open(cmd.Context(), cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	defer s.Close()
	e := election.New(s.c, key, tf.ttl, election.WithLockOptions(lockOptions(tf.holdOptions())...))
	// The command's environment is this process's (see runHeld).
	if err := setenv("FENCING_IDENTITY", identity); err != nil {
		return err
	}
	stderr := cmd.ErrOrStderr()
	for {
		spin := startSpinner(stderr, "campaigning for "+quote(key))
		h, err := e.Campaign(cmd.Context(), identity)
		spin.Stop()
		if err != nil {
			return s.wrap(cmd.Context(), err)
		}
		fmt.Fprintf(stderr, "fencing: elect: leading %s, term %d, as %q\n", quote(key), h.Token(), identity)
		code, err := runHeld(cmd, heldOne{h}, tf.grace, tokenEnv(h.Lease()), argv)
		lost := h.Err() != nil
		rctx, cancel := s.call(context.WithoutCancel(cmd.Context()))
		h.Release(rctx) // resign; after a loss, frees the key early if still ours
		cancel()
		switch {
		case err != nil && !lost:
			return err
		case lost && !once && cmd.Context().Err() == nil:
			fmt.Fprintf(stderr, "fencing: elect: leadership of %s lost; campaigning again\n", quote(key))
			continue
		case lost:
			return exitCode(exitLost)
		}
		return exitCode(code)
	}
}

// setenv sets a variable of this process's environment, which runHeld
// passes on to the command.
func setenv(name, value string) error { return os.Setenv(name, value) }
