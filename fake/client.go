package fake

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/internal/igderr"
	"github.com/ccmkit/ccmkit/internal/upnp"
)

// Client is an igd.Client that talks to a Router in memory, acting from one
// LAN host. Get one with Router.Client. It behaves as the real client does
// against miniupnpd: see the package documentation.
type Client struct {
	router *Router
	local  netip.Addr
}

var _ igd.Client = (*Client)(nil)

// Router returns the router c talks to.
func (c *Client) Router() *Router { return c.router }

// ExternalIP returns the router's external address (which may be
// non-public).
func (c *Client) ExternalIP(ctx context.Context) (netip.Addr, error) {
	call := Call{Method: MethodExternalIP, Client: c.local}
	next := externalIPChain(c.router.layers(), c.local, func(ctx context.Context) (netip.Addr, error) {
		return c.router.ExternalIP(), ctx.Err()
	})
	err := c.do(ctx, &call, func(ctx context.Context) (err error) {
		call.Addr, err = next(ctx)
		return err
	})
	if err != nil {
		return netip.Addr{}, err
	}
	return call.Addr, nil
}

// LocalAddr returns the address this client acts from.
func (c *Client) LocalAddr(ctx context.Context) (netip.Addr, error) {
	call := Call{Method: MethodLocalAddr, Client: c.local}
	next := localAddrChain(c.router.layers(), c.local, func(ctx context.Context) (netip.Addr, error) {
		return c.local, ctx.Err()
	})
	err := c.do(ctx, &call, func(ctx context.Context) (err error) {
		call.Addr, err = next(ctx)
		return err
	})
	if err != nil {
		return netip.Addr{}, err
	}
	return call.Addr, nil
}

// AddPortMapping creates m, or renews or replaces it when this host already
// holds its key (see the package documentation). Like the real client it
// returns m as sent (Enabled true): the router may store a different lease
// (a lease of 0 or over igd.MaxLease is stored as igd.MaxLease, as on
// miniupnpd) or keep an earlier description, which GetPortMapping reads
// back. When the router answers 725 (it only takes permanent leases) the
// mapping is added again with lease 0, as the real client does (a second
// call, through the hooks and in the log like the first), and Lease is 0
// in the result. Invalid input gives an error naming the field (matching
// igd.ErrInvalidMapping), runs no hook and leaves the table alone; the call
// is still logged.
func (c *Client) AddPortMapping(ctx context.Context, m igd.Mapping) (igd.Mapping, error) {
	if err := m.Validate(); err != nil {
		call := Call{Method: MethodAddPortMapping, Client: c.local, Key: m.Key(), Mapping: m}
		call.Err = fmt.Errorf("add port mapping %s: %w", m.Key(), err)
		c.router.record(call)
		return igd.Mapping{}, call.Err
	}
	err := c.add(ctx, m)
	if m.Lease != 0 && errors.Is(err, igd.ErrOnlyPermanentLeases) {
		m.Lease = 0
		err = c.add(ctx, m)
	}
	if err != nil {
		return igd.Mapping{}, err
	}
	m.InternalClient = m.InternalClient.Unmap()
	m.Enabled = true
	return m, nil
}

// add sends one AddPortMapping of m through the hooks to the table.
func (c *Client) add(ctx context.Context, m igd.Mapping) error {
	call := Call{Method: MethodAddPortMapping, Client: c.local, Key: m.Key(), Mapping: m}
	next := addChain(c.router.layers(), c.local, func(ctx context.Context, m igd.Mapping) (igd.Mapping, error) {
		if err := ctx.Err(); err != nil {
			return igd.Mapping{}, err
		}
		return c.router.add(MethodAddPortMapping, c.local, m)
	})
	return c.do(ctx, &call, func(ctx context.Context) error {
		_, err := next(ctx, m)
		return err
	})
}

// DeletePortMapping removes the mapping at (proto, externalPort). Deleting a
// missing mapping succeeds; in secure mode, deleting another host's mapping
// fails with 606 (igd.ErrNotAuthorized).
func (c *Client) DeletePortMapping(ctx context.Context, proto igd.Protocol, externalPort uint16) error {
	k := igd.Key{Protocol: proto, ExternalPort: externalPort}
	call := Call{Method: MethodDeletePortMapping, Client: c.local, Key: k}
	if err := validateKey(k); err != nil {
		call.Err = fmt.Errorf("delete port mapping %s: %w", k, err)
		c.router.record(call)
		return call.Err
	}
	next := deleteChain(c.router.layers(), c.local, func(ctx context.Context, k igd.Key) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		return c.router.remove(MethodDeletePortMapping, c.local, k)
	})
	return c.do(ctx, &call, func(ctx context.Context) error { return next(ctx, k) })
}

