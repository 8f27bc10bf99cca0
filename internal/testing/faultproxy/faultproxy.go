// Package faultproxy is a loopback TCP proxy in front of one server (etcd,
// Redis, PostgreSQL, a container's published port), for the network faults
// a real server cannot make by itself: lost replies, a server that hangs, a
// slow network, reset connections, a partition. Protocol-aware faults (a
// reply lost after one kind of request, a peer cut off by name) are hooks
// on the bytes each connection carries.
package faultproxy

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Mode is what a Proxy does with the bytes it carries.
type Mode int

const (
	// Forward carries bytes both ways.
	Forward Mode = iota
	// DropReplies carries requests to the server and throws its replies
	// away: the server acts, the client never learns it did.
	DropReplies
	// Pause stops carrying bytes either way, keeping the connections open
	// (a server that stops answering); bytes read meanwhile are held and
	// carried once the mode changes.
	Pause
	// ResetReplies carries requests to the server and answers each reply
	// by resetting the client's connection (a TCP RST): the server acts,
	// the client reads "connection reset by peer" after sending.
	ResetReplies
)

// Verdict is what an OnReply hook decides for the reply bytes it is shown.
type Verdict int

const (
	// Carry carries the bytes to the client.
	Carry Verdict = iota
	// Close closes the connection pair without carrying the bytes (the
	// server acted; the client sees its connection end).
	Close
	// Stall swallows the bytes and every later reply on the pair, and keeps
	// the connection open (the client waits for an answer that never comes).
	Stall
)

// Hooks see the bytes a connection pair carries. Each is called from the
// goroutine that reads that direction, so one pair's requests (or replies)
// reach a hook in order.
type Hooks struct {
	// OnRequest is shown every chunk read from a client, before it is
	// carried (or held) as the mode says.
	OnRequest func(c *Conn, b []byte)
	// OnReply is shown every chunk read from the server while the pair is
	// not stalled, before the mode applies, and decides its fate.
	OnReply func(c *Conn, b []byte) Verdict
}

// Conn is one client connection and its server connection.
type Conn struct {
	p              *Proxy
	client, server net.Conn

	// Note is free for hooks: the state of a protocol-aware fault (for
	// example the fault armed for the reply to the request in flight).
	Note atomic.Int32

	// Under the proxy's mutex:
	tag     string // see Tag
	tainted bool   // lost bytes in a partition; Heal closes it
	stalled bool   // a Stall verdict: replies are swallowed
}

// Proxy is a TCP proxy in front of one server.
type Proxy struct {
	target string
	ln     net.Listener
	hooks  Hooks
	wg     sync.WaitGroup

	mu        sync.Mutex
	mode      Mode
	delay     time.Duration   // before each reply is carried
	held      map[string]bool // tags whose connections are paused (see Hold)
	partition bool            // see Partition
	changed   chan struct{}   // closed and replaced on every change
	conns     map[*Conn]struct{}
	closed    bool
}

// Start starts a proxy to target (host:port) on a free loopback port and
// closes it in t's cleanup.
func Start(t testing.TB, target string, hooks Hooks) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("faultproxy: %v", err)
	}
	p := &Proxy{
		target:  target,
		ln:      ln,
		hooks:   hooks,
		held:    make(map[string]bool),
		changed: make(chan struct{}),
		conns:   make(map[*Conn]struct{}),
	}
	t.Cleanup(p.Close)
	p.wg.Add(1)
	go p.accept()
	return p
}

// Addr is the address clients dial instead of the server's.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetMode changes what the proxy does with the bytes of every connection,
// open and future.
func (p *Proxy) SetMode(m Mode) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode = m
	p.wakeLocked()
}

// SetDelay makes the proxy hold every reply for d before carrying it (a
// slow network or server); zero carries replies at once.
func (p *Proxy) SetDelay(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay = d
}

// Tag names c's pair (for Hold); the first name given sticks.
func (c *Conn) Tag(tag string) {
	c.p.mu.Lock()
	defer c.p.mu.Unlock()
	if c.tag == "" {
		c.tag = tag
	}
}

