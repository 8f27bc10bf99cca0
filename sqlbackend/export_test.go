package sqlbackend

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/fencing-go/fencing/backend"
)

// Table returns the backend's table name, for tests that write rows.
func (b *Backend) Table() string { return b.sql.table }

// Classify is classify, for tests of how a failed statement's error is
// told.
func (b *Backend) Classify(ctx context.Context, what string, err error) error {
	return b.classify(ctx, what, err)
}

// ReadTurns reads the place of sub's waiter (a NotifyTurn subscription) as
// the hub's poll does, and returns what the poll does next: apply the read
// (waking sub if its place changed), after whatever a test runs meanwhile.
func (b *Backend) ReadTurns(ctx context.Context, sub backend.Subscription) (apply func()) {
	subs := []*subscription{sub.(*subscription)}
	began := time.Now()
	places, err := b.turnPlaces(ctx, subs)
	return func() { b.hub.applyTurns(subs, places, err, began) }
}

// HoldWriter takes b's turn to write (rowTx), as a transaction of b that
// runs would: b's next transaction waits until release is called.
func (b *Backend) HoldWriter() (release func()) {
	b.writer <- struct{}{}
	return func() { <-b.writer }
}

// Telling reports whether an Enqueue or a Dequeue of sub's waiter (a
// NotifyTurn subscription) through b is under way.
func (b *Backend) Telling(sub backend.Subscription) bool {
	b.hub.mu.Lock()
	defer b.hub.mu.Unlock()
	return sub.(*subscription).telling > 0
}

// SlowClockRead holds up the first read of Token (and Inspect on MySQL)
// for d between taking the row and reading the server's clock, as a busy
// server can: SLEEP in MySQL's statement, which the process list shows as
// "User sleep"; pg_sleep before PostgreSQL's clock_timestamp(), which
// pg_stat_activity shows as the wait event PgSleep.
func (b *Backend) SlowClockRead(d time.Duration) {
	if b.dialect == Postgres {
		b.sql.token = strings.Replace(b.sql.token, "clock_timestamp()", fmt.Sprintf("(SELECT clock_timestamp() FROM pg_sleep(%g))", d.Seconds()), 1)
		return
	}
	b.sql.read = strings.Replace(b.sql.read, mysqlNow, fmt.Sprintf("IF(SLEEP(%g) = 0, %s, 0)", d.Seconds(), mysqlNow), 1)
}

// HoldReclaim makes the reclaiming batches of b (SQLite, MySQL) call f
// inside their transaction, once they have deleted rows and raised the
// floor, before they commit.
func (b *Backend) HoldReclaim(f func()) { b.sweep.hook = f }
