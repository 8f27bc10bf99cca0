package conformance

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/fencing-go/fencing/backend"
)

// The sequential model a history is checked against: one lease register per
// key, with the contract of package backend.
//
// # Time
//
// Expiry is the one step the model takes without a call. A lease granted or
// renewed by a call that ran over [c, r] on the coordinator's clock was
// processed at some p in [c, r], and ends at p + Timeout + Margin, or later
// (a backend may keep a lease up to Traits.Slack longer, never shorter). So
// its end E lies in
//
//	lo = c + Timeout + Margin  <=  E  <=  hi = r + TTL + Margin + Slack
//
// with TTL the timeout granted (>= Timeout). A later call on the key, run
// over [c', r'], may see the lease expired only if r' >= lo (it may have
// been processed at or after the earliest end), and may see it live only if
// c' < hi (processed before the latest end). When both hold the model tries
// both. A lease is live on [grant, E): a call processed at E sees it
// expired. This is exact on a fake clock (c = r, Slack 0) and never stricter
// than the contract on a real one.
//
// The two choices need no "current time" in the state: porcupine only
// places a call after another when the first one's call is before the
// second one's return, and that is all the windows need.
//
// # Retention
//
// With a retention d (Traits.Retention), a key whose lease ended may be
// reclaimed before a call processed at least d after the end: its register
// then reads as a key never leased (any ID may grant; an old ID renews and
// releases to ErrLeaseNotFound), except that minted stays, so the next
// token is still above every earlier one (and need not be the next one
// with dense tokens). The end's earliest moment is kept: the call that
// ended it was sent at or after it (a release, a forced release), or the
// window's lo (an expiry). Reclaiming is a choice, never a duty: the model
// tries the key both ways.
//
// # Unknown outcomes
//
// A call whose error wraps backend.ErrOutcomeUnknown may have taken effect
// at any later moment (a delayed request), so its return is put at the end
// of history and the model tries both outcomes. A grant that may have taken
// effect leaves a lease whose token is unknown until a later call shows it;
// a renewal that may have taken effect leaves hi unbounded. Any other error
// that is not a verdict (a done context, a closed backend) means the call did
// not take effect, as package backend requires.

type status uint8

const (
	free     status = iota // never leased
	live                   // the most recent lease may be live (see lo, hi)
	released               // released by its holder
	forced                 // ended by ForceRelease
	expired                // its time ran out
)

func (s status) String() string {
	return [...]string{"free", "live", "released", "forced", "expired"}[s]
}

// keyState is one key's register. It is comparable, as porcupine's default
// equality needs.
type keyState struct {
	id string // most recent lease's ID; "" when never leased
	// token is the most recent lease's token; 0 when a grant whose outcome
	// was unknown made the lease and no call has shown its token yet.
	token uint64
	// minted is the highest token minted on the key, or, while token is
	// 0, the lowest token the unknown lease can have.
	minted    uint64
	status    status
	lo, hi    int64 // live: the window of the lease's end, coordinator ns
	exhausted bool  // a grant failed with ErrTokenSpaceExhausted
	// endLo is, once the lease ended and a retention is set, the earliest
	// moment it can have ended (coordinator ns); reclaimed says the key's
	// record was reclaimed since its last grant of known token, so the
	// next token (or the unknown one) is only above minted (see
	// # Retention).
	endLo     int64
	reclaimed bool
}

func (s keyState) String() string {
	if s.status == free && s.reclaimed {
		return fmt.Sprintf("reclaimed, tokens above %d", s.minted)
	}
	if s.status == free {
		return "free"
	}
	tok := fmt.Sprint(s.token)
	if s.token == 0 {
		tok = fmt.Sprintf("unknown (>= %d)", s.minted)
	}
	str := fmt.Sprintf("%s, token %s, lease %.8s", s.status, tok, s.id)
	if s.status == live {
		str += fmt.Sprintf(", ends in [%s, %s]", nsString(s.lo), nsString(s.hi))
	}
	if s.exhausted {
		str += ", exhausted"
	}
	return str
}

// outcome classifies a call's result.
type outcome uint8

