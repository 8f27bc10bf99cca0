package httpguard_test

import (
	"context"
	"database/sql"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/guard"
	"github.com/fencing-go/fencing/guard/httpguard"
	"github.com/fencing-go/fencing/guard/sqlguard"
	"github.com/fencing-go/fencing/internal/testing/pgtest"
	"github.com/fencing-go/fencing/memorybackend"
)

// forged is the token of a forged header: the largest SQL integer.
const forged = 9223372036854775807

// forgedService is a service behind httpguard and sqlguard on db whose
// handler writes the request's token to a table, with the mint check where
// says: "middleware" (httpguard.WithMintCheck), "store"
// (sqlguard.WithMintCheck, answered by httpguard.WriteRefused) or "none".
type forgedService struct {
	b     *memorybackend.Backend
	coord *fencing.Coordinator
	mc    *guard.MintCheck
	g     *sqlguard.Guard
	srv   *httptest.Server
	c     *http.Client
}

func newForgedService(t *testing.T, db *sql.DB, where string) *forgedService {
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS forged_writes (resource TEXT PRIMARY KEY, token BIGINT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	s := &forgedService{b: memorybackend.New()}
	t.Cleanup(func() { s.b.Close() })
	s.coord = fencing.New(s.b)
	s.mc = guard.NewMintCheck(s.coord)
	gopts := []sqlguard.Option{sqlguard.WithTable("fences_forged_" + where)}
	hopts := []httpguard.Option{httpguard.RequireToken()}
	switch where {
	case "store":
		gopts = append(gopts, sqlguard.WithMintCheck(s.mc))
	case "middleware":
		hopts = append(hopts, httpguard.WithMintCheck(s.mc))
	}
	var err error
	if s.g, err = sqlguard.New(sqlguard.Postgres, gopts...); err != nil {
		t.Fatal(err)
	}
	if err := s.g.CreateTable(ctx, db); err != nil {
		t.Fatal(err)
	}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resource, token, _ := guard.TokenFromContext(r.Context())
		err := s.g.Write(r.Context(), db, nil, resource, token, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(r.Context(), `INSERT INTO forged_writes (resource, token) VALUES ($1, $2)
				ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token`, resource, int64(token))
			return err
		})
		if err != nil && !httpguard.WriteRefused(w, resource, err) {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	})
	s.srv, s.c = serve(t, httpguard.Middleware(handler, hopts...))
	return s
}

// write takes the key, sends a write with its token, releases the key and
// returns the status and the token.
func (s *forgedService) write(t *testing.T, key string) (int, string, uint64) {
	t.Helper()
	ctx := context.Background()
	l, err := s.coord.Grant(ctx, key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	resp, body := get(t, s.c, guard.ContextWithToken(ctx, key, l.Token), s.srv.URL)
	if err := s.coord.Release(ctx, key, l.ID); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, body, l.Token
}

// forge sends a request with token in a hand-written header, as any
// client could.
func (s *forgedService) forge(t *testing.T, key string, token uint64) (int, string) {
	t.Helper()
	resp, body := get(t, http.DefaultClient, context.Background(), s.srv.URL, httpguard.TokenHeader, httpguard.Format(key, token))
	http.DefaultClient.CloseIdleConnections()
	return resp.StatusCode, body
}

// One request with a forged Fencing-Token (the largest SQL integer) is
// refused with 403 and leaves the fence where it was, and the next 35
// holders' writes, each with a token the lock store minted, are all
// admitted. The check is made in front of the handler or by the store
// guard; a lock store that cannot be read gets 503.
func TestForgedTokenRefused(t *testing.T) {
	db := pgtest.Start(t).DB(t)
	ctx := context.Background()
	for _, where := range []string{"middleware", "store"} {
		t.Run(where, func(t *testing.T) {
			s := newForgedService(t, db, where)
			key := "orders/" + where
			code, body, first := s.write(t, key)
			if code != http.StatusOK {
				t.Fatalf("first holder's write: %d %s", code, body)
			}
			if code, body := s.forge(t, key, forged); code != http.StatusForbidden {
				t.Fatalf("forged token: %d %s, want 403", code, body)
			}
			if fence, err := s.g.Fence(ctx, db, key); err != nil || fence != first {
				t.Fatalf("fence after the forged request: %d, %v; want %d", fence, err, first)
			}
			for i := range 35 {
				if code, body, tok := s.write(t, key); code != http.StatusOK {
					t.Fatalf("legitimate write %d of 35 (token %d) after the forged one: %d %s", i+1, tok, code, body)
				}
			}
			var last int64
			if err := db.QueryRowContext(ctx, `SELECT token FROM forged_writes WHERE resource = $1`, key).Scan(&last); err != nil || last != int64(first)+35 {
				t.Fatalf("last write's token: %d, %v; want %d", last, err, first+35)
			}
			s.b.Close() // the lock store cannot be read: 503, nothing changed
			if code, body := s.forge(t, key, first+36); code != http.StatusServiceUnavailable || !errors.Is(s.mc.Check(ctx, key, first+36), guard.ErrMintUnchecked) {
				t.Fatalf("lock store closed: %d %s, want 503", code, body)
			}
		})
	}
}

// Without a mint check a forged token poisons the fence: every holder after
// it is refused. LowerFence, from the poisoned fence to the highest token
// minted, lets them write again.
func TestPoisonedFenceLowered(t *testing.T) {
	db := pgtest.Start(t).DB(t)
	ctx := context.Background()
	s := newForgedService(t, db, "none")
	const key = "orders/poisoned"
	if code, body, _ := s.write(t, key); code != http.StatusOK {
		t.Fatalf("first holder's write: %d %s", code, body)
	}
	if code, body := s.forge(t, key, forged); code != http.StatusOK {
		t.Fatalf("forged token without a mint check: %d %s, want it admitted", code, body)
	}
	code, _, tok := s.write(t, key)
	if code != http.StatusConflict {
		t.Fatalf("a holder after the forged token: %d, want 409", code)
	}
	if err := s.g.LowerFence(ctx, db, key, forged-1, tok); !errors.Is(err, guard.ErrFenceChanged) {
		t.Fatalf("LowerFence from a fence it is not: %v, want ErrFenceChanged", err)
	}
	st, err := s.coord.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.g.LowerFence(ctx, db, key, forged, st.MaxToken); err != nil {
		t.Fatalf("LowerFence: %v", err)
	}
	for range 3 {
		if code, body, tok := s.write(t, key); code != http.StatusOK {
			t.Fatalf("a holder (token %d) after the fence was lowered: %d %s", tok, code, body)
		}
	}
}
