package etcdtest

import (
	"bytes"
	"net"
	"sync"
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
)

// Proxy is a TCP proxy in front of one server, for faults that an embedded
// server cannot make by itself: lost replies, a server that hangs, cut
// connections.
type Proxy struct {
	// Addr is the proxy's loopback address; URL is http://Addr.
	Addr string
	URL  string

	target string
	ln     net.Listener
	wg     sync.WaitGroup

	mu      sync.Mutex
	mode    Mode
	delay   time.Duration     // before each reply is carried
	paused  map[string]bool   // senders whose connections are held (see PauseFrom)
	changed chan struct{}     // closed and replaced when mode changes
	conns   map[net.Conn]*tag // both ends of every pair share one tag
	closed  bool
}

// tag is what a proxy learned about one connection pair: the peer that
// opened it, from the X-Server-From header of etcd's peer requests.
type tag struct{ from string }

// StartProxy starts a proxy to a server's client URL (http://host:port) and
// closes it in t's cleanup.
func StartProxy(t testing.TB, serverURL string) *Proxy {
	t.Helper()
	target := mustURL(serverURL).Host
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("etcdtest: proxy: %v", err)
	}
	p := &Proxy{
		Addr:    ln.Addr().String(),
		target:  target,
		ln:      ln,
		changed: make(chan struct{}),
		paused:  make(map[string]bool),
		conns:   make(map[net.Conn]*tag),
	}
	p.URL = "http://" + p.Addr
	t.Cleanup(p.Close)
	p.wg.Add(1)
	go p.accept()
	return p
}

// Endpoints returns the proxy's endpoint as a slice.
func (p *Proxy) Endpoints() []string { return []string{p.URL} }

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

// PauseFrom holds the bytes of connections that the etcd member with ID
// from (its hexadecimal member ID, as in the X-Server-From header of peer
// requests) opened through this proxy, both ways, until Resume: a proxy in
// front of a member's peer URL then cuts that one peer off from it. Other
// connections go on as the mode says.
func (p *Proxy) PauseFrom(from string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.paused[from] = true
	p.wakeLocked()
}

// ResumeFrom undoes PauseFrom.
func (p *Proxy) ResumeFrom(from string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.paused, from)
	p.wakeLocked()
}

// wakeLocked wakes every pump waiting for a change.
func (p *Proxy) wakeLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// Cut closes every open connection at once, both ways (the client sees a
// reset connection); new connections are accepted as before.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
	}
	p.wakeLocked()
}

// Close stops the proxy and closes its connections, and waits for its
// goroutines.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.ln.Close()
	p.Cut()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close() // the client sees its connection closed, as if refused
			continue
		}
		if !p.track(c, s) {
			return
		}
		p.wg.Add(2)
		go p.pump(s, c, false)
		go p.pump(c, s, true)
	}
}

// track registers a connection pair unless the proxy is closed.
func (p *Proxy) track(c, s net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		s.Close()
		return false
	}
	tg := &tag{}
	p.conns[c] = tg
	p.conns[s] = tg
	return true
}

// pump carries bytes from src to dst as the mode says; reply is true for
// the server-to-client direction.
func (p *Proxy) pump(dst, src net.Conn, reply bool) {
	defer p.wg.Done()
	defer func() {
		p.mu.Lock()
		delete(p.conns, src)
		delete(p.conns, dst)
		p.mu.Unlock()
		src.Close()
		dst.Close()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !reply {
			p.learn(src, buf[:n])
		}
		if n > 0 && !p.carry(dst, buf[:n], reply) {
			return
		}
		if err != nil {
			return
		}
	}
}

var fromHeader = []byte("\r\nX-Server-From: ")

// learn tags src's pair with the sender named by an X-Server-From header in
// b, the first time one appears (etcd's peer requests carry it).
func (p *Proxy) learn(src net.Conn, b []byte) {
	_, rest, ok := bytes.Cut(b, fromHeader)
	if !ok {
		return
	}
	from, _, ok := bytes.Cut(rest, []byte("\r\n"))
	if !ok {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if tg := p.conns[src]; tg != nil && tg.from == "" {
		tg.from = string(from)
	}
}

// carry writes b to dst, drops it or holds it until the mode changes. It
// returns false when the connection should end.
func (p *Proxy) carry(dst net.Conn, b []byte, reply bool) bool {
	for {
		p.mu.Lock()
		mode, changed, delay := p.mode, p.changed, p.delay
		tg, open := p.conns[dst]
		held := open && tg.from != "" && p.paused[tg.from]
		p.mu.Unlock()
		switch {
		case !open:
			return false
		case mode == Pause || held:
			<-changed
			continue
		case mode == DropReplies && reply:
			return true
		}
		if reply && delay > 0 {
			time.Sleep(delay)
		}
		_, err := dst.Write(b)
		return err == nil
	}
}
