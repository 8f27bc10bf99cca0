package redisbackend

// DirectInFlight is directInFlight, for the tests of batching.
const DirectInFlight = directInFlight

// WithEveryRequestBatched makes the backend batch every Grant, Renew,
// Release and Token (none is sent on its caller's goroutine), so that
// tests with few goroutines run the batched path.
func WithEveryRequestBatched() Option {
	return func(b *Backend) { b.direct = 0 }
}
