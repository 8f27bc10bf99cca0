//go:build !race

package memorybackend_test

// raceEnabled reports that the race detector is on (see race_test.go).
const raceEnabled = false