const (
	ok          outcome = iota
	held                // ErrLeaseHeld
	notFound            // ErrLeaseNotFound
	expiredErr          // ErrLeaseExpired
	exhaustedEr         // ErrTokenSpaceExhausted
	rejected            // ErrInvalidKey, ErrInvalidTimeout, ErrInvalidMargin
	unknown             // ErrOutcomeUnknown: may or may not have taken effect
	noEffect            // any other error: did not take effect
)

func classify(err error) outcome {
	switch {
	case err == nil:
		return ok
	case errors.Is(err, backend.ErrOutcomeUnknown):
		return unknown
	case errors.Is(err, backend.ErrLeaseHeld):
		return held
	case errors.Is(err, backend.ErrLeaseNotFound):
		return notFound
	case errors.Is(err, backend.ErrLeaseExpired):
		return expiredErr
	case errors.Is(err, backend.ErrTokenSpaceExhausted):
		return exhaustedEr
	case errors.Is(err, backend.ErrInvalidKey), errors.Is(err, backend.ErrInvalidTimeout), errors.Is(err, backend.ErrInvalidMargin):
		return rejected
	}
	return noEffect
}

// call is what porcupine carries as an operation's input and output: the
// recorded Op, with its times on the coordinator's clock in nanoseconds.
type call struct {
	op          *Op
	out         outcome
	cCall, cRet int64 // cRet is math.MaxInt64 for an unknown outcome
	// parts are a GrantMany's grants, one per request, each as Grant's
	// call on its key with the GrantMany's outcome, times and error (and
	// its lease when it succeeded).
	parts []*call
}

// model is the lease register, with the backend's traits.
type model struct {
	slack     time.Duration
	dense     bool
	retention time.Duration  // zero: keys are never reclaimed
	slots     map[string]int // each key's register in its partition's state
}

// step returns the states the key can be in after c, from s: none when c
// cannot have happened.
func (m model) step(s keyState, c *call) []keyState { return m.during(s, c, m.apply) }

// during returns f's states after c, from each state the key can be in
// when c takes effect: s, or s expired when its lease may have ended
// before then.
func (m model) during(s keyState, c *call, f func(keyState, *call) []keyState) []keyState {
	if s.status != live {
		return m.reclaiming(s, c, f)
	}
	var next []keyState
	if c.cRet >= s.lo { // the lease may have ended before c
		e := s
		e.status, e.lo, e.hi = expired, 0, 0
		if m.retention > 0 {
			e.endLo = s.lo
		}
		next = append(next, m.reclaiming(e, c, f)...)
	}
	if c.cCall < s.hi { // or it may not have
		next = append(next, f(s, c)...)
	}
	return next
}

// reclaiming returns f's states after c from s, whose lease has ended (or
// which was never leased), and from s reclaimed, when it may have been
// before c (see # Retention).
func (m model) reclaiming(s keyState, c *call, f func(keyState, *call) []keyState) []keyState {
	next := f(s, c)
	if m.retention > 0 && s.id != "" && c.cRet >= addClamp(s.endLo, m.retention) {
		r := keyState{minted: s.minted, exhausted: s.exhausted, reclaimed: true}
		next = append(next, f(r, c)...)
	}
	return next
}

// apply returns the states after c on s, whose lease (if live) has not ended.
func (m model) apply(s keyState, c *call) []keyState {
	op := c.op
	if err := argumentError(op); err != nil {
		// Bad input changes nothing and gets the same kind of error.
		if op.Err == nil || !errors.Is(op.Err, sentinelOf(err)) {
			return nil
		}
		return []keyState{s}
	}
	switch c.out {
	case rejected:
		return nil // the arguments were fine
	case noEffect:
		return []keyState{s}
	case unknown:
		return append([]keyState{s}, m.effect(s, c)...)
	}
	switch op.Kind {
	case OpGrant:
		return m.grant(s, c)
	case OpRenew:
		return m.renew(s, c)
	case OpRelease:
		return m.release(s, c)
	case OpToken:
		return m.token(s, c)
	case OpForceRelease:
		return m.forceRelease(s, c)
	}
	return nil
}

