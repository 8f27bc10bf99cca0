package conformance

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
)

// suite is one test's view of the harness.
type suite struct {
	h      Harness
	traits Traits
}

// Run runs the conformance suite against the backends h makes.
func Run(t *testing.T, h Harness) {
	s := suite{h: h, traits: h.Traits()}
	cases := []struct {
		name string
		fn   func(*testing.T)
	}{
		{"TokensIncrease", s.testTokensIncrease},
		{"KeysIndependent", s.testKeysIndependent},
		{"RacingGrantsOneWinner", s.testRacingGrants},
		{"ExpiryOnCoordinatorClock", s.testExpiry},
		{"ObservedExpiry", s.testObservedExpiry},
		{"RenewKeepsTokenAndExtendsFromNow", s.testRenewExtendsFromNow},
		{"RenewForeignOrStaleID", s.testRenewForeignOrStale},
		{"LateRenewalChangesNothing", s.testLateRenewal},
		{"CheckTokenOnlyLiveLease", s.testCheckToken},
		{"ReleaseOnlyByHolder", s.testRelease},
		{"ExpiredReleaseAndStaleHolder", s.testExpiredHolder},
		{"GrantRetryIsIdempotent", s.testGrantRetry},
		{"BadInputChangesNothing", s.testBadInput},
		{"DoneContextChangesNothing", s.testDoneContext},
		{"LeaseIDsUnguessable", s.testLeaseIDs},
		{"OddKeysAreDistinct", s.testOddKeys},
		{"ClosedBackend", s.testClosed},
		{"Linearizable", s.testLinearizable},
		{"LinearizableMany", s.testLinearizableMany},
		{"ExpiryBoundary", s.testExpiryBoundary},
		{"TokenExhaustion", s.testTokenExhaustion},
		{"LateCallsFromOlderEpochs", s.testLateCallsFromOlderEpochs},
		{"KeysNeverCollide", s.testKeysNeverCollide},
		{"VerdictsAreBare", s.testVerdictsAreBare},
		{"HeldErrorTellsTimeLeft", s.testHeldRemaining},
		{"NotifyFree", s.testNotifyFree},
		{"QueueOrder", s.testQueueOrder},
		{"QueueRacingJoins", s.testQueueRacingJoins},
		{"QueueExpiry", s.testQueueExpiry},
		{"QueueNotifyTurn", s.testQueueNotifyTurn},
		{"QueueKeysIndependent", s.testQueueKeysIndependent},
		{"QueueLineLength", s.testQueueLineLength},
		{"QueueBadInput", s.testQueueBadInput},
		{"QueueDoneContext", s.testQueueDoneContext},
		{"QueueClosed", s.testQueueClosed},
		{"ManyGrant", s.testManyGrant},
		{"ManyAllOrNone", s.testManyAllOrNone},
		{"ManyRetry", s.testManyRetry},
		{"ManyExpiry", s.testManyExpiry},
		{"ManyBadInput", s.testManyBadInput},
		{"ManyRacing", s.testManyRacing},
		{"HoldMany", s.testHoldMany},
		{"HoldManySettlesUnknownGrant", s.testHoldManySettlesUnknownGrant},
		{"LockManyWaits", s.testLockManyWaits},
		{"LockManyOverlapping", s.testLockManyOverlapping},
		{"LockAnyWaits", s.testLockAnyWaits},
		{"LockAnyFIFO", s.testLockAnyFIFO},
		{"LockAnyOverlapping", s.testLockAnyOverlapping},
		{"Inspect", s.testInspect},
		{"ForceRelease", s.testForceRelease},
		{"List", s.testList},
		{"Owner", s.testOwner},
		{"LockDelayAfterExpiry", s.testLockDelayAfterExpiry},
		{"LockDelayOfLiveLease", s.testLockDelayOfLiveLease},
		{"NoLockDelayAfterRelease", s.testNoLockDelayAfterRelease},
		{"LockDelayAfterForceRelease", s.testLockDelayAfterForceRelease},
		{"LockDelayLongerThanLease", s.testLockDelayLongerThanLease},
		{"LockDelayCap", s.testLockDelayCap},
		{"LockDelayBadValues", s.testLockDelayBadValues},
		{"LockWaitsOutLockDelay", s.testLockWaitsOutLockDelay},
		{"HoldRenews", s.testHoldRenews},
		{"HoldLostWhenRenewalRejected", s.testHoldLost},
		{"HoldEndsWithParent", s.testHoldParentCanceled},
		{"HoldSettlesUnknownGrant", s.testHoldSettlesUnknownGrant},
		{"LockWaitsForRelease", s.testLockWaitsForRelease},
		{"LockAfterExpiry", s.testLockAfterExpiry},
		{"LockManyWaiters", s.testLockManyWaiters},
		{"LockCanceled", s.testLockCanceled},
		{"DoRenews", s.testDoRenews},
		{"ResumeAfterRestart", s.testResumeAfterRestart},
		{"RetentionChurn", s.testRetentionChurn},
		{"RetentionRace", s.testRetentionRace},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if s.traits.Now == nil {
				t.Parallel() // real time: overlap the waiting
			}
			c.fn(t)
		})
	}
}

