//go:build !fifo

package bench

import "github.com/fencing-go/fencing"

// fifoOption returns fencing.WithFIFO() in a build with the tag fifo (see
// contention_fifo_test.go), and nil here: the contention handoff then runs
// without its FIFO contender.
func fifoOption() fencing.HoldOption { return nil }
