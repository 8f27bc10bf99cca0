package natsbackend

import (
	"context"

	"github.com/fencing-go/fencing/backend"
)

// Release ends the live lease leaseID on key: it writes the record with no
// holder in an update that names the revision it read. The token and the
// lease ID's hash stay, so that a resent release returns nil and the next
// grant mints a larger token.
func (b *Backend) Release(ctx context.Context, key, leaseID string) error {
	if err := b.ready(ctx, backend.CheckRelease(key, leaseID)); err != nil {
		return err
	}
	idHash := hashID(leaseID)
	for {
		s, ok, err := b.read(ctx, key)
		if err != nil {
			return err
		}
		if !ok || s.IDHash != idHash || s.Forced {
			return backend.ErrLeaseNotFound
		}
		if !s.Held {
			return nil // released already: a resent release
		}
		if !s.live {
			return backend.ErrLeaseExpired
		}
		err = b.free(ctx, key, s, false)
		if conflict(err) {
			continue
		}
		return err
	}
}

// free writes key's record, read as s, as released. A forced release also
// marks it forced, so that the lease's lock delay runs from when an
// observer sees the release. A conflict is returned as it is, for the
// caller to read again.
func (b *Backend) free(ctx context.Context, key string, s status, forced bool) error {
	n := s.record
	n.Held, n.Forced = false, forced
	if !forced {
		n.Delay = 0
	}
	sent := b.now()
	rev, err := b.kv.Update(ctx, kvKey(key), n.encode(), s.rev)
	if conflict(err) {
		return err
	}
	if err != nil {
		return writeErr("update "+kvKey(key), err)
	}
	b.observeWrite(key, rev, sent)
	return nil
}
