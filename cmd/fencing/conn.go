package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/etcdbackend"
	"github.com/fencing-go/fencing/memorybackend"
	"github.com/fencing-go/fencing/redisbackend"
)

// envPrefix starts the environment variable of every backend flag:
// --etcd-endpoints is FENCING_ETCD_ENDPOINTS.
const envPrefix = "FENCING_"

// envAnnotation marks the flags that an environment variable can set.
const envAnnotation = "fencing_env"

// otherKeySpaces says how the backends without --key-prefix keep key
// spaces apart.
const otherKeySpaces = "the SQL backends keep keys in their tables (sqlbackend.WithTablePrefix), kube in the namespace (--kube-namespace), nats in the bucket (--nats-bucket), memory in the process"

// backendKinds are the values of --backend.
var backendKinds = []string{"sqlite", "postgres", "mysql", "memory", "etcd", "redis", "kube", "nats"}

// connFlags are the flags that choose and reach a backend.
type connFlags struct {
	backend        string
	prefix         string
	requestTimeout time.Duration
	jsonOut        bool
	verbose        bool
	owner          string        // the leases' owner (see addOwnerFlag); "" for none
	lockDelay      time.Duration // the leases' lock delay (see addLockDelayFlag)

	etcdEndpoints []string
	etcdCACert    string
	etcdCert      string
	etcdKey       string
	etcdUser      string
	etcdPassword  string

	redisAddr           string
	redisUser           string
	redisPassword       string
	redisDB             int
	redisTLS            bool
	redisCACert         string
	redisCert           string
	redisKey            string
	redisInsecure       bool
	redisSentinelMaster string
	redisSentinelPass   string
	redisCluster        bool
	redisConfigCheck    string

	sql  sqlFlags  // sqlconn.go
	kube kubeFlags // kubeconn.go
	nats natsFlags // natsconn.go
}

// addConnFlags declares the backend flags on cmd and arranges for their
// environment variables to be read before the command runs.
func addConnFlags(cmd *cobra.Command) *connFlags {
	f := addBackendFlags(cmd)
	cmd.Flags().BoolVar(&f.jsonOut, "json", false, "print JSON instead of text")
	return f
}

