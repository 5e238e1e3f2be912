package igd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ccmkit/ccmkit/internal/igderr"
	"github.com/ccmkit/ccmkit/internal/upnp"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/huin/goupnp"
	"github.com/huin/goupnp/dcps/internetgateway2"
	"github.com/huin/goupnp/soap"
)

var devices = []device{igd2Device, igd1Device, pppDevice}

func TestNewClientRejectsBadConfig(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"negative discovery timeout", Config{DiscoveryTimeout: -1}, "Config.DiscoveryTimeout"},
		{"negative settle", Config{SettleTime: -1}, "Config.SettleTime"},
		{"negative call timeout", Config{CallTimeout: -1}, "Config.CallTimeout"},
		{"negative max entries", Config{MaxListEntries: -1}, "Config.MaxListEntries"},
		{"relative URL", Config{RootDescURL: "/rootDesc.xml"}, "Config.RootDescURL"},
		{"not http", Config{RootDescURL: "ftp://192.0.2.1/rootDesc.xml"}, "Config.RootDescURL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewClient(tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("NewClient() error = %v, want one naming %s", err, tt.want)
			}
		})
	}
}

func TestNewClientDoesNoIO(t *testing.T) {
	g := newTestIGD(t, igd2Device, "")
	c := newTestClient(t, g, nil)
	if _, ok := c.current(); ok {
		t.Fatal("current() reports a gateway before any call")
	}
	if n := g.DescFetches(); n != 0 {
		t.Fatalf("NewClient fetched the description %d times, want 0", n)
	}
	if n := len(g.Calls()); n != 0 {
		t.Fatalf("NewClient made %d SOAP calls, want 0", n)
	}
}

func TestDiscoverByURL(t *testing.T) {
	for _, dev := range devices {
		t.Run(shortService(dev.serviceType), func(t *testing.T) {
			g := newTestIGD(t, dev, "")
			c := newTestClient(t, g, nil)
			gw, err := c.Discover(testCtx(t))
			if err != nil {
				t.Fatal(err)
			}
			if gw.ServiceType != dev.serviceType {
				t.Errorf("ServiceType = %q, want %q", gw.ServiceType, dev.serviceType)
			}
			if want := g.srv.URL + dev.controlPath; gw.ControlURL != want {
				t.Errorf("ControlURL = %q, want %q", gw.ControlURL, want)
			}
			if gw.Location != g.URL || gw.FriendlyName != "Debian router" {
				t.Errorf("Location, FriendlyName = %q, %q", gw.Location, gw.FriendlyName)
			}
			if !gw.connected() || gw.ExternalIP != netip.MustParseAddr("198.51.101.7") || !gw.PublicExternalIP || !gw.OnDefaultGateway {
				t.Errorf("gateway = %+v, want connected, public 198.51.101.7, on the default gateway", gw)
			}
			if gw.Addr != g.addr() {
				t.Errorf("Addr = %s, want %s", gw.Addr, g.addr())
			}
			if !strings.Contains(gw.Reason, "connected, public external IP, on the default gateway") {
				t.Errorf("Reason = %q", gw.Reason)
			}
			cur, ok := c.current()
			if !ok || cur.Location != gw.Location {
				t.Errorf("current() = %+v, %v; want the discovered gateway", cur, ok)
			}
		})
	}
}

func TestDiscoverRejects(t *testing.T) {
	tests := []struct {
		name   string
		dev    device
		mod    func(g *testIGD)
		reject string
	}{
		{"not connected", igd2Device, func(g *testIGD) {
			g.handle("GetStatusInfo", reply("NewConnectionStatus", "Disconnected", "NewLastConnectionError", "ERROR_NONE", "NewUptime", "0"))
		}, `WAN connection is "Disconnected"`},
		{"no external IP", igd1Device, func(g *testIGD) {
			g.handle("GetExternalIPAddress", reply("NewExternalIPAddress", ""))
		}, "no external IP address"},
		{"external IP fault", pppDevice, func(g *testIGD) {
			g.handle("GetExternalIPAddress", fault(upnp.CodeActionFailed))
		}, "UPnP error 501"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newTestIGD(t, tt.dev, "")
			tt.mod(g)
			c := newTestClient(t, g, nil)
			_, err := c.Discover(testCtx(t))
			if !errors.Is(err, ErrNoGateway) {
				t.Fatalf("Discover() error = %v, want ErrNoGateway", err)
			}
			var nge *noGatewayError
			if !errors.As(err, &nge) || len(nge.Found) != 1 || !strings.Contains(nge.Found[0].Rejected, tt.reject) {
				t.Fatalf("Discover() error = %#v, want one candidate rejected with %q", err, tt.reject)
			}
			if !strings.Contains(err.Error(), tt.reject) || !strings.Contains(err.Error(), g.URL) {
				t.Errorf("error text %q does not say what was found and why it was rejected", err)
			}
			if _, ok := c.current(); ok {
				t.Error("a rejected gateway was cached")
			}
		})
	}
}

