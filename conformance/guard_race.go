package conformance

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fencing-go/fencing/guard"
)

// Sizes of the racing-writers case: a few resources, many writers.
const (
	raceResources = 3
	raceTokens    = 40 // per resource: tokens 1..raceTokens, each used once
	raceWriters   = 8
	raceJitter    = 6
)

type raceKind int

const (
	raceWrite raceKind = iota
	raceAdmit
	raceFailed
)

// raceOp is one write, Admit or failed write, and what became of it.
type raceOp struct {
	resource   string
	token      uint64
	kind       raceKind
	at         float64 // place in the arrival order
	start, end time.Time
	err        error
}

func raceValue(resource string, token uint64) string { return fmt.Sprintf("%s#%d", resource, token) }

// testRacingWriters races writers over a few resources, with every token
// of a resource used once, roughly in order (so lower tokens often arrive
// just after higher ones), mixing writes, bare Admits (takeover fences) and
// failed writes, while a reader per resource keeps reading. It then checks
// the outcome against the order in which the operations ran.
func testRacingWriters(t *testing.T, s GuardStore) {
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 0))
	t.Logf("seed %d", seed)
	// Tokens arrive roughly in order, each up to raceJitter places early or
	// late, as when holders take over one after another and a stalled one
	// writes late.
	var ops []*raceOp
	for r := range raceResources {
		for tok := range uint64(raceTokens) {
			kind := raceWrite
			switch n := rng.IntN(10); {
			case n < 2:
				kind = raceAdmit
			case n < 4:
				kind = raceFailed
			}
			at := float64(tok) + rng.Float64()*raceJitter
			ops = append(ops, &raceOp{resource: fmt.Sprintf("race-%d", r), token: tok + 1, kind: kind, at: at})
		}
	}
	slices.SortFunc(ops, func(a, b *raceOp) int { return cmp.Compare(a.at, b.at) })

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	queue := make(chan *raceOp, len(ops))
	for _, op := range ops {
		queue <- op
	}
	close(queue)
	var writers sync.WaitGroup
	for range raceWriters {
		writers.Go(func() {
			for op := range queue {
				op.start = time.Now()
				switch op.kind {
				case raceWrite:
					op.err = s.Write(ctx, op.resource, op.token, raceValue(op.resource, op.token))
				case raceAdmit:
					op.err = s.Admit(ctx, op.resource, op.token)
				case raceFailed:
					op.err = s.FailedWrite(ctx, op.resource, op.token, raceValue(op.resource, op.token)+" (failed)")
				}
				op.end = time.Now()
			}
		})
	}
	stopReading := make(chan struct{})
	seen := make([][]string, raceResources)
	readErrs := make([]error, raceResources)
	var readers sync.WaitGroup
	for r := range raceResources {
		readers.Go(func() {
			for {
				select {
				case <-stopReading:
					return
				default:
				}
				v, err := s.Read(ctx, fmt.Sprintf("race-%d", r))
				if err != nil {
					readErrs[r] = err
					return
				}
				if n := len(seen[r]); v != "" && (n == 0 || seen[r][n-1] != v) {
					seen[r] = append(seen[r], v)
				}
			}
		})
	}
	writers.Wait()
	close(stopReading)
	readers.Wait()
	for _, err := range readErrs {
		if err != nil {
			t.Fatalf("Read during the race: %v", err)
		}
	}

	byResource := make(map[string][]*raceOp)
	for _, op := range ops {
		byResource[op.resource] = append(byResource[op.resource], op)
	}
	for r := range raceResources {
		resource := fmt.Sprintf("race-%d", r)
		checkRace(t, s, resource, byResource[resource], seen[r])
	}
}

// checkRace checks one resource's operations after the race.
func checkRace(t *testing.T, s GuardStore, resource string, ops []*raceOp, seen []string) {
	t.Helper()
	var admitted []*raceOp
	var highestWrite *raceOp
	written := make(map[string]uint64) // value -> token, for admitted writes
	for _, op := range ops {
		switch {
		case op.kind == raceFailed && op.err == nil:
			t.Errorf("%s: failed write with token %d returned nil", resource, op.token)
		case op.kind == raceFailed, errors.Is(op.err, guard.ErrStaleToken):
		case op.err != nil:
			t.Errorf("%s: token %d: %v", resource, op.token, op.err)
		default:
			admitted = append(admitted, op)
			if op.kind == raceWrite {
				written[raceValue(resource, op.token)] = op.token
				if highestWrite == nil || op.token > highestWrite.token {
					highestWrite = op
				}
			}
		}
	}
	// Every admitted token is above every token admitted before it started.
	for _, a := range admitted {
		for _, b := range admitted {
			if a.end.Before(b.start) && a.token > b.token {
				t.Errorf("%s: token %d was admitted after token %d had been", resource, b.token, a.token)
			}
		}
	}
	// Every refusal is explained by a higher token admitted before it ended
	// (so neither a failed write nor a refusal moved the fence).
	for _, op := range ops {
		if !errors.Is(op.err, guard.ErrStaleToken) {
			continue
		}
		explained := false
		for _, a := range admitted {
			if a.token > op.token && a.start.Before(op.end) {
				explained = true
				break
			}
		}
		if !explained {
			t.Errorf("%s: token %d was refused, but no higher token was admitted before", resource, op.token)
		}
	}
	// Readers saw only admitted writes, in token order.
	var last uint64
	for _, v := range seen {
		tok, ok := written[v]
		if !ok {
			t.Errorf("%s: a reader saw %q, which no admitted write wrote", resource, v)
			continue
		}
		if tok < last {
			t.Errorf("%s: a reader saw token %d's value after token %d's", resource, tok, last)
		}
		last = tok
	}
	// The value is the highest admitted write's, and the fence is the
	// highest admitted token exactly.
	want := ""
	if highestWrite != nil {
		want = raceValue(resource, highestWrite.token)
	}
	ctx := context.Background()
	got, err := s.Read(ctx, resource)
	if err != nil {
		t.Fatalf("%s: Read: %v", resource, err)
	}
	if got != want {
		t.Errorf("%s: value %q after the race, want %q (the highest admitted write)", resource, got, want)
	}
	var fence uint64
	for _, a := range admitted {
		fence = max(fence, a.token)
	}
	if fence == 0 {
		return
	}
	if fence > 1 {
		if err := s.Admit(ctx, resource, fence-1); !errors.Is(err, guard.ErrStaleToken) {
			t.Errorf("%s: Admit(%d) below the highest admitted token %d: got %v, want ErrStaleToken", resource, fence-1, fence, err)
		}
	}
	if err := s.Admit(ctx, resource, fence); err != nil {
		t.Errorf("%s: Admit(%d), the highest admitted token, after the race: %v (did a failed write move the fence?)", resource, fence, err)
	}
	t.Logf("%s: %d operations, %d admitted, %d values seen by the reader, fence %d", resource, len(ops), len(admitted), len(seen), fence)
}