// backend returns a fresh backend that is closed when t ends.
func (s suite) backend(t *testing.T) backend.Backend {
	t.Helper()
	b, err := s.h.NewBackend(context.Background(), t)
	if err != nil {
		t.Fatalf("NewBackend: %v", err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return b
}

// coordinator returns a Coordinator over a fresh backend, and the backend.
func (s suite) coordinator(t *testing.T) (*fencing.Coordinator, backend.Backend) {
	b := s.backend(t)
	return fencing.New(b), b
}

func (s suite) wait(t *testing.T, d time.Duration) {
	t.Helper()
	if err := s.h.Wait(context.Background(), d); err != nil {
		t.Fatalf("Wait(%v): %v", d, err)
	}
}

// short returns a timeout and margin for leases that the test lets expire:
// as short as the backend honours without raising them.
func (s suite) short() (timeout, margin time.Duration) {
	if s.traits.Now != nil {
		return 10 * time.Second, time.Second // a fake clock: any length is instant
	}
	total := max(s.traits.MinTTL, 200*time.Millisecond)
	return total / 2, total - total/2
}

// long is a timeout for leases that must stay live for the whole test.
const long = time.Minute

// waitExpired waits until lease has certainly expired on the coordinator:
// its granted TTL and margin, counted from when the grant returned, and the
// backend's slack.
func (s suite) waitExpired(t *testing.T, lease fencing.Lease, grantReturned time.Time) {
	t.Helper()
	d := lease.TTL + lease.Margin + s.traits.Slack
	if s.traits.Now == nil {
		d -= time.Since(grantReturned)
	}
	s.wait(t, max(d, 0))
}

func (s suite) grant(t *testing.T, c *fencing.Coordinator, key string, timeout, margin time.Duration) fencing.Lease {
	t.Helper()
	lease, err := c.Grant(context.Background(), key, timeout, margin)
	if err != nil {
		t.Fatalf("Grant(%q, %v, %v): %v", key, timeout, margin, err)
	}
	if lease.Key != key || lease.Token == 0 || lease.ID == "" {
		t.Fatalf("Grant(%q) = %+v: want the key, a non-zero token and an ID", key, lease)
	}
	return lease
}

// grantShort grants a lease meant to expire, and returns when the grant
// returned.
func (s suite) grantShort(t *testing.T, c *fencing.Coordinator, key string) (fencing.Lease, time.Time) {
	t.Helper()
	timeout, margin := s.short()
	lease := s.grant(t, c, key, timeout, margin)
	return lease, time.Now()
}

// inTime reports whether a request about a short lease l, whose grant was
// sent at sent, returned (just now) while l was certainly live: before its
// TTL and margin (less clockRate, for a server clock that runs a little
// fast) had passed since the send. A check that finds l ended proves a bug
// only then; later, a busy machine that stalled the test can explain it,
// and inTime says so in the log.
func (s suite) inTime(t *testing.T, sent time.Time, l fencing.Lease) bool {
	t.Helper()
	const clockRate = 5 * time.Millisecond
	if d := time.Since(sent); d >= l.TTL+l.Margin-clockRate {
		t.Logf("a check of a %v lease returned %v after its grant was sent: too late to tell on this machine", l.TTL+l.Margin, d)
		return false
	}
	return true
}

// wantLive fails unless key's live lease has token want.
func wantLive(t *testing.T, c *fencing.Coordinator, key string, want uint64) {
	t.Helper()
	// A Deadline an hour ahead: any lease found ended fails t.
	_ = wantLiveHeld(t, c, key, want, func() time.Time { return time.Now().Add(time.Hour) })
}

// wantLiveHeld is wantLive for a lease whose holder keeps it renewed. A
// Token or CheckToken that finds the lease ended fails t only while the
// lease's Deadline (deadline's answer, read after theirs) has not passed:
// after it, the holder's renewals came late on a slow host, and
// wantLiveHeld returns that loss for keepsRenewed to judge.
func wantLiveHeld(t *testing.T, c *fencing.Coordinator, key string, want uint64, deadline func() time.Time) error {
	t.Helper()
	tok, live, err := c.Token(context.Background(), key)
	if err != nil {
		t.Fatalf("Token(%q): %v", key, err)
	}
	if !live || tok != want {
		if dl := deadline(); time.Now().After(dl) {
			return fmt.Errorf("%w: Token(%q) = %d, live %v after the lease's Deadline %v", fencing.ErrLeaseLost, key, tok, live, dl)
		}
		t.Fatalf("Token(%q) = %d, live %v; want %d, live", key, tok, live, want)
	}
	ok, err := c.CheckToken(context.Background(), key, want)
	if err != nil {
		t.Fatalf("CheckToken(%q, %d): %v", key, want, err)
	}
	if !ok {
		if dl := deadline(); time.Now().After(dl) {
			return fmt.Errorf("%w: CheckToken(%q, %d) = false after the lease's Deadline %v", fencing.ErrLeaseLost, key, want, dl)
		}
		t.Fatalf("CheckToken(%q, %d) = false; want true", key, want)
	}
	return nil
}

// wantFree fails unless key has no live lease.
func wantFree(t *testing.T, c *fencing.Coordinator, key string) {
	t.Helper()
	tok, live, err := c.Token(context.Background(), key)
	if err != nil {
		t.Fatalf("Token(%q): %v", key, err)
	}
	if live || tok != 0 {
		t.Fatalf("Token(%q) = %d, live %v; want 0, not live", key, tok, live)
	}
}

func wantCheck(t *testing.T, c *fencing.Coordinator, key string, token uint64, want bool) {
	t.Helper()
	ok, err := c.CheckToken(context.Background(), key, token)
	if err != nil {
		t.Fatalf("CheckToken(%q, %d): %v", key, token, err)
	}
	if ok != want {
		t.Fatalf("CheckToken(%q, %d) = %v, want %v", key, token, ok, want)
	}
}

func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: error %v, want %v", what, err, target)
	}
}

// wantNext fails unless next is the token a key whose last token was prev
// may get next: larger, and with dense tokens exactly prev+1.
func (s suite) wantNext(t *testing.T, what string, prev, next uint64) {
	t.Helper()
	if next <= prev {
		t.Fatalf("%s: token %d after %d; tokens must strictly increase", what, next, prev)
	}
	if s.traits.DenseTokens && next != prev+1 {
		t.Fatalf("%s: token %d after %d; this backend declares dense tokens", what, next, prev)
	}
}
