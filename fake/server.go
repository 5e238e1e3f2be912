package fake

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/internal/upnp"
)

// UPnPService is the connection service (a UPnP service type URN) a
// Server's root description offers.
type UPnPService string

// The connection services a Server can offer.
const (
	// WANIPConnection2 is what miniupnpd 2.3.1 offers by default: an
	// InternetGatewayDevice:2 with WANIPConnection:2, which adds
	// AddAnyPortMapping, DeletePortMappingRange and GetListOfPortMappings.
	WANIPConnection2 UPnPService = upnp.ServiceWANIPConnection2
	// WANIPConnection1 is an InternetGatewayDevice:1 with WANIPConnection:1,
	// as miniupnpd describes itself with force_igd_desc_v1=yes.
	WANIPConnection1 UPnPService = upnp.ServiceWANIPConnection1
	// WANPPPConnection1 is an InternetGatewayDevice:1 with
	// WANPPPConnection:1, as PPPoE routers (DSL boxes) describe themselves.
	WANPPPConnection1 UPnPService = upnp.ServiceWANPPPConnection1
)

// ServerOptions configures a Server. The zero value is miniupnpd's default
// IGD:2 description, with the caller identified by its remote address.
type ServerOptions struct {
	// Service is the connection service offered. Zero means
	// WANIPConnection2.
	Service UPnPService

	// ClientAddr returns the LAN address of the host that made a request:
	// the caller the router sees, which owns mappings in secure mode. Nil
	// means the request's remote IP, which is 127.0.0.1 for every client of
	// an httptest server; tests with several hosts either start one Server
	// per host over the same Router with a fixed ClientAddr, or read a
	// header their clients set.
	ClientAddr func(*http.Request) netip.Addr

	// ServerHeader is the HTTP Server header of every answer, which clients
	// read to identify the daemon and its version. Zero means
	// DefaultServerHeader; set it to emulate another daemon or version.
	ServerHeader string
}

// DefaultServerHeader is the Server header a Server sends unless
// ServerOptions.ServerHeader is set: miniupnpd 2.3.1's form.
const DefaultServerHeader = "ccmkit-fake UPnP/1.1 MiniUPnPd/2.3.1"

// Server is a UPnP IGD over real HTTP: an httptest server that serves a root
// description and the SOAP control endpoint of one connection service,
// backed by a Router. Responses, faults included, are byte for byte what
// miniupnpd 2.3.1 sends (see testdata/miniupnpd). Calls go through the
// Router's hooks (the operation's field of RouterHooks, and SOAPAction for every
// action) and are logged under the Method of their operation, with the SOAP
// action in Call.Action.
type Server struct {
	// RootDescURL is the URL of the root description, for
	// igd.Config.RootDescURL.
	RootDescURL string

	srv     *httptest.Server
	handler *handler
}

// Paths a Server serves, the same as miniupnpd's.
const (
	rootDescPath = "/rootDesc.xml"
	ipConnPath   = "/ctl/IPConn"
	pppConnPath  = "/ctl/PPPConn"
)

// NewServer starts a Server for r on the IPv4 loopback. Close it when done
// (t.Cleanup(s.Close)). It panics if opts.Service is not one of the
// UPnPService constants.
func NewServer(r *Router, opts ServerOptions) *Server {
	h := newHandler(r, opts)
	return startServer(h, httptest.NewServer(h))
}

