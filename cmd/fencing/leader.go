package main

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/fencing-go/fencing/election"
)

// leaderJSON is a term or a vacancy in leader's --json output.
type leaderJSON struct {
	Time             *time.Time `json:"time,omitempty"` // with --watch
	Key              string     `json:"key"`
	Live             bool       `json:"live"`
	Identity         string     `json:"identity,omitempty"`
	Token            uint64     `json:"token,omitempty"`
	LastToken        uint64     `json:"last_token"`
	ExpiresAt        *time.Time `json:"expires_at,omitempty"`
	RemainingSeconds float64    `json:"remaining_seconds,omitempty"`
}

func leaderCommand() *cobra.Command {
	var (
		conn     *connFlags
		watch    bool
		interval time.Duration
	)
	cmd := &cobra.Command{
		Use:   "leader KEY [--watch]",
		Short: "Show who leads the election KEY (--watch: each new term and vacancy)",
		Long: `Leader shows the current term of the election KEY (see "fencing elect"): the
leader's identity, the term's fencing token and when it expires unless renewed,
or that the office is vacant. With --watch it prints a line for the current state
and for each new term and each vacancy until interrupted; during a vacancy it
reads every --interval.`,
		Example: `  fencing leader jobs/scheduler --etcd-endpoints http://127.0.0.1:2379
  fencing leader jobs/scheduler --watch --json`,
		Args: cobra.ExactArgs(1),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			key := args[0]
			if !watch {
				s, ctx, done, err := conn.start(cmd)
				if err != nil {
					return err
				}
				defer done()
				l, err := election.New(s.c, key, time.Second).Leader(ctx)
				if err != nil {
					return s.wrap(ctx, err)
				}
				return printLeader(cmd.OutOrStdout(), conn.jsonOut, key, l, nil)
			}
			if interval < 10*time.Millisecond {
				return fmt.Errorf("%w: --interval %v is below 10ms", errUsage, interval)
			}
			s, err := conn.open(cmd.Context(), cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			defer s.Close()
			e := election.New(s.c, key, time.Second, election.WithObserveInterval(interval))
			for l, err := range e.Observe(cmd.Context()) {
				if err != nil {
					fmt.Fprintf(cmd.ErrOrStderr(), "fencing: leader: %v\n", s.wrap(cmd.Context(), err))
					continue
				}
				now := time.Now()
				if err := printLeader(cmd.OutOrStdout(), conn.jsonOut, key, l, &now); err != nil {
					return err
				}
			}
			return nil // interrupted
		}),
	}
	cmd.Flags().BoolVar(&watch, "watch", false, "follow the election: a line per new term and per vacancy")
	cmd.Flags().DurationVar(&interval, "interval", 100*time.Millisecond, "with --watch: how often to read during a vacancy")
	conn = addConnFlags(cmd)
	return cmd
}

func printLeader(w io.Writer, jsonOut bool, key string, l election.Leader, at *time.Time) error {
	if jsonOut {
		j := leaderJSON{Key: key, Live: l.Live, Identity: l.Identity, Token: l.Token, LastToken: l.LastToken}
		if at != nil {
			t := at.UTC()
			j.Time = &t
		}
		if l.Live {
			e := l.ExpiresAt.UTC()
			j.ExpiresAt, j.RemainingSeconds = &e, l.Remaining.Seconds()
		}
		return printJSON(w, j)
	}
	line := quote(key) + " "
	if at != nil {
		line = at.Format("15:04:05.000") + " " + line
	}
	switch {
	case l.Live:
		line += fmt.Sprintf("led by %q, term %d (%s left)", l.Identity, l.Token, short(l.Remaining))
	case l.LastToken == 0:
		line += "vacant, never led"
	default:
		line += fmt.Sprintf("vacant (last term %d)", l.LastToken)
	}
	_, err := fmt.Fprintln(w, line)
	return err
}
