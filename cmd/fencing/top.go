package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"
	"github.com/spf13/cobra"

	"github.com/fencing-go/fencing/backend"
)

// topRow is one key in top's view, and in its --json output.
type topRow struct {
	stateJSON
	// Waiters is how many waiters are in the key's line (Lock with
	// WithFIFO, hold --fifo), or -1 when the backend cannot count them.
	Waiters int `json:"waiters"`
}

// topJSON is top's --json output.
type topJSON struct {
	Time time.Time `json:"time"`
	Keys []topRow  `json:"keys"`
}

// maxTopWatches bounds how many live keys top watches for releases.
const maxTopWatches = 64

func topCommand() *cobra.Command {
	var (
		conn     *connFlags
		interval time.Duration
		once     bool
	)
	cmd := &cobra.Command{
		Use:   "top [PREFIX]",
		Short: "A live view of the keys under PREFIX: holder, token, time left, waiters",
		Long: `Top shows the keys that begin with PREFIX (every key without one), most contended
first: their state (live, free, delayed), the holder's owner label, the token, the
time the lease has left, its lock delay, and how many waiters are in the key's
line (Lock with WithFIFO, hold --fifo; "?" where the backend cannot count them).
It never shows a lease ID.

On a terminal it redraws in place: arrows, j/k, PgUp/PgDn scroll, q quits; it
works over SSH like any terminal program. It reads the keys every --interval
(the backends have no event stream for new leases or new waiters) and, on a
backend that announces releases (all of this module's), at once when a shown
lease ends. While reads fail, it keeps the last rows read, marked STALE, with
the time left unknown ("?"), until a read succeeds. When its output is not a
terminal, or with --once, it prints the table once and exits; --json prints it
once as JSON.`,
		Example: `  fencing top jobs/
  fencing top --once orders/ --redis-addr localhost:6379
  fencing top --json | jq '.keys[] | select(.waiters > 0)'`,
		Args: cobra.MaximumNArgs(1),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			if interval < 10*time.Millisecond {
				return fmt.Errorf("%w: --interval %v is below 10ms", errUsage, interval)
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
			out := cmd.OutOrStdout()
			if once || conn.jsonOut || !isTerminal(out) || !isTerminal(cmd.InOrStdin()) {
				rows, err := topRead(cmd.Context(), s, prefix)
				if err != nil {
					return s.wrap(cmd.Context(), err)
				}
				if conn.jsonOut {
					return printJSON(out, topJSON{Time: time.Now().UTC(), Keys: rows})
				}
				return topTable(out, rows, 0, false)
			}
			return topRun(cmd.Context(), s, prefix, interval, cmd.InOrStdin(), out)
		}),
	}
	cmd.Flags().DurationVar(&interval, "interval", 250*time.Millisecond, "how often to read the keys")
	cmd.Flags().BoolVar(&once, "once", false, "print the table once and exit")
	conn = addConnFlags(cmd)
	return cmd
}

// topRead reads every key under prefix, with its line's length, most
// contended first: most waiters, then live, delayed, free, then by key.
func topRead(ctx context.Context, s *session, prefix string) ([]topRow, error) {
	rows := []topRow{}
	cursor := ""
	for {
		cctx, cancel := s.call(ctx)
		page, next, err := s.c.List(cctx, prefix, cursor, 0)
		cancel()
		if err != nil {
			return nil, err
		}
		for _, k := range page {
			rows = append(rows, topRow{stateJSON: toStateJSON(k.Key, k.State), Waiters: -1})
		}
		if next == "" {
			break
		}
		cursor = next
	}
	if lr, ok := s.b.(backend.LineReader); ok {
		for i := range rows {
			cctx, cancel := s.call(ctx)
			n, err := lr.LineLength(cctx, rows[i].Key)
			cancel()
			if err != nil {
				return nil, err
			}
			rows[i].Waiters = n
		}
	}
	slices.SortStableFunc(rows, func(a, b topRow) int {
		return cmp.Or(cmp.Compare(b.Waiters, a.Waiters), cmp.Compare(rank(a), rank(b)), strings.Compare(a.Key, b.Key))
	})
	return rows, nil
}

