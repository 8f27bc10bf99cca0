package etcdguard_test

import (
	"context"
	"errors"
	"log"

	"github.com/fencing-go/fencing/guard"
	"github.com/fencing-go/fencing/guard/etcdguard"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The holder's writes go in the guard's Txn; a stale token applies nothing.
// This example needs an etcd server, so it only compiles (the package's
// tests run the same calls on a real etcd).
func ExampleGuard_Write() {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:2379"}})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	ctx := context.Background()
	var token uint64 // from fencing.Coordinator.Grant

	g := etcdguard.New(cli)
	_, err = g.Write(ctx, "orders/42", token,
		clientv3.OpPut("orders/42/total", "200"),
		clientv3.OpPut("orders/42/status", "paid"))
	if errors.Is(err, guard.ErrStaleToken) {
		log.Print("a later holder has written: stop")
	}
}
