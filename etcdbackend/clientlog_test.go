package etcdbackend_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/etcdbackend"
	"github.com/fencing-go/fencing/internal/testing/etcdtest"
)

// records is a slog.Handler at Debug that keeps each record as
// "LEVEL msg k=v k=v".
type records struct {
	mu    sync.Mutex
	lines []string
	attrs []slog.Attr
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) WithGroup(string) slog.Handler            { return r }
func (r *records) WithAttrs(as []slog.Attr) slog.Handler {
	return &recordsWith{r: r, attrs: as}
}

func (r *records) Handle(_ context.Context, rec slog.Record) error { return r.handle(rec, nil) }

func (r *records) handle(rec slog.Record, with []slog.Attr) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", rec.Level, rec.Message)
	for _, a := range with {
		fmt.Fprintf(&b, " %s", a)
	}
	rec.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s", a)
		return true
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, b.String())
	return nil
}

func (r *records) all() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.lines...)
}

type recordsWith struct {
	r     *records
	attrs []slog.Attr
}

func (w *recordsWith) Enabled(context.Context, slog.Level) bool { return true }
func (w *recordsWith) WithGroup(string) slog.Handler            { return w }
func (w *recordsWith) WithAttrs(as []slog.Attr) slog.Handler {
	return &recordsWith{r: w.r, attrs: append(append([]slog.Attr(nil), w.attrs...), as...)}
}
func (w *recordsWith) Handle(_ context.Context, rec slog.Record) error {
	return w.r.handle(rec, w.attrs)
}

// contextEnded reports whether a record line is about a context's end.
func contextEnded(line string) bool {
	return strings.Contains(line, "context canceled") || strings.Contains(line, "deadline exceeded")
}

// The etcd client's warnings for calls whose context ended ("retrying of
// unary invoker failed ... context canceled"), which LockMany calls given
// up make, reach a ClientLogger's slog.Logger at Debug only: a logger at
// Info (slog.Default's) prints none of them.
func TestClientLoggerContextEndsAtDebug(t *testing.T) {
	var rec records
	cli, err := clientv3.New(clientv3.Config{Endpoints: etcdtest.Endpoints(t), DialTimeout: 5 * time.Second,
		Logger: etcdbackend.ClientLogger(slog.New(&rec))})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	b, _ := newBackend(t, cli)
	c := fencing.New(b)
	keys := []string{"a", "b", "c", "d"}
	ended := func() (n int) {
		for _, l := range rec.all() {
			if strings.Contains(l, "retrying of unary invoker failed") && contextEnded(l) {
				n++
			}
		}
		return n
	}
	// Workers take three of four keys at a time, each LockMany given up
	// after a few dozen milliseconds, until the client has logged a few
	// calls cut off by their context; the test's timeout bounds it.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				ks := []string{keys[(w+i)%4], keys[(w+i+1)%4], keys[(w+i+2)%4]}
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(20+i%5*30)*time.Millisecond)
				m, err := c.LockMany(ctx, ks, 2*time.Second)
				cancel()
				if err == nil {
					time.Sleep(10 * time.Millisecond)
					m.Release(context.Background())
				}
			}
		}()
	}
	for ended() < 5 {
		time.Sleep(10 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	for _, l := range rec.all() {
		if !strings.HasPrefix(l, "DEBUG ") && contextEnded(l) {
			t.Errorf("logged above Debug: %s", l)
		}
	}
}

// A ClientLogger writes the client's other entries at their own level,
// with their fields and the logger's.
func TestClientLoggerLevels(t *testing.T) {
	var rec records
	lg := etcdbackend.ClientLogger(slog.New(&rec)).Named("etcd-client").With(zap.String("endpoint", "e1"))
	lg.Warn("retrying of unary invoker failed", zap.Error(status.Error(codes.Unavailable, "etcdserver: leader changed")))
	lg.Warn("retrying of unary invoker failed", zap.Error(status.Error(codes.Canceled, "context canceled")))
	lg.Warn("retrying of unary invoker failed", zap.Error(fmt.Errorf("wrapped: %w", context.DeadlineExceeded)))
	lg.Error("auth failed", zap.Uint("attempt", 2))
	lg.Info("Auto sync endpoints failed.")
	lg.Debug("backoff")
	want := []string{
		`WARN retrying of unary invoker failed logger=etcd-client endpoint=e1 error=rpc error: code = Unavailable desc = etcdserver: leader changed`,
		`DEBUG retrying of unary invoker failed logger=etcd-client endpoint=e1 error=rpc error: code = Canceled desc = context canceled`,
		`DEBUG retrying of unary invoker failed logger=etcd-client endpoint=e1 error=wrapped: context deadline exceeded`,
		`ERROR auth failed logger=etcd-client attempt=2 endpoint=e1`,
		`INFO Auto sync endpoints failed. logger=etcd-client endpoint=e1`,
		`DEBUG backoff logger=etcd-client endpoint=e1`,
	}
	got := rec.all()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("records:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// At Info, as slog.Default: a context's end is not written at all.
	var b strings.Builder
	etcdbackend.ClientLogger(slog.New(slog.NewTextHandler(&b, nil))).Warn("retrying of unary invoker failed",
		zap.Error(status.Error(codes.Canceled, "context canceled")))
	if b.Len() != 0 {
		t.Errorf("at Info: %s", b.String())
	}
}
