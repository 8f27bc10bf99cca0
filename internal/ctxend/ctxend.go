// Package ctxend tells whether a request's context has ended, for the
// backends' error classifiers.
package ctxend

import (
	"context"
	"time"
)

// Err returns ctx's error, or context.DeadlineExceeded once ctx's deadline
// has passed: a socket whose timeout was set from the deadline (a dial, a
// read) can time out a moment before ctx's own timer ends ctx, and its
// error ("i/o timeout", os.ErrDeadlineExceeded) does not say the context
// ended.
func Err(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	return nil
}
