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
}

func toStateJSON(key string, st fencing.KeyState) stateJSON {
	j := stateJSON{Key: key, Live: st.Live, Token: st.Token, MaxToken: st.MaxToken}
	if st.Live {
		at := st.ExpiresAt.UTC()
		j.ExpiresAt, j.RemainingSeconds = &at, st.Remaining.Seconds()
		j.Owner = st.Owner
	}
	return j
}

// describe is a key's state in one phrase.
func describe(st fencing.KeyState) string {
	switch {
	case st.Live:
		return fmt.Sprintf("live, token %d, %s left", st.Token, short(st.Remaining)) + ownerSuffix(st.Owner)
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
