package redisbackend

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/fencing-go/fencing/backend"
)

// Storage layout. Each key is one Redis hash without a TTL, deleted once
// the key has been idle for the retention (sweep.go),
//
//	<prefix>{<base64url(key)>}:token
//
// with the fields
//
//	token   highest token ever minted on the key (a decimal int64)
//	id      the most recent lease's ID
//	exp     when that lease ends: server TIME in microseconds since the epoch,
//	        or "r" and the release's time (server microseconds) once it was
//	        released (by its holder or by force), from which a reclaim counts
//	        the key idle (sweep.go)
//	ttl     its granted timeout in milliseconds (as sent)
//	margin  its margin in nanoseconds (as sent)
//	owner   its owner, the holder's public label ("" for none); it stays
//	        after the lease ends, until the next grant, but is reported
//	        only while the lease is live
//	delay   its lock delay in microseconds (0 for none)
//
// exp is also where a lock delay lives once the lease ended uncleanly.
// After an expiry the key is closed until exp + delay, which the scripts
// compute; after a forced release of a lease with a delay, exp is "f"
// followed by the delay's end (server microseconds), so that the grant
// script, which reads token, id and exp, sees the delay without a fourth
// field. A forced release without a delay writes "r" and the time, as a
// release by the holder does, and a release by the holder never leaves a delay. Any exp
// that is not a number marks the lease released. The record has no TTL,
// so nothing expires it before its delay ends; a reclaim counts its idle
// time from the delay's end. The floor (floor.go) outlives the records.
//
// Released is a value of exp rather than a field of its own so that every
// script but a resent grant and Inspect reads at most three fields (the
// grant script a fourth, delay, only when a lease is live or expired,
// where the delay counts): each field an HMGET returns adds to the server's time
// (docs/benchmarks.md, Redis).
// A record written before this layout (a field rel, "1" once released)
// reads correctly except that a lease released then reads as live until
// its exp passes: never two live leases, a later grant only waits longer.
//
// and a release publishes on the key's channel, in the same hash slot:
//
//	<prefix>{<base64url(key)>}:free
//
// A key's line of waiters (queue.go) is two sorted sets in the same slot,
//
//	<prefix>{<base64url(key)>}:line  waiter IDs by join sequence (1, 2, ...)
//	<prefix>{<base64url(key)>}:due   the same IDs by when their entry ends
//	                                 (server TIME in microseconds)
//
// which expire (PEXPIRE) when their last entry does, and each waiter's
// turn is published on its own channel, named after the SHA1 of its ID
// (an ID is a credential, and channel names are public to PUBSUB):
//
//	<prefix>{<base64url(key)>}:turn:<hex sha1(waiter ID)>

const (
	recordSuffix  = "}:token"
	channelSuffix = "}:free"
	lineSuffix    = "}:line"
	dueSuffix     = "}:due"
	turnSuffix    = "}:turn:"
)

var keyEncoding = base64.RawURLEncoding

// RedisKey returns the name of the Redis hash that holds key's record, for
// operators and tests. The hash's field "token" is the key's highest token.
func (b *Backend) RedisKey(key string) string { return b.name(key, recordSuffix) }

// channel returns the name of the channel a release of key publishes on.
func (b *Backend) channel(key string) string { return b.name(key, channelSuffix) }

func (b *Backend) name(key, suffix string) string {
	n, _ := b.names(key, suffix, "")
	return n
}

// names returns key's names with suffix1 and suffix2 (empty: none), made
// in one allocation.
func (b *Backend) names(key, suffix1, suffix2 string) (string, string) {
	var sb strings.Builder
	base := len(b.prefix) + 1 + keyEncoding.EncodedLen(len(key))
	if suffix2 == "" {
		sb.Grow(base + len(suffix1))
		b.writeName(&sb, key, suffix1)
		return sb.String(), ""
	}
	sb.Grow(base + len(suffix1) + base + len(suffix2))
	b.writeName(&sb, key, suffix1)
	b.writeName(&sb, key, suffix2)
	both := sb.String()
	n1 := base + len(suffix1)
	return both[:n1], both[n1:]
}

// writeName writes key's name with suffix to sb, allocating nothing of its
// own: the key is encoded in pieces of a multiple of 3 bytes, whose
// unpadded encodings joined are the whole key's.
func (b *Backend) writeName(sb *strings.Builder, key, suffix string) {
	sb.WriteString(b.prefix)
	sb.WriteByte('{')
	var src [48]byte
	var dst [64]byte
	for key != "" {
		n := copy(src[:], key)
		keyEncoding.Encode(dst[:], src[:n])
		sb.Write(dst[:keyEncoding.EncodedLen(n)])
		key = key[n:]
	}
	sb.WriteString(suffix)
}

