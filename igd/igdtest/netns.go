package igdtest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// netnsDir is where `ip netns add` pins named network namespaces.
const netnsDir = "/var/run/netns"

// Node is one LAN host of a lab: a network namespace with one interface on the
// router's LAN and a default route through the router.
type Node struct {
	// Name is the network namespace name (as `ip netns list` shows it).
	Name string
	// Addr is the node's LAN address: 192.0.2.10 for the first node,
	// 192.0.2.11 for the second, and so on.
	Addr netip.Addr
	// GUA and ULA are the node's global IPv6 address (2001:db8:1::10 for
	// the first node, ::11 for the second, ...) and its unique local one
	// (fd00:1::10, ...), with Options.IPv6; zero without.
	GUA, ULA netip.Addr
}

// Do runs fn on a locked OS thread switched into the node's namespace and
// returns its error. Sockets created inside fn stay in that namespace for their
// lifetime, even when used from other goroutines afterwards.
//
// fn must do its work on the calling goroutine: goroutines it starts run on
// other threads, in the test's own namespace. Dial IP literals only, since name
// resolution may run on other threads. The thread is discarded after fn returns.
func (n *Node) Do(fn func() error) error { return inNetns(n.Name, fn) }

// DialContext dials from inside the node namespace. Its signature matches
// net.Dialer.DialContext and http.Transport.DialContext. address must hold an
// IP literal, not a host name.
func (n *Node) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	return dialIn(ctx, n.Name, network, address)
}

// ListenPacket opens a packet socket inside the node namespace, for example
// ListenPacket(ctx, "udp4", "0.0.0.0:0") for an SSDP search.
func (n *Node) ListenPacket(ctx context.Context, network, address string) (net.PacketConn, error) {
	var pc net.PacketConn
	err := n.Do(func() error {
		var err error
		var lc net.ListenConfig
		pc, err = lc.ListenPacket(ctx, network, address)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("igdtest: listen %s %s in namespace %s: %w", network, address, n.Name, err)
	}
	return pc, nil
}

// Listen opens a listener inside the node namespace, for example
// Listen("tcp", "192.0.2.10:30080") as a stand-in for a nodePort.
func (n *Node) Listen(network, address string) (net.Listener, error) {
	var ln net.Listener
	err := n.Do(func() error {
		var err error
		ln, err = net.Listen(network, address)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("igdtest: listen %s %s in namespace %s: %w", network, address, n.Name, err)
	}
	return ln, nil
}

// HTTPClient returns an *http.Client whose connections are made from inside
// the node namespace. It uses no proxy and no keep-alive (miniupnpd closes
// every connection anyway), and gives up on a request after 30 seconds.
func (n *Node) HTTPClient() *http.Client { return httpClientIn(n.Name) }

// httpClientIn returns an HTTP client that dials from namespace ns.
func httpClientIn(ns string) *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			// Proxy stays nil: a proxy from the environment would send lab
			// traffic out of the namespaces.
			DialContext: func(ctx context.Context, network, address string) (net.Conn, error) {
				return dialIn(ctx, ns, network, address)
			},
			DisableKeepAlives: true,
		},
		// A lab answers in milliseconds; this bound only stops a hung test.
		Timeout: 30 * time.Second,
	}
}

// dialIn dials address from inside namespace ns.
func dialIn(ctx context.Context, ns, network, address string) (net.Conn, error) {
	var c net.Conn
	err := inNetns(ns, func() error {
		var err error
		var d net.Dialer
		c, err = d.DialContext(ctx, network, address)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("igdtest: dial %s %s from namespace %s: %w", network, address, ns, err)
	}
	return c, nil
}

// inNetns runs fn on a fresh goroutine locked to its OS thread after switching
// that thread into the named network namespace. The goroutine exits still
// locked, so the Go runtime discards the thread instead of reusing it in the
// wrong namespace.
func inNetns(ns string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// No UnlockOSThread: the thread's namespace has changed.
		errc <- func() error {
			fd, err := unix.Open(filepath.Join(netnsDir, ns), unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				return fmt.Errorf("igdtest: open namespace %s: %w", ns, err)
			}
			defer unix.Close(fd)
			if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
				return fmt.Errorf("igdtest: enter namespace %s: %w", ns, err)
			}
			return fn()
		}()
	}()
	return <-errc
}

// Serve listens on addr in the node's namespace until t ends, accepting
// each connection and closing it at once: the stand-in for a service a
// reachability check connects to (kube-proxy behind a pinhole). It fails t
// if it cannot listen.
func (n *Node) Serve(t testing.TB, addr netip.AddrPort) {
	t.Helper()
	ln, err := n.Listen("tcp", addr.String())
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
			c.Close()
		}
	}()
}
