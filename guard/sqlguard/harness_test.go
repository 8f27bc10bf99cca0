package sqlguard_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/fencing-go/fencing/conformance"
	"github.com/fencing-go/fencing/guard/sqlguard"
)

// sqlHarness makes guarded stores on one database: each gets its own
// fences table and values table.
type sqlHarness struct {
	db      *sql.DB
	dialect sqlguard.Dialect
	n       atomic.Int64
}

func (h *sqlHarness) NewGuardStore(ctx context.Context, t testing.TB) (conformance.GuardStore, error) {
	n := h.n.Add(1)
	g, err := sqlguard.New(h.dialect, sqlguard.WithTable(fmt.Sprintf("fences_%d", n)))
	if err != nil {
		return nil, err
	}
	if err := g.CreateTable(ctx, h.db); err != nil {
		return nil, err
	}
	s := &sqlStore{db: h.db, g: g, table: fmt.Sprintf("values_%d", n)}
	blob := "BLOB"
	switch h.dialect {
	case sqlguard.Postgres:
		blob = "BYTEA"
	case sqlguard.MySQL:
		blob = "VARBINARY(1024)"
	}
	create := fmt.Sprintf("CREATE TABLE %s (resource %s PRIMARY KEY, value %[2]s NOT NULL)", s.table, blob)
	if _, err := h.db.ExecContext(ctx, create); err != nil {
		return nil, err
	}
	s.upsert = fmt.Sprintf("INSERT INTO %s (resource, value) VALUES (?, ?) ON CONFLICT (resource) DO UPDATE SET value = excluded.value", s.table)
	s.read = fmt.Sprintf("SELECT value FROM %s WHERE resource = ?", s.table)
	s.delete = fmt.Sprintf("DELETE FROM %s WHERE resource = ?", s.table)
	if h.dialect == sqlguard.MySQL {
		s.upsert = fmt.Sprintf("INSERT INTO %s (resource, value) VALUES (?, ?) ON DUPLICATE KEY UPDATE value = VALUES(value)", s.table)
	}
	if h.dialect == sqlguard.Postgres {
		s.upsert = numbered(s.upsert)
		s.read = numbered(s.read)
		s.delete = numbered(s.delete)
	}
	return s, nil
}

// numbered turns ? placeholders into $1, $2...
func numbered(q string) string {
	var b strings.Builder
	n := 0
	for _, r := range q {
		if r == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// sqlStore keeps one value per resource in a table, written in the same
// transaction that admits the token.
type sqlStore struct {
	db                          *sql.DB
	g                           *sqlguard.Guard
	table, upsert, read, delete string
}

var errWriteFailed = errors.New("the write failed")

func (s *sqlStore) Admit(ctx context.Context, resource string, token uint64) error {
	return s.g.Takeover(ctx, s.db, resource, token)
}

func (s *sqlStore) Write(ctx context.Context, resource string, token uint64, value string) error {
	return s.g.Write(ctx, s.db, nil, resource, token, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, s.upsert, []byte(resource), []byte(value))
		return err
	})
}

// FailedWrite is the caller's own transaction: Admit, the write, and a
// rollback instead of a commit.
func (s *sqlStore) FailedWrite(ctx context.Context, resource string, token uint64, value string) error {
	return s.inTx(ctx, resource, token, false, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, s.upsert, []byte(resource), []byte(value))
		return err
	})
}

// Drop deletes the value's row and drops the fence in one transaction,
// after admitting token in it.
func (s *sqlStore) Drop(ctx context.Context, resource string, token uint64) error {
	return s.inTx(ctx, resource, token, true, s.drop(ctx, resource))
}

// FailedDrop is Drop rolled back instead of committed.
func (s *sqlStore) FailedDrop(ctx context.Context, resource string, token uint64) error {
	return s.inTx(ctx, resource, token, false, s.drop(ctx, resource))
}

func (s *sqlStore) drop(ctx context.Context, resource string) func(*sql.Tx) error {
	return func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, s.delete, []byte(resource)); err != nil {
			return err
		}
		return s.g.Drop(ctx, tx, resource)
	}
}

// inTx is the caller's own transaction: Admit, then body, then a commit,
// or, unless commit, a rollback that returns errWriteFailed. MySQL may pick
// the transaction as a deadlock's victim (the first writes of a resource):
// its caller runs it again.
func (s *sqlStore) inTx(ctx context.Context, resource string, token uint64, commit bool, body func(*sql.Tx) error) error {
	for {
		err := s.inTxOnce(ctx, resource, token, commit, body)
		var me *mysql.MySQLError
		if !errors.As(err, &me) || me.Number != 1213 {
			return err
		}
	}
}

func (s *sqlStore) inTxOnce(ctx context.Context, resource string, token uint64, commit bool, body func(*sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := s.g.Admit(ctx, tx, resource, token); err != nil {
		return err
	}
	if err := body(tx); err != nil {
		return err
	}
	if !commit {
		return errWriteFailed // and roll back
	}
	return tx.Commit()
}

func (s *sqlStore) Read(ctx context.Context, resource string) (string, error) {
	var v []byte
	err := s.db.QueryRowContext(ctx, s.read, []byte(resource)).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	return string(v), err
}
