-- The tables and functions of the release before lock delay and the waiters
-- table, as its CreateTables made them ({p} is the prefix, {t} the leases
-- table, {ch} the NOTIFY channel), for the upgrade test. Statements are
-- separated by lines of ----.
CREATE TABLE IF NOT EXISTS {t} (
	key        BLOB PRIMARY KEY,
	token      INTEGER NOT NULL,
	lease_id   TEXT NOT NULL,
	released   INTEGER NOT NULL,
	boot_id    TEXT NOT NULL,
	expires_at INTEGER NOT NULL,
	ttl_ns     INTEGER NOT NULL,
	margin_ns  INTEGER NOT NULL,
	owner      TEXT NOT NULL DEFAULT ''
)
