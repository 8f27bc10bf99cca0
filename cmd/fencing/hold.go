package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/rwlock"
)

// releaseTimeout bounds hold's release after its command ended (or
// --request-timeout, when shorter), so that hold exits within a second of
// the command even when the server does not answer.
const releaseTimeout = 500 * time.Millisecond

// holdFlags are hold's own flags.
type holdFlags struct {
	leaseFlags
	wait          bool
	fifo          bool
	waitTimeout   time.Duration
	grace         time.Duration
	renewInterval time.Duration
	maxHold       time.Duration
	// rw is "read" or "write" for a side of the read-write lock KEY
	// (package rwlock), "" for a plain lease; readers is its
	// rwlock.WithReaders.
	rw      string
	readers int
}

func holdCommand() *cobra.Command {
	var (
		conn *connFlags
		hf   holdFlags
	)
	cmd := &cobra.Command{
		Use:   "hold KEY... --ttl DURATION [--wait] -- COMMAND [ARG...]",
		Short: "Run a command while holding a lease on KEY (or on several keys), renewed in the background",
		Long: `Hold takes a lease on KEY (with --wait, waits for it), runs COMMAND with
FENCING_KEY and FENCING_TOKEN in its environment, and renews the lease in the
background while the command runs. The command must send $FENCING_TOKEN with its
writes to the protected resource. When the command exits, the lease is released
and hold exits with the command's status (128+n for a command killed by signal n);
a release the server does not confirm within 500ms is left to the lease's expiry,
so hold exits within a second of the command.

If the lease is lost while the command runs (a renewal is refused, for instance
after "release --force", or none is confirmed before the lease's deadline), hold
sends the command SIGTERM, then SIGKILL after --grace, and exits with status 4.
With --wait --fifo, hold waits in the key's line: holds started this way, from
any host, get the key in the order their waits began, and a release wakes only
the next of them. A waiter that dies in line delays the others by at most --ttl.
With --max-hold D, the lease is held for D in all, counted from its grant: the
last renewal asks only for the time left, and at D hold says "maximum hold
reached", releases the lease and stops the command the same way (status 4).
With --lock-delay D, should the lease end without hold's release (hold killed,
the machine stalled or cut off from the server, release --force), no grant on KEY
succeeds for D more: time for a command that is still running to stop. Hold's
own release, when the command exits, leaves no delay; with --wait, hold sleeps
out the delay of the key's last lease.
The command runs in a process group of its own (unless its stdin is a terminal),
and the signal goes to the whole group. SIGINT, SIGTERM and SIGHUP sent to hold
are passed on to the command. On Unix a watchdog process (this program again)
starts the command: should hold die (SIGKILL, the OOM
killer), it sends the command SIGTERM at once and SIGKILL after --grace or
before the lease's deadline, whichever is first; should hold be stopped
(SIGSTOP, a debugger) as the deadline nears, it stops the command the same way,
before the deadline.

With --rw read or --rw write (and --wait), KEY is a read-write lock (package
rwlock): hold waits in its line and holds it for reading, shared with the other
readers (at most --readers at once), or for writing, alone, while the command
runs, with the same supervision and exit statuses. FENCING_KEY is KEY and
FENCING_TOKEN the holder's token: a writer's is above every earlier holder's, and
fences writes as a lock's does; a reader's lies between the tokens of the writers
before and after it, so a resource may let the reader act while its token is at
least the highest writer token it has seen (without raising it). Every process
using KEY must give the same --readers.

With several keys, hold takes them all in one atomic grant or none (with --wait,
it waits until it can take them all; --fifo waits in each key's line in turn, in
key order), gives the command FENCING_KEYS (how many), and FENCING_KEY_n and
FENCING_TOKEN_n for each key n from 1 in the order given, and stops the command
as above when any one lease is lost. The backend must grant several keys
atomically (every backend of this program does; on a Redis Cluster the keys must
share a hash slot: give --key-prefix a hash tag, such as '{jobs}:').

With --wait, a server that is unreachable for a while (a restart, a failover) does
not end the wait: hold tries again, with a pause of up to a second, until it gets
the key, is interrupted or --wait-timeout ends.

Exit status: the command's own; 3 the key is held (without --wait, or still held
after --wait-timeout); 4 the lease was lost; 5 the server is unreachable (with
--wait: still unreachable when --wait-timeout ended); 2 bad flags; 127 the command
could not be started.`,
		Example: `  fencing hold jobs/nightly --ttl 30s -- ./nightly.sh
  fencing hold reports/daily --ttl 30s --wait --rw read -- ./report.sh
  fencing hold jobs/nightly --ttl 30s --wait --wait-timeout 10m -- sh -c 'run --token "$FENCING_TOKEN"'
  fencing hold jobs/deploy --ttl 30s --wait --fifo -- ./deploy.sh
  fencing hold jobs/nightly --ttl 30s --max-hold 2h -- ./nightly.sh
  fencing hold mail/digest --ttl 30s --lock-delay 15s -- ./send-digest.sh
  fencing hold accounts/a accounts/b --ttl 30s --wait -- ./transfer.sh`,
		Args: func(cmd *cobra.Command, args []string) error {
			if cmd.ArgsLenAtDash() < 1 || len(args) <= cmd.ArgsLenAtDash() {
				return errors.New("want KEY... -- COMMAND [ARG...]: the keys, then \"--\", then the command")
			}
			return nil
		},
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			n := cmd.ArgsLenAtDash()
			return hold(cmd, conn, hf, args[:n], args[n:])
		}),
	}
	hf.add(cmd)
	cmd.Flags().BoolVar(&hf.wait, "wait", false, "wait for the key while another holder has it")
	cmd.Flags().BoolVar(&hf.fifo, "fifo", false, "with --wait: wait in the key's line, so waiters get the key in the order they began to wait and each release wakes only the next")
	cmd.Flags().DurationVar(&hf.waitTimeout, "wait-timeout", 0, "with --wait: give up after this long (0: wait until interrupted)")
	cmd.Flags().DurationVar(&hf.grace, "grace", 10*time.Second, "after the lease is lost: how long the command has between SIGTERM and SIGKILL")
	cmd.Flags().DurationVar(&hf.renewInterval, "renew-interval", 0, "renew this long after each confirmed renewal (default a third of --ttl)")
	cmd.Flags().StringVar(&hf.rw, "rw", "", "read or write: hold KEY, a read-write lock, for reading (shared) or writing (alone); with --wait")
	cmd.Flags().IntVar(&hf.readers, "readers", rwlock.DefaultReaders, fmt.Sprintf("with --rw: how many readers may hold KEY at once (at most %d; the same in every process)", rwlock.MaxReaders))
	cmd.Flags().DurationVar(&hf.maxHold, "max-hold", 0, "hold the lease for at most this long in all, from its grant, then stop the command as on a loss (0: no limit)")
	conn = addBackendFlags(cmd)
	addOwnerFlag(cmd, conn)
	addLockDelayFlag(cmd, conn)
	return cmd
}

