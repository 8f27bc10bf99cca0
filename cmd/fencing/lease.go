package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/fencing-go/fencing"
)

// leaseJSON is a granted or renewed lease in --json output. The lease ID is
// the credential the caller needs to renew and release.
type leaseJSON struct {
	Key           string    `json:"key"`
	LeaseID       string    `json:"lease_id"`
	Token         uint64    `json:"token"`
	TTLSeconds    float64   `json:"ttl_seconds"`
	MarginSeconds float64   `json:"margin_seconds"`
	ExpiresAt     time.Time `json:"expires_at"`
	// LockDelaySeconds is the grant's --lock-delay (renew keeps it and
	// does not print it).
	LockDelaySeconds float64 `json:"lock_delay_seconds,omitempty"`
}

// printLease prints a granted or renewed lease; lockDelay is the grant's
// (zero for a renewal, which keeps the grant's).
func printLease(w io.Writer, jsonOut bool, l fencing.Lease, lockDelay time.Duration) error {
	if jsonOut {
		return printJSON(w, leaseJSON{Key: l.Key, LeaseID: l.ID, Token: l.Token, TTLSeconds: l.TTL.Seconds(), MarginSeconds: l.Margin.Seconds(), ExpiresAt: l.ExpiresAt.UTC(), LockDelaySeconds: lockDelay.Seconds()})
	}
	tw := tabwriter.NewWriter(w, 0, 4, 1, ' ', 0)
	fmt.Fprintf(tw, "key:\t%s\n", quote(l.Key))
	fmt.Fprintf(tw, "token:\t%d\n", l.Token)
	fmt.Fprintf(tw, "lease id:\t%s\n", l.ID)
	fmt.Fprintf(tw, "ttl:\t%v (+%v margin)\n", l.TTL, l.Margin)
	if lockDelay > 0 {
		fmt.Fprintf(tw, "lock delay:\t%v (should the lease end without a release)\n", lockDelay)
	}
	fmt.Fprintf(tw, "deadline:\t%s (stop relying on the lease by then)\n", l.Deadline.UTC().Format(time.RFC3339Nano))
	return tw.Flush()
}

// leaseFlags are grant's and renew's duration flags.
type leaseFlags struct {
	ttl    time.Duration
	margin time.Duration
}

func (f *leaseFlags) add(cmd *cobra.Command) {
	cmd.Flags().DurationVar(&f.ttl, "ttl", 0, "how long the holder may rely on the lease (required)")
	cmd.Flags().DurationVar(&f.margin, "margin", fencing.DefaultMargin, "the coordinator's safety margin past the TTL")
	cmd.MarkFlagRequired("ttl")
}

// outcomeHint explains what to do about a request with an unknown outcome.
func outcomeHint(err error) error {
	var oe *fencing.OutcomeError
	if errors.As(err, &oe) && !oe.Settled {
		return fmt.Errorf("%w\nthe request may have taken effect; to settle it: fencing release %s --lease-id %s", err, quote(oe.Key), oe.LeaseID)
	}
	return err
}

func grantCommand() *cobra.Command {
	var (
		conn *connFlags
		lf   leaseFlags
	)
	cmd := &cobra.Command{
		Use:   "grant KEY --ttl DURATION",
		Short: "Take a lease on KEY and print its token and lease ID",
		Long: `Grant takes a lease on KEY for --ttl and prints its fencing token and its lease
ID, the credential that renews and releases it. It does not renew the lease: for
a command that runs under a lease, use hold. A key held by a live lease, or in
the lock delay of one that ended without a release, exits with status 3.

With --lock-delay D, should the lease end without a release (it expires, or
release --force ends it), no grant on KEY succeeds for D more, so that a holder
that is still running has time to stop what no token guards. A release ends it
with no delay.`,
		Example: `  lease=$(fencing grant jobs/nightly --ttl 30s --json --etcd-endpoints http://127.0.0.1:2379)
  id=$(echo "$lease" | jq -r .lease_id)`,
		Args: cobra.ExactArgs(1),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			s, ctx, done, err := conn.start(cmd)
			if err != nil {
				return err
			}
			defer done()
			l, err := s.c.Grant(ctx, args[0], lf.ttl, lf.margin)
			if err != nil {
				return outcomeHint(s.wrap(ctx, err))
			}
			return printLease(cmd.OutOrStdout(), conn.jsonOut, l, conn.lockDelay)
		}),
	}
	lf.add(cmd)
	conn = addConnFlags(cmd)
	addOwnerFlag(cmd, conn)
	addLockDelayFlag(cmd, conn)
	return cmd
}

