package faultproxy_test

import (
	"bufio"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/fencing-go/fencing/internal/testing/faultproxy"
)

// echo starts a line echo server and returns its address.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String()
}

// roundTrip sends line and reads the echo within d: a timeout error when
// none came, another error when the connection ended.
func roundTrip(t *testing.T, c net.Conn, line string, d time.Duration) (string, error) {
	t.Helper()
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		return "", err
	}
	c.SetReadDeadline(time.Now().Add(d))
	got, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSuffix(got, "\n"), err
}

func dial(t *testing.T, p *faultproxy.Proxy) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func timedOut(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

func TestPartitionAndHeal(t *testing.T) {
	p := faultproxy.Start(t, echo(t), faultproxy.Hooks{})
	c := dial(t, p)
	if got, err := roundTrip(t, c, "a", 5*time.Second); got != "a" || err != nil {
		t.Fatalf("before the partition: %q, %v", got, err)
	}
	p.Partition()
	if got, err := roundTrip(t, c, "b", 200*time.Millisecond); !timedOut(err) {
		t.Fatalf("during the partition: %q, %v; want a timeout", got, err)
	}
	p.Heal()
	if _, err := roundTrip(t, c, "c", 5*time.Second); err == nil || timedOut(err) {
		t.Fatalf("a connection that lost bytes, after Heal: %v; want it closed", err)
	}
	if got, err := roundTrip(t, dial(t, p), "d", 5*time.Second); got != "d" || err != nil {
		t.Fatalf("a new connection after Heal: %q, %v", got, err)
	}
}

func TestReplyVerdicts(t *testing.T) {
	p := faultproxy.Start(t, echo(t), faultproxy.Hooks{OnReply: func(_ *faultproxy.Conn, b []byte) faultproxy.Verdict {
		switch string(b) {
		case "close\n":
			return faultproxy.Close
		case "stall\n":
			return faultproxy.Stall
		}
		return faultproxy.Carry
	}})
	if _, err := roundTrip(t, dial(t, p), "close", 5*time.Second); err == nil || timedOut(err) {
		t.Fatalf("Close: %v; want the connection closed", err)
	}
	c := dial(t, p)
	if got, err := roundTrip(t, c, "stall", 200*time.Millisecond); !timedOut(err) {
		t.Fatalf("Stall: %q, %v; want a timeout", got, err)
	}
	if got, err := roundTrip(t, c, "after", 200*time.Millisecond); !timedOut(err) {
		t.Fatalf("after a Stall: %q, %v; want later replies swallowed too", got, err)
	}
	p.SetMode(faultproxy.DropReplies)
	if got, err := roundTrip(t, dial(t, p), "x", 200*time.Millisecond); !timedOut(err) {
		t.Fatalf("DropReplies: %q, %v; want a timeout", got, err)
	}
}