// rank orders states by how much they block: live, delayed, free.
func rank(r topRow) int {
	switch {
	case r.Live:
		return 0
	case r.DelayedUntil != nil:
		return 1
	}
	return 2
}

// topCells is a row's columns as text. A stale row (from a read before
// one that failed) shows "?" for the time left: what it showed then is no
// longer true, and the lease may have been renewed or released since.
func topCells(r topRow, stale bool) []string {
	state, owner, token, left, delay, waiters := "free", "-", "-", "-", "-", "?"
	switch {
	case r.Live:
		state, token, left = "live", strconv.FormatUint(r.Token, 10), short(seconds(r.RemainingSeconds))
		if r.Owner != "" {
			owner = r.Owner
		}
		if r.LockDelaySeconds > 0 {
			delay = short(seconds(r.LockDelaySeconds))
		}
	case r.DelayedUntil != nil:
		state, left = "delayed", short(seconds(r.DelayRemainingSeconds))
	case r.MaxToken == 0:
		state = "never leased"
	}
	if r.Waiters >= 0 {
		waiters = strconv.Itoa(r.Waiters)
	}
	if stale && left != "-" {
		left = "?"
	}
	return []string{quote(r.Key), state, owner, token, left, delay, waiters}
}

var topHeader = []string{"KEY", "STATE", "OWNER", "TOKEN", "LEFT", "DELAY", "WAITERS"}

// topTable writes rows from offset on as a plain table; stale marks them
// as read before a read that failed.
func topTable(w io.Writer, rows []topRow, offset int, stale bool) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(topHeader, "\t"))
	for _, r := range rows[min(offset, len(rows)):] {
		fmt.Fprintln(tw, strings.Join(topCells(r, stale), "\t"))
	}
	return tw.Flush()
}

// topModel is top's terminal view (bubbletea).
type topModel struct {
	ctx      context.Context
	s        *session
	prefix   string
	interval time.Duration
	rows     []topRow
	read     time.Time // when rows were read
	err      error     // the last read's error: rows are stale
	failed   time.Time // when that read failed
	offset   int       // the first row shown
	height   int
	watches  map[string]backend.Subscription
	woken    chan struct{} // a watched lease may have ended
}

// topReadMsg is a read's result.
type topReadMsg struct {
	rows []topRow
	at   time.Time
	err  error
}

// topTickMsg asks for the next read.
type topTickMsg struct{}

func topRun(ctx context.Context, s *session, prefix string, interval time.Duration, in io.Reader, out io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	m := &topModel{ctx: ctx, s: s, prefix: prefix, interval: interval, height: 24,
		watches: map[string]backend.Subscription{}, woken: make(chan struct{}, 1)}
	defer m.closeWatches()
	p := tea.NewProgram(m, tea.WithContext(ctx), tea.WithInput(in), tea.WithOutput(out))
	_, err := p.Run()
	if errors.Is(err, tea.ErrProgramKilled) && ctx.Err() != nil {
		return nil // interrupted
	}
	return err
}

func (m *topModel) Init() tea.Cmd { return m.readCmd() }

// readCmd reads the keys in the background.
func (m *topModel) readCmd() tea.Cmd {
	return func() tea.Msg {
		rows, err := topRead(m.ctx, m.s, m.prefix)
		return topReadMsg{rows: rows, at: time.Now(), err: err}
	}
}

// waitCmd waits for the interval or a watched release, whichever is first.
func (m *topModel) waitCmd() tea.Cmd {
	return func() tea.Msg {
		t := time.NewTimer(m.interval)
		defer t.Stop()
		select {
		case <-t.C:
		case <-m.woken:
		case <-m.ctx.Done():
		}
		return topTickMsg{}
	}
}

