package redisbackend

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/fencing-go/fencing/backend"
)

// Inspect implements backend.Inspector: one read-only script reads the
// record against the server's clock. MaxToken is the record's token field,
// so it also shows a counter that was set without a lease. A live lease's
// LockDelay is the record's; during a lock delay DelayedUntil is its end
// on the server's clock, computed as the grant script computes it.
func (b *Backend) Inspect(ctx context.Context, key string) (backend.KeyState, error) {
	if err := b.ready(ctx, backend.CheckKey(key)); err != nil {
		return backend.KeyState{}, err
	}
	reply, err := inspectScript.run(ctx, b.batch, b.RedisKey(key)).Slice()
	if err != nil {
		return backend.KeyState{}, sendError(ctx, "inspect", err)
	}
	st, err := parseState(reply)
	if err != nil {
		return backend.KeyState{}, fmt.Errorf("redisbackend: inspect: %w", err)
	}
	return st, nil
}

// DefaultListLimit is the page size of List when the caller gives none.
const DefaultListLimit = 100

// minScanCount is the smallest COUNT hint List gives SCAN, so that a small
// page on a big server does not take a round trip per few keys.
const minScanCount = 100

// List implements backend.Lister with SCAN over the backend's prefix (on a
// Cluster, over each master in turn, in address order). Keys are stored
// base64url-encoded, which does not keep prefixes, so the MATCH pattern
// selects the backend's records and List keeps those whose decoded key has
// prefix. The page's states are read with the inspect script, pipelined:
// one round trip for the page (per master on a Cluster).
//
// The order is SCAN's. A page holds at most limit keys: SCAN returns
// batches of its own size, and keys of a batch beyond the page ride in the
// cursor to the next page, so none is skipped. SCAN itself returns every
// key stored during the whole listing, but may return one twice when Redis
// resizes its hash table in between; List removes repeats within a page
// only.
//
// On a client that does not end its reads at a context's end (see
// honoursDeadlines), a listing whose context can end runs on a goroutine
// of its own, which List stops waiting for when the context ends.
func (b *Backend) List(ctx context.Context, prefix, cursor string, limit int) ([]backend.KeyInfo, string, error) {
	if err := b.ready(ctx, nil); err != nil {
		return nil, "", err
	}
	if !b.batch.detach || ctx.Done() == nil {
		return b.list(ctx, prefix, cursor, limit)
	}
	type page struct {
		infos []backend.KeyInfo
		next  string
	}
	p, err := await(b.batch, ctx, func() (page, error) {
		infos, next, err := b.list(ctx, prefix, cursor, limit)
		return page{infos, next}, err
	})
	if abandoned(err) || errors.As(err, new(notSentError)) {
		return nil, "", fmt.Errorf("redisbackend: list: %w", err)
	}
	return p.infos, p.next, err
}

func (b *Backend) list(ctx context.Context, prefix, cursor string, limit int) ([]backend.KeyInfo, string, error) {
	if limit <= 0 {
		limit = DefaultListLimit
	}
	cur, err := decodeCursor(cursor)
	if err != nil {
		return nil, "", err
	}
	nodes, err := b.scanNodes(ctx)
	if err != nil {
		return nil, "", sendError(ctx, "list", err)
	}
	// The node to scan: the cursor's, or the next one if it left the
	// cluster meanwhile.
	i, _ := slices.BinarySearchFunc(nodes, cur.Node, func(n scanNode, addr string) int { return strings.Compare(n.addr, addr) })
	if i < len(nodes) && nodes[i].addr != cur.Node {
		cur.Scan = 0
	}
	if cur.Done {
		i = len(nodes)
	}
	keys := cur.Pending
	seen := make(map[string]bool, len(keys))
	for _, k := range keys {
		seen[k] = true
	}
	pattern := escapeGlob(b.prefix) + "{*" + recordSuffix
	for len(keys) < limit && i < len(nodes) {
		batch, next, err := nodes[i].client.Scan(ctx, cur.Scan, pattern, int64(max(limit, minScanCount))).Result()
		if err != nil {
			return nil, "", sendError(ctx, "list", err)
		}
		for _, rk := range batch {
			if key, ok := b.decodeKey(rk); ok && strings.HasPrefix(key, prefix) && !seen[rk] {
				seen[rk] = true
				keys = append(keys, rk)
			}
		}
		if cur.Scan = next; next == 0 {
			i++
		}
	}
	page, pending := keys[:min(limit, len(keys))], keys[min(limit, len(keys)):]
	infos, err := b.states(ctx, page)
	if err != nil {
		return nil, "", err
	}
	if i >= len(nodes) && len(pending) == 0 {
		return infos, "", nil
	}
	next := listCursor{Scan: cur.Scan, Pending: pending, Done: i >= len(nodes)}
	if i < len(nodes) {
		next.Node = nodes[i].addr
	}
	return infos, next.encode(), nil
}

