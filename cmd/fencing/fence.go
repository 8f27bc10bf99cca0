package main

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencing-go/fencing/guard"
	"github.com/fencing-go/fencing/guard/etcdguard"
	"github.com/fencing-go/fencing/guard/redisguard"
	"github.com/fencing-go/fencing/guard/sqlguard"
)

// fenceStore is a store guard's fence, read and lowered.
type fenceStore interface {
	Fence(ctx context.Context, resource string) (uint64, error)
	LowerFence(ctx context.Context, resource string, from, to uint64) error
}

// sqlFences is a sqlguard.Guard on one database.
type sqlFences struct {
	g  *sqlguard.Guard
	db *sql.DB
}

// Fence reads resource's fence. A database where no guard has made the
// fences table yet has no fence: when the read fails, the table is created
// (CREATE TABLE IF NOT EXISTS, as each guard does when it starts) and the
// fence read again, so a fresh database shows "no fence". Nothing is
// created before a read has failed, so a user without the privilege to
// create tables can read the fences of an existing table.
func (s sqlFences) Fence(ctx context.Context, resource string) (uint64, error) {
	fence, err := s.g.Fence(ctx, s.db, resource)
	if err == nil {
		return fence, nil
	}
	if cerr := s.g.CreateTable(ctx, s.db); cerr != nil {
		return 0, errors.Join(err, cerr)
	}
	return s.g.Fence(ctx, s.db, resource)
}

func (s sqlFences) LowerFence(ctx context.Context, resource string, from, to uint64) error {
	return s.g.LowerFence(ctx, s.db, resource, from, to)
}

// fences returns the guard whose fences live in the backend's own store.
func fences(s *session, table, prefix string) (fenceStore, error) {
	switch c := s.client.(type) {
	case *sql.DB:
		d := map[string]sqlguard.Dialect{"sqlite": sqlguard.SQLite, "postgres": sqlguard.Postgres, "mysql": sqlguard.MySQL}[s.name]
		if table == "" {
			table = sqlguard.DefaultTable
		}
		g, err := sqlguard.New(d, sqlguard.WithTable(table))
		if err != nil {
			return nil, fmt.Errorf("%w: --fence-table: %w", errUsage, err)
		}
		return sqlFences{g: g, db: c}, nil
	case *clientv3.Client:
		if prefix == "" {
			prefix = etcdguard.DefaultPrefix
		}
		return etcdguard.New(c, etcdguard.WithPrefix(prefix)), nil
	case redis.UniversalClient:
		if prefix == "" {
			prefix = redisguard.DefaultPrefix
		}
		return redisguard.New(c, redisguard.WithPrefix(prefix)), nil
	}
	return nil, fmt.Errorf("%w: the %s backend keeps no guard's fences (use sqlite, postgres, mysql, etcd or redis)", errUsage, s.name)
}

// fenceJSON is fence's --json output.
type fenceJSON struct {
	Resource string `json:"resource"`
	// Fence is the resource's fence after the command: the highest token
	// the guard admitted, 0 for none.
	Fence uint64 `json:"fence"`
	// MaxToken is the highest token the lock store minted on the key of
	// the same name; a fence above it was raised by a token never minted.
	MaxToken uint64 `json:"max_token"`
	// Lowered says that this command lowered the fence; From is the fence
	// it lowered.
	Lowered bool   `json:"lowered"`
	From    uint64 `json:"from,omitempty"`
}

// errFenceNotConfirmed is returned when lowering a fence was not confirmed.
var errFenceNotConfirmed = errors.New("lowering the fence not confirmed; nothing was changed")

