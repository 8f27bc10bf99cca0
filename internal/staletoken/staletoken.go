// Package staletoken holds the one value of guard.ErrStaleToken, so that
// package backend and package fencing can re-export it without importing
// package guard, which imports backend.
package staletoken

import "errors"

// Err is guard.ErrStaleToken.
var Err = errors.New("stale token")
