// Package etcdbackend is a fencing backend on etcd v3. The etcd cluster is
// the coordinator: its leader's lease timers decide expiry and its revision
// counter mints tokens; the client's clock decides nothing.
//
// # Records
//
// Each user key k has three etcd keys under the prefix (default "fencing/"),
// named by the unpadded base64url encoding of k, which contains no '/', so no
// two user keys can share or split records whatever bytes they hold:
//
//	<prefix><base64url(k)>/l   the lease key: exists while a lease is live,
//	                           attached to that lease's own etcd lease
//	<prefix><base64url(k)>/i   the ID of the most recent lease (no etcd lease)
//	<prefix><base64url(k)>/r   the ID of the most recent released lease
//
// The two lease-less records let the backend tell the holder of the most
// recent lease "expired" from "released" from "never held". They stay after
// the lease ends, like the memory backend's per-key record: about 2 × (key
// length + 60) bytes per key ever leased.
//
// # Tokens
//
// A lease's token is the CreateRevision of its lease key: the etcd revision
// of the transaction that created it (etcd's own documentation calls it a
// fencing token). Revisions are global to the cluster, strictly increase,
// survive restarts and are never reset by compaction, so each grant's token is
// larger than every earlier token on the key. Tokens are not dense: they skip
// by every write to the cluster in between, and they are shared by no two
// keys. A renewal that moves the lease key to a new etcd lease overwrites the
// key, which keeps its CreateRevision, so the token stays.
//
// # Time
//
// etcd lease TTLs are whole seconds, the server raises a TTL below its minimum
// (ceil(1.5 × election timeout), 1s at the least) and refreshes every lease
// when a new leader takes over. So the backend asks for
// ceil(timeout + margin) seconds, and the TTL it reports in backend.Lease is
// the granted TTL minus the margin: never less than the timeout asked for, and
// a lower bound of the lease's real length. Lease.ExpiresAt is an estimate:
// the local time just before the request was sent plus the granted TTL. The
// leader's timer started later, so the real expiry is no earlier, up to clock
// rate differences.
//
// When a lease's TTL runs out, the leader revokes it (checking about every
// 500ms), and the revoke deletes the lease key. Until then the key still
// exists and etcd counts the lease as live: Token reports it live and no one
// else can be granted the key, but Renew rejects it with ErrLeaseExpired
// (etcd refuses to renew an expired lease) and changes nothing.
//
// # Round trips
//
// Grant costs two RPCs when the key is free (LeaseGrant, then one Txn that
// creates the lease key only if it does not exist), three when it is held
// (the unused etcd lease is revoked at once). Should the fresh etcd lease run
// out before the Txn arrives (a stall longer than its TTL), the Txn fails as a
// whole and Grant tries again with another, up to three times. Token is one
// linearizable read.
// Renew is a read and a KeepAliveOnce; a renewal that asks for a different
// number of seconds moves the key to a new etcd lease (four more RPCs).
// Release is one Txn guarded by the lease's identity plus the revoke of its
// etcd lease.
//
// # Ambiguity
//
// A mutating request whose response is lost (a context ending mid-call, an
// unavailable or timed-out server) returns an error wrapping both
// backend.ErrOutcomeUnknown and the original error. The lease ID is stored in
// the records, so a Grant retried with the same ID returns the lease if the
// first one created it and grants it otherwise; retried Renews and Releases
// are equally safe. An etcd lease granted for a request whose outcome was lost
// is never reused and expires on its own after its TTL.
package etcdbackend

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fencing-go/fencing/backend"
)

// DefaultPrefix is the prefix of every etcd key the backend writes, unless
// WithPrefix gives another.
const DefaultPrefix = "fencing/"

// Backend is the etcd backend. It is safe for concurrent use. The zero value
// is not usable; call New.
type Backend struct {
	cli    *clientv3.Client
	prefix string
	closed atomic.Bool
}

// Option configures a Backend.
type Option func(*Backend)

// WithPrefix sets the prefix of the backend's etcd keys (default
// DefaultPrefix). Backends with different prefixes share nothing, as long as
// neither prefix is the other followed by the base64url encoding of a key
// (end prefixes with a '/' to be sure).
func WithPrefix(prefix string) Option {
	return func(b *Backend) { b.prefix = prefix }
}

// ErrNilClient is returned by New when the client is nil.
var ErrNilClient = errors.New("etcdbackend: nil client")

