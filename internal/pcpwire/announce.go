package pcpwire

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"time"
)

// announceAddr is where PCP servers send unsolicited ANNOUNCE responses
// (RFC 6887 §14.1.3): the all-hosts group, port 5350.
const announceAddr = "224.0.0.1:5350"

// ListenAnnounce receives the unsolicited ANNOUNCE responses a PCP server
// multicasts to 224.0.0.1:5350 when it starts or its external address
// changes, until ctx is cancelled; then it closes its socket and returns
// nil. Each well-formed ANNOUNCE (version 2, SUCCESS) whose source is the
// server's address signals Restarts, whatever its Epoch Time says, and the
// Epoch Time is recorded as an answer's would be. RFC 6887 §14.1.3 asks
// clients to wait a random 0-5 s before they renew; that is the caller's
// to do. Anyone on the LAN can forge an ANNOUNCE: the worst it can cause is
// a renewal of every mapping.
//
// It needs no group join: the kernel keeps every multicast-capable
// interface in 224.0.0.1. It is IPv4 only: a client of an IPv6 server
// gets an error at once. It returns an error when the socket cannot be
// opened (another program holds port 5350 without SO_REUSEADDR, say) or
// the server's address cannot be found.
func (c *Client) ListenAnnounce(ctx context.Context) error {
	server, err := c.server(ctx)
	if err != nil {
		return fmt.Errorf("pcp: listen for ANNOUNCE: %w", err)
	}
	if server.Addr().Is6() {
		return fmt.Errorf("pcp: listen for ANNOUNCE: IPv4 only, and the server %s is IPv6: listen with a client of its IPv4 address (miniupnpd announces over both)", server.Addr())
	}
	pc, err := c.cfg.ListenPacket(ctx, "udp4", announceAddr)
	if err != nil {
		return fmt.Errorf("pcp: listen for ANNOUNCE: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { pc.Close() })
	defer stop()
	defer pc.Close()
	buf := make([]byte, maxMessageLen+1)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("pcp: listen for ANNOUNCE: %w", err)
		}
		src, ok := udpAddr(from)
		if !ok || src != server.Addr() {
			continue
		}
		epoch, ok := decodeAnnounce(buf[:n])
		if !ok {
			continue
		}
		c.observeEpoch(src, epoch, time.Now())
		c.signalRestart()
	}
}

func udpAddr(a net.Addr) (netip.Addr, bool) {
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return netip.Addr{}, false
	}
	return ap.Addr().Unmap(), true
}