func renewCommand() *cobra.Command {
	var (
		conn    *connFlags
		lf      leaseFlags
		leaseID string
	)
	cmd := &cobra.Command{
		Use:   "renew KEY --lease-id ID --ttl DURATION",
		Short: "Extend a lease to --ttl from now, keeping its token",
		Long: `Renew extends the live lease --lease-id on KEY to --ttl (plus the margin) from
now, keeping its token. A lease that expired, was released or was broken with
release --force exits with status 4: stop using its token.`,
		Example: `  fencing renew jobs/nightly --lease-id "$id" --ttl 30s
  FENCING_LEASE_ID=$id fencing renew jobs/nightly --ttl 30s`,
		Args: cobra.ExactArgs(1),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			if leaseID == "" {
				return fmt.Errorf("%w: renew needs --lease-id (or FENCING_LEASE_ID)", errUsage)
			}
			s, ctx, done, err := conn.start(cmd)
			if err != nil {
				return err
			}
			defer done()
			l, err := s.c.Renew(ctx, args[0], leaseID, lf.ttl, lf.margin)
			if err != nil {
				return s.wrap(ctx, err)
			}
			return printLease(cmd.OutOrStdout(), conn.jsonOut, l, 0)
		}),
	}
	lf.add(cmd)
	addLeaseIDFlag(cmd, &leaseID)
	conn = addConnFlags(cmd)
	return cmd
}

func addLeaseIDFlag(cmd *cobra.Command, id *string) {
	cmd.Flags().StringVar(id, "lease-id", "", "the lease's ID, as grant printed it (or FENCING_LEASE_ID)")
	cmd.Flags().SetAnnotation("lease-id", envAnnotation, []string{envName("lease-id")})
}

// releaseJSON is release's --json output.
type releaseJSON struct {
	Key    string `json:"key"`
	Forced bool   `json:"forced"`
	// Ended says that this command ended a live lease: false for a
	// release by ID of a lease released before (a repeat, which succeeds
	// and changes nothing) and for --force on a key with no live lease.
	Ended bool `json:"ended"`
	// Token is the token of the lease this command ended, when known.
	Token uint64 `json:"token,omitempty"`
}

func releaseCommand() *cobra.Command {
	var (
		conn    *connFlags
		leaseID string
		force   bool
		yes     bool
	)
	cmd := &cobra.Command{
		Use:   "release KEY (--lease-id ID | --force)",
		Short: "End a lease; with --force, whoever holds it (break glass)",
		Long: `Release ends the lease --lease-id on KEY at once. Releasing it again is not an
error; a lease that already expired or is not the key's exits with status 4.

With --force instead of --lease-id it ends the key's live lease whoever holds it:
the break-glass release for a holder that is stuck but still renewing. It shows
the lease and asks for confirmation on the terminal unless --yes is given. The
key is free at once, or, when the lease has a lock delay (grant --lock-delay),
once that delay has passed from now; the old holder's renewals then fail (hold stops its command),
its token stops checking true, and the next grant gets a larger token. Tokens
the old holder already sent are stopped only by resources that check tokens.`,
		Example: `  fencing release jobs/nightly --lease-id "$id"
  fencing release jobs/nightly --force            # asks first
  fencing release jobs/nightly --force --yes      # for scripts`,
		Args: cobra.ExactArgs(1),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			key := args[0]
			switch {
			case force && leaseID != "":
				return fmt.Errorf("%w: give --lease-id or --force, not both", errUsage)
			case !force && leaseID == "":
				return fmt.Errorf("%w: give --lease-id (the holder's release) or --force (break glass)", errUsage)
			case !force && yes:
				return fmt.Errorf("%w: --yes goes with --force", errUsage)
			}
			s, ctx, done, err := conn.start(cmd)
			if err != nil {
				return err
			}
			defer done()
			if !force {
				return releaseByID(ctx, cmd.OutOrStdout(), s, conn.jsonOut, key, leaseID)
			}
			st, err := s.c.Inspect(ctx, key)
			if err != nil {
				return s.wrap(ctx, err)
			}
			if !st.Live {
				return forceResult(cmd.OutOrStdout(), conn.jsonOut, key, false, st)
			}
			if !yes {
				if err := confirm(cmd, key, st); err != nil {
					return err
				}
				// The question may have taken a while: the request gets a
				// timeout of its own.
				var cancel context.CancelFunc
				ctx, cancel = s.call(cmd.Context())
				defer cancel()
			}
			ended, err := s.c.ForceRelease(ctx, key)
			if err != nil {
				return s.wrap(ctx, err)
			}
			return forceResult(cmd.OutOrStdout(), conn.jsonOut, key, ended, st)
		}),
	}
	addLeaseIDFlag(cmd, &leaseID)
	cmd.Flags().BoolVar(&force, "force", false, "end the key's live lease whoever holds it")
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "with --force: do not ask for confirmation")
	conn = addConnFlags(cmd)
	return cmd
}

