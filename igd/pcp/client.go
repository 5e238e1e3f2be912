package pcp

import (
	"context"
	"net"
	"net/netip"
	"time"

	"github.com/ccmkit/ccmkit/internal/pcpwire"
)

// Port is the UDP port PCP servers listen on (RFC 6887 §19.1): the port of
// a Config.Server.
const Port = pcpwire.Port

// DefaultCallTimeout bounds one request to the server, retransmissions
// included, when Config.CallTimeout is zero. A router on the LAN answers in
// milliseconds; five seconds leaves room for five sends and still lets a
// controller move on quickly when nothing answers.
const DefaultCallTimeout = pcpwire.DefaultCallTimeout

// Config configures a Client. The zero value finds the server at the
// default gateway. The client speaks the family of its server's address:
// IPv4 for a Backend's mappings, IPv6 for Pinholes.
type Config struct {
	// Server is the PCP server, IPv4 or IPv6 (a link-local address with
	// its zone, such as [fe80::1%eth0]:5351, the IPv6 default router). The
	// zero value means the default gateway (from Gateway) on Port, looked
	// up again at every call.
	Server netip.AddrPort
	// Gateway returns this host's default gateway, IPv4 or IPv6; used only
	// when Server is zero. Nil reads the IPv4 default route from
	// /proc/net/route, which shows the routes of the process's network
	// namespace even from a thread switched into another one (see igd's
	// package documentation), or with IPv6 this host's IPv6 default router.
	Gateway func(ctx context.Context) (netip.Addr, error)
	// IPv6 makes the client an IPv6 one when Server is zero and Gateway
	// nil: the server is the next hop of the IPv6 default route (with its
	// interface as the zone when link-local), read at every call from
	// /proc/thread-self/net/ipv6_route (Linux), the route table of the
	// calling thread's network namespace. A Server must then be IPv6.
	IPv6 bool
	// CallTimeout bounds one request to the server, retransmissions
	// included, in addition to the caller's context. Zero means
	// DefaultCallTimeout.
	CallTimeout time.Duration
	// DialContext makes the connected UDP socket ("udp4" or "udp6",
	// server) each call sends from; its local address is the PCP client
	// address the request carries (for Pinholes, this host's global IPv6
	// address). Nil means a zero net.Dialer. Set it to pin the client to an
	// interface or run it in a network namespace.
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)
	// ListenPacket opens the socket ListenAnnounce reads; it is called with
	// ("udp4", "224.0.0.1:5350"). Nil means a net.ListenConfig that sets
	// SO_REUSEADDR, so that several listeners on one host can share the
	// port.
	ListenPacket func(ctx context.Context, network, addr string) (net.PacketConn, error)
}

// Client speaks PCP (RFC 6887) to one server, over IPv4 or IPv6 as its
// address is: a Backend writes IPv4 mappings through it, Pinholes IPv6
// pinholes, and a load balancer learns from it that the router lost its
// state (Restarts, ListenAnnounce, EpochLost). It is safe for concurrent
// use. (It is a defined type over ccmkit's internal wire client, whose MAP
// requests the Backend makes.)
type Client pcpwire.Client

// NewClient returns a client for cfg. It does no I/O. An invalid cfg
// (Server not a unicast address or on port 0, CallTimeout negative) is an
// error naming the field.
func NewClient(cfg Config) (*Client, error) {
	c, err := pcpwire.NewClient(pcpwire.Config(cfg))
	if err != nil {
		return nil, err
	}
	return (*Client)(c), nil
}

// wire is c as the wire client it is.
func (c *Client) wire() *pcpwire.Client { return (*pcpwire.Client)(c) }

// Restarts returns a channel that receives when the client detects that the
// server lost its state: an answer's Epoch Time went back or advanced much
// less than this host's clock (RFC 6887 §8.5), or ListenAnnounce received
// an ANNOUNCE. A load balancer waits on it and then maps everything again.
// Detections that come while a value is pending are merged into it.
func (c *Client) Restarts() <-chan struct{} { return c.wire().Restarts() }

// ListenAnnounce receives the unsolicited ANNOUNCE responses the server
// multicasts to 224.0.0.1:5350 when it starts or its external address
// changes, until ctx is cancelled; then it returns nil. Each one from the
// server's address signals Restarts. Anyone on the LAN can forge an
// ANNOUNCE: the worst it can cause is a renewal of every mapping (check it
// with EpochLost). It returns an error when the socket cannot be opened or
// the server's address cannot be found, and at once for an IPv6 server
// (IPv4 only: a client of the same router's IPv4 address hears it).
func (c *Client) ListenAnnounce(ctx context.Context) error { return c.wire().ListenAnnounce(ctx) }

// EpochLost asks the server for its Epoch Time (a PCP ANNOUNCE request) and
// reports whether it shows the server lost its state since the last answer
// to one of this client's own requests (RFC 6887 §8.5); an ANNOUNCE heard by
// ListenAnnounce does not count, since anyone on the LAN can send one. With
// no such answer before, it reports false. It does not signal Restarts: the
// caller acts on the result. A server's refusal is an error matching
// igd.ErrRefused.
func (c *Client) EpochLost(ctx context.Context) (bool, error) { return c.wire().EpochLost(ctx) }
