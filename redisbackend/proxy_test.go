package redisbackend_test

import (
	"bytes"
	"sync/atomic"
	"testing"

	"github.com/fencing-go/fencing/internal/testing/faultproxy"
)

// faultProxy is a loopback TCP proxy in front of a redis-server that can
// lose the reply to one script call after the server ran it, the way a
// dropped connection or a read timeout loses it in production.
type faultProxy struct {
	*faultproxy.Proxy

	// armed is the fault for the next script call (EVAL or EVALSHA) whose
	// reply is not an error: faultNone, faultDrop or faultStall.
	armed   atomic.Int32
	dropped atomic.Int32 // replies dropped (with their connection)
	// refuse makes a drop also close the listener, so that every later
	// dial is refused: a client that resent would see a refused dial.
	refuse  atomic.Bool
	stalled atomic.Int32 // replies swallowed on a connection left open
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
	p := &faultProxy{}
	p.Proxy = faultproxy.Start(t, target, faultproxy.Hooks{OnRequest: p.request, OnReply: p.reply})
	return p // the hooks use p's fields, never p.Proxy, which is set after the proxy starts
}

// arm makes the next successful script call suffer fault.
func (p *faultProxy) arm(fault int32) { p.armed.Store(fault) }

// request notes the armed fault for the reply to a script call. Requests
// and replies alternate on a go-redis pool connection, so a reply read
// after a script was forwarded is that script's reply.
func (p *faultProxy) request(c *faultproxy.Conn, b []byte) {
	if bytes.Contains(bytes.ToLower(b), []byte("eval")) {
		c.Note.Store(p.armed.Load())
	}
}

// reply applies the fault noted for the request in flight.
func (p *faultProxy) reply(c *faultproxy.Conn, b []byte) faultproxy.Verdict {
	fault := c.Note.Swap(faultNone)
	isError := b[0] == '-' // e.g. NOSCRIPT: the script did not run
	switch {
	case fault == faultDrop && !isError && p.armed.CompareAndSwap(faultDrop, faultNone):
		p.dropped.Add(1)
		if p.refuse.Load() {
			c.Proxy().CloseListener()
		}
		return faultproxy.Close
	case fault == faultStall && !isError && p.armed.CompareAndSwap(faultStall, faultNone):
		p.stalled.Add(1)
		return faultproxy.Stall
	}
	return faultproxy.Carry
}
