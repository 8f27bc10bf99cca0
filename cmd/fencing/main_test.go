package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestDemoRejectsStaleWrite(t *testing.T) {
	var out bytes.Buffer
	if err := demo(context.Background(), &out, defaultDemoConfig()); err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	text := out.String()
	for _, want := range []string{
		"-> token 1",
		"-> token 2",
		`write "B's value" with token 2 -> accepted`,
		`REJECTED: fencing: stale token: token 1 is below 2, the fence of resource "orders/42"`,
		`"orders/42" = "B's value"`,
		`both accepted, "orders/42" = "A's value"`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
}

func TestDemoWithoutFencingFails(t *testing.T) {
	cfg := defaultDemoConfig()
	cfg.fence = false
	var out bytes.Buffer
	err := demo(context.Background(), &out, cfg)
	if err == nil {
		t.Fatalf("demo without fencing returned nil:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "ACCEPTED") {
		t.Errorf("output does not show the stale write accepted:\n%s", out.String())
	}
}

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

// The demo runs on a fake clock: day-long leases and pauses take no real time.
func TestDemoLongLeases(t *testing.T) {
	cfg := defaultDemoConfig()
	cfg.timeout, cfg.pause = 24*time.Hour, 48*time.Hour
	var out bytes.Buffer
	if err := demo(context.Background(), &out, cfg); err != nil {
		t.Fatalf("demo with day-long leases: %v", err)
	}
}
