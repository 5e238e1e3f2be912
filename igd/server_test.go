package igd

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ccmkit/ccmkit/internal/upnp"
	"k8s.io/klog/v2/ktesting"
)

// This file holds a small IGD over real HTTP for the unit tests: it serves a
// root description captured from a real router (testdata/) and answers SOAP
// calls from a per-action table of handlers.

// action answers one SOAP action: the output arguments in order, or a UPnP
// fault code (with fault's description).
type action func(args map[string]string) (out [][2]string, fault int)

// soapCall is one SOAP request the server received.
type soapCall struct {
	Action string
	Args   map[string]string
}

// device is one fixture: the root description file, its connection service
// type and that service's control path.
type device struct {
	file, serviceType, controlPath string
}

var (
	igd2Device = device{"miniupnpd-2.3.1-igd2-rootDesc.xml", upnp.ServiceWANIPConnection2, "/ctl/IPConn"}
	igd1Device = device{"miniupnpd-2.3.1-igd1-rootDesc.xml", upnp.ServiceWANIPConnection1, "/ctl/IPConn"}
	pppDevice  = device{"wanppp1-rootDesc.xml", upnp.ServiceWANPPPConnection1, "/ctl/PPPConn"}
)

type testIGD struct {
	t   *testing.T
	dev device
	srv *httptest.Server
	// URL is the root description's URL.
	URL string

	mu          sync.Mutex
	actions     map[string]action
	calls       []soapCall
	descFetches int
	inFlight    int
	maxInFlight int
	// block, when set, is waited on by every SOAP call (to hold calls open).
	block chan struct{}
	// descDown makes the root description answer 503, as a router that is
	// still booting does.
	descDown bool
}

// newTestIGD starts a test IGD for dev listening on addr ("" means
// 127.0.0.1:0). GetStatusInfo answers Connected and GetExternalIPAddress a
// public address until replaced with handle.
func newTestIGD(t *testing.T, dev device, addr string) *testIGD {
	t.Helper()
	path := dev.file
	if !filepath.IsAbs(path) {
		path = filepath.Join("testdata", path)
	}
	desc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	g := &testIGD{t: t, dev: dev, actions: map[string]action{}}
	g.handle("GetStatusInfo", reply("NewConnectionStatus", "Connected", "NewLastConnectionError", "ERROR_NONE", "NewUptime", "42"))
	g.handle("GetExternalIPAddress", reply("NewExternalIPAddress", "198.51.101.7"))
	mux := http.NewServeMux()
	mux.HandleFunc("GET /rootDesc.xml", func(w http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		g.descFetches++
		down := g.descDown
		g.mu.Unlock()
		if down {
			http.Error(w, "booting", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "text/xml")
		w.Write(desc)
	})
	mux.HandleFunc("POST "+dev.controlPath, g.serveSOAP)
	g.srv = httptest.NewUnstartedServer(mux)
	if addr != "" {
		l, err := net.Listen("tcp4", addr)
		if err != nil {
			t.Fatal(err)
		}
		g.srv.Listener.Close()
		g.srv.Listener = l
	}
	g.srv.Start()
	t.Cleanup(g.srv.Close)
	g.URL = g.srv.URL + "/rootDesc.xml"
	return g
}

// handle sets the handler of a SOAP action.
func (g *testIGD) handle(name string, a action) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.actions[name] = a
}

// Calls returns a copy of the SOAP calls received so far.
func (g *testIGD) Calls() []soapCall {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]soapCall(nil), g.calls...)
}

// CallsOf returns the calls of one action.
func (g *testIGD) CallsOf(name string) []soapCall {
	var out []soapCall
	for _, c := range g.Calls() {
		if c.Action == name {
			out = append(out, c)
		}
	}
	return out
}

func (g *testIGD) DescFetches() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.descFetches
}

// SetDescDown makes the root description unavailable (true) or available.
func (g *testIGD) SetDescDown(down bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.descDown = down
}

// SetBlock makes every SOAP call wait for ch to close (nil: answer at once).
func (g *testIGD) SetBlock(ch chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.block = ch
}

func (g *testIGD) MaxInFlight() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.maxInFlight
}

// reply returns an action answering the given name/value pairs.
func reply(kv ...string) action {
	return func(map[string]string) ([][2]string, int) {
		var out [][2]string
		for i := 0; i+1 < len(kv); i += 2 {
			out = append(out, [2]string{kv[i], kv[i+1]})
		}
		return out, 0
	}
}

// fault returns an action that always answers UPnP error code.
func fault(code int) action {
	return func(map[string]string) ([][2]string, int) { return nil, code }
}

