package fencing

import (
	"context"
	"fmt"
	"time"
)

// Resume takes back, as a *Held, a lease that an earlier process (or this
// one) was holding: a holder that restarts need not wait out its own lease.
//
// What to save: the Lease's Key, ID, Token, TTL and Margin, once the lease
// is granted and before the token is used (for example the Lease encoded
// with encoding/json, in a file only the holder can read: the ID is the
// credential that renews and releases the lease). ExpiresAt and Deadline are
// not used: a Deadline's monotonic reading means nothing to another process.
//
// Resume renews the lease at once, for TTL plus Margin (WithMargin gives
// another margin), and that renewal is what proves the lease live: it
// succeeds only while the store still counts the lease with that ID on Key,
// so a Resume that comes too late fails and changes nothing. On success the
// Held has the saved Token, a Deadline counted from the renewal's send, and
// is kept renewed as Hold's is; WithMaxHold counts from the Resume. The
// store alone decides, so a new process with a new backend client resumes
// on every backend: no backend keeps a lease's state in its client.
//
// A lease whose time ran out gets an error wrapping ErrLeaseExpired; an ID
// that is not Key's current lease (released, superseded, reclaimed, another
// key's, never granted) gets ErrLeaseNotFound; neither changes anything. A
// zero Token gets ErrLeaseNotFound before any request. A renewed lease whose
// token is not the saved Token (a saved Lease pieced together from two
// leases) is released, and the error wraps ErrLeaseNotFound. When the
// renewal's outcome stays unknown the error is an *OutcomeError: Resume
// again with the same Lease.
//
// The owner and the lock delay are the grant's, kept by every renewal:
// WithOwner and WithLockDelay get an error wrapping ErrInvalidOption. On a
// store with observed expiry (backend.ObservedExpiry) a backend that has
// just started counts a lease live until it has seen it unchanged for its
// TTL and margin, so a Resume there takes back a lease whose holder stopped
// renewing unless another process has taken the key meanwhile.
func (c *Coordinator) Resume(ctx context.Context, lease Lease, opts ...HoldOption) (*Held, error) {
	cfg, err := c.resumeConfig(lease, opts)
	if err != nil {
		return nil, opError("resume", lease.Key, err)
	}
	req, err := c.request(lease.Key, lease.ID, cfg.grantTimeout(lease.TTL), []time.Duration{cfg.margin})
	if err != nil {
		return nil, opError("resume", lease.Key, err)
	}
	renewed, err := c.send(ctx, opRenew, req, time.Time{})
	if err != nil {
		return nil, fmt.Errorf("resume: %w", err) // renew "key": the renewal's error, or an *OutcomeError
	}
	if renewed.Token != lease.Token {
		// Nobody holds the lease the renewal extended: free the key now
		// rather than at its expiry. The lease ends then anyway.
		rctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), renewed.Deadline)
		defer cancel()
		_ = c.Release(rctx, lease.Key, lease.ID)
		return nil, opError("resume", lease.Key, fmt.Errorf("%w: the lease has token %d, not the saved %d (released)", ErrLeaseNotFound, renewed.Token, lease.Token))
	}
	return c.startHeld(ctx, renewed, lease.TTL, cfg), nil
}

// resumeConfig applies opts for resuming lease, whose margin is kept
// unless WithMargin gives another.
func (c *Coordinator) resumeConfig(lease Lease, opts []HoldOption) (holdConfig, error) {
	cfg, err := c.holdConfig(lease.TTL, opts)
	if err != nil {
		return holdConfig{}, err
	}
	if cfg.grantOnly != "" {
		return holdConfig{}, fmt.Errorf("%w: %s: a resumed lease keeps its grant's", ErrInvalidOption, cfg.grantOnly)
	}
	if lease.Token == 0 {
		return holdConfig{}, fmt.Errorf("%w: no token: save the Lease's Token with its ID", ErrLeaseNotFound)
	}
	if !cfg.marginSet {
		cfg.margin = lease.Margin
	}
	cfg.owner = "" // the grant's, which a renewal keeps and does not report
	return cfg, nil
}