func hold(cmd *cobra.Command, conn *connFlags, hf holdFlags, keys []string, argv []string) error {
	switch {
	case hf.grace < 0:
		return fmt.Errorf("%w: --grace %v is negative", errUsage, hf.grace)
	case hf.waitTimeout < 0:
		return fmt.Errorf("%w: --wait-timeout %v is negative", errUsage, hf.waitTimeout)
	case hf.maxHold < 0:
		return fmt.Errorf("%w: --max-hold %v is negative", errUsage, hf.maxHold)
	case hf.waitTimeout > 0 && !hf.wait:
		return fmt.Errorf("%w: --wait-timeout goes with --wait", errUsage)
	case hf.fifo && !hf.wait:
		return fmt.Errorf("%w: --fifo goes with --wait", errUsage)
	}
	if err := hf.checkRW(cmd, keys); err != nil {
		return err
	}
	s, err := conn.open(cmd.Context(), cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	defer s.Close()
	h, stop, err := acquire(cmd, s, hf, keys)
	if err != nil {
		return err
	}
	defer stop()
	code, err := runHeld(cmd, h, hf.grace, h.env(), argv)
	// Release even after an interrupt: the key would otherwise stay blocked
	// until the lease expires. But not for long: the command is done, and a
	// server that does not answer soon leaves the lease to its expiry.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(cmd.Context()), min(s.timeout, releaseTimeout))
	defer cancel()
	rerr := h.Release(rctx)
	switch {
	case err != nil:
		return err
	case errors.Is(rerr, fencing.ErrLeaseLost):
		// The lease ended while the command was finishing: its last
		// writes may have raced the next holder's.
		fmt.Fprintf(cmd.ErrOrStderr(), "fencing: hold: %v\n", rerr)
		return exitCode(exitLost)
	case rerr != nil:
		fmt.Fprintf(cmd.ErrOrStderr(), "fencing: hold: the command finished, but the release failed (the lease will expire): %v\n", rerr)
	}
	return exitCode(code)
}

// acquire takes the lease as Hold does, or with --wait as Lock does. The
// held lease must outlive the command's context, which an interrupt ends:
// so its parent is a context only acquire itself cancels, on an interrupt
// or timeout while waiting.
// The returned stop frees that context once the lease is released.
func acquire(cmd *cobra.Command, s *session, hf holdFlags, keys []string) (h heldLeases, stop func(), err error) {
	key := keys[0]
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(cmd.Context()))
	limit := s.timeout
	if hf.wait {
		limit = hf.waitTimeout
	}
	var timeout <-chan time.Time
	if limit > 0 {
		t := time.NewTimer(limit)
		defer t.Stop()
		timeout = t.C
	}
	errTimedOut := fmt.Errorf("%w: gave up after %v", errUnreachable, limit)
	if hf.wait {
		errTimedOut = fmt.Errorf("%w: still held after --wait-timeout %v", fencing.ErrLeaseHeld, limit)
	}
	acquired, watching := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watching)
		select {
		case <-cmd.Context().Done():
			cancel(context.Cause(cmd.Context()))
		case <-timeout:
			cancel(errTimedOut)
		case <-acquired:
		}
	}()

	opts := []fencing.HoldOption{fencing.WithMargin(hf.margin)}
	if hf.renewInterval > 0 {
		opts = append(opts, fencing.WithRenewInterval(hf.renewInterval))
	}
	if hf.maxHold > 0 {
		opts = append(opts, fencing.WithMaxHold(hf.maxHold))
	}
	stop = func() { cancel(nil) }
	var lockOpts []fencing.LockOption
	if hf.wait {
		lockOpts = lockOptions(opts)
		if hf.fifo {
			lockOpts = append(lockOpts, fencing.WithFIFO())
		}
	}
	switch {
	case hf.rw != "":
		h, err = acquireRW(ctx, cmd, s, hf, key, lockOpts)
	case len(keys) > 1 && hf.wait:
		spin := startSpinner(cmd.ErrOrStderr(), "waiting for "+quote(key)+" and "+strconv.Itoa(len(keys)-1)+" more keys")
		var m *fencing.HeldMany
		m, err = s.c.LockMany(ctx, keys, hf.ttl, lockOpts...)
		spin.Stop()
		h = heldMany{m}
	case len(keys) > 1:
		var m *fencing.HeldMany
		m, err = s.c.HoldMany(ctx, keys, hf.ttl, opts...)
		h = heldMany{m}
	case hf.wait:
		spin := startSpinner(cmd.ErrOrStderr(), "waiting for "+quote(key))
		var one *fencing.Held
		one, err = s.c.Lock(ctx, key, hf.ttl, lockOpts...)
		spin.Stop()
		h = heldOne{one}
	default:
		var one *fencing.Held
		one, err = s.c.Hold(ctx, key, hf.ttl, opts...)
		h = heldOne{one}
	}
	close(acquired)
	<-watching
	if err != nil {
		stop()
		if cause := context.Cause(ctx); cause == errTimedOut {
			if hf.wait {
				if away := storeAway(err); away != nil {
					return nil, nil, fmt.Errorf("hold %s: %w: %s did not answer until --wait-timeout %v ended the wait: %w", quote(key), errUnreachable, s.where, limit, away)
				}
			}
			return nil, nil, fmt.Errorf("hold %s: %w", quote(key), cause)
		}
		return nil, nil, s.wrap(ctx, err)
	}
	if ctx.Err() != nil { // interrupted just as the lease came: it releases itself
		h.Release(context.WithoutCancel(ctx))
		return nil, nil, context.Cause(ctx)
	}
	return h, stop, nil
}

