package sqlbackend_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/guard/sqlguard"
	"github.com/fencing-go/fencing/sqlbackend"
)

// A key of the longest length, made of every byte value (NUL and invalid
// UTF-8 included), is stored as bytes and comes back unchanged; one byte
// more is refused before anything is sent.
func TestKeysAreBytes(t *testing.T) {
	forEachDialect(t, func(t *testing.T, h *harness) {
		be, err := h.NewBackend(context.Background(), t)
		if err != nil {
			t.Fatal(err)
		}
		defer be.Close()
		b := be.(*sqlbackend.Backend)
		ctx := context.Background()
		var raw []byte
		for i := range backend.MaxKeyLength {
			raw = append(raw, byte(255-i%256))
		}
		key := string(raw)
		l, err := b.Grant(ctx, backend.Request{Key: key, LeaseID: "a", Timeout: time.Minute})
		if err != nil {
			t.Fatalf("Grant(1024 bytes): %v", err)
		}
		if tok, live, err := b.Token(ctx, key); err != nil || !live || tok != l.Token {
			t.Fatalf("Token = %d, %v, %v", tok, live, err)
		}
		if tok, live, _ := b.Token(ctx, key[:backend.MaxKeyLength-1]); live || tok != 0 {
			t.Fatalf("a prefix of the key is live")
		}
		page, _, err := b.List(ctx, key[:3], "", 10)
		if err != nil || len(page) != 1 || !bytes.Equal([]byte(page[0].Key), raw) || !page[0].State.Live {
			t.Fatalf("List = %d keys, %v; want the key back byte for byte", len(page), err)
		}
		_, err = b.Grant(ctx, backend.Request{Key: key + "x", LeaseID: "b", Timeout: time.Minute})
		if !errors.Is(err, backend.ErrInvalidKey) {
			t.Fatalf("Grant(1025 bytes): %v, want ErrInvalidKey", err)
		}
	})
}

// sqlguard's fences table and this backend's table live in one schema
// with their default names, and each works.
func TestSQLGuardInTheSameSchema(t *testing.T) {
	forEachDialect(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		b, err := sqlbackend.New(context.Background(), h.db, h.dialect, h.opts...) // the default prefix
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		gd := sqlguard.SQLite
		if h.dialect == sqlbackend.Postgres {
			gd = sqlguard.Postgres
		}
		g, err := sqlguard.New(gd)
		if err != nil {
			t.Fatal(err)
		}
		if err := g.CreateTable(ctx, h.db); err != nil {
			t.Fatal(err)
		}
		if err := b.CreateTables(ctx); err != nil {
			t.Fatal(err)
		}
		for _, stmt := range b.DDL() {
			if strings.Contains(stmt, sqlguard.DefaultTable) {
				t.Fatalf("the backend's DDL names sqlguard's table %s", sqlguard.DefaultTable)
			}
		}
		l, err := b.Grant(ctx, backend.Request{Key: "orders", LeaseID: "a", Timeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		tx, err := h.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := g.Admit(ctx, tx, "orders", l.Token); err != nil {
			t.Fatal(err)
		}
		if err := b.AdmitTx(ctx, tx, "orders", l.Token); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	})
}
