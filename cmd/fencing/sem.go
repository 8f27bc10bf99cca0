package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/semaphore"
)

// permitsJSON is sem --list's --json output.
type permitsJSON struct {
	Name    string       `json:"name"`
	Size    int          `json:"size"`
	Permits []permitJSON `json:"permits"`
}

type permitJSON struct {
	Slot             int     `json:"slot"`
	Key              string  `json:"key"`
	Owner            string  `json:"owner,omitempty"`
	Token            uint64  `json:"token"`
	RemainingSeconds float64 `json:"remaining_seconds"`
}

func semCommand() *cobra.Command {
	var (
		conn        *connFlags
		tf          termFlags
		size        int
		wait        bool
		waitTimeout time.Duration
		list        bool
	)
	cmd := &cobra.Command{
		Use:   "sem NAME --size N [--wait] -- COMMAND [ARG...]",
		Short: "Run a command while holding one of N permits of the semaphore NAME",
		Long: `Sem takes one of the --size permits of the semaphore NAME (with --wait, waits for
one), runs COMMAND with FENCING_KEY (the permit's slot key, NAME/0 to NAME/N-1),
FENCING_SLOT and FENCING_TOKEN (the slot's fencing token) in its environment, and
renews the permit while the command runs, exactly as hold does for a lock: the
same exit statuses, the same stopping of the command when the permit is lost.
Every process using NAME must give the same --size.

With --list instead of a command, it lists the live permits.`,
		Example: `  fencing sem workers/export --size 4 --wait -- ./export.sh
  fencing sem workers/export --size 4 --list`,
		Args: func(cmd *cobra.Command, args []string) error {
			if list {
				return cobra.ExactArgs(1)(cmd, args)
			}
			if cmd.ArgsLenAtDash() != 1 || len(args) < 2 {
				return errors.New("want NAME -- COMMAND [ARG...]: the name, then \"--\", then the command")
			}
			return nil
		},
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			switch {
			case tf.check() != nil:
				return tf.check()
			case waitTimeout < 0:
				return fmt.Errorf("%w: --wait-timeout %v is negative", errUsage, waitTimeout)
			case waitTimeout > 0 && !wait:
				return fmt.Errorf("%w: --wait-timeout goes with --wait", errUsage)
			}
			s, err := conn.open(cmd.Context(), cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			defer s.Close()
			sem, err := semaphore.New(s.c, args[0], size)
			if err != nil {
				return fmt.Errorf("%w: %w", errUsage, err)
			}
			if list {
				return listPermits(cmd, s, conn.jsonOut, sem)
			}
			return runPermit(cmd, s, tf, sem, wait, waitTimeout, args[1:])
		}),
	}
	tf.add(cmd, "permit")
	cmd.Flags().IntVar(&size, "size", 0, "the number of permits (required; the same in every process)")
	cmd.Flags().BoolVar(&wait, "wait", false, "wait for a permit while all are taken")
	cmd.Flags().DurationVar(&waitTimeout, "wait-timeout", 0, "with --wait: give up after this long (0: wait until interrupted)")
	cmd.Flags().BoolVar(&list, "list", false, "list the live permits instead of running a command")
	cmd.MarkFlagRequired("size")
	conn = addConnFlags(cmd)
	addOwnerFlag(cmd, conn)
	return cmd
}

func listPermits(cmd *cobra.Command, s *session, jsonOut bool, sem *semaphore.Semaphore) error {
	ctx, cancel := s.call(cmd.Context())
	defer cancel()
	ps, err := sem.Holders(ctx)
	if err != nil {
		return s.wrap(ctx, err)
	}
	w := cmd.OutOrStdout()
	if jsonOut {
		out := permitsJSON{Name: sem.Name(), Size: sem.Size(), Permits: []permitJSON{}}
		for _, p := range ps {
			out.Permits = append(out.Permits, permitJSON{Slot: p.Slot, Key: p.Key, Owner: p.Owner, Token: p.Token, RemainingSeconds: p.Remaining.Seconds()})
		}
		return printJSON(w, out)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "%d of %d permits held\n", len(ps), sem.Size())
	fmt.Fprintln(tw, "SLOT\tTOKEN\tLEFT\tOWNER")
	for _, p := range ps {
		slot := strconv.Itoa(p.Slot)
		if p.Slot >= sem.Size() {
			slot += " (past --size)"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", slot, p.Token, short(p.Remaining), p.Owner)
	}
	return tw.Flush()
}

func runPermit(cmd *cobra.Command, s *session, tf termFlags, sem *semaphore.Semaphore, wait bool, waitTimeout time.Duration, argv []string) error {
	// The permit must outlive the command's context, which an interrupt
	// ends (the signal goes to the command): its parent is a context that
	// only an interrupt or timeout while waiting cancels.
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(cmd.Context()))
	defer cancel(nil)
	errTimedOut := fmt.Errorf("%w: no permit within --wait-timeout %v", fencing.ErrLeaseHeld, waitTimeout)
	stop := context.AfterFunc(cmd.Context(), func() { cancel(context.Cause(cmd.Context())) })
	if waitTimeout > 0 {
		t := time.AfterFunc(waitTimeout, func() { cancel(errTimedOut) })
		defer t.Stop()
	}
	var h *fencing.Held
	var err error
	if wait {
		spin := startSpinner(cmd.ErrOrStderr(), "waiting for a permit of "+quote(sem.Name()))
		var opts []fencing.LockOption
		for _, o := range tf.holdOptions() {
			opts = append(opts, o)
		}
		h, err = sem.Acquire(ctx, tf.ttl, opts...)
		spin.Stop()
	} else {
		h, err = sem.TryAcquire(ctx, tf.ttl, tf.holdOptions()...)
	}
	interrupted := !stop()
	if err != nil {
		if context.Cause(ctx) == errTimedOut {
			if away := storeAway(err); away != nil {
				return fmt.Errorf("sem %s: %w: %s did not answer until --wait-timeout %v ended the wait: %w", quote(sem.Name()), errUnreachable, s.where, waitTimeout, away)
			}
			return errTimedOut
		}
		return s.wrap(ctx, err)
	}
	if interrupted || ctx.Err() != nil { // just as the permit came
		h.Release(context.WithoutCancel(ctx))
		return context.Cause(ctx)
	}
	key := h.Lease().Key
	slot := key[len(sem.Name())+1:]
	// The command's environment is this process's (see runHeld).
	if err := setenv("FENCING_SLOT", slot); err != nil {
		return err
	}
	code, err := runHeld(cmd, heldOne{h}, tf.grace, tokenEnv(h.Lease()), argv)
	rctx, rcancel := s.call(context.WithoutCancel(cmd.Context()))
	defer rcancel()
	rerr := h.Release(rctx)
	switch {
	case err != nil:
		return err
	case errors.Is(rerr, fencing.ErrLeaseLost):
		fmt.Fprintf(cmd.ErrOrStderr(), "fencing: sem: %v\n", rerr)
		return exitCode(exitLost)
	}
	return exitCode(code)
}
