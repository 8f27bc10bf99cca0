package redisbackend_test

import (
	"context"
	"encoding/base64"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/conformance"
	"github.com/fencing-go/fencing/internal/testing/redistest"
	"github.com/fencing-go/fencing/internal/testing/serverproc"
	"github.com/fencing-go/fencing/redisbackend"
)

var persistent = redistest.Config{AppendOnly: true} // appendfsync always

// newBackend returns a backend on client that is closed when t ends.
func newBackend(t *testing.T, client redis.UniversalClient, opts ...redisbackend.Option) *redisbackend.Backend {
	t.Helper()
	opts = append([]redisbackend.Option{redisbackend.WithLogger(quietLogger())}, opts...)
	b, err := redisbackend.New(context.Background(), client, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func req(key, id string) backend.Request {
	return backend.Request{Key: key, LeaseID: id, Timeout: time.Minute, Margin: time.Second}
}

func mustGrant(t *testing.T, b backend.Backend, key, id string) backend.Lease {
	t.Helper()
	lease, err := b.Grant(context.Background(), req(key, id))
	if err != nil {
		t.Fatalf("Grant(%q, %q): %v", key, id, err)
	}
	return lease
}

func mustRelease(t *testing.T, b backend.Backend, key, id string) {
	t.Helper()
	if err := b.Release(context.Background(), key, id); err != nil {
		t.Fatalf("Release(%q, %q): %v", key, id, err)
	}
}

// counter reads the key's highest token straight from Redis.
func counter(t *testing.T, c redis.Cmdable, b *redisbackend.Backend, key string) string {
	t.Helper()
	v, err := c.HGet(context.Background(), b.RedisKey(key), "token").Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		t.Fatalf("HGET token: %v", err)
	}
	return v
}

// logRecorder is a slog handler that keeps the messages it gets.
type logRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *logRecorder) WithGroup(string) slog.Handler            { return r }
func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	var sb strings.Builder
	sb.WriteString(rec.Message)
	rec.Attrs(func(a slog.Attr) bool {
		sb.WriteString(" " + a.String())
		return true
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, sb.String())
	return nil
}

func (r *logRecorder) text() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.msgs, "\n")
}

// TestKillAndRestartWithAOFAlways: with appendonly yes and appendfsync
// always, kill -9 and a restart keep tokens and live leases
// (conformance.RunRestart); TestRestartWithoutPersistenceLosesTokens shows
// the configuration without.
func TestKillAndRestartWithAOFAlways(t *testing.T) {
	conformance.RunRestart(t, &restarter{srv: redistest.Start(t, persistent)})
}

// TestRestartWait: waiters wait through a kill -9 and restart of
// redis-server (conformance.RunRestartWait).
func TestRestartWait(t *testing.T) {
	conformance.RunRestartWait(t, &restarter{srv: redistest.Start(t, persistent)})
}

// restarter is a conformance.Restarter on a redis-server of the test's own.
type restarter struct{ srv *redistest.Server }

func (r *restarter) NewBackend(ctx context.Context, t testing.TB) (backend.Backend, error) {
	// The default CheckRefuse accepts this server.
	return redisbackend.New(ctx, r.srv.Client(), redisbackend.WithPrefix("restart:"), redisbackend.WithLogger(quietLogger()))
}

func (r *restarter) Kill(testing.TB)  { r.srv.Kill() }
func (r *restarter) Start(testing.TB) { r.srv.Restart() }

func (r *restarter) Traits() conformance.Traits { return (&harness{}).Traits() }