func TestDiscoverUnknownStatusStillUsable(t *testing.T) {
	g := newTestIGD(t, igd1Device, "")
	g.handle("GetStatusInfo", fault(upnp.CodeInvalidAction))
	c := newTestClient(t, g, nil)
	gw, err := c.Discover(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if gw.Status != "" || !strings.Contains(gw.Reason, "connection status unknown") {
		t.Errorf("Status, Reason = %q, %q; want unknown status", gw.Status, gw.Reason)
	}
}

func TestNonPublicExternalIPIsReported(t *testing.T) {
	g := newTestIGD(t, igd2Device, "")
	g.handle("GetExternalIPAddress", reply("NewExternalIPAddress", "100.64.3.4"))
	c := newTestClient(t, g, nil)
	gw, err := c.Discover(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if gw.PublicExternalIP || !strings.Contains(gw.Reason, "external IP not public") {
		t.Errorf("PublicExternalIP, Reason = %v, %q; want not public", gw.PublicExternalIP, gw.Reason)
	}
	ip, err := c.ExternalIP(testCtx(t))
	if err != nil || ip != netip.MustParseAddr("100.64.3.4") {
		t.Fatalf("ExternalIP() = %s, %v; want 100.64.3.4", ip, err)
	}
	if IsPublic(ip) {
		t.Errorf("IsPublic(%s) = true, want false (CGNAT)", ip)
	}
}

func TestAddPortMappingSendsArguments(t *testing.T) {
	for _, dev := range devices {
		t.Run(shortService(dev.serviceType), func(t *testing.T) {
			g := newTestIGD(t, dev, "")
			g.handle("AddPortMapping", reply())
			c := newTestClient(t, g, nil)
			m := Mapping{Protocol: UDP, ExternalPort: 8053, InternalClient: netip.MustParseAddr("192.0.2.10"), InternalPort: 30053,
				Description: "ccmkit default/dns", Lease: time.Hour, RemoteHost: netip.MustParseAddr("203.0.113.9")}
			got, err := c.AddPortMapping(testCtx(t), m)
			if err != nil {
				t.Fatal(err)
			}
			want := m
			want.Enabled = true
			if got != want {
				t.Errorf("AddPortMapping() = %v, want %v", got, want)
			}
			calls := g.CallsOf("AddPortMapping")
			if len(calls) != 1 {
				t.Fatalf("AddPortMapping calls = %d, want 1", len(calls))
			}
			wantArgs := map[string]string{
				"NewRemoteHost": "203.0.113.9", "NewExternalPort": "8053", "NewProtocol": "UDP", "NewInternalPort": "30053",
				"NewInternalClient": "192.0.2.10", "NewEnabled": "1", "NewPortMappingDescription": "ccmkit default/dns", "NewLeaseDuration": "3600",
			}
			if diff := cmp.Diff(wantArgs, calls[0].Args); diff != "" {
				t.Errorf("AddPortMapping args (-want +got):\n%s", diff)
			}
		})
	}
}

func TestInvalidInputReachesNoRouter(t *testing.T) {
	valid := Mapping{Protocol: TCP, ExternalPort: 8080, InternalClient: netip.MustParseAddr("192.0.2.10"), InternalPort: 30080}
	with := func(f func(*Mapping)) Mapping { m := valid; f(&m); return m }
	tests := []struct {
		name  string
		call  func(context.Context, *UPnPClient) error
		field string
	}{
		{"add SCTP", addCall(with(func(m *Mapping) { m.Protocol = "SCTP" })), "Protocol"},
		{"add external port 0", addCall(with(func(m *Mapping) { m.ExternalPort = 0 })), "ExternalPort"},
		{"add internal port 0", addCall(with(func(m *Mapping) { m.InternalPort = 0 })), "InternalPort"},
		{"add no internal client", addCall(with(func(m *Mapping) { m.InternalClient = netip.Addr{} })), "InternalClient"},
		{"add IPv6 internal client", addCall(with(func(m *Mapping) { m.InternalClient = netip.MustParseAddr("2001:db8::1") })), "InternalClient"},
		{"add long description", addCall(with(func(m *Mapping) { m.Description = strings.Repeat("d", MaxDescriptionLen+1) })), "Description"},
		{"add fractional lease", addCall(with(func(m *Mapping) { m.Lease = 1500 * time.Millisecond })), "Lease"},
		{"add IPv6 remote host", addCall(with(func(m *Mapping) { m.RemoteHost = netip.MustParseAddr("2001:db8::1") })), "RemoteHost"},
		{"get lower-case tcp", func(ctx context.Context, c *UPnPClient) error {
			_, err := c.GetPortMapping(ctx, "tcp", 80)
			return err
		}, "Protocol"},
		{"get port 0", func(ctx context.Context, c *UPnPClient) error {
			_, err := c.GetPortMapping(ctx, UDP, 0)
			return err
		}, "ExternalPort"},
		{"delete lower-case tcp", func(ctx context.Context, c *UPnPClient) error {
			return c.DeletePortMapping(ctx, "tcp", 80)
		}, "Protocol"},
		{"delete port 0", func(ctx context.Context, c *UPnPClient) error {
			return c.DeletePortMapping(ctx, TCP, 0)
		}, "ExternalPort"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newTestIGD(t, igd2Device, "")
			g.handle("AddPortMapping", reply())
			c := newTestClient(t, g, nil)
			err := tt.call(testCtx(t), c)
			var fe *igderr.FieldError
			if !errors.Is(err, ErrInvalidMapping) || !errors.As(err, &fe) || fe.Field != tt.field {
				t.Fatalf("error = %v, want a igderr.FieldError for %s", err, tt.field)
			}
			if g.DescFetches() != 0 || len(g.Calls()) != 0 {
				t.Errorf("invalid input reached the router: %d description fetches, calls %v", g.DescFetches(), g.Calls())
			}
		})
	}
}

// addCall returns a call of AddPortMapping with m.
func addCall(m Mapping) func(context.Context, *UPnPClient) error {
	return func(ctx context.Context, c *UPnPClient) error {
		_, err := c.AddPortMapping(ctx, m)
		return err
	}
}

func TestAddPortMappingLeaseFallback(t *testing.T) {
	// leaseFault answers code to every non-zero lease and accepts lease 0.
	leaseFault := func(code int) action {
		return func(args map[string]string) ([][2]string, int) {
			if args["NewLeaseDuration"] != "0" {
				return nil, code
			}
			return nil, 0
		}
	}
	tests := []struct {
		name      string
		handler   action
		lease     time.Duration
		wantLease time.Duration
		wantCalls []string // NewLeaseDuration of each call
		wantErr   error
		wantCode  int
	}{
		{"725 retried permanent", leaseFault(upnp.CodeOnlyPermanentLeases), time.Hour, 0, []string{"3600", "0"}, nil, 0},
		{"402 retried permanent", leaseFault(upnp.CodeInvalidArgs), time.Hour, 0, []string{"3600", "0"}, nil, 0},
		{"finite lease accepted", reply(), time.Hour, time.Hour, []string{"3600"}, nil, 0},
		{"402 to lease 0 not retried", fault(upnp.CodeInvalidArgs), 0, 0, []string{"0"}, nil, upnp.CodeInvalidArgs},
		{"725 twice gives up", fault(upnp.CodeOnlyPermanentLeases), time.Minute, 0, []string{"60", "0"}, ErrOnlyPermanentLeases, upnp.CodeOnlyPermanentLeases},
		{"718 conflict not retried", fault(upnp.CodeConflict), time.Hour, 0, []string{"3600"}, ErrConflict, upnp.CodeConflict},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newTestIGD(t, igd1Device, "")
			g.handle("AddPortMapping", tt.handler)
			c := newTestClient(t, g, nil)
			m := Mapping{Protocol: TCP, ExternalPort: 8080, InternalClient: netip.MustParseAddr("192.0.2.10"), InternalPort: 30080, Lease: tt.lease}
			got, err := c.AddPortMapping(testCtx(t), m)
			var leases []string
			for _, call := range g.CallsOf("AddPortMapping") {
				leases = append(leases, call.Args["NewLeaseDuration"])
			}
			if !slices.Equal(leases, tt.wantCalls) {
				t.Errorf("leases sent = %v, want %v", leases, tt.wantCalls)
			}
			if tt.wantCode != 0 {
				var ue *UPnPError
				if !errors.As(err, &ue) || ue.Code != tt.wantCode || ue.Action != "AddPortMapping" || ue.Description == "" {
					t.Fatalf("error = %v, want *UPnPError AddPortMapping %d with a description", err, tt.wantCode)
				}
				if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
					t.Fatalf("error = %v, want it to match %v", err, tt.wantErr)
				}
				if !strings.Contains(err.Error(), "TCP/8080") {
					t.Errorf("error %q does not name the mapping", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Lease != tt.wantLease {
				t.Errorf("returned Lease = %s, want %s", got.Lease, tt.wantLease)
			}
		})
	}
}

func TestDeletePortMappingIsIdempotent(t *testing.T) {
	tests := []struct {
		name    string
		handler action
		wantErr int
	}{
		{"deleted", reply(), 0},
		{"714 missing is success", fault(upnp.CodeNoSuchEntry), 0},
		{"606 is an error", fault(upnp.CodeNotAuthorized), upnp.CodeNotAuthorized},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newTestIGD(t, igd2Device, "")
			g.handle("DeletePortMapping", tt.handler)
			c := newTestClient(t, g, nil)
			err := c.DeletePortMapping(testCtx(t), UDP, 8053)
			if Code(err) != tt.wantErr || (tt.wantErr == 0 && err != nil) {
				t.Fatalf("DeletePortMapping() = %v, want code %d", err, tt.wantErr)
			}
			if tt.wantErr == upnp.CodeNotAuthorized && !errors.Is(err, ErrNotAuthorized) {
				t.Errorf("error %v does not match ErrNotAuthorized", err)
			}
			calls := g.CallsOf("DeletePortMapping")
			want := map[string]string{"NewRemoteHost": "", "NewExternalPort": "8053", "NewProtocol": "UDP"}
			if len(calls) != 1 {
				t.Fatalf("DeletePortMapping calls = %v, want one with %v", calls, want)
			}
			if diff := cmp.Diff(want, calls[0].Args); diff != "" {
				t.Errorf("DeletePortMapping args (-want +got):\n%s", diff)
			}
		})
	}
}

