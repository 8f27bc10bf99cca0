//go:build fifo

package bench

import "github.com/fencing-go/fencing"

// fifoOption returns the option of the contention handoff's FIFO contender.
func fifoOption() fencing.HoldOption { return fencing.WithFIFO() }
