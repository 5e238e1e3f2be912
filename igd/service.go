package igd

import (
	"context"
	"errors"
	"fmt"

	"github.com/ccmkit/ccmkit/internal/upnp"
	"github.com/huin/goupnp/dcps/internetgateway2"
	"github.com/huin/goupnp/soap"
)

// serviceTypes lists the supported service types, most preferred first.
// serviceIPv6Firewall is IGD:2's IPv6 pinhole service, only reported.
const serviceIPv6Firewall = "urn:schemas-upnp-org:service:WANIPv6FirewallControl:1"

var serviceTypes = []string{upnp.ServiceWANIPConnection2, upnp.ServiceWANIPConnection1, upnp.ServiceWANPPPConnection1}

// wanConnection is the part of a WAN connection service this package uses.
// Its methods are named after goupnp's generated *Ctx methods, so that
// internetgateway2.WANIPConnection2, WANIPConnection1 and WANPPPConnection1
// satisfy it as they are.
type wanConnection interface {
	AddPortMappingCtx(ctx context.Context, NewRemoteHost string, NewExternalPort uint16, NewProtocol string, NewInternalPort uint16, NewInternalClient string, NewEnabled bool, NewPortMappingDescription string, NewLeaseDuration uint32) error
	DeletePortMappingCtx(ctx context.Context, NewRemoteHost string, NewExternalPort uint16, NewProtocol string) error
	GetSpecificPortMappingEntryCtx(ctx context.Context, NewRemoteHost string, NewExternalPort uint16, NewProtocol string) (NewInternalPort uint16, NewInternalClient string, NewEnabled bool, NewPortMappingDescription string, NewLeaseDuration uint32, err error)
	GetGenericPortMappingEntryCtx(ctx context.Context, NewPortMappingIndex uint16) (NewRemoteHost string, NewExternalPort uint16, NewProtocol string, NewInternalPort uint16, NewInternalClient string, NewEnabled bool, NewPortMappingDescription string, NewLeaseDuration uint32, err error)
	GetExternalIPAddressCtx(ctx context.Context) (NewExternalIPAddress string, err error)
	GetStatusInfoCtx(ctx context.Context) (NewConnectionStatus string, NewLastConnectionError string, NewUptime uint32, err error)
}

// portMappingLister is the optional capability of WANIPConnection:2 to return
// a range of the table in one call. Reach it by type assertion.
type portMappingLister interface {
	GetListOfPortMappingsCtx(ctx context.Context, NewStartPort uint16, NewEndPort uint16, NewProtocol string, NewManage bool, NewNumberOfPorts uint16) (NewPortListing string, err error)
}

var (
	_ wanConnection     = (*internetgateway2.WANIPConnection2)(nil)
	_ wanConnection     = (*internetgateway2.WANIPConnection1)(nil)
	_ wanConnection     = (*internetgateway2.WANPPPConnection1)(nil)
	_ portMappingLister = (*internetgateway2.WANIPConnection2)(nil)
)

// callError turns what a goupnp call returned into this package's errors.
//
// A SOAP fault becomes a *UPnPError carrying the UPnP code. Any other error is
// a transport error; goupnp formats those with %v, so they never unwrap to
// the context's error: when ctx (the call's own, bounded context) is done, its
// error is wrapped explicitly so that errors.Is(err, context.DeadlineExceeded)
// and errors.Is(err, context.Canceled) hold. transport reports whether the
// error says the device did not answer (as opposed to answering with a fault).
// An answer over its cap, recorded in ctx by capTransport, is returned as its
// *answerTooLargeError and is not a transport error: the router answered.
func callError(ctx context.Context, action string, err error) (wrapped error, transport bool) {
	if tl := oversize(ctx); tl != nil {
		// The router answered, too much: not a router that stopped answering.
		return fmt.Errorf("%s: %w", action, tl), false
	}
	var fault *soap.SOAPFaultError
	if errors.As(err, &fault) {
		ue := &UPnPError{
			Action:      action,
			Code:        fault.Detail.UPnPError.Errorcode,
			Description: fault.Detail.UPnPError.ErrorDescription,
			Err:         fault,
		}
		if ue.Description == "" {
			ue.Description = fault.FaultString
		}
		return ue, false
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("%s: %w (%v)", action, ctxErr, err), true
	}
	return fmt.Errorf("%s: %w", action, err), true
}
