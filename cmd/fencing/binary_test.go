package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencing-go/fencing/internal/testing/etcdtest"
	"github.com/fencing-go/fencing/internal/testing/redistest"
)

// binary is the fencing command built once by TestMain.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "fencing-cli")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "fencing")
	// The default backend's SQLite file goes in the state directory:
	// the test's own, never the user's.
	os.Setenv("XDG_STATE_HOME", filepath.Join(dir, "state"))
	build := exec.Command("go", "build", "-o", binary, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build the fencing command:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// result is one finished run of the binary.
type result struct {
	stdout, stderr string
	code           int
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// runBin runs the binary with args to the end (at most a minute), with
// stdin from /dev/null and the FENCING_ variables of the test's
// environment removed.
func runBin(t *testing.T, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = cleanEnv()
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	var exitErr *exec.ExitError
	switch {
	case errors.As(err, &exitErr):
		r.code = exitErr.ExitCode()
	case err != nil:
		t.Fatalf("fencing %q: %v", args, err)
	}
	return r
}

func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, envPrefix) {
			env = append(env, kv)
		}
	}
	return env
}

// want runs the binary and fails the test unless it exits with code.
func want(t *testing.T, code int, args ...string) result {
	t.Helper()
	r := runBin(t, args...)
	if r.code != code {
		t.Fatalf("fencing %s: want exit %d, got %v", strings.Join(args, " "), code, r)
	}
	return r
}

// wantJSON runs the binary, wants exit 0, and decodes its stdout into v.
func wantJSON(t *testing.T, v any, args ...string) {
	t.Helper()
	r := want(t, 0, args...)
	if err := json.Unmarshal([]byte(r.stdout), v); err != nil {
		t.Fatalf("fencing %s: output is not JSON: %v\n%v", strings.Join(args, " "), err, r)
	}
}

// proc is a run of the binary in the background.
type proc struct {
	t     *testing.T
	cmd   *exec.Cmd
	lines chan string // stdout, line by line; closed at EOF
	done  chan struct{}
	err   error
	errb  syncBuilder // read while the process writes
}

// syncBuilder is a strings.Builder safe for a writer and readers at once.
type syncBuilder struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuilder) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuilder) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func start(t *testing.T, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, cmd: exec.Command(binary, args...), lines: make(chan string, 100), done: make(chan struct{})}
	p.cmd.Env = cleanEnv()
	p.cmd.Stderr = &p.errb
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
		io.Copy(io.Discard, out)
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

// line returns the next line of stdout, failing after timeout.
func (p *proc) line(timeout time.Duration) string {
	p.t.Helper()
	select {
	case l, ok := <-p.lines:
		if !ok {
			p.t.Fatalf("%s: stdout ended; stderr:\n%s", p.cmd.Args, p.errb.String())
		}
		return l
	case <-time.After(timeout):
		p.t.Fatalf("%s: no line within %v; stderr:\n%s", p.cmd.Args, timeout, p.errb.String())
	}
	return ""
}

// wait waits for the process to exit and returns its exit code.
func (p *proc) wait(timeout time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.t.Fatalf("%s: still running after %v; stderr:\n%s", p.cmd.Args, timeout, p.errb.String())
	}
	var exitErr *exec.ExitError
	if errors.As(p.err, &exitErr) {
		return exitErr.ExitCode()
	}
	if p.err != nil {
		p.t.Fatalf("%s: %v", p.cmd.Args, p.err)
	}
	return 0
}

// server is one real server the binary talks to, as flags.
type server struct {
	name      string
	flags     []string
	waitState func(t *testing.T) waitState // see waitingFor
}

// servers starts an etcd member and a Redis server (skipped without
// redis-server, except in CI) for t.
func servers(t *testing.T) []server {
	t.Helper()
	if testing.Short() {
		t.Skip("starts etcd and redis-server")
	}
	m := etcdtest.Start(t)
	out := []server{
		{"etcd", []string{"--etcd-endpoints", m.ClientURL}, etcdWaitState(m)},
		// SQLite waiters poll the rows: there is no subscription to observe
		// (waitState nil), so TestHoldWait checks only that the waiter gets the key.
		{"sqlite", []string{"--sqlite-path", filepath.Join(t.TempDir(), "cli.db")}, nil},
	}
	if _, err := exec.LookPath("redis-server"); err == nil || os.Getenv("REDIS_SERVER") != "" || os.Getenv("CI") != "" {
		r := redistest.Start(t, redistest.Config{AppendOnly: true})
		out = append(out, server{"redis", []string{"--redis-addr", r.Addr()}, redisWaitState(r)})
	} else {
		t.Log("redis-server not found: testing etcd only (install Redis 7 or set REDIS_SERVER)")
	}
	return out
}