// NewServer6 starts a Server for r, as NewServer does, on the IPv6 loopback
// ([::1]): its URLs are IPv6 literals, as a pinhole client (package
// igd/pinhole) requires of the router's. Where this host has no IPv6
// loopback it starts nothing and returns an error (a test skips then).
// To let a pinhole client act as a LAN host with a global address, set
// opts.ClientAddr to return that address and give the client DialAs(it).
// Close the Server when done. It panics as NewServer does.
func NewServer6(r *Router, opts ServerOptions) (*Server, error) {
	h := newHandler(r, opts)
	ln, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		return nil, fmt.Errorf("fake: listen on the IPv6 loopback: %w", err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	return startServer(h, srv), nil
}

// startServer is the Server of h served by srv, started.
func startServer(h *handler, srv *httptest.Server) *Server {
	return &Server{RootDescURL: srv.URL + rootDescPath, srv: srv, handler: h}
}

// ServeHTTP serves req as the Server does, so a Server can also be mounted
// on a server of the caller's own.
func (s *Server) ServeHTTP(w http.ResponseWriter, req *http.Request) { s.handler.ServeHTTP(w, req) }

// URL returns the base URL of the server, "http://127.0.0.1:PORT" (with
// NewServer6, "http://[::1]:PORT").
func (s *Server) URL() string { return s.srv.URL }

// ControlURL returns the URL of the connection service's SOAP endpoint.
func (s *Server) ControlURL() string { return s.srv.URL + s.handler.controlPath }

// Close shuts the server down and waits for requests in flight (a request
// held by a hook ends when its context does: Close cancels it).
func (s *Server) Close() {
	s.srv.CloseClientConnections()
	s.srv.Close()
}

// handler serves one Router over HTTP.
type handler struct {
	router      *Router
	service     UPnPService
	controlPath string
	rootDesc    []byte
	clientAddr  func(*http.Request) netip.Addr
	server      string // the Server header
}

func newHandler(r *Router, opts ServerOptions) *handler {
	h := &handler{router: r, service: cmp.Or(opts.Service, WANIPConnection2), clientAddr: opts.ClientAddr,
		server: cmp.Or(opts.ServerHeader, DefaultServerHeader)}
	switch h.service {
	case WANIPConnection2, WANIPConnection1:
		h.controlPath = ipConnPath
	case WANPPPConnection1:
		h.controlPath = pppConnPath
	default:
		panic(fmt.Sprintf("fake: unknown ServerOptions.Service %q", opts.Service))
	}
	h.rootDesc = rootDescription(h.service)
	if h.clientAddr == nil {
		h.clientAddr = remoteAddr
	}
	return h
}

// remoteAddr is the default ServerOptions.ClientAddr.
func remoteAddr(req *http.Request) netip.Addr {
	ap, err := netip.ParseAddrPort(req.RemoteAddr)
	if err != nil {
		host, _, err := net.SplitHostPort(req.RemoteAddr)
		if err != nil {
			return netip.Addr{}
		}
		a, _ := netip.ParseAddr(host)
		return a.Unmap()
	}
	return ap.Addr().Unmap()
}

// writeXML writes an XML response with miniupnpd's headers.
func (h *handler) writeXML(w http.ResponseWriter, status int, body []byte) {
	hd := w.Header()
	hd.Set("Content-Type", `text/xml; charset="utf-8"`)
	hd.Set("Connection", "close")
	hd.Set("Content-Length", strconv.Itoa(len(body)))
	hd.Set("Server", h.server)
	hd["Ext"] = []string{""}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func (h *handler) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if h.router.Crashed() {
		hangUp(w)
		return
	}
	switch {
	case req.URL.Path == rootDescPath && (req.Method == http.MethodGet || req.Method == http.MethodHead):
		h.writeXML(w, http.StatusOK, h.rootDesc)
	case strings.HasPrefix(req.URL.Path, "/ctl/") && req.Method == http.MethodPost:
		h.serveControl(w, req)
	case strings.HasPrefix(req.URL.Path, "/ctl/"):
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	default:
		http.NotFound(w, req)
	}
}

// serveControl answers one SOAP call.
func (h *handler) serveControl(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(io.LimitReader(req.Body, maxRequestBody+1))
	if err != nil {
		h.writeXML(w, http.StatusInternalServerError, soapFault(faultFor(errInvalidArgs)))
		return
	}
	sr, err := parseSOAPRequest(req.Header.Get("SOAPAction"), body)
	if err == nil && req.URL.Path == ip6fcPath && h.service == WANIPConnection2 {
		h.servePinhole(w, req, sr)
		return
	}
	if err == nil && req.URL.Path != h.controlPath {
		// Another service of the description (Layer3Forwarding,
		// WANCommonInterfaceConfig, ...): none of its actions is modelled.
		err = errInvalidAction
	}
	if err != nil {
		h.writeXML(w, http.StatusInternalServerError, soapFault(faultFor(err)))
		return
	}
	args, err := h.call(req.Context(), h.clientAddr(req), sr)
	if h.router.Crashed() {
		hangUp(w)
		return
	}
	if err != nil {
		h.writeXML(w, http.StatusInternalServerError, soapFault(faultFor(err)))
		return
	}
	h.writeXML(w, http.StatusOK, soapResponse(string(h.service), sr.Action, args))
}

// hangUp closes the connection without an answer, as a dead daemon's does.
func hangUp(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			conn.Close()
			return
		}
	}
	panic(http.ErrAbortHandler) // a handler mounted where hijacking is not possible
}