// New returns a backend that keeps its leases in etcd through cli. The
// backend never closes cli: the client, its endpoints, TLS and auth are the
// caller's.
func New(cli *clientv3.Client, opts ...Option) (*Backend, error) {
	if cli == nil {
		return nil, ErrNilClient
	}
	b := &Backend{cli: cli, prefix: DefaultPrefix}
	for _, o := range opts {
		o(b)
	}
	return b, nil
}

// keys are the etcd keys of one user key.
type keys struct {
	lease    string // exists while a lease is live; attached to its etcd lease
	id       string // ID of the most recent lease
	released string // ID of the most recent released lease
}

func (b *Backend) keys(key string) keys {
	base := b.prefix + base64.RawURLEncoding.EncodeToString([]byte(key)) + "/"
	return keys{lease: base + "l", id: base + "i", released: base + "r"}
}

// meta is the value of a lease key.
type meta struct {
	asked   int64 // seconds asked for: ceil(timeout + margin)
	granted int64 // seconds granted by etcd
	margin  time.Duration
	leaseID string
}

const metaVersion = "v1"

func (m meta) encode() string {
	return metaVersion + ":" + strconv.FormatInt(m.asked, 10) + ":" + strconv.FormatInt(m.granted, 10) + ":" +
		strconv.FormatInt(int64(m.margin), 10) + ":" + m.leaseID
}

func decodeMeta(v []byte) (meta, error) {
	parts := strings.SplitN(string(v), ":", 5)
	if len(parts) != 5 || parts[0] != metaVersion {
		return meta{}, fmt.Errorf("etcdbackend: malformed lease record %q", v)
	}
	var m meta
	var err1, err2, err3 error
	m.asked, err1 = strconv.ParseInt(parts[1], 10, 64)
	m.granted, err2 = strconv.ParseInt(parts[2], 10, 64)
	margin, err3 := strconv.ParseInt(parts[3], 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return meta{}, fmt.Errorf("etcdbackend: malformed lease record %q: %w", v, err)
	}
	m.margin = time.Duration(margin)
	m.leaseID = parts[4]
	return m, nil
}

// seconds returns timeout + margin rounded up to whole seconds. The caller
// has checked the sum with backend.CheckDurations, so it cannot overflow.
func seconds(timeout, margin time.Duration) int64 {
	d := timeout + margin
	return int64((d + time.Second - 1) / time.Second)
}

func (b *Backend) ready(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if b.closed.Load() {
		return backend.ErrClosed
	}
	return nil
}

// ambiguous reports whether err, from a request that may have reached the
// server, leaves its outcome unknown.
func ambiguous(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	switch code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.Unknown, codes.Aborted, codes.Internal:
		return true
	}
	return false
}

func code(err error) codes.Code {
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		return ee.Code()
	}
	if s, ok := status.FromError(err); ok {
		return s.Code()
	}
	return codes.Unknown
}

// mutationError wraps the error of a mutating request.
func mutationError(op string, err error) error {
	if ambiguous(err) {
		return fmt.Errorf("%w: etcd %s: %w", backend.ErrOutcomeUnknown, op, err)
	}
	return fmt.Errorf("etcd %s: %w", op, err)
}

// revoke revokes an etcd lease that the backend no longer needs. A failure
// is not reported: the lease has no keys, or keys that are ours to lose, and
// ends by itself after its TTL.
func (b *Backend) revoke(ctx context.Context, id clientv3.LeaseID) {
	_, _ = b.cli.Revoke(ctx, id)
}

// Grant implements backend.Backend.
func (b *Backend) Grant(ctx context.Context, req backend.Request) (backend.Lease, error) {
	if err := b.ready(ctx); err != nil {
		return backend.Lease{}, err
	}
	if err := backend.CheckRequest(req); err != nil {
		return backend.Lease{}, err
	}
	ctx = clientv3.WithRequireLeader(ctx)
	// A Txn that names an etcd lease which ran out before the Txn arrived
	// fails as a whole, so trying again with a fresh etcd lease is safe.
	const attempts = 3
	for attempt := 1; ; attempt++ {
		l, err := b.grant(ctx, req)
		if attempt < attempts && errors.Is(err, rpctypes.ErrLeaseNotFound) && ctx.Err() == nil {
			continue
		}
		return l, err
	}
}

