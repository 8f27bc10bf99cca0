package demo

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
	if err := Run(context.Background(), &out, DefaultConfig()); err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	text := out.String()
	for _, want := range []string{
		"-> token 1",
		"-> token 2",
		`write "B's value" with token 2 -> accepted`,
		`REJECTED: stale token: token 1 is below 2, the fence of resource "orders/42"`,
		`"orders/42" = "B's value"`,
		`both accepted, "orders/42" = "A's value"`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
}

func TestDemoWithoutFencingFails(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Fence = false
	var out bytes.Buffer
	err := Run(context.Background(), &out, cfg)
	if err == nil {
		t.Fatalf("demo without fencing returned nil:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "ACCEPTED") {
		t.Errorf("output does not show the stale write accepted:\n%s", out.String())
	}
}

// The demo runs on a fake clock: day-long leases and pauses take no real time.
func TestDemoLongLeases(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Timeout, cfg.Pause = 24*time.Hour, 48*time.Hour
	var out bytes.Buffer
	if err := Run(context.Background(), &out, cfg); err != nil {
		t.Fatalf("demo with day-long leases: %v", err)
	}
}

func TestRunRefusesAShortPause(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Pause = cfg.Timeout
	if err := Run(context.Background(), new(bytes.Buffer), cfg); !errors.Is(err, ErrUsage) {
		t.Fatalf("Run with a pause within the lease: %v, want ErrUsage", err)
	}
}