// argError is a request argument that is missing or malformed: 402.
func argError(action string) error { return upnpErr(action, upnp.CodeInvalidArgs) }

// call runs one action through the Router's hooks, table and call log.
func (h *handler) call(ctx context.Context, caller netip.Addr, sr *soapRequest) ([]soapArg, error) {
	act, ok := actions[sr.Action]
	if !ok || (act.ipConnection2Only && h.service != WANIPConnection2) {
		return nil, errInvalidAction
	}
	rq := &request{h: h, action: sr.Action, caller: caller, args: args{action: sr.Action, m: sr.Args},
		call: Call{Method: act.method, Action: sr.Action, Client: caller}, layers: h.router.layers()}
	op, err := act.prepare(rq)
	if err != nil {
		return nil, err // malformed arguments: refused before any hook, not logged
	}
	var out []soapArg
	err = ctx.Err() // a request already given up reaches no hook
	if err == nil {
		err = actionChain(rq.layers, caller, sr.Action, func(ctx context.Context) (err error) {
			if err = ctx.Err(); err != nil {
				return err
			}
			out, err = op(ctx)
			return err
		})(ctx)
	}
	if err != nil {
		out = nil
	}
	rq.call.Err = err
	h.router.record(rq.call)
	return out, err
}

// request is one SOAP call being answered.
type request struct {
	h      *handler
	action string
	caller netip.Addr
	args   args
	call   Call // logged once the call ends
	layers []RouterHooks
}

// operation is the work of one SOAP call, run inside the SOAPAction hooks;
// it returns the response's output arguments.
type operation func(ctx context.Context) ([]soapArg, error)

// soapAction is how a Server answers one SOAP action.
type soapAction struct {
	// method is what the call is logged as (Call.Method).
	method string
	// ipConnection2Only: only WANIPConnection:2 has the action; other
	// services answer 401.
	ipConnection2Only bool
	// prepare reads the arguments (an error is the fault to answer, before
	// any hook) and returns the operation, which goes through the action's
	// own hooks and records what it did in rq.call.
	prepare func(rq *request) (operation, error)
}

// actions are the SOAP actions a Server answers; any other is 401.
var actions = map[string]soapAction{
	"GetExternalIPAddress":        {method: MethodExternalIP, prepare: (*request).getExternalIPAddress},
	"GetStatusInfo":               {method: MethodSOAPAction, prepare: (*request).getStatusInfo},
	"GetConnectionTypeInfo":       {method: MethodSOAPAction, prepare: constant("NewConnectionType", "IP_Routed", "NewPossibleConnectionTypes", "IP_Routed")},
	"GetNATRSIPStatus":            {method: MethodSOAPAction, prepare: constant("NewRSIPAvailable", "0", "NewNATEnabled", "1")},
	"AddPortMapping":              {method: MethodAddPortMapping, prepare: (*request).addPortMapping},
	"AddAnyPortMapping":           {method: MethodAddPortMapping, ipConnection2Only: true, prepare: (*request).addPortMapping},
	"DeletePortMapping":           {method: MethodDeletePortMapping, prepare: (*request).deletePortMapping},
	"DeletePortMappingRange":      {method: MethodSOAPAction, ipConnection2Only: true, prepare: (*request).deletePortMappingRange},
	"GetSpecificPortMappingEntry": {method: MethodGetPortMapping, prepare: (*request).getSpecificPortMappingEntry},
	"GetGenericPortMappingEntry":  {method: MethodGetGenericPortMappingEntry, prepare: (*request).getGenericPortMappingEntry},
	"GetListOfPortMappings":       {method: MethodListPortMappings, ipConnection2Only: true, prepare: (*request).getListOfPortMappings},
}

// constant answers with fixed output arguments, given as name, value pairs.
func constant(nameValues ...string) func(*request) (operation, error) {
	out := make([]soapArg, 0, len(nameValues)/2)
	for i := 0; i+1 < len(nameValues); i += 2 {
		out = append(out, soapArg{name: nameValues[i], value: nameValues[i+1]})
	}
	return func(*request) (operation, error) {
		return func(context.Context) ([]soapArg, error) { return out, nil }, nil
	}
}

