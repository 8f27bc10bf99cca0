package election_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/election"
	"github.com/fencing-go/fencing/guard"
	"github.com/fencing-go/fencing/guard/redisguard"
	"github.com/fencing-go/fencing/internal/testing/childproc"
	"github.com/fencing-go/fencing/internal/testing/recipetest"
)

// The child candidate of TestTakeoverRedisSIGSTOP: run as the test binary
// with these variables set.
const (
	helperAddr   = "ELECTION_TEST_REDIS_ADDR"
	helperPrefix = "ELECTION_TEST_REDIS_PREFIX"
)

// TestHelperCandidate is the stalled leader's process: it campaigns, prints
// "leader <token>", writes once through the guard, and then, for each line
// on stdin, writes again with its term's token and prints "written" or
// "refused". It does nothing in a normal test run.
func TestHelperCandidate(t *testing.T) {
	addr := os.Getenv(helperAddr)
	if addr == "" {
		return
	}
	ctx := context.Background()
	c := fencing.New(recipetest.RedisBackend(t, addr, os.Getenv(helperPrefix)), fencing.WithDefaultMargin(500*time.Millisecond))
	e := election.New(c, "office", time.Second)
	h, err := e.Campaign(ctx, "child")
	if err != nil {
		fmt.Println("error", err)
		return
	}
	client := redis.NewClient(&redis.Options{Addr: addr})
	defer client.Close()
	g := redisguard.New(client)
	write := func() string {
		err := g.Write(ctx, "resource", h.Token(), redisguard.Set(redisguard.Tag("resource")+":data", "child"))
		switch {
		case err == nil:
			return "written"
		case errors.Is(err, guard.ErrStaleToken):
			return "refused"
		}
		return "error " + err.Error()
	}
	fmt.Println("leader", h.Token(), write())
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		fmt.Println(write())
	}
	h.Release(ctx)
}

// TestTakeoverRedisSIGSTOP: a leader whose process is stopped (SIGSTOP)
// past its term loses the office to a waiting candidate with a larger
// token; resumed (SIGCONT), its guarded write with the old token is refused.
func TestTakeoverRedisSIGSTOP(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts redis-server")
	}
	w := recipetest.Redis(t)
	child := startCandidate(t, w)
	next := func() string { return child.Next(t, 30*time.Second) }
	var childToken uint64
	var first string
	if l := next(); !strings.HasPrefix(l, "leader ") {
		t.Fatalf("child: %q", l)
	} else {
		fmt.Sscanf(l, "leader %d %s", &childToken, &first)
	}
	if first != "written" {
		t.Fatalf("the child leader's first write: %q", first)
	}

	ctx := context.Background()
	e := election.New(w.Coordinator(t), "office", w.TTL, election.WithLockOptions(holdOpts()...))
	if err := child.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	h, err := e.Campaign(ctx, "successor")
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(ctx)
	took := time.Since(stopped)
	if h.Token() <= childToken {
		t.Fatalf("successor's token %d, not above the stopped leader's %d", h.Token(), childToken)
	}
	if took > 10*w.TTL {
		t.Errorf("takeover took %v", took)
	}
	client := w.Redis.Client()
	if err := redisguard.New(client).Admit(ctx, "resource", h.Token()); err != nil {
		t.Fatal(err)
	}
	if err := child.Cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(child.Stdin, "write")
	if l := next(); l != "refused" {
		t.Fatalf("the resumed leader's write: %q, want refused", l)
	}
	if l, err := e.Leader(ctx); err != nil || l.Identity != "successor" || l.Token != h.Token() {
		t.Fatalf("Leader = %+v, %v; want the successor's term", l, err)
	}
	child.Stdin.Close()
	t.Logf("takeover %v after SIGSTOP (TTL %v + margin)", took.Round(time.Millisecond), w.TTL)
}

// TestObserveVacancyAfterLeaderKilled: a leader whose process is killed
// (SIGKILL: no resignation) leaves the office vacant until its term runs
// out, and a waiting candidate is granted the moment it does. Observe
// reports that vacancy between the two terms, though the store's record
// went from one term to the next at once.
func TestObserveVacancyAfterLeaderKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts redis-server")
	}
	w := recipetest.Redis(t)
	child := startCandidate(t, w)
	next := func() string { return child.Next(t, 30*time.Second) }
	var childToken uint64
	if l := next(); !strings.HasPrefix(l, "leader ") {
		t.Fatalf("child: %q", l)
	} else {
		fmt.Sscanf(l, "leader %d", &childToken)
	}
	ctx := context.Background()
	e := election.New(w.Coordinator(t), "office", w.TTL, election.WithLockOptions(holdOpts()...))
	o := observe(t, e)
	if err := child.Cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	h, err := e.Campaign(ctx, "successor")
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(ctx)
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		o.mu.Lock()
		n := len(o.seen)
		seenIt := n > 0 && o.seen[n-1].Token == h.Token()
		o.mu.Unlock()
		if seenIt {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("Observe did not report the successor's term %d within 30s", h.Token())
		}
	}
	var got []string
	for _, l := range o.stop() {
		got = append(got, fmt.Sprintf("%v/%d/%d", l.Live, l.Token, l.LastToken))
	}
	want := []string{
		fmt.Sprintf("true/%d/%d", childToken, childToken),
		fmt.Sprintf("false/0/%d", childToken),
		fmt.Sprintf("true/%d/%d", h.Token(), h.Token()),
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Observe = %v, want %v: the killed leader's term, the vacancy, the successor's term", got, want)
	}
}

// startCandidate starts TestHelperCandidate's process on w's Redis.
func startCandidate(t *testing.T, w recipetest.World) *childproc.Helper {
	t.Helper()
	return childproc.StartHelper(t, "TestHelperCandidate", helperAddr+"="+w.Redis.Addr(), helperPrefix+"="+w.Prefix)
}