// listOrder is the order in which a listTable action answers.
type listOrder int

const (
	// portOrder answers by ascending external port.
	portOrder listOrder = iota
	// newestFirst answers the most recently added mapping first, whatever
	// its port, as miniupnpd 2.3.1 does.
	newestFirst
)

func (o listOrder) String() string {
	if o == newestFirst {
		return "newest first"
	}
	return "port order"
}

// listTable returns a GetListOfPortMappings action answering from table,
// which holds the router's mappings in the order they were added (oldest
// first). Like miniupnpd 2.3.1 it answers only NewProtocol's mappings with an
// external port from NewStartPort to NewEndPort, at most NewNumberOfPorts of
// them (0 or more than 1000 means 1000), in the given order, and 730 when
// none is in range. A call whose range is empty or reversed fails the test:
// the client must never ask for one (a start past 65535 wrapped to 0, say).
func listTable(t *testing.T, table []Mapping, order listOrder) action {
	t.Helper()
	return func(args map[string]string) ([][2]string, int) {
		start, err1 := strconv.ParseUint(args["NewStartPort"], 10, 16)
		end, err2 := strconv.ParseUint(args["NewEndPort"], 10, 16)
		n, err3 := strconv.ParseUint(args["NewNumberOfPorts"], 10, 16)
		if err := errors.Join(err1, err2, err3); err != nil || start > end {
			t.Errorf("GetListOfPortMappings(%v): bad arguments (%v)", args, err)
			return nil, upnp.CodeInvalidArgs
		}
		if n == 0 || n > 1000 {
			n = 1000
		}
		var in []Mapping
		for _, m := range table {
			if string(m.Protocol) == args["NewProtocol"] && uint64(m.ExternalPort) >= start && uint64(m.ExternalPort) <= end {
				in = append(in, m)
			}
		}
		switch order {
		case newestFirst:
			slices.Reverse(in)
		default:
			slices.SortStableFunc(in, func(a, b Mapping) int { return int(a.ExternalPort) - int(b.ExternalPort) })
		}
		if len(in) == 0 {
			return nil, upnp.CodePortMappingNotFound
		}
		return [][2]string{{"NewPortListing", portListingXML(in[:min(len(in), int(n))])}}, 0
	}
}

// portListingXML formats ms as the PortMappingList document of a
// GetListOfPortMappings answer, with the namespace prefix miniupnpd uses.
func portListingXML(ms []Mapping) string {
	var b strings.Builder
	b.WriteString(`<p:PortMappingList xmlns:p="urn:schemas-upnp-org:gw:WANIPConnection">`)
	for _, m := range ms {
		remote := ""
		if m.RemoteHost.IsValid() {
			remote = m.RemoteHost.String()
		}
		enabled := "0"
		if m.Enabled {
			enabled = "1"
		}
		fmt.Fprintf(&b, "<p:PortMappingEntry><p:NewRemoteHost>%s</p:NewRemoteHost><p:NewExternalPort>%d</p:NewExternalPort><p:NewProtocol>%s</p:NewProtocol><p:NewInternalPort>%d</p:NewInternalPort><p:NewInternalClient>%s</p:NewInternalClient><p:NewEnabled>%s</p:NewEnabled><p:NewDescription>",
			remote, m.ExternalPort, m.Protocol, m.InternalPort, m.InternalClient, enabled)
		xml.EscapeText(&b, []byte(m.Description))
		fmt.Fprintf(&b, "</p:NewDescription><p:NewLeaseTime>%d</p:NewLeaseTime></p:PortMappingEntry>", m.Lease/time.Second)
	}
	b.WriteString(`</p:PortMappingList>`)
	return b.String()
}