// grant makes one attempt at Grant: LeaseGrant, then one Txn.
func (b *Backend) grant(ctx context.Context, req backend.Request) (backend.Lease, error) {
	k := b.keys(req.Key)
	asked := seconds(req.Timeout, req.Margin)
	sent := time.Now()
	lg, err := b.cli.Grant(ctx, asked)
	if err != nil {
		// Nothing refers to the etcd lease, if one was made: the grant did
		// not happen.
		return backend.Lease{}, fmt.Errorf("etcd lease grant: %w", err)
	}
	m := meta{asked: asked, granted: lg.TTL, margin: req.Margin, leaseID: req.LeaseID}
	resp, err := b.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(k.lease), "=", 0)).
		Then(clientv3.OpTxn(
			// The key is free. Is this a resent grant whose lease has ended?
			[]clientv3.Cmp{clientv3.Compare(clientv3.Value(k.id), "=", req.LeaseID)},
			[]clientv3.Op{clientv3.OpGet(k.released)},
			[]clientv3.Op{
				clientv3.OpPut(k.lease, m.encode(), clientv3.WithLease(lg.ID)),
				clientv3.OpPut(k.id, req.LeaseID),
			})).
		Else(clientv3.OpGet(k.lease)).
		Commit()
	if err != nil {
		if !ambiguous(err) {
			b.revoke(ctx, lg.ID)
		}
		return backend.Lease{}, mutationError("grant txn", err)
	}
	if resp.Succeeded {
		inner := resp.Responses[0].GetResponseTxn()
		if !inner.Succeeded {
			return lease(req.Key, m, resp.Header.Revision, sent), nil
		}
		b.revoke(ctx, lg.ID)
		if rel := inner.Responses[0].GetResponseRange().Kvs; len(rel) == 1 && string(rel[0].Value) == req.LeaseID {
			return backend.Lease{}, fmt.Errorf("%w: lease was granted and then released", backend.ErrLeaseNotFound)
		}
		return backend.Lease{}, fmt.Errorf("%w: lease was granted and has expired", backend.ErrLeaseExpired)
	}
	b.revoke(ctx, lg.ID)
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) != 1 {
		return backend.Lease{}, fmt.Errorf("etcdbackend: grant txn: lease key missing from response")
	}
	held, err := decodeMeta(kvs[0].Value)
	if err != nil {
		return backend.Lease{}, err
	}
	if held.leaseID != req.LeaseID {
		return backend.Lease{}, fmt.Errorf("%w: key %q", backend.ErrLeaseHeld, req.Key)
	}
	return b.resentGrant(ctx, req.Key, held, kvs[0])
}

// resentGrant answers a grant resent while its lease key exists: the lease
// unchanged, with ExpiresAt estimated from the etcd lease's remaining TTL.
func (b *Backend) resentGrant(ctx context.Context, key string, m meta, kv *mvccpb.KeyValue) (backend.Lease, error) {
	now := time.Now()
	ttl, err := b.cli.TimeToLive(ctx, clientv3.LeaseID(kv.Lease))
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return backend.Lease{}, fmt.Errorf("%w: lease was granted and has expired", backend.ErrLeaseExpired)
	}
	if err != nil {
		// The lease is ours, but its expiry is unknown: resending learns it.
		return backend.Lease{}, fmt.Errorf("%w: etcd lease time-to-live: %w", backend.ErrOutcomeUnknown, err)
	}
	if ttl.TTL < 0 {
		return backend.Lease{}, fmt.Errorf("%w: lease was granted and has expired", backend.ErrLeaseExpired)
	}
	l := lease(key, m, kv.CreateRevision, now)
	l.ExpiresAt = now.Add(time.Duration(ttl.TTL) * time.Second)
	return l, nil
}

// lease returns the record of a lease granted or renewed to m's terms; sent
// is the local time just before the etcd lease was granted or renewed.
func lease(key string, m meta, token int64, sent time.Time) backend.Lease {
	granted := time.Duration(m.granted) * time.Second
	return backend.Lease{
		Key:       key,
		LeaseID:   m.leaseID,
		Token:     uint64(token),
		TTL:       granted - m.margin,
		Margin:    m.margin,
		ExpiresAt: sent.Add(granted),
	}
}

// state is what a linearizable read of a key's records shows.
type state struct {
	lease    *mvccpb.KeyValue // nil when no lease key
	meta     meta             // decoded lease key value
	id       string           // most recent lease ID ("" if none)
	released string           // most recent released lease ID ("" if none)
}

