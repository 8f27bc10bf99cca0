// Package kubetest starts a real etcd and kube-apiserver as child processes
// on loopback for tests: the binaries FENCING_KUBE_APISERVER and
// FENCING_ETCD name, or else the ones scripts/build-kube-binaries.sh builds
// from their Go modules into ~/.cache/fencing-test-bin on first use (about
// 11.5 CPU-minutes for kube-apiserver the first time, nothing after), so go
// test needs nothing but Go. When they can be had neither way (no script
// above the working directory, a failed build) a test skips with a message,
// or fails when CI is set.
//
// It serves the tests of kubebackend and of the fencing command's
// --backend kube, which lives in a module of its own and so cannot import an
// internal package of this one; a program that tests its own use of
// kubebackend against a real API server may use it too, as
// controller-runtime's envtest is used.
package kubetest

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/fencing-go/fencing/internal/testing/childproc"
)

// Tokens of the token-auth file: the admin (system:masters) sets up
// namespaces and RBAC; the user is what a fencing client runs as, with a
// Role on leases only.
const (
	adminToken = "fencing-admin-token"
	userToken  = "fencing-user-token"
	// User is the user name of the limited identity.
	User = "fencing-user"
)

// Binaries returns the paths of kube-apiserver and etcd (see the package
// doc: from the environment, the build cache, or built now), or skips t
// (fails it when CI is set) when they can be had neither way.
func Binaries(t testing.TB) (apiserver, etcd string) {
	t.Helper()
	apiserver, err := apiserverBinary()
	if err == nil {
		etcd, err = etcdBinary()
	}
	if err != nil {
		msg := fmt.Sprintf("kube-apiserver and etcd: %v\n(build them with eval \"$(scripts/build-kube-binaries.sh)\", which sets FENCING_KUBE_APISERVER and FENCING_ETCD)", err)
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return apiserver, etcd
}

// The binaries, found or built once per test binary (childproc.Binary).
var (
	apiserverBinary = sync.OnceValues(func() (string, error) {
		return childproc.Binary("kube-apiserver", "FENCING_KUBE_APISERVER")
	})
	etcdBinary = sync.OnceValues(func() (string, error) { return childproc.Binary("etcd", "FENCING_ETCD") })
)

// Etcd is an etcd server run as a child process.
type Etcd struct {
	URL  string
	proc *childproc.Proc
}

// Process is the etcd process (to stop or kill it).
func (e *Etcd) Process() *os.Process { return e.proc.Process() }

// APIServer is a kube-apiserver run as a child process.
type APIServer struct {
	URL     string
	dir     string
	args    []string
	bin     string
	proc    *childproc.Proc
	stopped bool
}

// Process is the kube-apiserver process.
func (a *APIServer) Process() *os.Process { return a.proc.Process() }

// Server is an etcd and a kube-apiserver on it.
type Server struct {
	Etcd *Etcd
	API  *APIServer
	// Admin is a client with every permission.
	Admin kubernetes.Interface
}

// StartEtcd starts etcd with its data in dir.
func StartEtcd(t testing.TB, bin, dir string) (*Etcd, error) {
	client, peer := childproc.FreePort(t), childproc.FreePort(t)
	curl, purl := "http://127.0.0.1:"+client, "http://127.0.0.1:"+peer
	cmd := exec.Command(bin,
		"--name=default", "--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls="+curl, "--advertise-client-urls="+curl,
		"--listen-peer-urls="+purl, "--initial-advertise-peer-urls="+purl,
		"--initial-cluster=default="+purl, "--log-level=error")
	p, err := childproc.Start(cmd, filepath.Join(dir, "etcd.log"))
	if err != nil {
		return nil, err
	}
	t.Cleanup(p.Stop)
	return &Etcd{URL: curl, proc: p}, p.WaitHTTP(curl+"/health", "", 2*time.Minute)
}

// StartAPIServer starts kube-apiserver on etcd, its files in dir (which a
// restart reuses: the same certificates and keys).
func StartAPIServer(t testing.TB, bin, dir, etcdURL string) (*APIServer, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	keyFile := filepath.Join(dir, "sa.key")
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		return nil, err
	}
	tokens := filepath.Join(dir, "tokens.csv")
	csv := adminToken + ",admin,admin-uid,system:masters\n" + userToken + "," + User + "," + User + "-uid\n"
	if err := os.WriteFile(tokens, []byte(csv), 0o600); err != nil {
		return nil, err
	}
	port := childproc.FreePort(t)
	a := &APIServer{URL: "https://127.0.0.1:" + port, dir: dir, bin: bin, args: []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1", "--secure-port=" + port,
		"--cert-dir=" + filepath.Join(dir, "certs"),
		"--advertise-address=127.0.0.1", "--endpoint-reconciler-type=none",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + keyFile,
		"--service-account-signing-key-file=" + keyFile,
		"--service-cluster-ip-range=10.0.0.0/24",
		"--token-auth-file=" + tokens,
		"--authorization-mode=RBAC",
	}}
	if err := a.Start(t); err != nil {
		return nil, err
	}
	t.Cleanup(a.Stop)
	return a, nil
}