func (rq *request) getExternalIPAddress() (operation, error) {
	next := externalIPChain(rq.layers, rq.caller, func(ctx context.Context) (netip.Addr, error) {
		return rq.h.router.ExternalIP(), ctx.Err()
	})
	return func(ctx context.Context) (_ []soapArg, err error) {
		rq.call.Addr, err = next(ctx)
		return externalIPArgs(rq.call.Addr), err
	}, nil
}

func (rq *request) getStatusInfo() (operation, error) {
	return func(context.Context) ([]soapArg, error) {
		up := int64(rq.h.router.Uptime() / time.Second)
		return []soapArg{{name: "NewConnectionStatus", value: "Connected"}, {name: "NewLastConnectionError", value: "ERROR_NONE"}, {name: "NewUptime", value: strconv.FormatInt(up, 10)}}, nil
	}, nil
}

// addPortMapping answers AddPortMapping and AddAnyPortMapping.
func (rq *request) addPortMapping() (operation, error) {
	m, err := rq.args.mapping()
	if err != nil {
		return nil, err
	}
	rq.call.Key, rq.call.Mapping = m.Key(), m
	anyPort := rq.action == "AddAnyPortMapping"
	next := addChain(rq.layers, rq.caller, func(ctx context.Context, m igd.Mapping) (igd.Mapping, error) {
		if err := ctx.Err(); err != nil {
			return igd.Mapping{}, err
		}
		if anyPort {
			return rq.h.router.addAny(rq.action, rq.caller, m)
		}
		return rq.h.router.add(rq.action, rq.caller, m)
	})
	return func(ctx context.Context) ([]soapArg, error) {
		stored, err := next(ctx, m)
		if err != nil || !anyPort {
			return nil, err
		}
		return []soapArg{{name: "NewReservedPort", value: strconv.Itoa(int(stored.ExternalPort))}}, nil
	}, nil
}

func (rq *request) deletePortMapping() (operation, error) {
	k, err := rq.args.key()
	if err != nil {
		return nil, err
	}
	rq.call.Key = k
	next := deleteChain(rq.layers, rq.caller, func(ctx context.Context, k igd.Key) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		return rq.h.router.remove(rq.action, rq.caller, k)
	})
	return func(ctx context.Context) ([]soapArg, error) { return nil, next(ctx, k) }, nil
}

func (rq *request) deletePortMappingRange() (operation, error) {
	start, end, proto, manage, err := rq.args.portRange()
	if err != nil {
		return nil, err
	}
	return func(context.Context) ([]soapArg, error) {
		return nil, rq.h.router.removeRange(rq.action, rq.caller, proto, start, end, manage)
	}, nil
}

func (rq *request) getSpecificPortMappingEntry() (operation, error) {
	k, err := rq.args.key()
	if err != nil {
		return nil, err
	}
	rq.call.Key = k
	next := getChain(rq.layers, rq.caller, func(ctx context.Context, k igd.Key) (igd.Mapping, error) {
		if err := ctx.Err(); err != nil {
			return igd.Mapping{}, err
		}
		return rq.h.router.get(rq.action, k)
	})
	return func(ctx context.Context) (_ []soapArg, err error) {
		rq.call.Mapping, err = next(ctx, k)
		if err != nil {
			return nil, err
		}
		return specificArgs(rq.call.Mapping), nil
	}, nil
}

func (rq *request) getGenericPortMappingEntry() (operation, error) {
	idx, err := rq.args.uint("NewPortMappingIndex", 16)
	if err != nil {
		return nil, err
	}
	next := entryChain(rq.layers, rq.caller, func(ctx context.Context, idx int) (igd.Mapping, error) {
		if err := ctx.Err(); err != nil {
			return igd.Mapping{}, err
		}
		list := rq.h.router.list()
		if idx < 0 || idx >= len(list) {
			return igd.Mapping{}, upnpErr(rq.action, upnp.CodeInvalidArrayIndex)
		}
		return list[idx], nil
	})
	return func(ctx context.Context) (_ []soapArg, err error) {
		rq.call.Mapping, err = next(ctx, int(idx))
		if err != nil {
			return nil, err
		}
		rq.call.Key = rq.call.Mapping.Key()
		return genericArgs(rq.call.Mapping), nil
	}, nil
}

