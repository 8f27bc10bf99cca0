package redisbackend

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencing-go/fencing/backend"
)

// batcher sends the backend's requests, coalescing concurrent ones into
// pipelines. A request that finds fewer than directInFlight others of the
// backend in flight goes out at once on the caller's goroutine, as a lone
// command would; one that finds more joins a queue that one goroutine (the
// flusher) sends as one pipeline, one write and one read for the whole
// batch. Under load that spares the client and the server most of their
// per-command system calls and wake-ups, which on a busy machine cost more
// than the scripts themselves (docs/benchmarks.md, Redis); at low concurrency
// the requests keep their own connections and round trips.
//
// What a caller sees is what a lone command gives: the commands are
// onceCmd, and a pipeline that holds one is never resent by go-redis
// either, so each request still goes out at most once. A caller whose
// context ends while its request is queued takes it back (nothing was
// sent: its error is the context's); once the flusher has taken it, the
// caller stops waiting and gets the context's error on a command whose
// outcome is unknown. The flusher sends a batch under a context that ends
// at the latest of its requests' deadlines (none if one has none, so the
// client's timeouts apply). Close fails the queue and sets the callers
// of the batch in flight free in the same way.
type batcher struct {
	client     processPipeliner
	directUpTo int64        // requests in flight sent directly (directInFlight; tests: 0)
	inFlight   atomic.Int64 // requests sent or queued and not yet answered
	// detach: the client does not end a read at a context's deadline
	// (go-redis without ContextTimeoutEnabled), so a direct request whose
	// context can end before the client's own read timeout would end the
	// exchange is sent on a goroutine of its own, which its caller stops
	// waiting for when the context ends (see direct and detachFor).
	detach bool
	// readBound is the client's own read timeout (see ownReadBound): a
	// request whose deadline is further away is bounded by the client
	// itself and goes out on its caller's goroutine. Zero: none.
	readBound time.Duration
	detached  sync.WaitGroup // the detached goroutines; close waits for them

	mu      sync.Mutex
	queue   []*queued
	started bool
	closed  bool
	wake    chan struct{} // one token: the queue has work
	closing chan struct{} // closed by close: callers stop waiting
	ctx     context.Context
	cancel  context.CancelFunc
	done    chan struct{} // closed when the flusher returns
}

// processPipeliner is what the batcher needs of a go-redis client.
type processPipeliner interface {
	processor
	Pipeline() redis.Pipeliner
}

// directInFlight is how many requests go out on their callers' goroutines
// at once before the rest are batched. Measured against sending every
// request directly (docs/redis.md): batching from the second request
// on cost 10-40% of the throughput at 2 to 8 goroutines (one batch on the
// wire at a time serializes what separate connections run in parallel) and
// gained 1.3-1.7x at 32; from the ninth on it costs nothing measurable up
// to 8 and gains 1.7x at 32 and 2.1x at 64; from the seventeenth on it
// gains less (1.6x at 32).
const directInFlight = 8

// maxBatch bounds the commands of one pipeline, so that one batch's
// replies stay a modest read and a large queue is sent in a few writes.
const maxBatch = 128

// queued is a request waiting for the flusher. state moves from
// stateQueued to stateTaken (by the flusher) or stateAbandoned (by a
// caller whose context ended first), exactly once.
type queued struct {
	ctx   context.Context
	cmds  []redis.Cmder
	state atomic.Int32
	done  chan struct{} // closed once the commands have their replies
}

const (
	stateQueued int32 = iota
	stateTaken
	stateAbandoned
)

func newBatcher(client processPipeliner, directUpTo int64, detach bool, readBound time.Duration) *batcher {
	ctx, cancel := context.WithCancel(context.Background())
	return &batcher{client: client, directUpTo: directUpTo, detach: detach, readBound: readBound, wake: make(chan struct{}, 1), closing: make(chan struct{}), ctx: ctx, cancel: cancel, done: make(chan struct{})}
}

