package redisbackend

// DirectInFlight is directInFlight, for the tests of batching.
const DirectInFlight = directInFlight
