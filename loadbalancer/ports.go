package loadbalancer

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/ccmkit/ccmkit/igd"
)

// Values of status.loadBalancer.ingress[].ports[].error for a port of a
// Service that could not be forwarded while its other ports were. The
// Service is retried in the background every Config.RetryAfter, at least 30 s.
const (
	// PortErrorInUse: another host, cluster or Service holds or takes the
	// port (ErrPortInUse).
	PortErrorInUse = "ccmkit.io/PortInUse"
	// PortErrorNotAuthorized: the router's rules refuse the mapping (UPnP
	// 606), for example a router that allows external ports 1024-65535 only.
	PortErrorNotAuthorized = "ccmkit.io/NotAuthorized"
	// PortErrorSecureMode: the router refused a mapping to another host with
	// the port free (UPnP 718), as a router in secure mode does.
	PortErrorSecureMode = "ccmkit.io/SecureMode"
	// PortErrorNotAdmitted: an operator's limit refuses the port
	// (ErrNotAdmitted): a namespace, an external port or a number of
	// mappings not allowed.
	PortErrorNotAdmitted = "ccmkit.io/NotAdmitted"
	// PortErrorRouterRefused: the router refused the mapping with another
	// UPnP error (a full table, a port rule of its own).
	PortErrorRouterRefused = "ccmkit.io/RouterRefused"
	// PortErrorNoEligibleNode: the Service can be served nowhere now (no
	// node can take its traffic: ErrNoEligibleNode; for Local, no ready
	// endpoint on a node that can receive its ports) and holds no mapping
	// of the port; set with PortErrorInUse on the ports another took, since
	// such a Service does not contend for them. The ports it still has
	// mapped stay so, without an error, until a node is eligible again.
	PortErrorNoEligibleNode = "ccmkit.io/NoEligibleNode"
)

// portRetryInterval is the least time between background retries of the
// ports not forwarded: each retry costs each such Service a read and an
// external-IP call.
const portRetryInterval = 30 * time.Second

// EventReasonPortNotForwarded is a Warning's: one port of a Service could not
// be forwarded while its other ports were; the message says why and what to do.
const EventReasonPortNotForwarded = "PortNotForwarded"

// portRefusal returns err as a *PortError when it says the port cannot be
// forwarded now (held by another, or refused by the router's answer), else
// nil: a router that could not be reached fails the whole operation.
func portRefusal(err error) *PortError {
	var pe *PortError
	if errors.As(err, &pe) && pe.reason() != "" {
		return pe
	}
	return nil
}

// reason is e's PortStatus error value ("" when e is no refusal).
func (e *PortError) reason() string {
	switch {
	case errors.Is(e.Err, ErrNotAdmitted):
		return PortErrorNotAdmitted
	case errors.Is(e.Err, ErrPortInUse):
		return PortErrorInUse
	case errors.Is(e.Err, igd.ErrNotAuthorized):
		return PortErrorNotAuthorized
	case errors.Is(e.Err, igd.ErrConflict) && e.Holder == nil, errors.Is(e.Err, igd.ErrThirdPartyRefused):
		return PortErrorSecureMode
	case igd.Code(e.Err) != 0, pcpRefused(e.Err):
		return PortErrorRouterRefused
	case errors.Is(e.Err, ErrNoEligibleNode):
		return PortErrorNoEligibleNode
	}
	return ""
}

// advice says what to do about port k, refused for reason.
func advice(reason string, k igd.Key) string {
	switch reason {
	case PortErrorInUse:
		return "free the port on the router (or in the other Service), or give this Service another port"
	case PortErrorNotAuthorized:
		// miniupnpd's rules, as OpenWrt's init script writes a perm_rule
		// (one port per rule); internal ports are nodePorts.
		return fmt.Sprintf("the router's permission rules refuse external port %d: allow it on the router "+
			"(miniupnpd.conf: allow %d 0.0.0.0/0 1024-65535 above the deny line; OpenWrt: a perm_rule with action allow, ext_ports %d, int_addr 0.0.0.0/0, int_ports 1024-65535, before Default deny), "+
			"or use an external port the router allows (OpenWrt and many routers allow 1024-65535 only)", k.ExternalPort, k.ExternalPort, k.ExternalPort)
	case PortErrorNotAdmitted:
		return "the cluster's operator does not allow it (the message names the limit): use a port and namespace the limits allow, or ask the operator"
	case PortErrorSecureMode:
		return "the router maps only to the asking host's own address (secure mode): set secureMode: true in the cloud-config, or turn secure mode off on the router"
	}
	return "see the router's log"
}

// joinPortErrors joins the errors of failed in key order, each with what
// to do about it.
func joinPortErrors(failed map[igd.Key]*PortError) error {
	var errs []error
	for _, k := range slices.SortedFunc(maps.Keys(failed), compareKeys) {
		errs = append(errs, fmt.Errorf("%w; %s", failed[k], advice(failed[k].reason(), k)))
	}
	return errors.Join(errs...)
}

// portReasons maps each failed port to its PortStatus error value.
func portReasons(failed map[igd.Key]*PortError) map[igd.Key]string {
	out := make(map[igd.Key]string, len(failed))
	for k, pe := range failed {
		out[k] = pe.reason()
	}
	return out
}

// failedPorts returns the ports of o the last Ensure or pass could not
// forward, with why.
func (lb *LoadBalancer) failedPorts(o owner) map[igd.Key]*PortError {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	if s := lb.services[o.token]; s != nil {
		return maps.Clone(s.failed)
	}
	return nil
}

// anyFailedPorts reports whether some Service has ports (or a family) to retry.
func (lb *LoadBalancer) anyFailedPorts() bool {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	for _, s := range lb.services {
		if len(s.failed) > 0 || s.familyDown {
			return true
		}
	}
	return false
}
