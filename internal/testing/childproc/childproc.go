// Package childproc runs a test's servers as child processes: started with
// their output in a log file and killed if the test process dies
// (Pdeathsig), stopped with SIGTERM (SIGKILL if they linger), waited on over
// HTTP until they serve. It serves the harnesses that run servers built from
// their Go modules (internal/testing/etcdtest, kubebackend/kubetest), and
// tests that run their own test binary again as a second process to stop,
// continue or kill (StartHelper, StartTestBinary).
package childproc

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// stopGrace is how long Stop waits after SIGTERM before it sends SIGKILL.
const stopGrace = 10 * time.Second

// Proc is a started child process.
type Proc struct {
	cmd  *exec.Cmd
	exit chan struct{}
}

// Start starts cmd with its standard output and error appended to logFile,
// and SIGKILL as its parent-death signal, so that it never outlives the
// test process.
func Start(cmd *exec.Cmd, logFile string) (*Proc, error) {
	f, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, err
	}
	p := &Proc{cmd: cmd, exit: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(p.exit)
	}()
	return p, nil
}

// Process is the child's process (to signal it: SIGSTOP, SIGKILL...).
func (p *Proc) Process() *os.Process { return p.cmd.Process }

// Exited is closed when the process has exited.
func (p *Proc) Exited() <-chan struct{} { return p.exit }

// Kill sends SIGKILL and waits for the process to exit.
func (p *Proc) Kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exit
}

// Stop sends SIGTERM (and SIGCONT, in case the process is stopped) and
// waits for the process to exit, sending SIGKILL if it has not within 10
// seconds.
func (p *Proc) Stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	select {
	case <-p.exit:
	case <-time.After(stopGrace):
		p.Kill()
	}
}

// WaitHTTP polls url (GET, with token as a bearer token when not empty)
// until it answers 200, the process exits or limit passes. Certificates are
// not verified: the servers are the test's own.
func (p *Proc) WaitHTTP(url, token string, limit time.Duration) error {
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true},
		DisableKeepAlives: true,
	}}
	deadline := time.Now().Add(limit)
	for {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("status %s", resp.Status)
		}
		select {
		case <-p.exit:
			return fmt.Errorf("%s: the process exited before it was ready", url)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %v (last error %v)", url, limit, err)
		}
	}
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("childproc: find a free port: %v", err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// Binary returns the path of a server that scripts/build-kube-binaries.sh
// builds from its Go module under testimages/ (name: etcd, etcdutl or
// kube-apiserver): the path in the environment variable env when it is set,
// and otherwise the one the script prints after building it into its cache
// (minutes the first time, nothing after). The script is found in the
// repository holding the working directory (a test's package directory).
func Binary(name, env string) (string, error) {
	if p := os.Getenv(env); p != "" {
		if st, err := os.Stat(p); err != nil || st.IsDir() {
			return "", fmt.Errorf("childproc: %s=%s is not a file", env, p)
		}
		return p, nil
	}
	script, err := buildScript()
	if err != nil {
		return "", err
	}
	var stderr strings.Builder
	cmd := exec.Command("bash", script, name)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("childproc: %s %s: %w\n%s", script, name, err, stderr.String())
	}
	prefix := "export " + env + "="
	for line := range strings.Lines(string(out)) {
		if p, ok := strings.CutPrefix(strings.TrimSpace(line), prefix); ok {
			return p, nil
		}
	}
	return "", fmt.Errorf("childproc: %s %s printed no %s:\n%s", script, name, env, out)
}

// buildScript finds scripts/build-kube-binaries.sh in the working directory
// or the nearest directory above it that has one.
func buildScript() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		p := filepath.Join(dir, "scripts", "build-kube-binaries.sh")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", errors.New("childproc: no scripts/build-kube-binaries.sh in the working directory or above it")
		}
		dir = up
	}
}