// args puts the server's flags right after the command's name, before any
// "--".
func (s server) args(args ...string) []string {
	return append(append([]string{args[0]}, s.flags...), args[1:]...)
}

// onServers runs f against each real server.
func onServers(t *testing.T, f func(t *testing.T, s server)) {
	for _, s := range servers(t) {
		t.Run(s.name, func(t *testing.T) { f(t, s) })
	}
}

// closedPort returns a loopback address where nothing listens.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func TestHelpListsEveryCommand(t *testing.T) {
	r := want(t, 0, "--help")
	for _, c := range []string{"demo", "get", "list", "grant", "renew", "release", "hold", "watch", "completion"} {
		if !strings.Contains(r.stdout, "\n  "+c+" ") {
			t.Errorf("--help does not list %s:\n%s", c, r.stdout)
		}
		if c != "completion" {
			h := want(t, 0, c, "--help")
			if !strings.Contains(h.stdout, "Usage:") {
				t.Errorf("%s --help has no usage:\n%s", c, h.stdout)
			}
		}
	}
	if r := want(t, 0, "completion", "bash"); !strings.Contains(r.stdout, "bash completion") {
		t.Errorf("completion bash printed no script:\n%s", r.stdout)
	}
}

func TestDemoBinary(t *testing.T) {
	r := want(t, 0, "demo")
	if !strings.Contains(r.stdout, "the stale write with token 1 was rejected") {
		t.Errorf("demo output:\n%s", r.stdout)
	}
	want(t, 1, "demo", "--fence=false")
	want(t, 2, "demo", "--pause", "1s")
}

func TestBadFlags(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing.pem")
	junk := filepath.Join(t.TempDir(), "junk.pem")
	os.WriteFile(junk, []byte("not a certificate"), 0o600)
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"nosuchcommand"}, "unknown command"},
		{[]string{"get", "k", "--nosuchflag"}, "unknown flag"},
		{[]string{"get"}, "accepts 1 arg"},
		{[]string{"grant", "k"}, `"ttl" not set`},
		{[]string{"grant", "k", "--ttl", "-1s"}, "invalid timeout"},
		{[]string{"grant", "k", "--ttl", "soon"}, "invalid argument"},
		{[]string{"grant", "", "--ttl", "1s"}, "invalid key"},
		{[]string{"renew", "k", "--ttl", "1s"}, "--lease-id"},
		{[]string{"release", "k"}, "--lease-id"},
		{[]string{"release", "k", "--lease-id", "x", "--force"}, "not both"},
		{[]string{"get", "k", "--backend", "zookeeper"}, "want one of sqlite, postgres, mysql, memory, etcd, redis, kube, nats"},
		{[]string{"get", "k", "--backend", "etcd"}, "--etcd-endpoints"},
		{[]string{"get", "k", "--backend", "sqlite", "--key-prefix", "app/"}, "--key-prefix (or FENCING_KEY_PREFIX) applies to etcd and Redis only, not to --backend sqlite"},
		{[]string{"get", "k", "--postgres-dsn", "postgres://127.0.0.1:1/x", "--key-prefix", "app/"}, "not to --backend postgres"},
		{[]string{"get", "k", "--backend", "memory", "--key-prefix", "app/"}, "not to --backend memory"},
		{[]string{"get", "k", "--etcd-endpoints", "https://127.0.0.1:1", "--etcd-cacert", missing}, "--etcd-cacert"},
		{[]string{"get", "k", "--etcd-endpoints", "https://127.0.0.1:1", "--etcd-cacert", junk}, "no PEM certificate"},
		{[]string{"get", "k", "--etcd-endpoints", "https://127.0.0.1:1", "--etcd-cert", junk}, "go together"},
		{[]string{"get", "k", "--redis-addr", "127.0.0.1:1", "--redis-cert", junk, "--redis-key", junk}, "--redis-cert"},
		{[]string{"get", "k", "--redis-addr", "a:1,b:2"}, "--redis-cluster"},
		{[]string{"get", "k", "--redis-addr", "redis://%zz"}, "--redis-addr"},
		{[]string{"get", "k", "--redis-addr", "a:1", "--redis-config-check", "maybe"}, "refuse, warn or ignore"},
		{[]string{"hold", "k", "--ttl", "1s", "echo"}, `then "--"`},
		{[]string{"hold", "k", "--ttl", "1s", "--"}, `then "--"`},
		{[]string{"hold", "k", "--ttl", "1s", "--wait-timeout", "1s", "--", "true"}, "goes with --wait"},
		{[]string{"hold", "k", "--ttl", "1s", "--renew-interval", "2s", "--", "true"}, "renew interval"},
		{[]string{"watch", "k", "--interval", "1ms"}, "--interval"},
		{[]string{"list", "--limit", "0"}, "--limit"},
	} {
		r := runBin(t, c.args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, c.msg) {
			t.Errorf("fencing %q: want exit 2 and %q, got %v", c.args, c.msg, r)
		}
	}
	// A bad value in an environment variable is named.
	cmd := exec.Command(binary, "get", "k")
	cmd.Env = append(cleanEnv(), "FENCING_REQUEST_TIMEOUT=soon")
	out, err := cmd.CombinedOutput()
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) || exitErr.ExitCode() != exitUsage || !strings.Contains(string(out), "$FENCING_REQUEST_TIMEOUT") {
		t.Errorf("bad FENCING_REQUEST_TIMEOUT: %v\n%s", err, out)
	}
}

