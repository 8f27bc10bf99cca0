package sqlguard_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/fencing-go/fencing/guard"
	"github.com/fencing-go/fencing/guard/sqlguard"
	"github.com/fencing-go/fencing/internal/testing/minttest"
	"github.com/fencing-go/fencing/internal/testing/pgtest"
)

// mintStore is a Guard on one database as minttest sees it.
type mintStore struct {
	g  *sqlguard.Guard
	db *sql.DB
}

func (s mintStore) Admit(ctx context.Context, resource string, token uint64) error {
	return s.g.Takeover(ctx, s.db, resource, token)
}

func (s mintStore) Fence(ctx context.Context, resource string) (uint64, error) {
	return s.g.Fence(ctx, s.db, resource)
}

func (s mintStore) LowerFence(ctx context.Context, resource string, from, to uint64) error {
	return s.g.LowerFence(ctx, s.db, resource, from, to)
}

func mintStores(db *sql.DB, d sqlguard.Dialect) minttest.NewStore {
	return func(t *testing.T, mc *guard.MintCheck) minttest.Store {
		g, err := sqlguard.New(d, sqlguard.WithMintCheck(mc))
		if err != nil {
			t.Fatal(err)
		}
		if err := g.CreateTable(context.Background(), db); err != nil {
			t.Fatal(err)
		}
		return mintStore{g: g, db: db}
	}
}

func TestPostgresMintCheck(t *testing.T) {
	minttest.Run(t, mintStores(pgtest.Start(t).DB(t), sqlguard.Postgres))
}

func TestSQLiteMintCheck(t *testing.T) {
	minttest.Run(t, mintStores(openSQLite(t), sqlguard.SQLite))
}