func (rq *request) getListOfPortMappings() (operation, error) {
	start, end, proto, _, err := rq.args.portRange()
	if err != nil {
		return nil, err
	}
	n, err := rq.args.uint("NewNumberOfPorts", 16)
	if err != nil {
		return nil, err
	}
	if n == 0 || n > 1000 {
		n = 1000 // miniupnpd's limit per call
	}
	rq.call.Key, rq.call.Ports = igd.Key{Protocol: proto}, igd.PortRange{First: start, Last: end}
	r := rq.h.router
	next := listChain(rq.layers, rq.caller, func(ctx context.Context, proto igd.Protocol, ports igd.PortRange) ([]igd.Mapping, error) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		out := r.listRange(proto, ports)
		if r.cfg.CrashOnLongList && len(out) > upnp.SafeListWidth {
			r.crash()
			return nil, upnpErr(rq.action, upnp.CodeActionFailed) // never sent: the server hangs up
		}
		if len(out) > int(n) {
			out = out[:n]
		}
		return out, nil
	})
	return func(ctx context.Context) (_ []soapArg, err error) {
		rq.call.Mappings, err = next(ctx, proto, rq.call.Ports)
		if err != nil {
			return nil, err
		}
		return []soapArg{{name: "NewPortListing", value: portListing(rq.call.Mappings), raw: true}}, nil
	}, nil
}

func externalIPArgs(a netip.Addr) []soapArg {
	s := ""
	if a.IsValid() {
		s = a.String()
	}
	return []soapArg{{name: "NewExternalIPAddress", value: s}}
}

func leaseSeconds(d time.Duration) string { return strconv.FormatInt(int64(d/time.Second), 10) }

func enabledArg(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

func remoteHostArg(a netip.Addr) string {
	if !a.IsValid() {
		return ""
	}
	return a.String()
}

func specificArgs(m igd.Mapping) []soapArg {
	return []soapArg{
		{name: "NewInternalPort", value: strconv.Itoa(int(m.InternalPort))},
		{name: "NewInternalClient", value: m.InternalClient.String()},
		{name: "NewEnabled", value: enabledArg(m.Enabled)},
		{name: "NewPortMappingDescription", value: m.Description},
		{name: "NewLeaseDuration", value: leaseSeconds(m.Lease)},
	}
}

func genericArgs(m igd.Mapping) []soapArg {
	return append([]soapArg{
		{name: "NewRemoteHost", value: remoteHostArg(m.RemoteHost)},
		{name: "NewExternalPort", value: strconv.Itoa(int(m.ExternalPort))},
		{name: "NewProtocol", value: string(m.Protocol)},
	}, specificArgs(m)...)
}

// portListing renders a PortMappingList as miniupnpd does: the XML document
// inside a CDATA section. Values are escaped, so the document cannot hold
// "]]>".
func portListing(ms []igd.Mapping) string {
	var b strings.Builder
	b.WriteString(`<![CDATA[<p:PortMappingList xmlns:p="urn:schemas-upnp-org:gw:WANIPConnection" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" xsi:schemaLocation="urn:schemas-upnp-org:gw:WANIPConnection http://www.upnp.org/schemas/gw/WANIPConnection-v2.xsd">`)
	for _, m := range ms {
		b.WriteString("<p:PortMappingEntry>")
		for _, a := range []soapArg{
			{name: "NewRemoteHost", value: remoteHostArg(m.RemoteHost)},
			{name: "NewExternalPort", value: strconv.Itoa(int(m.ExternalPort))},
			{name: "NewProtocol", value: string(m.Protocol)},
			{name: "NewInternalPort", value: strconv.Itoa(int(m.InternalPort))},
			{name: "NewInternalClient", value: m.InternalClient.String()},
			{name: "NewEnabled", value: enabledArg(m.Enabled)},
			{name: "NewDescription", value: m.Description},
			{name: "NewLeaseTime", value: leaseSeconds(m.Lease)},
		} {
			b.WriteString("<p:" + a.name + ">" + escapeText(a.value) + "</p:" + a.name + ">")
		}
		b.WriteString("</p:PortMappingEntry>")
	}
	b.WriteString("</p:PortMappingList>]]>")
	return b.String()
}

// args reads typed arguments of one action. Missing or malformed arguments
// are 402 Invalid Args.
type args struct {
	action string
	m      map[string]string
}

func (a args) str(name string) (string, error) {
	v, ok := a.m[name]
	if !ok {
		return "", argError(a.action)
	}
	return strings.TrimSpace(v), nil
}

func (a args) uint(name string, bits int) (uint64, error) {
	s, err := a.str(name)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseUint(s, 10, bits)
	if err != nil {
		return 0, argError(a.action)
	}
	return n, nil
}

// protocol reads NewProtocol. Like miniupnpd, anything but UDP is TCP: an
// SCTP request is silently installed as TCP.
func (a args) protocol() (igd.Protocol, error) {
	s, err := a.str("NewProtocol")
	if err != nil {
		return "", err
	}
	if strings.EqualFold(s, "UDP") {
		return igd.UDP, nil
	}
	return igd.TCP, nil
}

func (a args) bool(name string) (bool, error) {
	s, err := a.str(name)
	if err != nil {
		return false, err
	}
	switch strings.ToLower(s) {
	case "1", "true", "yes":
		return true, nil
	case "0", "false", "no":
		return false, nil
	}
	return false, argError(a.action)
}

func (a args) remoteHost() (netip.Addr, error) {
	s, ok := a.m["NewRemoteHost"]
	s = strings.TrimSpace(s)
	if !ok || s == "" || s == "*" {
		return netip.Addr{}, nil
	}
	ip, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, argError(a.action)
	}
	return ip.Unmap(), nil
}

