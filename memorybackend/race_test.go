//go:build race

package memorybackend_test

// raceEnabled reports that the race detector is on, which makes each call
// many times slower.
const raceEnabled = true
