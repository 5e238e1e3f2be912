package pinhole

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/ccmkit/ccmkit/igd"
)

// This file is the UPnPClient as a load balancer uses it: pinholes named by
// what they open, not by the router's UniqueID (loadbalancer.PinholeClient,
// PinholeProber and OwnHostPinholes).

// opening names a pinhole without its lease: what a UniqueID stands for.
type opening struct {
	protocol igd.Protocol
	addr     netip.Addr
	port     uint16
}

func openingOf(p Pinhole) opening {
	return opening{protocol: p.Protocol, addr: p.InternalClient, port: p.InternalPort}
}

// OpenPinhole opens p, or renews it when the router already has it: one
// AddPinhole, which the router answers for a pinhole it holds with that
// pinhole's own UniqueID and the new lease. The ID is kept for
// PinholeHeld.
func (c *UPnPClient) OpenPinhole(ctx context.Context, p Pinhole) error {
	id, err := c.Add(ctx, p)
	if err != nil {
		return err
	}
	c.mu.Lock()
	if c.ids == nil {
		c.ids = map[opening]uint16{}
	}
	c.ids[openingOf(p)] = id
	c.mu.Unlock()
	return nil
}

// ClosePinhole closes p: an AddPinhole of MinLease, whose answer is the
// pinhole's UniqueID now, then a DeletePinhole of that ID (p.Lease is
// ignored). UPnP deletes only by UniqueID, and one kept from an earlier call
// can name another pinhole of this host once the router rebooted (miniupnpd
// restarts IDs from 1): the re-add names the pinhole by what it opens, so
// the delete closes that one, also when another process opened it. Two calls
// where a kept ID would take one; the proof is the re-add's answer. A
// pinhole the router no longer holds is opened for that moment, then
// closed. A refusal is the router's error (606, matching
// igd.ErrNotAuthorized, for another host's address).
func (c *UPnPClient) ClosePinhole(ctx context.Context, p Pinhole) error {
	p.Lease = MinLease
	id, err := c.Add(ctx, p)
	if err != nil {
		return fmt.Errorf("pinhole: close %s: %w", p, err)
	}
	if err := c.Delete(ctx, id); err != nil {
		return fmt.Errorf("pinhole: close %s: %w", p, err)
	}
	c.mu.Lock()
	delete(c.ids, openingOf(p))
	c.mu.Unlock()
	return nil
}

// PinholeHeld reports whether the router still holds p, which OpenPinhole
// opened: one GetPinholePackets by the UniqueID it returned. After a reboot
// that ID may name another pinhole of this host, which this reports held:
// the next renewal (an Add) restores p then. It is an error to ask of a
// pinhole OpenPinhole did not open.
func (c *UPnPClient) PinholeHeld(ctx context.Context, p Pinhole) (bool, error) {
	c.mu.Lock()
	id, ok := c.ids[openingOf(p)]
	c.mu.Unlock()
	if !ok {
		return false, fmt.Errorf("pinhole: %s was not opened by this client", p)
	}
	_, err := c.Packets(ctx, id)
	switch {
	case errors.Is(err, ErrNoSuchPinhole):
		return false, nil
	case err != nil:
		return false, err
	}
	return true, nil
}

// LocalAddrs returns Config.LocalAddr, the one address this client sends
// from and so the one it opens pinholes to (loadbalancer.OwnHostPinholes).
// It sends nothing.
func (c *UPnPClient) LocalAddrs(context.Context) ([]netip.Addr, error) {
	return []netip.Addr{c.cfg.LocalAddr}, nil
}
