package rwlock_test

import (
	"context"
	"fmt"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/guard"
	"github.com/fencing-go/fencing/memorybackend"
	"github.com/fencing-go/fencing/rwlock"
)

// A writer writes under a guard with its token; two readers then read at
// once, each checking its token against the guard's fence without raising
// it; the next writer's token is above both readers', so once it has
// written, a reader that kept reading is refused.
func Example() {
	b := memorybackend.New()
	defer b.Close()
	c := fencing.New(b)
	ctx := context.Background()
	l, err := rwlock.New(c, "report")
	if err != nil {
		panic(err)
	}
	g := guard.NewMemory()
	report := ""
	// read is a reader's read, fenced against the next writer.
	read := func(r *rwlock.Reader) string {
		if g.Fence("report") > r.Token() {
			return "refused: a later writer wrote"
		}
		return report
	}

	w, _ := l.Lock(ctx, 10*time.Second)
	_ = g.Write(ctx, "report", w.Token(), func() error { report = "v1"; return nil })
	fmt.Println("writer token:", w.Token())
	w.Release(ctx)

	r1, _ := l.RLock(ctx, 10*time.Second)
	r2, _ := l.RLock(ctx, 10*time.Second)
	fmt.Println("readers' tokens:", r1.Token(), r2.Token(), "read:", read(r1), read(r2))
	r1.Release(ctx)
	r2.Release(ctx)

	w2, _ := l.Lock(ctx, 10*time.Second)
	_ = g.Write(ctx, "report", w2.Token(), func() error { report = "v2"; return nil })
	fmt.Println("next writer token:", w2.Token())
	fmt.Println("a reader that kept reading:", read(r1))
	w2.Release(ctx)
	// Output:
	// writer token: 1
	// readers' tokens: 2 3 read: v1 v1
	// next writer token: 4
	// a reader that kept reading: refused: a later writer wrote
}
