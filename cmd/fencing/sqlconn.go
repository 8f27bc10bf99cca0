package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
	"github.com/spf13/pflag"
	_ "modernc.org/sqlite" // the "sqlite" database/sql driver

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/sqlbackend"
)

// sqlFlags reach the SQL backends.
type sqlFlags struct {
	sqlitePath  string
	postgresDSN string
	mysqlDSN    string
}

// addSQLFlags declares --sqlite-path, --postgres-dsn and --mysql-dsn, with their
// environment variables.
func (f *sqlFlags) add(fs *pflag.FlagSet) {
	fs.StringVar(&f.sqlitePath, "sqlite-path", "", "the SQLite `file` of the sqlite backend (default: fencing.db in the user's state directory, $XDG_STATE_HOME/fencing or ~/.local/state/fencing)")
	fs.StringVar(&f.postgresDSN, "postgres-dsn", "", "PostgreSQL connection string of the postgres backend, without a password (give it in PGPASSWORD or in FENCING_POSTGRES_DSN: flags show in ps)")
	fs.StringVar(&f.mysqlDSN, "mysql-dsn", "", "MySQL or MariaDB data source name of the mysql backend (user@tcp(host:3306)/dbname), without a password (give it in MYSQL_PWD or in FENCING_MYSQL_DSN: flags show in ps)")
	for _, n := range []string{"sqlite-path", "postgres-dsn", "mysql-dsn"} {
		fs.SetAnnotation(n, envAnnotation, []string{envName(n)})
	}
}

// stateDir is the per-user directory of the default SQLite file.
func stateDir() (string, error) {
	if d := os.Getenv("XDG_STATE_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "fencing"), nil
	}
	switch runtime.GOOS {
	case "windows":
		if d := os.Getenv("LocalAppData"); d != "" {
			return filepath.Join(d, "fencing"), nil
		}
	case "darwin":
		home, err := os.UserHomeDir()
		if err != nil {
			return "", err
		}
		return filepath.Join(home, "Library", "Application Support", "fencing"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("no state directory for the default SQLite file (set --sqlite-path or XDG_STATE_HOME): %w", err)
	}
	return filepath.Join(home, ".local", "state", "fencing"), nil
}

// defaultSQLitePath creates the state directory (0700) and returns the
// default file's path in it.
func defaultSQLitePath() (string, error) {
	dir, err := stateDir()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("create the state directory: %w", err)
	}
	return filepath.Join(dir, "fencing.db"), nil
}

// openSQLite opens the sqlite backend: the file at --sqlite-path, or the
// default one, created 0600 (SQLite gives its journal files the same mode).
func (f *connFlags) openSQLite(ctx context.Context, s *session) error {
	path := f.sql.sqlitePath
	if path == "" {
		var err error
		if path, err = defaultSQLitePath(); err != nil {
			return err
		}
	}
	s.where = "the SQLite file " + path
	if fh, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600); err != nil {
		return fmt.Errorf("%w: --sqlite-path: %w", errUsage, err)
	} else {
		fh.Close()
	}
	dsn := "file:" + (&url.URL{Path: path}).EscapedPath() +
		"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return err
	}
	return f.openSQL(ctx, s, db, sqlbackend.SQLite)
}

// openPostgres opens the postgres backend, creating its table and functions
// when they are missing.
func (f *connFlags) openPostgres(ctx context.Context, s *session) error {
	dsn := f.sql.postgresDSN
	if dsn == "" {
		return fmt.Errorf("%w: the postgres backend needs --postgres-dsn (or FENCING_POSTGRES_DSN)", errUsage)
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return fmt.Errorf("%w: --postgres-dsn: %w", errUsage, err)
	}
	if dsnHasPassword(dsn) && os.Getenv(envName("postgres-dsn")) != dsn {
		return fmt.Errorf("%w: --postgres-dsn holds a password, which any user can read in ps: give it in PGPASSWORD or the whole string in FENCING_POSTGRES_DSN", errUsage)
	}
	s.where = fmt.Sprintf("postgres at %s:%d", cfg.Host, cfg.Port) // never the DSN, which may hold a password
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return err
	}
	return f.openSQL(ctx, s, db, sqlbackend.Postgres)
}

