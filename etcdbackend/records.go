package etcdbackend

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/fencing-go/fencing/backend"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The storage layout: which etcd keys a user key has and how their values
// are encoded. The package documentation describes it for operators.

// Record names: the suffix of each etcd key of a user key.
const (
	delayRecord    = "d" // exists while a lease with a lock delay is live, and during the delay; attached to an etcd lease of its own
	idRecord       = "i" // ID of the most recent lease
	leaseRecord    = "l" // exists while a lease is live; attached to its etcd lease
	releasedRecord = "r" // ID of the most recent released lease
	sinceRecord    = "s" // the idle mark: when a sweep first saw the key idle (see retention.go)
	lineRecord     = "w" // the line of waiters (see queue.go): one etcd key per entry under "<base>w/"
)

// The record names sort as d < i < l < r < s < w: a key's four lease records
// are the only etcd keys from its delay record to its released record, and
// its idle mark and its line's entries come after them.

// encoding names user keys in etcd keys. base64url contains no '/', so the
// records of two user keys can never share an etcd key or interleave.
var encoding = base64.RawURLEncoding

// keys are the etcd keys of one user key.
type keys struct {
	delay    string
	id       string
	lease    string
	released string
	line     string // the prefix of the line's entries
}

func (b *Backend) keys(key string) keys {
	base := b.prefix + encoding.EncodeToString([]byte(key)) + "/"
	return keys{
		delay:    base + delayRecord,
		id:       base + idRecord,
		lease:    base + leaseRecord,
		released: base + releasedRecord,
		line:     base + lineRecord + "/",
	}
}

// splitRecord splits an etcd key under prefix into the encoded user key and
// the record name. ok is false for an etcd key that is not one of ours.
func splitRecord(prefix, etcdKey string) (encoded, record string, ok bool) {
	rest, found := strings.CutPrefix(etcdKey, prefix)
	if !found {
		return "", "", false
	}
	encoded, record, found = strings.Cut(rest, "/")
	return encoded, record, found && encoded != "" && !strings.Contains(record, "/")
}

// encodedPrefix returns the longest prefix that the encoding of every key
// beginning with the user prefix p shares: each base64 character holds 6
// bits, so the first len(p)*8/6 characters of p's encoding are fixed by p.
func encodedPrefix(p string) string {
	return encoding.EncodeToString([]byte(p))[:len(p)*8/6]
}

// meta is the value of a lease key.
type meta struct {
	asked   int64 // seconds asked for: ceil(timeout + margin)
	granted int64 // seconds granted by etcd
	margin  time.Duration
	leaseID string
	owner   string // the holder's public label; "" for none
}

// A lease key's value is "v1:<asked>:<granted>:<margin ns>:<lease ID>" for
// a lease without an owner, and "v2:<asked>:<granted>:<margin ns>:<owner
// length>:<owner><lease ID>" for one with an owner: the length says where
// the owner, which may hold ':', ends.
const (
	metaVersion      = "v1"
	metaVersionOwner = "v2"
)

func (m meta) encode() string {
	head := strconv.FormatInt(m.asked, 10) + ":" + strconv.FormatInt(m.granted, 10) + ":" +
		strconv.FormatInt(int64(m.margin), 10) + ":"
	if m.owner == "" {
		return metaVersion + ":" + head + m.leaseID
	}
	return metaVersionOwner + ":" + head + strconv.Itoa(len(m.owner)) + ":" + m.owner + m.leaseID
}

// errMalformed is returned for a lease record the backend did not write. The
// message leaves the value out: it holds a lease ID, a holder's credential.
var errMalformed = errors.New("etcdbackend: malformed lease record")