// Proxy returns the proxy that carries c.
func (c *Conn) Proxy() *Proxy { return c.p }

// Hold holds the bytes of the pairs tagged tag, both ways, until Unhold.
// Other connections go on as the mode says.
func (p *Proxy) Hold(tag string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.held[tag] = true
	p.wakeLocked()
}

// Unhold undoes Hold.
func (p *Proxy) Unhold(tag string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.held, tag)
	p.wakeLocked()
}

// Partition cuts clients off the server as a network partition would:
// every byte either way on the connections open now or opened before Heal
// is dropped (the client's requests time out rather than fail fast).
func (p *Proxy) Partition() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.partition = true
	for c := range p.conns {
		c.tainted = true
	}
}

// Heal ends a Partition and closes the connections that lost bytes in it,
// so that clients reconnect over clean streams.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.partition = false
	for c := range p.conns {
		if c.tainted {
			c.client.Close()
			c.server.Close()
		}
	}
}

// Reset closes every open connection at once, both ways (the client sees a
// reset connection); new connections are accepted as before.
func (p *Proxy) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.client.Close()
		c.server.Close()
		delete(p.conns, c)
	}
	p.wakeLocked()
}

// CloseListener stops accepting connections: every later dial is refused,
// while open connections go on.
func (p *Proxy) CloseListener() { p.ln.Close() }

// Close stops the proxy, closes its connections and waits for its
// goroutines.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.ln.Close()
	p.Reset()
	p.wg.Wait()
}

// wakeLocked wakes every pump waiting for a change.
func (p *Proxy) wakeLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		cc, err := p.ln.Accept()
		if err != nil {
			return
		}
		sc, err := net.Dial("tcp", p.target)
		if err != nil {
			cc.Close() // the client sees its connection closed, as if refused
			continue
		}
		c := &Conn{p: p, client: cc, server: sc}
		if !p.track(c) {
			return
		}
		p.wg.Add(2)
		go p.pump(c, false)
		go p.pump(c, true)
	}
}

// track registers a connection pair unless the proxy is closed.
func (p *Proxy) track(c *Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.client.Close()
		c.server.Close()
		return false
	}
	c.tainted = p.partition
	p.conns[c] = struct{}{}
	return true
}

// pump carries bytes one way for c: reply is true for the server-to-client
// direction.
func (p *Proxy) pump(c *Conn, reply bool) {
	defer p.wg.Done()
	defer func() {
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
		c.client.Close()
		c.server.Close()
	}()
	src, dst := c.client, c.server
	if reply {
		src, dst = c.server, c.client
	}
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.carry(c, dst, buf[:n], reply) {
			return
		}
		if err != nil {
			return
		}
	}
}

// carry shows b to the hooks, then writes it to dst, drops it or holds it
// until the proxy changes. It returns false when the pair should end.
func (p *Proxy) carry(c *Conn, dst net.Conn, b []byte, reply bool) bool {
	switch {
	case !reply && p.hooks.OnRequest != nil:
		p.hooks.OnRequest(c, b)
	case reply && p.hooks.OnReply != nil:
		p.mu.Lock()
		stalled := c.stalled
		p.mu.Unlock()
		if stalled {
			return true
		}
		switch p.hooks.OnReply(c, b) {
		case Close:
			return false
		case Stall:
			p.mu.Lock()
			c.stalled = true
			p.mu.Unlock()
			return true
		}
	}
	for {
		p.mu.Lock()
		mode, changed, delay := p.mode, p.changed, p.delay
		_, open := p.conns[c]
		held := c.tag != "" && p.held[c.tag]
		tainted := c.tainted
		p.mu.Unlock()
		switch {
		case !open:
			return false
		case tainted:
			return true
		case mode == Pause || held:
			<-changed
			continue
		case mode == DropReplies && reply:
			return true
		case mode == ResetReplies && reply:
			if tc, ok := c.client.(*net.TCPConn); ok {
				_ = tc.SetLinger(0) // Close sends RST, not FIN
			}
			return false
		}
		if reply && delay > 0 {
			time.Sleep(delay)
		}
		_, err := dst.Write(b)
		return err == nil
	}
}
