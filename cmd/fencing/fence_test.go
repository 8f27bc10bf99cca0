package main

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencing-go/fencing/guard/etcdguard"
	"github.com/fencing-go/fencing/guard/redisguard"
	"github.com/fencing-go/fencing/guard/sqlguard"
)

// poison admits token for resource straight through the guard that keeps
// its fences in s's store, as a forged request did before a mint check.
func poison(t *testing.T, s server, resource string, token uint64) {
	t.Helper()
	ctx := context.Background()
	var err error
	switch s.name {
	case "sqlite":
		db, oerr := sql.Open("sqlite", "file:"+s.flags[1]+"?_pragma=busy_timeout(10000)")
		if oerr != nil {
			t.Fatal(oerr)
		}
		defer db.Close()
		g, _ := sqlguard.New(sqlguard.SQLite)
		if err = g.CreateTable(ctx, db); err == nil {
			err = g.Takeover(ctx, db, resource, token)
		}
	case "etcd":
		cli, cerr := clientv3.New(clientv3.Config{Endpoints: []string{s.flags[1]}})
		if cerr != nil {
			t.Fatal(cerr)
		}
		defer cli.Close()
		err = etcdguard.New(cli).Admit(ctx, resource, token)
	case "redis":
		c := redis.NewClient(&redis.Options{Addr: s.flags[1]})
		defer c.Close()
		err = redisguard.New(c).Admit(ctx, resource, token)
	default:
		t.Fatalf("no guard for %s", s.name)
	}
	if err != nil {
		t.Fatalf("poison %s: %v", s.name, err)
	}
}

// TestFence: fence shows a fence poisoned by a forged token next to the
// highest token minted, refuses to lower it without confirmation, and
// lowers it (compare-and-set) with --yes; a writer is admitted again.
func TestFence(t *testing.T) {
	onServers(t, func(t *testing.T, s server) {
		// A fresh store: no guard has made its fences (on SQL, its table).
		if r := want(t, 0, s.args("fence", "orders/42")...); !strings.Contains(r.stdout, "has no fence") {
			t.Errorf("fence on a fresh store: %v", r)
		}
		var l leaseJSON
		wantJSON(t, &l, s.args("grant", "orders/42", "--ttl", "10s", "--json")...)
		want(t, 0, s.args("release", "orders/42", "--lease-id", l.LeaseID)...)
		const forged = 1<<63 - 1
		poison(t, s, "orders/42", forged)

		var f fenceJSON
		wantJSON(t, &f, s.args("fence", "orders/42", "--json")...)
		if f.Fence != forged || f.MaxToken != l.Token || f.Lowered {
			t.Fatalf("fence --json: %+v, want fence %d, max token %d", f, uint64(forged), l.Token)
		}
		if r := want(t, 0, s.args("fence", "orders/42")...); !strings.Contains(r.stdout, "poisoned") {
			t.Errorf("fence names no poisoned fence: %v", r)
		}
		if r := want(t, exitUsage, s.args("fence", "orders/42", "--lower-to", "1")...); !strings.Contains(r.stderr, "--yes") {
			t.Errorf("--lower-to without a terminal or --yes: %v", r)
		}
		want(t, exitUsage, s.args("fence", "orders/42", "--yes")...)
		want(t, exitUsage, s.args("fence", "orders/42", "--lower-to", "9223372036854775807", "--yes")...)
		wantJSON(t, &f, s.args("fence", "orders/42", "--json")...)
		if f.Fence != forged {
			t.Fatalf("fence after refused lowerings: %d, want %d", f.Fence, uint64(forged))
		}

		wantJSON(t, &f, s.args("fence", "orders/42", "--lower-to", "1", "--yes", "--json")...)
		if !f.Lowered || f.From != forged || f.Fence != 1 {
			t.Fatalf("fence --lower-to 1: %+v", f)
		}
		poison(t, s, "orders/42", l.Token) // the holder's token is admitted again
		if r := want(t, 0, s.args("fence", "orders/42", "--lower-to", "0", "--yes")...); !strings.Contains(r.stdout, "removed the fence") {
			t.Errorf("fence --lower-to 0: %v", r)
		}
		if r := want(t, 0, s.args("fence", "orders/42")...); !strings.Contains(r.stdout, "has no fence") {
			t.Errorf("fence after removal: %v", r)
		}
	})
	want(t, exitUsage, "fence", "r", "--backend", "memory")
}
