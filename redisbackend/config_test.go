package redisbackend_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/fencing-go/fencing/internal/testing/redistest"
	"github.com/fencing-go/fencing/redisbackend"
)

// TestConfigCheckAuth: a connection the server refuses (a wrong or missing
// password, an ACL user that may run nothing) is an error from New in
// ConfigRefuse and ConfigWarn, naming the cause; an ACL user kept only from
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
		{"WrongPassword", "", "wrong", redisbackend.ErrAuth, "WRONGPASS"},
		{"MissingPassword", "", "", redisbackend.ErrAuth, "NOAUTH"},
		{"WrongUser", "nobody", "pw", redisbackend.ErrAuth, "WRONGPASS"},
		{"UserWithoutPermission", "nothing", "pw", redisbackend.ErrPermission, "NOPERM"},
		{"UserWithoutConfig", "noconfig", "pw", nil, "cannot check"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			client := srv.Client(func(o *redis.Options) { o.Username, o.Password, o.MaxRetries = c.user, c.pwd, -1 })
			for _, mode := range []redisbackend.ConfigMode{redisbackend.ConfigRefuse, redisbackend.ConfigWarn} {
				logs := new(logRecorder)
				b, err := redisbackend.NewContext(ctx, client, redisbackend.WithConfigCheck(mode), redisbackend.WithLogger(slog.New(logs)))
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
				if errors.Is(err, redisbackend.ErrUnsafeConfig) {
					t.Errorf("%v: New: %v also wraps ErrUnsafeConfig", mode, err)
				}
			}
		})
	}
}

// TestConfigErrorDescribe: the refusal names the Go option in its message,
// and another program can name its own knob instead.
func TestConfigErrorDescribe(t *testing.T) {
	srv := redistest.Start(t, redistest.Config{})
	_, err := redisbackend.New(srv.Client(), redisbackend.WithLogger(quietLogger()))
	var cerr *redisbackend.ConfigError
	if !errors.As(err, &cerr) || !errors.Is(err, redisbackend.ErrUnsafeConfig) {
		t.Fatalf("New on a server without persistence: %v, want a *ConfigError wrapping ErrUnsafeConfig", err)
	}
	if !strings.Contains(err.Error(), "WithConfigCheck(ConfigWarn) runs anyway") || len(cerr.Unsafe) != 1 || !strings.Contains(cerr.Unsafe[0], "appendonly") {
		t.Errorf("error %q, Unsafe %q: want the Go option and one appendonly finding", err, cerr.Unsafe)
	}
	if got := cerr.Describe("--redis-config-check warn"); !strings.Contains(got, "--redis-config-check warn runs anyway") || strings.Contains(got, "WithConfigCheck") {
		t.Errorf("Describe = %q", got)
	}
}
