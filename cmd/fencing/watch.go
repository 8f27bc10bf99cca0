package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
)

// Watch reports transitions it infers from successive reads (Inspect for a
// key, List for a prefix): the SPI has no event stream. See watchCommand's
// help for what that can and cannot see.

// eventJSON is one line of watch's --json output.
type eventJSON struct {
	Time             time.Time  `json:"time"`
	Key              string     `json:"key"`
	Event            string     `json:"event"` // live, free, granted, renewed, released, expired, ended, delayed
	Token            uint64     `json:"token,omitempty"`
	ExpiresAt        *time.Time `json:"expires_at,omitempty"`
	RemainingSeconds float64    `json:"remaining_seconds,omitempty"`
	Owner            string     `json:"owner,omitempty"`
	LockDelaySeconds float64    `json:"lock_delay_seconds,omitempty"`
	// DelayedUntil and DelayRemainingSeconds go with a "delayed" event.
	DelayedUntil          *time.Time `json:"delayed_until,omitempty"`
	DelayRemainingSeconds float64    `json:"delay_remaining_seconds,omitempty"`
}

// observed is a key's state as one read saw it, with the lease's expiry
// placed on the local monotonic clock (read time + time left), so that
// changes in it do not depend on the two clocks agreeing.
type observed struct {
	st      fencing.KeyState
	readAt  time.Time
	expires time.Time // readAt + Remaining; zero when not live
	base    time.Time // the expiry last reported (granted or renewed)
}

type watcher struct {
	w       io.Writer
	jsonOut bool
	tol     time.Duration // changes of the expiry smaller than this are noise
	seen    map[string]*observed
}

func watchCommand() *cobra.Command {
	var (
		conn     *connFlags
		prefix   bool
		interval time.Duration
	)
	cmd := &cobra.Command{
		Use:   "watch KEY | watch --prefix PREFIX",
		Short: "Stream grants, renewals, releases and expiries as they happen",
		Long: `Watch prints a line for each change of a key (or of every key that begins with
PREFIX, with --prefix): granted with token N, renewed (the expiry moved later),
released (the lease ended before its expiry: by its holder or by release --force)
and expired (it ended at its expiry); "ended" when it cannot tell which; delayed
(the key is in the lock delay of a lease that ended without a release: no grant
before the time it prints) and, once that delay is over, free. It first prints
the current state, and runs until interrupted.

The backends have no event stream, so watch reads the key's state every
--interval (a prefix: lists it, every page) and reports the difference between
two reads; on a backend that announces releases (all of this module's), a watched
key is also read the moment its lease ends. Hence its limits: changes that come
and go between two reads are folded together (a grant and release in between is
reported as "ended" with its token; two renewals as one); a renewal that moves
the expiry by less than 250ms (on etcd, whose time left is in whole seconds: 1s)
is reported with a later one; "released" and "expired" are told apart by the
time the lease had left, so a lease released just before its expiry is reported
as "ended"; and each read costs one request (a prefix: one per page), so keep
--interval modest on a busy server.`,
		Example: `  fencing watch jobs/nightly --etcd-endpoints http://127.0.0.1:2379
  fencing watch --prefix jobs/ --json --redis-addr localhost:6379`,
		Args: cobra.ExactArgs(1),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			if interval < 10*time.Millisecond {
				return fmt.Errorf("%w: --interval %v is below 10ms", errUsage, interval)
			}
			s, err := conn.open(cmd.Context(), cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			defer s.Close()
			// The time left is read to the millisecond, except on etcd,
			// which reports whole seconds rounded down.
			tol := 250 * time.Millisecond
			if s.name == "etcd" {
				tol = time.Second
			}
			wt := &watcher{w: cmd.OutOrStdout(), jsonOut: conn.jsonOut, tol: tol, seen: map[string]*observed{}}
			return wt.run(cmd.Context(), s, args[0], prefix, interval, cmd.ErrOrStderr())
		}),
	}
	cmd.Flags().BoolVar(&prefix, "prefix", false, "watch every key that begins with the argument")
	cmd.Flags().DurationVar(&interval, "interval", 250*time.Millisecond, "how often to read the state")
	conn = addConnFlags(cmd)
	return cmd
}

func (wt *watcher) run(ctx context.Context, s *session, arg string, prefix bool, interval time.Duration, stderr io.Writer) error {
	var freed <-chan struct{}
	if n, ok := s.b.(backend.Notifier); ok && !prefix {
		cctx, cancel := s.call(ctx)
		sub, err := n.NotifyFree(cctx, arg)
		cancel()
		if err == nil {
			defer sub.Close()
			freed = sub.Freed()
		}
	}
	first := true
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		states, err := wt.read(ctx, s, arg, prefix)
		if ctx.Err() != nil {
			return nil // interrupted: a watch ends cleanly
		}
		if err != nil {
			fmt.Fprintf(stderr, "fencing: watch: %v\n", s.wrap(ctx, err))
			if first {
				return s.wrap(ctx, err)
			}
		} else {
			wt.update(states, first, prefix)
			first = false
		}
		select {
		case <-ctx.Done():
			return nil
		case _, ok := <-freed:
			if !ok {
				freed = nil
			}
		case <-t.C:
		}
	}
}