// TestRestartWithoutPersistenceLosesTokens shows why the configuration check
// exists: without an append-only file, a restart resets the counter and the
// next grant reissues token 1.
func TestRestartWithoutPersistenceLosesTokens(t *testing.T) {
	srv := redistest.Start(t, redistest.Config{})
	client := srv.Client()

	_, err := redisbackend.New(context.Background(), client, redisbackend.WithLogger(quietLogger()))
	if !errors.Is(err, backend.ErrUnsafeStore) || !strings.Contains(err.Error(), "appendonly") {
		t.Fatalf("New on a server without persistence: %v, want ErrUnsafeStore about appendonly", err)
	}

	logs := new(logRecorder)
	b := newBackend(t, client, redisbackend.WithSafetyCheck(backend.CheckWarn), redisbackend.WithLogger(slog.New(logs)))
	if !strings.Contains(logs.text(), "appendonly") {
		t.Fatalf("CheckWarn logged %q, want a warning about appendonly", logs.text())
	}
	for i := range 3 {
		id := "before-" + strconv.Itoa(i)
		mustGrant(t, b, "k", id)
		mustRelease(t, b, "k", id)
	}
	srv.Kill()
	srv.Restart()
	if lease := mustGrant(t, b, "k", "after"); lease.Token != 1 {
		t.Fatalf("token after restart without persistence = %d; this test documents that it goes back to 1", lease.Token)
	}
}

func TestConfigCheck(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name    string
		cfg     redistest.Config
		unsafe  string // substring of the ErrUnsafeStore message; "" means accepted
		warning string // substring of a logged warning; "" means no warning
	}{
		{"AOFAlways", persistent, "", ""},
		{"AOFEverysec", redistest.Config{AppendOnly: true, AppendFsync: "everysec"}, "", "appendfsync"},
		{"RDBOnly", redistest.Config{Args: []string{"--save", "3600 1"}}, "appendonly", ""},
		{"AllKeysLRU", redistest.Config{AppendOnly: true, Args: []string{"--maxmemory-policy", "allkeys-lru"}}, "maxmemory-policy", ""},
		{"VolatileLRU", redistest.Config{AppendOnly: true, Args: []string{"--maxmemory-policy", "volatile-lru"}}, "", ""},
		// Managed services often disable CONFIG: New cannot check, warns
		// and goes on even in CheckRefuse.
		{"ConfigDisabled", redistest.Config{Args: []string{"--rename-command", "CONFIG", ""}}, "", "cannot check"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t, c.cfg)
			client := srv.Client()
			logs := new(logRecorder)
			b, err := redisbackend.New(ctx, client, redisbackend.WithLogger(slog.New(logs)))
			if c.unsafe != "" {
				if !errors.Is(err, backend.ErrUnsafeStore) || !strings.Contains(err.Error(), c.unsafe) {
					t.Fatalf("New: %v, want ErrUnsafeStore about %s", err, c.unsafe)
				}
				// CheckWarn runs anyway and logs it; CheckSkip says nothing.
				if _, err := redisbackend.New(context.Background(), client, redisbackend.WithSafetyCheck(backend.CheckWarn), redisbackend.WithLogger(slog.New(logs))); err != nil {
					t.Fatalf("New with CheckWarn: %v", err)
				}
				if !strings.Contains(logs.text(), c.unsafe) {
					t.Fatalf("CheckWarn logged %q, want %s", logs.text(), c.unsafe)
				}
				quiet := new(logRecorder)
				if _, err := redisbackend.New(context.Background(), client, redisbackend.WithSafetyCheck(backend.CheckSkip), redisbackend.WithLogger(slog.New(quiet))); err != nil || quiet.text() != "" {
					t.Fatalf("New with CheckSkip: %v, logged %q", err, quiet.text())
				}
				return
			}
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			defer b.Close()
			if got := logs.text(); (c.warning == "") != (got == "") || !strings.Contains(got, c.warning) {
				t.Fatalf("logged %q, want a warning containing %q", got, c.warning)
			}
			mustGrant(t, b, "k", "id")
		})
	}
}

func TestConfigCheckUnreachable(t *testing.T) {
	port, err := serverproc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(port), MaxRetries: -1})
	defer client.Close()
	if _, err := redisbackend.New(context.Background(), client, redisbackend.WithLogger(quietLogger())); !errors.Is(err, backend.ErrUnreachable) {
		t.Fatalf("New with CheckRefuse on an unreachable server: %v, want ErrUnreachable", err)
	}
	b, err := redisbackend.New(context.Background(), client, redisbackend.WithSafetyCheck(backend.CheckSkip))
	if err != nil {
		t.Fatalf("New with CheckSkip: %v", err)
	}
	b.Close()
}

