package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
)

func TestDemoFlags(t *testing.T) {
	ctx := context.Background()
	var stdout, stderr bytes.Buffer
	if err := run(ctx, []string{"demo", "--key", "k", "--timeout", "3s", "--margin", "0s", "--pause", "4s"}, nil, &stdout, &stderr); err != nil {
		t.Fatalf("run demo: %v\n%s%s", err, stdout.String(), stderr.String())
	}
	if !strings.Contains(stdout.String(), `grant "k" for 3s -> token 1 (the coordinator keeps it until t=+3s`) {
		t.Errorf("flags not applied:\n%s", stdout.String())
	}
	for _, args := range [][]string{
		{"demo", "--pause", "11s"}, // not past timeout + margin
		{"demo", "extra"},
		{"demo", "--nosuchflag"},
		{"nosuchcommand"},
	} {
		stdout.Reset()
		stderr.Reset()
		if err := run(ctx, args, nil, &stdout, &stderr); !errors.Is(err, errUsage) {
			t.Errorf("run(%q): err = %v, want a usage error", args, err)
		}
	}
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"-h"}, {"help", "demo"}, {"demo", "-h"}} {
		var stdout, stderr bytes.Buffer
		if err := run(context.Background(), args, nil, &stdout, &stderr); err != nil {
			t.Errorf("run(%q): %v", args, err)
		}
		if !strings.Contains(stdout.String()+stderr.String(), "demo") {
			t.Errorf("run(%q) does not mention demo:\n%s%s", args, stdout.String(), stderr.String())
		}
	}
}
