package kubebackend

import (
	"context"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fencing-go/fencing/backend"
)

// read gets key's Lease (a quorum read: no resourceVersion is given) and
// judges it. A missing Lease is (nil, zero status, nil).
func (b *Backend) read(ctx context.Context, key string) (*coordinationv1.Lease, status, error) {
	name := LeaseName(key)
	l, err := b.leases.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		b.forget(name)
		return nil, status{}, nil
	}
	if err != nil {
		return nil, status{}, readErr("get Lease "+name, err)
	}
	now := b.now()
	r, err := parse(l, key)
	if err != nil {
		return nil, status{}, err
	}
	return l, judge(r, b.observe(name, r.rv, now), now), nil
}

// Token returns the token of key's live lease. A Lease that another writer
// holds (a LeaderElector) is live with token zero, which no check matches.
func (b *Backend) Token(ctx context.Context, key string) (uint64, bool, error) {
	if err := b.ready(ctx, backend.CheckKey(key)); err != nil {
		return 0, false, err
	}
	_, s, err := b.read(ctx, key)
	if err != nil || !s.live {
		return 0, false, err
	}
	if !s.ours {
		return 0, true, nil
	}
	return s.token, true, nil
}
