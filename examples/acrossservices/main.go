// Command acrossservices shows a fencing token carried from the holder of a
// lease to the services that write: the holder calls service A over HTTP
// (httpguard), A writes to a SQL database through sqlguard and calls
// service B over gRPC (grpcguard), and B writes to its own store through a
// guard. A holder that stalls past its TTL is refused at both, after a
// second holder wrote.
//
//	go run ./examples/acrossservices
//
// It runs everything in one process with SQLite for A and an in-memory
// store for B; the end-to-end test in this directory runs the same services
// on PostgreSQL and Redis.
package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"time"

	_ "modernc.org/sqlite"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/guard"
	"github.com/fencing-go/fencing/guard/sqlguard"
	"github.com/fencing-go/fencing/memorybackend"
)

func main() {
	if err := run(context.Background()); err != nil {
		log.Fatal(err)
	}
}

// memoryStore is B's store in this program: a map behind a guard.Memory.
type memoryStore struct {
	g      *guard.Memory
	mu     sync.Mutex
	values map[string]string
}

func (s *memoryStore) Admit(ctx context.Context, resource string, token uint64) error {
	return s.g.Admit(ctx, resource, token)
}

func (s *memoryStore) Write(ctx context.Context, resource string, token uint64, value []byte) error {
	return s.g.Write(ctx, resource, token, func() error {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.values[resource] = string(value)
		return nil
	})
}

func (s *memoryStore) FailedWrite(ctx context.Context, resource string, token uint64, value []byte) error {
	return s.g.Write(ctx, resource, token, func() error { return errors.New("the write failed") })
}

func run(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "acrossservices-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "a.db")+"?_pragma=busy_timeout(20000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		return err
	}
	defer db.Close()

	// Service B: gRPC on loopback.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	storeB := &memoryStore{g: guard.NewMemory(), values: map[string]string{}}
	b := &serviceB{store: storeB}
	stopB := serveB(lis, b)
	defer stopB()
	conn, err := dialB(lis.Addr().String())
	if err != nil {
		return err
	}
	defer conn.Close()

	// Service A: HTTP on loopback, SQLite, a client of B.
	a, err := newServiceA(ctx, db, sqlguard.SQLite, "fences", "orders", conn)
	if err != nil {
		return err
	}
	srvA := httptest.NewServer(a.Handler())
	defer srvA.Close()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	holder := newHolderClient(srvA.URL, tr)

	// The coordinator, on a clock this program moves by hand.
	clock := memorybackend.NewFakeClock(time.Now())
	mem := memorybackend.New(memorybackend.WithClock(clock))
	defer mem.Close()
	coord := fencing.New(mem)

	const key = "orders/42"
	first, err := coord.Grant(ctx, key, 10*time.Second)
	if err != nil {
		return err
	}
	// A Held's Context carries its token; a bare Lease's token goes in by hand.
	ctx1 := guard.ContextWithToken(ctx, key, first.Token)
	fmt.Printf("holder 1 has token %d and writes %q: %v\n", first.Token, "from holder 1", holder.put(ctx1, "write", "from holder 1"))

	clock.Advance(first.TTL + first.Margin + time.Second)
	fmt.Println("holder 1 stalls past its TTL")

	second, err := coord.Grant(ctx, key, 10*time.Second)
	if err != nil {
		return err
	}
	ctx2 := guard.ContextWithToken(ctx, key, second.Token)
	// Holder 2 fences at B first (a call of its own to B, with no write).
	fmt.Printf("holder 2 has token %d and fences at B: %v\n", second.Token, callB(ctx2, conn, "admit", nil))
	err = holder.put(ctx1, "write", "late, from holder 1")
	fmt.Printf("holder 1 wakes and retries: %v\n  (refused by B, so A rolled its transaction back)\n", err)

	fmt.Printf("holder 2 writes %q: %v\n", "from holder 2", holder.put(ctx2, "write", "from holder 2"))
	err = holder.put(ctx1, "write", "late, from holder 1")
	fmt.Printf("holder 1 retries again: stale: %v\n  (refused by A's database; B was not called)\n", errors.Is(err, guard.ErrStaleToken))

	var inA string
	if err := db.QueryRowContext(ctx, "SELECT value FROM orders WHERE resource = ?", []byte(key)).Scan(&inA); err != nil {
		return err
	}
	storeB.mu.Lock()
	inB := storeB.values[key]
	storeB.mu.Unlock()
	fmt.Printf("A's database holds %q, B's store %q; refused by A's database: %d, by B: %d\n", inA, inB, a.refusedHere.Load(), b.refused.Load())
	return nil
}