func TestUnreachable(t *testing.T) {
	addr := closedPort(t)
	for _, args := range [][]string{
		{"get", "k", "--etcd-endpoints", "http://" + addr, "--request-timeout", "500ms"},
		{"grant", "k", "--ttl", "1s", "--redis-addr", addr, "--request-timeout", "500ms"},
		{"hold", "k", "--ttl", "1s", "--etcd-endpoints", "http://" + addr, "--request-timeout", "500ms", "--", "true"},
	} {
		r := runBin(t, args...)
		if r.code != exitUnreachable || !strings.Contains(r.stderr, "server unreachable") || !strings.Contains(r.stderr, addr) {
			t.Errorf("fencing %q: want exit 5 naming %s, got %v", args, addr, r)
		}
	}
}

func TestHoldMemory(t *testing.T) {
	r := want(t, 7, "hold", "jobs/a", "--ttl", "2s", "--", "sh", "-c", `echo "$FENCING_KEY $FENCING_TOKEN"; exit 7`)
	if r.stdout != "jobs/a 1\n" {
		t.Errorf("the command saw %q, want FENCING_KEY=jobs/a FENCING_TOKEN=1", r.stdout)
	}
	// The lease is renewed while the command outlives several renew
	// intervals.
	want(t, 0, "hold", "k", "--ttl", "300ms", "--margin", "0s", "--", "sleep", "1")
	r = want(t, 127, "hold", "k", "--ttl", "1s", "--", "/no/such/command")
	if !strings.Contains(r.stderr, "/no/such/command") {
		t.Errorf("stderr does not name the command: %v", r)
	}
	r = want(t, 128+int(syscall.SIGKILL), "hold", "k", "--ttl", "1s", "--", "sh", "-c", "kill -9 $$")
	_ = r
}

