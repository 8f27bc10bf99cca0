// Package sqlfault wraps a database/sql driver for tests, so that a
// statement can reach the database and then fail as the caller sees it: a
// COMMIT that was written to the file but reported an I/O error, a reply
// lost after the server applied the statement.
package sqlfault

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"testing"
)

// After is called once each statement run with ExecContext has returned
// err (its effect, if any, already applied) and returns the error the
// caller sees: err to pass it on. It must be safe for concurrent use.
type After func(query string, err error) error

// Open opens dsn with the driver registered as driverName, wrapped so that
// every ExecContext goes through after, and closes the pool when t ends.
// Statements run by QueryContext, and prepared ones, pass through as they
// are.
func Open(t testing.TB, driverName, dsn string, after After) *sql.DB {
	t.Helper()
	probe, err := sql.Open(driverName, dsn)
	if err != nil {
		t.Fatalf("sqlfault: %v", err)
	}
	drv := probe.Driver()
	probe.Close()
	db := sql.OpenDB(connector{drv: drv, dsn: dsn, after: after})
	t.Cleanup(func() { db.Close() })
	return db
}

type connector struct {
	drv   driver.Driver
	dsn   string
	after After
}

func (c connector) Connect(ctx context.Context) (driver.Conn, error) {
	var inner driver.Conn
	var err error
	if dc, ok := c.drv.(driver.DriverContext); ok {
		var cn driver.Connector
		if cn, err = dc.OpenConnector(c.dsn); err != nil {
			return nil, err
		}
		inner, err = cn.Connect(ctx)
	} else {
		inner, err = c.drv.Open(c.dsn)
	}
	if err != nil {
		return nil, err
	}
	return &conn{Conn: inner, after: c.after}, nil
}

func (c connector) Driver() driver.Driver { return c.drv }

// conn forwards the optional interfaces database/sql uses to the wrapped
// connection.
type conn struct {
	driver.Conn
	after After
}

var errNoContext = errors.New("sqlfault: the wrapped driver's connection lacks a context method")

func (c *conn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	e, ok := c.Conn.(driver.ExecerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	r, err := e.ExecContext(ctx, query, args)
	return r, c.after(query, err)
}

func (c *conn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	q, ok := c.Conn.(driver.QueryerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	return q.QueryContext(ctx, query, args)
}

func (c *conn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	if p, ok := c.Conn.(driver.ConnPrepareContext); ok {
		return p.PrepareContext(ctx, query)
	}
	return c.Conn.Prepare(query)
}

func (c *conn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	b, ok := c.Conn.(driver.ConnBeginTx)
	if !ok {
		return nil, errNoContext
	}
	return b.BeginTx(ctx, opts)
}

func (c *conn) CheckNamedValue(v *driver.NamedValue) error {
	if n, ok := c.Conn.(driver.NamedValueChecker); ok {
		return n.CheckNamedValue(v)
	}
	return driver.ErrSkip
}

func (c *conn) ResetSession(ctx context.Context) error {
	if r, ok := c.Conn.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

func (c *conn) IsValid() bool {
	if v, ok := c.Conn.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}
