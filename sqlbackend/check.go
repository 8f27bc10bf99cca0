package sqlbackend

import (
	"context"
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
	return b.dialect.schemaGaps(ctx)
}