func TestFlow(t *testing.T) {
	onServers(t, func(t *testing.T, s server) {
		var st stateJSON
		wantJSON(t, &st, s.args("get", "flow", "--json")...)
		if st.Live || st.MaxToken != 0 {
			t.Fatalf("a fresh key: %+v", st)
		}
		var l1 leaseJSON
		wantJSON(t, &l1, s.args("grant", "flow", "--ttl", "10s", "--json")...)
		if l1.Token == 0 || l1.LeaseID == "" || l1.TTLSeconds < 10 {
			t.Fatalf("grant: %+v", l1)
		}
		r := want(t, exitHeld, s.args("grant", "flow", "--ttl", "10s")...)
		if !strings.Contains(r.stderr, "held") {
			t.Errorf("held grant: %v", r)
		}
		wantJSON(t, &st, s.args("get", "flow", "--json")...)
		if !st.Live || st.Token != l1.Token || st.MaxToken != l1.Token || st.RemainingSeconds <= 0 || st.RemainingSeconds > 12 || st.ExpiresAt == nil {
			t.Errorf("get after grant: %+v, lease %+v", st, l1)
		}
		r = want(t, 0, s.args("get", "flow")...)
		if !strings.Contains(r.stdout, "live") || strings.Contains(r.stdout, l1.LeaseID) {
			t.Errorf("get shows no state, or shows the lease ID:\n%s", r.stdout)
		}
		var l2 leaseJSON
		wantJSON(t, &l2, s.args("renew", "flow", "--lease-id", l1.LeaseID, "--ttl", "10s", "--json")...)
		if l2.Token != l1.Token {
			t.Errorf("renew changed the token: %d -> %d", l1.Token, l2.Token)
		}
		want(t, 0, s.args("release", "flow", "--lease-id", l1.LeaseID)...)
		wantJSON(t, &st, s.args("get", "flow", "--json")...)
		if st.Live || st.MaxToken != l1.Token {
			t.Errorf("get after release: %+v", st)
		}
		want(t, exitLost, s.args("renew", "flow", "--lease-id", l1.LeaseID, "--ttl", "10s")...)

		// Break glass.
		var l3 leaseJSON
		wantJSON(t, &l3, s.args("grant", "flow", "--ttl", "10s", "--json")...)
		r = want(t, exitUsage, s.args("release", "flow", "--force")...) // stdin is not a terminal
		if !strings.Contains(r.stderr, "--yes") {
			t.Errorf("release --force without a terminal: %v", r)
		}
		var rel releaseJSON
		wantJSON(t, &rel, s.args("release", "flow", "--force", "--yes", "--json")...)
		if !rel.Ended || !rel.Forced || rel.Token != l3.Token {
			t.Errorf("forced release: %+v, lease %+v", rel, l3)
		}
		want(t, exitLost, s.args("renew", "flow", "--lease-id", l3.LeaseID, "--ttl", "10s")...)
		r = want(t, 0, s.args("release", "flow", "--force", "--yes")...)
		if !strings.Contains(r.stdout, "no live lease") {
			t.Errorf("forced release of a free key: %v", r)
		}
		var l4 leaseJSON
		wantJSON(t, &l4, s.args("grant", "flow", "--ttl", "10s", "--json")...)
		if !(l1.Token < l3.Token && l3.Token < l4.Token) {
			t.Errorf("tokens %d, %d, %d do not increase", l1.Token, l3.Token, l4.Token)
		}
		// The lease ID in an environment variable.
		cmd := exec.Command(binary, s.args("release", "flow")...)
		cmd.Env = append(cleanEnv(), "FENCING_LEASE_ID="+l4.LeaseID)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("release with FENCING_LEASE_ID: %v\n%s", err, out)
		}
	})
}

func TestList(t *testing.T) {
	onServers(t, func(t *testing.T, s server) {
		for _, k := range []string{"list/a", "list/b", "list/c", "other"} {
			want(t, 0, s.args("grant", k, "--ttl", "30s")...)
		}
		var all listJSON
		wantJSON(t, &all, s.args("list", "list/", "--limit", "1", "--all", "--json")...)
		if got := keysOf(all); got != "list/a,list/b,list/c" || all.Next != "" {
			t.Errorf("list --all: keys %s, next %q", got, all.Next)
		}
		for _, k := range all.Keys {
			if !k.Live || k.Token == 0 {
				t.Errorf("listed key %+v is not live", k)
			}
		}
		// Page by page: every key once.
		seen := map[string]int{}
		cursor := ""
		for range 10 {
			var page listJSON
			wantJSON(t, &page, s.args("list", "list/", "--limit", "2", "--cursor", cursor, "--json")...)
			for _, k := range page.Keys {
				seen[k.Key]++
			}
			if cursor = page.Next; cursor == "" {
				break
			}
		}
		if len(seen) != 3 || seen["list/a"] != 1 || seen["list/b"] != 1 || seen["list/c"] != 1 {
			t.Errorf("pages: %v", seen)
		}
		r := want(t, 0, s.args("list", "list/")...)
		if !strings.Contains(r.stdout, `"list/b"`) || !strings.Contains(r.stdout, "live") || strings.Contains(r.stdout, "other") {
			t.Errorf("list text:\n%s", r.stdout)
		}
	})
}

func keysOf(l listJSON) string {
	var ks []string
	for _, k := range l.Keys {
		ks = append(ks, k.Key)
	}
	// Order is the backend's own.
	slices.Sort(ks)
	return strings.Join(ks, ",")
}

