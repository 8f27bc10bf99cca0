package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/fencing-go/fencing"
)

// printJSON writes v as one line of JSON.
func printJSON(w io.Writer, v any) error {
	return json.NewEncoder(w).Encode(v)
}

// stateJSON is a key's state in --json output. It never has the lease ID.
type stateJSON struct {
	Key              string     `json:"key"`
	Live             bool       `json:"live"`
	Token            uint64     `json:"token,omitempty"`
	MaxToken         uint64     `json:"max_token"`
	ExpiresAt        *time.Time `json:"expires_at,omitempty"`
	RemainingSeconds float64    `json:"remaining_seconds,omitempty"`
	Owner            string     `json:"owner,omitempty"`
	// LockDelaySeconds is the live lease's lock delay.
	LockDelaySeconds float64 `json:"lock_delay_seconds,omitempty"`
	// DelayedUntil and DelayRemainingSeconds are set while no lease is
	// live and the key is in a lock delay: no grant succeeds until then.
	DelayedUntil          *time.Time `json:"delayed_until,omitempty"`
	DelayRemainingSeconds float64    `json:"delay_remaining_seconds,omitempty"`
}

func toStateJSON(key string, st fencing.KeyState) stateJSON {
	j := stateJSON{Key: key, Live: st.Live, Token: st.Token, MaxToken: st.MaxToken}
	if st.Live {
		at := st.ExpiresAt.UTC()
		j.ExpiresAt, j.RemainingSeconds = &at, st.Remaining.Seconds()
		j.Owner, j.LockDelaySeconds = st.Owner, st.LockDelay.Seconds()
	}
	if delayed(st) {
		until := st.DelayedUntil.UTC()
		j.DelayedUntil, j.DelayRemainingSeconds = &until, st.DelayRemaining.Seconds()
	}
	return j
}

// delayed reports whether key is in a lock delay: no lease live, and no
// grant before st.DelayedUntil.
func delayed(st fencing.KeyState) bool { return !st.Live && st.DelayRemaining > 0 }

// delayText is a delayed key's state: "delayed until <time> (<d> left)".
func delayText(st fencing.KeyState) string {
	return fmt.Sprintf("delayed until %s (%s left)", st.DelayedUntil.UTC().Format(time.RFC3339Nano), short(st.DelayRemaining))
}

// lockDelaySuffix is ", lock delay <d>" for a live lease with one, or
// nothing.
func lockDelaySuffix(d time.Duration) string {
	if d <= 0 {
		return ""
	}
	return ", lock delay " + short(d)
}

// describe is a key's state in one phrase.
func describe(st fencing.KeyState) string {
	switch {
	case st.Live:
		return fmt.Sprintf("live, token %d, %s left", st.Token, short(st.Remaining)) + lockDelaySuffix(st.LockDelay) + ownerSuffix(st.Owner)
	case delayed(st):
		return fmt.Sprintf("%s, last token %d", delayText(st), st.MaxToken)
	case st.MaxToken == 0:
		return "never leased"
	}
	return fmt.Sprintf("free, last token %d", st.MaxToken)
}

// short rounds d for people.
func short(d time.Duration) string {
	switch {
	case d >= time.Minute:
		return d.Round(time.Second).String()
	case d >= time.Second:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Millisecond).String()
}

// quote quotes a key for text output.
func quote(key string) string { return strconv.Quote(key) }

// isTerminal reports whether w (a reader or writer) is a terminal.
func isTerminal(w any) bool {
	f, ok := w.(*os.File)
	return ok && fileIsTerminal(f)
}

// spinner shows a progress line on w while something waits, only when w is
// a terminal. Its zero value and a nil *spinner do nothing.
type spinner struct {
	w    io.Writer
	msg  string
	stop chan struct{}
	done chan struct{}
}

// startSpinner starts a spinner with msg when w is a terminal, else
// returns nil.
func startSpinner(w io.Writer, msg string) *spinner {
	if !isTerminal(w) {
		return nil
	}
	s := &spinner{w: w, msg: msg, stop: make(chan struct{}), done: make(chan struct{})}
	go s.run()
	return s
}

func (s *spinner) run() {
	defer close(s.done)
	frames := `|/-\`
	t := time.NewTicker(120 * time.Millisecond)
	defer t.Stop()
	start := time.Now()
	for i := 0; ; i++ {
		fmt.Fprintf(s.w, "\r\033[K%c %s (%s)", frames[i%len(frames)], s.msg, time.Since(start).Round(time.Second))
		select {
		case <-s.stop:
			fmt.Fprint(s.w, "\r\033[K")
			return
		case <-t.C:
		}
	}
}

// Stop clears the line and stops the spinner.
func (s *spinner) Stop() {
	if s == nil {
		return
	}
	close(s.stop)
	<-s.done
}
