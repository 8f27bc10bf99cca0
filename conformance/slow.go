package conformance

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
)

// CheckSlowReplies checks a backend whose every reply the test delays by at
// least delay (a delaying proxy in front of a real server): a Lease's
// Deadline counts from when its request was sent, not from when the slow
// reply came, for Grant and for Renew; and a Hold's context, once stall
// makes the server stop answering, ends no later than the send time of the
// last request that succeeded plus the timeout (within a scheduling
// tolerance of half the delay). timeout must allow Hold to renew through the
// delay (a few times delay); margin is the backend's (etcd's whole
// seconds). b is not closed.
func CheckSlowReplies(t *testing.T, b backend.Backend, delay, timeout, margin time.Duration, stall func()) {
	t.Helper()
	rec := NewRecorder(nil)
	c := fencing.New(rec.Wrap(b))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tolerance := delay / 2 // timers fire late on a loaded machine

	for try := 0; ; try++ {
		sent := time.Now()
		l, err := c.Grant(ctx, "slow", timeout, margin)
		if err != nil {
			t.Fatalf("Grant: %v", err)
		}
		if took := time.Since(sent); took < delay {
			t.Fatalf("Grant took %v, under the reply delay %v: the replies are not slow", took, delay)
		}
		if limit := lastSent(rec, "slow").Add(timeout); l.Deadline.After(limit) {
			t.Fatalf("Grant's Deadline is %v after send time + timeout: counted from the reply?", l.Deadline.Sub(limit))
		}
		r, err := c.Renew(ctx, "slow", l.ID, timeout, margin)
		if took := time.Since(sent); errors.Is(err, backend.ErrLeaseExpired) && took > timeout && try < 3 {
			// The renewal came back later than the TTL after the grant
			// was sent: this host (a loaded one) may have been slower
			// than the lease, so the verdict says nothing. Seen at load 50
			// with a 1.5 s TTL and 600 ms replies.
			t.Logf("Renew came back %v after the grant was sent, past the TTL %v, and found the lease expired: again with a TTL of %v", took, timeout, 2*timeout)
			timeout *= 2
			continue
		}
		if err != nil {
			t.Fatalf("Renew: %v", err)
		}
		if limit := lastSent(rec, "slow").Add(timeout); r.Deadline.After(limit) {
			t.Fatalf("Renew's Deadline is %v after send time + timeout: counted from the reply?", r.Deadline.Sub(limit))
		}
		if err := c.Release(ctx, "slow", l.ID); err != nil {
			t.Fatalf("Release: %v", err)
		}
		break
	}

	h, err := c.Hold(ctx, "held", timeout, fencing.WithMargin(margin))
	if err != nil {
		t.Fatalf("Hold: %v", err)
	}
	ended := make(chan time.Time, 1)
	go func() {
		<-h.Context().Done()
		ended <- time.Now()
	}()
	time.Sleep(timeout + timeout/2) // renewals go through the slow replies
	stall()
	var done time.Time
	select {
	case done = <-ended:
	case <-time.After(2 * timeout):
		t.Fatalf("Hold's context still not done %v after the server stopped answering", 2*timeout)
	}
	last := lastSent(rec, "held")
	if limit := last.Add(timeout + tolerance); done.After(limit) {
		t.Fatalf("Hold's context ended %v after the last successful request's send time + timeout (tolerance %v): its Deadline counts from a reply", done.Sub(last.Add(timeout)), tolerance)
	}
	rctx, rcancel := context.WithTimeout(ctx, time.Second)
	h.Release(rctx) // the server does not answer: the release may fail
	t.Logf("the context ended %v after the last send + timeout; released %v later", done.Sub(last.Add(timeout)), time.Since(done))
	rcancel()
}

// lastSent returns when the last grant or renewal of key that succeeded was
// sent (its call reached the recorded backend, after the Coordinator took
// its own send time).
func lastSent(rec *Recorder, key string) time.Time {
	var last time.Time
	for _, op := range rec.History() {
		if op.Key == key && (op.Kind == OpGrant || op.Kind == OpRenew) && op.Err == nil && op.Call.After(last) {
			last = op.Call
		}
	}
	return last
}
