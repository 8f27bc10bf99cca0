package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/fencing-go/fencing/backend"
)

// errNoSize is the error of stats on a backend that does not report its
// store's size.
var errNoSize = errors.New("the backend does not report its store's size (backend.Sizer)")

func statsCommand() *cobra.Command {
	var conn *connFlags
	cmd := &cobra.Command{
		Use:   "stats",
		Short: "Show how many key records the store holds, and how many keys this process reclaimed",
		Long: `Stats shows the store's size as the backend reports it (backend.Sizer): the key
records it holds (keys with a live lease, in a lock delay, or idle for less than
the backend's retention) and the idle keys this process's backend reclaimed since
it started. A one-shot command reclaims little or nothing: the reclaims of the
long-running processes that share the store are counted by them (the metric
fencing.store.reclaimed). A backend that does not report its size is an error.`,
		Example: `  fencing stats
  fencing stats --json --redis-addr localhost:6379`,
		Args: cobra.NoArgs,
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			s, ctx, done, err := conn.start(cmd)
			if err != nil {
				return err
			}
			defer done()
			st, err := s.stats(ctx)
			if err != nil {
				return err
			}
			if conn.jsonOut {
				return printJSON(cmd.OutOrStdout(), st)
			}
			return printStats(cmd.OutOrStdout(), st)
		}),
	}
	conn = addConnFlags(cmd)
	return cmd
}

// statsJSON is stats' --json output.
type statsJSON struct {
	Backend   string `json:"backend"`
	Records   int64  `json:"records"`
	Reclaimed uint64 `json:"reclaimed"`
}

// stats reads the size of the session's store.
func (s *session) stats(ctx context.Context) (statsJSON, error) {
	sz, ok := s.b.(backend.Sizer)
	if !ok {
		return statsJSON{}, fmt.Errorf("%w: %s", errNoSize, s.name)
	}
	st, err := sz.Size(ctx)
	if err = s.wrap(ctx, err); err != nil {
		return statsJSON{}, err
	}
	return statsJSON{Backend: s.name, Records: st.Records, Reclaimed: st.Reclaimed}, nil
}

func printStats(w io.Writer, st statsJSON) error {
	_, err := fmt.Fprintf(w, "backend    %s\nrecords    %d\nreclaimed  %d (by this process)\n", st.Backend, st.Records, st.Reclaimed)
	return err
}
