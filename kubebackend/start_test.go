package kubebackend_test

import (
	"context"
	"errors"
	"net"
	"testing"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/kubebackend"
	"github.com/fencing-go/fencing/kubebackend/kubetest"
)

// TestNewErrors: New reports a bad configuration and a failed check with
// package backend's sentinels, as every backend does (backend's
// TestNewErrorsShared holds the others to the same).
func TestNewErrors(t *testing.T) {
	ctx := context.Background()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := closed.Addr().String()
	closed.Close()
	nowhere, err := kubernetes.NewForConfig(&rest.Config{Host: "http://" + addr})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		client kubernetes.Interface
		ns     string
		opts   []kubebackend.Option
		want   error
	}{
		{"NilClient", nil, "ns", nil, backend.ErrInvalidConfig},
		{"EmptyNamespace", nowhere, "", nil, backend.ErrInvalidConfig},
		{"UnknownCheckMode", nowhere, "ns", []kubebackend.Option{kubebackend.WithSafetyCheck(42)}, backend.ErrInvalidConfig},
		{"NilClock", nowhere, "ns", []kubebackend.Option{kubebackend.WithClock(nil)}, backend.ErrInvalidConfig},
		{"Unreachable", nowhere, "ns", nil, backend.ErrUnreachable},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := kubebackend.New(ctx, c.client, c.ns, c.opts...); !errors.Is(err, c.want) {
				t.Fatalf("New: %v, want %v", err, c.want)
			}
		})
	}
	if b, err := kubebackend.New(ctx, nowhere, "ns", kubebackend.WithSafetyCheck(backend.CheckSkip)); err != nil {
		t.Fatalf("New with CheckSkip: %v", err)
	} else {
		b.Close()
	}
}

// TestNewRefused: a user the API server refuses, or one without a Role in
// the namespace, fails New with ErrAuthRefused or ErrPermissionDenied,
// in CheckWarn too.
func TestNewRefused(t *testing.T) {
	srv := kubetest.Shared(t)
	ns, client := srv.Namespace(t)
	ctx := context.Background()
	b, err := kubebackend.New(ctx, client, ns)
	if err != nil {
		t.Fatalf("New on a namespace the user may use: %v", err)
	}
	b.Close()
	cfg := srv.API.Config(true)
	cfg.BearerToken = "not-a-token"
	stranger, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []backend.CheckMode{backend.CheckRefuse, backend.CheckWarn} {
		if _, err := kubebackend.New(ctx, client, "default", kubebackend.WithSafetyCheck(mode)); !errors.Is(err, backend.ErrPermissionDenied) {
			t.Errorf("%v: New on a namespace without a Role: %v, want ErrPermissionDenied", mode, err)
		}
		if _, err := kubebackend.New(ctx, stranger, ns, kubebackend.WithSafetyCheck(mode)); !errors.Is(err, backend.ErrAuthRefused) {
			t.Errorf("%v: New with a bad token: %v, want ErrAuthRefused", mode, err)
		}
	}
}
