package fake

import (
	"context"
	"net"
	"net/netip"
)

// DialAs returns a dial function that connects as a zero net.Dialer does,
// over the loopback, and whose connections report host, port 50000, as
// their local address; nothing is sent from host. It is what a pinhole
// client acting as host (pinhole.Config{LocalAddr: host, DialContext:
// DialAs(host)}) needs to talk to a Server of NewServer6 whose
// ServerOptions.ClientAddr returns host: the client refuses a connection
// that does not leave from its LocalAddr, and the router opens pinholes
// only to its caller's address.
func DialAs(host netip.Addr) func(ctx context.Context, network, address string) (net.Conn, error) {
	local := net.TCPAddrFromAddrPort(netip.AddrPortFrom(host, 50000))
	return func(ctx context.Context, network, address string) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, network, address)
		if err != nil {
			return nil, err
		}
		return hostConn{Conn: c, local: local}, nil
	}
}

// hostConn is a connection that reports local as its local address.
type hostConn struct {
	net.Conn
	local net.Addr
}

func (c hostConn) LocalAddr() net.Addr { return c.local }
