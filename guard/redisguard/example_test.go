package redisguard_test

import (
	"context"
	"errors"
	"log"

	"github.com/fencing-go/fencing/guard"
	"github.com/fencing-go/fencing/guard/redisguard"
	"github.com/redis/go-redis/v9"
)

// The holder's writes go in the guard's script; a stale token writes
// nothing. Keys start with the resource's hash tag, so the same code runs on
// a Redis Cluster. This example needs a Redis server, so it only compiles
// (the package's tests run the same calls on a real redis-server).
func ExampleGuard_Write() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	ctx := context.Background()
	var token uint64 // from fencing.Coordinator.Grant

	g := redisguard.New(client)
	tag := redisguard.Tag("orders/42") // "{orders/42}"
	err := g.Write(ctx, "orders/42", token,
		redisguard.Set(tag+":total", 200),
		redisguard.HSet(tag+":meta", "status", "paid"),
		redisguard.Del(tag+":draft"))
	if errors.Is(err, guard.ErrStaleToken) {
		log.Print("a later holder has written: stop")
	}
}

// A script of your own runs after the fence check, in the same script.
// It needs a Redis server, so it only compiles.
func ExampleGuard_Run() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	var token uint64

	addItem := redisguard.NewScript(`
		redis.call('RPUSH', KEYS[1], ARGV[1])
		return redis.call('LLEN', KEYS[1])`)
	g := redisguard.New(client)
	n, err := g.Run(context.Background(), "orders/42", token, addItem,
		[]string{redisguard.Tag("orders/42") + ":items"}, "book")
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("%d items", n)
}
