package conformance

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/backend"
)

// testOwner: a grant's owner (backend.Request.Owner) is stored with the
// lease, reported by Inspect and List while the lease is live, kept by
// renewals (whatever owner a renewal carries), and gone once the lease was
// released; a bad owner gets ErrInvalidOwner and changes nothing. It needs
// backend.Inspector to see what was stored.
func (s suite) testOwner(t *testing.T) {
	b := s.backend(t)
	i := capability[backend.Inspector](t, b, "backend.Inspector")
	ctx := context.Background()
	inspect := func(key string) backend.KeyState {
		t.Helper()
		st, err := i.Inspect(ctx, key)
		if err != nil {
			t.Fatalf("Inspect(%q): %v", key, err)
		}
		return st
	}
	wantOwner := func(what, key string, token uint64, owner string) {
		t.Helper()
		if st := inspect(key); !st.Live || st.Token != token || st.Owner != owner {
			t.Fatalf("%s: Inspect(%q) = %+v, want live with token %d and owner %q", what, key, st, token, owner)
		}
	}

	// Owners that a naive encoding would cut or merge: separators, the
	// longest, any printable UTF-8.
	owners := []string{
		"host-3/pid 4711",
		"a:b:c",
		"10.0.0.7:8080 v2:x",
		"ключ 键 🔑",
		strings.Repeat("o", backend.MaxOwnerLength),
		strings.Repeat("é", backend.MaxOwnerLength/2),
	}
	for n, owner := range owners {
		key := "owner/" + string(rune('a'+n))
		id := "owner-lease-" + string(rune('a'+n))
		req := backend.Request{Key: key, LeaseID: id, Timeout: long, Margin: time.Second, Owner: owner}
		l, err := b.Grant(ctx, req)
		if err != nil {
			t.Fatalf("Grant with owner %q: %v", owner, err)
		}
		wantOwner("after the grant", key, l.Token, owner)
		// A resent grant returns the lease as it is, owner included.
		if _, err := b.Grant(ctx, req); err != nil {
			t.Fatalf("resent Grant: %v", err)
		}
		wantOwner("after a resent grant", key, l.Token, owner)
		// A renewal keeps the grant's owner, whatever its own field says.
		req.Owner = "someone else"
		if _, err := b.Renew(ctx, req); err != nil {
			t.Fatalf("Renew: %v", err)
		}
		req.Owner = ""
		req.Timeout = long + time.Second // etcd: a renewal to a new etcd lease rewrites the record
		if _, err := b.Renew(ctx, req); err != nil {
			t.Fatalf("Renew: %v", err)
		}
		wantOwner("after renewals", key, l.Token, owner)
		// Another grant on the held key does not touch it.
		_, err = b.Grant(ctx, backend.Request{Key: key, LeaseID: id + "-2", Timeout: long, Owner: "intruder"})
		wantErr(t, "Grant of a held key", err, backend.ErrLeaseHeld)
		wantOwner("after a refused grant", key, l.Token, owner)
		if err := b.Release(ctx, key, id); err != nil {
			t.Fatalf("Release: %v", err)
		}
		if st := inspect(key); st.Live || st.Owner != "" {
			t.Fatalf("Inspect after release = %+v, want not live and no owner", st)
		}
	}

	// A grant without an owner has none, even after one with an owner.
	c := fencing.New(b)
	plain := s.grant(t, c, "owner/a", long, time.Second)
	wantOwner("a grant without an owner", "owner/a", plain.Token, "")

	// The Coordinator's owners: WithDefaultOwner for Grant, WithOwner for
	// Hold over the default.
	cd := fencing.New(b, fencing.WithDefaultOwner("default-owner"))
	dl := s.grant(t, cd, "owner/default", long, time.Second)
	wantOwner("Grant with WithDefaultOwner", "owner/default", dl.Token, "default-owner")
	h, err := cd.Hold(ctx, "owner/hold", long, fencing.WithOwner("hold-owner"))
	if err != nil {
		t.Fatalf("Hold with WithOwner: %v", err)
	}
	wantOwner("Hold with WithOwner", "owner/hold", h.Token(), "hold-owner")

	// List reports the owner of live leases.
	if l, ok := b.(backend.Lister); ok {
		page, _, err := l.List(ctx, "owner/", "", 100)
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		want := map[string]string{"owner/a": "", "owner/b": "", "owner/default": "default-owner", "owner/hold": "hold-owner"}
		for _, ki := range page {
			if w, ok := want[ki.Key]; ok && ki.State.Owner != w {
				t.Errorf("List: %q has owner %q, want %q", ki.Key, ki.State.Owner, w)
			}
			delete(want, ki.Key)
		}
		if len(want) != 0 {
			t.Errorf("List missed %v", want)
		}
	}
	if err := h.Release(ctx); err != nil {
		t.Fatalf("Held.Release: %v", err)
	}
	if st := inspect("owner/hold"); st.Live || st.Owner != "" {
		t.Fatalf("Inspect after Held.Release = %+v, want not live and no owner", st)
	}

	// Bad owners: refused by the backend and by WithOwner, nothing changed.
	bad := []string{
		strings.Repeat("o", backend.MaxOwnerLength+1),
		strings.Repeat("é", backend.MaxOwnerLength/2) + "o",
		"bad\xffutf8",
		"new\nline",
		"nul\x00",
	}
	for _, owner := range bad {
		_, err := b.Grant(ctx, backend.Request{Key: "owner/bad", LeaseID: "bad-owner", Timeout: long, Owner: owner})
		wantErr(t, "Backend.Grant with a bad owner", err, backend.ErrInvalidOwner)
		_, err = cd.Hold(ctx, "owner/bad", long, fencing.WithOwner(owner))
		wantErr(t, "Hold with a bad owner", err, fencing.ErrInvalidOwner)
		if !errors.Is(err, fencing.ErrInvalidOption) {
			t.Fatalf("Hold with a bad owner: %v, want ErrInvalidOption too", err)
		}
		_, err = fencing.New(b, fencing.WithDefaultOwner(owner)).Grant(ctx, "owner/bad", long)
		wantErr(t, "Grant with a bad default owner", err, fencing.ErrInvalidOwner)
	}
	if st := inspect("owner/bad"); st != (backend.KeyState{}) {
		t.Fatalf("Inspect after grants with bad owners = %+v, want the zero KeyState (never leased)", st)
	}
	wantLive(t, c, "owner/a", plain.Token)
}
