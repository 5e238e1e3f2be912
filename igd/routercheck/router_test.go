package routercheck_test

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/routercheck"
	"github.com/ccmkit/ccmkit/internal/upnp"
)

// gatewayHost is the igd.HostInfo of a host whose default gateway is gw.
type gatewayHost struct{ gw netip.Addr }

func (h gatewayHost) DefaultGateway(context.Context) (netip.Addr, error) { return h.gw, nil }
func (h gatewayHost) LocalAddr(context.Context, netip.Addr) (netip.Addr, error) {
	return h.gw, nil
}

// ssdpAnswers is a PacketConn that answers every search it sends with one
// SSDP answer per entry of from (sender address to LOCATION), and nothing
// else: a LAN without multicast, for discovery over loopback.
type ssdpAnswers struct {
	from map[netip.Addr]string

	mu     sync.Mutex
	queue  []answer
	wake   chan struct{}
	closed chan struct{}
	once   sync.Once
}

type answer struct {
	from netip.Addr
	b    []byte
}

func (c *ssdpAnswers) WriteTo(b []byte, _ net.Addr) (int, error) {
	c.mu.Lock()
	for from, loc := range c.from {
		c.queue = append(c.queue, answer{from, []byte("HTTP/1.1 200 OK\r\nST: " + upnp.ServiceWANIPConnection2 + "\r\nLOCATION: " + loc + "\r\n\r\n")})
	}
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
	return len(b), nil
}

func (c *ssdpAnswers) ReadFrom(b []byte) (int, net.Addr, error) {
	for {
		c.mu.Lock()
		if len(c.queue) > 0 {
			a := c.queue[0]
			c.queue = c.queue[1:]
			c.mu.Unlock()
			return copy(b, a.b), net.UDPAddrFromAddrPort(netip.AddrPortFrom(a.from, 1900)), nil
		}
		c.mu.Unlock()
		select {
		case <-c.wake:
		case <-c.closed:
			return 0, nil, net.ErrClosed
		}
	}
}

func (c *ssdpAnswers) Close() error                     { c.once.Do(func() { close(c.closed) }); return nil }
func (c *ssdpAnswers) LocalAddr() net.Addr              { return &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)} }
func (c *ssdpAnswers) SetDeadline(time.Time) error      { return nil }
func (c *ssdpAnswers) SetReadDeadline(time.Time) error  { return nil }
func (c *ssdpAnswers) SetWriteDeadline(time.Time) error { return nil }

// The doctor's router finding says which device is used and why, and
// lists a LAN host that answered beside it (claiming to be a router) as
// not used.
func TestRunSaysWhichRouterIsUsedAndWhy(t *testing.T) {
	srv := fake.NewServer(fake.NewRouter(fake.RouterConfig{}), fake.ServerOptions{})
	t.Cleanup(srv.Close)
	gw := netip.MustParseAddr("127.0.0.1") // the fake server's address
	rogue := netip.MustParseAddr("127.0.0.2")
	listen := func(context.Context, string, string) (net.PacketConn, error) {
		return &ssdpAnswers{
			from:   map[netip.Addr]string{gw: srv.RootDescURL, rogue: "http://127.0.0.2:5000/rootDesc.xml"},
			wake:   make(chan struct{}, 1),
			closed: make(chan struct{}),
		}, nil
	}
	c, err := igd.NewClient(igd.Config{ListenPacket: listen, Host: gatewayHost{gw}, DiscoveryTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := routercheck.Run(t.Context(), c, routercheck.Options{OtherHost: lanHost})
	if err != nil {
		t.Fatal(err)
	}
	var detail string
	for _, f := range rep.Findings {
		if f.Check == routercheck.CheckRouter {
			detail = f.Detail
		}
	}
	for _, want := range []string{
		srv.RootDescURL,
		"used because it is the default gateway 127.0.0.1, the only router discovery accepts",
		"not used: device at http://127.0.0.2:5000/rootDesc.xml: answered from 127.0.0.2, not the default gateway 127.0.0.1",
	} {
		if !strings.Contains(detail, want) {
			t.Errorf("router finding %q does not say %q", detail, want)
		}
	}
}