func TestGetPortMapping(t *testing.T) {
	g := newTestIGD(t, igd2Device, "")
	g.handle("GetSpecificPortMappingEntry", func(args map[string]string) ([][2]string, int) {
		if args["NewExternalPort"] != "8080" || args["NewProtocol"] != "TCP" {
			return nil, upnp.CodeNoSuchEntry
		}
		return reply("NewInternalPort", "30080", "NewInternalClient", "192.0.2.10", "NewEnabled", "1",
			"NewPortMappingDescription", "ccmkit web", "NewLeaseDuration", "604800")(args)
	})
	c := newTestClient(t, g, nil)
	got, err := c.GetPortMapping(testCtx(t), TCP, 8080)
	if err != nil {
		t.Fatal(err)
	}
	want := Mapping{Protocol: TCP, ExternalPort: 8080, InternalClient: netip.MustParseAddr("192.0.2.10"), InternalPort: 30080,
		Description: "ccmkit web", Lease: MaxLease, Enabled: true}
	if got != want {
		t.Errorf("GetPortMapping() = %v, want %v", got, want)
	}
	_, err = c.GetPortMapping(testCtx(t), UDP, 8080)
	var ue *UPnPError
	if !errors.Is(err, ErrNoSuchEntry) || !errors.As(err, &ue) || ue.Action != "GetSpecificPortMappingEntry" {
		t.Errorf("GetPortMapping(missing) = %v, want ErrNoSuchEntry from GetSpecificPortMappingEntry", err)
	}
}

func TestExternalIPAndLocalAddr(t *testing.T) {
	g := newTestIGD(t, igd2Device, "")
	local := netip.MustParseAddr("192.0.2.10")
	c := newTestClient(t, g, func(cfg *Config) { cfg.Host = fakeHost{gw: g.addr(), local: local} })
	ip, err := c.ExternalIP(testCtx(t))
	if err != nil || ip != netip.MustParseAddr("198.51.101.7") {
		t.Fatalf("ExternalIP() = %s, %v", ip, err)
	}
	la, err := c.LocalAddr(testCtx(t))
	if err != nil || la != local {
		t.Fatalf("LocalAddr() = %s, %v; want %s", la, err, local)
	}
	g.handle("GetExternalIPAddress", reply("NewExternalIPAddress", "not-an-ip"))
	if _, err := c.ExternalIP(testCtx(t)); err == nil || !strings.Contains(err.Error(), "not-an-ip") {
		t.Errorf("ExternalIP(garbage) = %v, want an error quoting the answer", err)
	}
}

