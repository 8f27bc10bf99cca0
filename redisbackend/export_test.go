package redisbackend

// DirectInFlight is directInFlight, for the tests of batching.
const DirectInFlight = directInFlight

// WithEveryRequestBatched makes the backend batch every Grant, Renew,
// Release and Token (none is sent on its caller's goroutine), so that
// tests with few goroutines run the batched path.
func WithEveryRequestBatched() Option {
	return func(b *Backend) { b.direct = 0 }
}

// Queued returns how many requests wait in b's batching queue, so that
// tests of batching can wait for a request to be queued.
func Queued(b *Backend) int {
	b.batch.mu.Lock()
	defer b.batch.mu.Unlock()
	return len(b.batch.queue)
}

// MaxBatch is maxBatch, for the tests of batching.
const MaxBatch = maxBatch

// InFlight returns how many of b's requests are sent or queued and not yet
// answered.
func InFlight(b *Backend) int64 { return b.batch.inFlight.Load() }

// TurnChannel is turnChannel, for the tests of the line's wake-ups.
func (b *Backend) TurnChannel(key, waiterID string) string { return b.turnChannel(key, waiterID) }

// FloorKey returns the name of the floor that key's grants read.
func (b *Backend) FloorKey(key string) string { return b.floorKey(b.RedisKey(key)) }
