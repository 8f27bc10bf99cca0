package childproc

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// Helper is the test binary run again as a child process that runs one test
// of its own (a helper test that acts only when its environment says so),
// talking to its parent over standard input and output.
type Helper struct {
	// Cmd is the child: signal its Process to stop, continue or kill it.
	Cmd *exec.Cmd
	// Stdin is the child's standard input.
	Stdin io.WriteCloser
	lines chan string
}

// StartHelper starts the test binary again, running only the test named
// test, with env ("NAME=value") added to its environment. The child is
// continued (in case the test stopped it), killed and reaped when t ends.
func StartHelper(t testing.TB, test string, env ...string) *Helper {
	t.Helper()
	return StartTestBinary(t, []string{"-test.run=^" + test + "$", "-test.count=1"}, env...)
}

// StartTestBinary starts the test binary again with args, and env ("NAME=value")
// added to its environment: for a package whose TestMain acts on its
// environment instead of a helper test. The child is continued (in case
// the test stopped it), killed and reaped when t ends.
func StartTestBinary(t testing.TB, args []string, env ...string) *Helper {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), env...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	h := &Helper{Cmd: cmd, Stdin: stdin, lines: make(chan string, 10)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			h.lines <- sc.Text()
		}
		close(h.lines)
		_, _ = io.Copy(io.Discard, out)
	}()
	return h
}

// Lines returns the child's lines of standard output, closed once it
// closes its output. A test reads them through Lines or Next, not both.
func (h *Helper) Lines() <-chan string { return h.lines }

// Next returns the child's next line of standard output ("" once it closed
// its output), failing t if none comes within limit.
func (h *Helper) Next(t testing.TB, limit time.Duration) string {
	t.Helper()
	select {
	case l := <-h.lines:
		return l
	case <-time.After(limit):
		t.Fatalf("the helper process printed nothing in %v", limit)
		return ""
	}
}
