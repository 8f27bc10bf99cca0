package etcdbackend

import (
	"context"
	"fmt"

	"github.com/fencing-go/fencing/backend"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Token implements backend.Backend with one linearizable read. A lease whose
// TTL ran out but which etcd has not yet revoked is reported live.
func (b *Backend) Token(ctx context.Context, key string) (uint64, bool, error) {
	if err := b.ready(ctx, backend.CheckKey(key)); err != nil {
		return 0, false, err
	}
	resp, err := b.kv.Get(ctx, b.keys(key).lease, clientv3.WithKeysOnly())
	if err != nil {
		return 0, false, fmt.Errorf("etcdbackend: get: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return 0, false, nil
	}
	return uint64(resp.Kvs[0].CreateRevision), true, nil
}