func decodeMeta(v []byte) (meta, error) {
	parts := strings.SplitN(string(v), ":", 6)
	var rest string
	var ownerLen int
	switch {
	case len(parts) >= 5 && parts[0] == metaVersion:
		rest = strings.Join(parts[4:], ":")
	case len(parts) == 6 && parts[0] == metaVersionOwner:
		n, err := strconv.Atoi(parts[4])
		if err != nil || n < 0 || n > len(parts[5]) {
			return meta{}, fmt.Errorf("%w (%d bytes): bad owner length", errMalformed, len(v))
		}
		rest, ownerLen = parts[5], n
	default:
		return meta{}, fmt.Errorf("%w (%d bytes)", errMalformed, len(v))
	}
	var m meta
	var err1, err2, err3 error
	m.asked, err1 = strconv.ParseInt(parts[1], 10, 64)
	m.granted, err2 = strconv.ParseInt(parts[2], 10, 64)
	margin, err3 := strconv.ParseInt(parts[3], 10, 64)
	if errors.Join(err1, err2, err3) != nil {
		return meta{}, fmt.Errorf("%w (%d bytes): bad number", errMalformed, len(v))
	}
	m.margin = time.Duration(margin)
	m.owner, m.leaseID = rest[:ownerLen], rest[ownerLen:]
	return m, nil
}

// The lock delay (backend.Request.LockDelay).
//
// etcd deletes a lease key when its etcd lease runs out, and a Txn cannot
// compare times, so the delay is a record of its own, the delay record,
// attached to an etcd lease of its own that outlives the lease key's by the
// delay:
//
//   - the grant of a lease with a delay of d creates the delay record in its
//     Txn, on an etcd lease of the lease key's granted seconds plus
//     ceil(d) seconds, obtained after the lease key's (so its timer starts
//     later and ends at least ceil(d) after the lease key's);
//   - every renewal renews the two etcd leases on one keep-alive stream, the
//     delay record's first: a renewal that fails there renews neither, one
//     that fails after it leaves the delay record only longer-lived;
//   - a release by the holder deletes the delay record with the lease key,
//     in its Txn: no delay;
//   - a forced release deletes the lease key and puts the delay record on a
//     fresh etcd lease of ceil(d) seconds, renewed once after the Txn so
//     that the delay runs from then;
//   - a lease that expires leaves the delay record, which etcd deletes
//     ceil(d) seconds after the lease key, or later.
//
// Every grant's Txn compares that neither the lease key nor the delay
// record exists. The delay record exists only beside the live lease it
// belongs to, or alone during a delay: a grant cannot create a lease key
// while one exists, and only the holder's renewals and release, and a
// forced release of that lease, write it. The delay is therefore whole
// seconds on etcd's clock, at least the one asked for and at most a
// second longer (plus the up to 500ms the leader takes to notice an etcd
// lease ran out, as for the lease key), and at least etcd's minimum TTL
// after a forced release.

// delay is the value of a delay record.
type delay struct {
	asked   int64 // seconds asked for its etcd lease
	granted int64 // seconds granted by etcd
	d       time.Duration
}

// A delay record's value is "v1:<asked>:<granted>:<delay ns>".
const delayVersion = "v1"

func (d delay) encode() string {
	return delayVersion + ":" + strconv.FormatInt(d.asked, 10) + ":" + strconv.FormatInt(d.granted, 10) + ":" +
		strconv.FormatInt(int64(d.d), 10)
}

func decodeDelay(v []byte) (delay, error) {
	parts := strings.Split(string(v), ":")
	if len(parts) != 4 || parts[0] != delayVersion {
		return delay{}, fmt.Errorf("%w (%d bytes)", errMalformedDelay, len(v))
	}
	var d delay
	var err1, err2, err3 error
	d.asked, err1 = strconv.ParseInt(parts[1], 10, 64)
	d.granted, err2 = strconv.ParseInt(parts[2], 10, 64)
	ns, err3 := strconv.ParseInt(parts[3], 10, 64)
	if errors.Join(err1, err2, err3) != nil || ns < 0 {
		return delay{}, fmt.Errorf("%w (%d bytes): bad number", errMalformedDelay, len(v))
	}
	d.d = time.Duration(ns)
	return d, nil
}

