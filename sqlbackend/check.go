package sqlbackend

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"strings"

	"github.com/fencing-go/fencing/backend"
)

// SafetyError is returned by New for a database that could lose a committed
// grant, and so reissue a token after a crash, or that cannot take writes;
// on PostgreSQL also by Grant and Renew, which check the session in their
// own statement (synchronous_commit, a standby, an unlogged lease table).
// It names the setting, what it is, and the fix. errors.Is(err,
// backend.ErrUnsafeStore) reports true for it. WithSafetyCheck sets what
// New does about it.
type SafetyError struct {
	Setting string // e.g. "fsync", "synchronous_commit", "journal_mode"
	Value   string // what the database reports
	Fix     string // what to change
}

func (e *SafetyError) Error() string {
	return fmt.Sprintf("sqlbackend: %v: %s is %s; %s (or use sqlbackend.WithSafetyCheck(backend.CheckSkip) for a throw-away database)", backend.ErrUnsafeStore, e.Setting, e.Value, e.Fix)
}

// Unwrap returns backend.ErrUnsafeStore.
func (e *SafetyError) Unwrap() error { return backend.ErrUnsafeStore }

// checkSafety refuses, on PostgreSQL, fsync=off, synchronous_commit=off, a
// standby (pg_is_in_recovery) and a read-only session
// (transaction_read_only); on SQLite a journal that does not survive a
// crash (journal_mode MEMORY or OFF) and synchronous below FULL, with which
// a power loss can undo a commit (in WAL mode with NORMAL, the last
// transactions before the loss; in rollback mode, the file can corrupt).
// It reads one connection of the pool: the others come from the same
// connection string.
//
// On MySQL it is checkMySQL.
func (b *Backend) checkSafety(ctx context.Context) error {
	if b.dialect == MySQL {
		return b.checkMySQL(ctx)
	}
	if b.dialect == Postgres {
		var fsync, syncCommit, readOnly string
		var standby bool
		err := b.db.QueryRowContext(ctx, `SELECT current_setting('fsync'), current_setting('synchronous_commit'), `+
			`current_setting('transaction_read_only'), pg_is_in_recovery()`).Scan(&fsync, &syncCommit, &readOnly, &standby)
		if err != nil {
			return contactError("PostgreSQL", "check the PostgreSQL server's settings", err)
		}
		switch {
		case standby:
			return &SafetyError{Setting: "pg_is_in_recovery()", Value: "true", Fix: "connect to the primary, not a standby"}
		case readOnly == "on":
			return &SafetyError{Setting: "transaction_read_only", Value: "on", Fix: "connect to a writable primary (target_session_attrs=read-write), or turn off default_transaction_read_only"}
		case fsync == "off":
			return &SafetyError{Setting: "fsync", Value: "off", Fix: "set fsync = on in postgresql.conf"}
		case syncCommit == "off":
			return &SafetyError{Setting: "synchronous_commit", Value: "off", Fix: "set synchronous_commit = on (or local, remote_write, remote_apply) for the backend's role or database"}
		}
		return b.checkLogged(ctx)
	}
	var mode string
	var syncLevel int
	// A busy database (another connection switching the journal mode as
	// it opens) is waited for, not reported.
	if err := retryBusy(ctx, func() error { return b.db.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode) }); err != nil {
		return fmt.Errorf("sqlbackend: check the SQLite database (is it a writable SQLite file?): %w", err)
	}
	if err := retryBusy(ctx, func() error { return b.db.QueryRowContext(ctx, "PRAGMA synchronous").Scan(&syncLevel) }); err != nil {
		return fmt.Errorf("sqlbackend: check the SQLite database: %w", err)
	}
	switch strings.ToLower(mode) {
	case "memory", "off":
		return &SafetyError{Setting: "journal_mode", Value: mode, Fix: "use journal_mode WAL (or DELETE) on a file"}
	}
	if syncLevel < 2 {
		return &SafetyError{Setting: "synchronous", Value: [...]string{"OFF", "NORMAL"}[syncLevel], Fix: "use synchronous FULL (the default) or EXTRA in the connection string, e.g. _pragma=synchronous(FULL)"}
	}
	// The write lock, taken and given back: a read-only file or
	// connection fails here rather than at the first grant.
	var conn *sql.Conn
	if err := retryBusy(ctx, func() (err error) { conn, err = b.db.Conn(ctx); return err }); err != nil {
		return fmt.Errorf("sqlbackend: check the SQLite database: %w", err)
	}
	defer conn.Close()
	if err := retryBusy(ctx, func() error {
		_, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE")
		return err
	}); err != nil {
		// The driver can report a context's end for a BEGIN that did
		// begin: the connection is not put back in the pool.
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		if ctx.Err() != nil {
			return fmt.Errorf("sqlbackend: check the SQLite database: %w", err)
		}
		return &SafetyError{Setting: "write access", Value: err.Error(), Fix: "open a file this process may write (not mode=ro), in a writable directory"}
	}
	defer func() {
		if _, err := conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK"); err != nil {
			_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		}
	}()
	var version int64
	err := conn.QueryRowContext(ctx, "PRAGMA user_version").Scan(&version)
	if err == nil { // the same value, rolled back: a write that changes nothing
		_, err = conn.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", version))
	}
	if err != nil {
		return &SafetyError{Setting: "write access", Value: err.Error(), Fix: "open a file this process may write (not mode=ro), in a writable directory"}
	}
	return nil
}

