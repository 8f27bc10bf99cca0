package main

import (
	"strings"
	"testing"

	"github.com/fencing-go/fencing/internal/testing/redistest"
)

// TestRedisAuth: a wrong or missing password and an unknown user are exit 6
// with "authentication failed", an ACL user that may run nothing (or not
// the backend's scripts) exit 6 with "permission denied", never "server
// unreachable", in every --redis-config-check mode; the right password
// works.
func TestRedisAuth(t *testing.T) {
	srv := redistest.Start(t, redistest.Config{AppendOnly: true, Args: []string{
		"--requirepass", "secret",
		"--user", "nothing", "on", ">pw", "~*", "&*", "-@all",
		"--user", "noscripts", "on", ">pw", "~*", "&*", "+@all", "-@scripting",
	}})
	for _, c := range []struct {
		name  string
		flags []string
		cause string
		says  string
	}{
		{"MissingPassword", nil, "NOAUTH", "authentication failed"},
		{"WrongPassword", []string{"--redis-password", "wrong"}, "WRONGPASS", "authentication failed"},
		{"WrongUser", []string{"--redis-user", "nobody", "--redis-password", "pw"}, "WRONGPASS", "authentication failed"},
		{"UserWithoutPermission", []string{"--redis-user", "nothing", "--redis-password", "pw"}, "NOPERM", "permission denied"},
	} {
		for _, mode := range []string{"refuse", "warn", "ignore"} {
			args := append([]string{"grant", "k", "--ttl", "10s", "--redis-addr", srv.Addr(), "--redis-config-check", mode}, c.flags...)
			r := runBin(t, args...)
			if r.code != exitAuth || !strings.Contains(r.stderr, c.says) || !strings.Contains(r.stderr, c.cause) ||
				strings.Contains(r.stderr, "unreachable") {
				t.Errorf("%s, %s: want exit 6, %s, %s; got %v", c.name, mode, c.says, c.cause, r)
			}
		}
	}
	want(t, 0, "grant", "k", "--ttl", "10s", "--redis-addr", srv.Addr(), "--redis-password", "secret")
	// A user who may connect but not run the backend's scripts: the grant
	// itself is refused.
	r := runBin(t, "grant", "k2", "--ttl", "10s", "--redis-addr", srv.Addr(), "--redis-user", "noscripts", "--redis-password", "pw")
	if r.code != exitAuth || !strings.Contains(r.stderr, "permission denied") || !strings.Contains(r.stderr, "NOPERM") || strings.Contains(r.stderr, "unreachable") {
		t.Errorf("a user without @scripting: want exit 6 naming NOPERM, got %v", r)
	}
}

// TestRedisConfigRefusal: the refusal of a server that can lose tokens
// names the CLI's flag, not the Go option.
func TestRedisConfigRefusal(t *testing.T) {
	srv := redistest.Start(t, redistest.Config{})
	r := want(t, exitError, "get", "k", "--redis-addr", srv.Addr())
	if !strings.Contains(r.stderr, "appendonly") || !strings.Contains(r.stderr, "--redis-config-check warn") || strings.Contains(r.stderr, "WithSafetyCheck") {
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
