package pcp

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"time"

	"github.com/ccmkit/ccmkit/igd"
)

// ExternalAddr asks the server for its external IPv4 address with NAT-PMP's
// public address request (RFC 6886 §3.2; a PCP server on port 5351 that
// also speaks NAT-PMP, as miniupnpd does with enable_natpmp=yes, answers
// it). A result other than success is a *ResultError with the NAT-PMP
// result code; retransmissions and the timeout are Map's.
func (c *Client) ExternalAddr(ctx context.Context) (_ netip.Addr, err error) {
	defer func(start time.Time) { igd.ObserveRequest("NATPMP_ADDRESS", start, errorCode(err)) }(time.Now())
	ctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
	defer cancel()
	conn, server, err := c.dial(ctx, "external address")
	if err != nil {
		return netip.Addr{}, err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.SetReadDeadline(time.Now()) })
	defer stop()
	buf := make([]byte, 64)
	for rt := jitter(initialRT); ctx.Err() == nil; rt = jitter(min(2*rt, maxRT)) {
		if _, err := conn.Write([]byte{0, 0}); err != nil {
			return netip.Addr{}, fmt.Errorf("pcp: external address: send to %s: %w", server, err)
		}
		if err := conn.SetReadDeadline(time.Now().Add(rt)); err != nil {
			return netip.Addr{}, fmt.Errorf("pcp: external address: %w", err)
		}
		for ctx.Err() == nil {
			n, err := conn.Read(buf)
			var ne net.Error
			switch {
			case errors.Is(err, syscall.ECONNREFUSED):
				return netip.Addr{}, fmt.Errorf("pcp: external address: %s: %w", server, err)
			case errors.As(err, &ne) && ne.Timeout():
			case err != nil:
				return netip.Addr{}, fmt.Errorf("pcp: external address: receive from %s: %w", server, err)
			case n < 12 || buf[0] != 0 || buf[1] != 128:
				continue // not the answer
			default:
				// Seconds since the start of epoch (RFC 6886 §3.2): a
				// client that only asks this between renewals still
				// sees a restart that was not announced.
				c.observeEpochIn(&c.natpmpEpoch, server.Addr(), binary.BigEndian.Uint32(buf[4:]), time.Now())
				if code := binary.BigEndian.Uint16(buf[2:]); code != 0 {
					return netip.Addr{}, &ResultError{Op: "external address", Code: ResultCode(code)}
				}
				return netip.AddrFrom4([4]byte(buf[8:12])), nil
			}
			break
		}
	}
	return netip.Addr{}, fmt.Errorf("pcp: external address: no answer from %s: %w", server, ctx.Err())
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
	conn, err := c.cfg.DialContext(ctx, "udp4", server.String())
	if err != nil {
		return nil, netip.AddrPort{}, fmt.Errorf("pcp: %s: %w", op, err)
	}
	return conn, server, nil
}

// localAddr is conn's local IPv4 address.
func localAddr(conn net.Conn, op string) (netip.Addr, error) {
	local, err := netip.ParseAddrPort(conn.LocalAddr().String())
	if err != nil {
		return netip.Addr{}, fmt.Errorf("pcp: %s: local address: %w", op, err)
	}
	return local.Addr().Unmap(), nil
}
