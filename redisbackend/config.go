package redisbackend

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/fencing-go/fencing/backend"
)

// WithSafetyCheck sets what New does about a server configuration that can
// lose tokens (default backend.CheckRefuse; see backend's "Constructors and
// the safety check"). New reads CONFIG GET appendonly, appendfsync and
// maxmemory-policy from every node it can see (each primary and replica of
// a Cluster). Unsafe settings are:
//
//   - appendonly no: a restart loses the counters (RDB snapshots lose every
//     grant since the last save), so tokens can go back and be reissued;
//   - maxmemory-policy allkeys-*: eviction can drop a key's record at any
//     time, with the same effect. (volatile-* and noeviction are safe: the
//     records have no TTL.)
//
// Under CheckRefuse New fails with a *ConfigError wrapping
// backend.ErrUnsafeStore when a node is unsafe, and wrapping
// backend.ErrUnreachable when it cannot reach a node to check; CheckWarn
// logs each finding and goes on; CheckSkip sends nothing.
//
// appendfsync everysec or no is logged as a warning in every mode but
// CheckSkip and never refused: such a server normally keeps acknowledged
// grants through kill -9 of the process, but a crash of the machine loses
// about the last second or two (everysec) or more (no).
//
// Before reading a node's settings, New sends it a PING. When the server
// refuses the connection's credentials (WRONGPASS, NOAUTH) New fails with
// an error wrapping backend.ErrAuthRefused, and when the user may not even
// PING (NOPERM) with one wrapping backend.ErrPermissionDenied, in
// CheckRefuse and CheckWarn alike: no setting makes a wrong password work.
// Where only CONFIG is refused on a connection that works (disabled or
// renamed, as on many managed services, or NOPERM for an ACL user kept
// from admin commands), New logs a warning that it could not check and
// goes on, in every mode.
func WithSafetyCheck(mode backend.CheckMode) Option {
	return func(b *Backend) { b.checkMode = mode }
}

// configReport collects what the check found on every node.
type configReport struct {
	mu         sync.Mutex
	unsafe     []string // settings that can lose tokens
	caveats    []string // weaker but accepted durability
	unreadable []string // nodes whose CONFIG we may not read
}

func (r *configReport) add(list *[]string, format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	*list = append(*list, fmt.Sprintf(format, args...))
}

func (b *Backend) checkConfig(ctx context.Context) error {
	if err := b.checkMode.Validate(); err != nil {
		return fmt.Errorf("redisbackend: %w", err)
	}
	if b.checkMode == backend.CheckSkip {
		return nil
	}
	r := new(configReport)
	check := func(ctx context.Context, node string, c redis.Cmdable) error {
		return r.checkNode(ctx, node, c)
	}
	var err error
	switch c := b.client.(type) {
	case *redis.ClusterClient:
		err = c.ForEachShard(ctx, func(ctx context.Context, n *redis.Client) error {
			return check(ctx, n.Options().Addr, n)
		})
	case *redis.Ring:
		err = c.ForEachShard(ctx, func(ctx context.Context, n *redis.Client) error {
			return check(ctx, n.Options().Addr, n)
		})
	case *redis.Client:
		err = check(ctx, c.Options().Addr, c)
	default:
		err = check(ctx, fmt.Sprintf("%T", c), c)
	}
	for _, msg := range r.unreadable {
		b.logger.Warn("redisbackend: cannot check the redis configuration; make sure it keeps tokens (docs/redis.md)", "detail", msg)
	}
	for _, msg := range r.caveats {
		b.logger.Warn("redisbackend: redis durability caveat", "detail", msg)
	}
	if err != nil {
		if errors.Is(err, backend.ErrAuthRefused) || errors.Is(err, backend.ErrPermissionDenied) {
			return err
		}
		if aerr := authError("", err); aerr != nil {
			return aerr // a Cluster's own CLUSTER SHARDS, refused
		}
		if b.checkMode == backend.CheckRefuse {
			return &ConfigError{Err: err}
		}
		b.logger.Warn("redisbackend: cannot check the redis configuration", "error", err)
	}
	if len(r.unsafe) == 0 {
		return nil
	}
	if b.checkMode == backend.CheckRefuse {
		return &ConfigError{Unsafe: r.unsafe}
	}
	for _, msg := range r.unsafe {
		b.logger.Warn("redisbackend: unsafe redis configuration: tokens can go back", "detail", msg)
	}
	return nil
}