func TestHoldLost(t *testing.T) {
	onServers(t, func(t *testing.T, s server) {
		for _, c := range []struct {
			name, script string
			grace        time.Duration
		}{
			{"stops on SIGTERM", `echo $$; exec sleep 60`, 30 * time.Second},
			{"ignores SIGTERM", `trap "" TERM; echo $$; sleep 60; echo still here`, 700 * time.Millisecond},
		} {
			t.Run(c.name, func(t *testing.T) {
				key := "lost/" + strings.ReplaceAll(c.name, " ", "-")
				p := start(t, s.args("hold", key, "--ttl", "3s", "--renew-interval", "200ms", "--grace", c.grace.String(), "--", "sh", "-c", c.script)...)
				pid := p.line(30 * time.Second)
				broke := time.Now()
				want(t, 0, s.args("release", key, "--force", "--yes")...)
				code := p.wait(30 * time.Second)
				took := time.Since(broke)
				if code != exitLost {
					t.Errorf("hold exited %d, want %d (lost); stderr:\n%s", code, exitLost, p.errb.String())
				}
				if !strings.Contains(p.errb.String(), "lease lost") {
					t.Errorf("stderr does not say the lease was lost:\n%s", p.errb.String())
				}
				if c.grace < time.Second && took < c.grace {
					t.Errorf("the stubborn command was killed %v after the break, before its %v grace", took, c.grace)
				}
				if c.grace > time.Second && took > c.grace {
					t.Errorf("a command that stops on SIGTERM took %v", took)
				}
				var n int
				fmt.Sscan(pid, &n)
				if n <= 0 || syscall.Kill(n, 0) == nil {
					t.Errorf("the command (pid %q) still runs", pid)
				}
				// The key is free for the next holder, with a larger token.
				want(t, 0, s.args("grant", key, "--ttl", "5s")...)
			})
		}
	})
}

func TestHoldWait(t *testing.T) {
	onServers(t, func(t *testing.T, s server) {
		var first leaseJSON
		wantJSON(t, &first, s.args("grant", "wait", "--ttl", "30s", "--json")...)
		r := want(t, exitHeld, s.args("hold", "wait", "--ttl", "5s", "--", "true")...)
		if !strings.Contains(r.stderr, "held") {
			t.Errorf("hold of a held key: %v", r)
		}
		r = want(t, exitHeld, s.args("hold", "wait", "--ttl", "5s", "--wait", "--wait-timeout", "300ms", "--", "true")...)
		if !strings.Contains(r.stderr, "--wait-timeout") {
			t.Errorf("hold --wait-timeout: %v", r)
		}
		var before waitState
		if s.waitState != nil {
			before = s.waitState(t)
		}
		p := start(t, s.args("hold", "wait", "--ttl", "5s", "--wait", "--", "sh", "-c", `echo "$FENCING_TOKEN"`)...)
		if s.waitState != nil {
			waitingFor(t, s, before) // subscribed and refused once: the release's notification wakes it
		}
		want(t, 0, s.args("release", "wait", "--lease-id", first.LeaseID)...)
		var token uint64
		fmt.Sscan(p.line(30*time.Second), &token)
		if code := p.wait(30 * time.Second); code != 0 || token <= first.Token {
			t.Errorf("hold --wait: exit %d, token %d after %d; stderr:\n%s", code, token, first.Token, p.errb.String())
		}
	})
}

func TestWatch(t *testing.T) {
	onServers(t, func(t *testing.T, s server) {
		p := start(t, s.args("watch", "w", "--interval", "50ms", "--json")...)
		next := func() eventJSON {
			t.Helper()
			var e eventJSON
			l := p.line(30 * time.Second)
			if err := json.Unmarshal([]byte(l), &e); err != nil || e.Key != "w" {
				t.Fatalf("watch printed %q: %v", l, err)
			}
			return e
		}
		if e := next(); e.Event != "free" {
			t.Errorf("first event %+v, want free", e)
		}
		var l leaseJSON
		wantJSON(t, &l, s.args("grant", "w", "--ttl", "20s", "--json")...)
		if e := next(); e.Event != "granted" || e.Token != l.Token {
			t.Errorf("after grant: %+v, want granted with token %d", e, l.Token)
		}
		time.Sleep(2 * time.Second) // so that the renewal moves the expiry by more than the noise
		want(t, 0, s.args("renew", "w", "--lease-id", l.LeaseID, "--ttl", "20s")...)
		if e := next(); e.Event != "renewed" || e.Token != l.Token {
			t.Errorf("after renew: %+v, want renewed", e)
		}
		want(t, 0, s.args("release", "w", "--lease-id", l.LeaseID)...)
		if e := next(); e.Event != "released" || e.Token != l.Token {
			t.Errorf("after release: %+v, want released", e)
		}
		wantJSON(t, &l, s.args("grant", "w", "--ttl", "1s", "--margin", "0s", "--json")...)
		if e := next(); e.Event != "granted" {
			t.Errorf("after the second grant: %+v", e)
		}
		if e := next(); e.Event != "expired" || e.Token != l.Token {
			t.Errorf("after the expiry: %+v, want expired with token %d", e, l.Token)
		}
		p.cmd.Process.Signal(os.Interrupt)
		if code := p.wait(10 * time.Second); code != 0 {
			t.Errorf("watch exited %d after SIGINT; stderr:\n%s", code, p.errb.String())
		}
	})
}
