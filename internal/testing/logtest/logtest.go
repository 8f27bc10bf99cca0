// Package logtest keeps what a test's code logs through log/slog, for the
// test to read.
package logtest

import (
	"context"
	"log/slog"
	"sync"
)

// Records is a slog.Handler that keeps every record, at every level.
type Records struct {
	mu   sync.Mutex
	recs []slog.Record
}

// Enabled reports true: every level is kept.
func (r *Records) Enabled(context.Context, slog.Level) bool { return true }

// Handle keeps a copy of rec.
func (r *Records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec.Clone())
	return nil
}

// WithAttrs returns r: the attributes are not kept.
func (r *Records) WithAttrs([]slog.Attr) slog.Handler { return r }

// WithGroup returns r: the group is not kept.
func (r *Records) WithGroup(string) slog.Handler { return r }

// All returns the records kept so far, oldest first.
func (r *Records) All() []slog.Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]slog.Record(nil), r.recs...)
}
