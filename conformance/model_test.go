package conformance

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencing-go/fencing/backend"
)

// Hand-made histories on one key, each call over [from, to] ms on a clock
// that is both real time and the coordinator's. Leases are 40ms + 10ms.
type hist struct{ ops []Op }

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func ms(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }

func (h *hist) add(op Op, from, to int) *hist {
	op.Key = cmpOr(op.Key, "k")
	op.Call, op.Return, op.CoordCall, op.CoordReturn = ms(from), ms(to), ms(from), ms(to)
	h.ops = append(h.ops, op)
	return h
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

const tout, marg = 40 * time.Millisecond, 10 * time.Millisecond

func (h *hist) grant(id string, token uint64, from, to int) *hist {
	return h.add(Op{Kind: OpGrant, LeaseID: id, Timeout: tout, Margin: marg,
		Lease: backend.Lease{Key: "k", LeaseID: id, Token: token, TTL: tout, Margin: marg}}, from, to)
}

func (h *hist) grantErr(id string, err error, from, to int) *hist {
	return h.add(Op{Kind: OpGrant, LeaseID: id, Timeout: tout, Margin: marg, Err: err}, from, to)
}

func (h *hist) renew(id string, token uint64, from, to int) *hist {
	return h.add(Op{Kind: OpRenew, LeaseID: id, Timeout: tout, Margin: marg,
		Lease: backend.Lease{Key: "k", LeaseID: id, Token: token, TTL: tout, Margin: marg}}, from, to)
}

func (h *hist) renewErr(id string, err error, from, to int) *hist {
	return h.add(Op{Kind: OpRenew, LeaseID: id, Timeout: tout, Margin: marg, Err: err}, from, to)
}

func (h *hist) release(id string, err error, from, to int) *hist {
	return h.add(Op{Kind: OpRelease, LeaseID: id, Err: err}, from, to)
}

func (h *hist) token(token uint64, from, to int) *hist {
	return h.add(Op{Kind: OpToken, Token: token, Live: token != 0}, from, to)
}

func TestModel(t *testing.T) {
	t.Setenv(VisualizationDirEnv, t.TempDir())
	lost := fmt.Errorf("lost: %w", backend.ErrOutcomeUnknown)
	h := func() *hist { return &hist{} }
	cases := []struct {
		name  string
		h     *hist
		slack time.Duration
		valid bool
	}{
		{"expiry then regrant", h().grant("a", 1, 0, 1).token(1, 10, 11).renew("a", 1, 20, 21).
			token(0, 80, 81).grant("b", 2, 82, 83).token(2, 90, 91), 0, true},
		{"release then regrant", h().grant("a", 1, 0, 1).release("a", nil, 10, 10).grant("b", 2, 20, 21), 0, true},
		{"a resent release and a resent grant", h().grant("a", 1, 0, 1).grant("a", 1, 2, 3).release("a", nil, 10, 11).
			release("a", nil, 12, 13).grantErr("a", backend.ErrLeaseNotFound, 14, 15), 0, true},
		{"token granted twice", h().grant("a", 1, 0, 1).release("a", nil, 2, 3).grant("b", 1, 100, 101), 0, false},
		{"tokens out of real-time order", h().grant("a", 2, 0, 1).release("a", nil, 2, 3).grant("b", 1, 100, 101), 0, false},
		{"a gap in dense tokens", h().grant("a", 1, 0, 1).release("a", nil, 2, 3).grant("b", 3, 100, 101), 0, false},
		{"grant while the earlier lease was live", h().grant("a", 1, 0, 1).grant("b", 2, 20, 21), 0, false},
		{"older lease seen live after a newer one", h().grant("a", 1, 0, 1).token(0, 60, 61).grant("b", 2, 62, 63).
			token(1, 70, 71), 0, false},
		{"token from no grant", h().grant("a", 1, 0, 1).token(7, 10, 11), 0, false},
		{"live after release", h().grant("a", 1, 0, 1).release("a", nil, 5, 6).token(1, 10, 11), 0, false},
		{"renewal after expiry", h().grant("a", 1, 0, 1).renew("a", 1, 60, 61), 0, false},
		{"late renewal refused", h().grant("a", 1, 0, 1).renewErr("a", backend.ErrLeaseExpired, 60, 61).token(0, 62, 63), 0, true},
		{"expired too soon", h().grant("a", 1, 10, 11).token(0, 30, 31), 0, false},
		// Exactly at the boundary, on a clock where call == return:
		// live on [grant, grant+50ms).
		{"live 1ns before the end", h().grant("a", 1, 0, 0).add(Op{Kind: OpToken, Token: 1, Live: true}, 0, 0).
			add(Op{Kind: OpToken, Token: 1, Live: true}, 49, 49), 0, true},
		{"expired at the end", h().grant("a", 1, 0, 0).token(0, 50, 50), 0, true},
		{"live at the end", h().grant("a", 1, 0, 0).token(1, 50, 50), 0, false},
		{"live at the end, within slack", h().grant("a", 1, 0, 0).token(1, 50, 50), time.Millisecond, true},
		{"expired 1ms before the end", h().grant("a", 1, 0, 0).token(0, 49, 49), 0, false},
		{"expired before the end, window overlaps", h().grant("a", 1, 0, 10).token(0, 45, 55), 0, true},
		{"lost grant took effect", h().grantErr("a", lost, 0, 1).token(1, 5, 6).grantErr("b", backend.ErrLeaseHeld, 7, 8), 0, true},
		{"lost grant did not take effect", h().grantErr("a", lost, 0, 1).token(0, 5, 6).grant("b", 1, 7, 8), 0, true},
		{"token after a lost grant skips its token", h().grantErr("a", lost, 0, 1).token(1, 5, 6).release("a", lost, 7, 8).
			token(0, 9, 10).grant("b", 1, 11, 12), 0, false},
		{"renewal changed the token", h().grant("a", 1, 0, 1).renew("a", 2, 5, 6), 0, false},
		{"release by a stranger ended the lease", h().grant("a", 1, 0, 1).release("x", nil, 5, 6), 0, false},
		{"stale renewal refused", h().grant("a", 1, 0, 1).release("a", nil, 2, 3).grant("b", 2, 4, 5).
			renewErr("a", backend.ErrLeaseNotFound, 6, 7).release("a", backend.ErrLeaseNotFound, 8, 9).token(2, 10, 11), 0, true},
		{"bad input refused", h().add(Op{Kind: OpGrant, Key: strings.Repeat("x", backend.MaxKeyLength+1), LeaseID: "a", Timeout: tout, Err: backend.ErrInvalidKey}, 0, 1).add(Op{Kind: OpGrant, Key: "k", LeaseID: "b", Err: backend.ErrInvalidTimeout}, 2, 3).
			grant("c", 1, 4, 5), 0, true},
		{"bad input accepted", h().add(Op{Kind: OpGrant, LeaseID: "b", Lease: backend.Lease{Key: "k", LeaseID: "b", Token: 1}}, 2, 3), 0, false},
		{"held tells of more time than the lease has", h().grant("a", 1, 0, 1).grantErr("b", &backend.HeldError{Remaining: time.Second}, 5, 6), 0, false},
		{"a closed backend changed nothing", h().grantErr("a", backend.ErrClosed, 0, 1).token(0, 2, 3), 0, true},
		{"a plain error that took effect", h().grantErr("a", backend.ErrClosed, 0, 1).token(1, 2, 3), 0, false},
	}
	for _, c := range cases {
		err := CheckHistory(c.h.ops, Traits{Slack: c.slack, DenseTokens: true})
		switch {
		case c.valid && err != nil:
			t.Errorf("%s: %v, want no violation", c.name, err)
		case !c.valid && (err == nil || !strings.Contains(err.Error(), `key "k"`)):
			t.Errorf("%s: %v, want a violation on key \"k\"", c.name, err)
		}
	}
}

// grantMany adds a GrantMany of keys by lease id over [from, to] ms: with
// err nil it returned tokens, one per key.
func (h *hist) grantMany(id string, keys []string, tokens []uint64, err error, from, to int) *hist {
	op := Op{Kind: OpGrantMany, Err: err}
	for i, k := range keys {
		op.Requests = append(op.Requests, backend.Request{Key: k, LeaseID: id, Timeout: tout, Margin: marg})
		if err == nil {
			op.Leases = append(op.Leases, backend.Lease{Key: k, LeaseID: id, Token: tokens[i], TTL: tout, Margin: marg})
		}
	}
	op.Call, op.Return, op.CoordCall, op.CoordReturn = ms(from), ms(to), ms(from), ms(to)
	h.ops = append(h.ops, op)
	return h
}

// on sets the key of the calls added by f.
func (h *hist) on(key string, f func(*hist)) *hist {
	n := len(h.ops)
	f(h)
	for i := n; i < len(h.ops); i++ {
		h.ops[i].Key = key
		h.ops[i].Lease.Key = key
	}
	return h
}

// TestModelGrantMany: a GrantMany takes all its keys at one moment, or
// none; its refusal names the first refusing key in key order.
func TestModelGrantMany(t *testing.T) {
	t.Setenv(VisualizationDirEnv, t.TempDir())
	lost := fmt.Errorf("lost: %w", backend.ErrOutcomeUnknown)
	ab := []string{"b", "a"} // not in key order
	heldB := &backend.ManyError{Index: 0, Err: &backend.HeldError{}}
	tok := func(token uint64, from, to int) func(*hist) {
		return func(h *hist) { h.token(token, from, to) }
	}
	grant := func(id string, token uint64, from, to int) func(*hist) {
		return func(h *hist) { h.grant(id, token, from, to) }
	}
	release := func(id string, from, to int) func(*hist) {
		return func(h *hist) { h.release(id, nil, from, to) }
	}
	h := func() *hist { return &hist{} }
	cases := []struct {
		name  string
		h     *hist
		valid bool
	}{
		{"granted together", h().grantMany("m", ab, []uint64{1, 1}, nil, 0, 1).on("a", tok(1, 2, 3)).on("b", tok(1, 2, 3)), true},
		{"one key seen taken, the other then free", h().grantMany("m", ab, []uint64{1, 1}, nil, 0, 10).
			on("a", tok(1, 2, 3)).on("b", tok(0, 4, 5)), false},
		{"refused, nothing taken", h().on("b", grant("x", 1, 0, 1)).grantMany("m", ab, nil, heldB, 2, 3).
			on("a", tok(0, 4, 5)).on("b", release("x", 6, 7)).grantMany("n", ab, []uint64{2, 1}, nil, 8, 9), true},
		{"refused, one key taken", h().on("b", grant("x", 1, 0, 1)).grantMany("m", ab, nil, heldB, 2, 3).
			on("a", tok(1, 4, 5)), false},
		{"refusal names a key after a refusing one", h().on("b", grant("x", 1, 0, 1)).on("a", grant("y", 1, 0, 1)).
			grantMany("m", ab, nil, heldB, 2, 3), false},
		{"refusal names the first refusing key", h().on("b", grant("x", 1, 0, 1)).on("a", grant("y", 1, 0, 1)).
			grantMany("m", ab, nil, &backend.ManyError{Index: 1, Err: &backend.HeldError{}}, 2, 3), true},
		{"a verdict that names no request", h().on("b", grant("x", 1, 0, 1)).
			grantMany("m", ab, nil, &backend.HeldError{}, 2, 3), false},
		{"granted over a held key", h().on("b", grant("x", 1, 0, 1)).grantMany("m", ab, []uint64{2, 1}, nil, 2, 3), false},
		{"lost, took effect on both", h().grantMany("m", ab, nil, lost, 0, 1).on("a", tok(1, 5, 6)).on("b", tok(1, 7, 8)), true},
		{"lost, took effect on one", h().grantMany("m", ab, nil, lost, 0, 1).on("a", tok(1, 5, 6)).on("b", tok(0, 7, 8)), false},
		{"resent, the same leases", h().grantMany("m", ab, []uint64{1, 1}, nil, 0, 1).grantMany("m", ab, []uint64{1, 1}, nil, 2, 3), true},
		{"a key twice, refused", h().grantMany("m", []string{"a", "a"}, nil, backend.ErrInvalidKey, 0, 1).on("a", tok(0, 2, 3)), true},
	}
	for _, c := range cases {
		err := CheckHistory(c.h.ops, Traits{DenseTokens: true})
		switch {
		case c.valid && err != nil:
			t.Errorf("%s: %v, want no violation", c.name, err)
		case !c.valid && (err == nil || !strings.Contains(err.Error(), `key "a"`) || !strings.Contains(err.Error(), `key "b"`)):
			t.Errorf("%s: %v, want a violation on keys \"a\" and \"b\"", c.name, err)
		}
	}
}

// TestModelRetention: with a retention of 100ms, a key whose lease ended
// that long before a call may read as never leased (an old ID not found, a
// resent grant a new lease, tokens with a gap), never earlier, and its
// tokens never go back.
func TestModelRetention(t *testing.T) {
	t.Setenv(VisualizationDirEnv, t.TempDir())
	lost := fmt.Errorf("lost: %w", backend.ErrOutcomeUnknown)
	h := func() *hist { return &hist{} }
	cases := []struct {
		name  string
		h     *hist
		valid bool
	}{
		{"reclaimed after a release: old ID not found", h().grant("a", 1, 0, 1).release("a", nil, 10, 11).
			release("a", backend.ErrLeaseNotFound, 110, 111).renewErr("a", backend.ErrLeaseNotFound, 112, 113), true},
		{"reclaimed before the retention", h().grant("a", 1, 0, 1).release("a", nil, 10, 11).
			release("a", backend.ErrLeaseNotFound, 100, 101), false},
		{"a resent grant after the reclaim gets a new lease", h().grant("a", 1, 0, 1).release("a", nil, 10, 11).
			grant("a", 7, 200, 201).token(7, 202, 203), true},
		{"a resent grant before the retention gets a new lease", h().grant("a", 1, 0, 1).release("a", nil, 10, 11).
			grant("a", 7, 50, 51), false},
		{"a token reissued after the reclaim", h().grant("a", 1, 0, 1).grant("a", 1, 2, 3).release("a", nil, 10, 11).
			grant("b", 1, 200, 201), false},
		{"reclaimed after an expiry", h().grant("a", 1, 0, 1).grantErr("a", backend.ErrLeaseExpired, 60, 61).
			renewErr("a", backend.ErrLeaseNotFound, 151, 151).grant("b", 3, 152, 153), true},
		{"reclaimed before the expiry's retention", h().grant("a", 1, 0, 1).
			renewErr("a", backend.ErrLeaseNotFound, 140, 140), false},
		{"a lost grant's token reissued after a reclaim", h().grant("a", 1, 0, 1).release("a", nil, 2, 3).
			grantErr("b", lost, 4, 5).token(2, 10, 11).token(0, 100, 101).grant("c", 2, 300, 301), false},
		{"a lost grant's token, then a reclaim and a higher one", h().grant("a", 1, 0, 1).release("a", nil, 2, 3).
			grantErr("b", lost, 4, 5).token(2, 10, 11).token(0, 100, 101).grant("c", 9, 300, 301), true},
		{"a never-leased key starts above the floor", h().grant("a", 5, 0, 1), true},
	}
	for _, c := range cases {
		err := CheckHistory(c.h.ops, Traits{DenseTokens: true, Retention: 100 * time.Millisecond})
		switch {
		case c.valid && err != nil:
			t.Errorf("%s: %v, want no violation", c.name, err)
		case !c.valid && (err == nil || !strings.Contains(err.Error(), `key "k"`)):
			t.Errorf("%s: %v, want a violation on key \"k\"", c.name, err)
		}
	}
	// Without a retention, the same reclaiming histories are violations.
	if err := CheckHistory(cases[0].h.ops, Traits{DenseTokens: true}); err == nil {
		t.Errorf("%s, with no retention: no violation, want one", cases[0].name)
	}
}