// Process implements processor: it sends cmd as described on batcher. It
// is do for one command, without the slice that only a queued request
// needs.
func (b *batcher) Process(ctx context.Context, cmd redis.Cmder) error {
	defer b.inFlight.Add(-1)
	if b.inFlight.Add(1) <= b.directUpTo {
		if b.detachFor(ctx) {
			return b.detached1(ctx, []redis.Cmder{cmd})
		}
		return b.client.Process(ctx, cmd)
	}
	return b.wait(ctx, []redis.Cmder{cmd})
}

// do sends cmds, in order on one connection, and returns the first
// command's error, or a context error when ctx ended first. The commands'
// errors are set in every case but one: a caller that stops waiting for a
// batch already sent (abandoned) must not read them.
func (b *batcher) do(ctx context.Context, cmds ...redis.Cmder) error {
	defer b.inFlight.Add(-1)
	if b.inFlight.Add(1) <= b.directUpTo {
		return b.direct(ctx, cmds)
	}
	return b.wait(ctx, cmds)
}

// wait queues cmds for the flusher and waits for their replies.
func (b *batcher) wait(ctx context.Context, cmds []redis.Cmder) error {
	q := &queued{ctx: ctx, cmds: cmds, done: make(chan struct{})}
	if !b.enqueue(q) {
		err := backend.ErrClosed
		setErr(cmds, err)
		return err
	}
	var cause error
	select {
	case <-q.done:
		return cmds[0].Err()
	case <-ctx.Done():
		cause = ctx.Err()
	case <-b.closing:
		cause = backend.ErrClosed
	}
	if q.state.CompareAndSwap(stateQueued, stateAbandoned) {
		err := notSentError{cause}
		setErr(cmds, err)
		return err
	}
	// The flusher has it: its outcome is unknown. The commands belong to
	// the flusher until it closes done.
	return abandonedError{cause}
}

// notSentError is the error of a request that never left the queue.
type notSentError struct{ err error }

func (e notSentError) Error() string { return "not sent: " + e.err.Error() }
func (e notSentError) Unwrap() error { return e.err }

// abandonedError is the error of a request whose caller stopped waiting
// after the flusher took it: it may have run. Its commands still belong
// to the flusher, so the caller must not read them.
type abandonedError struct{ err error }

func (e abandonedError) Error() string { return "stopped waiting for the reply: " + e.err.Error() }
func (e abandonedError) Unwrap() error { return e.err }

// abandoned reports whether err, returned by do, says that the caller must
// not read its commands.
func abandoned(err error) bool {
	if err == nil {
		return false
	}
	var a abandonedError
	return errors.As(err, &a)
}

// direct sends cmds on the caller's goroutine, or on one of their own
// when the client would not end its read at ctx's end (see detachFor).
func (b *batcher) direct(ctx context.Context, cmds []redis.Cmder) error {
	if b.detachFor(ctx) {
		return b.detached1(ctx, cmds)
	}
	b.exec(ctx, cmds)
	return cmds[0].Err()
}

// detachFor reports whether a request under ctx must go out on a
// goroutine of its own: the client does not end its reads at ctx's end
// (detach), ctx can end, and it can end before the client's own read
// timeout would end an exchange with a server that stopped answering
// (readBound; a context without a deadline can end at any time).
// Otherwise the caller's goroutine sends it, sparing a hand-off between
// goroutines per request: the client itself then returns before ctx's
// deadline, its dial and its wait for a pooled connection honouring ctx
// in any case. Only the read waits on the server: a request is far
// smaller than the socket's send buffer, which on a connection no one
// else writes to is empty when the request is written.
func (b *batcher) detachFor(ctx context.Context) bool {
	if !b.detach {
		return false
	}
	// The deadline first: Done makes a context's channel on its first
	// call, which a request sent with the client's own bound never needs.
	if dl, ok := ctx.Deadline(); ok {
		return b.readBound <= 0 || time.Until(dl) <= b.readBound
	}
	return ctx.Done() != nil
}

