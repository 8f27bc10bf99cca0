package redisbackend_test

import (
	"bytes"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// faultProxy is a loopback TCP proxy in front of a redis-server that can
// lose the reply to one script call after the server ran it, the way a
// dropped connection or a read timeout loses it in production.
type faultProxy struct {
	ln     net.Listener
	target string

	// armed is the fault for the next script call (EVAL or EVALSHA) whose
	// reply is not an error: faultNone, faultDrop or faultStall.
	armed   atomic.Int32
	dropped atomic.Int32 // replies dropped (with their connection)
	// refuse makes a drop also close the listener, so that every later
	// dial is refused: a client that resent would see a refused dial.
	refuse  atomic.Bool
	stalled atomic.Int32 // replies swallowed on a connection left open

	mu     sync.Mutex
	closed bool
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

const (
	faultNone = iota
	// faultDrop: forward the script to the server, read its reply, then
	// close the client's connection without forwarding it.
	faultDrop
	// faultStall: forward the script, swallow its reply and everything
	// after it, and keep the connection open.
	faultStall
)

func startProxy(t testing.TB, target string) *faultProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy: %v", err)
	}
	p := &faultProxy{ln: ln, target: target, conns: make(map[net.Conn]struct{})}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *faultProxy) Addr() string { return p.ln.Addr().String() }

// arm makes the next successful script call suffer fault.
func (p *faultProxy) arm(fault int32) { p.armed.Store(fault) }

func (p *faultProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// track registers a connection for close, or reports false after close.
func (p *faultProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *faultProxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			client.Close()
			continue
		}
		if !p.track(client) || !p.track(server) {
			client.Close()
			server.Close()
			return
		}
		p.wg.Add(2)
		go p.pipe(client, server)
	}
}

// pipe forwards one client connection. Requests and replies alternate on
// a go-redis pool connection, so a reply read after a script was forwarded
// is that script's reply.
func (p *faultProxy) pipe(client, server net.Conn) {
	var pending atomic.Int32 // fault for the reply to the request in flight
	go func() {              // client -> server
		defer p.wg.Done()
		buf := make([]byte, 64<<10)
		for {
			n, err := client.Read(buf)
			if n > 0 {
				chunk := bytes.ToLower(buf[:n])
				if bytes.Contains(chunk, []byte("eval")) {
					pending.Store(p.armed.Load())
				}
				if _, werr := server.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		server.Close()
	}()
	defer p.wg.Done() // server -> client
	defer client.Close()
	buf := make([]byte, 64<<10)
	stalled := false
	for {
		n, err := server.Read(buf)
		if n > 0 && !stalled {
			fault := pending.Swap(faultNone)
			isError := buf[0] == '-' // e.g. NOSCRIPT: the script did not run
			switch {
			case fault == faultDrop && !isError && p.armed.CompareAndSwap(faultDrop, faultNone):
				p.dropped.Add(1)
				if p.refuse.Load() {
					p.ln.Close()
				}
				server.Close()
				return
			case fault == faultStall && !isError && p.armed.CompareAndSwap(faultStall, faultNone):
				p.stalled.Add(1)
				stalled = true
			default:
				if _, werr := client.Write(buf[:n]); werr != nil {
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}