// watch keeps a release watch (backend.Notifier) on each shown live key,
// up to maxTopWatches, and forwards their wake-ups to m.woken.
func (m *topModel) watch(rows []topRow) {
	n, ok := m.s.b.(backend.Notifier)
	if !ok {
		return
	}
	live := map[string]bool{}
	for _, r := range rows {
		if r.Live && len(live) < maxTopWatches {
			live[r.Key] = true
		}
	}
	for key, sub := range m.watches {
		if !live[key] {
			sub.Close()
			delete(m.watches, key)
		}
	}
	for key := range live {
		if _, ok := m.watches[key]; ok {
			continue
		}
		cctx, cancel := m.s.call(m.ctx)
		sub, err := n.NotifyFree(cctx, key)
		cancel()
		if err != nil {
			continue // polled instead
		}
		m.watches[key] = sub
		go func(freed <-chan struct{}) {
			for range freed {
				select {
				case m.woken <- struct{}{}:
				default:
				}
			}
		}(sub.Freed())
	}
}

func (m *topModel) closeWatches() {
	for key, sub := range m.watches {
		sub.Close()
		delete(m.watches, key)
	}
}

func (m *topModel) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case topReadMsg:
		m.err = msg.err
		if msg.err == nil {
			m.read, m.rows = msg.at, msg.rows
			m.watch(msg.rows)
		} else {
			m.failed = msg.at
		}
		m.offset = max(min(m.offset, len(m.rows)-1), 0)
		return m, m.waitCmd()
	case topTickMsg:
		if m.ctx.Err() != nil {
			return m, tea.Quit
		}
		return m, m.readCmd()
	case tea.WindowSizeMsg:
		m.height = msg.Height
	case tea.KeyPressMsg:
		page := max(m.height-4, 1)
		switch msg.String() {
		case "q", "ctrl+c", "esc":
			return m, tea.Quit
		case "down", "j":
			m.offset++
		case "up", "k":
			m.offset--
		case "pgdown", "space":
			m.offset += page
		case "pgup":
			m.offset -= page
		case "home", "g":
			m.offset = 0
		case "end", "G":
			m.offset = len(m.rows)
		}
		m.offset = max(min(m.offset, len(m.rows)-1), 0)
	}
	return m, nil
}

var (
	topTitle  = lipgloss.NewStyle().Bold(true)
	topHead   = lipgloss.NewStyle().Reverse(true)
	topErr    = lipgloss.NewStyle().Foreground(lipgloss.Red)
	topFooter = lipgloss.NewStyle().Faint(true)
)

func (m *topModel) View() tea.View {
	var b strings.Builder
	prefix := m.prefix
	if prefix == "" {
		prefix = "(all keys)"
	}
	b.WriteString(topTitle.Render(fmt.Sprintf("fencing top %s on %s", quote(prefix), m.s.name)))
	stale := m.err != nil
	if !m.read.IsZero() {
		fmt.Fprintf(&b, "  %d keys, read %s", len(m.rows), m.read.Format("15:04:05.000"))
		if stale {
			b.WriteString(topErr.Render("  STALE: time left unknown (?) until a read succeeds"))
		}
	}
	b.WriteString("\n")
	lines := 4 // title, header, footer, and one to spare
	if stale {
		b.WriteString(topErr.Render(fmt.Sprintf("error at %s: %v", m.failed.Format("15:04:05.000"), m.s.wrap(m.ctx, m.err))) + "\n")
		lines++
	}
	var t strings.Builder
	shown := max(m.height-lines, 1)
	end := min(m.offset+shown, len(m.rows))
	_ = topTable(&t, m.rows[min(m.offset, len(m.rows)):end], 0, stale)
	for i, l := range strings.Split(strings.TrimRight(t.String(), "\n"), "\n") {
		if i == 0 {
			l = topHead.Render(l)
		}
		b.WriteString(l + "\n")
	}
	b.WriteString(topFooter.Render(fmt.Sprintf("rows %d-%d of %d · ↑/↓ j/k PgUp/PgDn scroll · q quits", min(m.offset+1, len(m.rows)), end, len(m.rows))))
	v := tea.NewView(b.String())
	v.AltScreen = true
	return v
}