// read reads a key's three records in one linearizable request.
func (b *Backend) read(ctx context.Context, k keys) (state, error) {
	resp, err := b.cli.Txn(ctx).Then(clientv3.OpGet(k.lease), clientv3.OpGet(k.id), clientv3.OpGet(k.released)).Commit()
	if err != nil {
		return state{}, fmt.Errorf("etcd read: %w", err)
	}
	var st state
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 1 {
		st.lease = kvs[0]
		if st.meta, err = decodeMeta(kvs[0].Value); err != nil {
			return state{}, err
		}
	}
	if kvs := resp.Responses[1].GetResponseRange().Kvs; len(kvs) == 1 {
		st.id = string(kvs[0].Value)
	}
	if kvs := resp.Responses[2].GetResponseRange().Kvs; len(kvs) == 1 {
		st.released = string(kvs[0].Value)
	}
	return st, nil
}

// holderError returns the error Renew and Release report for leaseID when
// st shows no lease key of leaseID's.
func holderError(key, leaseID string, st state) error {
	if st.lease == nil && st.id == leaseID && st.released != leaseID {
		return fmt.Errorf("%w: key %q", backend.ErrLeaseExpired, key)
	}
	return fmt.Errorf("%w: key %q", backend.ErrLeaseNotFound, key)
}

// Renew implements backend.Backend.
func (b *Backend) Renew(ctx context.Context, req backend.Request) (backend.Lease, error) {
	if err := b.ready(ctx); err != nil {
		return backend.Lease{}, err
	}
	if err := backend.CheckRequest(req); err != nil {
		return backend.Lease{}, err
	}
	ctx = clientv3.WithRequireLeader(ctx)
	k := b.keys(req.Key)
	want := seconds(req.Timeout, req.Margin)
	// A concurrent renewal of the same lease may move the key to another
	// etcd lease under us; then look again, a few times.
	const attempts = 3
	for range attempts {
		st, err := b.read(ctx, k)
		if err != nil {
			return backend.Lease{}, err
		}
		if st.lease == nil || st.meta.leaseID != req.LeaseID {
			return backend.Lease{}, holderError(req.Key, req.LeaseID, st)
		}
		var l backend.Lease
		if want == st.meta.asked {
			l, err = b.keepAlive(ctx, req, st)
		} else {
			l, err = b.relet(ctx, req, k, st, want)
		}
		if !errors.Is(err, errMoved) {
			return l, err
		}
	}
	return backend.Lease{}, fmt.Errorf("%w: etcd renew: lease moved by concurrent renewals", backend.ErrOutcomeUnknown)
}

// errMoved means the lease key left the etcd lease a renewal read.
var errMoved = errors.New("etcdbackend: lease key moved")

// keepAlive renews st's etcd lease as it is.
func (b *Backend) keepAlive(ctx context.Context, req backend.Request, st state) (backend.Lease, error) {
	sent := time.Now()
	ka, err := b.cli.KeepAliveOnce(ctx, clientv3.LeaseID(st.lease.Lease))
	if err == nil {
		m := st.meta
		m.granted, m.margin = ka.TTL, req.Margin
		return lease(req.Key, m, st.lease.CreateRevision, sent), nil
	}
	if !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return backend.Lease{}, mutationError("keep-alive", err)
	}
	// The etcd lease ran out: etcd answers only once its revoke (which
	// deleted the lease key) is applied. Unless a concurrent renewal moved
	// the key, or a release took it, the lease expired.
	return backend.Lease{}, b.afterLost(ctx, req, st)
}

// afterLost tells why the etcd lease st read is gone.
func (b *Backend) afterLost(ctx context.Context, req backend.Request, st state) error {
	now, err := b.read(ctx, b.keys(req.Key))
	if err != nil {
		return err
	}
	if now.lease != nil && now.meta.leaseID == req.LeaseID && now.lease.CreateRevision == st.lease.CreateRevision &&
		now.lease.Lease != st.lease.Lease {
		return errMoved
	}
	if now.lease != nil && now.meta.leaseID == req.LeaseID {
		return fmt.Errorf("%w: key %q", backend.ErrLeaseExpired, req.Key)
	}
	return holderError(req.Key, req.LeaseID, now)
}

