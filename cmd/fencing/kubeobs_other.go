//go:build !linux

package main

import (
	"errors"
	"os"
	"time"
)

// bootClock has no boot clock to offer here: the kube backend keeps its
// observations in memory only.
func bootClock() (string, time.Duration, bool) { return "", 0, false }

func lockFile(*os.File, bool) error { return errors.ErrUnsupported }
