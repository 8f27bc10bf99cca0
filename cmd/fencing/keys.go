package main

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/fencing-go/fencing/backend"
	"github.com/fencing-go/fencing/kubebackend"
)

func getCommand() *cobra.Command {
	var conn *connFlags
	cmd := &cobra.Command{
		Use:   "get KEY",
		Short: "Show a key's state: live or not, token, highest token, expiry",
		Long: `Get shows a key's state in one linearizable read: whether a lease is live, its
token, the highest token the key ever had, and when the lease expires on the
coordinator's clock with the time it has left, and its lock delay (grant
--lock-delay). A key whose lease ended without a release, in its lock delay, is
"delayed until <time> (<d> left)": no grant succeeds before then. It never shows
the lease ID.`,
		Example: `  fencing get orders/42 --etcd-endpoints http://127.0.0.1:2379
  FENCING_REDIS_ADDR=localhost:6379 fencing get orders/42 --json`,
		Args: cobra.ExactArgs(1),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			s, ctx, done, err := conn.start(cmd)
			if err != nil {
				return err
			}
			defer done()
			var (
				st  backend.KeyState
				obs *kubebackend.Observation // what the kube backend knows of the lease's time
			)
			if kb, ok := s.b.(*kubebackend.Backend); ok {
				var o kubebackend.Observation
				st, o, err = kb.InspectObserved(ctx, args[0])
				obs = &o
			} else {
				st, err = s.c.Inspect(ctx, args[0])
			}
			if err != nil {
				return s.wrap(ctx, err)
			}
			w := cmd.OutOrStdout()
			if conn.jsonOut {
				return printJSON(w, toStateJSON(args[0], st))
			}
			tw := tabwriter.NewWriter(w, 0, 4, 1, ' ', 0)
			fmt.Fprintf(tw, "key:\t%s\n", quote(args[0]))
			switch {
			case st.Live:
				fmt.Fprintf(tw, "state:\tlive\n")
				fmt.Fprintf(tw, "token:\t%d\n", st.Token)
				if st.Owner != "" {
					fmt.Fprintf(tw, "owner:\t%s\n", st.Owner)
				}
			case delayed(st):
				fmt.Fprintf(tw, "state:\t%s\n", delayText(st))
			case st.MaxToken == 0:
				fmt.Fprintf(tw, "state:\tnever leased\n")
			default:
				fmt.Fprintf(tw, "state:\tfree\n")
			}
			fmt.Fprintf(tw, "highest token:\t%d\n", st.MaxToken)
			switch {
			case st.Live && obs != nil:
				// The API server keeps no expiry: say what this host saw.
				fmt.Fprintf(tw, "unchanged:\tfor %s as observed from this host (the lease ends once unchanged for %s)\n", short(obs.Unchanged), short(obs.Expiry))
			case st.Live:
				fmt.Fprintf(tw, "expires:\t%s (in %s)\n", st.ExpiresAt.UTC().Format(time.RFC3339Nano), short(st.Remaining))
			}
			if st.Live {
				if st.LockDelay > 0 {
					fmt.Fprintf(tw, "lock delay:\t%s (should the lease end without a release)\n", short(st.LockDelay))
				}
			}
			return tw.Flush()
		}),
	}
	conn = addConnFlags(cmd)
	return cmd
}

// listJSON is list's --json output: one page, or every page with --all.
type listJSON struct {
	Keys []stateJSON `json:"keys"`
	Next string      `json:"next,omitempty"`
}

func listCommand() *cobra.Command {
	var (
		conn   *connFlags
		limit  int
		cursor string
		all    bool
	)
	cmd := &cobra.Command{
		Use:   "list [PREFIX]",
		Short: "List keys (that begin with PREFIX) with their state, a page at a time",
		Long: `List shows the keys that begin with PREFIX (every key without one), with their
state, --limit keys at a time. When more keys follow, it prints the cursor of the
next page: pass it back with --cursor, or give --all to list every page. Keys
whose lease ended stay listed (with their highest token) as long as the backend
keeps their records. A key in a lock delay is "delayed until <time>", with the
delay's time left; DELAY is a live lease's lock delay.`,
		Example: `  fencing list orders/ --etcd-endpoints http://127.0.0.1:2379
  fencing list --all --json --redis-addr localhost:6379`,
		Args: cobra.MaximumNArgs(1),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			if limit <= 0 {
				return fmt.Errorf("%w: --limit %d is not positive", errUsage, limit)
			}
			prefix := ""
			if len(args) == 1 {
				prefix = args[0]
			}
			s, err := conn.open(cmd.Context(), cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			defer s.Close()
			var out listJSON
			next := cursor
			for {
				ctx, cancel := s.call(cmd.Context())
				page, n, err := s.c.List(ctx, prefix, next, limit)
				err = s.wrap(ctx, err)
				cancel()
				if err != nil {
					return err
				}
				for _, k := range page {
					out.Keys = append(out.Keys, toStateJSON(k.Key, k.State))
				}
				next = n
				if !all || next == "" {
					break
				}
			}
			out.Next = next
			w := cmd.OutOrStdout()
			if out.Keys == nil {
				out.Keys = []stateJSON{}
			}
			if conn.jsonOut {
				return printJSON(w, out)
			}
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "KEY\tSTATE\tTOKEN\tHIGHEST\tLEFT\tDELAY\tOWNER")
			for _, k := range out.Keys {
				state, token, left, delay, owner := "free", "-", "-", "-", "-"
				switch {
				case k.Live:
					state, token, left = "live", fmt.Sprint(k.Token), short(seconds(k.RemainingSeconds))
					if k.LockDelaySeconds > 0 {
						delay = short(seconds(k.LockDelaySeconds))
					}
					if k.Owner != "" {
						owner = k.Owner
					}
				case k.DelayedUntil != nil:
					state, left = "delayed until "+k.DelayedUntil.Format(time.RFC3339), short(seconds(k.DelayRemainingSeconds))
				case k.MaxToken == 0:
					state = "never leased"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", quote(k.Key), state, token, k.MaxToken, left, delay, owner)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if out.Next != "" {
				fmt.Fprintf(w, "more keys: --cursor %s\n", quote(out.Next))
			}
			return nil
		}),
	}
	cmd.Flags().IntVar(&limit, "limit", 100, "keys per page")
	cmd.Flags().StringVar(&cursor, "cursor", "", "start at this page (the cursor a previous list printed)")
	cmd.Flags().BoolVar(&all, "all", false, "list every page")
	conn = addConnFlags(cmd)
	return cmd
}

// seconds turns a JSON field's seconds back into a duration.
func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
