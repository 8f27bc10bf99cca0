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
		"REJECTED: stale fencing token: token 1 is below 2",
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

func TestStore(t *testing.T) {
	s := newStore(true)
	steps := []struct {
		token uint64
		value string
		ok    bool
	}{{5, "a", true}, {5, "b", true}, {7, "c", true}, {6, "d", false}, {1, "e", false}, {8, "f", true}}
	for _, st := range steps {
		err := s.Write("r", st.token, st.value)
		if st.ok != (err == nil) || (err != nil && !errors.Is(err, errStaleToken)) {
			t.Fatalf("Write(token %d): err = %v, want ok = %v", st.token, err, st.ok)
		}
	}
	if got := s.Read("r"); got != "f" {
		t.Errorf("value = %q, want f", got)
	}
	if err := s.Write("other", 1, "x"); err != nil {
		t.Errorf("tokens leaked across records: %v", err)
	}
	plain := newStore(false)
	plain.Write("r", 9, "new")
	if err := plain.Write("r", 1, "old"); err != nil || plain.Read("r") != "old" {
		t.Errorf("unfenced store: %v, value %q; want the old write to clobber", err, plain.Read("r"))
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