// releaseByID releases leaseID on key and says whether this call ended it.
// Release succeeds again for a lease released before, so the key's state
// is read first: a lease that is still live and then released by its ID was
// ended now; a key with no live lease whose release by ID succeeds had it
// released already. (Had the lease expired, or had another taken the key,
// Release fails.)
func releaseByID(ctx context.Context, w io.Writer, s *session, jsonOut bool, key, leaseID string) error {
	before, err := s.c.Inspect(ctx, key)
	if err != nil {
		return s.wrap(ctx, err)
	}
	if err := s.c.Release(ctx, key, leaseID); err != nil {
		return s.wrap(ctx, err)
	}
	var token uint64
	if before.Live {
		token = before.Token
	}
	if jsonOut {
		return printJSON(w, releaseJSON{Key: key, Ended: before.Live, Token: token})
	}
	if !before.Live {
		fmt.Fprintf(w, "the lease on %s was released already; nothing changed\n", quote(key))
		return nil
	}
	fmt.Fprintf(w, "released %s (token %d)\n", quote(key), token)
	return nil
}

// errNotConfirmed is returned when a forced release was not confirmed.
var errNotConfirmed = errors.New("forced release not confirmed; nothing was changed")

// confirm asks on the terminal whether to break key's lease.
func confirm(cmd *cobra.Command, key string, st fencing.KeyState) error {
	in := cmd.InOrStdin()
	if !isTerminal(in) {
		return fmt.Errorf("%w: release --force asks for confirmation on a terminal; pass --yes to skip it", errUsage)
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "%s is held (%s).\nEnd this lease whoever holds it? [y/N] ", quote(key), describe(st))
	answer, _ := bufio.NewReader(in).ReadString('\n')
	if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
		return errNotConfirmed
	}
	return nil
}

func forceResult(w io.Writer, jsonOut bool, key string, ended bool, before fencing.KeyState) error {
	var token uint64
	if ended {
		token = before.Token // the lease it ended, unless another took its place meanwhile
	}
	if jsonOut {
		return printJSON(w, releaseJSON{Key: key, Forced: true, Ended: ended, Token: token})
	}
	switch {
	case !ended && delayed(before):
		fmt.Fprintf(w, "%s had no live lease (%s); nothing changed\n", quote(key), delayText(before))
	case !ended:
		fmt.Fprintf(w, "%s had no live lease; nothing changed\n", quote(key))
	case before.LockDelay > 0:
		fmt.Fprintf(w, "ended the lease on %s (token %d); the key stays closed for its lock delay of %s, then the next grant gets a larger token\n", quote(key), token, short(before.LockDelay))
	default:
		fmt.Fprintf(w, "ended the lease on %s (token %d); the next grant gets a larger token\n", quote(key), token)
	}
	return nil
}