// entries returns n PortMappingEntry elements for proto from port first.
func entries(proto string, first, n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `<p:PortMappingEntry><p:NewRemoteHost></p:NewRemoteHost><p:NewExternalPort>%d</p:NewExternalPort><p:NewProtocol>%s</p:NewProtocol><p:NewInternalPort>30080</p:NewInternalPort><p:NewInternalClient>192.0.2.10</p:NewInternalClient><p:NewEnabled>1</p:NewEnabled><p:NewDescription>d%d</p:NewDescription><p:NewLeaseTime>0</p:NewLeaseTime></p:PortMappingEntry>`, first+i, proto, first+i)
	}
	return `<p:PortMappingList xmlns:p="urn:schemas-upnp-org:gw:WANIPConnection">` + b.String() + `</p:PortMappingList>`
}

// table returns mappings of proto at ports, in that order (the order in
// which they were added).
func table(proto Protocol, ports ...int) []Mapping {
	out := make([]Mapping, 0, len(ports))
	for _, p := range ports {
		out = append(out, Mapping{Protocol: proto, ExternalPort: uint16(p), InternalClient: netip.MustParseAddr("192.0.2.10"),
			InternalPort: uint16(30000 + p%1000), Description: fmt.Sprintf("d%d", p), Lease: time.Hour, Enabled: true})
	}
	return out
}

// portSeq returns n ports from first, each step apart (negative: down).
func portSeq(first, n, step int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = first + i*step
	}
	return out
}

// scattered returns n distinct ports in 1-65535 in no order: i*mul mod 65535
// plus one, distinct while mul shares no factor with 65535 (3, 5, 17, 257).
func scattered(n, mul int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = (i*mul)%65535 + 1
	}
	return out
}

func sortMappings(ms []Mapping) []Mapping {
	ms = slices.Clone(ms)
	slices.SortFunc(ms, func(a, b Mapping) int {
		if c := strings.Compare(string(a.Protocol), string(b.Protocol)); c != 0 {
			return c
		}
		return int(a.ExternalPort) - int(b.ExternalPort)
	})
	return ms
}

func TestListPortMappingsByRange(t *testing.T) {
	tests := []struct {
		name  string
		table []Mapping // oldest first
		order listOrder
		// wantCalls, when set, are the exact calls; otherwise there are at
		// most maxCalls.
		wantCalls []string
		maxCalls  int
	}{
		{"60 mappings: one call per protocol", append(table(TCP, portSeq(20000, 30, 1)...), table(UDP, portSeq(20000, 30, 1)...)...),
			newestFirst, []string{"TCP:0-65535/1000", "UDP:0-65535/1000"}, 0},
		{"999 TCP: one call per protocol", table(TCP, portSeq(10000, 999, 1)...),
			newestFirst, []string{"TCP:0-65535/1000", "UDP:0-65535/1000"}, 0},
		// Splitting narrows down to a block of 1500 ports in 15 calls.
		{"1500 TCP in port order", table(TCP, portSeq(10000, 1500, 1)...), portOrder, nil, 16},
		// The newest 1000 are ports 10500-11499: paging on from the highest
		// port returned would never see 10000-10499.
		{"1500 TCP newest first, newest at high ports", table(TCP, portSeq(10000, 1500, 1)...), newestFirst, nil, 16},
		{"1500 TCP newest first, newest at low ports", table(TCP, portSeq(11499, 1500, -1)...), newestFirst, nil, 16},
		{"1001 TCP ending at port 65535, newest first", table(TCP, portSeq(64535, 1001, 1)...), newestFirst, nil, 16},
		// Spread over all ports, the halves soon fit: 7 TCP calls, 3 UDP.
		{"2500 TCP and 1200 UDP scattered, newest first", append(table(TCP, scattered(2500, 7919)...), table(UDP, scattered(1200, 101)...)...),
			newestFirst, nil, 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newTestIGD(t, igd2Device, "")
			g.handle("GetListOfPortMappings", listTable(t, tt.table, tt.order))
			c := newTestClient(t, g, nil)
			ms, err := ReadTable(testCtx(t), c)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := sortMappings(ms), sortMappings(tt.table); !slices.Equal(got, want) {
				t.Errorf("ListPortMappings() returned %d mappings, want the %d of the table", len(ms), len(tt.table))
				for _, m := range want {
					if !slices.Contains(got, m) {
						t.Errorf("missing %v", m)
						break
					}
				}
			}
			var calls []string
			for _, call := range g.CallsOf("GetListOfPortMappings") {
				calls = append(calls, call.Args["NewProtocol"]+":"+call.Args["NewStartPort"]+"-"+call.Args["NewEndPort"]+"/"+call.Args["NewNumberOfPorts"])
			}
			if tt.wantCalls != nil && !slices.Equal(calls, tt.wantCalls) {
				t.Errorf("GetListOfPortMappings calls = %v, want %v", calls, tt.wantCalls)
			}
			if tt.wantCalls == nil && len(calls) > tt.maxCalls {
				t.Errorf("%d GetListOfPortMappings calls, want at most %d: %v", len(calls), tt.maxCalls, calls)
			}
			if n := len(g.CallsOf("GetGenericPortMappingEntry")); n != 0 {
				t.Errorf("walked the table (%d calls) although the list call worked", n)
			}
		})
	}
}