// addBackendFlags is addConnFlags without --json, for hold, which prints
// nothing of its own.
func addBackendFlags(cmd *cobra.Command) *connFlags {
	f := &connFlags{}
	fs := cmd.Flags()
	env := func(names ...string) {
		for _, n := range names {
			fs.SetAnnotation(n, envAnnotation, []string{envName(n)})
		}
	}
	fs.StringVar(&f.backend, "backend", "", "the backend: sqlite, postgres, mysql, memory, etcd, redis, kube or nats (default: etcd if --etcd-endpoints is set, redis if --redis-addr is, postgres if --postgres-dsn is, mysql if --mysql-dsn is, else sqlite)")
	fs.StringVar(&f.prefix, "key-prefix", "", fmt.Sprintf("prefix of the backend's keys in etcd or Redis (default: the backend's, %q on etcd, %q on Redis); an error with another backend", etcdbackend.DefaultPrefix, redisbackend.DefaultPrefix))
	fs.DurationVar(&f.requestTimeout, "request-timeout", 5*time.Second, "how long to wait for the server to answer one request")
	fs.BoolVarP(&f.verbose, "verbose", "v", false, "log the library's requests (never lease IDs) on stderr")

	fs.StringSliceVar(&f.etcdEndpoints, "etcd-endpoints", nil, "etcd endpoints, comma separated (http://host:2379 or https://...)")
	fs.StringVar(&f.etcdCACert, "etcd-cacert", "", "PEM `file` of the CA that signed the etcd servers' certificates")
	fs.StringVar(&f.etcdCert, "etcd-cert", "", "PEM `file` of the client certificate for etcd")
	fs.StringVar(&f.etcdKey, "etcd-key", "", "PEM `file` of the client certificate's key for etcd")
	fs.StringVar(&f.etcdUser, "etcd-user", "", "etcd user name")
	fs.StringVar(&f.etcdPassword, "etcd-password", "", "etcd password (prefer FENCING_ETCD_PASSWORD: flags show in ps)")
	env("backend", "key-prefix", "request-timeout", "etcd-endpoints", "etcd-cacert", "etcd-cert", "etcd-key", "etcd-user", "etcd-password")

	fs.StringVar(&f.redisAddr, "redis-addr", "", "Redis host:port, a redis:// or rediss:// URL, or comma-separated addresses (Sentinels with --redis-sentinel-master, seed nodes with --redis-cluster)")
	fs.StringVar(&f.redisUser, "redis-user", "", "Redis ACL user name")
	fs.StringVar(&f.redisPassword, "redis-password", "", "Redis password (prefer FENCING_REDIS_PASSWORD: flags show in ps)")
	fs.IntVar(&f.redisDB, "redis-db", 0, "Redis database number (not with --redis-cluster)")
	fs.BoolVar(&f.redisTLS, "redis-tls", false, "connect to Redis with TLS (implied by rediss:// and the --redis-cacert/cert/key files)")
	fs.StringVar(&f.redisCACert, "redis-cacert", "", "PEM `file` of the CA that signed the Redis servers' certificates")
	fs.StringVar(&f.redisCert, "redis-cert", "", "PEM `file` of the client certificate for Redis")
	fs.StringVar(&f.redisKey, "redis-key", "", "PEM `file` of the client certificate's key for Redis")
	fs.BoolVar(&f.redisInsecure, "redis-tls-insecure", false, "do not verify the Redis server's certificate (testing only)")
	fs.StringVar(&f.redisSentinelMaster, "redis-sentinel-master", "", "the master `name` the Sentinels at --redis-addr watch")
	fs.StringVar(&f.redisSentinelPass, "redis-sentinel-password", "", "password of the Sentinels, when it differs")
	fs.BoolVar(&f.redisCluster, "redis-cluster", false, "--redis-addr names Redis Cluster seed nodes")
	fs.StringVar(&f.redisConfigCheck, "redis-config-check", "refuse", "what to do about a Redis configuration that can lose tokens (appendonly no, allkeys-* eviction): refuse, warn or ignore")
	env("redis-addr", "redis-user", "redis-password", "redis-db", "redis-tls", "redis-cacert", "redis-cert", "redis-key",
		"redis-tls-insecure", "redis-sentinel-master", "redis-sentinel-password", "redis-cluster", "redis-config-check")
	f.sql.add(fs)
	f.kube.add(fs)
	f.nats.add(fs)
	cmd.PreRunE = func(cmd *cobra.Command, args []string) error { return applyEnv(cmd.Flags()) }
	return f
}

// envName is the environment variable of the flag name.
func envName(flag string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// applyEnv sets each annotated flag not given on the command line from its
// environment variable.
func applyEnv(fs *pflag.FlagSet) error {
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		names := f.Annotations[envAnnotation]
		if err != nil || f.Changed || len(names) == 0 {
			return
		}
		v, ok := os.LookupEnv(names[0])
		if !ok {
			return
		}
		if serr := fs.Set(f.Name, v); serr != nil {
			err = fmt.Errorf("%w: $%s: %w", errUsage, names[0], serr)
		}
	})
	return err
}

// session is an open backend and a Coordinator over it.
type session struct {
	c       *fencing.Coordinator
	b       backend.Backend
	name    string // sqlite, postgres, mysql, memory, etcd, redis, kube or nats
	where   string // what to name in "unreachable" errors
	timeout time.Duration
	close   func()
	// client is the backend's client, for the fence command's guard:
	// *sql.DB, *clientv3.Client or redis.UniversalClient; nil for memory.
	client any
}

// Close closes the backend and its client.
func (s *session) Close() { s.close() }

// call returns a context for one request.
func (s *session) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.timeout)
}

// wrap turns a request's error into one that says what could not be
// reached, or what refused the credentials or permission, when that is
// what happened.
func (s *session) wrap(ctx context.Context, err error) error {
	if err == nil || ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return err
	}
	if aerr := s.authError(err); aerr != nil {
		return aerr
	}
	if errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, fencing.ErrOutcomeUnknown) {
		return fmt.Errorf("%w: %s did not answer within %v: %w", errUnreachable, s.where, s.timeout, err)
	}
	return err
}