// schemaError explains err, an error about an undefined table, function or
// column in operation what: it reads the catalog to tell a database with no
// tables for the prefix (ErrNoTables) from one with the tables of an
// earlier release (ErrOldSchema, naming what they lack). When the catalog
// cannot be read, or shows nothing missing, err is reported as it is.
func (b *Backend) schemaError(ctx context.Context, what string, err error) error {
	missing, tables, cerr := b.schemaGaps(ctx)
	switch {
	case cerr != nil || tables && len(missing) == 0:
		return fmt.Errorf("sqlbackend: %s: %w", what, err)
	case !tables:
		return fmt.Errorf("sqlbackend: %s: %w: %w", what, ErrNoTables, err)
	}
	return fmt.Errorf("sqlbackend: %s: %w: %s missing: %w", what, ErrOldSchema, strings.Join(missing, ", "), err)
}

// schemaGaps lists what the backend's tables lack; tables is false when
// the leases table does not exist. It is bounded by the check timeout.
func (b *Backend) schemaGaps(ctx context.Context) (missing []string, tables bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, listenCheckWait)
	defer cancel()
	if b.dialect == MySQL {
		return b.mysqlSchemaGaps(ctx)
	}
	if b.dialect == Postgres {
		var hasColumns, hasWaiters, hasGrant, hasEnqueue bool
		err := b.db.QueryRowContext(ctx, `SELECT to_regclass($1) IS NOT NULL, `+
			`EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass($1) AND attname = 'delay_until' AND NOT attisdropped), `+
			`to_regclass($2) IS NOT NULL, to_regprocedure($3) IS NOT NULL, to_regprocedure($4) IS NOT NULL`,
			b.sql.table, b.sql.waiters, b.prefix+"grant(bytea,text,bigint,bigint,text,bigint)", b.prefix+"enqueue(bytea,text,bigint)").
			Scan(&tables, &hasColumns, &hasWaiters, &hasGrant, &hasEnqueue)
		if err != nil || !tables {
			return nil, false, err
		}
		for _, m := range []struct {
			ok   bool
			what string
		}{{hasColumns, "column delay_until of " + b.sql.table}, {hasWaiters, "table " + b.sql.waiters},
			{hasGrant, "function " + b.prefix + "grant with a lock delay"}, {hasEnqueue, "function " + b.prefix + "enqueue"}} {
			if !m.ok {
				missing = append(missing, m.what)
			}
		}
		return missing, true, nil
	}
	schema, table, waiters := "main", b.sql.table, b.sql.waiters
	if s, rest, ok := strings.Cut(b.prefix, "."); ok {
		schema, table, waiters = s, rest+"leases", rest+"waiters"
	}
	cols := map[string]bool{}
	rows, err := b.db.QueryContext(ctx, `SELECT name FROM pragma_table_info(?1, ?2)`, table, schema)
	if err != nil {
		return nil, false, err
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, false, err
		}
		cols[name] = true
	}
	if err := rows.Err(); err != nil || len(cols) == 0 {
		return nil, false, err
	}
	for _, c := range []string{"lock_delay_ns", "delay_until"} {
		if !cols[c] {
			missing = append(missing, "column "+c+" of "+b.sql.table)
		}
	}
	var n int
	if err := b.db.QueryRowContext(ctx, `SELECT count(*) FROM pragma_table_info(?1, ?2)`, waiters, schema).Scan(&n); err != nil {
		return nil, false, err
	}
	if n == 0 {
		missing = append(missing, "table "+b.sql.waiters)
	}
	return missing, true, nil
}
