package redisbackend

import (
	"context"
	_ "embed" // the script
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencing-go/fencing/backend"
)

// Reclaiming idle keys (WithRetention).
//
// A pass SCANs the backend's records (every master of a Cluster, in turn)
// and runs the reclaim script on each page of them: the script deletes
// each record idle for the retention on the server's clock and raises its
// slot's floor (floor.go) to the token it deleted, in the same script. A
// grant on the key after it reads the raised floor, a grant before it
// leaves a live record the script does not delete: scripts run one at a
// time, so there is no third order. The script is replicated and written
// to the append-only file by its effects, in one MULTI/EXEC, so a replica
// or a restart from the file has both the delete and the raise or neither.
//
// No goroutine waits for passes: the backend's calls start them. A Grant,
// Renew or Release that finds a pass due (retention/8 after the last one
// ended, on this process's monotonic clock) starts one on a goroutine of
// its own, which runs the pass to its end and exits; at most one runs at a
// time, and Close stops it and waits for it. So a key is reclaimed by
// calls on any keys, within about retention/8 and one pass after its
// retention ends, never waiting for a call on itself; a backend that
// nobody calls keeps what it holds. While no pass is due, a call pays one
// atomic load. The line of waiters needs no pass: its keys expire by
// themselves when their last entry ends (queue.go).

//go:embed lua/reclaim.lua
var reclaimLua string

var reclaimScript = newScript(reclaimLua)

// DefaultRetention is the retention of a backend made without
// WithRetention.
const DefaultRetention = 24 * time.Hour

// sweepCount is the COUNT hint of a pass's SCAN: records looked at per
// round trip.
const sweepCount = 1000

// WithRetention sets how long a key's record outlives the key's last use:
// once a key has had no live lease and no lock delay for d on the server's
// clock, a pass of the backend deletes its record (its lease hash; its
// line's keys expire by themselves when their last entry does), and the key
// then reads as one never leased, except that its next token is still above
// every token it had (see the package doc's "Retention" and backend's
// contract). d <= 0 keeps every record for ever; d is counted in whole
// microseconds.
//
// The default, DefaultRetention (24 hours), is long enough that no
// realistic pause outlives it (a stalled holder, a request resent after a
// partition: a resend after the retention may get a new lease instead of
// its verdict) and that an operator looking into yesterday's keys still
// finds them, and short enough that a workload of a key per job, order or
// file holds a day of keys, not every key it ever used. Backends sharing a
// prefix should share a retention: each reclaims by its own.
func WithRetention(d time.Duration) Option {
	return func(b *Backend) { b.retention = ceil(max(d, 0), time.Microsecond) }
}

// sweeper starts a backend's passes and counts what they reclaimed.
type sweeper struct {
	start     time.Time    // monotonic origin of due
	due       atomic.Int64 // when the next pass is due, ns since start; -1: never
	reclaimed atomic.Uint64

	mu      sync.Mutex
	running bool
	closed  bool
	wg      sync.WaitGroup
	ctx     context.Context
	cancel  context.CancelFunc
}

// init schedules the first pass a pass interval after New.
func (w *sweeper) init(retention time.Duration) {
	w.start = time.Now()
	w.ctx, w.cancel = context.WithCancel(context.Background())
	if retention <= 0 {
		w.due.Store(-1)
		return
	}
	w.due.Store(int64(every(retention)))
}

// every is the time from the end of a pass to the next one.
func every(retention time.Duration) time.Duration { return max(retention/8, time.Millisecond) }

// drive starts a pass on a goroutine of its own when one is due and none
// runs: the backend's calls call it.
func (b *Backend) drive() {
	w := &b.sweep
	due := w.due.Load()
	if due < 0 || int64(time.Since(w.start)) < due {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.running || w.closed {
		return
	}
	w.running = true
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		err := b.pass(w.ctx)
		if err != nil && w.ctx.Err() == nil {
			b.logger.Debug("redisbackend: reclaiming pass ended early; the next one goes on", "error", err)
		}
		w.mu.Lock()
		w.running = false
		w.due.Store(int64(time.Since(w.start) + every(b.retention)))
		w.mu.Unlock()
	}()
}

