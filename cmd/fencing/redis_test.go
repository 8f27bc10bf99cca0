package main

import (
	"strings"
	"testing"

	"github.com/fencing-go/fencing/internal/redistest"
)

// TestRedisAuth: a wrong or missing password, an unknown user and an ACL
// user that may run nothing are exit 6 with "authentication failed" (never
// "server unreachable"), in every --redis-config-check mode; the right
// password works.
func TestRedisAuth(t *testing.T) {
	srv := redistest.Start(t, redistest.Config{AppendOnly: true, Args: []string{
		"--requirepass", "secret",
		"--user", "nothing", "on", ">pw", "~*", "&*", "-@all",
	}})
	for _, c := range []struct {
		name  string
		flags []string
		cause string
	}{
		{"MissingPassword", nil, "NOAUTH"},
		{"WrongPassword", []string{"--redis-password", "wrong"}, "WRONGPASS"},
		{"WrongUser", []string{"--redis-user", "nobody", "--redis-password", "pw"}, "WRONGPASS"},
		{"UserWithoutPermission", []string{"--redis-user", "nothing", "--redis-password", "pw"}, "NOPERM"},
	} {
		for _, mode := range []string{"refuse", "warn", "ignore"} {
			args := append([]string{"grant", "k", "--ttl", "10s", "--redis-addr", srv.Addr(), "--redis-config-check", mode}, c.flags...)
			r := runBin(t, args...)
			if r.code != exitAuth || !strings.Contains(r.stderr, "authentication failed") || !strings.Contains(r.stderr, c.cause) ||
				strings.Contains(r.stderr, "unreachable") {
				t.Errorf("%s, %s: want exit 6, authentication failed, %s; got %v", c.name, mode, c.cause, r)
			}
		}
	}
	want(t, 0, "grant", "k", "--ttl", "10s", "--redis-addr", srv.Addr(), "--redis-password", "secret")
}

// TestRedisConfigRefusal: the refusal of a server that can lose tokens
// names the CLI's flag, not the Go option.
func TestRedisConfigRefusal(t *testing.T) {
	srv := redistest.Start(t, redistest.Config{})
	r := want(t, exitError, "get", "k", "--redis-addr", srv.Addr())
	if !strings.Contains(r.stderr, "appendonly") || !strings.Contains(r.stderr, "--redis-config-check warn") || strings.Contains(r.stderr, "WithConfigCheck") {
		t.Errorf("refusal: %v", r)
	}
	want(t, 0, "get", "k", "--redis-addr", srv.Addr(), "--redis-config-check", "warn")
}

// TestKeyPrefixHelp: --key-prefix's help gives each backend's default.
func TestKeyPrefixHelp(t *testing.T) {
	r := want(t, 0, "get", "--help")
	if !strings.Contains(r.stdout, `"fencing/" on etcd, "fencing:" on Redis`) {
		t.Errorf("get --help:\n%s", r.stdout)
	}
}