func TestListPortMappingsPaging(t *testing.T) {
	tests := []struct {
		name string
		// page returns the first port and the count of the TCP entries, in
		// port order, the router answers for a call from start to end;
		// count 0 is a 730.
		page       func(start, end int) (first, count int)
		maxEntries int
		wantCalls  []string // TCP ranges asked, in order; nil: not checked
		maxCalls   int      // TCP calls at most
		wantLen    int
		wantErr    string
	}{
		{"router ignoring the range: parts with foreign entries are not split", func(int, int) (int, int) {
			return 10000, 1000
		}, 0, []string{"0-65535", "0-32767", "0-16383", "0-8191", "8192-16383", "8192-12287", "8192-10239", "10240-12287", "12288-16383", "16384-32767", "32768-65535"}, 11, 1000, ""},
		{"router repeating one entry: a full answer with duplicates is not split", func(int, int) (int, int) {
			return 8080, 1
		}, 0, []string{"0-65535"}, 1, 1, ""},
		{"router inventing entries is bounded", func(start, _ int) (int, int) {
			return start, 1000 // 1000 new ports from every start asked
		}, 2500, nil, 20, 0, "MaxListEntries=2500"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newTestIGD(t, igd2Device, "")
			var mu sync.Mutex
			var calls []string
			g.handle("GetListOfPortMappings", func(args map[string]string) ([][2]string, int) {
				if args["NewProtocol"] == "UDP" {
					return nil, upnp.CodePortMappingNotFound
				}
				mu.Lock()
				calls = append(calls, args["NewStartPort"]+"-"+args["NewEndPort"])
				n := len(calls)
				mu.Unlock()
				if n > 100 {
					t.Errorf("GetListOfPortMappings called %d times: the listing is not bounded", n)
					return nil, upnp.CodePortMappingNotFound
				}
				start, _ := strconv.Atoi(args["NewStartPort"])
				end, _ := strconv.Atoi(args["NewEndPort"])
				first, count := tt.page(start, end)
				if count == 0 {
					return nil, upnp.CodePortMappingNotFound
				}
				listing := entries("TCP", first, count)
				if count == 1 {
					// The same entry 1000 times.
					listing = strings.Replace(listing, "</p:PortMappingList>", strings.Repeat(entryXML(listing), 999)+"</p:PortMappingList>", 1)
				}
				return [][2]string{{"NewPortListing", listing}}, 0
			})
			c := newTestClient(t, g, func(cfg *Config) { cfg.MaxListEntries = tt.maxEntries })
			ms, err := ReadTable(testCtx(t), c)
			mu.Lock()
			defer mu.Unlock()
			if tt.wantCalls != nil && !slices.Equal(calls, tt.wantCalls) {
				t.Errorf("TCP calls for ports %v, want %v", calls, tt.wantCalls)
			}
			if len(calls) > tt.maxCalls {
				t.Errorf("%d TCP calls, want at most %d: %v", len(calls), tt.maxCalls, calls)
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ListPortMappings() = %v, want an error naming %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(ms) != tt.wantLen {
				t.Errorf("ListPortMappings() returned %d mappings, want %d", len(ms), tt.wantLen)
			}
		})
	}
}

// entryXML returns the first PortMappingEntry element of listing.
func entryXML(listing string) string {
	const open, end = "<p:PortMappingEntry>", "</p:PortMappingEntry>"
	i := strings.Index(listing, open)
	j := strings.Index(listing, end)
	return listing[i : j+len(end)]
}

func TestListPortMappingsMiniupnpdFixture(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "miniupnpd-2.3.1-GetListOfPortMappings-TCP.xml"))
	if err != nil {
		t.Fatal(err)
	}
	g := newTestIGD(t, igd2Device, "")
	// Serve the captured answer verbatim for TCP through a raw handler.
	listing := extractPortListing(t, string(raw))
	g.handle("GetListOfPortMappings", func(args map[string]string) ([][2]string, int) {
		if args["NewProtocol"] == "TCP" {
			return [][2]string{{"NewPortListing", listing}}, 0
		}
		return nil, upnp.CodePortMappingNotFound
	})
	c := newTestClient(t, g, nil)
	ms, err := ReadTable(testCtx(t), c)
	if err != nil {
		t.Fatal(err)
	}
	client := netip.MustParseAddr("192.0.2.10")
	want := []Mapping{
		{Protocol: TCP, ExternalPort: 8053, InternalClient: client, InternalPort: 30053, Description: "ccmkit-dns", Lease: 604800 * time.Second, Enabled: true},
		{Protocol: TCP, ExternalPort: 8080, InternalClient: client, InternalPort: 30080, Lease: 3599 * time.Second, Enabled: true},
	}
	if len(ms) != 2 {
		t.Fatalf("ListPortMappings() = %v, want %v", ms, want)
	}
	for i := range want {
		// Leases count down on the real router; compare the rest exactly.
		got := ms[i]
		if got.Lease <= 0 || got.Lease > MaxLease {
			t.Errorf("mapping %d lease %s out of range", i, got.Lease)
		}
		got.Lease, want[i].Lease = 0, 0
		if got != want[i] {
			t.Errorf("mapping %d = %v, want %v", i, got, want[i])
		}
	}
}

// extractPortListing returns the NewPortListing text of a captured SOAP
// response (the CDATA content).
func extractPortListing(t *testing.T, raw string) string {
	t.Helper()
	const open, end = "<![CDATA[", "]]>"
	i, j := strings.Index(raw, open), strings.Index(raw, end)
	if i < 0 || j < i {
		t.Fatal("fixture has no CDATA listing")
	}
	return raw[i+len(open) : j]
}

// walkTable answers GetGenericPortMappingEntry from table and code past its end.
func walkTable(table []Mapping, endCode int) action {
	return func(args map[string]string) ([][2]string, int) {
		i, _ := strconv.Atoi(args["NewPortMappingIndex"])
		if i >= len(table) {
			return nil, endCode
		}
		m := table[i]
		return reply("NewRemoteHost", "", "NewExternalPort", strconv.Itoa(int(m.ExternalPort)), "NewProtocol", string(m.Protocol),
			"NewInternalPort", strconv.Itoa(int(m.InternalPort)), "NewInternalClient", m.InternalClient.String(), "NewEnabled", "1",
			"NewPortMappingDescription", m.Description, "NewLeaseDuration", strconv.Itoa(int(m.Lease/time.Second)))(args)
	}
}