// key reads the arguments that name a mapping.
func (a args) key() (igd.Key, error) {
	port, err := a.uint("NewExternalPort", 16)
	if err != nil {
		return igd.Key{}, err
	}
	proto, err := a.protocol()
	if err != nil {
		return igd.Key{}, err
	}
	if _, err := a.remoteHost(); err != nil {
		return igd.Key{}, err
	}
	return igd.Key{Protocol: proto, ExternalPort: uint16(port)}, nil
}

// mapping reads the arguments of AddPortMapping, with miniupnpd's answers
// to bad values: 402 for missing or unreadable arguments, 716 for external
// port 0, 501 for an empty internal client.
func (a args) mapping() (igd.Mapping, error) {
	k, err := a.key()
	if err != nil {
		return igd.Mapping{}, err
	}
	remote, _ := a.remoteHost()
	inPort, err := a.uint("NewInternalPort", 16)
	if err != nil {
		return igd.Mapping{}, err
	}
	client, err := a.str("NewInternalClient")
	if err != nil {
		return igd.Mapping{}, err
	}
	if _, err := a.bool("NewEnabled"); err != nil {
		return igd.Mapping{}, err
	}
	desc, ok := a.m["NewPortMappingDescription"]
	if !ok {
		return igd.Mapping{}, argError(a.action)
	}
	lease, err := a.uint("NewLeaseDuration", 32)
	if err != nil {
		return igd.Mapping{}, err
	}
	if k.ExternalPort == 0 {
		return igd.Mapping{}, upnpErr(a.action, upnp.CodeWildCardNotPermittedInExt)
	}
	if client == "" {
		return igd.Mapping{}, upnpErr(a.action, upnp.CodeActionFailed)
	}
	ip, err := netip.ParseAddr(client)
	if err != nil || !ip.Unmap().Is4() || inPort == 0 {
		return igd.Mapping{}, argError(a.action)
	}
	return igd.Mapping{
		Protocol: k.Protocol, ExternalPort: k.ExternalPort,
		InternalClient: ip.Unmap(), InternalPort: uint16(inPort),
		Description: desc, Lease: time.Duration(lease) * time.Second,
		RemoteHost: remote, Enabled: true,
	}, nil
}

// portRange reads the arguments of DeletePortMappingRange and
// GetListOfPortMappings. NewProtocol is required (miniupnpd answers 402
// without it).
func (a args) portRange() (start, end uint16, proto igd.Protocol, manage bool, err error) {
	s, err := a.uint("NewStartPort", 16)
	if err != nil {
		return 0, 0, "", false, err
	}
	e, err := a.uint("NewEndPort", 16)
	if err != nil {
		return 0, 0, "", false, err
	}
	if s > e {
		return 0, 0, "", false, upnpErr(a.action, codeInconsistentParameters)
	}
	proto, err = a.protocol()
	if err != nil {
		return 0, 0, "", false, err
	}
	manage, err = a.bool("NewManage")
	if err != nil {
		return 0, 0, "", false, err
	}
	return uint16(s), uint16(e), proto, manage, nil
}
