package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// TestElect: against etcd and Redis, the first candidate leads and runs its
// command with the term's token; a second waits; a forced release makes the
// first (--once) stop its command and exit 4, and the second takes over
// with a larger token; "leader" and "leader --watch" show each term and the
// vacancy after the second resigns on SIGINT.
func TestElect(t *testing.T) {
	onServers(t, func(t *testing.T, s server) {
		watch := start(t, s.args("leader", "office", "--watch", "--json", "--interval", "20ms")...)
		nextState := func() leaderJSON {
			t.Helper()
			var l leaderJSON
			line := watch.line(30 * time.Second)
			if err := json.Unmarshal([]byte(line), &l); err != nil {
				t.Fatalf("leader --watch printed %q: %v", line, err)
			}
			return l
		}
		if l := nextState(); l.Live {
			t.Fatalf("first state %+v, want vacant", l)
		}
		script := `echo "$FENCING_TOKEN $FENCING_IDENTITY"; exec sleep 60`
		a := start(t, s.args("elect", "office", "--identity", "cand-a", "--once", "--ttl", "2s", "--renew-interval", "200ms", "--", "sh", "-c", script)...)
		var tokA uint64
		var idA string
		fmt.Sscan(a.line(30*time.Second), &tokA, &idA)
		if tokA == 0 || idA != "cand-a" {
			t.Fatalf("candidate a's command saw token %d identity %q", tokA, idA)
		}
		if l := nextState(); !l.Live || l.Identity != "cand-a" || l.Token != tokA {
			t.Fatalf("after a won: %+v", l)
		}
		var l leaderJSON
		wantJSON(t, &l, s.args("leader", "office", "--json")...)
		if !l.Live || l.Identity != "cand-a" || l.Token != tokA {
			t.Fatalf("leader --json = %+v, want cand-a's term %d", l, tokA)
		}
		if r := want(t, 0, s.args("leader", "office")...); !strings.Contains(r.stdout, `led by "cand-a"`) {
			t.Errorf("leader: %s", r.stdout)
		}
		b := start(t, s.args("elect", "office", "-v", "--identity", "cand-b", "--ttl", "2s", "--", "sh", "-c", script)...)
		// b campaigns: its log shows a grant refused for a's live term.
		for deadline := time.Now().Add(30 * time.Second); !strings.Contains(b.errb.String(), "key held by a live lease"); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("candidate b's campaign was never refused; stderr:\n%s", b.errb.String())
			}
		}
		want(t, 0, s.args("release", "office", "--force", "--yes")...)
		if code := a.wait(30 * time.Second); code != exitLost {
			t.Errorf("candidate a (--once) exited %d after losing, want %d; stderr:\n%s", code, exitLost, a.errb.String())
		}
		if e := a.errb.String(); !strings.Contains(e, "fencing: elect: lease lost") || strings.Contains(e, "hold:") {
			t.Errorf("candidate a's loss is not reported as elect's:\n%s", e)
		}
		var tokB uint64
		var idB string
		fmt.Sscan(b.line(30*time.Second), &tokB, &idB)
		if tokB <= tokA || idB != "cand-b" {
			t.Fatalf("candidate b's command saw token %d identity %q; want above %d", tokB, idB, tokA)
		}
		// The watch saw a's term end and b's begin (a vacancy may show between).
		for {
			st := nextState()
			if st.Live && st.Identity == "cand-b" && st.Token == tokB {
				break
			}
			if st.Live {
				t.Fatalf("leader --watch: %+v before b's term", st)
			}
		}
		b.cmd.Process.Signal(os.Interrupt)
		b.wait(30 * time.Second)
		if st := nextState(); st.Live || st.LastToken != tokB {
			t.Fatalf("after b resigned: %+v, want vacant after term %d", st, tokB)
		}
		watch.cmd.Process.Signal(os.Interrupt)
		if code := watch.wait(10 * time.Second); code != 0 {
			t.Errorf("leader --watch exited %d after SIGINT", code)
		}
	})
}

