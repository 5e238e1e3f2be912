package loadbalancer

import (
	"errors"
	"fmt"
	"strings"

	"github.com/ccmkit/ccmkit/igd"
)

// Sentinel errors, matched with errors.Is.
var (
	// ErrInvalidService is matched by every *ServiceError: such a Service gets
	// no mapping, and loses those it owns.
	ErrInvalidService = errors.New("loadbalancer: invalid service")
	// ErrPortInUse means an external port the Service asks for is held by
	// another host, cluster or Service. That mapping is left alone.
	ErrPortInUse = errors.New("loadbalancer: external port in use")
	// ErrNotAdmitted means an operator's limit (Config.Admit, or
	// Config.MaxMappings) refuses a port of the Service; the error says which.
	ErrNotAdmitted = errors.New("loadbalancer: port not admitted")
	// ErrNoEligibleNode means no node can receive the Service's traffic (see
	// the package documentation on node choice).
	ErrNoEligibleNode = errors.New("loadbalancer: no eligible node")
	// ErrOwnNodeUnknown means a secure-mode router, or pinholes for this host
	// only, need this process's node, and with Config.NodeName empty, no
	// single node has this host's address (see Config.NodeName).
	ErrOwnNodeUnknown = errors.New("loadbalancer: own node unknown")
	// ErrExternalIPNotUsable means the router's external IP is not IPv4, is
	// unspecified (WAN down), or not public (see Config.AllowNonPublicExternalIP).
	ErrExternalIPNotUsable = errors.New("loadbalancer: external IP not usable")
)

// ServiceError reports a Service field that a router port mapping cannot serve.
type ServiceError struct {
	Service string // "namespace/name"
	Field   string // the field's path, for example "spec.ports[0].protocol"
	Value   string // the offending value as text
	Reason  string // what is wrong
}

// Error names the Service, the field, its value and what is wrong.
func (e *ServiceError) Error() string {
	return fmt.Sprintf("loadbalancer: service %s: %s=%s: %s", e.Service, e.Field, e.Value, e.Reason)
}

// Is makes errors.Is(err, ErrInvalidService) true for every ServiceError.
func (e *ServiceError) Is(target error) bool { return target == ErrInvalidService }

// PortError reports that one port of a Service could not be served. The other
// ports of the Service are still converged.
type PortError struct {
	Service string  // "namespace/name"
	Key     igd.Key // the router key of the port: protocol and external port
	// Holder is the mapping of someone else that holds Key, when known. Its
	// Description may be secret (a PCP mapping's is its nonce): Error
	// quotes it only when it is not.
	Holder *igd.Mapping
	// Claimant is the other Service ("namespace/name") that is served Key
	// (or, within this process, taking it), if that is why.
	Claimant string
	// Err is the cause: ErrPortInUse, or the router's (a *igd.UPnPError 606: policy).
	Err error
}

// Error names the Service, the port, the cause and any holder or claimant.
// A holder's description is quoted, but for a PCP mapping's, whose nonce it
// carries (whoever knows the nonce can delete or replace the mapping, and the
// error reaches the Service's events): that one is "PCP MAP (nonce redacted)".
func (e *PortError) Error() string {
	msg := fmt.Sprintf("loadbalancer: service %s port %s: %v", e.Service, e.Key, e.Err)
	switch {
	case e.Holder != nil:
		msg += fmt.Sprintf(" (held by %s:%d, description %s)", e.Holder.InternalClient, e.Holder.InternalPort, quoteDescription(e.Holder.Description))
	case e.Claimant != "":
		msg += fmt.Sprintf(" (served to service %s)", e.Claimant)
	}
	return msg
}

// Unwrap returns the cause.
func (e *PortError) Unwrap() error { return e.Err }

// quoteDescription quotes a mapping's description for a message, the nonce
// of a PCP mapping's left out.
func quoteDescription(d string) string {
	if strings.HasPrefix(d, igd.PCPDescriptionPrefix) {
		return fmt.Sprintf("%q", igd.PCPDescriptionPrefix+"(nonce redacted)")
	}
	return fmt.Sprintf("%q", d)
}
