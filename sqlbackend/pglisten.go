package sqlbackend

import "fmt"

// Notifying only when someone listens.
//
// PostgreSQL serializes the commits of transactions that NOTIFY: each takes
// a database-wide lock at commit and holds it through its WAL flush, so
// releases that notify stop sharing group commits, and with fsync on their
// throughput falls to one flush at a time. So the release, force_release
// and dequeue functions notify only when a listener session
// (WithListener) of some Backend on the tables may be listening:
//
//   - a listener session takes a shared session-level advisory lock on the
//     channel's lock ID (listeningLock) after its LISTEN and before its
//     subscriptions count as ready, and holds it as long as it is open;
//   - the functions probe for that lock with pg_try_advisory_lock, which
//     fails while any session holds it, and give it back at once when they
//     got it (nobody listens: no notification).
//
// A waiter subscribes (its listener holds the lock) before its grant reads
// the key's row, and a release locks that row before it probes: a release
// that the waiter's grant did not see probes after the waiter's lock was
// taken, and notifies. A probe that fails because another release probes
// at the same instant only notifies for nothing. A listener session that
// breaks loses its lock; the hub wakes every subscription when it is back,
// as it does for the notifications it may have missed.
//
// The probe's lock is session-level (a transaction-level one would be held
// through the commit, and concurrent releases would find each other's and
// notify), taken and given back within one expression, with no point in
// between where PostgreSQL acts on a cancellation: behind PgBouncer in
// transaction mode no session keeps it.
//
// A listener of a release of this package before this rule takes no lock,
// and its waiters are not notified of the releases of this release's
// functions: they learn at the lease's end. Upgrade every process of a
// deployment together.

// pgNobodyListens returns the SQL condition, for the functions, that no
// listener session of channel holds its lock. It leaves no lock behind:
// the probe's lock, when taken, is given back in the same expression.
func pgNobodyListens(channel string) string {
	id := listeningLock(channel)
	// CASE, not AND: PostgreSQL does not promise to evaluate AND's
	// operands in order.
	return fmt.Sprintf("(CASE WHEN pg_try_advisory_lock(%s) THEN pg_advisory_unlock(%s) ELSE false END)", id, id)
}

// listeningLock is the SQL expression of the advisory lock ID that the
// listener sessions of channel hold (shared).
func listeningLock(channel string) string {
	return fmt.Sprintf("hashtextextended('%s:listening', 0)", channel)
}