func TestListPortMappingsWalk(t *testing.T) {
	client := netip.MustParseAddr("192.0.2.10")
	table := []Mapping{
		{Protocol: UDP, ExternalPort: 8053, InternalClient: client, InternalPort: 30053, Description: "dns", Lease: time.Hour, Enabled: true},
		{Protocol: TCP, ExternalPort: 8080, InternalClient: client, InternalPort: 30080, Description: "web", Enabled: true},
		{Protocol: TCP, ExternalPort: 8443, InternalClient: client, InternalPort: 30443, Description: "tls", Enabled: true},
	}
	tests := []struct {
		name     string
		dev      device
		listCode int // fault of GetListOfPortMappings; 0 = not called
		endCode  int
		wantList int // GetListOfPortMappings calls over two listings
	}{
		{"IGD:1 713 at end", igd1Device, 0, upnp.CodeInvalidArrayIndex, 0},
		{"PPP 714 at end", pppDevice, 0, upnp.CodeNoSuchEntry, 0},
		{"402 at end", igd1Device, 0, upnp.CodeInvalidArgs, 0},
		{"IGD:2 without the list action (401) walks, and remembers", igd2Device, upnp.CodeInvalidAction, upnp.CodeInvalidArrayIndex, 1},
		{"IGD:2 list refused (501) walks, and remembers", igd2Device, upnp.CodeActionFailed, upnp.CodeInvalidArrayIndex, 1},
		{"IGD:2 list refused (402) walks, and remembers", igd2Device, upnp.CodeInvalidArgs, upnp.CodeInvalidArrayIndex, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newTestIGD(t, tt.dev, "")
			g.handle("GetGenericPortMappingEntry", walkTable(table, tt.endCode))
			if tt.listCode != 0 {
				g.handle("GetListOfPortMappings", fault(tt.listCode))
			}
			c := newTestClient(t, g, nil)
			for range 2 {
				ms, err := ReadTable(testCtx(t), c)
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(table, ms, cmpopts.EquateComparable(netip.Addr{})); diff != "" {
					t.Fatalf("ListPortMappings() (-want +got):\n%s", diff)
				}
			}
			if n := len(g.CallsOf("GetListOfPortMappings")); n != tt.wantList {
				t.Errorf("GetListOfPortMappings calls = %d, want %d", n, tt.wantList)
			}
			// Per read: the size search (entries 0, 1, 3, 2), the walk (3
			// entries and the end) and entry 0 again.
			if n, want := len(g.CallsOf("GetGenericPortMappingEntry")), 2*(4+len(table)+1+1); n != want {
				t.Errorf("GetGenericPortMappingEntry calls = %d, want %d", n, want)
			}
		})
	}
}

func TestListPortMappingsWalkIsBounded(t *testing.T) {
	g := newTestIGD(t, igd1Device, "")
	// A broken router that answers the same entry at every index.
	g.handle("GetGenericPortMappingEntry", reply("NewRemoteHost", "", "NewExternalPort", "8080", "NewProtocol", "TCP",
		"NewInternalPort", "30080", "NewInternalClient", "192.0.2.10", "NewEnabled", "1", "NewPortMappingDescription", "", "NewLeaseDuration", "0"))
	c := newTestClient(t, g, func(cfg *Config) { cfg.MaxListEntries = 10 })
	_, err := ReadTable(testCtx(t), c)
	if err == nil || !strings.Contains(err.Error(), "MaxListEntries=10") {
		t.Fatalf("ListPortMappings() = %v, want an error naming the bound", err)
	}
	if n := len(g.CallsOf("GetGenericPortMappingEntry")); n > 10 {
		t.Errorf("GetGenericPortMappingEntry calls = %d, want at most 10", n)
	}
}

func TestListPortMappingsOtherFaultIsError(t *testing.T) {
	g := newTestIGD(t, igd2Device, "")
	g.handle("GetListOfPortMappings", fault(upnp.CodeNotAuthorized+1))
	c := newTestClient(t, g, nil)
	if _, err := ReadTable(testCtx(t), c); Code(err) != upnp.CodeNotAuthorized+1 {
		t.Fatalf("ListPortMappings() = %v, want the router's 607", err)
	}
}

func TestParsePortListingRejectsGarbage(t *testing.T) {
	for _, s := range []string{
		"<not xml",
		`<PortMappingList><PortMappingEntry><NewExternalPort>x</NewExternalPort><NewInternalPort>1</NewInternalPort><NewLeaseTime>0</NewLeaseTime></PortMappingEntry></PortMappingList>`,
	} {
		if _, err := parsePortListing(s); err == nil {
			t.Errorf("parsePortListing(%q) succeeded", s)
		}
	}
}

func TestCallTimeoutWrapsDeadlineAndRediscovers(t *testing.T) {
	g := newTestIGD(t, igd2Device, "")
	g.handle("GetSpecificPortMappingEntry", fault(upnp.CodeNoSuchEntry))
	c := newTestClient(t, g, func(cfg *Config) { cfg.CallTimeout = 200 * time.Millisecond })
	ctx := testCtx(t)
	if _, err := c.Discover(ctx); err != nil {
		t.Fatal(err)
	}

	// A UPnP fault means the router answered: it stays cached.
	if _, err := c.GetPortMapping(ctx, TCP, 1234); !errors.Is(err, ErrNoSuchEntry) {
		t.Fatalf("GetPortMapping() = %v, want ErrNoSuchEntry", err)
	}
	if _, ok := c.current(); !ok || g.DescFetches() != 1 {
		t.Fatalf("after a UPnP fault: cached=%v, description fetches=%d; want cached, 1", ok, g.DescFetches())
	}

	// A router that stops answering: the call's own bound fires, the error
	// says so in a way errors.Is understands, and the router is forgotten.
	block := make(chan struct{})
	g.mu.Lock()
	g.block = block
	g.mu.Unlock()
	_, err := c.ExternalIP(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "GetExternalIPAddress") {
		t.Fatalf("ExternalIP() = %v, want context.DeadlineExceeded naming the action", err)
	}
	if _, ok := c.current(); ok {
		t.Fatal("router still cached after it stopped answering")
	}
	g.mu.Lock()
	g.block = nil
	g.mu.Unlock()
	close(block)

	// The next call discovers again.
	if _, err := c.ExternalIP(ctx); err != nil {
		t.Fatal(err)
	}
	if n := g.DescFetches(); n != 2 {
		t.Errorf("description fetches = %d, want 2 (one rediscovery)", n)
	}
}