// TestTokensAcross2To53: the grant script adds 1 to a token in Lua below
// 2^53-1 and has Redis add above; at the boundary, where a double stops
// holding every integer, each grant still gets exactly the next token.
func TestTokensAcross2To53(t *testing.T) {
	srv := redistest.Start(t, persistent)
	client := srv.Client()
	b := newBackend(t, client)
	ctx := context.Background()
	const start = 1<<53 - 3
	if err := client.HSet(ctx, b.RedisKey("k"), "token", strconv.FormatInt(start, 10)).Err(); err != nil {
		t.Fatal(err)
	}
	for i := range int64(5) {
		id := "lease-" + strconv.FormatInt(i, 10)
		lease := mustGrant(t, b, "k", id)
		if want := uint64(start + 1 + i); lease.Token != want {
			t.Fatalf("grant %d: token = %d, want %d", i, lease.Token, want)
		}
		if got, want := counter(t, client, b, "k"), strconv.FormatInt(start+1+i, 10); got != want {
			t.Fatalf("grant %d: stored token = %s, want %s", i, got, want)
		}
		mustRelease(t, b, "k", id)
	}
}

// TestOldLayoutRecord: a record written before released was a value of exp
// (a field rel, "1" once released) keeps its token, and its lease, released
// or not, holds the key until its exp passes: never a second live lease.
func TestOldLayoutRecord(t *testing.T) {
	srv := redistest.Start(t, persistent)
	client := srv.Client()
	b := newBackend(t, client)
	ctx := context.Background()
	future := strconv.FormatInt(time.Now().Add(time.Hour).UnixMicro(), 10)
	past := strconv.FormatInt(time.Now().Add(-time.Hour).UnixMicro(), 10)
	old := func(key, exp, rel string) {
		t.Helper()
		err := client.HSet(ctx, b.RedisKey(key), "token", "41", "id", "old", "exp", exp, "rel", rel, "ttl", "60000", "margin", "0").Err()
		if err != nil {
			t.Fatal(err)
		}
	}
	old("live", future, "0")
	old("released", future, "1")
	old("ended", past, "1")
	for _, key := range []string{"live", "released"} {
		var held *backend.HeldError
		if _, err := b.Grant(ctx, req(key, "new")); !errors.As(err, &held) {
			t.Fatalf("Grant on an old record whose exp is ahead (%s): %v, want a HeldError", key, err)
		}
	}
	if lease := mustGrant(t, b, "ended", "new"); lease.Token != 42 {
		t.Fatalf("Grant on an old ended record: token %d, want 42", lease.Token)
	}
	mustRelease(t, b, "live", "old")
	if lease := mustGrant(t, b, "live", "new"); lease.Token != 42 {
		t.Fatalf("Grant after releasing an old live lease: token %d, want 42", lease.Token)
	}
}