// effect returns the state after a call of unknown outcome that did take
// effect, if it could have.
func (m model) effect(s keyState, c *call) []keyState {
	op := c.op
	switch op.Kind {
	case OpGrant:
		if s.status == live || s.id == op.LeaseID || s.exhausted {
			return nil // it was refused, or was a resend: no change
		}
		n := keyState{id: op.LeaseID, minted: s.minted + 1, status: live,
			lo: c.cCall + int64(op.Timeout+op.Margin), hi: math.MaxInt64}
		if m.denseFrom(s) {
			n.token = n.minted // dense: the next token, exactly
		} else {
			n.reclaimed = true // the token is only above minted
		}
		return []keyState{n}
	case OpRenew:
		if s.status == live && s.id == op.LeaseID {
			s.lo, s.hi = c.cCall+int64(op.Timeout+op.Margin), math.MaxInt64
			return []keyState{s}
		}
	case OpRelease:
		if s.status == live && s.id == op.LeaseID {
			return []keyState{m.ended(s, released, c)}
		}
	case OpForceRelease:
		if s.status == live {
			return []keyState{m.ended(s, forced, c)}
		}
	}
	return nil
}

// denseFrom reports whether the next grant on s mints exactly the next
// token: with dense tokens, unless the key has no record (reclaimed, or,
// with a retention, never leased: its tokens start above the backend's
// floor).
func (m model) denseFrom(s keyState) bool {
	return m.dense && !s.reclaimed && (m.retention == 0 || s.id != "")
}

// ended returns s with its lease ended by c (a release or forced release).
func (m model) ended(s keyState, st status, c *call) keyState {
	s.status, s.lo, s.hi = st, 0, 0
	if m.retention > 0 {
		s.endLo = c.cCall
	}
	return s
}

// sameToken reports whether tok can be the current lease's token, and
// returns s with the token known.
func (m model) sameToken(s keyState, tok uint64) (keyState, bool) {
	if s.token != 0 {
		return s, tok == s.token
	}
	if tok < s.minted || (m.dense && !s.reclaimed && tok != s.minted) {
		return s, false
	}
	s.token, s.minted, s.reclaimed = tok, tok, false
	return s, true
}

func (m model) grant(s keyState, c *call) []keyState {
	op := c.op
	mine := s.id == op.LeaseID
	switch c.out {
	case ok:
		l := op.Lease
		if l.Key != op.Key || l.LeaseID != op.LeaseID {
			return nil
		}
		if s.status == live {
			if !mine {
				return nil
			}
			// A resent grant: the same lease, unchanged (its TTL and
			// margin are the first request's).
			n, same := m.sameToken(s, l.Token)
			if !same {
				return nil
			}
			return []keyState{n}
		}
		if mine || s.exhausted || l.TTL < op.Timeout || l.Margin != op.Margin {
			return nil // a resend of an ended lease, or past the last token
		}
		// Every token so far is at most minted, or (a lease whose token
		// is unknown) at least minted: either way the new one is larger.
		if l.Token <= s.minted || (m.denseFrom(s) && l.Token != s.minted+1) {
			return nil
		}
		return []keyState{{id: op.LeaseID, token: l.Token, minted: l.Token, status: live,
			lo: c.cCall + int64(op.Timeout+op.Margin), hi: addClamp(c.cRet, l.TTL+l.Margin+m.slack)}}
	case held:
		if s.status != live || mine {
			return nil
		}
		var he *backend.HeldError
		if errors.As(op.Err, &he) && s.hi != math.MaxInt64 && int64(he.Remaining) > s.hi-c.cCall {
			return nil // more time left than the lease can have
		}
		return []keyState{s}
	case expiredErr:
		if !mine || s.status != expired {
			return nil
		}
		return []keyState{s}
	case notFound:
		if !mine || (s.status != released && s.status != forced) {
			return nil
		}
		return []keyState{s}
	case exhaustedEr:
		if s.status == live || mine {
			return nil
		}
		s.exhausted = true
		return []keyState{s}
	}
	return nil
}

func (m model) renew(s keyState, c *call) []keyState {
	op := c.op
	mine := s.id == op.LeaseID
	switch c.out {
	case ok:
		l := op.Lease
		if s.status != live || !mine || l.Key != op.Key || l.LeaseID != op.LeaseID || l.TTL < op.Timeout || l.Margin != op.Margin {
			return nil
		}
		n, same := m.sameToken(s, l.Token)
		if !same {
			return nil
		}
		n.lo, n.hi = c.cCall+int64(op.Timeout+op.Margin), addClamp(c.cRet, l.TTL+l.Margin+m.slack)
		return []keyState{n}
	case expiredErr:
		if !mine || s.status != expired {
			return nil
		}
		return []keyState{s}
	case notFound:
		if mine && (s.status == live || s.status == expired) {
			return nil
		}
		return []keyState{s}
	}
	return nil
}

