package natsbackend

import (
	"context"
	"time"

	"github.com/fencing-go/fencing/backend"
)

// Grant takes a lease on req.Key. It reads the key's entry from the
// stream's leader (creating an empty one the first time, so that every
// grant replaces a stored state) and, when no lease is live, writes the new
// holder with an update that names the revision it read: the stream stores
// it only if the entry is unchanged since, so of racing grants one wins.
// The token is the replaced state's revision (see nextToken).
func (b *Backend) Grant(ctx context.Context, req backend.Request) (backend.Lease, error) {
	if err := b.ready(ctx, backend.CheckRequest(req)); err != nil {
		return backend.Lease{}, err
	}
	idHash := hashID(req.LeaseID)
	for {
		s, ok, err := b.read(ctx, req.Key)
		if err != nil {
			return backend.Lease{}, err
		}
		if !ok {
			if err := b.create(ctx, req.Key); err != nil {
				return backend.Lease{}, err
			}
			continue
		}
		if s.IDHash == idHash { // a resent grant
			switch {
			case s.live:
				return lease(req.Key, req.LeaseID, s), nil
			case s.Held:
				return backend.Lease{}, backend.ErrLeaseExpired
			default:
				return backend.Lease{}, backend.ErrLeaseNotFound
			}
		}
		if s.live || s.delayed {
			return backend.Lease{}, heldError(s)
		}
		token := nextToken(s.record)
		if token == 0 {
			return backend.Lease{}, backend.ErrTokenSpaceExhausted
		}
		n := record{
			IDHash: idHash, Token: token, Held: true, Owner: req.Owner,
			TTL: ms(req.Timeout + req.Margin), Margin: ms(req.Margin), Delay: ms(req.LockDelay),
		}
		sent := b.now()
		rev, err := b.kv.Update(ctx, kvKey(req.Key), n.encode(), s.rev)
		if conflict(err) {
			continue // another write came first: look again
		}
		if err != nil {
			return backend.Lease{}, writeErr("update "+kvKey(req.Key), err)
		}
		b.observeWrite(req.Key, rev, sent)
		return backend.Lease{
			Key: req.Key, LeaseID: req.LeaseID, Token: token,
			TTL: req.Timeout, Margin: req.Margin,
			ExpiresAt: time.Now().Add(req.Timeout + req.Margin),
		}, nil
	}
}

// create makes key's entry, empty, the first time the key is leased.
func (b *Backend) create(ctx context.Context, key string) error {
	_, err := b.kv.Create(ctx, kvKey(key), nil)
	if err == nil || conflict(err) {
		return nil
	}
	return writeErr("create "+kvKey(key), err)
}

// lease is the backend.Lease that s, a live lease, stands for.
func lease(key, id string, s status) backend.Lease {
	return backend.Lease{
		Key: key, LeaseID: id, Token: s.Token,
		TTL: s.ttl() - s.margin(), Margin: s.margin(),
		ExpiresAt: time.Now().Add(s.remaining),
	}
}

// heldError is the refusal of a grant while s is live or delayed.
func heldError(s status) error {
	if s.delayed {
		return &backend.HeldError{Remaining: s.remaining, Delayed: true}
	}
	return &backend.HeldError{Remaining: s.remaining + s.delay()}
}
