package etcdbackend_test

import (
	"context"
	"errors"
	"log"
	"log/slog"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/etcdbackend"
)

// A Coordinator over etcd. The client, with its endpoints, TLS and auth, is
// the caller's; the backend never closes it.
func Example() {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{"localhost:2379"},
		DialTimeout: 5 * time.Second,
		Logger:      etcdbackend.ClientLogger(slog.Default()), // else the client logs to stderr
	})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()

	// New checks that etcd answers: give it a deadline.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	b, err := etcdbackend.New(ctx, cli, etcdbackend.WithPrefix("myapp/locks/"))
	cancel()
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	c := fencing.New(b)

	ctx = context.Background()
	lease, err := c.Grant(ctx, "invoices/2026-12", 10*time.Second)
	if errors.Is(err, fencing.ErrLeaseHeld) {
		log.Print("someone else is on it")
		return
	} else if err != nil {
		log.Fatal(err)
	}
	defer c.Release(ctx, lease.Key, lease.ID)

	// Send lease.Token with every write to the protected resource, and stop
	// by lease.Deadline unless a Renew extends it. etcd grants whole seconds:
	// lease.TTL may be longer than the 10s asked for.
	log.Printf("token %d, TTL %v, until %v", lease.Token, lease.TTL, lease.Deadline)
}