// checkRW refuses --rw and --readers with flags and arguments that make
// no sense with them.
func (hf holdFlags) checkRW(cmd *cobra.Command, keys []string) error {
	switch {
	case hf.rw == "" && cmd.Flags().Changed("readers"):
		return fmt.Errorf("%w: --readers goes with --rw", errUsage)
	case hf.rw == "":
		return nil
	case hf.rw != "read" && hf.rw != "write":
		return fmt.Errorf("%w: --rw %q: want read or write", errUsage, hf.rw)
	case len(keys) > 1:
		return fmt.Errorf("%w: --rw takes one key, the read-write lock's name", errUsage)
	case !hf.wait:
		return fmt.Errorf("%w: --rw goes with --wait: a side of a read-write lock is waited for in its line", errUsage)
	case hf.fifo:
		return fmt.Errorf("%w: --rw always waits in the lock's line: drop --fifo", errUsage)
	case hf.readers < 1 || hf.readers > rwlock.MaxReaders:
		return fmt.Errorf("%w: --readers %d is not in [1, %d]", errUsage, hf.readers, rwlock.MaxReaders)
	}
	return nil
}

// acquireRW waits for the side hf.rw of the read-write lock key, as
// acquire's Lock does for a plain lease.
func acquireRW(ctx context.Context, cmd *cobra.Command, s *session, hf holdFlags, key string, opts []fencing.LockOption) (heldLeases, error) {
	l, err := rwlock.New(s.c, key, rwlock.WithReaders(hf.readers))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errUsage, err)
	}
	spin := startSpinner(cmd.ErrOrStderr(), "waiting to "+hf.rw+" "+quote(key))
	defer spin.Stop()
	if hf.rw == "read" {
		r, err := l.RLock(ctx, hf.ttl, opts...)
		if err != nil {
			return nil, err
		}
		return heldReader{r, key}, nil
	}
	w, err := l.Lock(ctx, hf.ttl, opts...)
	if err != nil {
		return nil, err
	}
	return heldWriter{w, key}, nil
}