func fenceCommand() *cobra.Command {
	var (
		conn          *connFlags
		lowerTo       uint64
		yes           bool
		table, prefix string
	)
	cmd := &cobra.Command{
		Use:   "fence RESOURCE [--lower-to N [--yes]]",
		Short: "Show a guard's fence for a resource; lower a poisoned one (break glass)",
		Long: `Fence shows the fence a store guard keeps for RESOURCE in the backend's own store
(sqlguard's table on SQLite, PostgreSQL or MySQL, etcdguard's or redisguard's keys)
next to the highest token the lock store minted on the key of the same name. A fence
above that token was raised by a token never minted (a forged or corrupted one): every
holder's writes are refused until it is lowered. On a database where no guard has
created the fences table yet, fence creates it (empty, as a guard would) and shows
no fence.

With --lower-to N it lowers the fence to N (0 removes it), only if the fence is
still the one it showed (compare-and-set: a fence that moved meanwhile is left
alone and the command fails). It asks for confirmation on the terminal unless
--yes is given. A lowered fence admits tokens it refused before: lower it to the
highest token minted, and only once the holders of older tokens have stopped.`,
		Example: `  fencing fence orders/42 --postgres-dsn "$DSN"
  fencing fence orders/42 --lower-to 57            # asks first
  fencing fence orders/42 --lower-to 57 --yes      # for scripts`,
		Args: cobra.ExactArgs(1),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			resource := args[0]
			lower := cmd.Flags().Changed("lower-to")
			if yes && !lower {
				return fmt.Errorf("%w: --yes goes with --lower-to", errUsage)
			}
			s, ctx, done, err := conn.start(cmd)
			if err != nil {
				return err
			}
			defer done()
			fs, err := fences(s, table, prefix)
			if err != nil {
				return err
			}
			fence, err := fs.Fence(ctx, resource)
			if err != nil {
				return s.wrap(ctx, err)
			}
			st, err := s.c.Inspect(ctx, resource)
			if err != nil {
				return s.wrap(ctx, err)
			}
			out := fenceJSON{Resource: resource, Fence: fence, MaxToken: st.MaxToken}
			if !lower {
				return printFence(cmd.OutOrStdout(), conn.jsonOut, out)
			}
			if err := guard.CheckLower(resource, fence, lowerTo); err != nil {
				return fmt.Errorf("%w: %w", errUsage, err)
			}
			if !yes {
				if err := confirmLower(cmd, out, lowerTo); err != nil {
					return err
				}
				var cancel context.CancelFunc
				ctx, cancel = s.call(cmd.Context())
				defer cancel()
			}
			if err := fs.LowerFence(ctx, resource, fence, lowerTo); err != nil {
				return s.wrap(ctx, err)
			}
			out.Lowered, out.From, out.Fence = true, fence, lowerTo
			return printFence(cmd.OutOrStdout(), conn.jsonOut, out)
		}),
	}
	cmd.Flags().Uint64Var(&lowerTo, "lower-to", 0, "lower the fence to `N` (0 removes it)")
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "with --lower-to: do not ask for confirmation")
	cmd.Flags().StringVar(&table, "fence-table", "", "sqlguard's fences `table` (default "+sqlguard.DefaultTable+")")
	cmd.Flags().StringVar(&prefix, "fence-prefix", "", "etcdguard's or redisguard's fence key `prefix` (default their DefaultPrefix)")
	conn = addConnFlags(cmd)
	return cmd
}

func printFence(w io.Writer, jsonOut bool, f fenceJSON) error {
	if jsonOut {
		return printJSON(w, f)
	}
	switch {
	case f.Lowered && f.Fence == 0:
		fmt.Fprintf(w, "removed the fence of %s (was %d)\n", quote(f.Resource), f.From)
	case f.Lowered:
		fmt.Fprintf(w, "lowered the fence of %s from %d to %d\n", quote(f.Resource), f.From, f.Fence)
	case f.Fence == 0:
		fmt.Fprintf(w, "%s has no fence (highest token minted: %d)\n", quote(f.Resource), f.MaxToken)
	case f.Fence > f.MaxToken:
		fmt.Fprintf(w, "%s: fence %d is above %d, the highest token minted: poisoned (lower it with --lower-to %d)\n", quote(f.Resource), f.Fence, f.MaxToken, f.MaxToken)
	default:
		fmt.Fprintf(w, "%s: fence %d (highest token minted: %d)\n", quote(f.Resource), f.Fence, f.MaxToken)
	}
	return nil
}

// confirmLower asks on the terminal whether to lower the fence.
func confirmLower(cmd *cobra.Command, f fenceJSON, to uint64) error {
	in := cmd.InOrStdin()
	if !isTerminal(in) {
		return fmt.Errorf("%w: fence --lower-to asks for confirmation on a terminal; pass --yes to skip it", errUsage)
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "The fence of %s is %d; the highest token minted is %d.\n"+
		"Lower it to %d? Tokens %d to %d, refused until now, will be admitted again. [y/N] ", quote(f.Resource), f.Fence, f.MaxToken, to, to+1, f.Fence)
	answer, _ := bufio.NewReader(in).ReadString('\n')
	if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
		return errFenceNotConfirmed
	}
	return nil
}