// read returns the watched keys' states.
func (wt *watcher) read(ctx context.Context, s *session, arg string, prefix bool) (map[string]observed, error) {
	out := map[string]observed{}
	if !prefix {
		cctx, cancel := s.call(ctx)
		defer cancel()
		st, err := s.c.Inspect(cctx, arg)
		if err != nil {
			return nil, err
		}
		out[arg] = observe(st)
		return out, nil
	}
	cursor := ""
	for {
		cctx, cancel := s.call(ctx)
		page, next, err := s.c.List(cctx, arg, cursor, 0)
		cancel()
		if err != nil {
			return nil, err
		}
		for _, k := range page {
			out[k.Key] = observe(k.State)
		}
		if next == "" {
			return out, nil
		}
		cursor = next
	}
}

func observe(st fencing.KeyState) observed {
	o := observed{st: st, readAt: time.Now()}
	if st.Live {
		o.expires = o.readAt.Add(st.Remaining)
	}
	return o
}

// update reports the changes from the previous reads to cur.
func (wt *watcher) update(cur map[string]observed, first, prefix bool) {
	for key, now := range cur {
		prev, ok := wt.seen[key]
		if !ok {
			n := now
			n.base = now.expires
			wt.seen[key] = &n
			switch {
			case !first && now.st.Live:
				wt.emit(key, "granted", now)
			case !first && now.st.MaxToken > 0:
				// A key new to the prefix, its first lease granted and
				// ended between two reads.
				wt.emit(key, "ended", observed{st: fencing.KeyState{Token: now.st.MaxToken}, readAt: now.readAt})
			case first && now.st.Live:
				wt.emit(key, "live", now)
			case first && !delayed(now.st) && !prefix:
				wt.emit(key, "free", now)
			}
			if delayed(now.st) {
				wt.emit(key, "delayed", now)
			}
			continue
		}
		wt.transition(key, prev, now)
	}
	for key, prev := range wt.seen {
		if _, ok := cur[key]; !ok { // the backend dropped the key's records
			if prev.st.Live {
				wt.ended(key, prev, prev.st.Token, time.Now())
			}
			delete(wt.seen, key)
		}
	}
}

// transition reports what happened between prev and now, and makes now the
// previous read.
func (wt *watcher) transition(key string, prev *observed, now observed) {
	base := prev.base
	switch {
	case prev.st.Live && (!now.st.Live || now.st.Token != prev.st.Token):
		wt.ended(key, prev, prev.st.Token, now.readAt)
		if now.st.Live {
			wt.emit(key, "granted", now)
		}
		base = now.expires
	case !prev.st.Live && now.st.Live:
		wt.emit(key, "granted", now)
		base = now.expires
	case now.st.Live && now.st.Remaining > 0 && now.expires.After(base.Add(wt.tol)):
		wt.emit(key, "renewed", now)
		base = now.expires
	}
	if !now.st.Live && now.st.MaxToken > prev.st.MaxToken && now.st.MaxToken != prev.st.Token {
		// A lease came and went between two reads.
		wt.emit(key, "ended", observed{st: fencing.KeyState{Token: now.st.MaxToken}, readAt: now.readAt})
	}
	switch {
	case delayed(now.st) && (!delayed(prev.st) || now.st.MaxToken != prev.st.MaxToken):
		wt.emit(key, "delayed", now) // the delay of a lease that just ended
	case delayed(prev.st) && !delayed(now.st) && !now.st.Live && now.st.MaxToken == prev.st.MaxToken:
		wt.emit(key, "free", now) // its delay is over
	}
	*prev = now
	prev.base = base
}

// ended reports the end of prev's lease, seen at readAt: "expired" when its
// expiry had come, "released" when it ended well before, else "ended".
func (wt *watcher) ended(key string, prev *observed, token uint64, readAt time.Time) {
	event := "ended"
	switch {
	case !readAt.Before(prev.expires):
		event = "expired"
	case readAt.Add(wt.tol).Before(prev.expires) && readAt.Sub(prev.readAt) < prev.expires.Sub(readAt):
		// It still had more time left than had passed since the read
		// that saw it live: it cannot have run out.
		event = "released"
	}
	wt.emit(key, event, observed{st: fencing.KeyState{Token: token}, readAt: readAt})
}

func (wt *watcher) emit(key, event string, o observed) {
	if wt.jsonOut {
		e := eventJSON{Time: o.readAt.UTC(), Key: key, Event: event, Token: o.st.Token}
		if o.st.Live {
			at := o.st.ExpiresAt.UTC()
			e.ExpiresAt, e.RemainingSeconds = &at, o.st.Remaining.Seconds()
			e.Owner, e.LockDelaySeconds = o.st.Owner, o.st.LockDelay.Seconds()
		}
		if event == "free" || event == "delayed" {
			e.Token = o.st.MaxToken
		}
		if event == "delayed" {
			until := o.st.DelayedUntil.UTC()
			e.DelayedUntil, e.DelayRemainingSeconds = &until, o.st.DelayRemaining.Seconds()
		}
		printJSON(wt.w, e)
		return
	}
	line := o.readAt.Format("15:04:05.000") + " " + quote(key) + " " + event
	switch event {
	case "free", "delayed":
		line = o.readAt.Format("15:04:05.000") + " " + quote(key) + " " + describe(o.st)
	case "live", "granted", "renewed":
		line += fmt.Sprintf(" token %d (expires in %s)", o.st.Token, short(o.st.Remaining)) + lockDelaySuffix(o.st.LockDelay) + ownerSuffix(o.st.Owner)
	default:
		line += fmt.Sprintf(" token %d", o.st.Token)
	}
	fmt.Fprintln(wt.w, line)
}