// TestLostReply: the server runs the script, the reply is lost with its
// connection. go-redis does not resend it, whatever MaxRetries says: the
// call returns ErrOutcomeUnknown (wrapping the network error), and
// resending with the same lease ID settles it without a second token. The
// Coordinator does so by itself.
func TestLostReply(t *testing.T) {
	for _, retries := range []int{-1, 3} {
		t.Run("MaxRetries="+strconv.Itoa(retries), func(t *testing.T) {
			srv := redistest.Start(t, persistent)
			p := startProxy(t, srv.Addr())
			client := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: retries})
			defer client.Close()
			b := newBackend(t, client)
			raw := srv.Client()
			ctx := context.Background()
			mustGrant(t, b, "warm-up", "w") // loads the script: no NOSCRIPT round below

			p.arm(faultDrop)
			_, err := b.Grant(ctx, req("k", "lease-1"))
			if !errors.Is(err, backend.ErrOutcomeUnknown) {
				t.Fatalf("Grant with a lost reply: %v, want ErrOutcomeUnknown", err)
			}
			if got := counter(t, raw, b, "k"); got != "1" || p.dropped.Load() != 1 {
				t.Fatalf("counter %q, drops %d: want the server to have run the grant once", got, p.dropped.Load())
			}
			lease := mustGrant(t, b, "k", "lease-1") // the resend
			if lease.Token != 1 || counter(t, raw, b, "k") != "1" {
				t.Fatalf("resent grant: token %d, counter %s; want 1, 1", lease.Token, counter(t, raw, b, "k"))
			}

			// A renewal run twice just renews again, keeping the token.
			p.arm(faultDrop)
			if _, err := b.Renew(ctx, req("k", "lease-1")); !errors.Is(err, backend.ErrOutcomeUnknown) {
				t.Fatalf("Renew with a lost reply: %v, want ErrOutcomeUnknown", err)
			}
			if renewed, err := b.Renew(ctx, req("k", "lease-1")); err != nil || renewed.Token != 1 {
				t.Fatalf("resent Renew: %+v, %v; want token 1", renewed, err)
			}

			p.arm(faultDrop)
			if err := b.Release(ctx, "k", "lease-1"); !errors.Is(err, backend.ErrOutcomeUnknown) {
				t.Fatalf("Release with a lost reply: %v, want ErrOutcomeUnknown", err)
			}
			mustRelease(t, b, "k", "lease-1") // the resend

			// The Coordinator resends on ErrOutcomeUnknown with the same ID.
			c := fencing.New(b)
			p.arm(faultDrop)
			l, err := c.Grant(ctx, "k", time.Minute)
			if err != nil || l.Token != 2 || counter(t, raw, b, "k") != "2" || p.dropped.Load() != 4 {
				t.Fatalf("Coordinator grant over a lost reply: %+v, %v; counter %s, drops %d", l, err, counter(t, raw, b, "k"), p.dropped.Load())
			}
		})
	}
}

// TestContextDoneInFlight: a context that ends while the script is on the
// wire gives ErrOutcomeUnknown together with the context's error; the
// server may well have run it.
func TestContextDoneInFlight(t *testing.T) {
	srv := redistest.Start(t, persistent)
	p := startProxy(t, srv.Addr())
	client := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	defer client.Close()
	b := newBackend(t, client)
	mustGrant(t, b, "warm-up", "w")

	p.arm(faultStall)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := b.Grant(ctx, req("k", "lease-1"))
	if !errors.Is(err, backend.ErrOutcomeUnknown) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Grant whose context ended in flight: %v, want ErrOutcomeUnknown and DeadlineExceeded", err)
	}
	if p.stalled.Load() != 1 || counter(t, srv.Client(), b, "k") != "1" {
		t.Fatalf("stalled %d, counter %s: want the server to have run the grant", p.stalled.Load(), counter(t, srv.Client(), b, "k"))
	}

	// A context that is done before the call is a plain context error, and
	// nothing is sent.
	_, err = b.Grant(ctx, req("other", "lease-2"))
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, backend.ErrOutcomeUnknown) {
		t.Fatalf("Grant with a done context: %v, want only DeadlineExceeded", err)
	}
	if got := counter(t, srv.Client(), b, "other"); got != "" {
		t.Fatalf("a done context changed the counter to %s", got)
	}
}

// pastDeadline is a context whose deadline has passed while its timer has
// not yet run, as on a loaded host: Err is still nil.
type pastDeadline struct{ context.Context }

func (pastDeadline) Deadline() (time.Time, bool) { return time.Now().Add(-time.Millisecond), true }

// TestDeadlinePassedNotSent: a call whose context's deadline has passed is
// a plain context error and sends nothing, even before the context's timer
// ran (runF and runG, fresh clones at load 4-8, sent it and got "outcome
// unknown: i/o timeout").
func TestDeadlinePassedNotSent(t *testing.T) {
	srv := redistest.Start(t, persistent)
	b := newBackend(t, srv.Client())
	_, err := b.Grant(pastDeadline{context.Background()}, req("k", "lease-1"))
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, backend.ErrOutcomeUnknown) {
		t.Fatalf("Grant past its context's deadline: %v, want only DeadlineExceeded", err)
	}
	if got := counter(t, srv.Client(), b, "k"); got != "" {
		t.Fatalf("a call past its deadline changed the counter to %s", got)
	}
}