// stop ends a pass in progress and waits for it (Close).
func (w *sweeper) stop() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	w.cancel()
	w.wg.Wait()
}

// pass reclaims the idle records of every node, a SCAN page at a time.
func (b *Backend) pass(ctx context.Context) error {
	return b.scanRecords(ctx, func(rks []string) error { return b.reclaim(ctx, rks) })
}

// scanRecords calls page with each page of SCAN over the backend's record
// pattern, on every node, until one fails.
func (b *Backend) scanRecords(ctx context.Context, page func(rks []string) error) error {
	nodes, err := b.scanNodes(ctx)
	if err != nil {
		return err
	}
	pattern := escapeGlob(b.prefix) + "{*" + recordSuffix
	for _, n := range nodes {
		var cursor uint64
		for {
			var rks []string
			rks, cursor, err = n.client.Scan(ctx, cursor, pattern, sweepCount).Result()
			if err != nil {
				return err
			}
			if err := page(rks); err != nil {
				return err
			}
			if cursor == 0 {
				break
			}
		}
	}
	return nil
}

// reclaim runs the reclaim script on the records rks, once per floor (one
// on a standalone server, one per slot on a Cluster), pipelined.
func (b *Backend) reclaim(ctx context.Context, rks []string) error {
	if len(rks) == 0 {
		return nil
	}
	groups := make(map[string][]string)
	var order []string
	for _, rk := range rks {
		if _, ok := b.decodeKey(rk); !ok {
			continue
		}
		f := b.floorKey(rk)
		if groups[f] == nil {
			order = append(order, f)
			groups[f] = []string{f}
		}
		groups[f] = append(groups[f], rk)
	}
	ret := b.retention.Microseconds()
	cmds := make([]onceCmd, len(order))
	send := func(source bool, which []int) {
		pipe := b.client.Pipeline()
		for _, i := range which {
			cmds[i] = reclaimScript.cmdKeys(ctx, source, groups[order[i]], []any{ret})
			_ = pipe.Process(ctx, cmds[i])
		}
		_, _ = pipe.Exec(ctx) // errors are on the commands
	}
	all := make([]int, len(order))
	for i := range all {
		all[i] = i
	}
	send(false, all)
	var missing []int
	for i, c := range cmds {
		if isNoScript(c.Err()) {
			missing = append(missing, i)
		}
	}
	if len(missing) > 0 {
		send(true, missing)
	}
	var errs []error
	for _, c := range cmds {
		n, err := c.Int64()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		b.sweep.reclaimed.Add(uint64(n))
	}
	return errors.Join(errs...)
}

// Size implements backend.Sizer. Records is a count of the backend's
// records by SCAN of its prefix's record pattern (on every master of a
// Cluster), not DBSIZE: the backend cannot know that the database is its
// own, and DBSIZE would count other prefixes, lines and floors too. So it
// costs the server a pass over every key of the database, a thousand per
// round trip; it is a figure for metrics and operators, not for every
// request. Reclaimed is the keys this backend's passes deleted since New.
func (b *Backend) Size(ctx context.Context) (backend.StoreSize, error) {
	if err := b.ready(ctx, nil); err != nil {
		return backend.StoreSize{}, err
	}
	var total int64
	err := b.scanRecords(ctx, func(rks []string) error {
		for _, rk := range rks {
			if _, ok := b.decodeKey(rk); ok {
				total++
			}
		}
		return nil
	})
	if err != nil {
		return backend.StoreSize{}, sendError(ctx, "size", err)
	}
	return backend.StoreSize{Records: total, Reclaimed: b.sweep.reclaimed.Load()}, nil
}
