package pcpwire

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/ccmkit/ccmkit/internal/igdmetrics"
)

// ExternalAddr asks the server for its external IPv4 address with NAT-PMP's
// public address request (RFC 6886 §3.2; a PCP server on port 5351 that
// also speaks NAT-PMP, as miniupnpd does with enable_natpmp=yes, answers
// it). A result other than success is a *ResultError with the NAT-PMP
// result code; retransmissions and the timeout are Map's.
func (c *Client) ExternalAddr(ctx context.Context) (_ netip.Addr, err error) {
	defer func(start time.Time) { igdmetrics.ObserveRequest("NATPMP_ADDRESS", start, errorCode(err)) }(time.Now())
	ctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
	defer cancel()
	conn, server, err := c.dial(ctx, "external address")
	if err != nil {
		return netip.Addr{}, err
	}
	defer conn.Close()
	var addr netip.Addr
	err = exchange(ctx, conn, server, "external address", []byte{0, 0}, true, func(b []byte) (bool, error) {
		a, ok := decodeNATPMPAddress(b)
		if !ok {
			return false, nil // not the answer
		}
		// Seconds since the start of epoch (RFC 6886 §3.2): a client that
		// only asks this between renewals still sees a restart that was
		// not announced.
		c.observeEpochIn(&c.natpmpEpoch, server.Addr(), a.epoch, time.Now())
		if a.result != 0 {
			return true, &ResultError{Op: "external address", Code: ResultCode(a.result)}
		}
		addr = a.addr
		return true, nil
	})
	return addr, err
}

// natpmpAddress is a NAT-PMP public address answer (RFC 6886 §3.2).
type natpmpAddress struct {
	result uint16
	epoch  uint32     // seconds since the start of epoch
	addr   netip.Addr // IPv4; meaningful when result is 0
}

// decodeNATPMPAddress reads b as the answer to a public address request:
// version 0, opcode 128, at least 12 bytes (more are ignored). It reports
// false for anything else.
func decodeNATPMPAddress(b []byte) (natpmpAddress, bool) {
	if len(b) < 12 || b[0] != 0 || b[1] != 128 {
		return natpmpAddress{}, false
	}
	return natpmpAddress{
		result: binary.BigEndian.Uint16(b[2:]),
		epoch:  binary.BigEndian.Uint32(b[4:]),
		addr:   netip.AddrFrom4([4]byte(b[8:12])),
	}, true
}

// LocalAddr returns the address this client sends from toward the server:
// the PCP client address of its requests. It sends nothing.
func (c *Client) LocalAddr(ctx context.Context) (netip.Addr, error) {
	conn, _, err := c.dial(ctx, "local address")
	if err != nil {
		return netip.Addr{}, err
	}
	defer conn.Close()
	return localAddr(conn, "local address")
}

// dial opens the connected socket a call of op sends from.
func (c *Client) dial(ctx context.Context, op string) (net.Conn, netip.AddrPort, error) {
	server, err := c.server(ctx)
	if err != nil {
		return nil, netip.AddrPort{}, fmt.Errorf("pcp: %s: %w", op, err)
	}
	network := "udp4"
	if server.Addr().Is6() {
		network = "udp6"
	}
	conn, err := c.cfg.DialContext(ctx, network, server.String())
	if err != nil {
		return nil, netip.AddrPort{}, fmt.Errorf("pcp: %s: %w", op, err)
	}
	return conn, server, nil
}

// localAddr is conn's local address, IPv4 unmapped and IPv6 without its
// zone: the PCP client address of a request sent on conn.
func localAddr(conn net.Conn, op string) (netip.Addr, error) {
	local, err := netip.ParseAddrPort(conn.LocalAddr().String())
	if err != nil {
		return netip.Addr{}, fmt.Errorf("pcp: %s: local address: %w", op, err)
	}
	return local.Addr().Unmap().WithZone(""), nil
}
