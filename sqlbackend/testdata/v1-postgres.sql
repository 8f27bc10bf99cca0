-- The tables and functions of the release before lock delay and the waiters
-- table, as its CreateTables made them ({p} is the prefix, {t} the leases
-- table, {ch} the NOTIFY channel), for the upgrade test. Statements are
-- separated by lines of ----.
CREATE TABLE IF NOT EXISTS {t} (
	key        BYTEA PRIMARY KEY,
	token      BIGINT NOT NULL,
	lease_id   TEXT NOT NULL,
	released   BOOLEAN NOT NULL,
	expires_at TIMESTAMPTZ NOT NULL,
	ttl_ns     BIGINT NOT NULL,
	margin_ns  BIGINT NOT NULL,
	owner      TEXT NOT NULL DEFAULT ''
)
----
CREATE OR REPLACE FUNCTION {p}grant(p_key BYTEA, p_id TEXT, p_ttl BIGINT, p_margin BIGINT, p_owner TEXT,
	OUT outcome INT, OUT token BIGINT, OUT expires_at TIMESTAMPTZ, OUT ttl_ns BIGINT, OUT margin_ns BIGINT, OUT remaining_us BIGINT)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
	r {t}%ROWTYPE;
	n TIMESTAMPTZ;
	d INTERVAL := ((p_ttl + p_margin + 999) / 1000) * INTERVAL '1 microsecond';
BEGIN
	ttl_ns := p_ttl; margin_ns := p_margin;
	LOOP
		SELECT * INTO r FROM {t} AS l WHERE l.key = p_key FOR UPDATE;
		EXIT WHEN FOUND;
		n := clock_timestamp();
		INSERT INTO {t} AS l (key, token, lease_id, released, expires_at, ttl_ns, margin_ns, owner)
			VALUES (p_key, 1, p_id, false, n + d, p_ttl, p_margin, p_owner)
			ON CONFLICT (key) DO NOTHING
			RETURNING l.token, l.expires_at INTO token, expires_at;
		IF FOUND THEN
			outcome := 0; RETURN;
		END IF;
	END LOOP;
	n := clock_timestamp();
	IF r.lease_id = p_id THEN
		IF r.released THEN
			outcome := 4;
		ELSIF r.expires_at <= n THEN
			outcome := 3;
		ELSE
			outcome := 1; token := r.token; expires_at := r.expires_at; ttl_ns := r.ttl_ns; margin_ns := r.margin_ns;
		END IF;
		RETURN;
	END IF;
	IF NOT r.released AND r.expires_at > n THEN
		outcome := 2; remaining_us := floor(extract(epoch FROM r.expires_at - n) * 1000000);
		RETURN;
	END IF;
	IF r.token >= 9223372036854775807 THEN
		outcome := 5; RETURN;
	END IF;
	UPDATE {t} AS l SET token = r.token + 1, lease_id = p_id, released = false, expires_at = n + d,
		ttl_ns = p_ttl, margin_ns = p_margin, owner = p_owner
		WHERE l.key = p_key;
	outcome := 0; token := r.token + 1; expires_at := n + d;
END
$fn$
----
CREATE OR REPLACE FUNCTION {p}renew(p_key BYTEA, p_id TEXT, p_ttl BIGINT, p_margin BIGINT,
	OUT outcome INT, OUT token BIGINT, OUT expires_at TIMESTAMPTZ)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
	r {t}%ROWTYPE;
	n TIMESTAMPTZ;
	e TIMESTAMPTZ;
BEGIN
	SELECT * INTO r FROM {t} AS l WHERE l.key = p_key FOR UPDATE;
	IF NOT FOUND OR r.lease_id <> p_id OR r.released THEN
		outcome := 4; RETURN;
	END IF;
	n := clock_timestamp();
	IF r.expires_at <= n THEN
		outcome := 3; RETURN;
	END IF;
	e := n + ((p_ttl + p_margin + 999) / 1000) * INTERVAL '1 microsecond';
	UPDATE {t} AS l SET expires_at = e, ttl_ns = p_ttl, margin_ns = p_margin WHERE l.key = p_key;
	outcome := 0; token := r.token; expires_at := e;
END
$fn$
----
CREATE OR REPLACE FUNCTION {p}release(p_key BYTEA, p_id TEXT) RETURNS INT
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
	r {t}%ROWTYPE;
BEGIN
	SELECT * INTO r FROM {t} AS l WHERE l.key = p_key FOR UPDATE;
	IF NOT FOUND OR r.lease_id <> p_id THEN
		RETURN 4;
	END IF;
	IF r.released THEN
		RETURN 0;
	END IF;
	IF r.expires_at <= clock_timestamp() THEN
		RETURN 3;
	END IF;
	UPDATE {t} AS l SET released = true WHERE l.key = p_key;
	PERFORM pg_notify('{ch}', encode(p_key, 'hex'));
	RETURN 0;
END
$fn$
----
CREATE OR REPLACE FUNCTION {p}force_release(p_key BYTEA) RETURNS BOOLEAN
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
BEGIN
	UPDATE {t} AS l SET released = true
		WHERE l.key = p_key AND NOT l.released AND l.expires_at > clock_timestamp();
	IF NOT FOUND THEN
		RETURN false;
	END IF;
	PERFORM pg_notify('{ch}', encode(p_key, 'hex'));
	RETURN true;
END
$fn$
