package sqlbackend

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/internal/ctxend"
)

// Errors from the database, sorted into the contract's two kinds: a
// statement that certainly did not take effect (a plain error), and one
// that may have (wrapping backend.ErrOutcomeUnknown).

// sqlStater is implemented by the server errors of pgx (*pgconn.PgError)
// and lib/pq: the server answered, so it rolled the statement back.
type sqlStater interface{ SQLState() string }

// notSent reports whether err proves the statement never reached the
// server: the pool could not connect, or the driver says it sent nothing.
func notSent(err error) bool {
	var connect *pgconn.ConnectError
	var op *net.OpError
	switch {
	case errors.As(err, &connect):
		return true
	case errors.As(err, &op) && op.Op == "dial":
		return true
	case errors.Is(err, driver.ErrBadConn), errors.Is(err, sql.ErrConnDone):
		return true // database/sql gave up before sending
	}
	return pgconn.SafeToRetry(err)
}

// classify wraps a failed statement's error for the caller. what names the
// operation. A server error is definite, except the ones that end the
// session, after which the commit may or may not have happened: class 08
// (the connection broke) and 57P0x (57P01 admin_shutdown: a fast shutdown
// or pg_terminate_backend; 57P02 crash_shutdown: another backend crashed;
// and the rest of the class, conservatively). 57P03 cannot_connect_now is
// the exception: the server sends it only in reply to a login (it is
// starting up, shutting down or in recovery), before the connection can
// carry a statement, so nothing was sent.
func (b *Backend) classify(ctx context.Context, what string, err error) error {
	if missingSchema(err) {
		return b.schemaError(ctx, what, err)
	}
	if _, ok := mysqlNumber(err); ok { // the server answered: it rolled the statement back
		return fmt.Errorf("sqlbackend: %s: %w", what, err)
	}
	var st sqlStater
	if errors.As(err, &st) {
		code := st.SQLState()
		if refused := b.refusal(ctx, what, code); refused != nil {
			return refused
		}
		switch {
		case code == "57P03":
			return notSentError(ctx, what, err)
		case !strings.HasPrefix(code, "08") && !strings.HasPrefix(code, "57P0"):
			return fmt.Errorf("sqlbackend: %s: %w", what, err)
		}
	} else if notSent(err) {
		return notSentError(ctx, what, err)
	}
	return fmt.Errorf("sqlbackend: %s: %w: %w", what, backend.ErrOutcomeUnknown, err)
}

// notSentError wraps the error of a statement that never reached the
// server.
func notSentError(ctx context.Context, what string, err error) error {
	if cerr := ctxend.Err(ctx); cerr != nil && !errors.Is(err, cerr) {
		// A dial cut short by ctx reports a timeout of its own
		// ("i/o timeout"): the caller is told its context ended.
		return fmt.Errorf("sqlbackend: %s: not sent: %w: %w", what, cerr, err)
	}
	return fmt.Errorf("sqlbackend: %s: not sent: %w", what, err)
}

// missingSchema reports an error about an undefined table, function or
// column: no tables, or the tables of an earlier release (schemaError
// tells which).
func missingSchema(err error) bool {
	if n, ok := mysqlNumber(err); ok {
		return n == 1146 || n == 1054 // no such table; unknown column
	}
	var st sqlStater
	if errors.As(err, &st) {
		switch st.SQLState() {
		case "42P01", "42883", "42703": // undefined_table, undefined_function, undefined_column
			return true
		}
		return false
	}
	if err == nil {
		return false
	}
	s := err.Error()
	return strings.Contains(s, "no such table") || strings.Contains(s, "no such column") || strings.Contains(s, "has no column named")
}

// busy reports SQLite's SQLITE_BUSY: another connection holds the lock.
func busy(err error) bool {
	if err == nil {
		return false
	}
	s := err.Error()
	return strings.Contains(s, "SQLITE_BUSY") || strings.Contains(s, "database is locked")
}