// openMySQL opens the mysql backend, creating its tables when they are
// missing. The password comes from MYSQL_PWD (as MySQL's own clients take
// it) or from the whole DSN in FENCING_MYSQL_DSN, never from the flag.
func (f *connFlags) openMySQL(ctx context.Context, s *session) error {
	dsn := f.sql.mysqlDSN
	if dsn == "" {
		return fmt.Errorf("%w: the mysql backend needs --mysql-dsn (or FENCING_MYSQL_DSN)", errUsage)
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return fmt.Errorf("%w: --mysql-dsn: %w", errUsage, err)
	}
	if cfg.Passwd != "" && os.Getenv(envName("mysql-dsn")) != dsn {
		return fmt.Errorf("%w: --mysql-dsn holds a password, which any user can read in ps: give it in MYSQL_PWD or the whole string in FENCING_MYSQL_DSN", errUsage)
	}
	if cfg.Passwd == "" {
		cfg.Passwd = os.Getenv("MYSQL_PWD")
	}
	cfg.InterpolateParams = true // one round trip per statement
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	if _, ok := cfg.Params["time_zone"]; !ok {
		cfg.Params["time_zone"] = "'+00:00'" // no daylight saving, as the backend requires
	}
	s.where = "mysql at " + cfg.Addr // never the DSN, which may hold a password
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return fmt.Errorf("%w: --mysql-dsn: %w", errUsage, err)
	}
	return f.openSQL(ctx, s, sql.OpenDB(conn), sqlbackend.MySQL)
}

// openSQL makes the backend of dialect d on db, creating its tables when
// they are missing, and keeps both in s; it closes db when it fails. New's
// first round trip tells a refused login (exit 6) from a server that does
// not answer (exit 5).
func (f *connFlags) openSQL(ctx context.Context, s *session, db *sql.DB, d sqlbackend.Dialect) error {
	cctx, cancel := context.WithTimeout(ctx, f.requestTimeout)
	defer cancel()
	b, err := sqlbackend.New(cctx, db, d)
	if errors.Is(err, backend.ErrAuthRefused) || errors.Is(err, backend.ErrUnreachable) {
		db.Close()
		return s.reachError(err)
	}
	if err == nil {
		err = createTables(cctx, db, b, d)
	}
	if err != nil {
		db.Close()
		var safety *sqlbackend.SafetyError
		if errors.As(err, &safety) {
			return err
		}
		return fmt.Errorf("%s: %w", s.where, err)
	}
	s.b, s.close = b, func() { b.Close(); db.Close() }
	s.client = db
	return nil
}

// createTables runs b's CreateTables, on PostgreSQL only when its
// functions are missing: CREATE OR REPLACE FUNCTION needs the privilege to
// create them, which a user of existing tables may lack. The other
// dialects create only what is missing (CREATE TABLE IF NOT EXISTS).
func createTables(ctx context.Context, db *sql.DB, b *sqlbackend.Backend, d sqlbackend.Dialect) error {
	if d == sqlbackend.Postgres {
		var exists bool
		err := db.QueryRowContext(ctx, "SELECT to_regprocedure($1) IS NOT NULL", sqlbackend.DefaultPrefix+"force_release(bytea)").Scan(&exists)
		if err != nil || exists {
			return err
		}
	}
	return b.CreateTables(ctx)
}

// dsnHasPassword reports a password in a URL or keyword/value string.
func dsnHasPassword(dsn string) bool {
	if u, err := url.Parse(dsn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		_, set := u.User.Password()
		return set || u.Query().Has("password")
	}
	for _, field := range strings.Fields(dsn) {
		if strings.HasPrefix(field, "password=") {
			return true
		}
	}
	return false
}
