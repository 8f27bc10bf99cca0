package etcdtest

import (
	"bytes"
	"testing"

	"github.com/fencing-go/fencing/internal/testing/faultproxy"
)

// Mode is what a Proxy does with the bytes it carries (see faultproxy).
type Mode = faultproxy.Mode

// The modes of a Proxy.
const (
	Forward     = faultproxy.Forward
	DropReplies = faultproxy.DropReplies
	Pause       = faultproxy.Pause
)

// Proxy is a faultproxy.Proxy in front of an etcd URL: client or peer.
type Proxy struct {
	*faultproxy.Proxy
	// URL is http://Addr().
	URL string
}

// StartProxy starts a proxy to a server's client or peer URL (http://host:port)
// and closes it in t's cleanup. It learns which etcd member opened each
// connection, from the X-Server-From header of etcd's peer requests, for
// PauseFrom.
func StartProxy(t testing.TB, serverURL string) *Proxy {
	t.Helper()
	p := &Proxy{Proxy: faultproxy.Start(t, mustURL(serverURL).Host, faultproxy.Hooks{OnRequest: learn})}
	p.URL = "http://" + p.Addr()
	return p
}

// Endpoints returns the proxy's endpoint as a slice.
func (p *Proxy) Endpoints() []string { return []string{p.URL} }

// PauseFrom holds the bytes of connections that the etcd member with ID
// from (its hexadecimal member ID, as in the X-Server-From header of peer
// requests) opened through this proxy, both ways, until ResumeFrom: a proxy
// in front of a member's peer URL then cuts that one peer off from it. Other
// connections go on as the mode says.
func (p *Proxy) PauseFrom(from string) { p.Hold(from) }

// ResumeFrom undoes PauseFrom.
func (p *Proxy) ResumeFrom(from string) { p.Unhold(from) }

// Cut closes every open connection at once (faultproxy.Proxy.Reset).
func (p *Proxy) Cut() { p.Reset() }

var fromHeader = []byte("\r\nX-Server-From: ")

// learn tags c with the sender named by an X-Server-From header in b, the
// first time one appears.
func learn(c *faultproxy.Conn, b []byte) {
	_, rest, ok := bytes.Cut(b, fromHeader)
	if !ok {
		return
	}
	from, _, ok := bytes.Cut(rest, []byte("\r\n"))
	if !ok {
		return
	}
	c.Tag(string(from))
}
