package kubebackend

import (
	"context"
	"strconv"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fencing-go/fencing/backend"
)

// Grant takes a lease on req.Key. It reads the key's Lease (creating an
// empty one the first time, so that every grant replaces a stored state)
// and, when no lease is live, writes the new holder in one update that
// carries the read's resourceVersion: the API server applies it only if
// the Lease is unchanged since the read, so of racing grants one wins. The
// token is the replaced state's resourceVersion (see nextToken).
func (b *Backend) Grant(ctx context.Context, req backend.Request) (backend.Lease, error) {
	if err := b.ready(ctx, backend.CheckRequest(req)); err != nil {
		return backend.Lease{}, err
	}
	name, idHash := LeaseName(req.Key), hashID(req.LeaseID)
	for {
		l, s, err := b.read(ctx, req.Key)
		if err != nil {
			return backend.Lease{}, err
		}
		if l == nil {
			if err := b.create(ctx, req.Key); err != nil {
				return backend.Lease{}, err
			}
			continue
		}
		if s.ours && s.idHash == idHash { // a resent grant
			switch {
			case s.live:
				return b.lease(req.Key, req.LeaseID, s), nil
			case s.held():
				return backend.Lease{}, backend.ErrLeaseExpired
			default:
				return backend.Lease{}, backend.ErrLeaseNotFound
			}
		}
		if s.live || s.delayed {
			return backend.Lease{}, heldError(s)
		}
		token := nextToken(s.record)
		if token == 0 { // a uint64 cannot wrap here in practice; keep the check
			return backend.Lease{}, backend.ErrTokenSpaceExhausted
		}
		holder := req.Owner
		if holder == "" {
			holder = "fencing/" + idHash[:16]
		}
		n := l.DeepCopy()
		markManaged(n, req.Key)
		sent := b.now()
		now := metav1.NewMicroTime(time.Now())
		secs := durationSeconds(req.Timeout + req.Margin)
		trans := s.trans
		if s.acquired != nil {
			trans++ // a holder before this one, as client-go counts
		}
		n.Spec.HolderIdentity = &holder
		n.Spec.LeaseDurationSeconds = &secs
		n.Spec.AcquireTime = &now
		n.Spec.RenewTime = &now
		n.Spec.LeaseTransitions = &trans
		setAnn(n, annToken, strconv.FormatUint(token, 10))
		setAnn(n, annLeaseID, idHash)
		setAnn(n, annHolder, holder)
		setAnn(n, annOwner, req.Owner)
		setAnn(n, annTTL, msString(req.Timeout+req.Margin))
		setAnn(n, annMargin, msString(req.Margin))
		setAnn(n, annLockDelay, msStringOrEmpty(req.LockDelay))
		setAnn(n, annForced, "")
		out, err := b.leases.Update(ctx, n, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			continue // another write came first: look again
		}
		if err != nil {
			return backend.Lease{}, writeErr("update Lease "+name, err)
		}
		b.observeWrite(name, out.ResourceVersion, sent)
		return backend.Lease{
			Key: req.Key, LeaseID: req.LeaseID, Token: token,
			TTL: req.Timeout, Margin: req.Margin,
			ExpiresAt: time.Now().Add(req.Timeout + req.Margin),
		}, nil
	}
}

// create makes key's Lease, empty, the first time the key is leased.
func (b *Backend) create(ctx context.Context, key string) error {
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: LeaseName(key)}}
	markManaged(l, key)
	_, err := b.leases.Create(ctx, l, metav1.CreateOptions{})
	if err == nil || apierrors.IsAlreadyExists(err) {
		return nil
	}
	return writeErr("create Lease "+l.Name, err)
}

// lease is the backend.Lease that s, a live lease of ours, stands for.
func (b *Backend) lease(key, id string, s status) backend.Lease {
	return backend.Lease{
		Key: key, LeaseID: id, Token: s.token,
		TTL: s.ttl - s.margin, Margin: s.margin,
		ExpiresAt: time.Now().Add(s.remaining),
	}
}

// heldError is the refusal of a grant while s is live or delayed.
func heldError(s status) error {
	if s.delayed {
		return &backend.HeldError{Remaining: s.remaining, Delayed: true}
	}
	return &backend.HeldError{Remaining: s.remaining + s.delay}
}

func msStringOrEmpty(d time.Duration) string {
	if d <= 0 {
		return ""
	}
	return msString(d)
}
