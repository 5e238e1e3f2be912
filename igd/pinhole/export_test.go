package pinhole

import (
	"context"

	"github.com/ccmkit/ccmkit/igd"
)

// AddUnchecked sends AddPinhole with the arguments as given, unvalidated,
// so that tests can pin what the router answers to what Add refuses to
// send.
func (c *UPnPClient) AddUnchecked(ctx context.Context, internalClient string, port uint16, proto igd.Protocol, lease uint32) (uint16, error) {
	var id uint16
	err := c.call(ctx, "AddPinhole", func(ctx context.Context, svc firewallControl) error {
		var err error
		id, err = svc.AddPinholeCtx(ctx, "", 0, internalClient, port, protocolNumber(proto), lease)
		return err
	})
	return id, err
}

// DeleteUnchecked sends DeletePinhole and returns the router's answer as
// is.
func (c *UPnPClient) DeleteUnchecked(ctx context.Context, id uint16) error {
	return c.call(ctx, "DeletePinhole", func(ctx context.Context, svc firewallControl) error {
		return svc.DeletePinholeCtx(ctx, id)
	})
}
