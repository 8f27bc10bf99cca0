package redisbackend_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/internal/testing/redistest"
	"github.com/fencing-go/fencing/redisbackend"
)

// TestConfigCheckAuth: a connection the server refuses (a wrong or missing
// password, an ACL user that may run nothing) is an error from New in
// CheckRefuse and CheckWarn, naming the cause; an ACL user kept only from
// CONFIG gets the "cannot check" warning and a working backend.
func TestConfigCheckAuth(t *testing.T) {
	srv := redistest.Start(t, redistest.Config{AppendOnly: true, Args: []string{
		"--requirepass", "secret",
		"--user", "nothing", "on", ">pw", "~*", "&*", "-@all",
		"--user", "noconfig", "on", ">pw", "~*", "&*", "+@all", "-config",
	}})
	ctx := context.Background()
	cases := []struct {
		name      string
		user, pwd string
		want      error  // nil: New succeeds
		cause     string // in the error, or in the warning when want is nil
	}{
		{"WrongPassword", "", "wrong", backend.ErrAuthRefused, "WRONGPASS"},
		{"MissingPassword", "", "", backend.ErrAuthRefused, "NOAUTH"},
		{"WrongUser", "nobody", "pw", backend.ErrAuthRefused, "WRONGPASS"},
		{"UserWithoutPermission", "nothing", "pw", backend.ErrPermissionDenied, "NOPERM"},
		{"UserWithoutConfig", "noconfig", "pw", nil, "cannot check"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			client := srv.Client(func(o *redis.Options) { o.Username, o.Password, o.MaxRetries = c.user, c.pwd, -1 })
			for _, mode := range []backend.CheckMode{backend.CheckRefuse, backend.CheckWarn} {
				logs := new(logRecorder)
				b, err := redisbackend.New(ctx, client, redisbackend.WithSafetyCheck(mode), redisbackend.WithLogger(slog.New(logs)))
				if c.want == nil {
					if err != nil {
						t.Fatalf("%v: New: %v", mode, err)
					}
					if !strings.Contains(logs.text(), c.cause) {
						t.Errorf("%v: logged %q, want %q", mode, logs.text(), c.cause)
					}
					mustGrant(t, b, "k-"+mode.String(), "id")
					b.Close()
					continue
				}
				if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.cause) || !strings.Contains(err.Error(), srv.Addr()) {
					t.Fatalf("%v: New: %v; want %v naming %s and the server", mode, err, c.want, c.cause)
				}
				if errors.Is(err, backend.ErrUnsafeStore) {
					t.Errorf("%v: New: %v also wraps ErrUnsafeStore", mode, err)
				}
			}
		})
	}
}

// TestConfigErrorDescribe: the refusal names the Go option in its message,
// and another program can name its own knob instead.
func TestConfigErrorDescribe(t *testing.T) {
	srv := redistest.Start(t, redistest.Config{})
	_, err := redisbackend.New(context.Background(), srv.Client(), redisbackend.WithLogger(quietLogger()))
	var cerr *redisbackend.ConfigError
	if !errors.As(err, &cerr) || !errors.Is(err, backend.ErrUnsafeStore) {
		t.Fatalf("New on a server without persistence: %v, want a *ConfigError wrapping ErrUnsafeStore", err)
	}
	if !strings.Contains(err.Error(), "WithSafetyCheck(backend.CheckWarn) runs anyway") || len(cerr.Unsafe) != 1 || !strings.Contains(cerr.Unsafe[0], "appendonly") {
		t.Errorf("error %q, Unsafe %q: want the Go option and one appendonly finding", err, cerr.Unsafe)
	}
	if got := cerr.Describe("--redis-config-check warn"); !strings.Contains(got, "--redis-config-check warn runs anyway") || strings.Contains(got, "WithSafetyCheck") {
		t.Errorf("Describe = %q", got)
	}
}
