package sqlbackend_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/sqlbackend"
)

// How a PostgreSQL server error is told: a session ended by an admin or a
// crash shutdown (57P01, 57P02) may have committed the statement, so the
// outcome is unknown; a login refused because the server cannot take
// connections now (57P03: starting up, shutting down, in recovery) comes
// before any statement is sent, so nothing happened; a plain error is
// definite.
func TestClassifyPostgresStates(t *testing.T) {
	b := newSQLiteBackend(t)
	for _, c := range []struct {
		code    string
		unknown bool
		says    string
	}{
		{"57P01", true, ""},          // admin_shutdown: pg_terminate_backend, a fast shutdown
		{"57P02", true, ""},          // crash_shutdown: another backend crashed
		{"08006", true, ""},          // connection_failure
		{"57P03", false, "not sent"}, // cannot_connect_now: refused at login
		{"40001", false, ""},         // serialization_failure: rolled back
		{"23505", false, ""},         // unique_violation: rolled back
	} {
		pgErr := &pgconn.PgError{Severity: "FATAL", Code: c.code, Message: "test"}
		err := b.Classify(context.Background(), "grant", pgErr)
		if errors.Is(err, backend.ErrOutcomeUnknown) != c.unknown || !errors.Is(err, pgErr) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("SQLSTATE %s: %v; want outcome unknown %v, wrapping the server's error, saying %q", c.code, err, c.unknown, c.says)
		}
	}
}

// A renewal waiting on its row lock whose session is ended by
// pg_terminate_backend (57P01, as in a fast shutdown) fails with an error
// wrapping ErrOutcomeUnknown: the server may have committed before it
// ended the session.
func TestPostgresTerminatedStatementOutcomeUnknown(t *testing.T) {
	_, h := newPostgres(t)
	ctx := context.Background()
	be, err := h.NewBackend(ctx, t)
	if err != nil {
		t.Fatal(err)
	}
	b := be.(*sqlbackend.Backend)
	defer b.Close()
	if _, err := b.Grant(ctx, backend.Request{Key: "k", LeaseID: "a", Timeout: time.Minute}); err != nil {
		t.Fatal(err)
	}
	holder, err := h.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback()
	if _, err := holder.ExecContext(ctx, "SELECT 1 FROM "+b.Table()+" WHERE key = $1 FOR UPDATE", []byte("k")); err != nil {
		t.Fatal(err)
	}
	renewed := make(chan error, 1)
	go func() {
		_, err := b.Renew(ctx, backend.Request{Key: "k", LeaseID: "a", Timeout: time.Minute})
		renewed <- err
	}()
	for terminated := false; !terminated; {
		err := h.db.QueryRowContext(ctx, `SELECT coalesce(bool_or(pg_terminate_backend(pid)), false) FROM pg_stat_activity `+
			`WHERE wait_event_type = 'Lock' AND query LIKE '%renew(%' AND pid <> pg_backend_pid()`).Scan(&terminated)
		if err != nil {
			t.Fatal(err)
		}
		if !terminated {
			time.Sleep(5 * time.Millisecond)
		}
	}
	err = <-renewed
	if !errors.Is(err, backend.ErrOutcomeUnknown) || !strings.Contains(err.Error(), "57P01") {
		t.Fatalf("Renew whose session was terminated: %v; want ErrOutcomeUnknown (SQLSTATE 57P01)", err)
	}
}

// A server that refuses the login with 57P03 (the database system is
// starting up) was sent no statement: the grant's error is definite.
func TestPostgresCannotConnectNowNotSent(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	done := make(chan struct{})
	defer func() { l.Close(); <-done }()
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			refuseStartingUp(c)
		}
	}()
	db, err := sqlOpenPgx(fmt.Sprintf("postgres://app@%s/postgres?sslmode=disable&connect_timeout=10", l.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	b, err := sqlbackend.New(context.Background(), db, sqlbackend.Postgres, sqlbackend.WithSafetyCheck(backend.CheckSkip))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	_, err = b.Grant(context.Background(), backend.Request{Key: "k", LeaseID: "a", Timeout: time.Minute})
	if err == nil || errors.Is(err, backend.ErrOutcomeUnknown) || !strings.Contains(err.Error(), "57P03") {
		t.Fatalf("Grant refused at login with 57P03: %v; want a definite error (not ErrOutcomeUnknown) naming 57P03", err)
	}
}

// refuseStartingUp answers one PostgreSQL client as a server that is
// starting up: 'N' to an SSL or GSS encryption request, an ErrorResponse
// with SQLSTATE 57P03 to the startup message; then it closes c.
func refuseStartingUp(c net.Conn) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	for {
		var n uint32
		if err := binary.Read(c, binary.BigEndian, &n); err != nil || n < 8 || n > 10000 {
			return
		}
		body := make([]byte, n-4)
		if _, err := io.ReadFull(c, body); err != nil {
			return
		}
		switch binary.BigEndian.Uint32(body) {
		case 80877103, 80877104: // SSLRequest, GSSENCRequest
			if _, err := c.Write([]byte{'N'}); err != nil {
				return
			}
			continue
		}
		fields := "SFATAL\x00VFATAL\x00C57P03\x00Mthe database system is starting up\x00\x00"
		msg := binary.BigEndian.AppendUint32([]byte{'E'}, uint32(4+len(fields)))
		c.Write(append(msg, fields...))
		return
	}
}