// storeAway returns the store's error that a wait's error wraps besides
// the context's: a wait (Lock, LockMany, Acquire) that ended while the
// store was away (fencing.IsTransient) says so by wrapping both. It
// returns nil for a wait that ended on a held key.
func storeAway(err error) error {
	var both interface{ Unwrap() []error }
	if !errors.As(err, &both) {
		return nil
	}
	for _, e := range both.Unwrap() {
		if e != context.Canceled && e != context.DeadlineExceeded && fencing.IsTransient(e) {
			return e
		}
	}
	return nil
}

// open connects to the backend the flags choose and checks that it
// answers. logTo receives the library's logs with --verbose.
// start opens the backend for a command that makes one request: it returns
// the session, a context bounded by the request timeout, and one function
// that cancels that context and closes the session.
func (f *connFlags) start(cmd *cobra.Command) (*session, context.Context, func(), error) {
	s, err := f.open(cmd.Context(), cmd.ErrOrStderr())
	if err != nil {
		return nil, nil, nil, err
	}
	ctx, cancel := s.call(cmd.Context())
	return s, ctx, func() { cancel(); s.Close() }, nil
}

func (f *connFlags) open(ctx context.Context, logTo io.Writer) (*session, error) {
	if f.requestTimeout <= 0 {
		return nil, fmt.Errorf("%w: --request-timeout %v is not positive", errUsage, f.requestTimeout)
	}
	var opts []fencing.Option
	if f.verbose {
		opts = append(opts, fencing.WithLogger(slog.New(slog.NewTextHandler(logTo, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	}
	if f.owner != "" {
		opts = append(opts, fencing.WithDefaultOwner(f.owner))
	}
	if f.lockDelay != 0 {
		opts = append(opts, fencing.WithDefaultLockDelay(f.lockDelay))
	}
	kind := f.backend
	if kind == "" {
		switch {
		case len(f.etcdEndpoints) > 0:
			kind = "etcd"
		case f.redisAddr != "":
			kind = "redis"
		case f.sql.postgresDSN != "":
			kind = "postgres"
		case f.sql.mysqlDSN != "":
			kind = "mysql"
		default:
			kind = "sqlite"
		}
	}
	if f.prefix != "" && kind != "etcd" && kind != "redis" {
		return nil, fmt.Errorf("%w: --key-prefix (or FENCING_KEY_PREFIX) applies to etcd and Redis only, not to --backend %s: %s", errUsage, kind, otherKeySpaces)
	}
	s := &session{name: kind, timeout: f.requestTimeout}
	var err error
	switch kind {
	case "memory":
		mem := memorybackend.New()
		s.b, s.where, s.close = mem, "the in-memory backend", func() { mem.Close() }
	case "etcd":
		err = f.openEtcd(ctx, s)
	case "redis":
		err = f.openRedis(ctx, s)
	case "sqlite":
		err = f.openSQLite(ctx, s)
	case "postgres":
		err = f.openPostgres(ctx, s)
	case "mysql":
		err = f.openMySQL(ctx, s)
	case "kube":
		err = f.openKube(ctx, s)
	case "nats":
		err = f.openNATS(ctx, s)
	default:
		return nil, fmt.Errorf("%w: --backend %q: want one of %s", errUsage, kind, strings.Join(backendKinds, ", "))
	}
	if err != nil {
		return nil, err
	}
	s.c = fencing.New(s.b, opts...)
	return s, nil
}

func (f *connFlags) openEtcd(ctx context.Context, s *session) error {
	if len(f.etcdEndpoints) == 0 {
		return fmt.Errorf("%w: the etcd backend needs --etcd-endpoints (or FENCING_ETCD_ENDPOINTS)", errUsage)
	}
	tlsCfg, err := tlsConfig("etcd", f.etcdCACert, f.etcdCert, f.etcdKey, false)
	if err != nil {
		return err
	}
	if tlsCfg == nil && anyHTTPS(f.etcdEndpoints) {
		tlsCfg = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   f.etcdEndpoints,
		DialTimeout: f.requestTimeout,
		TLS:         tlsCfg,
		Username:    f.etcdUser,
		Password:    f.etcdPassword,
		Logger:      zap.NewNop(),
	})
	s.where = "etcd at " + strings.Join(f.etcdEndpoints, ",")
	if err != nil { // with a user name, New authenticates at once
		return s.reachError(err)
	}
	var opts []etcdbackend.Option
	if f.prefix != "" {
		opts = append(opts, etcdbackend.WithPrefix(f.prefix))
	}
	// New's check, one linearizable read of the prefix, tells at once
	// whether etcd answers and lets this user read; --request-timeout
	// bounds it.
	cctx, cancel := context.WithTimeout(ctx, f.requestTimeout)
	defer cancel()
	b, err := etcdbackend.New(cctx, cli, opts...)
	if err != nil {
		cli.Close()
		return s.reachError(err)
	}
	s.b, s.close = b, func() { b.Close(); cli.Close() }
	s.client = cli
	return nil
}

func anyHTTPS(endpoints []string) bool {
	for _, e := range endpoints {
		if strings.HasPrefix(e, "https://") {
			return true
		}
	}
	return false
}

// authError returns err marked errAuth or errPermission when the server
// refused the credentials or the user's permission, else nil.
func (s *session) authError(err error) error {
	var mark error
	switch {
	case redis.IsAuthError(err), errors.Is(err, rpctypes.ErrAuthFailed), errors.Is(err, rpctypes.ErrUserEmpty),
		errors.Is(err, backend.ErrAuthRefused):
		mark = errAuth
	case redis.IsPermissionError(err), errors.Is(err, rpctypes.ErrPermissionDenied), errors.Is(err, backend.ErrPermissionDenied):
		mark = errPermission
	default:
		if mark = kubeAuthError(err); mark == nil {
			return nil
		}
	}
	return fmt.Errorf("%w: %s: %w", mark, s.where, err)
}

// reachError reports a server that could not be reached, or one that
// refused the credentials or permission (authError).
func (s *session) reachError(err error) error {
	if errors.Is(err, context.Canceled) {
		return err
	}
	if aerr := s.authError(err); aerr != nil {
		return aerr
	}
	return fmt.Errorf("%w: %s: %w", errUnreachable, s.where, err)
}

func (f *connFlags) openRedis(ctx context.Context, s *session) error {
	if f.redisAddr == "" {
		return fmt.Errorf("%w: the redis backend needs --redis-addr (or FENCING_REDIS_ADDR)", errUsage)
	}
	mode, err := checkMode("redis-config-check", f.redisConfigCheck)
	if err != nil {
		return err
	}
	client, addr, err := f.redisClient()
	if err != nil {
		return err
	}
	s.where = "redis at " + addr // never the URL, which may hold a password
	cctx, cancel := context.WithTimeout(ctx, f.requestTimeout)
	defer cancel()
	if err := client.Ping(cctx).Err(); err != nil {
		client.Close()
		return s.reachError(err)
	}
	opts := []redisbackend.Option{redisbackend.WithSafetyCheck(mode), redisbackend.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, nil)))}
	if f.prefix != "" {
		opts = append(opts, redisbackend.WithPrefix(f.prefix))
	}
	b, err := redisbackend.New(cctx, client, opts...)
	if err != nil {
		client.Close()
		var cerr *redisbackend.ConfigError
		if errors.As(err, &cerr) { // name this tool's flag, not the Go option
			return reworded{cerr.Describe("--redis-config-check warn"), err}
		}
		return err
	}
	s.b, s.close = b, func() { b.Close(); client.Close() }
	s.client = client
	return nil
}

