package tokens_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/fencing-go/fencing/guard"
	"github.com/fencing-go/fencing/guard/internal/tokens"
)

// parse reads "resource=token".
func parse(v string) (string, uint64, error) {
	r, t, _ := strings.Cut(v, "=")
	n, err := strconv.ParseUint(t, 10, 64)
	return r, n, err
}

func TestParse(t *testing.T) {
	got, err := tokens.Parse([]string{"c=3", "a=1", "b=2", "a=1"}, parse)
	want := []guard.Token{{Resource: "a", Value: 1}, {Resource: "b", Value: 2}, {Resource: "c", Value: 3}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("Parse = %v, %v; want %v (sorted, a=1 once)", got, err, want)
	}
	if got, err := tokens.Parse([]string{"b=2", "a=1", "b=3"}, parse); !errors.Is(err, tokens.ErrConflict) || !strings.Contains(err.Error(), `2 and 3 for resource "b"`) {
		t.Fatalf("b with 2 and 3: %v, %v; want ErrConflict naming them", got, err)
	}
	if _, err := tokens.Parse([]string{"a=1", "b=x"}, parse); err == nil || errors.Is(err, tokens.ErrConflict) {
		t.Fatalf("a bad value: %v, want parse's error", err)
	}
}

// Parse takes guard.MaxTokensPerRequest values and refuses one more with
// ErrTooMany, saying the limit, before parsing any: a request past the cap
// costs no parse, no mint check and no write.
func TestParseTooMany(t *testing.T) {
	var vs []string
	for i := range guard.MaxTokensPerRequest + 1 {
		vs = append(vs, fmt.Sprintf("r%03d=%d", i, i+1))
	}
	calls := 0
	counting := func(v string) (string, uint64, error) { calls++; return parse(v) }
	got, err := tokens.Parse(vs[:guard.MaxTokensPerRequest], counting)
	if err != nil || len(got) != guard.MaxTokensPerRequest {
		t.Fatalf("%d values: %d tokens, %v; want all", guard.MaxTokensPerRequest, len(got), err)
	}
	calls = 0
	got, err = tokens.Parse(vs, counting)
	limit := fmt.Sprintf("at most %d", guard.MaxTokensPerRequest)
	if !errors.Is(err, tokens.ErrTooMany) || !strings.Contains(err.Error(), limit) || got != nil || calls != 0 {
		t.Fatalf("%d values: %v, %v, %d values parsed; want ErrTooMany saying %q, none parsed", len(vs), got, err, calls, limit)
	}
	// Repeating one value does not get past the cap either.
	same := make([]string, guard.MaxTokensPerRequest+1)
	for i := range same {
		same[i] = "a=1"
	}
	if _, err := tokens.Parse(same, parse); !errors.Is(err, tokens.ErrTooMany) {
		t.Fatalf("%d copies of one value: %v, want ErrTooMany", len(same), err)
	}
}

// order is a guard.Writer over a guard.Memory that records the order in
// which its writes start.
type order struct {
	*guard.Memory
	started []string
}

func (o *order) Write(ctx context.Context, resource string, token uint64, write func() error) error {
	o.started = append(o.started, resource)
	return o.Memory.Write(ctx, resource, token, write)
}

// Write takes the resources in resource order, whatever order the values
// came in, so two requests cannot take two locks in opposite orders; a
// stale token refuses the write, and no fence rises.
func TestWrite(t *testing.T) {
	ctx := context.Background()
	w := &order{Memory: guard.NewMemory()}
	toks, err := tokens.Parse([]string{"c=3", "a=1", "b=2"}, parse)
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	if err := tokens.Write(ctx, w, toks, func() error { calls++; return nil }); err != nil || calls != 1 {
		t.Fatalf("Write: %v, %d calls", err, calls)
	}
	if want := []string{"a", "b", "c"}; !reflect.DeepEqual(w.started, want) {
		t.Fatalf("writes started in order %v, want %v", w.started, want)
	}
	if w.Fence("a") != 1 || w.Fence("b") != 2 || w.Fence("c") != 3 {
		t.Fatalf("fences %d %d %d, want 1 2 3", w.Fence("a"), w.Fence("b"), w.Fence("c"))
	}
	stale := []guard.Token{{Resource: "a", Value: 5}, {Resource: "b", Value: 1}, {Resource: "c", Value: 7}}
	err = tokens.Write(ctx, w, stale, func() error { calls++; return nil })
	if !errors.Is(err, guard.ErrStaleToken) || calls != 1 || w.Fence("a") != 1 || w.Fence("c") != 3 {
		t.Fatalf("b stale: %v, %d calls, fences a %d c %d; want ErrStaleToken, 1 call, 1 and 3", err, calls, w.Fence("a"), w.Fence("c"))
	}
}
