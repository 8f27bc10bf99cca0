package sqlbackend

import (
	"context"

	"github.com/fencing-go/fencing/backend"
)

// Inspect implements backend.Inspector in one statement (PostgreSQL), on
// MySQL in readLive's one or two, or on SQLite in one read of a live
// lease's row or else one transaction.
func (b *Backend) Inspect(ctx context.Context, key string) (backend.KeyState, error) {
	if err := b.ready(ctx, backend.CheckKey(key)); err != nil {
		return backend.KeyState{}, err
	}
	return b.dialect.inspect(ctx, key)
}

// DefaultListLimit is the page size of List when the caller gives none.
const DefaultListLimit = 100

// List implements backend.Lister: keys in byte order, in one statement per
// page; the cursor is the last key of the page before.
func (b *Backend) List(ctx context.Context, prefix, cursor string, limit int) ([]backend.KeyInfo, string, error) {
	if err := b.ready(ctx, nil); err != nil {
		return nil, "", err
	}
	if limit <= 0 {
		limit = DefaultListLimit
	}
	page, err := b.dialect.list(ctx, prefix, cursor, limit+1)
	if err != nil {
		return nil, "", err
	}
	next := ""
	if len(page) > limit {
		page = page[:limit]
		next = page[limit-1].Key
	}
	return page, next, nil
}
