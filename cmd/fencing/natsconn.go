package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/pflag"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/natsbackend"
)

// natsFlags reach the NATS servers of the nats backend.
type natsFlags struct {
	url    string
	bucket string
	creds  string
	check  string
}

// add declares --nats-url, --nats-bucket, --nats-creds and --nats-check,
// with their environment variables.
func (f *natsFlags) add(fs *pflag.FlagSet) {
	fs.StringVar(&f.url, "nats-url", "", "NATS server URLs of the nats backend, comma separated (nats://host:4222)")
	fs.StringVar(&f.bucket, "nats-bucket", "fencing", "the JetStream key-value `bucket` of the nats backend (it must exist: nats kv add fencing --replicas 3)")
	fs.StringVar(&f.creds, "nats-creds", "", "NATS credentials `file` (a user JWT and its NKey seed)")
	fs.StringVar(&f.check, "nats-check", "refuse", "what to do about a bucket that can lose tokens (memory storage, one replica, a TTL): refuse, warn or ignore")
	for _, n := range []string{"nats-url", "nats-bucket", "nats-creds", "nats-check"} {
		fs.SetAnnotation(n, envAnnotation, []string{envName(n)})
	}
}

// openNATS connects to the NATS servers and checks the bucket's
// configuration (natsbackend.New's safety check).
func (f *connFlags) openNATS(ctx context.Context, s *session) error {
	if f.nats.url == "" {
		return fmt.Errorf("%w: the nats backend needs --nats-url (or FENCING_NATS_URL)", errUsage)
	}
	mode, err := checkMode("nats-check", f.nats.check)
	if err != nil {
		return err
	}
	s.where = fmt.Sprintf("NATS at %s (bucket %s)", f.nats.url, f.nats.bucket)
	opts := []nats.Option{nats.Name("fencing"), nats.Timeout(f.requestTimeout), nats.MaxReconnects(-1), nats.ReconnectWait(100 * time.Millisecond)}
	if f.nats.creds != "" {
		opts = append(opts, nats.UserCredentials(f.nats.creds))
	}
	nc, err := nats.Connect(f.nats.url, opts...)
	if err != nil {
		if errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) {
			return fmt.Errorf("%w: %s: %w", errAuth, s.where, err)
		}
		return s.reachError(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return fmt.Errorf("%w: %s: %w", errUsage, s.where, err)
	}
	cctx, cancel := context.WithTimeout(ctx, f.requestTimeout)
	defer cancel()
	b, err := natsbackend.New(cctx, js, f.nats.bucket,
		natsbackend.WithSafetyCheck(mode), natsbackend.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, nil))))
	if err != nil {
		nc.Close()
		var serr *natsbackend.SafetyError
		switch {
		case errors.As(err, &serr): // name this tool's flag, not the Go option
			return reworded{fmt.Sprintf("natsbackend: %v: %s (see docs/nats.md; --nats-check warn runs anyway)", backend.ErrUnsafeStore, strings.Join(serr.Unsafe, "; ")), err}
		case errors.Is(err, backend.ErrInvalidConfig):
			return fmt.Errorf("%w: %w", errUsage, err)
		}
		return s.reachError(err)
	}
	s.b, s.close = b, func() { b.Close(); nc.Close() }
	return nil
}
