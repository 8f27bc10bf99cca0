package etcdbackend

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
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
