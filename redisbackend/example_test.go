package redisbackend_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/redisbackend"
)

// A Coordinator on a standalone Redis. New refuses a server that could lose
// tokens (no append-only file, allkeys-* eviction); see WithSafetyCheck.
func ExampleNew() {
	client := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer client.Close() // the client is yours: the backend never closes it

	// New checks the server's configuration: give it a deadline.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	b, err := redisbackend.New(ctx, client)
	cancel()
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()

	c := fencing.New(b)
	ctx = context.Background()
	lease, err := c.Grant(ctx, "orders/42", 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Release(ctx, lease.Key, lease.ID)
	fmt.Println("write with token", lease.Token)
}

// Sentinel: go-redis's failover client follows the primary. Waiting for one
// replica after each grant makes losing a token on failover less likely.
func ExampleWithMinReplicas() {
	client := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:    "mymaster",
		SentinelAddrs: []string{"sentinel-1:26379", "sentinel-2:26379", "sentinel-3:26379"},
	})
	defer client.Close()

	b, err := redisbackend.New(context.Background(), client, redisbackend.WithMinReplicas(1, 100*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	_ = fencing.New(b)
}

// Redis Cluster: each key's record lives in one hash slot.
func ExampleNew_cluster() {
	client := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: []string{"node-1:6379", "node-2:6379", "node-3:6379"},
	})
	defer client.Close()

	b, err := redisbackend.New(context.Background(), client, redisbackend.WithPrefix("myapp:fencing:"))
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	_ = fencing.New(b)
}