func TestCallerCancellationIsWrapped(t *testing.T) {
	g := newTestIGD(t, igd2Device, "")
	c := newTestClient(t, g, nil)
	if _, err := c.Discover(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	block := make(chan struct{})
	t.Cleanup(func() { close(block) })
	g.mu.Lock()
	g.block = block
	g.mu.Unlock()
	ctx, cancel := context.WithCancel(testCtx(t))
	go func() {
		for len(g.CallsOf("DeletePortMapping")) == 0 {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	err := c.DeletePortMapping(ctx, TCP, 8080)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("DeletePortMapping() = %v, want context.Canceled", err)
	}
	if _, ok := c.current(); !ok {
		t.Error("the caller's own cancellation made the client forget the router")
	}
}

func TestCallsToTheRouterAreSerialised(t *testing.T) {
	g := newTestIGD(t, igd2Device, "")
	g.handle("GetSpecificPortMappingEntry", func(args map[string]string) ([][2]string, int) {
		time.Sleep(5 * time.Millisecond) // give overlapping calls a chance to show
		return nil, upnp.CodeNoSuchEntry
	})
	c := newTestClient(t, g, nil)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			_, err := c.GetPortMapping(testCtx(t), TCP, uint16(8000+i))
			if !errors.Is(err, ErrNoSuchEntry) {
				t.Errorf("GetPortMapping() = %v", err)
			}
		})
	}
	wg.Wait()
	if n := g.MaxInFlight(); n != 1 {
		t.Errorf("at most %d SOAP calls were in flight at once, want 1", n)
	}
	if n := g.DescFetches(); n != 1 {
		t.Errorf("concurrent first calls fetched the description %d times, want 1", n)
	}
}

func TestWaitingForTheRouterHonoursContext(t *testing.T) {
	g := newTestIGD(t, igd2Device, "")
	c := newTestClient(t, g, nil)
	if _, err := c.Discover(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	block := make(chan struct{})
	g.mu.Lock()
	g.block = block
	g.mu.Unlock()
	done := make(chan error, 1)
	go func() {
		_, err := c.ExternalIP(testCtx(t))
		done <- err
	}()
	for len(g.CallsOf("GetExternalIPAddress")) < 2 { // one from discovery, one in flight
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(testCtx(t), 50*time.Millisecond)
	defer cancel()
	_, err := c.GetPortMapping(ctx, TCP, 8080)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "waiting for the router") {
		t.Errorf("GetPortMapping() while the router is busy = %v, want a deadline while waiting", err)
	}
	if n := len(g.CallsOf("GetSpecificPortMappingEntry")); n != 0 {
		t.Errorf("a second call reached the busy router (%d)", n)
	}
	close(block)
	if err := <-done; err != nil {
		t.Errorf("blocked ExternalIP() = %v", err)
	}
}

func TestDiscoverByURLUnreachable(t *testing.T) {
	g := newTestIGD(t, igd2Device, "")
	url := g.URL
	g.srv.Close()
	c, err := NewClient(Config{RootDescURL: url, Host: fakeHost{}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.ExternalIP(testCtx(t))
	var nge *noGatewayError
	if !errors.Is(err, ErrNoGateway) || !errors.As(err, &nge) || len(nge.Found) != 1 || !strings.Contains(nge.Found[0].Rejected, "fetch description") {
		t.Fatalf("ExternalIP() with the router down = %v, want ErrNoGateway saying the fetch failed", err)
	}
}

func TestDiscoverByURLBadDescriptions(t *testing.T) {
	igd2, err := os.ReadFile(filepath.Join("testdata", igd2Device.file))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		status int
		body   string
		reject string
	}{
		{"not found", http.StatusNotFound, "", "HTTP 404"},
		{"not XML", http.StatusOK, "<html><body>login</body>", "parse description"},
		{"no connection service", http.StatusOK, strings.ReplaceAll(string(igd2), "WANIPConnection:2", "WANFooConnection:2"), "has no WANIPConnection:2, WANIPConnection:1 or WANPPPConnection:1 service"},
		{"bad URLBase", http.StatusOK, strings.Replace(string(igd2), "<specVersion>", "<URLBase>http://[::1</URLBase><specVersion>", 1), "URLBase"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tt.status)
				io.WriteString(w, tt.body)
			}))
			t.Cleanup(srv.Close)
			c, err := NewClient(Config{RootDescURL: srv.URL + "/rootDesc.xml", Host: fakeHost{}})
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.Discover(testCtx(t))
			var nge *noGatewayError
			if !errors.As(err, &nge) || len(nge.Found) != 1 || !strings.Contains(nge.Found[0].Rejected, tt.reject) {
				t.Fatalf("Discover() = %v, want the candidate rejected with %q", err, tt.reject)
			}
		})
	}
}

