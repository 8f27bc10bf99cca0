//go:build !linux

package main

import "os"

// fileIsTerminal reports whether f is a character device, the best guess
// without terminal ioctls (it takes /dev/null for a terminal).
func fileIsTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
