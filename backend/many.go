package backend

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
)

// MultiGranter is implemented by a backend that can take leases on several
// keys in one atomic step of its store: package fencing's GrantMany,
// HoldMany and LockMany use it, and report errors.ErrUnsupported on a
// backend without it (they never fall back to one grant per key, which
// could leave some keys taken and others not).
type MultiGranter interface {
	// GrantMany applies Grant to every request of reqs in one atomic step:
	// either every key gets its lease, or nothing changes. Each key keeps
	// its own token sequence (each lease's token is larger than every
	// earlier token on its key), and each lease is then an ordinary lease,
	// renewed and released with Renew and Release.
	//
	// The rules are Grant's, key by key: a request whose key's most recent
	// lease has its ID gets that lease back unchanged while it is live (so
	// a resent GrantMany returns the same leases and mints nothing), and
	// ErrLeaseExpired or ErrLeaseNotFound once it has ended; a key with
	// another live lease, or in a lock delay, refuses. When any key
	// refuses, GrantMany changes nothing and returns a *ManyError naming
	// the first refusing request in key order (the byte order of keys),
	// wrapping the verdict Grant would have given (a *HeldError,
	// ErrLeaseExpired, ErrLeaseNotFound, ErrTokenSpaceExhausted).
	//
	// The leases come back in the order of reqs. Arguments follow
	// CheckMany; a backend that needs more of its keys (Redis Cluster: one
	// hash slot) says so in its documentation and refuses others with
	// ErrInvalidKey before any request.
	//
	// A store takes the keys in key order (the byte order of keys), so two
	// grants over overlapping sets never wait on each other in a cycle.
	GrantMany(ctx context.Context, reqs []Request) ([]Lease, error)
}

// MaxKeys is the most keys one GrantMany takes.
const MaxKeys = 64

// ManyError is GrantMany's error for a verdict on one of its keys: nothing
// was granted. errors.Is and errors.As see through it to the verdict (a
// *HeldError, ErrLeaseExpired...).
type ManyError struct {
	// Index is the refusing request's index in GrantMany's reqs.
	Index int
	// Err is the verdict on that request's key, as Grant gives it.
	Err error
}

// Error names the request by its index; package fencing names its key.
func (e *ManyError) Error() string { return "request " + strconv.Itoa(e.Index) + ": " + e.Err.Error() }

// Unwrap returns Err.
func (e *ManyError) Unwrap() error { return e.Err }

// ErrDuplicateKey is wrapped by CheckMany's error for a key given twice. It
// wraps ErrInvalidKey.
var ErrDuplicateKey = fmt.Errorf("%w: duplicate key", ErrInvalidKey)

// CheckMany applies CheckRequest to each request of a GrantMany and returns
// an error wrapping ErrInvalidKey unless there are 1 to MaxKeys requests on
// distinct keys. An error about one request is a *ManyError with its index.
func CheckMany(reqs []Request) error {
	if len(reqs) == 0 {
		return fmt.Errorf("%w: no keys", ErrInvalidKey)
	}
	if len(reqs) > MaxKeys {
		return fmt.Errorf("%w: %d keys, the maximum is %d", ErrInvalidKey, len(reqs), MaxKeys)
	}
	for i, r := range reqs {
		if err := CheckRequest(r); err != nil {
			return &ManyError{Index: i, Err: err}
		}
	}
	order := KeyOrder(reqs)
	for j := 1; j < len(order); j++ {
		if reqs[order[j]].Key == reqs[order[j-1]].Key {
			return &ManyError{Index: order[j], Err: ErrDuplicateKey}
		}
	}
	return nil
}

// KeyOrder returns the indexes of reqs sorted by key (byte order): the
// order in which a store takes GrantMany's keys, and in which it reports
// the first refusal.
func KeyOrder(reqs []Request) []int {
	order := make([]int, len(reqs))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(reqs[a].Key, reqs[b].Key) })
	return order
}

// ManyIndex returns the index of the request a GrantMany error is about,
// and false when it is about none (bad arguments as a whole, a store
// error).
func ManyIndex(err error) (int, bool) {
	var me *ManyError
	if errors.As(err, &me) {
		return me.Index, true
	}
	return 0, false
}