func TestDiscoverByURLHonoursURLBase(t *testing.T) {
	g := newTestIGD(t, igd1Device, "")
	desc, err := os.ReadFile(filepath.Join("testdata", igd1Device.file))
	if err != nil {
		t.Fatal(err)
	}
	// A description served from elsewhere whose URLBase points at g.
	withBase := strings.Replace(string(desc), "<specVersion>", "<URLBase>"+g.srv.URL+"/</URLBase><specVersion>", 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, withBase) }))
	t.Cleanup(srv.Close)
	c, err := NewClient(Config{RootDescURL: srv.URL + "/desc.xml", Host: fakeHost{}})
	if err != nil {
		t.Fatal(err)
	}
	gw, err := c.Discover(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if want := g.srv.URL + "/ctl/IPConn"; gw.ControlURL != want {
		t.Errorf("ControlURL = %s, want %s (from URLBase)", gw.ControlURL, want)
	}
}

func TestSOAPFaultWithoutUPnPDetail(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
		io.WriteString(w, `<?xml version="1.0"?><s:Envelope xmlns:s="http://schemas.xmlsoap.org/soap/envelope/"><s:Body><s:Fault><faultcode>s:Server</faultcode><faultstring>Internal Error</faultstring></s:Fault></s:Body></s:Envelope>`)
	}))
	t.Cleanup(srv.Close)
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	conn := &internetgateway2.WANIPConnection1{ServiceClient: goupnp.ServiceClient{SOAPClient: soap.NewSOAPClient(*u)}}
	_, werr := probeCall(testCtx(t), time.Second, "GetExternalIPAddress", conn.GetExternalIPAddressCtx)
	var ue *UPnPError
	if !errors.As(werr, &ue) || ue.Code != 0 || ue.Description != "Internal Error" || ue.Action != "GetExternalIPAddress" {
		t.Fatalf("error = %#v, want a UPnPError with the fault string", werr)
	}
}

// countingTransport counts the requests it carries.
type countingTransport struct {
	mu   sync.Mutex
	n    int
	next http.RoundTripper
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
	return c.next.RoundTrip(r)
}

func (c *countingTransport) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

func TestEveryRequestUsesTheConfiguredClient(t *testing.T) {
	// goupnp's global client must never be used: make it fail the test.
	saved := goupnp.HTTPClientDefault
	goupnp.HTTPClientDefault = &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		t.Errorf("goupnp's global HTTP client was used for %s", r.URL)
		return nil, errors.New("global client used")
	})}
	t.Cleanup(func() { goupnp.HTTPClientDefault = saved })

	t.Run("HTTPClient", func(t *testing.T) {
		g := newTestIGD(t, igd2Device, "")
		g.handle("DeletePortMapping", reply())
		ct := &countingTransport{next: http.DefaultTransport}
		c := newTestClient(t, g, func(cfg *Config) { cfg.HTTPClient = &http.Client{Transport: ct} })
		if err := c.DeletePortMapping(testCtx(t), TCP, 8080); err != nil {
			t.Fatal(err)
		}
		// description, GetStatusInfo, GetExternalIPAddress, DeletePortMapping
		if n, want := ct.count(), 1+len(g.Calls()); n != want || n != 4 {
			t.Errorf("configured client carried %d requests, want %d (all of them)", n, want)
		}
	})
	t.Run("DialContext", func(t *testing.T) {
		g := newTestIGD(t, igd2Device, "")
		var mu sync.Mutex
		dials := 0
		dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
			mu.Lock()
			dials++
			mu.Unlock()
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		}
		c := newTestClient(t, g, func(cfg *Config) { cfg.DialContext = dial })
		if _, err := c.ExternalIP(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		// No keep-alive: one connection per request (description + 3 calls).
		if dials != 4 {
			t.Errorf("DialContext made %d connections, want 4", dials)
		}
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestExternalIPIsValidatedOnEveryCall(t *testing.T) {
	tests := []struct {
		answer string
		want   string // the address returned; "" = an error
	}{
		{"198.51.101.7", "198.51.101.7"},
		{"::ffff:198.51.101.7", "198.51.101.7"},
		{" 198.51.101.7 ", "198.51.101.7"},
		{"10.0.0.2", "10.0.0.2"},     // private: returned, flagged by IsPublic
		{"100.64.3.4", "100.64.3.4"}, // CGNAT: likewise
		{"0.0.0.0", ""},
		{"", ""},
		{"not-an-ip", ""},
		{"2001:db8::1", ""},
		{"::", ""},
		{"224.0.0.1", ""},
		{"127.0.0.1", ""},
		{"255.255.255.255", ""},
		{"198.51.101.7%eth0", ""},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%q", tt.answer), func(t *testing.T) {
			g := newTestIGD(t, igd2Device, "")
			c := newTestClient(t, g, nil)
			ctx := testCtx(t)
			if _, err := c.Discover(ctx); err != nil {
				t.Fatal(err)
			}
			// The router changes its answer after discovery.
			g.handle("GetExternalIPAddress", reply("NewExternalIPAddress", tt.answer))
			ip, err := c.ExternalIP(ctx)
			if tt.want != "" {
				if err != nil || ip != netip.MustParseAddr(tt.want) {
					t.Fatalf("ExternalIP() = %s, %v; want %s", ip, err, tt.want)
				}
				return
			}
			if !errors.Is(err, ErrInvalidExternalIP) {
				t.Fatalf("ExternalIP() = %s, %v; want ErrInvalidExternalIP", ip, err)
			}
			var eie *igderr.ExternalIPError
			if !errors.As(err, &eie) || eie.Value != tt.answer {
				t.Errorf("ExternalIP() error = %#v, want an *igderr.ExternalIPError with Value %q", err, tt.answer)
			}
			if ip.IsValid() {
				t.Errorf("ExternalIP() returned %s with the error", ip)
			}
			for _, want := range []string{g.URL, fmt.Sprintf("%q", tt.answer)} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not name %s", err, want)
				}
			}

			// Discovery rejects such a router too.
			_, err = c.Discover(ctx)
			var nge *noGatewayError
			if !errors.As(err, &nge) || len(nge.Found) != 1 || !strings.Contains(nge.Found[0].Rejected, fmt.Sprintf("%q", tt.answer)) {
				t.Errorf("Discover() = %v, want the router rejected for answering %q", err, tt.answer)
			}
		})
	}
}
