package kubebackend

import (
	"context"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fencing-go/fencing/backend"
)

// Release ends the live lease leaseID on key: it empties holderIdentity (as
// client-go's ReleaseOnCancel does) in an update conditional on the state it
// read. The token and the lease ID's hash stay, so that a resent release
// returns nil and the next grant mints a larger token.
func (b *Backend) Release(ctx context.Context, key, leaseID string) error {
	if err := b.ready(ctx, backend.CheckRelease(key, leaseID)); err != nil {
		return err
	}
	idHash := hashID(leaseID)
	for {
		l, s, err := b.read(ctx, key)
		if err != nil {
			return err
		}
		if l == nil || !s.ours || s.idHash != idHash || s.forced {
			return backend.ErrLeaseNotFound
		}
		if !s.held() {
			return nil // released already: a resent release
		}
		if !s.live {
			return backend.ErrLeaseExpired
		}
		err = b.free(ctx, l, false, s)
		if apierrors.IsConflict(err) {
			continue
		}
		return err
	}
}

// free writes l as released: no holder. A forced release (s is what l
// said) also marks the Lease forced, so the lease's lock delay runs from
// when an observer sees the release. A conflict is returned as it is, for
// the caller to read again.
func (b *Backend) free(ctx context.Context, l *coordinationv1.Lease, forced bool, s status) error {
	n := l.DeepCopy()
	empty := ""
	n.Spec.HolderIdentity = &empty
	setAnn(n, annHolder, "")
	if forced {
		setAnn(n, annForced, "true")
		if !s.ours {
			setAnn(n, annLockDelay, "") // another writer's lease has none
		}
	}
	sent := b.now()
	out, err := b.leases.Update(ctx, n, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) {
		return err
	}
	if err != nil {
		return writeErr("update Lease "+l.Name, err)
	}
	b.observeWrite(l.Name, out.ResourceVersion, sent)
	return nil
}