// decodeKey returns the key whose record is the Redis key rk, or false
// when rk is not a record of this backend.
func (b *Backend) decodeKey(rk string) (string, bool) {
	enc, ok := strings.CutPrefix(rk, b.prefix+"{")
	if !ok {
		return "", false
	}
	if enc, ok = strings.CutSuffix(enc, recordSuffix); !ok {
		return "", false
	}
	key, err := keyEncoding.DecodeString(enc)
	if err != nil || len(key) == 0 {
		return "", false
	}
	return string(key), true
}

// errBadReply marks a script reply this package cannot read.
var errBadReply = errors.New("redisbackend: unexpected script reply")

// statusError turns a script's status into the contract's verdict (nil for
// "ok"): the sentinel alone, or a *backend.HeldError.
func statusError(reply []any) error {
	if len(reply) == 0 {
		return fmt.Errorf("%w: %w: empty", backend.ErrOutcomeUnknown, errBadReply)
	}
	switch reply[0] {
	case "ok":
		return nil
	case "held":
		var left int64
		if len(reply) == 2 {
			left, _ = replyInt(reply[1])
		}
		return &backend.HeldError{Remaining: time.Duration(max(left, 0)) * time.Microsecond}
	case "delayed":
		var left int64
		if len(reply) == 2 {
			left, _ = replyInt(reply[1])
		}
		return &backend.HeldError{Remaining: time.Duration(max(left, 0)) * time.Microsecond, Delayed: true}
	case "expired":
		return backend.ErrLeaseExpired
	case "notfound", "released":
		return backend.ErrLeaseNotFound
	case "exhausted":
		return backend.ErrTokenSpaceExhausted
	default:
		return fmt.Errorf("%w: %w: status %v", backend.ErrOutcomeUnknown, errBadReply, reply[0])
	}
}

// parseLease reads {"ok", token, exp µs} (a new lease or renewal: its ttl
// and margin are the request's, as the script stored them) or {"ok",
// token, exp µs, ttl ms, margin ns} (the lease a resent grant was given).
func parseLease(reply []any, key, leaseID string, ttl, margin time.Duration) (backend.Lease, error) {
	if len(reply) != 3 && len(reply) != 5 {
		return backend.Lease{}, fmt.Errorf("%w: %d values, want 3 or 5", errBadReply, len(reply))
	}
	var n [4]int64
	if err := parseInts(n[:len(reply)-1], reply[1:]); err != nil {
		return backend.Lease{}, err
	}
	if len(reply) == 5 {
		ttl, margin = time.Duration(n[2])*time.Millisecond, time.Duration(n[3])
	}
	return backend.Lease{
		Key:       key,
		LeaseID:   leaseID,
		Token:     uint64(n[0]),
		TTL:       ttl,
		Margin:    margin,
		ExpiresAt: time.UnixMicro(n[1]),
	}, nil
}

// parseState reads the inspect script's reply: {} for a key never leased,
// else {live, token, max token, exp µs, µs left, lock delay µs, delay's end
// µs, µs of delay left, owner}.
func parseState(reply []any) (backend.KeyState, error) {
	if len(reply) == 0 {
		return backend.KeyState{}, nil
	}
	if len(reply) != 9 {
		return backend.KeyState{}, fmt.Errorf("%w: %d values, want 9", errBadReply, len(reply))
	}
	owner, ok := reply[8].(string)
	if !ok {
		return backend.KeyState{}, fmt.Errorf("%w: owner is a %T", errBadReply, reply[8])
	}
	var n [8]int64
	if err := parseInts(n[:], reply[:8]); err != nil {
		return backend.KeyState{}, err
	}
	live, tok, maxTok, exp, left, delay, until, delayLeft := n[0], n[1], n[2], n[3], n[4], n[5], n[6], n[7]
	st := backend.KeyState{MaxToken: uint64(maxTok)}
	if live == 1 {
		st.Live, st.Token = true, uint64(tok)
		st.ExpiresAt = time.UnixMicro(exp)
		st.Remaining = time.Duration(left) * time.Microsecond
		st.Owner = owner
		st.LockDelay = time.Duration(delay) * time.Microsecond
	} else if until > 0 {
		st.DelayedUntil = time.UnixMicro(until)
		st.DelayRemaining = time.Duration(delayLeft) * time.Microsecond
	}
	return st, nil
}

// parseInts reads a reply's integer fields into n: tokens, times,
// durations, all non-negative Redis integers (so a token fits an int64
// too). The scripts reply with a Lua number (an integer reply) what they
// computed below 2^53, and with the stored string what they read.
func parseInts(n []int64, fields []any) error {
	for i, f := range fields {
		v, err := replyInt(f)
		if err != nil || v < 0 {
			return fmt.Errorf("%w %v: field %d is not a non-negative integer", errBadReply, fields, i+1)
		}
		n[i] = v
	}
	return nil
}

// replyInt reads an integer reply or a decimal string reply.
func replyInt(v any) (int64, error) {
	switch v := v.(type) {
	case int64:
		return v, nil
	case string:
		return strconv.ParseInt(v, 10, 64)
	}
	return 0, fmt.Errorf("%w: %T", errBadReply, v)
}
