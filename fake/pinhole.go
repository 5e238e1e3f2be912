package fake

import (
	"context"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"time"

	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/pinhole"
	"github.com/ccmkit/ccmkit/internal/upnp"
)

// IPv6 pinholes: the WANIPv6FirewallControl:1 service a Server with an IGD:2
// description answers at /ctl/IP6FCtl, with miniupnpd 2.3.1's rules as
// igd/pinhole's design note records them and package
// igd/pinhole/pinholeconformance holds the fake and the real daemon to.

// ip6fcPath is the control path of WANIPv6FirewallControl:1, miniupnpd's.
const ip6fcPath = "/ctl/IP6FCtl"

// OpenPinhole is one pinhole a Router holds, as Router.Pinholes lists it.
type OpenPinhole struct {
	// ID is the UniqueID the router gave it.
	ID uint16
	// Pinhole is what it lets through; Lease is the time left, rounded up
	// to a whole second.
	Pinhole pinhole.Pinhole
	// Description is what the router keeps with it: PCPDescription(nonce)
	// for a pinhole a PCP MAP opened, and "" for one UPnP opened or that
	// was renewed (miniupnpd 2.3.1 drops it then, and with it the nonce
	// a PCP delete needs).
	Description string
}

// pinholeEntry is one stored pinhole.
type pinholeEntry struct {
	p       pinhole.Pinhole // Lease as granted
	expires time.Time
	desc    string
}

// Pinholes returns the pinholes the router holds, without expired ones,
// sorted by ID.
func (r *Router) Pinholes() []OpenPinhole {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.clock.Now()
	r.expirePinholesLocked(now)
	out := make([]OpenPinhole, 0, len(r.pinholes))
	for id, e := range r.pinholes {
		p := e.p
		p.Lease = (e.expires.Sub(now) + time.Second - 1).Truncate(time.Second)
		out = append(out, OpenPinhole{ID: id, Pinhole: p, Description: e.desc})
	}
	slices.SortFunc(out, func(a, b OpenPinhole) int { return int(a.ID) - int(b.ID) })
	return out
}

func (r *Router) expirePinholesLocked(now time.Time) {
	for id, e := range r.pinholes {
		if !now.Before(e.expires) {
			delete(r.pinholes, id)
		}
	}
}