// TestElectCampaignsAgain: without --once, a candidate whose term is broken
// stops its command and leads again with a new term.
func TestElectCampaignsAgain(t *testing.T) {
	onServers(t, func(t *testing.T, s server) {
		p := start(t, s.args("elect", "again", "--ttl", "2s", "--renew-interval", "200ms", "--", "sh", "-c", `echo "$FENCING_TOKEN"; exec sleep 60`)...)
		var first, second uint64
		fmt.Sscan(p.line(30*time.Second), &first)
		want(t, 0, s.args("release", "again", "--force", "--yes")...)
		fmt.Sscan(p.line(30*time.Second), &second)
		if second <= first {
			t.Fatalf("second term %d after %d", second, first)
		}
		var l leaderJSON
		wantJSON(t, &l, s.args("leader", "again", "--json")...)
		host, _ := os.Hostname()
		if !l.Live || l.Token != second || l.Identity != fmt.Sprintf("%s/pid %d", host, p.cmd.Process.Pid) {
			t.Errorf("leader = %+v; want term %d with the default identity", l, second)
		}
		p.cmd.Process.Signal(os.Interrupt)
		p.wait(30 * time.Second)
		if !strings.Contains(p.errb.String(), "campaigning again") {
			t.Errorf("stderr does not say it campaigned again:\n%s", p.errb.String())
		}
		if stderr := p.errb.String(); !strings.Contains(stderr, "fencing: elect: lease lost") || strings.Contains(stderr, "hold:") {
			t.Errorf("stderr does not report the loss as elect's own:\n%s", stderr)
		}
	})
}

// TestSem: two permits of two; a third without --wait exits 3, with --wait
// gets the slot a finished holder frees; --list shows the permits.
func TestSem(t *testing.T) {
	onServers(t, func(t *testing.T, s server) {
		script := `echo "$FENCING_KEY $FENCING_SLOT $FENCING_TOKEN"; exec sleep 60`
		run := func(args ...string) (*proc, string, string, uint64) {
			p := start(t, s.args(append([]string{"sem", "pool", "--size", "2"}, args...)...)...)
			var key, slot string
			var tok uint64
			fmt.Sscan(p.line(30*time.Second), &key, &slot, &tok)
			return p, key, slot, tok
		}
		p1, k1, s1, t1 := run("--owner", "w1", "--", "sh", "-c", script)
		p2, k2, _, _ := run("--owner", "w2", "--", "sh", "-c", script)
		if k1 == k2 || !strings.HasPrefix(k1, "pool/") || k1 != "pool/"+s1 {
			t.Fatalf("permits on %q (slot %q) and %q", k1, s1, k2)
		}
		want(t, exitHeld, s.args("sem", "pool", "--size", "2", "--", "true")...)
		var list permitsJSON
		wantJSON(t, &list, s.args("sem", "pool", "--size", "2", "--list", "--json")...)
		if len(list.Permits) != 2 || list.Permits[0].Owner == "" {
			t.Fatalf("sem --list = %+v", list)
		}
		p3 := start(t, s.args("sem", "pool", "--size", "2", "--wait", "--", "sh", "-c", script)...)
		time.Sleep(300 * time.Millisecond)
		p1.cmd.Process.Signal(os.Interrupt)
		p1.wait(30 * time.Second)
		var k3 string
		var s3 string
		var t3 uint64
		fmt.Sscan(p3.line(30*time.Second), &k3, &s3, &t3)
		if k3 != k1 || t3 <= t1 {
			t.Fatalf("the waiter got %q token %d; want the freed %q with a token above %d", k3, t3, k1, t1)
		}
		if r := want(t, 0, s.args("sem", "pool", "--size", "2", "--list")...); !strings.Contains(r.stdout, "2 of 2 permits held") {
			t.Errorf("sem --list:\n%s", r.stdout)
		}
		want(t, exitUsage, s.args("sem", "pool", "--size", "0", "--", "true")...)
		for _, p := range []*proc{p2, p3} {
			p.cmd.Process.Signal(os.Interrupt)
			p.wait(30 * time.Second)
		}
		wantJSON(t, &list, s.args("sem", "pool", "--size", "2", "--list", "--json")...)
		if len(list.Permits) != 0 {
			t.Errorf("sem --list after every holder ended: %+v", list)
		}
	})
}

func TestElectionCommandsHelp(t *testing.T) {
	r := want(t, 0, "--help")
	for _, c := range []string{"elect", "leader", "sem"} {
		if !strings.Contains(r.stdout, "\n  "+c+" ") {
			t.Errorf("--help does not list %s", c)
		}
		if h := want(t, 0, c, "--help"); !strings.Contains(h.stdout, "Usage:") {
			t.Errorf("%s --help has no usage:\n%s", c, h.stdout)
		}
	}
	want(t, exitUsage, "elect", "k")             // no command
	want(t, exitUsage, "sem", "k", "--", "true") // no --size
}
