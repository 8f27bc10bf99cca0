package natsbackend

import (
	"context"
	"time"

	"github.com/fencing-go/fencing/backend"
)

// Renew extends the live lease req.LeaseID from now: it writes the record
// again (with the new ttl) in an update that names the revision it read, so
// every observer sees a new revision and starts timing it afresh.
func (b *Backend) Renew(ctx context.Context, req backend.Request) (backend.Lease, error) {
	if err := b.ready(ctx, backend.CheckRequest(req)); err != nil {
		return backend.Lease{}, err
	}
	idHash := hashID(req.LeaseID)
	for {
		s, ok, err := b.read(ctx, req.Key)
		if err != nil {
			return backend.Lease{}, err
		}
		if !ok || s.IDHash != idHash || !s.Held {
			return backend.Lease{}, backend.ErrLeaseNotFound
		}
		if !s.live {
			return backend.Lease{}, backend.ErrLeaseExpired
		}
		n := s.record
		n.TTL, n.Margin = ms(req.Timeout+req.Margin), ms(req.Margin)
		sent := b.now()
		rev, err := b.kv.Update(ctx, kvKey(req.Key), n.encode(), s.rev)
		if conflict(err) {
			continue
		}
		if err != nil {
			return backend.Lease{}, writeErr("update "+kvKey(req.Key), err)
		}
		b.observeWrite(req.Key, rev, sent)
		return backend.Lease{
			Key: req.Key, LeaseID: req.LeaseID, Token: s.Token,
			TTL: req.Timeout, Margin: req.Margin,
			ExpiresAt: time.Now().Add(req.Timeout + req.Margin),
		}, nil
	}
}
