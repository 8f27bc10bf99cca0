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
	leaseRecord    = "l" // exists while a lease is live; attached to its etcd lease
	idRecord       = "i" // ID of the most recent lease
	releasedRecord = "r" // ID of the most recent released lease
)

// encoding names user keys in etcd keys. base64url contains no '/', so the
// records of two user keys can never share an etcd key or interleave.
var encoding = base64.RawURLEncoding

// keys are the etcd keys of one user key.
type keys struct {
	lease    string
	id       string
	released string
}

func (b *Backend) keys(key string) keys {
	base := b.prefix + encoding.EncodeToString([]byte(key)) + "/"
	return keys{lease: base + leaseRecord, id: base + idRecord, released: base + releasedRecord}
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

// seconds returns timeout + margin rounded up to whole seconds. The caller
// has checked the sum with backend.CheckDurations, so it cannot overflow.
func seconds(timeout, margin time.Duration) int64 {
	d := timeout + margin
	return int64((d + time.Second - 1) / time.Second)
}

// state is what a linearizable read of a key's records shows.
type state struct {
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

// read reads a key's three records in one linearizable request.
func (b *Backend) read(ctx context.Context, k keys) (state, error) {
	return b.readAt(ctx, k, 0)
}

// readAt reads a key's three records as they were at revision rev (0: now),
// in one linearizable range read. A rev that compaction has discarded gets
// an error wrapping rpctypes.ErrCompacted.
func (b *Backend) readAt(ctx context.Context, k keys, rev int64) (state, error) {
	// The three etcd keys are the only ones from the ID record to the
	// released record: they share the key's base, which no other key's
	// records begin with.
	resp, err := b.kv.Get(ctx, k.id, clientv3.WithRange(k.released+"\x00"), clientv3.WithRev(rev))
	if err != nil {
		return state{}, fmt.Errorf("etcdbackend: read: %w", err)
	}
	var st state
	for _, kv := range resp.Kvs {
		switch string(kv.Key) {
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
