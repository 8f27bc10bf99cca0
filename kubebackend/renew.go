package kubebackend

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fencing-go/fencing/backend"
)

// Renew extends the live lease req.LeaseID from now: it rewrites the
// Lease's renewTime (and its ttl) in an update conditional on the state it
// read, so an observer sees the Lease change and starts timing it afresh.
func (b *Backend) Renew(ctx context.Context, req backend.Request) (backend.Lease, error) {
	if err := b.ready(ctx, backend.CheckRequest(req)); err != nil {
		return backend.Lease{}, err
	}
	name, idHash := LeaseName(req.Key), hashID(req.LeaseID)
	for {
		l, s, err := b.read(ctx, req.Key)
		if err != nil {
			return backend.Lease{}, err
		}
		if l == nil || !s.ours || s.idHash != idHash || !s.held() {
			return backend.Lease{}, backend.ErrLeaseNotFound
		}
		if !s.live {
			return backend.Lease{}, backend.ErrLeaseExpired
		}
		n := l.DeepCopy()
		sent := b.now()
		now := metav1.NewMicroTime(time.Now())
		secs := durationSeconds(req.Timeout + req.Margin)
		n.Spec.RenewTime = &now
		n.Spec.LeaseDurationSeconds = &secs
		setAnn(n, annTTL, msString(req.Timeout+req.Margin))
		setAnn(n, annMargin, msString(req.Margin))
		out, err := b.leases.Update(ctx, n, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			return backend.Lease{}, writeErr("update Lease "+name, err)
		}
		b.observeWrite(name, out.ResourceVersion, sent)
		return backend.Lease{
			Key: req.Key, LeaseID: req.LeaseID, Token: s.token,
			TTL: req.Timeout, Margin: req.Margin,
			ExpiresAt: time.Now().Add(req.Timeout + req.Margin),
		}, nil
	}
}