// heldReader is a reader of the read-write lock name. Its Lease is its
// reader slot's, whose Deadline ends the reader's hold.
type heldReader struct {
	*rwlock.Reader
	name string
}

func (h heldReader) Lease() fencing.Lease { return h.Slot() }

func (h heldReader) env() []string {
	return tokenEnv(fencing.Lease{Key: h.name, Token: h.Token()})
}

// heldWriter is a writer of the read-write lock name. Its Lease is the one
// of its leases whose Deadline comes first.
type heldWriter struct {
	*rwlock.Writer
	name string
}

func (h heldWriter) Lease() fencing.Lease { return earliest(h.Leases()) }

func (h heldWriter) env() []string {
	return tokenEnv(fencing.Lease{Key: h.name, Token: h.Token()})
}

// earliest returns the lease of leases whose Deadline comes first.
func earliest(leases []fencing.Lease) fencing.Lease {
	first := leases[0]
	for _, l := range leases[1:] {
		if l.Deadline.Before(first.Deadline) {
			first = l
		}
	}
	return first
}

// heldLeases is what runHeld runs a command under: one held lease, or
// several taken together.
type heldLeases interface {
	// Lease is the lease whose Deadline comes first.
	Lease() fencing.Lease
	Done() <-chan struct{}
	Err() error
	Release(ctx context.Context) error
	// env is the command's variables: each key and its token.
	env() []string
}

type heldOne struct{ *fencing.Held }

func (h heldOne) env() []string { return tokenEnv(h.Lease()) }

// tokenEnv is the command's variables for one lease.
func tokenEnv(l fencing.Lease) []string {
	return []string{"FENCING_KEY=" + l.Key, "FENCING_TOKEN=" + strconv.FormatUint(l.Token, 10)}
}

type heldMany struct{ *fencing.HeldMany }

func (h heldMany) Lease() fencing.Lease { return earliest(h.Leases()) }

func (h heldMany) env() []string {
	leases := h.Leases()
	env := []string{"FENCING_KEYS=" + strconv.Itoa(len(leases))}
	for i, l := range leases {
		n := strconv.Itoa(i + 1)
		env = append(env, "FENCING_KEY_"+n+"="+l.Key, "FENCING_TOKEN_"+n+"="+strconv.FormatUint(l.Token, 10))
	}
	return env
}

// runHeld runs argv under h, with env added to this process's environment,
// and returns its exit status. When the lease is lost it stops the command
// and returns exitLost.
// Its messages name the command that runs it (hold, elect, sem).
func runHeld(cmd *cobra.Command, h heldLeases, grace time.Duration, env []string, argv []string) (int, error) {
	lease := h.Lease()
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)
	child, err := startCommand(commandSpec{
		name:   cmd.Name(),
		argv:   argv,
		env:    append(os.Environ(), env...),
		stdin:  cmd.InOrStdin(),
		stdout: cmd.OutOrStdout(), stderr: cmd.ErrOrStderr(),
		grace: grace, ttl: lease.TTL, deadline: lease.Deadline,
	})
	if err != nil {
		fmt.Fprintf(cmd.ErrOrStderr(), "fencing: %s: %v\n", cmd.Name(), err)
		return 127, nil
	}
	defer child.close()
	// The watchdog ends the command should this process die, or freeze
	// with the lease's deadline near: it hears the deadline every poll,
	// renewed or not, and takes silence for a freeze.
	poll := time.NewTicker(deadlinePoll(lease.TTL))
	defer poll.Stop()
	lost := h.Done()
	for {
		select {
		case <-child.done():
			// A deadline that passed counts as a loss even before the
			// lease's own timer has run (this process was frozen, say).
			if lost == nil || h.Err() != nil || time.Until(h.Lease().Deadline) <= 0 {
				return exitLost, exitCode(exitLost)
			}
			return child.status(), nil
		case sig := <-sigs:
			child.signal(sig)
		case <-poll.C:
			child.setDeadline(h.Lease().Deadline)
		case <-lost:
			lost = nil
			fmt.Fprintf(cmd.ErrOrStderr(), "fencing: %s: %v; stopping the command (SIGTERM, SIGKILL after %v)\n", cmd.Name(), h.Err(), grace)
			child.stop()
		}
	}
}

// lockOptions returns Hold's options as Lock's, to add Lock's own to.
func lockOptions(opts []fencing.HoldOption) []fencing.LockOption {
	lock := make([]fencing.LockOption, len(opts), len(opts)+1)
	for i, o := range opts {
		lock[i] = o
	}
	return lock
}