// listCursor is where a listing goes on: SCAN's cursor on the master at
// Node (empty for a *redis.Client), and scanned keys not yet returned.
type listCursor struct {
	Node    string   `json:"n,omitempty"`
	Scan    uint64   `json:"c,omitempty"`
	Pending []string `json:"p,omitempty"`
	Done    bool     `json:"d,omitempty"` // every node is scanned
}

func (c listCursor) encode() string {
	b, _ := json.Marshal(c) // cannot fail: strings and numbers
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeCursor(s string) (listCursor, error) {
	var c listCursor
	if s == "" {
		return c, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err == nil {
		err = json.Unmarshal(b, &c)
	}
	if err != nil {
		return c, fmt.Errorf("redisbackend: %w: %w", backend.ErrInvalidCursor, err)
	}
	return c, nil
}

// scanNode is a server to SCAN: the client itself, or each Cluster master.
type scanNode struct {
	addr   string
	client redis.Cmdable
}

// scanNodes returns the servers to SCAN, sorted by address.
func (b *Backend) scanNodes(ctx context.Context) ([]scanNode, error) {
	cc, ok := b.client.(*redis.ClusterClient)
	if !ok {
		return []scanNode{{client: b.client}}, nil
	}
	var mu sync.Mutex
	var nodes []scanNode
	err := cc.ForEachMaster(ctx, func(_ context.Context, c *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		nodes = append(nodes, scanNode{addr: c.Options().Addr, client: c})
		return nil
	})
	slices.SortFunc(nodes, func(a, b scanNode) int { return strings.Compare(a.addr, b.addr) })
	return nodes, err
}

// states reads the state of the records rks in one pipeline (which a
// Cluster client splits by master), sending the script's source for those
// whose server lacked it.
func (b *Backend) states(ctx context.Context, rks []string) ([]backend.KeyInfo, error) {
	cmds := make([]onceCmd, len(rks))
	send := func(source bool, which []int) error {
		pipe := b.client.Pipeline()
		for _, i := range which {
			cmds[i] = inspectScript.cmd(ctx, source, rks[i], nil)
			_ = pipe.Process(ctx, cmds[i])
		}
		_, err := pipe.Exec(ctx)
		return err
	}
	all := make([]int, len(rks))
	for i := range all {
		all[i] = i
	}
	if len(rks) > 0 {
		_ = send(false, all) // errors are on the commands
	}
	var missing []int
	for i, c := range cmds {
		if isNoScript(c.Err()) {
			missing = append(missing, i)
		}
	}
	if len(missing) > 0 {
		_ = send(true, missing)
	}
	infos := make([]backend.KeyInfo, 0, len(rks))
	for i, c := range cmds {
		reply, err := c.Slice()
		if err != nil {
			return nil, sendError(ctx, "list", err)
		}
		st, err := parseState(reply)
		if err != nil {
			return nil, fmt.Errorf("redisbackend: list: %w", err)
		}
		key, _ := b.decodeKey(rks[i])
		infos = append(infos, backend.KeyInfo{Key: key, State: st})
	}
	return infos, nil
}

// escapeGlob quotes the characters that SCAN's MATCH pattern treats
// specially.
func escapeGlob(s string) string {
	var sb strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '*', '?', '[', ']', '\\':
			sb.WriteByte('\\')
			sb.WriteByte(c)
		default:
			sb.WriteByte(c)
		}
	}
	return sb.String()
}
