package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/memorybackend"
)

// stats reports what the backend's Sizer reports, before and after a
// reclaim, and prints it.
func TestStats(t *testing.T) {
	ctx := context.Background()
	clock := memorybackend.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	mem := memorybackend.New(memorybackend.WithClock(clock), memorybackend.WithRetention(time.Second))
	defer mem.Close()
	s := &session{c: fencing.New(mem), b: mem, name: "memory", where: "the in-memory backend", timeout: time.Minute}
	cycle := func(key string) {
		t.Helper()
		l, err := s.c.Grant(ctx, key, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.c.Release(ctx, key, l.ID); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []string{"a", "b", "c"} {
		cycle(k)
	}
	st, err := s.stats(ctx)
	if want := (statsJSON{Backend: "memory", Records: 3}); err != nil || st != want {
		t.Fatalf("stats = %+v, %v; want %+v", st, err, want)
	}
	clock.Advance(2 * time.Second) // past the retention: grants on another key reclaim a, b, c
	for i := 0; st.Reclaimed < 3; i++ {
		if i == 1000 {
			t.Fatalf("stats = %+v after %d grants past the retention, want 3 reclaimed", st, i)
		}
		cycle("d")
		if st, err = s.stats(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if want := (statsJSON{Backend: "memory", Records: 1, Reclaimed: 3}); st != want {
		t.Fatalf("stats after the reclaim = %+v, want %+v", st, want)
	}
	var out bytes.Buffer
	if err := printStats(&out, st); err != nil {
		t.Fatal(err)
	}
	if want := "backend    memory\nrecords    1\nreclaimed  3 (by this process)\n"; out.String() != want {
		t.Errorf("printed:\n%s\nwant:\n%s", out.String(), want)
	}
}

// onlyBackend hides every capability of the backend it wraps.
type onlyBackend struct{ backend.Backend }

func TestStatsWithoutSizer(t *testing.T) {
	mem := memorybackend.New()
	defer mem.Close()
	s := &session{c: fencing.New(onlyBackend{mem}), b: onlyBackend{mem}, name: "mine", timeout: time.Minute}
	if _, err := s.stats(context.Background()); !errors.Is(err, errNoSize) {
		t.Fatalf("stats of a backend with no Sizer: %v, want errNoSize", err)
	}
}

func TestStatsCommand(t *testing.T) {
	ctx := context.Background()
	var stdout, stderr bytes.Buffer
	if err := run(ctx, []string{"stats", "--backend", "memory", "--json"}, nil, &stdout, &stderr); err != nil {
		t.Fatalf("stats --json: %v\n%s", err, stderr.String())
	}
	var st statsJSON
	if err := json.Unmarshal(stdout.Bytes(), &st); err != nil || st != (statsJSON{Backend: "memory"}) {
		t.Fatalf("stats --json printed %q (%v), want a fresh in-memory store's size", stdout.String(), err)
	}
	stdout.Reset()
	if err := run(ctx, []string{"stats", "--backend", "memory"}, nil, &stdout, &stderr); err != nil {
		t.Fatalf("stats: %v\n%s", err, stderr.String())
	}
	if want := "backend    memory\nrecords    0\nreclaimed  0 (by this process)\n"; stdout.String() != want {
		t.Errorf("stats printed:\n%s\nwant:\n%s", stdout.String(), want)
	}
	if err := run(ctx, []string{"stats", "extra"}, nil, &stdout, &stderr); !errors.Is(err, errUsage) {
		t.Errorf("stats with an argument: %v, want a usage error", err)
	}
}
