package kubebackend

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fencing-go/fencing/backend"
)

// Inspect reports key's state as this backend observes it: ExpiresAt and
// DelayedUntil are estimates on the local clock (see the package
// documentation). A Lease held by another writer (a LeaderElector) is live
// with token zero and its holderIdentity as Owner.
func (b *Backend) Inspect(ctx context.Context, key string) (backend.KeyState, error) {
	if err := b.ready(ctx, backend.CheckKey(key)); err != nil {
		return backend.KeyState{}, err
	}
	_, s, err := b.read(ctx, key)
	if err != nil {
		return backend.KeyState{}, err
	}
	return keyState(s), nil
}

// Observation is how the backend has timed the current state of a key's
// Lease (see the package documentation): what a KeyState's Remaining and
// ExpiresAt are estimated from.
type Observation struct {
	// Unchanged is how long the Lease has been seen in its current state:
	// by this backend, or by a process that shares its ObservationLog.
	Unchanged time.Duration
	// Expiry is how long a holder's Lease must be seen unchanged before it
	// counts as ended: the lease's ttl + margin, or a LeaderElector's
	// leaseDurationSeconds; zero when the Lease names no holder.
	Expiry time.Duration
}

// InspectObserved is Inspect, with how the backend has timed the state it
// read: what it knows, where KeyState's times are what it estimates.
func (b *Backend) InspectObserved(ctx context.Context, key string) (backend.KeyState, Observation, error) {
	if err := b.ready(ctx, backend.CheckKey(key)); err != nil {
		return backend.KeyState{}, Observation{}, err
	}
	_, s, err := b.read(ctx, key)
	if err != nil {
		return backend.KeyState{}, Observation{}, err
	}
	o := Observation{Unchanged: s.since}
	if s.held() {
		o.Expiry = s.ttl
	}
	return keyState(s), o, nil
}

func keyState(s status) backend.KeyState {
	ks := backend.KeyState{MaxToken: s.token}
	now := time.Now()
	switch {
	case s.live:
		ks.Live, ks.Remaining, ks.ExpiresAt = true, s.remaining, now.Add(s.remaining)
		if s.ours {
			ks.Token, ks.Owner, ks.LockDelay = s.token, s.owner, s.delay
		} else {
			ks.Owner = s.holder
		}
	case s.delayed:
		ks.DelayRemaining, ks.DelayedUntil = s.remaining, now.Add(s.remaining)
	}
	return ks
}

// ForceRelease ends key's live lease, whoever holds it (a LeaderElector's
// too), by emptying holderIdentity in an update conditional on the state it
// read. A lease with a lock delay leaves the key closed for that delay, from
// when each observer first sees the release.
func (b *Backend) ForceRelease(ctx context.Context, key string) (bool, error) {
	if err := b.ready(ctx, backend.CheckKey(key)); err != nil {
		return false, err
	}
	for {
		l, s, err := b.read(ctx, key)
		if err != nil || !s.live {
			return false, err
		}
		err = b.free(ctx, l, true, s)
		if apierrors.IsConflict(err) {
			continue
		}
		return err == nil, err
	}
}

// List pages through the Leases a fencing lease used (they carry the label
// fencing-go.github.io/managed), in the API server's order; cursor is its
// continue token (one the API server refuses gets an error wrapping
// backend.ErrInvalidCursor). A page may hold fewer than limit keys when prefix leaves
// some out.
func (b *Backend) List(ctx context.Context, prefix, cursor string, limit int) ([]backend.KeyInfo, string, error) {
	if err := b.ready(ctx, nil); err != nil {
		return nil, "", err
	}
	if limit <= 0 {
		limit = 100
	}
	list, err := b.leases.List(ctx, metav1.ListOptions{
		LabelSelector: managedLabel + "=true",
		Limit:         int64(limit),
		Continue:      cursor,
	})
	if err != nil {
		if cursor != "" && apierrors.IsBadRequest(err) {
			return nil, "", fmt.Errorf("kubebackend: list Leases: %w: %w", backend.ErrInvalidCursor, err)
		}
		return nil, "", readErr("list Leases", err)
	}
	now := b.now()
	var page []backend.KeyInfo
	for i := range list.Items {
		l := &list.Items[i]
		key, ok := storedKey(l)
		if !ok || !strings.HasPrefix(key, prefix) {
			continue
		}
		r, err := parse(l, key)
		if err != nil {
			continue
		}
		s := judge(r, b.observe(l.Name, r.rv, now), now)
		page = append(page, backend.KeyInfo{Key: key, State: keyState(s)})
	}
	return page, list.Continue, nil
}

// storedKey is the key a Lease stores.
func storedKey(l *coordinationv1.Lease) (string, bool) {
	k, err := base64.StdEncoding.DecodeString(l.Annotations[annKey])
	return string(k), err == nil && len(k) > 0
}
