package natsbackend_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/fencing-go/fencing/backend"
)

// TestNotifyFree: the watch wakes a subscriber on a release and on a forced
// release, not on a renewal; Close ends the watch and leaves no goroutine.
func TestNotifyFree(t *testing.T) {
	b := newBackend(t)
	ctx := context.Background()
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	sub, err := b.NotifyFree(ctx, "watched")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	woken := func() bool {
		select {
		case <-sub.Freed():
			return true
		case <-time.After(2 * time.Second): // far above a watch event on loopback (~5 ms measured)
			return false
		}
	}
	req := backend.Request{Key: "watched", LeaseID: "holder-1", Timeout: time.Minute}
	if _, err := b.Grant(ctx, req); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Renew(ctx, req); err != nil {
		t.Fatal(err)
	}
	if woken() {
		t.Fatal("woken by a grant or a renewal")
	}
	if err := b.Release(ctx, req.Key, req.LeaseID); err != nil {
		t.Fatal(err)
	}
	if !woken() {
		t.Fatal("not woken by a release")
	}
	req.LeaseID = "holder-2"
	if _, err := b.Grant(ctx, req); err != nil {
		t.Fatal(err)
	}
	if ended, err := b.ForceRelease(ctx, req.Key); err != nil || !ended {
		t.Fatalf("ForceRelease = %v, %v", ended, err)
	}
	if !woken() {
		t.Fatal("not woken by a forced release")
	}
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
}