// TestOddKeys: keys that play with Redis hash tags and separators are
// distinct records, and each record's hash tag is the whole encoded key, so
// a key never straddles Cluster slots and the tag is never empty.
func TestOddKeys(t *testing.T) {
	srv := redistest.Start(t, persistent)
	client := srv.Client()
	b := newBackend(t, client, redisbackend.WithPrefix("odd:"))
	keys := []string{"{", "}", ":", "{}", "}{", "{a}", "a{b}c", "k:token", "k}:token", "\x00", "\xff\xfe", "a", "A", "a ", strings.Repeat("{", backend.MaxKeyLength)}
	seen := make(map[string]string)
	for _, key := range keys {
		rk := b.RedisKey(key)
		if other, dup := seen[rk]; dup {
			t.Fatalf("keys %q and %q share the Redis key %q", key, other, rk)
		}
		seen[rk] = key
		if got, want := hashTag(rk), base64.RawURLEncoding.EncodeToString([]byte(key)); got != want {
			t.Fatalf("hash tag of %q is %q, want %q", rk, got, want)
		}
		if lease := mustGrant(t, b, key, "id"); lease.Token != 1 {
			t.Fatalf("first token of %q = %d, want 1", key, lease.Token)
		}
	}
	n, err := client.DBSize(context.Background()).Result()
	if err != nil || n != int64(len(keys)) {
		t.Fatalf("DBSIZE = %d, %v; want one Redis key per key (%d)", n, err, len(keys))
	}
}

// hashTag returns the part of a Redis key that Redis Cluster hashes.
func hashTag(key string) string {
	if s := strings.IndexByte(key, '{'); s >= 0 {
		if e := strings.IndexByte(key[s+1:], '}'); e > 0 {
			return key[s+1 : s+1+e]
		}
	}
	return key
}

// TestRecordLayout pins what operators see in Redis: one hash per key,
// without a TTL, holding the token as an exact integer.
func TestRecordLayout(t *testing.T) {
	srv := redistest.Start(t, persistent)
	client := srv.Client()
	b := newBackend(t, client)
	ctx := context.Background()
	lease := mustGrant(t, b, "k", "lease-1")
	rk := b.RedisKey("k")
	if want := "fencing:{" + base64.RawURLEncoding.EncodeToString([]byte("k")) + "}:token"; rk != want {
		t.Fatalf("RedisKey = %q, want %q", rk, want)
	}
	if ttl, err := client.PTTL(ctx, rk).Result(); err != nil || ttl != -1 {
		t.Fatalf("PTTL = %v, %v; the record must not expire", ttl, err)
	}
	mustRelease(t, b, "k", "lease-1")
	if got := counter(t, client, b, "k"); got != strconv.FormatUint(lease.Token, 10) {
		t.Fatalf("counter %s, want %d", got, lease.Token)
	}
	// ExpiresAt and TTL: server time plus the timeout rounded up to a
	// millisecond plus the margin.
	now, err := client.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	l, err := b.Grant(ctx, backend.Request{Key: "r", LeaseID: "x", Timeout: 1500 * time.Microsecond, Margin: 3 * time.Microsecond})
	if err != nil {
		t.Fatal(err)
	}
	if l.TTL != 2*time.Millisecond || l.Margin != 3*time.Microsecond {
		t.Fatalf("TTL, Margin = %v, %v; want 2ms, 3µs", l.TTL, l.Margin)
	}
	if d := l.ExpiresAt.Sub(now); d < l.TTL+l.Margin || d > l.TTL+l.Margin+time.Second {
		t.Fatalf("ExpiresAt is %v after the server time read before the grant, want just over %v", d, l.TTL+l.Margin)
	}
}

