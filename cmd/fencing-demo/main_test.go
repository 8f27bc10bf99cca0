package main

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// heavy are the module paths that the first command must not build: they
// are what a cold module cache spends minutes downloading.
var heavy = []string{"go.etcd.io/", "google.golang.org/grpc", "github.com/redis/", "modernc.org/", "github.com/jackc/", "github.com/spf13/", "go.uber.org/zap"}

// TestReadmeFirstCommandIsLight: the first "go run" of the README builds a
// package that imports none of the etcd, gRPC, Redis or SQL stacks.
func TestReadmeFirstCommandIsLight(t *testing.T) {
	readme, err := os.Open(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer readme.Close()
	pkg := ""
	for sc := bufio.NewScanner(readme); sc.Scan() && pkg == ""; {
		if f := strings.Fields(sc.Text()); len(f) >= 3 && f[0] == "go" && f[1] == "run" {
			pkg = f[2]
		}
	}
	if pkg == "" {
		t.Fatal("README.md has no go run command")
	}
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", filepath.Join("..", "..", pkg)).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, h := range heavy {
			if strings.HasPrefix(dep, h) {
				t.Errorf("README's first command (go run %s) builds %s", pkg, dep)
			}
		}
	}
}

func TestRun(t *testing.T) {
	ctx := context.Background()
	var stdout, stderr bytes.Buffer
	if code := run(ctx, nil, &stdout, &stderr); code != 0 || !strings.Contains(stdout.String(), "the stale write with token 1 was rejected") {
		t.Errorf("fencing-demo: exit %d\n%s%s", code, stdout.String(), stderr.String())
	}
	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"-fence=false"}, 1},
		{[]string{"-pause", "1s"}, 2},
		{[]string{"-nosuchflag"}, 2},
		{[]string{"extra"}, 2},
		{[]string{"-h"}, 0},
	} {
		stdout.Reset()
		stderr.Reset()
		if code := run(ctx, c.args, &stdout, &stderr); code != c.code {
			t.Errorf("fencing-demo %q: exit %d, want %d\n%s%s", c.args, code, c.code, stdout.String(), stderr.String())
		}
	}
}