// errMalformedDelay is returned for a delay record the backend did not write.
var errMalformedDelay = errors.New("etcdbackend: malformed lock delay record")

// delaySeconds returns d rounded up to whole seconds.
func delaySeconds(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}

// leaseSeconds returns the seconds asked for and granted to the etcd lease
// of a lease key, a delay record or a line entry under prefix, from its
// value.
func leaseSeconds(prefix string, kv *mvccpb.KeyValue) (asked, granted int64, err error) {
	_, record, _ := strings.Cut(strings.TrimPrefix(string(kv.Key), prefix), "/")
	switch {
	case record == delayRecord:
		d, err := decodeDelay(kv.Value)
		return d.asked, d.granted, err
	case strings.HasPrefix(record, lineRecord+"/"):
		e, err := decodeEntry(kv.Value)
		return e.asked, e.granted, err
	}
	m, err := decodeMeta(kv.Value)
	return m.asked, m.granted, err
}

// seconds returns timeout + margin rounded up to whole seconds. The caller
// has checked the sum with backend.CheckDurations, so it cannot overflow.
func seconds(timeout, margin time.Duration) int64 {
	d := timeout + margin
	return int64((d + time.Second - 1) / time.Second)
}

// state is what a linearizable read of a key's records shows.
type state struct {
	delay    *mvccpb.KeyValue // nil when no delay record
	delayed  delay            // decoded delay record value
	lease    *mvccpb.KeyValue // nil when no lease key
	meta     meta             // decoded lease key value
	id       *mvccpb.KeyValue // the ID record; nil if never leased
	released string           // most recent released lease ID ("" if none)
}

// recentID returns the most recent lease ID ("" if none).
func (st state) recentID() string {
	if st.id == nil {
		return ""
	}
	return string(st.id.Value)
}

// read reads a key's four records in one linearizable request.
func (b *Backend) read(ctx context.Context, k keys) (state, error) {
	return b.readAt(ctx, k, 0)
}

// readAt reads a key's four records as they were at revision rev (0: now),
// in one linearizable range read. A rev that compaction has discarded gets
// an error wrapping rpctypes.ErrCompacted.
func (b *Backend) readAt(ctx context.Context, k keys, rev int64) (state, error) {
	// The four etcd keys are the only ones from the delay record to the
	// released record: they share the key's base, which no other key's
	// records begin with, and the line's entries sort after them.
	resp, err := b.kv.Get(ctx, k.delay, clientv3.WithRange(k.released+"\x00"), clientv3.WithRev(rev))
	if err != nil {
		return state{}, readError(err)
	}
	return decodeState(k, resp.Kvs)
}

// readError wraps the error of a read of a key's records.
func readError(err error) error { return fmt.Errorf("etcdbackend: read: %w", err) }

// decodeState decodes a key's records, as a range read from its delay
// record to its released record returned them.
func decodeState(k keys, kvs []*mvccpb.KeyValue) (state, error) {
	var st state
	var err error
	for _, kv := range kvs {
		switch string(kv.Key) {
		case k.delay:
			st.delay = kv
			if st.delayed, err = decodeDelay(kv.Value); err != nil {
				return state{}, err
			}
		case k.lease:
			st.lease = kv
			if st.meta, err = decodeMeta(kv.Value); err != nil {
				return state{}, err
			}
		case k.id:
			st.id = kv
		case k.released:
			st.released = string(kv.Value)
		}
	}
	return st, nil
}

// holderError returns the error Renew and Release report for leaseID when
// st shows no lease key of leaseID's.
func holderError(leaseID string, st state) error {
	if st.lease == nil && st.recentID() == leaseID && st.released != leaseID {
		return backend.ErrLeaseExpired
	}
	return backend.ErrLeaseNotFound
}