// Start starts the API server's process (again, after Kill or Stop).
func (a *APIServer) Start(t testing.TB) error {
	var err error
	if a.proc, err = childproc.Start(exec.Command(a.bin, a.args...), filepath.Join(a.dir, "kube-apiserver.log")); err != nil {
		return err
	}
	a.stopped = false
	if err := a.proc.WaitHTTP(a.URL+"/readyz", adminToken, 3*time.Minute); err != nil {
		log, _ := os.ReadFile(filepath.Join(a.dir, "kube-apiserver.log"))
		if len(log) > 4000 {
			log = log[len(log)-4000:]
		}
		return fmt.Errorf("%w; the end of its log:\n%s", err, log)
	}
	return nil
}

// Kill sends SIGKILL to the API server and waits for it to exit.
func (a *APIServer) Kill() {
	a.proc.Kill()
	a.stopped = true
}

// Stop ends the API server (SIGTERM, then SIGKILL).
func (a *APIServer) Stop() {
	if !a.stopped {
		a.proc.Stop()
		a.stopped = true
	}
}

// Config returns a client configuration for the admin, or for User with
// user set.
func (a *APIServer) Config(user bool) *rest.Config {
	tok := adminToken
	if user {
		tok = userToken
	}
	return &rest.Config{
		Host:            a.URL,
		BearerToken:     tok,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true},
		QPS:             -1, // no client-side rate limit: tests measure the server
		Timeout:         30 * time.Second,
	}
}

// Start starts an etcd and a kube-apiserver for t, stopped when t ends.
func Start(t testing.TB) *Server {
	t.Helper()
	apiBin, etcdBin := Binaries(t)
	dir := t.TempDir()
	e, err := StartEtcd(t, etcdBin, dir)
	if err != nil {
		t.Fatalf("etcd: %v", err)
	}
	a, err := StartAPIServer(t, apiBin, filepath.Join(dir, "api"), e.URL)
	if err != nil {
		t.Fatalf("kube-apiserver: %v", err)
	}
	admin, err := kubernetes.NewForConfig(a.Config(false))
	if err != nil {
		t.Fatal(err)
	}
	return &Server{Etcd: e, API: a, Admin: admin}
}

var (
	sharedOnce sync.Once
	shared     *Server
	sharedErr  string
	sharedStop []func()
)

// Shared returns one server for the whole test binary, started by the
// first test that asks; Main stops it.
func Shared(t testing.TB) *Server {
	t.Helper()
	Binaries(t)
	sharedOnce.Do(func() {
		r := &cleanups{}
		defer func() {
			if p := recover(); p != nil {
				sharedErr = fmt.Sprint(p)
			}
		}()
		shared = Start(r)
		sharedStop = r.fns
	})
	if shared == nil {
		t.Fatalf("starting the shared kube-apiserver: %s", sharedErr)
	}
	return shared
}

// Main runs the tests and then stops the shared server: call it from
// TestMain.
func Main(m *testing.M) {
	code := m.Run()
	for i := len(sharedStop) - 1; i >= 0; i-- {
		sharedStop[i]()
	}
	os.Exit(code)
}

// Namespace creates a fresh namespace and a Role and RoleBinding that let
// User get, list, watch, create, update and delete leases there, and
// nothing else; it returns the namespace and a client acting as User.
func (s *Server) Namespace(t testing.TB) (string, kubernetes.Interface) {
	t.Helper()
	ctx := context.Background()
	var b [6]byte
	_, _ = rand.Read(b[:])
	ns := "t-" + hex.EncodeToString(b[:])
	if _, err := s.Admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "fencing"},
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{"coordination.k8s.io"},
			Resources: []string{"leases"},
			Verbs:     []string{"get", "list", "watch", "create", "update", "delete"},
		}},
	}
	if _, err := s.Admin.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create role: %v", err)
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "fencing"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "fencing"},
		Subjects:   []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: User}},
	}
	if _, err := s.Admin.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create role binding: %v", err)
	}
	user, err := kubernetes.NewForConfig(s.API.Config(true))
	if err != nil {
		t.Fatal(err)
	}
	// The authorizer learns of a new binding from its informer: wait
	// until the user can list leases there.
	for start := time.Now(); ; time.Sleep(50 * time.Millisecond) {
		_, err := user.CoordinationV1().Leases(ns).List(ctx, metav1.ListOptions{Limit: 1})
		if err == nil {
			break
		}
		if time.Since(start) > time.Minute {
			t.Fatalf("the user cannot list leases in %s a minute after its RoleBinding: %v", ns, err)
		}
	}
	return ns, user
}

// cleanups is a testing.TB for the shared server, whose cleanups run at
// the end of Main.
type cleanups struct {
	testing.TB
	fns []func()
}

func (c *cleanups) Helper()                   {}
func (c *cleanups) Cleanup(f func())          { c.fns = append(c.fns, f) }
func (c *cleanups) Fatalf(f string, a ...any) { panic(fmt.Sprintf(f, a...)) }
func (c *cleanups) Fatal(a ...any)            { panic(fmt.Sprint(a...)) }
func (c *cleanups) Skip(a ...any)             { panic(fmt.Sprint(a...)) }
func (c *cleanups) TempDir() string {
	d, err := os.MkdirTemp("", "kubetest")
	if err != nil {
		panic(err)
	}
	c.fns = append(c.fns, func() { os.RemoveAll(d) })
	return d
}