// checkMode reads the value of a backend's safety-check flag (refuse, warn
// or ignore).
func checkMode(flag, value string) (backend.CheckMode, error) {
	switch value {
	case "refuse":
		return backend.CheckRefuse, nil
	case "warn":
		return backend.CheckWarn, nil
	case "ignore":
		return backend.CheckSkip, nil
	}
	return 0, fmt.Errorf("%w: --%s %q: want refuse, warn or ignore", errUsage, flag, value)
}

// reworded is err with the message msg.
type reworded struct {
	msg string
	err error
}

func (r reworded) Error() string { return r.msg }
func (r reworded) Unwrap() error { return r.err }

// redisClient builds the client the flags describe: one server, Sentinel
// failover or Cluster. Its requests end at their context's deadline
// (ContextTimeoutEnabled), not at go-redis's own read timeout, so that
// --request-timeout and hold's short release bound hold.
func (f *connFlags) redisClient() (client redis.UniversalClient, addr string, err error) {
	if f.redisSentinelMaster != "" && f.redisCluster {
		return nil, "", fmt.Errorf("%w: --redis-sentinel-master and --redis-cluster exclude each other", errUsage)
	}
	tlsCfg, err := tlsConfig("redis", f.redisCACert, f.redisCert, f.redisKey, f.redisInsecure)
	if err != nil {
		return nil, "", err
	}
	if tlsCfg == nil && f.redisTLS {
		tlsCfg = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	if strings.Contains(f.redisAddr, "://") {
		if f.redisSentinelMaster != "" || f.redisCluster {
			return nil, "", fmt.Errorf("%w: give Sentinel and Cluster addresses as host:port lists, not a URL", errUsage)
		}
		opt, err := redis.ParseURL(f.redisAddr)
		if err != nil {
			return nil, "", fmt.Errorf("%w: --redis-addr: %w", errUsage, err)
		}
		if tlsCfg != nil {
			tlsCfg.ServerName = opt.TLSConfig.ServerName
			opt.TLSConfig = tlsCfg
		}
		if f.redisUser != "" {
			opt.Username = f.redisUser
		}
		if f.redisPassword != "" {
			opt.Password = f.redisPassword
		}
		if f.redisDB != 0 {
			opt.DB = f.redisDB
		}
		opt.ContextTimeoutEnabled = true
		return redis.NewClient(opt), opt.Addr, nil
	}
	addrs := strings.Split(f.redisAddr, ",")
	switch {
	case f.redisSentinelMaster != "":
		return redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName: f.redisSentinelMaster, SentinelAddrs: addrs, SentinelPassword: f.redisSentinelPass,
			Username: f.redisUser, Password: f.redisPassword, DB: f.redisDB, TLSConfig: tlsCfg, ContextTimeoutEnabled: true,
		}), "sentinels " + f.redisAddr, nil
	case f.redisCluster:
		if f.redisDB != 0 {
			return nil, "", fmt.Errorf("%w: Redis Cluster has only database 0", errUsage)
		}
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, Username: f.redisUser, Password: f.redisPassword, TLSConfig: tlsCfg, ContextTimeoutEnabled: true}), f.redisAddr, nil
	case len(addrs) > 1:
		return nil, "", fmt.Errorf("%w: --redis-addr lists %d addresses: add --redis-cluster or --redis-sentinel-master", errUsage, len(addrs))
	}
	return redis.NewClient(&redis.Options{Addr: addrs[0], Username: f.redisUser, Password: f.redisPassword, DB: f.redisDB, TLSConfig: tlsCfg, ContextTimeoutEnabled: true}), addrs[0], nil
}

// tlsConfig loads the TLS files of one backend, or returns nil when none is
// given. Every problem with a file is a usage error naming its flag.
func tlsConfig(name, caFile, certFile, keyFile string, insecure bool) (*tls.Config, error) {
	if caFile == "" && certFile == "" && keyFile == "" && !insecure {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: insecure}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("%w: --%s-cacert: %w", errUsage, name, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: --%s-cacert %s: no PEM certificate in the file", errUsage, name, caFile)
		}
		cfg.RootCAs = pool
	}
	if (certFile == "") != (keyFile == "") {
		return nil, fmt.Errorf("%w: --%s-cert and --%s-key go together", errUsage, name, name)
	}
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("%w: --%s-cert/--%s-key: %w", errUsage, name, name, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}
