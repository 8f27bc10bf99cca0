// Package sqlitebusy waits out SQLite's SQLITE_BUSY: another connection,
// maybe of another process, holds the lock a statement needs. Packages
// sqlbackend and sqlguard retry with it, whatever busy timeout the
// caller's connection string sets (none by default).
package sqlitebusy

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// The first waits are short, so a lock held for one short transaction
// costs little; later ones back off.
const (
	firstWait = 200 * time.Microsecond
	maxWait   = 20 * time.Millisecond
)

// Is reports SQLite's SQLITE_BUSY, from any driver (modernc.org/sqlite,
// mattn/go-sqlite3), which say it in their error texts.
func Is(err error) bool {
	if err == nil {
		return false
	}
	s := err.Error()
	return strings.Contains(s, "SQLITE_BUSY") || strings.Contains(s, "database is locked")
}

// Retry runs fn until it returns anything but SQLITE_BUSY, or ctx ends;
// then it returns ctx's error, naming the last busy one.
func Retry(ctx context.Context, fn func() error) error {
	wait := firstWait
	for {
		err := fn()
		if !Is(err) {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (waiting for the database's write lock: %v)", ctx.Err(), err)
		case <-t.C:
		}
		wait = min(2*wait, maxWait)
	}
}
