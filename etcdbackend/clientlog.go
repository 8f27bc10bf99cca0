package etcdbackend

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sort"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ClientLogger returns a logger for the etcd client (clientv3.Config's
// Logger) that writes the client's log entries to l (slog.Default() when
// nil), at the entry's level, with its fields as attributes; except that an
// entry whose error is a context that ended (the client's "retrying of
// unary invoker failed ... context canceled" or "... deadline exceeded") is
// written at slog.LevelDebug: every call of a Coordinator over etcd ends its
// contexts (a wait given up, a Lock's attempt cut short, a request timeout)
// and returns what that meant, so the client's warning is no news. Without
// a Logger, the etcd client writes such warnings to stderr as JSON.
//
//	cli, err := clientv3.New(clientv3.Config{
//		Endpoints: endpoints,
//		Logger:    etcdbackend.ClientLogger(logger),
//	})
func ClientLogger(l *slog.Logger) *zap.Logger {
	if l == nil {
		l = slog.Default()
	}
	return zap.New(&slogCore{l: l})
}

// slogCore is a zapcore.Core that writes to a slog.Logger.
type slogCore struct {
	l      *slog.Logger
	fields []zapcore.Field // from With
}

func (c *slogCore) Enabled(lvl zapcore.Level) bool {
	// An entry written at its level or, with a context error, at Debug.
	return c.l.Enabled(context.Background(), slogLevel(lvl)) || c.l.Enabled(context.Background(), slog.LevelDebug)
}

func (c *slogCore) With(fs []zapcore.Field) zapcore.Core {
	return &slogCore{l: c.l, fields: append(slices.Clip(c.fields), fs...)}
}

func (c *slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *slogCore) Write(e zapcore.Entry, fs []zapcore.Field) error {
	ctx := context.Background()
	level := slogLevel(e.Level)
	if level > slog.LevelDebug && (contextEnded(c.fields) || contextEnded(fs)) {
		level = slog.LevelDebug
	}
	if !c.l.Enabled(ctx, level) {
		return nil
	}
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range c.fields {
		f.AddTo(enc)
	}
	for _, f := range fs {
		f.AddTo(enc)
	}
	keys := make([]string, 0, len(enc.Fields))
	for k := range enc.Fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	attrs := make([]slog.Attr, 0, len(keys)+1)
	if e.LoggerName != "" {
		attrs = append(attrs, slog.String("logger", e.LoggerName))
	}
	for _, k := range keys {
		attrs = append(attrs, slog.Any(k, enc.Fields[k]))
	}
	c.l.LogAttrs(ctx, level, e.Message, attrs...)
	return nil
}

func (c *slogCore) Sync() error { return nil }

// slogLevel is zap's level lvl as slog's.
func slogLevel(lvl zapcore.Level) slog.Level {
	switch {
	case lvl <= zapcore.DebugLevel:
		return slog.LevelDebug
	case lvl == zapcore.InfoLevel:
		return slog.LevelInfo
	case lvl == zapcore.WarnLevel:
		return slog.LevelWarn
	}
	return slog.LevelError
}

// contextEnded reports whether an error among fs is a context's end: the
// context's own error, or gRPC's status for it (codes.Canceled,
// codes.DeadlineExceeded).
func contextEnded(fs []zapcore.Field) bool {
	for _, f := range fs {
		err, ok := f.Interface.(error)
		if f.Type != zapcore.ErrorType || !ok {
			continue
		}
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return true
		}
		if c := status.Code(err); c == codes.Canceled || c == codes.DeadlineExceeded {
			return true
		}
	}
	return false
}