// addPinhole is AddPinhole from caller. miniupnpd 2.3.1 compares
// internalClient with the caller's address as text, so anything but the
// caller's own address in canonical form is 606, and so is a port below
// 1024; a lease outside 1..86400 s is 402. Re-adding a pinhole the router
// holds renews it and returns its ID.
func (r *Router) addPinhole(action string, caller netip.Addr, internalClient string, port uint16, proto igd.Protocol, lease uint32) (uint16, error) {
	if lease < 1 || lease > uint32(pinhole.MaxLease/time.Second) {
		return 0, upnpErr(action, upnp.CodeInvalidArgs)
	}
	if !caller.Is6() || caller.Is4In6() || internalClient != caller.WithZone("").String() || port < 1024 {
		return 0, upnpErr(action, upnp.CodeNotAuthorized)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.clock.Now()
	r.expirePinholesLocked(now)
	p := pinhole.Pinhole{InternalClient: caller.WithZone(""), InternalPort: port, Protocol: proto, Lease: time.Duration(lease) * time.Second}
	e := &pinholeEntry{p: p, expires: now.Add(p.Lease)}
	for id, old := range r.pinholes {
		if old.p.InternalClient == p.InternalClient && old.p.InternalPort == port && old.p.Protocol == proto {
			r.pinholes[id] = e
			return id, nil
		}
	}
	r.lastPinholeID++
	r.pinholes[r.lastPinholeID] = e
	return r.lastPinholeID, nil
}

// pinholeOfLocked returns the pinhole id if caller may act on it: 402 when
// the router holds no such pinhole (miniupnpd's answer; the specification
// says 704), 606 when it lets through to another host.
func (r *Router) pinholeOfLocked(action string, caller netip.Addr, id uint16) (*pinholeEntry, error) {
	r.expirePinholesLocked(r.clock.Now())
	e, ok := r.pinholes[id]
	if !ok {
		return nil, upnpErr(action, upnp.CodeInvalidArgs)
	}
	if e.p.InternalClient != caller.WithZone("") {
		return nil, upnpErr(action, upnp.CodeNotAuthorized)
	}
	return e, nil
}

// updatePinhole is UpdatePinhole from caller.
func (r *Router) updatePinhole(action string, caller netip.Addr, id uint16, lease uint32) error {
	if lease < 1 || lease > uint32(pinhole.MaxLease/time.Second) {
		return upnpErr(action, upnp.CodeInvalidArgs)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	e, err := r.pinholeOfLocked(action, caller, id)
	if err != nil {
		return err
	}
	e.p.Lease = time.Duration(lease) * time.Second
	e.expires = r.clock.Now().Add(e.p.Lease)
	e.desc = "" // update_pinhole drops it (2.3.1, nftables)
	return nil
}

// deletePinhole is DeletePinhole from caller.
func (r *Router) deletePinhole(action string, caller netip.Addr, id uint16) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, err := r.pinholeOfLocked(action, caller, id); err != nil {
		return err
	}
	delete(r.pinholes, id)
	return nil
}

// pinholePackets is GetPinholePackets from caller: always 0, as miniupnpd
// 2.3.1's nftables rule counts nothing (and the fake forwards nothing).
func (r *Router) pinholePackets(action string, caller netip.Addr, id uint16) (uint32, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, err := r.pinholeOfLocked(action, caller, id)
	return 0, err
}

// pinholeActions are the WANIPv6FirewallControl:1 actions a Server answers;
// any other is 401.
var pinholeActions = map[string]func(rq *request) (operation, error){
	"AddPinhole": func(rq *request) (operation, error) {
		client, err := rq.args.str("InternalClient")
		if err != nil {
			return nil, err
		}
		port, err := rq.args.uint("InternalPort", 16)
		if err != nil {
			return nil, err
		}
		proto, err := rq.args.uint("Protocol", 16)
		if err != nil {
			return nil, err
		}
		lease, err := rq.args.uint("LeaseTime", 32)
		if err != nil {
			return nil, err
		}
		var p igd.Protocol
		switch proto {
		case 6:
			p = igd.TCP
		case 17:
			p = igd.UDP
		default: // miniupnpd takes others and the wildcard 65535; not modelled
			return nil, argError(rq.action)
		}
		return func(context.Context) ([]soapArg, error) {
			id, err := rq.h.router.addPinhole(rq.action, rq.caller, client, uint16(port), p, uint32(lease))
			if err != nil {
				return nil, err
			}
			return []soapArg{{name: "UniqueID", value: strconv.Itoa(int(id))}}, nil
		}, nil
	},
	"UpdatePinhole": func(rq *request) (operation, error) {
		id, err := rq.args.uint("UniqueID", 16)
		if err != nil {
			return nil, err
		}
		lease, err := rq.args.uint("NewLeaseTime", 32)
		if err != nil {
			return nil, err
		}
		return func(context.Context) ([]soapArg, error) {
			return nil, rq.h.router.updatePinhole(rq.action, rq.caller, uint16(id), uint32(lease))
		}, nil
	},
	"DeletePinhole": func(rq *request) (operation, error) {
		id, err := rq.args.uint("UniqueID", 16)
		if err != nil {
			return nil, err
		}
		return func(context.Context) ([]soapArg, error) {
			return nil, rq.h.router.deletePinhole(rq.action, rq.caller, uint16(id))
		}, nil
	},
	"GetPinholePackets": func(rq *request) (operation, error) {
		id, err := rq.args.uint("UniqueID", 16)
		if err != nil {
			return nil, err
		}
		return func(context.Context) ([]soapArg, error) {
			n, err := rq.h.router.pinholePackets(rq.action, rq.caller, uint16(id))
			if err != nil {
				return nil, err
			}
			return []soapArg{{name: "PinholePackets", value: strconv.FormatUint(uint64(n), 10)}}, nil
		}, nil
	},
}

// servePinhole answers one call to WANIPv6FirewallControl:1. Calls go
// through the SOAPAction hooks and are logged as MethodSOAPAction.
func (h *handler) servePinhole(w http.ResponseWriter, req *http.Request, sr *soapRequest) {
	prepare, ok := pinholeActions[sr.Action]
	if !ok {
		h.writeXML(w, http.StatusInternalServerError, soapFault(faultFor(errInvalidAction)))
		return
	}
	caller := h.clientAddr(req)
	rq := &request{h: h, action: sr.Action, caller: caller, args: args{action: sr.Action, m: sr.Args},
		call: Call{Method: MethodSOAPAction, Action: sr.Action, Client: caller}, layers: h.router.layers()}
	op, err := prepare(rq)
	if err != nil {
		h.writeXML(w, http.StatusInternalServerError, soapFault(faultFor(err)))
		return
	}
	var out []soapArg
	err = actionChain(rq.layers, caller, sr.Action, func(ctx context.Context) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		var err error
		out, err = op(ctx)
		return err
	})(req.Context())
	rq.call.Err = err
	h.router.record(rq.call)
	if h.router.Crashed() {
		hangUp(w)
		return
	}
	if err != nil {
		h.writeXML(w, http.StatusInternalServerError, soapFault(faultFor(err)))
		return
	}
	h.writeXML(w, http.StatusOK, soapResponse(serviceWANIPv6FirewallControl1, sr.Action, out))
}

// serviceWANIPv6FirewallControl1 is the service's URN.
const serviceWANIPv6FirewallControl1 = "urn:schemas-upnp-org:service:WANIPv6FirewallControl:1"