// detached1 sends cmds on a goroutine of their own and waits for their
// replies or for ctx to end. A caller whose context ends first gets an
// abandonedError (the commands may have run) and must not read the
// commands, which the goroutine still writes until the client's own read
// timeout ends the exchange.
func (b *batcher) detached1(ctx context.Context, cmds []redis.Cmder) error {
	_, err := await(b, ctx, func() (struct{}, error) {
		b.exec(ctx, cmds)
		return struct{}{}, cmds[0].Err()
	})
	return err
}

// await runs f on a goroutine of its own and waits for it or for ctx to
// end; then it returns an abandonedError, and f's results are dropped when
// it returns. close waits for f.
func await[T any](b *batcher, ctx context.Context, f func() (T, error)) (T, error) {
	var zero T
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return zero, notSentError{backend.ErrClosed}
	}
	b.detached.Add(1) // under b.mu, which close takes before it waits
	b.mu.Unlock()
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		defer b.detached.Done()
		v, err := f()
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		return zero, abandonedError{ctx.Err()}
	}
}

// exec sends cmds, one alone, several as one pipeline; their errors are
// on the commands.
func (b *batcher) exec(ctx context.Context, cmds []redis.Cmder) {
	if len(cmds) == 1 {
		_ = b.client.Process(ctx, cmds[0])
		return
	}
	pipe := b.client.Pipeline()
	for _, c := range cmds {
		_ = pipe.Process(ctx, c)
	}
	_, _ = pipe.Exec(ctx)
}

// enqueue queues q for the flusher, starting it the first time; false
// once the batcher is closed.
func (b *batcher) enqueue(q *queued) bool {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return false
	}
	b.queue = append(b.queue, q)
	if !b.started {
		b.started = true
		go b.flush()
	}
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default: // already signalled
	}
	return true
}

// flush sends the queue, batch after batch, until the batcher is closed.
func (b *batcher) flush() {
	defer close(b.done)
	var spare []*queued
	var cmds []redis.Cmder
	for {
		select {
		case <-b.wake:
		case <-b.ctx.Done():
			return
		}
		for {
			b.mu.Lock()
			batch := b.queue
			switch {
			case len(batch) > maxBatch:
				batch = batch[:maxBatch:maxBatch]
				b.queue = b.queue[maxBatch:]
			default:
				b.queue, spare = spare, nil // spare never shares an array with the queue
			}
			b.mu.Unlock()
			if len(batch) == 0 {
				spare = batch
				break
			}
			cmds = b.send(batch, cmds[:0])
			for _, q := range batch {
				if q.state.Load() == stateTaken {
					close(q.done)
				}
			}
			clear(batch)
			spare = batch[:0]
		}
	}
}

// send takes the batch's requests that are still wanted and sends them as
// one pipeline, returning cmds (reused by the next batch).
func (b *batcher) send(batch []*queued, cmds []redis.Cmder) []redis.Cmder {
	var latest time.Time
	unbounded := false
	for _, q := range batch {
		if !q.state.CompareAndSwap(stateQueued, stateTaken) {
			continue // its caller gave up
		}
		cmds = append(cmds, q.cmds...)
		if dl, ok := q.ctx.Deadline(); !ok {
			unbounded = true
		} else if dl.After(latest) {
			latest = dl
		}
	}
	if len(cmds) == 0 {
		return cmds
	}
	ctx := b.ctx
	if !unbounded {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, latest)
		defer cancel()
	}
	b.exec(ctx, cmds)
	clear(cmds)
	return cmds
}

// close fails what is queued (never sent) and the callers of the batch in
// flight (its outcome unknown), and returns once the flusher has. The
// flusher may still be waiting for that batch's replies, which go-redis
// bounds only by deadlines: the batch's (the latest of its callers') or,
// without one, the client's read timeout.
func (b *batcher) close() {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return
	}
	b.closed = true
	b.queue = nil
	started := b.started
	b.mu.Unlock()
	close(b.closing)
	b.cancel()
	if started {
		<-b.done
	}
	b.detached.Wait()
}

func setErr(cmds []redis.Cmder, err error) {
	for _, c := range cmds {
		c.SetErr(err)
	}
}
