package sqlbackend

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencing-go/fencing/backend"
)

// The errors of New and CreateTables on PostgreSQL that a deployment meets
// at start-up wrap package backend's (backend.ErrAuthRefused,
// backend.ErrPermissionDenied, backend.ErrUnreachable,
// backend.ErrInvalidConfig, and backend.ErrUnsafeStore by way of
// *SafetyError), besides ErrNoTables / ErrOldSchema (missing tables, from
// the operations) and ErrNoNotifications.

// listenCheckWait bounds how long New waits for the test notification of
// WithListener, its absence being seen only by waiting, and how long an
// operation's error waits for the catalog that explains it (schemaGaps).
const listenCheckWait = 10 * time.Second

// ErrNoNotifications is wrapped by the error of New when the session of
// WithListener does not receive a notification sent through db: it does
// not reach the server directly (PgBouncer in transaction or statement
// mode keeps no LISTEN). Give WithListener a connection string that
// reaches the server (or PgBouncer in session mode), or leave it out and
// let waiters poll.
var ErrNoNotifications = errors.New("sqlbackend: the listener session receives no notifications")

// startError wraps err, from what New or CreateTables was doing (what),
// with the sentinel that says what went wrong, or as it is.
func startError(what string, err error) error {
	if merr := mysqlStartError(what, err); merr != nil {
		return merr
	}
	var st sqlStater
	isState := errors.As(err, &st)
	code, class := "", ""
	if isState {
		code = st.SQLState()
		class = code[:min(2, len(code))]
	}
	var netErr net.Error
	switch {
	case class == "28":
		return fmt.Errorf("sqlbackend: %s: %w: %w", what, backend.ErrAuthRefused, err)
	case code == "42501":
		return fmt.Errorf("sqlbackend: %s: %w: %w", what, backend.ErrPermissionDenied, err)
	case code == "26000" || code == "42P05":
		// prepared statement "stmtcache_..." does not exist, or already
		// exists: a pooler moved the client to a server session without
		// pgx's cached statement, or with another client's.
		return fmt.Errorf("%w: %s: prepared statements clash on a shared server session (PgBouncer in transaction mode before 1.21?): "+
			"add default_query_exec_mode=exec (or simple_protocol) to the connection string, or set PgBouncer's max_prepared_statements (1.21 or later): %w",
			errInvalidConfig, what, err)
	case class == "08", code == "57P01", code == "57P02", code == "57P03",
		!isState && (notSent(err) || errors.As(err, &netErr) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded)):
		return fmt.Errorf("sqlbackend: %s: %w: %w", what, backend.ErrUnreachable, err)
	}
	return fmt.Errorf("sqlbackend: %s: %w", what, err)
}

// contactError is startError for the first statement New sends, which
// makes the pool's first connection (server names the server, "MySQL"): a
// login the server refused and a server that could not be reached are named
// for what they are, not for the statement that met them.
func contactError(server, what string, err error) error {
	serr := startError(what, err)
	switch {
	case errors.Is(serr, backend.ErrAuthRefused):
		return fmt.Errorf("sqlbackend: log in to the %s server: %w: %w", server, backend.ErrAuthRefused, err)
	case errors.Is(serr, backend.ErrUnreachable) && errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("sqlbackend: connect to the %s server: %w: nothing listens at the address: %w", server, backend.ErrUnreachable, err)
	case errors.Is(serr, backend.ErrUnreachable):
		return fmt.Errorf("sqlbackend: connect to the %s server: %w: %w", server, backend.ErrUnreachable, err)
	}
	return serr
}

// checkListener opens a session on the listener's connection string,
// LISTENs on a channel of its own and NOTIFYs it through db: a session
// that does not receive it within the check timeout is refused with
// ErrNoNotifications (a pooler in transaction mode hands LISTEN to a
// server session that other clients use next, and the notification to
// whichever client holds that session then).
func (b *Backend) checkListener(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, b.listenDSN)
	if err != nil {
		return startError("WithListener: connect", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var r [8]byte
	_, _ = rand.Read(r[:])
	ch := channelName(b.prefix, "check_"+hex.EncodeToString(r[:]))
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{ch}.Sanitize()); err != nil {
		return startError("WithListener: listen", err)
	}
	if _, err := b.db.ExecContext(ctx, "SELECT pg_notify($1, 'check')", ch); err != nil {
		return startError("WithListener: notify", err)
	}
	n, err := conn.WaitForNotification(ctx)
	switch {
	case err == nil && n.Channel == ch:
		return nil
	case err == nil || errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%w (nothing within %v of a NOTIFY): does WithListener reach PgBouncer in transaction mode? It must reach the server directly; without it waiters poll", ErrNoNotifications, listenCheckWait)
	}
	return startError("WithListener: wait for the notification", err)
}
