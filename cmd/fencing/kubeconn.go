package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/pflag"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/kubebackend"
)

// kubeFlags reach the Kubernetes API server of the kube backend.
type kubeFlags struct {
	kubeconfig string
	context    string
	namespace  string
}

// add declares --kubeconfig, --kube-context and --kube-namespace, with
// their environment variables.
func (f *kubeFlags) add(fs *pflag.FlagSet) {
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig `file` of the kube backend (default: $KUBECONFIG, else ~/.kube/config, else the in-cluster service account)")
	fs.StringVar(&f.context, "kube-context", "", "the kubeconfig context of the kube backend (default: the current context)")
	fs.StringVar(&f.namespace, "kube-namespace", "", "the namespace of the kube backend's Leases (default: the context's, or the pod's in a cluster, else \"default\")")
	for _, n := range []string{"kubeconfig", "kube-context", "kube-namespace"} {
		fs.SetAnnotation(n, envAnnotation, []string{envName(n)})
	}
}

// openKube connects to the API server the kubeconfig (or the pod's
// service account) names, and checks that it answers and lets the user list
// Leases in the namespace.
func (f *connFlags) openKube(ctx context.Context, s *session) error {
	rules := clientcmd.NewDefaultClientConfigLoadingRules() // $KUBECONFIG, ~/.kube/config
	if f.kube.kubeconfig != "" {
		rules.ExplicitPath = f.kube.kubeconfig
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: f.kube.context})
	cfg, err := cc.ClientConfig() // falls back to the in-cluster configuration
	if err != nil {
		return fmt.Errorf("%w: the kube backend needs a kubeconfig (--kubeconfig, KUBECONFIG or ~/.kube/config) or to run in a pod: %w", errUsage, err)
	}
	ns := f.kube.namespace
	if ns == "" {
		if ns, _, err = cc.Namespace(); err != nil {
			return fmt.Errorf("%w: the kube backend's namespace: %w", errUsage, err)
		}
	}
	s.where = fmt.Sprintf("the Kubernetes API server at %s (namespace %s)", cfg.Host, ns)
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", errUsage, s.where, err)
	}
	// New's check, one list of a Lease, tells at once whether the server
	// answers, knows the credentials and lets this user read Leases
	// there; --request-timeout bounds it.
	cctx, cancel := context.WithTimeout(ctx, f.requestTimeout)
	defer cancel()
	var opts []kubebackend.Option
	if log := newKubeObservations(cfg.Host, ns); log != nil {
		// Every fencing process of this host times a Lease from when
		// the first of them saw its state: a grant retried in a shell
		// loop gets an abandoned key one lease after its first try.
		opts = append(opts, kubebackend.WithObservationLog(log))
	}
	b, err := kubebackend.New(cctx, client, ns, opts...)
	if errors.Is(err, backend.ErrInvalidConfig) {
		return fmt.Errorf("%w: %w", errUsage, err)
	} else if err != nil {
		return s.reachError(err)
	}
	s.b, s.close = b, func() { b.Close() }
	return nil
}

// kubeAuthError marks err errAuth or errPermission when the API server
// refused the credentials or the user's permission, else returns nil.
func kubeAuthError(err error) error {
	switch {
	case apierrors.IsUnauthorized(err):
		return errAuth
	case apierrors.IsForbidden(err):
		return errPermission
	}
	return nil
}
