package kubebackend

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The Lease's own fields are client-go's leader-election record, so that
// kubectl and a LeaderElector read it as usual: holderIdentity (the owner,
// or "fencing/" and a prefix of the lease ID's hash when the grant gave
// none; empty once released), leaseDurationSeconds (ttl + margin rounded up
// to seconds), acquireTime, renewTime (rewritten by every renewal, which is
// what an observer sees change) and leaseTransitions. What fencing needs
// besides lives in annotations.
const (
	annPrefix = "fencing-go.github.io/"
	// annKey is the key, base64 (standard, padded): keys are any bytes.
	annKey = annPrefix + "key"
	// annToken is the most recent lease's token, in decimal.
	annToken = annPrefix + "token"
	// annLeaseID is the hex SHA-256 of the most recent fencing lease's ID:
	// never the ID, which is a credential and Leases are readable.
	annLeaseID = annPrefix + "lease-id-sha256"
	// annHolder is the holderIdentity that lease wrote; a holderIdentity
	// that differs means another writer (a LeaderElector) took the Lease.
	annHolder = annPrefix + "holder"
	// annOwner is the grant's owner (backend.Request.Owner), when given.
	annOwner = annPrefix + "owner"
	// annTTL is the lease's ttl + margin in milliseconds: how long an
	// observer must see the Lease unchanged before it counts as expired.
	annTTL = annPrefix + "ttl-ms"
	// annMargin is the lease's margin in milliseconds, to report it.
	annMargin = annPrefix + "margin-ms"
	// annLockDelay is the lease's lock delay in milliseconds, when it has
	// one; after a forced release, the delay that the release started.
	annLockDelay = annPrefix + "lock-delay-ms"
	// annForced marks a Lease that ForceRelease ended: its lock delay (if
	// any) runs from when an observer first sees it.
	annForced = annPrefix + "forced"
)

// managedLabel marks every Lease that a fencing lease used, for List.
const managedLabel = annPrefix + "managed"

// record is what a Lease says, parsed.
type record struct {
	rv       string
	rvNum    uint64
	holder   string // spec.holderIdentity
	ours     bool   // the most recent writer was a fencing lease
	idHash   string // its lease ID's hash (ours only)
	token    uint64 // its token; the largest ever minted on the key
	owner    string
	ttl      time.Duration // observed-expiry duration of the current holder
	margin   time.Duration
	delay    time.Duration // lock delay
	forced   bool
	acquired *metav1.MicroTime
	trans    int32
}

// held reports whether the Lease names a holder.
func (r record) held() bool { return r.holder != "" }

func hashID(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:])
}

// parse reads l, which must be the Lease of key.
func parse(l *coordinationv1.Lease, key string) (record, error) {
	a := l.Annotations
	if enc, ok := a[annKey]; ok {
		k, err := base64.StdEncoding.DecodeString(enc)
		if err != nil || string(k) != key {
			return record{}, fmt.Errorf("kubebackend: Lease %s holds another key (annotation %s is %q)", l.Name, annKey, enc)
		}
	} else if !verbatim(l.Name) {
		return record{}, fmt.Errorf("kubebackend: Lease %s has no %s annotation", l.Name, annKey)
	}
	r := record{rv: l.ResourceVersion, trans: 0}
	n, err := strconv.ParseUint(l.ResourceVersion, 10, 64)
	if err != nil {
		return record{}, fmt.Errorf("kubebackend: Lease %s: resourceVersion %q is not an integer (the backend needs etcd's)", l.Name, l.ResourceVersion)
	}
	r.rvNum = n
	if l.Spec.HolderIdentity != nil {
		r.holder = *l.Spec.HolderIdentity
	}
	if l.Spec.LeaseTransitions != nil {
		r.trans = *l.Spec.LeaseTransitions
	}
	r.acquired = l.Spec.AcquireTime
	if s, ok := a[annToken]; ok {
		if r.token, err = strconv.ParseUint(s, 10, 64); err != nil {
			return record{}, fmt.Errorf("kubebackend: Lease %s: bad annotation %s=%q", l.Name, annToken, s)
		}
	}
	r.idHash = a[annLeaseID]
	r.ours = r.idHash != "" && a[annHolder] == r.holder
	r.forced = a[annForced] != ""
	ms := func(name string) time.Duration {
		v, err := strconv.ParseInt(a[name], 10, 64)
		if err != nil || v < 0 {
			return 0
		}
		return time.Duration(v) * time.Millisecond
	}
	switch {
	case r.ours:
		r.owner = a[annOwner]
		r.ttl, r.margin, r.delay = ms(annTTL), ms(annMargin), ms(annLockDelay)
	case r.forced:
		r.delay = ms(annLockDelay)
	default: // another writer: client-go's record alone
		if l.Spec.LeaseDurationSeconds != nil {
			r.ttl = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
		}
	}
	return r, nil
}

// nextToken is the token a grant replacing r mints: the resourceVersion of
// the state it replaces (larger than the one of every earlier state of the
// object, and of any object of that name deleted before it), or one more
// than the stored token if that is larger (a Lease restored by hand).
func nextToken(r record) uint64 {
	return max(r.rvNum, r.token+1)
}

// durationSeconds is ttl rounded up to whole seconds, for
// leaseDurationSeconds.
func durationSeconds(ttl time.Duration) int32 {
	s := (ttl + time.Second - 1) / time.Second
	return int32(min(max(s, 1), 1<<31-1))
}

// msString is d in whole milliseconds, rounded up.
func msString(d time.Duration) string {
	return strconv.FormatInt(int64((d+time.Millisecond-1)/time.Millisecond), 10)
}

// setAnn sets or, for an empty value, deletes annotation k on l.
func setAnn(l *coordinationv1.Lease, k, v string) {
	if v == "" {
		delete(l.Annotations, k)
		return
	}
	if l.Annotations == nil {
		l.Annotations = make(map[string]string)
	}
	l.Annotations[k] = v
}

// markManaged labels l as a Lease a fencing lease used, and stores key.
func markManaged(l *coordinationv1.Lease, key string) {
	if l.Labels == nil {
		l.Labels = make(map[string]string)
	}
	l.Labels[managedLabel] = "true"
	setAnn(l, annKey, base64.StdEncoding.EncodeToString([]byte(key)))
}
