package sqlbackend_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/internal/testing/faultproxy"
	"github.com/fencing-go/fencing/internal/testing/pgtest"
	"github.com/fencing-go/fencing/sqlbackend"
)

// TestPostgresCrashTokensNeverGoBack: grants run while PostgreSQL (fsync
// on) is killed as `pg_ctl stop -m immediate` does and started again; every
// token a grant returned before the crash is below every token granted
// after it, and Inspect's MaxToken has kept it.
func TestPostgresCrashTokensNeverGoBack(t *testing.T) {
	srv := pgtest.StartConfig(t, pgtest.Config{Durable: true})
	crashTokensNeverGoBack(t, srv.DB(t), sqlbackend.Postgres, srv.Crash, srv.Restart)
}

// crashTokensNeverGoBack runs grants on db while crash kills its server,
// then restarts it and checks the tokens.
func crashTokensNeverGoBack(t *testing.T, db *sql.DB, dialect sqlbackend.Dialect, crash func(), restart func(testing.TB)) {
	b, err := sqlbackend.New(context.Background(), db, dialect)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	if err := b.CreateTables(ctx); err != nil {
		t.Fatal(err)
	}
	const keys = 4
	var mu sync.Mutex
	acked := make(map[string]uint64)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range keys {
		key := fmt.Sprintf("k%d", i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				cctx, cancel := context.WithTimeout(ctx, time.Second)
				id := fmt.Sprintf("%s-%d", key, n)
				l, err := b.Grant(cctx, backend.Request{Key: key, LeaseID: id, Timeout: time.Minute})
				if err == nil {
					mu.Lock()
					acked[key] = max(acked[key], l.Token)
					mu.Unlock()
					b.Release(cctx, key, id)
				}
				cancel()
			}
		}()
	}
	time.Sleep(500 * time.Millisecond)
	crash()
	time.Sleep(200 * time.Millisecond)
	close(stop)
	wg.Wait()
	restart(t)
	mu.Lock()
	defer mu.Unlock()
	if len(acked) < keys {
		t.Fatalf("only %d keys granted before the crash", len(acked))
	}
	for key, last := range acked {
		st, err := b.Inspect(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if st.MaxToken < last {
			t.Errorf("%s: MaxToken %d after the restart, but %d was granted before the crash", key, st.MaxToken, last)
		}
		if st.Live { // a grant whose release was cut off by the crash
			if _, err := b.ForceRelease(ctx, key); err != nil {
				t.Fatal(err)
			}
		}
		l, err := b.Grant(ctx, backend.Request{Key: key, LeaseID: "after", Timeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if l.Token <= last {
			t.Errorf("%s: token %d after the restart, but %d was granted before the crash", key, l.Token, last)
		}
		t.Logf("%s: last token before the crash %d, first after %d", key, last, l.Token)
	}
}

// TestPostgresLostReply: the connection loses the grant's reply after the
// statement was sent (a proxy drops the server's replies). The error wraps
// ErrOutcomeUnknown; the grant happened; the resend with the same lease ID
// returns the same lease. A refused dial is a plain error.
func TestPostgresLostReply(t *testing.T) {
	srv := pgtest.Start(t)
	p := faultproxy.Start(t, fmt.Sprintf("127.0.0.1:%d", srv.Port()), faultproxy.Hooks{})
	proxied, err := sqlOpenPgx(fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable", p.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer proxied.Close()
	// One connection, whose statements pgx has prepared by the warm-up
	// below: from then on each operation is one round trip, so the
	// dropped reply is the one after the statement ran.
	proxied.SetMaxOpenConns(1)
	ctx := context.Background()
	b, err := sqlbackend.New(context.Background(), proxied, sqlbackend.Postgres, sqlbackend.WithSafetyCheck(backend.CheckSkip))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.CreateTables(ctx); err != nil {
		t.Fatal(err)
	}
	direct, _ := sqlbackend.New(context.Background(), srv.DB(t), sqlbackend.Postgres, sqlbackend.WithSafetyCheck(backend.CheckSkip))
	defer direct.Close()
	if _, err := b.Grant(ctx, backend.Request{Key: "warm-up", LeaseID: "w", Timeout: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx, "warm-up", "w"); err != nil {
		t.Fatal(err)
	}

	req := backend.Request{Key: "k", LeaseID: "lost", Timeout: time.Minute, Margin: time.Second}
	p.SetMode(faultproxy.DropReplies)
	cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	_, err = b.Grant(cctx, req)
	cancel()
	if !errors.Is(err, backend.ErrOutcomeUnknown) {
		t.Fatalf("Grant with its reply lost: %v, want ErrOutcomeUnknown", err)
	}
	tok, live, err := direct.Token(ctx, "k")
	if err != nil || !live {
		t.Fatalf("Token on the server after the lost reply: %d, %v, %v; want the grant applied", tok, live, err)
	}
	p.SetMode(faultproxy.Forward)
	p.Reset()
	again, err := b.Grant(ctx, req)
	if err != nil || again.Token != tok || again.LeaseID != req.LeaseID || again.TTL != req.Timeout || again.Margin != req.Margin {
		t.Fatalf("resent Grant = %+v, %v; want the same lease, token %d", again, err, tok)
	}
	// The release, likewise.
	p.SetMode(faultproxy.DropReplies)
	cctx, cancel = context.WithTimeout(ctx, 500*time.Millisecond)
	err = b.Release(cctx, "k", req.LeaseID)
	cancel()
	if !errors.Is(err, backend.ErrOutcomeUnknown) {
		t.Fatalf("Release with its reply lost: %v, want ErrOutcomeUnknown", err)
	}
	p.SetMode(faultproxy.Forward)
	p.Reset()
	if err := b.Release(ctx, "k", req.LeaseID); err != nil {
		t.Fatalf("resent Release: %v, want nil", err)
	}

	// Nothing listens: the statement never left.
	p.Close()
	refused, err := sqlOpenPgx(fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable&connect_timeout=2", p.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer refused.Close()
	rb, _ := sqlbackend.New(context.Background(), refused, sqlbackend.Postgres, sqlbackend.WithSafetyCheck(backend.CheckSkip))
	defer rb.Close()
	_, err = rb.Grant(ctx, backend.Request{Key: "k", LeaseID: "never", Timeout: time.Minute})
	if err == nil || errors.Is(err, backend.ErrOutcomeUnknown) {
		t.Fatalf("Grant on a refused dial: %v, want a plain error", err)
	}
}

// childEnv names the role of a child process of TestSQLiteProcesses.
const childEnv = "SQLBACKEND_TEST_CHILD"

// runChild is a child process: "worker" grants, writes through AdmitTx and
// releases key k in a loop, printing each token; "victim" takes the write
// lock, writes a token far ahead, says so and waits to be killed.
func runChild(role, path string) {
	if role == "create-tables" {
		runCreateChild(path)
		return
	}
	db, err := sqlOpen("sqlite", sqliteDSN(path))
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	defer db.Close()
	ctx := context.Background()
	if runQueueChild(ctx, db, role) {
		return
	}
	if role == "victim" {
		tx, err := db.BeginTx(ctx, nil)
		if err == nil {
			_, err = tx.ExecContext(ctx, "UPDATE fencing_leases SET token = token + 1000000")
		}
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		fmt.Println("in-tx")
		time.Sleep(time.Minute)
		os.Exit(1)
	}
	// New, then the first Grant, wait for the victim's write lock.
	fmt.Println("waiting")
	b, err := sqlbackend.New(context.Background(), db, sqlbackend.SQLite)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		var raw [8]byte
		rand.Read(raw[:])
		id := hex.EncodeToString(raw[:])
		l, err := b.Grant(ctx, backend.Request{Key: "k", LeaseID: id, Timeout: 5 * time.Second})
		var held *backend.HeldError
		if errors.As(err, &held) {
			time.Sleep(time.Millisecond)
			continue
		}
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		tx, err := db.BeginTx(ctx, nil)
		if err == nil {
			if err = b.AdmitTx(ctx, tx, "k", l.Token); err == nil {
				_, err = tx.ExecContext(ctx, "INSERT INTO writes (token) VALUES (?)", int64(l.Token))
			}
			if err == nil {
				err = tx.Commit()
			} else {
				tx.Rollback()
			}
		}
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		fmt.Println("token", l.Token)
		if err := b.Release(ctx, "k", id); err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
	}
}

// TestSQLiteProcesses: several real processes share one database file;
// one of them is killed (SIGKILL) in the middle of a write transaction. Its
// write never shows, the others go on once the lock is freed, every token
// is granted once (1, 2, 3... with none skipped), and the writes each
// holder admitted with AdmitTx are in token order.
func TestSQLiteProcesses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "shared.db")
	db := openSQLitePath(t, path)
	b, err := sqlbackend.New(context.Background(), db, sqlbackend.SQLite)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	if err := b.CreateTables(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE writes (token INTEGER NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Grant(ctx, backend.Request{Key: "k", LeaseID: "first", Timeout: time.Second}); err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx, "k", "first"); err != nil {
		t.Fatal(err)
	}
	victim := startChild(t, "victim", path)
	if l := victim.Next(t, time.Minute); l != "in-tx" {
		t.Fatalf("victim: %q", l)
	}
	type result struct {
		tokens []uint64
		errs   []string
	}
	const workers = 3
	results := make([]result, workers)
	var wg sync.WaitGroup
	var cmds []*exec.Cmd
	waiting := make(chan struct{}, workers)
	for i := range workers {
		child := startChild(t, "worker", path)
		cmds = append(cmds, child.Cmd)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for l := range child.Lines() {
				f := strings.Fields(l)
				if l == "waiting" {
					waiting <- struct{}{}
				} else if len(f) == 2 && f[0] == "token" {
					n, _ := strconv.ParseUint(f[1], 10, 64)
					results[i].tokens = append(results[i].tokens, n)
				} else {
					results[i].errs = append(results[i].errs, l)
				}
			}
		}()
	}
	// Every worker has started, and goes on to wait for the victim's
	// lock.
	for range workers {
		select {
		case <-waiting:
		case <-time.After(time.Minute):
			t.Fatal("a worker never started")
		}
	}
	victim.Cmd.Process.Signal(syscall.SIGKILL)
	victim.Cmd.Wait()
	wg.Wait()
	for _, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Errorf("worker: %v", err)
		}
	}
	var all []uint64
	for i, r := range results {
		if len(r.errs) > 0 {
			t.Errorf("worker %d: %v", i, r.errs)
		}
		all = append(all, r.tokens...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	if len(all) < workers {
		t.Fatalf("only %d grants after the victim was killed", len(all))
	}
	for i, tok := range all {
		if tok != uint64(i+2) {
			t.Fatalf("tokens %v: want 2, 3, 4... each once (1 before the workers; the killed write never applied)", all)
		}
	}
	rows, err := db.QueryContext(ctx, "SELECT token FROM writes ORDER BY rowid")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var prev uint64
	n := 0
	for rows.Next() {
		var tok uint64
		rows.Scan(&tok)
		if tok <= prev {
			t.Fatalf("write with token %d committed after one with %d", tok, prev)
		}
		prev = tok
		n++
	}
	if n != len(all) {
		t.Fatalf("%d writes for %d grants", n, len(all))
	}
	t.Logf("%d grants by %d processes after one was killed mid-transaction", len(all), workers)
}
