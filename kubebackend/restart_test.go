package kubebackend_test

import (
	"context"
	"testing"
	"time"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/conformance"
	"github.com/fencing-go/fencing/kubebackend"
	"github.com/fencing-go/fencing/kubebackend/internal/kubetest"
)

// restarter kills kube-apiserver with SIGKILL and starts it again on the
// same etcd. The backend (the process using it) lives on: NewBackend hands
// out the one backend, so its observations survive as a process's would.
type restarter struct {
	srv *kubetest.Server
	b   *kubebackend.Backend
}

func (r *restarter) NewBackend(context.Context, testing.TB) (backend.Backend, error) {
	return keepOpen{r.b}, nil
}

func (r *restarter) Kill(testing.TB) { r.srv.API.Kill() }

func (r *restarter) Start(t testing.TB) {
	if err := r.srv.API.Start(t); err != nil {
		t.Fatalf("restart kube-apiserver: %v", err)
	}
}

func (r *restarter) Traits() conformance.Traits {
	return conformance.Traits{MinTTL: 2 * time.Second, Slack: 500 * time.Millisecond}
}

// keepOpen is the backend with a Close that leaves it open.
type keepOpen struct{ *kubebackend.Backend }

func (keepOpen) Close() error { return nil }

// TestKillAPIServer: kill -9 of kube-apiserver and a restart on the same
// etcd lose no token, no live lease and no expiry.
func TestKillAPIServer(t *testing.T) {
	srv := kubetest.Start(t)
	ns, client := srv.Namespace(t)
	b, err := kubebackend.New(client, ns)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	conformance.RunRestart(t, &restarter{srv: srv, b: b})
}
