package etcdbackend

import (
	"sync"
	"sync/atomic"
)

// knownKeys remembers user keys this backend has seen with an ID record, so
// that their grants can compare the ID record directly (see grant). It is a
// hint only: a key whose ID record was deleted since gets one refused Txn,
// is forgotten, and is granted with the nested Txn. It holds at most
// knownMax keys, and forgets them all when full.
type knownKeys struct {
	m atomic.Pointer[sync.Map]
	n atomic.Int64
}

// knownMax bounds the keys a backend remembers.
const knownMax = 4096

func (k *knownKeys) has(key string) bool {
	m := k.m.Load()
	if m == nil {
		return false
	}
	_, ok := m.Load(key)
	return ok
}

func (k *knownKeys) add(key string) {
	m := k.m.Load()
	if m != nil {
		if _, ok := m.Load(key); ok {
			return
		}
	}
	if m == nil || k.n.Add(1) > knownMax {
		fresh := new(sync.Map)
		if !k.m.CompareAndSwap(m, fresh) {
			return // another goroutine replaced it: let it be
		}
		k.n.Store(1)
		m = fresh
	}
	m.Store(key, struct{}{})
}

func (k *knownKeys) remove(key string) {
	if m := k.m.Load(); m != nil {
		m.Delete(key)
	}
}