// TestClosed: the suite's ClosedBackend holds every call after Close to
// ErrClosed; this adds what is Redis's own: Close leaves the user's client
// open, writes nothing, and leaves no goroutine behind.
func TestClosed(t *testing.T) {
	srv := redistest.Start(t, persistent)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer client.Close()
	ctx := context.Background()
	b, err := redisbackend.New(context.Background(), client, redisbackend.WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	mustGrant(t, b, "k", "id")
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := b.Grant(ctx, req("k2", "id")); !errors.Is(err, backend.ErrClosed) {
		t.Fatalf("Grant after Close: %v", err)
	}
	if err := client.Ping(ctx).Err(); err != nil {
		t.Fatalf("the client was closed with the backend: %v", err)
	}
	if n, _ := client.Exists(ctx, b.RedisKey("k2")).Result(); n != 0 {
		t.Fatal("Grant after Close wrote a record")
	}
}

// TestBadInputSendsNothing: malformed requests fail before any round trip.
func TestBadInputSendsNothing(t *testing.T) {
	srv := redistest.Start(t, persistent)
	client := srv.Client()
	b := newBackend(t, client)
	ctx := context.Background()
	long := strings.Repeat("k", backend.MaxKeyLength+1)
	checks := []struct {
		err  error
		want error
	}{
		{func() error { _, err := b.Grant(ctx, req("", "id")); return err }(), backend.ErrInvalidKey},
		{func() error { _, err := b.Grant(ctx, req(long, "id")); return err }(), backend.ErrInvalidKey},
		{func() error { _, err := b.Grant(ctx, req("k", "")); return err }(), backend.ErrLeaseNotFound},
		{func() error {
			_, err := b.Grant(ctx, backend.Request{Key: "k", LeaseID: "id", Timeout: 0})
			return err
		}(), backend.ErrInvalidTimeout},
		{func() error {
			_, err := b.Renew(ctx, backend.Request{Key: "k", LeaseID: "id", Timeout: time.Second, Margin: -1})
			return err
		}(), backend.ErrInvalidMargin},
		{b.Release(ctx, "k", strings.Repeat("x", backend.MaxLeaseIDLength+1)), backend.ErrLeaseNotFound},
		{func() error { _, _, err := b.Token(ctx, long); return err }(), backend.ErrInvalidKey},
	}
	for i, c := range checks {
		if !errors.Is(c.err, c.want) {
			t.Errorf("check %d: %v, want %v", i, c.err, c.want)
		}
	}
	if n, err := client.DBSize(ctx).Result(); err != nil || n != 0 {
		t.Fatalf("DBSIZE = %d, %v after bad input, want 0", n, err)
	}
}

// TestMinReplicasWithoutReplicas: WithMinReplicas on a primary with no
// replica cannot be satisfied: the grant lands on the primary but is
// reported as ErrReplication and ErrOutcomeUnknown, never as success.
func TestMinReplicasWithoutReplicas(t *testing.T) {
	srv := redistest.Start(t, persistent)
	client := srv.Client()
	b := newBackend(t, client, redisbackend.WithMinReplicas(1, 20*time.Millisecond))
	ctx := context.Background()
	for range 2 { // the first call also runs with an empty script cache
		_, err := b.Grant(ctx, req("k", "lease-1"))
		if !errors.Is(err, redisbackend.ErrReplication) || !errors.Is(err, backend.ErrOutcomeUnknown) {
			t.Fatalf("Grant: %v, want ErrReplication and ErrOutcomeUnknown", err)
		}
	}
	if got := counter(t, client, b, "k"); got != "1" {
		t.Fatalf("counter %s, want 1: a resent grant must not mint another token", got)
	}
	_, err := b.Renew(ctx, req("k", "lease-1"))
	if !errors.Is(err, redisbackend.ErrReplication) {
		t.Fatalf("Renew: %v, want ErrReplication", err)
	}
	// A refused grant has nothing to wait for and says so plainly.
	if _, err := b.Grant(ctx, req("k", "lease-2")); !errors.Is(err, backend.ErrLeaseHeld) || errors.Is(err, redisbackend.ErrReplication) {
		t.Fatalf("Grant on a held key: %v, want only ErrLeaseHeld", err)
	}
	// Release does not wait.
	mustRelease(t, b, "k", "lease-1")

	if _, err := redisbackend.New(context.Background(), client, redisbackend.WithMinReplicas(1, 0)); !errors.Is(err, backend.ErrInvalidConfig) {
		t.Fatalf("New with WithMinReplicas(1, 0): %v, want ErrInvalidConfig", err)
	}
	if _, err := redisbackend.New(context.Background(), client, redisbackend.WithMinReplicas(1, time.Minute)); !errors.Is(err, backend.ErrInvalidConfig) {
		t.Fatalf("New with a WAIT timeout longer than the client's ReadTimeout: %v, want ErrInvalidConfig", err)
	}
	if _, err := redisbackend.New(context.Background(), client, redisbackend.WithSafetyCheck(42)); !errors.Is(err, backend.ErrInvalidConfig) {
		t.Fatalf("New with CheckMode(42): %v, want ErrInvalidConfig", err)
	}
	if _, err := redisbackend.New(context.Background(), nil); !errors.Is(err, backend.ErrInvalidConfig) {
		t.Fatalf("New(nil): %v, want ErrInvalidConfig", err)
	}
}

// TestTokenScriptIsExact: Token decides liveness on the server's clock, like
// the other scripts: a lease is live until its expiry and not after.
func TestTokenScriptIsExact(t *testing.T) {
	srv := redistest.Start(t, persistent)
	client := srv.Client()
	b := newBackend(t, client)
	ctx := context.Background()
	lease, err := b.Grant(ctx, backend.Request{Key: "k", LeaseID: "id", Timeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for {
		now, err := client.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		tok, live, err := b.Token(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		after, err := client.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case after.Before(lease.ExpiresAt) && (!live || tok != lease.Token):
			t.Fatalf("Token at server time %v < expiry %v: %d, %v; want live", after, lease.ExpiresAt, tok, live)
		case !now.Before(lease.ExpiresAt) && live:
			t.Fatalf("Token at server time %v >= expiry %v: live", now, lease.ExpiresAt)
		}
		if !now.Before(lease.ExpiresAt) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := b.Renew(ctx, req("k", "id")); !errors.Is(err, backend.ErrLeaseExpired) {
		t.Fatalf("late Renew: %v, want ErrLeaseExpired", err)
	}
	if err := b.Release(ctx, "k", "id"); !errors.Is(err, backend.ErrLeaseExpired) {
		t.Fatalf("late Release: %v, want ErrLeaseExpired", err)
	}
	if _, err := b.Grant(ctx, req("k", "id")); !errors.Is(err, backend.ErrLeaseExpired) {
		t.Fatalf("late resend of the grant: %v, want ErrLeaseExpired", err)
	}
	if err := b.Release(ctx, "k", "foreign"); !errors.Is(err, backend.ErrLeaseNotFound) {
		t.Fatalf("foreign Release: %v, want ErrLeaseNotFound", err)
	}
}

// TestTokenReadsAnyNumber: a record whose exp is not written as plain
// digits (a number in exponent form, as a hand-written or foreign record
// may hold) is read by the token script, which takes any number, and not
// refused as a bad reply.
func TestTokenReadsAnyNumber(t *testing.T) {
	srv := redistest.Start(t, persistent)
	client := srv.Client()
	b := newBackend(t, client)
	ctx := context.Background()
	now, err := client.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	exp := strconv.FormatFloat(float64(now.Add(time.Minute).UnixMicro()), 'e', 9, 64) // "1.764590000e+15"
	if err := client.HSet(ctx, b.RedisKey("k"), "token", 7, "id", "x", "exp", exp).Err(); err != nil {
		t.Fatal(err)
	}
	if tok, live, err := b.Token(ctx, "k"); err != nil || !live || tok != 7 {
		t.Fatalf("Token of a live lease whose exp is %s: %d, %v, %v; want 7, live", exp, tok, live, err)
	}
}