func (m model) release(s keyState, c *call) []keyState {
	mine := s.id == c.op.LeaseID
	switch c.out {
	case ok:
		switch {
		case mine && s.status == live:
			return []keyState{m.ended(s, released, c)}
		case mine && (s.status == released || s.status == forced):
			return []keyState{s} // a resent release
		}
	case expiredErr:
		if mine && s.status == expired {
			return []keyState{s}
		}
	case notFound:
		// A forced release may leave the old holder's release either
		// answer, as the backend documents.
		if !mine || s.status == forced {
			return []keyState{s}
		}
	}
	return nil
}

func (m model) token(s keyState, c *call) []keyState {
	op := c.op
	if c.out != ok {
		return nil
	}
	if s.status != live {
		if op.Live || op.Token != 0 {
			return nil
		}
		return []keyState{s}
	}
	if !op.Live {
		return nil
	}
	n, same := m.sameToken(s, op.Token)
	if !same {
		return nil
	}
	return []keyState{n}
}

func (m model) forceRelease(s keyState, c *call) []keyState {
	if c.out != ok {
		return nil
	}
	if c.op.Live != (s.status == live) {
		return nil
	}
	if s.status == live {
		return []keyState{m.ended(s, forced, c)}
	}
	return []keyState{s}
}

// argumentError returns the error package backend's checks give op's
// arguments, or nil when they are valid.
func argumentError(op *Op) error {
	switch op.Kind {
	case OpGrant, OpRenew:
		return backend.CheckRequest(backend.Request{Key: op.Key, LeaseID: op.LeaseID, Timeout: op.Timeout, Margin: op.Margin})
	case OpRelease:
		return backend.CheckRelease(op.Key, op.LeaseID)
	}
	return backend.CheckKey(op.Key)
}

func sentinelOf(err error) error {
	for _, s := range []error{backend.ErrInvalidKey, backend.ErrInvalidTimeout, backend.ErrInvalidMargin, backend.ErrLeaseNotFound} {
		if errors.Is(err, s) {
			return s
		}
	}
	return err
}

func addClamp(t int64, d time.Duration) int64 {
	if t > math.MaxInt64-int64(d) {
		return math.MaxInt64
	}
	return t + int64(d)
}

func nsString(ns int64) string {
	if ns == math.MaxInt64 {
		return "never"
	}
	return time.Duration(ns).String()
}

func (c *call) String() string {
	op := c.op
	var res string
	switch {
	case op.Err != nil:
		res = op.Err.Error()
	case op.Kind == OpGrant || op.Kind == OpRenew:
		res = fmt.Sprintf("token %d, TTL %v", op.Lease.Token, op.Lease.TTL)
	case op.Kind == OpToken:
		res = fmt.Sprintf("token %d, live %v", op.Token, op.Live)
	case op.Kind == OpForceRelease:
		res = fmt.Sprintf("ended %v", op.Live)
	case op.Kind == OpGrantMany:
		toks := make([]string, len(op.Leases))
		for i, l := range op.Leases {
			toks[i] = fmt.Sprint(l.Token)
		}
		res = "tokens " + strings.Join(toks, ", ")
	default:
		res = "ok"
	}
	args := ""
	if op.LeaseID != "" {
		args = fmt.Sprintf("lease %.8s", op.LeaseID)
	}
	if op.Kind == OpGrant || op.Kind == OpRenew {
		args += fmt.Sprintf(", %v+%v", op.Timeout, op.Margin)
	}
	if op.Kind == OpGrantMany {
		keys := make([]string, len(op.Requests))
		for i, r := range op.Requests {
			keys[i] = fmt.Sprintf("%q", r.Key)
		}
		args = strings.Join(keys, ", ")
		if len(op.Requests) > 0 {
			r := op.Requests[0]
			args += fmt.Sprintf(", lease %.8s, %v+%v", r.LeaseID, r.Timeout, r.Margin)
		}
	}
	ret := nsString(c.cRet)
	return fmt.Sprintf("%s(%s) -> %s [coordinator %s..%s]", op.Kind, args, res, nsString(c.cCall), ret)
}
