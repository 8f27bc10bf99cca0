package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The tests of this file run hold --rw, a side of a read-write lock
// (package rwlock), on a SQLite file shared by the processes.

// rwArgs returns hold --rw side's arguments on the SQLite file db, running
// the shell script sh.
func rwArgs(db, key, side, sh string) []string {
	return []string{"hold", key, "--sqlite-path", db, "--ttl", "10s", "--wait", "--rw", side, "--", "sh", "-c", sh}
}

// TestHoldRWReaders: two readers hold the lock at once. Each reader's
// command marks that it runs, then waits for the other's mark: readers
// that excluded each other would never both finish.
func TestHoldRWReaders(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "rw.db")
	sh := func(me, other string) string {
		return fmt.Sprintf(`touch %s/%s; while [ ! -e %s/%s ]; do sleep 0.05; done; echo "$FENCING_KEY $FENCING_TOKEN"`, dir, me, dir, other)
	}
	a := start(t, rwArgs(db, "reports", "read", sh("a", "b"))...)
	b := start(t, rwArgs(db, "reports", "read", sh("b", "a"))...)
	var ta, tb uint64
	var ka, kb string
	fmt.Sscan(a.line(time.Minute), &ka, &ta)
	fmt.Sscan(b.line(time.Minute), &kb, &tb)
	if ca, cb := a.wait(time.Minute), b.wait(time.Minute); ca != 0 || cb != 0 {
		t.Fatalf("readers exited %d and %d; stderr:\n%s\n%s", ca, cb, a.errb.String(), b.errb.String())
	}
	if ka != "reports" || kb != "reports" || ta == 0 || tb == 0 || ta == tb {
		t.Errorf("readers saw FENCING_KEY, FENCING_TOKEN %q %d and %q %d: want the lock's name and distinct tokens", ka, ta, kb, tb)
	}
}

// TestHoldRWWriterWaits: a writer waits for the reader inside: it passes
// the turnstile (the key itself, which it then holds) but runs its command
// only once the reader's command has ended, and its token is above the
// reader's.
func TestHoldRWWriterWaits(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "rw.db")
	r := start(t, rwArgs(db, "reports", "read", fmt.Sprintf(`echo "$FENCING_TOKEN"; while [ ! -e %s/go ]; do sleep 0.05; done; touch %s/rdone`, dir, dir))...)
	var rt uint64
	fmt.Sscan(r.line(time.Minute), &rt)
	// A writer that gives up waiting exits 3, as hold --wait does.
	if r := want(t, exitHeld, "hold", "reports", "--sqlite-path", db, "--ttl", "10s", "--wait", "--wait-timeout", "300ms", "--rw", "write", "--", "true"); !strings.Contains(r.stderr, "--wait-timeout") {
		t.Errorf("hold --rw write --wait-timeout: %v", r)
	}
	w := start(t, rwArgs(db, "reports", "write", fmt.Sprintf(`if [ -e %s/rdone ]; then echo "after $FENCING_TOKEN"; else echo "during $FENCING_TOKEN"; fi`, dir))...)
	// The writer holds the turnstile while it waits for the reader slots,
	// and runs nothing.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		select {
		case l := <-w.lines:
			t.Fatalf("the writer ran its command (%q) while the reader was inside", l)
		default:
		}
		var st stateJSON
		wantJSON(t, &st, "get", "reports", "--sqlite-path", db, "--json")
		if st.Live && st.Token > rt {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the writer never held the turnstile: %+v; writer's stderr:\n%s", st, w.errb.String())
		}
	}
	select {
	case l := <-w.lines:
		t.Fatalf("the writer ran its command (%q) while the reader was inside", l)
	default:
	}
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if code := r.wait(time.Minute); code != 0 {
		t.Fatalf("reader exited %d; stderr:\n%s", code, r.errb.String())
	}
	var when string
	var wt uint64
	fmt.Sscan(w.line(time.Minute), &when, &wt)
	if code := w.wait(time.Minute); code != 0 || when != "after" || wt <= rt {
		t.Errorf("writer: exit %d, ran %s the reader, token %d after the reader's %d; stderr:\n%s", code, when, wt, rt, w.errb.String())
	}
}

// TestHoldRWTokens: each writer's token is above the earlier writer's and
// the reader's between them, which is above the first writer's.
func TestHoldRWTokens(t *testing.T) {
	db := filepath.Join(t.TempDir(), "rw.db")
	var tokens []uint64
	for _, side := range []string{"write", "read", "write"} {
		r := want(t, 0, rwArgs(db, "reports", side, `echo "$FENCING_TOKEN"`)...)
		var tok uint64
		fmt.Sscan(r.stdout, &tok)
		tokens = append(tokens, tok)
	}
	if !(0 < tokens[0] && tokens[0] < tokens[1] && tokens[1] < tokens[2]) {
		t.Errorf("tokens of a writer, a reader, a writer: %v, want increasing", tokens)
	}
}

// TestHoldRWBadFlags: --rw and --readers with flags that make no sense
// with them are refused with exit 2.
func TestHoldRWBadFlags(t *testing.T) {
	db := filepath.Join(t.TempDir(), "rw.db")
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--rw", "both", "--wait"}, "want read or write"},
		{[]string{"--readers", "2", "--wait"}, "--readers goes with --rw"},
		{[]string{"--rw", "read"}, "--rw goes with --wait"},
		{[]string{"--rw", "read", "--wait", "--fifo"}, "drop --fifo"},
		{[]string{"--rw", "write", "--wait", "--readers", "0"}, "--readers 0"},
		{[]string{"--rw", "write", "--wait", "--readers", "65"}, "--readers 65"},
		{[]string{"other", "--rw", "write", "--wait"}, "one key"},
	} {
		args := append(append([]string{"hold", "k", "--ttl", "1s", "--sqlite-path", db}, c.args...), "--", "true")
		r := runBin(t, args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, c.msg) {
			t.Errorf("fencing %q: want exit 2 and %q, got %v", args, c.msg, r)
		}
	}
}