// relet moves st's lease key to a new etcd lease of want seconds, keeping its
// token, and then revokes the old etcd lease.
func (b *Backend) relet(ctx context.Context, req backend.Request, k keys, st state, want int64) (backend.Lease, error) {
	sent := time.Now()
	lg, err := b.cli.Grant(ctx, want)
	if err != nil {
		return backend.Lease{}, fmt.Errorf("etcd lease grant: %w", err)
	}
	old := clientv3.LeaseID(st.lease.Lease)
	m := meta{asked: want, granted: lg.TTL, margin: req.Margin, leaseID: req.LeaseID}
	resp, err := b.cli.Txn(ctx).
		If(
			clientv3.Compare(clientv3.CreateRevision(k.lease), "=", st.lease.CreateRevision),
			clientv3.Compare(clientv3.LeaseValue(k.lease), "=", old),
		).
		Then(clientv3.OpPut(k.lease, m.encode(), clientv3.WithLease(lg.ID))).
		Commit()
	if err != nil {
		if !ambiguous(err) {
			b.revoke(ctx, lg.ID)
		}
		return backend.Lease{}, mutationError("renew txn", err)
	}
	if !resp.Succeeded {
		b.revoke(ctx, lg.ID)
		return backend.Lease{}, b.afterLost(ctx, req, st)
	}
	// The key now lives on the new etcd lease. That renewal is valid only if
	// the old etcd lease had not run out: etcd never renews an expired lease,
	// and leases never come back, so a successful keep-alive now proves the
	// old lease was live when the Txn moved the key.
	if _, err := b.cli.KeepAliveOnce(ctx, old); err != nil {
		if !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return backend.Lease{}, mutationError("keep-alive", err)
		}
		// The old lease ran out, perhaps before the Txn: undo by ending the
		// lease as if it had expired, and report that.
		_, derr := b.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.LeaseValue(k.lease), "=", lg.ID)).
			Then(clientv3.OpDelete(k.lease)).
			Commit()
		b.revoke(ctx, lg.ID)
		if derr != nil {
			return backend.Lease{}, mutationError("renew undo txn", derr)
		}
		return backend.Lease{}, fmt.Errorf("%w: key %q", backend.ErrLeaseExpired, req.Key)
	}
	b.revoke(ctx, old)
	return lease(req.Key, m, st.lease.CreateRevision, sent), nil
}

// Release implements backend.Backend.
func (b *Backend) Release(ctx context.Context, key, leaseID string) error {
	if err := b.ready(ctx); err != nil {
		return err
	}
	if err := backend.CheckRelease(key, leaseID); err != nil {
		return err
	}
	ctx = clientv3.WithRequireLeader(ctx)
	k := b.keys(key)
	// The most recent lease is leaseID's and its lease key exists, so the key
	// is leaseID's: delete it. A stale or resent release of an older lease
	// fails the first comparison and cannot touch a newer holder's key.
	resp, err := b.cli.Txn(ctx).
		If(
			clientv3.Compare(clientv3.Value(k.id), "=", leaseID),
			clientv3.Compare(clientv3.CreateRevision(k.lease), "!=", 0),
		).
		Then(clientv3.OpDelete(k.lease, clientv3.WithPrevKV()), clientv3.OpPut(k.released, leaseID)).
		Else(clientv3.OpGet(k.id), clientv3.OpGet(k.released)).
		Commit()
	if err != nil {
		return mutationError("release txn", err)
	}
	if resp.Succeeded {
		if prev := resp.Responses[0].GetResponseDeleteRange().PrevKvs; len(prev) == 1 && prev[0].Lease != 0 {
			b.revoke(ctx, clientv3.LeaseID(prev[0].Lease))
		}
		return nil
	}
	var st state
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 1 {
		st.id = string(kvs[0].Value)
	}
	if kvs := resp.Responses[1].GetResponseRange().Kvs; len(kvs) == 1 {
		st.released = string(kvs[0].Value)
	}
	if st.id == leaseID && st.released == leaseID {
		return nil // released already: a resent release is harmless
	}
	return holderError(key, leaseID, st)
}

// Token implements backend.Backend with one linearizable read. A lease whose
// TTL ran out but which etcd has not yet revoked is reported live.
func (b *Backend) Token(ctx context.Context, key string) (uint64, bool, error) {
	if err := b.ready(ctx); err != nil {
		return 0, false, err
	}
	if err := backend.CheckKey(key); err != nil {
		return 0, false, err
	}
	resp, err := b.cli.Get(ctx, b.keys(key).lease, clientv3.WithKeysOnly())
	if err != nil {
		return 0, false, fmt.Errorf("etcd get: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return 0, false, nil
	}
	return uint64(resp.Kvs[0].CreateRevision), true, nil
}

// Close implements backend.Backend. Later calls return backend.ErrClosed.
// It does not close the etcd client, and the backend runs no goroutines.
func (b *Backend) Close() error {
	b.closed.Store(true)
	return nil
}