// ConfigError is New's error in backend.CheckRefuse when the check found a
// setting that can lose tokens (Unsafe; it then wraps
// backend.ErrUnsafeStore) or could not reach a node to check it (Err; it
// then wraps backend.ErrUnreachable). Its message names the Go
// option that runs anyway; a program with other knobs (the fencing CLI's
// --redis-config-check) reads the fields and says its own.
type ConfigError struct {
	// Unsafe lists each unsafe setting found, as "node: setting is ...:
	// why".
	Unsafe []string
	// Err is why a node could not be checked, when that is the error.
	Err error
}

// Error implements error.
func (e *ConfigError) Error() string {
	return e.Describe("WithSafetyCheck(backend.CheckWarn)")
}

// Describe is the error's message with optOut named as what runs anyway.
func (e *ConfigError) Describe(optOut string) string {
	if len(e.Unsafe) > 0 {
		return fmt.Sprintf("redisbackend: %v: %s (see docs/redis.md; %s runs anyway)", backend.ErrUnsafeStore, strings.Join(e.Unsafe, "; "), optOut)
	}
	return fmt.Sprintf("redisbackend: %v: check the redis configuration (or use %s): %v", backend.ErrUnreachable, optOut, e.Err)
}

// Unwrap returns backend.ErrUnsafeStore when a setting is unsafe, and
// backend.ErrUnreachable and Err when Err is set.
func (e *ConfigError) Unwrap() []error {
	var errs []error
	if len(e.Unsafe) > 0 {
		errs = append(errs, backend.ErrUnsafeStore)
	}
	if e.Err != nil {
		errs = append(errs, backend.ErrUnreachable, e.Err)
	}
	return errs
}

// authError returns err wrapped with backend.ErrAuthRefused or
// backend.ErrPermissionDenied when the
// server refused the connection's credentials or the user's permission,
// and nil otherwise. node, when not empty, names the server.
func authError(node string, err error) error {
	var sentinel error
	switch {
	case redis.IsAuthError(err):
		sentinel = backend.ErrAuthRefused
	case redis.IsPermissionError(err):
		sentinel = backend.ErrPermissionDenied
	default:
		return nil
	}
	if node != "" {
		return fmt.Errorf("redisbackend: %w: %s: %w", sentinel, node, err)
	}
	return fmt.Errorf("redisbackend: %w: %w", sentinel, err)
}

// checkNode reads one node's settings into r. It returns an error wrapping
// backend.ErrAuthRefused or backend.ErrPermissionDenied when the node refuses the connection (a PING
// first), and otherwise only errors that are not a refusal to run CONFIG
// (those it notes as unreadable).
func (r *configReport) checkNode(ctx context.Context, node string, c redis.Cmdable) error {
	if err := c.Ping(ctx).Err(); err != nil {
		if aerr := authError(node, err); aerr != nil {
			return aerr
		}
		return fmt.Errorf("%s: PING: %w", node, err)
	}
	get := func(param string) (string, bool, error) {
		m, err := c.ConfigGet(ctx, param).Result()
		var rerr redis.Error
		if errors.As(err, &rerr) && !redis.IsAuthError(err) { // CONFIG renamed, disabled or not permitted
			r.add(&r.unreadable, "%s: CONFIG GET %s: %v", node, param, err)
			return "", false, nil
		}
		if err != nil {
			return "", false, fmt.Errorf("%s: CONFIG GET %s: %w", node, param, err)
		}
		v, ok := m[param]
		if !ok {
			r.add(&r.unreadable, "%s: CONFIG GET %s returned nothing", node, param)
		}
		return v, ok, nil
	}
	aof, ok, err := get("appendonly")
	if err != nil {
		return err
	}
	if ok {
		if aof != "yes" {
			r.add(&r.unsafe, "%s: appendonly is %q: a restart loses tokens (RDB snapshots keep only what the last save saw), so tokens can go back", node, aof)
		} else {
			fsync, ok, err := get("appendfsync")
			if err != nil {
				return err
			}
			if ok && fsync != "always" {
				r.add(&r.caveats, "%s: appendfsync is %q: a crash of the machine can lose the last acknowledged grants (about a second with everysec); appendfsync always keeps every one", node, fsync)
			}
		}
	}
	policy, ok, err := get("maxmemory-policy")
	if err != nil {
		return err
	}
	if ok && strings.HasPrefix(policy, "allkeys-") {
		r.add(&r.unsafe, "%s: maxmemory-policy is %q: eviction can drop a key's token counter, so tokens can go back (use noeviction or a volatile-* policy)", node, policy)
	}
	return nil
}