// GetPortMapping returns the mapping at (proto, externalPort) with the time
// left on its lease, or a *igd.UPnPError with code 714 (matching
// igd.ErrNoSuchEntry).
func (c *Client) GetPortMapping(ctx context.Context, proto igd.Protocol, externalPort uint16) (igd.Mapping, error) {
	k := igd.Key{Protocol: proto, ExternalPort: externalPort}
	call := Call{Method: MethodGetPortMapping, Client: c.local, Key: k}
	if err := validateKey(k); err != nil {
		call.Err = fmt.Errorf("get port mapping %s: %w", k, err)
		c.router.record(call)
		return igd.Mapping{}, call.Err
	}
	next := getChain(c.router.layers(), c.local, func(ctx context.Context, k igd.Key) (igd.Mapping, error) {
		if err := ctx.Err(); err != nil {
			return igd.Mapping{}, err
		}
		return c.router.get("GetSpecificPortMappingEntry", k)
	})
	err := c.do(ctx, &call, func(ctx context.Context) (err error) {
		call.Mapping, err = next(ctx, k)
		return err
	})
	if err != nil {
		return igd.Mapping{}, err
	}
	return call.Mapping, nil
}

// ListPortMappings implements igd.Lister: the mappings of proto in ports,
// newest first (the order miniupnpd lists them in; callers must not rely on
// it). On a router configured with RouterConfig.NoList it fails with an
// error matching igd.ErrNotSupported, as an IGD:1 router would; so it does,
// as igd.UPnPClient does, when a hook refuses the call with UPnP 401, 402,
// 501 or 602. Unlike igd.UPnPClient it does not remember a refusal: every
// call reaches the hooks.
func (c *Client) ListPortMappings(ctx context.Context, proto igd.Protocol, ports igd.PortRange) ([]igd.Mapping, error) {
	call := Call{Method: MethodListPortMappings, Client: c.local, Key: igd.Key{Protocol: proto}, Ports: ports}
	if !proto.Valid() || ports.First > ports.Last {
		return nil, c.finish(&call, &igderr.FieldError{Field: "Protocol", Value: fmt.Sprintf("%q %d-%d", proto, ports.First, ports.Last), Reason: "must be TCP or UDP over a non-empty range"})
	}
	next := listChain(c.router.layers(), c.local, func(ctx context.Context, proto igd.Protocol, ports igd.PortRange) ([]igd.Mapping, error) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if c.router.cfg.NoList {
			return nil, igd.ErrNotSupported
		}
		return c.router.listRange(proto, ports), nil
	})
	err := c.do(ctx, &call, func(ctx context.Context) (err error) {
		call.Mappings, err = next(ctx, proto, ports)
		if refusesList(err) {
			err = fmt.Errorf("%w: %w", igd.ErrNotSupported, err)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return call.Mappings, nil
}

// refusesList reports whether err, a list call's answer, is a refusal of the
// action that igd.UPnPClient turns into igd.ErrNotSupported.
func refusesList(err error) bool {
	switch igd.Code(err) {
	case upnp.CodeInvalidAction, upnp.CodeOptionalActionNotImpl, upnp.CodeInvalidArgs, upnp.CodeActionFailed:
		return !errors.Is(err, igd.ErrNotSupported)
	}
	return false
}

// do runs op (the call's chain of hooks and the table) unless ctx has
// already ended, and logs the call with its result.
func (c *Client) do(ctx context.Context, call *Call, op func(context.Context) error) error {
	err := ctx.Err()
	if err == nil {
		err = op(ctx)
	}
	return c.finish(call, err)
}

// finish logs call with its result, err (if any) wrapped with the call's
// method and object, and returns that.
func (c *Client) finish(call *Call, err error) error {
	if err != nil {
		err = fmt.Errorf("%s %s: %w", call.Method, describe(call), err)
	}
	call.Err = err
	c.router.record(*call)
	return err
}

// describe names the object of call for error messages.
func describe(call *Call) string {
	if call.Method == MethodListPortMappings {
		return fmt.Sprintf("%s ports %d-%d", call.Key.Protocol, call.Ports.First, call.Ports.Last)
	}
	if call.Key != (igd.Key{}) {
		return call.Key.String()
	}
	return "from " + call.Client.String()
}

// validateKey checks the arguments of DeletePortMapping and GetPortMapping.
func validateKey(k igd.Key) error {
	if !k.Protocol.Valid() {
		return &igderr.FieldError{Field: "Protocol", Value: fmt.Sprintf("%q", k.Protocol), Reason: "must be TCP or UDP"}
	}
	if k.ExternalPort == 0 {
		return &igderr.FieldError{Field: "ExternalPort", Value: "0", Reason: "must be 1-65535"}
	}
	return nil
}
