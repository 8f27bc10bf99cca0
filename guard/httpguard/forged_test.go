package httpguard_test

import (
	"context"
	"database/sql"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/guard"
	"github.com/fencing-go/fencing/guard/httpguard"
	"github.com/fencing-go/fencing/guard/sqlguard"
	"github.com/fencing-go/fencing/internal/pgtest"
	"github.com/fencing-go/fencing/memorybackend"
)

// A service behind httpguard and sqlguard on PostgreSQL: one request with a
// forged Fencing-Token (the largest SQL integer) is refused with 403 and
// leaves the fence where it was, and the next 35 holders' writes, each with
// a token the lock store minted, are all admitted. The check is made in
// front of the handler (httpguard.WithMintCheck) or by the store guard
// (sqlguard.WithMintCheck, answered by httpguard.WriteRefused).
func TestForgedTokenRefused(t *testing.T) {
	db := pgtest.Start(t).DB(t)
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS forged_writes (resource TEXT PRIMARY KEY, token BIGINT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	for _, where := range []string{"middleware", "store"} {
		t.Run(where, func(t *testing.T) {
			b := memorybackend.New()
			t.Cleanup(func() { b.Close() })
			coord := fencing.New(b)
			mc := guard.NewMintCheck(coord)
			var gopts []sqlguard.Option
			var hopts = []httpguard.Option{httpguard.RequireToken()}
			if where == "store" {
				gopts = append(gopts, sqlguard.WithMintCheck(mc))
			} else {
				hopts = append(hopts, httpguard.WithMintCheck(mc))
			}
			g, err := sqlguard.New(sqlguard.Postgres, append(gopts, sqlguard.WithTable("fences_forged_"+where))...)
			if err != nil {
				t.Fatal(err)
			}
			if err := g.CreateTable(ctx, db); err != nil {
				t.Fatal(err)
			}
			handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				resource, token, _ := guard.TokenFromContext(r.Context())
				err := g.Write(r.Context(), db, nil, resource, token, func(tx *sql.Tx) error {
					_, err := tx.ExecContext(r.Context(), `INSERT INTO forged_writes (resource, token) VALUES ($1, $2)
						ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token`, resource, int64(token))
					return err
				})
				if err != nil && !httpguard.WriteRefused(w, resource, err) {
					http.Error(w, err.Error(), http.StatusInternalServerError)
				}
			})
			srv, c := serve(t, httpguard.Middleware(handler, hopts...))
			key := "orders/" + where

			first, err := coord.Grant(ctx, key, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if resp, body := get(t, c, fencing.ContextWithToken(ctx, key, first.Token), srv.URL); resp.StatusCode != http.StatusOK {
				t.Fatalf("first holder's write: %d %s", resp.StatusCode, body)
			}
			if err := coord.Release(ctx, key, first.ID); err != nil {
				t.Fatal(err)
			}

			// The forged request, as any client could send it.
			resp, body := get(t, http.DefaultClient, ctx, srv.URL, httpguard.TokenHeader, httpguard.Format(key, 9223372036854775807))
			http.DefaultClient.CloseIdleConnections()
			if resp.StatusCode != http.StatusForbidden {
				t.Fatalf("forged token: %d %s, want 403", resp.StatusCode, body)
			}
			if fence, err := g.Fence(ctx, db, key); err != nil || fence != first.Token {
				t.Fatalf("fence after the forged request: %d, %v; want %d", fence, err, first.Token)
			}

			for i := range 35 {
				l, err := coord.Grant(ctx, key, time.Minute)
				if err != nil {
					t.Fatal(err)
				}
				resp, body := get(t, c, fencing.ContextWithToken(ctx, key, l.Token), srv.URL)
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("legitimate write %d of 35 (token %d) after the forged one: %d %s", i+1, l.Token, resp.StatusCode, body)
				}
				if err := coord.Release(ctx, key, l.ID); err != nil {
					t.Fatal(err)
				}
			}
			var last int64
			if err := db.QueryRowContext(ctx, `SELECT token FROM forged_writes WHERE resource = $1`, key).Scan(&last); err != nil || last != int64(first.Token)+35 {
				t.Fatalf("last write's token: %d, %v; want %d", last, err, first.Token+35)
			}

			// The lock store cannot be read: 503, nothing changed.
			b.Close()
			resp, body = get(t, http.DefaultClient, ctx, srv.URL, httpguard.TokenHeader, httpguard.Format(key, first.Token+36))
			http.DefaultClient.CloseIdleConnections()
			if resp.StatusCode != http.StatusServiceUnavailable || !errors.Is(mc.Check(ctx, key, first.Token+36), guard.ErrMintUnchecked) {
				t.Fatalf("lock store closed: %d %s, want 503", resp.StatusCode, body)
			}
		})
	}
}