func (g *testIGD) serveSOAP(w http.ResponseWriter, r *http.Request) {
	soapAction := strings.Trim(r.Header.Get("SOAPACTION"), `"`)
	ns, name, ok := strings.Cut(soapAction, "#")
	if !ok || ns != g.dev.serviceType {
		http.Error(w, "bad SOAPACTION "+soapAction, http.StatusBadRequest)
		return
	}
	args, err := parseSOAPArgs(r.Body, name)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	g.mu.Lock()
	g.calls = append(g.calls, soapCall{Action: name, Args: args})
	g.inFlight++
	g.maxInFlight = max(g.maxInFlight, g.inFlight)
	a := g.actions[name]
	block := g.block
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.inFlight--
		g.mu.Unlock()
	}()
	if block != nil {
		select {
		case <-block:
		case <-r.Context().Done():
			return
		}
	}
	if a == nil {
		a = fault(upnp.CodeInvalidAction)
	}
	out, code := a(args)
	w.Header().Set("Content-Type", `text/xml; charset="utf-8"`)
	var b bytes.Buffer
	b.WriteString(`<?xml version="1.0"?>` + "\n" + `<s:Envelope xmlns:s="http://schemas.xmlsoap.org/soap/envelope/" s:encodingStyle="http://schemas.xmlsoap.org/soap/encoding/"><s:Body>`)
	if code != 0 {
		fmt.Fprintf(&b, `<s:Fault><faultcode>s:Client</faultcode><faultstring>UPnPError</faultstring><detail><UPnPError xmlns="urn:schemas-upnp-org:control-1-0"><errorCode>%d</errorCode><errorDescription>%s</errorDescription></UPnPError></detail></s:Fault>`, code, faultText(code))
	} else {
		fmt.Fprintf(&b, `<u:%sResponse xmlns:u="%s">`, name, ns)
		for _, kv := range out {
			fmt.Fprintf(&b, "<%s>", kv[0])
			xml.EscapeText(&b, []byte(kv[1]))
			fmt.Fprintf(&b, "</%s>", kv[0])
		}
		fmt.Fprintf(&b, `</u:%sResponse>`, name)
	}
	b.WriteString(`</s:Body></s:Envelope>`)
	if code != 0 {
		w.WriteHeader(http.StatusInternalServerError)
	}
	w.Write(b.Bytes())
}

func faultText(code int) string {
	switch code {
	case upnp.CodeInvalidAction:
		return "Invalid Action"
	case upnp.CodeInvalidArgs:
		return "Invalid Args"
	case upnp.CodeActionFailed:
		return "Action Failed"
	case upnp.CodeInvalidArrayIndex:
		return "SpecifiedArrayIndexInvalid"
	case upnp.CodeNoSuchEntry:
		return "NoSuchEntryInArray"
	case upnp.CodeConflict:
		return "ConflictInMappingEntry"
	case upnp.CodeOnlyPermanentLeases:
		return "OnlyPermanentLeasesSupported"
	case upnp.CodePortMappingNotFound:
		return "NoSuchEntryInArray"
	}
	return "Error"
}

// parseSOAPArgs reads the arguments of the named action from a SOAP envelope.
func parseSOAPArgs(r io.Reader, name string) (map[string]string, error) {
	dec := xml.NewDecoder(r)
	args := map[string]string{}
	depth := -1
	var cur string
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			if depth == -1 {
				return nil, fmt.Errorf("no %s element", name)
			}
			return args, nil
		}
		if err != nil {
			return nil, err
		}
		switch t := tok.(type) {
		case xml.StartElement:
			switch {
			case depth == -1 && t.Name.Local == name:
				depth = 0
			case depth >= 0:
				depth++
				cur = t.Name.Local
				args[cur] = ""
			}
		case xml.CharData:
			if depth == 1 {
				args[cur] += string(t)
			}
		case xml.EndElement:
			if depth > 0 {
				depth--
			} else if depth == 0 {
				depth = -2 // done; keep reading to EOF
			}
		}
	}
}

// newTestClient returns a client for g by URL with short bounds.
func newTestClient(t *testing.T, g *testIGD, mod func(*Config)) *UPnPClient {
	t.Helper()
	cfg := Config{
		RootDescURL:      g.URL,
		CallTimeout:      5 * time.Second,
		DiscoveryTimeout: 10 * time.Second,
		Host:             fakeHost{gw: g.addr()},
	}
	if mod != nil {
		mod(&cfg)
	}
	c, err := NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// addr returns the IP address g listens on.
func (g *testIGD) addr() (a netip.Addr) {
	return mustAddrPort(g.t, g.srv.Listener.Addr().String()).Addr()
}

// fakeHost is a HostInfo with fixed answers.
type fakeHost struct {
	gw    netip.Addr
	local netip.Addr
	err   error
}

func (h fakeHost) DefaultGateway(context.Context) (netip.Addr, error) {
	if h.err != nil {
		return netip.Addr{}, h.err
	}
	return h.gw, nil
}

func (h fakeHost) LocalAddr(_ context.Context, router netip.Addr) (netip.Addr, error) {
	if h.err != nil {
		return netip.Addr{}, h.err
	}
	if h.local.IsValid() {
		return h.local, nil
	}
	return router, nil
}

func mustAddrPort(t *testing.T, s string) netip.AddrPort {
	t.Helper()
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		t.Fatal(err)
	}
	return ap
}

// testCtx returns a context whose logger writes through t.
func testCtx(t *testing.T) context.Context {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	return ctx
}
