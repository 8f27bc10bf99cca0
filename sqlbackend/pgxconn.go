package sqlbackend

import (
	"context"

	"github.com/jackc/pgx/v5/stdlib"
)

// pgQueryRow runs query, which returns one row, and scans the row into
// dest. With pgx's database/sql driver (stdlib) it runs through pgx
// itself on a connection of the pool: database/sql starts a goroutine for
// each query whose context can end, to close its rows when the context
// ends, and the Coordinator's requests always carry a deadline; pgx bounds
// a query by its context without one. With another driver it runs through
// database/sql. Errors are the driver's, as classify expects: a query
// that pgx did not send is one whose error pgconn.SafeToRetry accepts,
// and it is not sent again (database/sql would retry it on another
// connection).
func (b *Backend) pgQueryRow(ctx context.Context, query string, args []any, dest ...any) error {
	if b.notPgx.Load() {
		return b.db.QueryRowContext(ctx, query, args...).Scan(dest...)
	}
	c, err := b.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	viaPgx := false
	err = c.Raw(func(dc any) error {
		pc, ok := dc.(*stdlib.Conn)
		if !ok {
			return nil
		}
		viaPgx = true
		return pc.Conn().QueryRow(ctx, query, args...).Scan(dest...)
	})
	if err == nil && !viaPgx {
		b.notPgx.Store(true)
		return c.QueryRowContext(ctx, query, args...).Scan(dest...)
	}
	return err
}
