package igd_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"

	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/igdtest"
	"github.com/ccmkit/ccmkit/internal/upnp"
)

// These tests run the client against a real miniupnpd (igdtest). They need
// root, miniupnpd, upnpc, nft and ip; without them they skip, except when
// CI=true, where they fail.

// labBound is the lab clients' CallTimeout and DiscoveryTimeout. A lab
// call takes milliseconds, but these tests run on busy machines (two cores
// compiling beside them), where one can take seconds: the client's defaults
// are bounds for noticing a dead router, and a test that is not about them
// must not fail because the machine is slow. labBound only stops a hang.
const labBound = 2 * time.Minute

// labConfig returns a Config that acts from node i of lab, discovering by
// SSDP (byURL false) or from the root description URL, with labBound for
// its bounds.
func labConfig(lab *igdtest.Lab, i int, byURL bool) igd.Config {
	cfg := lab.ClientConfig(i)
	if !byURL {
		cfg.RootDescURL = ""
	}
	cfg.CallTimeout, cfg.DiscoveryTimeout = labBound, labBound
	return cfg
}

func labClient(t testing.TB, lab *igdtest.Lab, i int, byURL bool) *igd.UPnPClient {
	t.Helper()
	c, err := igd.NewClient(labConfig(lab, i, byURL))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// countingClient is labClient whose SOAP calls are counted by action: a
// daemonised router (igdtest.Options.Daemonize) keeps no log to count them
// in.
func countingClient(t *testing.T, lab *igdtest.Lab, i int) (*igd.UPnPClient, *soapCounter) {
	t.Helper()
	cfg := labConfig(lab, i, true)
	counter := &soapCounter{next: &http.Transport{DialContext: cfg.DialContext, DisableKeepAlives: true}}
	cfg.HTTPClient = &http.Client{Transport: counter}
	c, err := igd.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c, counter
}

// soapCounter is an http.RoundTripper that counts SOAP requests by action.
type soapCounter struct {
	next http.RoundTripper

	mu sync.Mutex
	n  map[string]int
}

func (s *soapCounter) RoundTrip(req *http.Request) (*http.Response, error) {
	// SOAPAction: "urn:schemas-upnp-org:service:WANIPConnection:2#AddPortMapping",
	// under a key goupnp spells in capitals, which Header.Get does not find.
	for key, values := range req.Header {
		if !strings.EqualFold(key, "SOAPAction") || len(values) == 0 {
			continue
		}
		if _, action, ok := strings.Cut(strings.Trim(values[0], `"`), "#"); ok {
			s.mu.Lock()
			if s.n == nil {
				s.n = map[string]int{}
			}
			s.n[action]++
			s.mu.Unlock()
		}
	}
	return s.next.RoundTrip(req)
}

// count returns how many requests for action were sent so far.
func (s *soapCounter) count(action string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n[action]
}

// testContext returns the test's context with a logger. It has no wall
// clock of its own: the client's bounds and the test binary's -timeout
// stop a hang, and a slow machine only makes the test slower.
func testContext(t *testing.T) context.Context {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	return ctx
}

func TestLabDiscovery(t *testing.T) {
	for _, tt := range []struct {
		name    string
		v1      bool
		byURL   bool
		service string
	}{
		{"IGD2 by SSDP", false, false, upnp.ServiceWANIPConnection2},
		{"IGD2 by URL", false, true, upnp.ServiceWANIPConnection2},
		{"IGD1 by SSDP", true, false, upnp.ServiceWANIPConnection1},
		{"IGD1 by URL", true, true, upnp.ServiceWANIPConnection1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			lab := igdtest.Start(t, igdtest.Options{ForceIGDv1: tt.v1})
			ctx := testContext(t)
			c := labClient(t, lab, 0, tt.byURL)
			gw, err := c.Discover(ctx)
			if err != nil {
				t.Fatalf("Discover: %v\nminiupnpd log:\n%s", err, lab.Log())
			}
			if gw.Location != lab.RootDescURL || gw.ServiceType != tt.service {
				t.Errorf("found %s at %s, want %s at %s", gw.ServiceType, gw.Location, tt.service, lab.RootDescURL)
			}
			if gw.ControlURL != "http://192.0.2.1:5000/ctl/IPConn" || gw.Addr != lab.RouterLAN {
				t.Errorf("ControlURL, Addr = %s, %s", gw.ControlURL, gw.Addr)
			}
			if gw.Status != "Connected" || gw.ExternalIP != lab.ExternalIP || !gw.PublicExternalIP || !gw.OnDefaultGateway {
				t.Errorf("gateway = %+v; want connected, external IP %s (public), on the default gateway", gw, lab.ExternalIP)
			}
			ip, err := c.ExternalIP(ctx)
			if err != nil || ip != lab.ExternalIP {
				t.Errorf("ExternalIP() = %s, %v; want %s", ip, err, lab.ExternalIP)
			}
			la, err := c.LocalAddr(ctx)
			if err != nil || la != lab.Nodes[0].Addr {
				t.Errorf("LocalAddr() = %s, %v; want %s", la, err, lab.Nodes[0].Addr)
			}
		})
	}
}

func TestLabMappings(t *testing.T) {
	for _, v1 := range []bool{false, true} {
		t.Run(fmt.Sprintf("ForceIGDv1=%v", v1), func(t *testing.T) {
			lab := igdtest.Start(t, igdtest.Options{ForceIGDv1: v1})
			ctx := testContext(t)
			c := labClient(t, lab, 0, false)
			gw, err := c.Discover(ctx)
			if err != nil {
				t.Fatal(err)
			}
			// IGD:1 has no GetListOfPortMappings: listing below walks the
			// table entry by entry.
			if wantService := map[bool]string{false: upnp.ServiceWANIPConnection2, true: upnp.ServiceWANIPConnection1}[v1]; gw.ServiceType != wantService {
				t.Fatalf("service = %s, want %s", gw.ServiceType, wantService)
			}
			node := lab.Nodes[0].Addr
			want := []igd.Mapping{
				{Protocol: igd.TCP, ExternalPort: 8080, InternalClient: node, InternalPort: 30080, Description: "ccmkit default/web"},
				{Protocol: igd.UDP, ExternalPort: 8053, InternalClient: node, InternalPort: 30053, Description: "ccmkit default/dns"},
				{Protocol: igd.TCP, ExternalPort: 8443, InternalClient: node, InternalPort: 30443, Description: "ccmkit default/tls", Lease: time.Hour},
			}
			added := time.Now()
			for _, m := range want {
				got, err := c.AddPortMapping(ctx, m)
				if err != nil {
					t.Fatalf("AddPortMapping(%v): %v\nminiupnpd log:\n%s", m, err, lab.Log())
				}
				if got.Lease != m.Lease || !got.Enabled {
					t.Errorf("AddPortMapping(%v) = %v", m, got)
				}
			}
			for _, m := range want {
				got, err := c.GetPortMapping(ctx, m.Protocol, m.ExternalPort)
				if err != nil {
					t.Fatalf("GetPortMapping(%s): %v", m.Key(), err)
				}
				assertSameMapping(t, got, m, added)
			}
			list, err := igd.ReadTable(ctx, c)
			if err != nil {
				t.Fatalf("ListPortMappings: %v", err)
			}
			if len(list) != len(want) {
				t.Fatalf("ListPortMappings() = %v, want %d mappings", list, len(want))
			}
			byKey := map[igd.Key]igd.Mapping{}
			for _, m := range list {
				byKey[m.Key()] = m
			}
			for _, m := range want {
				got, ok := byKey[m.Key()]
				if !ok {
					t.Errorf("ListPortMappings() lacks %s", m.Key())
					continue
				}
				assertSameMapping(t, got, m, added)
			}

			// A peer client sees our mappings with their descriptions.
			out, err := lab.Upnpc(ctx, 0, "-l")
			if err != nil {
				t.Fatalf("upnpc -l: %v\n%s", err, out)
			}
			for _, m := range want {
				line := fmt.Sprintf("%s %5d->%s:%-5d '%s'", m.Protocol, m.ExternalPort, m.InternalClient, m.InternalPort, m.Description)
				if !strings.Contains(out, line) {
					t.Errorf("upnpc -l does not show %q:\n%s", line, out)
				}
			}

			for _, m := range want {
				if err := c.DeletePortMapping(ctx, m.Protocol, m.ExternalPort); err != nil {
					t.Fatalf("DeletePortMapping(%s): %v", m.Key(), err)
				}
				if _, err := c.GetPortMapping(ctx, m.Protocol, m.ExternalPort); !errors.Is(err, igd.ErrNoSuchEntry) || igd.Code(err) != upnp.CodeNoSuchEntry {
					t.Errorf("GetPortMapping(%s) after delete = %v, want 714", m.Key(), err)
				}
				// Deleting what is gone succeeds.
				if err := c.DeletePortMapping(ctx, m.Protocol, m.ExternalPort); err != nil {
					t.Errorf("DeletePortMapping(%s) again = %v, want nil", m.Key(), err)
				}
			}
			if list, err := igd.ReadTable(ctx, c); err != nil || len(list) != 0 {
				t.Errorf("ListPortMappings() after deleting all = %v, %v", list, err)
			}
		})
	}
}

// TestLabListPagesThroughFullAnswers reads a real miniupnpd's table with
// pages of 8 entries instead of 1000, so that the range halving that lists
// past 1000 mappings runs against the real router's paging and order
// (newest first) with a table of 42. The router runs daemonised, as routers
// run: in the foreground its debug log makes every call cost in proportion
// to the table.
func TestLabListPagesThroughFullAnswers(t *testing.T) {
	lab := igdtest.Start(t, igdtest.Options{Daemonize: true})
	ctx := testContext(t)
	c, counter := countingClient(t, lab, 0)
	igd.SetListPage(c, 8)
	node := lab.Nodes[0].Addr
	want := map[igd.Key]bool{}
	add := func(proto igd.Protocol, port uint16) {
		t.Helper()
		m := igd.Mapping{Protocol: proto, ExternalPort: port, InternalClient: node, InternalPort: port, Description: fmt.Sprintf("page %s %d", proto, port)}
		if _, err := c.AddPortMapping(ctx, m); err != nil {
			t.Fatalf("AddPortMapping(%s): %v", m.Key(), err)
		}
		want[m.Key()] = true
	}
	// 20 adjacent TCP ports added in descending order, 10 spread over the
	// port range, and 12 UDP ports: several full answers per protocol.
	for p := uint16(20019); p >= 20000; p-- {
		add(igd.TCP, p)
	}
	for i := range 10 {
		add(igd.TCP, uint16(1100+i*6400))
	}
	for i := range 12 {
		add(igd.UDP, uint16(40000+i*3))
	}
	before := counter.count("GetListOfPortMappings")
	list, err := igd.ReadTable(ctx, c)
	if err != nil {
		t.Fatalf("ListPortMappings: %v", err)
	}
	calls := counter.count("GetListOfPortMappings") - before
	got := map[igd.Key]bool{}
	for _, m := range list {
		if got[m.Key()] {
			t.Errorf("%s listed twice", m.Key())
		}
		got[m.Key()] = true
		if m.Description != fmt.Sprintf("page %s %d", m.Protocol, m.ExternalPort) {
			t.Errorf("%s description = %q", m.Key(), m.Description)
		}
	}
	for k := range want {
		if !got[k] {
			t.Errorf("ListPortMappings lacks %s", k)
		}
	}
	if len(got) != len(want) {
		t.Errorf("ListPortMappings listed %d mappings, want %d", len(got), len(want))
	}
	// One call per protocol would mean the pages were never full: the
	// halving did not run.
	if calls <= 2 {
		t.Errorf("%d GetListOfPortMappings calls, want more than one per protocol", calls)
	}
	t.Logf("%d mappings in %d GetListOfPortMappings calls of at most 8 entries", len(list), calls)
}

// assertSameMapping compares what the router returned with what was added
// at added; the lease counts down on the router (and 0 reads back as
// MaxLease), by at most the time since added.
func assertSameMapping(t *testing.T, got, want igd.Mapping, added time.Time) {
	t.Helper()
	wantLease := want.Lease
	if wantLease == 0 {
		wantLease = igd.MaxLease
	}
	if !leaseAbout(got.Lease, wantLease, added) {
		t.Errorf("%s lease = %s, want %s less the %s since it was added", want.Key(), got.Lease, wantLease, time.Since(added).Round(time.Second))
	}
	got.Lease, want.Lease = 0, 0
	want.Enabled = true
	if got != want {
		t.Errorf("mapping = %v, want %v", got, want)
	}
}

// leaseAbout reports whether a lease read back is what was stored at
// stored, counted down by no more than the time since (the router counts in
// whole seconds). It is no timing assertion: a slow machine only widens it.
func leaseAbout(read, want time.Duration, stored time.Time) bool {
	return read <= want && read >= want-time.Since(stored)-time.Second
}

func TestLabErrorCodes(t *testing.T) {
	lab := igdtest.Start(t, igdtest.Options{Nodes: 2})
	ctx := testContext(t)
	c0 := labClient(t, lab, 0, false)
	c1 := labClient(t, lab, 1, true)
	m := igd.Mapping{Protocol: igd.TCP, ExternalPort: 9000, InternalClient: lab.Nodes[0].Addr, InternalPort: 30080, Description: "ccmkit node0"}
	if _, err := c0.AddPortMapping(ctx, m); err != nil {
		t.Fatal(err)
	}

	// Another internal client on the same external port: 718.
	other := m
	other.InternalClient = lab.Nodes[1].Addr
	_, err := c1.AddPortMapping(ctx, other)
	var ue *igd.UPnPError
	if !errors.Is(err, igd.ErrConflict) || !errors.As(err, &ue) || ue.Code != 718 || ue.Action != "AddPortMapping" {
		t.Fatalf("conflicting AddPortMapping = %v, want UPnP 718 from AddPortMapping", err)
	}

	// Re-adding by the same internal client with the same internal port
	// only renews the lease: the description stays.
	renew := m
	renew.Description = "ccmkit node0 renamed"
	if _, err := c0.AddPortMapping(ctx, renew); err != nil {
		t.Fatalf("re-add by the owner, same internal port: %v", err)
	}
	got, err := c0.GetPortMapping(ctx, igd.TCP, 9000)
	if err != nil || got.InternalPort != 30080 || got.Description != "ccmkit node0" {
		t.Errorf("after re-add with the same internal port GetPortMapping() = %v, %v; want the first description kept", got, err)
	}

	// With another internal port it replaces the mapping, description
	// included.
	m.InternalPort, m.Description = 30081, "ccmkit node0 v2"
	if _, err := c0.AddPortMapping(ctx, m); err != nil {
		t.Fatalf("re-add by the owner: %v", err)
	}
	got, err = c0.GetPortMapping(ctx, igd.TCP, 9000)
	if err != nil || got.InternalPort != 30081 || got.Description != "ccmkit node0 v2" {
		t.Errorf("after re-add GetPortMapping() = %v, %v", got, err)
	}

	// Deleting a mapping that does not exist: success.
	if err := c1.DeletePortMapping(ctx, igd.UDP, 9999); err != nil {
		t.Errorf("DeletePortMapping(missing) = %v, want nil", err)
	}
	if _, err := c1.GetPortMapping(ctx, igd.UDP, 9999); igd.Code(err) != upnp.CodeNoSuchEntry {
		t.Errorf("GetPortMapping(missing) = %v, want 714", err)
	}
	// A port outside the allow rules: 606.
	low := igd.Mapping{Protocol: igd.TCP, ExternalPort: 80, InternalClient: lab.Nodes[0].Addr, InternalPort: 30080}
	if _, err := c0.AddPortMapping(ctx, low); !errors.Is(err, igd.ErrNotAuthorized) {
		t.Errorf("AddPortMapping(port 80) = %v, want 606", err)
	}
}

func TestLabSecureMode(t *testing.T) {
	lab := igdtest.Start(t, igdtest.Options{SecureMode: true, Nodes: 2})
	ctx := testContext(t)
	c := labClient(t, lab, 0, false)
	self, err := c.LocalAddr(ctx)
	if err != nil || self != lab.Nodes[0].Addr {
		t.Fatalf("LocalAddr() = %s, %v; want %s", self, err, lab.Nodes[0].Addr)
	}
	// Mapping to another host on a free port: 718, indistinguishable from a
	// real conflict.
	_, err = c.AddPortMapping(ctx, igd.Mapping{Protocol: igd.TCP, ExternalPort: 9100, InternalClient: lab.Nodes[1].Addr, InternalPort: 30080})
	if igd.Code(err) != upnp.CodeConflict || !errors.Is(err, igd.ErrConflict) {
		t.Fatalf("AddPortMapping(to another host) in secure mode = %v, want 718", err)
	}
	// Mapping to itself works.
	m := igd.Mapping{Protocol: igd.UDP, ExternalPort: 9100, InternalClient: self, InternalPort: 30080, Description: "ccmkit self"}
	added := time.Now()
	if _, err := c.AddPortMapping(ctx, m); err != nil {
		t.Fatalf("AddPortMapping(to itself) in secure mode: %v", err)
	}
	got, err := c.GetPortMapping(ctx, igd.UDP, 9100)
	if err != nil {
		t.Fatal(err)
	}
	assertSameMapping(t, got, m, added)

	// Listing shows the whole table, other hosts' mappings included.
	c1 := labClient(t, lab, 1, true)
	m1 := igd.Mapping{Protocol: igd.TCP, ExternalPort: 9101, InternalClient: lab.Nodes[1].Addr, InternalPort: 30080, Description: "ccmkit node1"}
	if _, err := c1.AddPortMapping(ctx, m1); err != nil {
		t.Fatalf("node1 AddPortMapping(to itself): %v", err)
	}
	list, err := igd.ReadTable(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	keys := map[igd.Key]bool{}
	for _, l := range list {
		keys[l.Key()] = true
	}
	if len(list) != 2 || !keys[m.Key()] || !keys[m1.Key()] {
		t.Errorf("ListPortMappings() in secure mode = %v, want %s and %s", list, m.Key(), m1.Key())
	}
	// Deleting another host's mapping is refused in secure mode: 606.
	if err := c.DeletePortMapping(ctx, igd.TCP, 9101); !errors.Is(err, igd.ErrNotAuthorized) {
		t.Errorf("DeletePortMapping(another host's mapping) in secure mode = %v, want 606", err)
	}
}

func TestLabLeases(t *testing.T) {
	lab := igdtest.Start(t, igdtest.Options{})
	ctx := testContext(t)
	c := labClient(t, lab, 0, true)
	node := lab.Nodes[0].Addr
	for _, tt := range []struct {
		lease, stored time.Duration
	}{
		{0, igd.MaxLease}, // "permanent" is stored as seven days on IGD:2
		{90 * time.Second, 90 * time.Second},
		{2 * igd.MaxLease, igd.MaxLease},
	} {
		t.Run(tt.lease.String(), func(t *testing.T) {
			m := igd.Mapping{Protocol: igd.TCP, ExternalPort: 9200, InternalClient: node, InternalPort: 30080, Lease: tt.lease}
			added := time.Now()
			got, err := c.AddPortMapping(ctx, m)
			if err != nil {
				t.Fatal(err)
			}
			if got.Lease != tt.lease {
				t.Errorf("AddPortMapping() Lease = %s, want %s (no fallback on miniupnpd)", got.Lease, tt.lease)
			}
			read, err := c.GetPortMapping(ctx, igd.TCP, 9200)
			if err != nil {
				t.Fatal(err)
			}
			if !leaseAbout(read.Lease, tt.stored, added) {
				t.Errorf("stored lease = %s, want %s less the %s since it was added", read.Lease, tt.stored, time.Since(added).Round(time.Second))
			}
			if err := c.DeletePortMapping(ctx, igd.TCP, 9200); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestLabDataPath(t *testing.T) {
	lab := igdtest.Start(t, igdtest.Options{})
	ctx := testContext(t)
	node := lab.Nodes[0]
	ln, err := node.Listen("tcp", netip.AddrPortFrom(node.Addr, 30080).String())
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from %s", node.Addr)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	c := labClient(t, lab, 0, false)
	if _, err := c.AddPortMapping(ctx, igd.Mapping{Protocol: igd.TCP, ExternalPort: 8080, InternalClient: node.Addr, InternalPort: 30080, Description: "ccmkit data path"}); err != nil {
		t.Fatal(err)
	}
	body, err := lab.InternetGet(ctx, fmt.Sprintf("http://%s:8080/", lab.ExternalIP))
	if err != nil || body != "hello from "+node.Addr.String() {
		t.Fatalf("GET from the internet = %q, %v", body, err)
	}
	if err := c.DeletePortMapping(ctx, igd.TCP, 8080); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if body, err := lab.InternetGet(short, fmt.Sprintf("http://%s:8080/", lab.ExternalIP)); err == nil {
		t.Errorf("GET from the internet after delete = %q, want a failure", body)
	}
}

func TestLabWorksAfterRouterReboot(t *testing.T) {
	lab := igdtest.Start(t, igdtest.Options{})
	ctx := testContext(t)
	c := labClient(t, lab, 0, false)
	if _, err := c.Discover(ctx); err != nil {
		t.Fatal(err)
	}
	first, _ := igd.Current(c)
	m := igd.Mapping{Protocol: igd.TCP, ExternalPort: 9300, InternalClient: lab.Nodes[0].Addr, InternalPort: 30080}
	if _, err := c.AddPortMapping(ctx, m); err != nil {
		t.Fatal(err)
	}
	lab.Reboot(t)
	// The router's connections were reset; whatever the first call after the
	// reboot says, the client answers again without being rebuilt.
	var err error
	for range 3 {
		if _, err = c.ExternalIP(ctx); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("ExternalIP after reboot: %v", err)
	}
	if gw, ok := igd.Current(c); !ok || gw.Location != first.Location {
		t.Errorf("Current after reboot = %+v, %v", gw, ok)
	}
	// A reboot wipes the table: the client reports it rather than a cached view.
	if _, err := c.GetPortMapping(ctx, igd.TCP, 9300); !errors.Is(err, igd.ErrNoSuchEntry) {
		t.Errorf("GetPortMapping after reboot = %v, want ErrNoSuchEntry", err)
	}
}

// miniupnpd 2.3.1 (nftables) dies when one GetListOfPortMappings range holds
// more than upnp.SafeListWidth mappings of its protocol (DESIGN.md).
// The client must list 300 mappings without ever sending such a range, and
// the daemon must still be alive afterwards. The router runs daemonised, as
// routers run: in the foreground its debug log (a line per rule on every
// request) makes each of the walk's 300 calls cost in proportion to the
// table.
func TestLabListingDoesNotCrashMiniupnpd(t *testing.T) {
	lab := igdtest.Start(t, igdtest.Options{Daemonize: true})
	ctx := testContext(t)
	c, counter := countingClient(t, lab, 0)
	gw, err := c.Discover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(gw.Server, "MiniUPnPd/2.3.1") {
		t.Fatalf("Gateway.Server = %q, want miniupnpd 2.3.1's", gw.Server)
	}
	node := lab.Nodes[0].Addr
	want := map[igd.Key]bool{}
	start := time.Now()
	// Adjacent ports: any range holding one of them holds them all, the
	// worst case for the overflow.
	for _, proto := range []igd.Protocol{igd.TCP, igd.UDP} {
		for port := uint16(20000); port < 20150; port++ {
			m := igd.Mapping{Protocol: proto, ExternalPort: port, InternalClient: node, InternalPort: port, Description: fmt.Sprintf("crash %s %d", proto, port)}
			if _, err := c.AddPortMapping(ctx, m); err != nil {
				t.Fatalf("AddPortMapping(%s): %v", m.Key(), err)
			}
			want[m.Key()] = true
		}
	}
	t.Logf("added %d mappings in %s", len(want), time.Since(start).Round(time.Millisecond))

	alive := func(when string) {
		t.Helper()
		// glibc aborts the daemon on the overflow ("realloc(): invalid next
		// size", to a syslog the daemonised lab does not have).
		pid := lab.PID()
		if pid == 0 || syscall.Kill(pid, 0) != nil {
			t.Fatalf("miniupnpd (pid %d) died %s", pid, when)
		}
		if _, err := c.ExternalIP(ctx); err != nil {
			t.Fatalf("miniupnpd does not answer %s: %v", when, err)
		}
	}
	check := func(what string, got []igd.Mapping, want map[igd.Key]bool) {
		t.Helper()
		seen := map[igd.Key]bool{}
		for _, m := range got {
			if seen[m.Key()] {
				t.Errorf("%s listed %s twice", what, m.Key())
			}
			seen[m.Key()] = true
			if !want[m.Key()] {
				t.Errorf("%s listed %s, which was not added", what, m.Key())
			}
		}
		for k := range want {
			if !seen[k] {
				t.Errorf("%s lacks %s", what, k)
			}
		}
	}
	for _, read := range []string{"first ReadTable (learns the table)", "second ReadTable (ranges from what it learnt)"} {
		list, entries := counter.count("GetListOfPortMappings"), counter.count("GetGenericPortMappingEntry")
		start := time.Now()
		got, err := igd.ReadTable(ctx, c)
		took := time.Since(start)
		alive("after the " + read)
		if err != nil {
			t.Fatalf("%s: %v", read, err)
		}
		check(read, got, want)
		t.Logf("%s: %d mappings in %s, %d GetListOfPortMappings and %d GetGenericPortMappingEntry calls", read, len(got), took.Round(time.Millisecond),
			counter.count("GetListOfPortMappings")-list, counter.count("GetGenericPortMappingEntry")-entries)
	}
	rng := igd.PortRange{First: 20010, Last: 20139}
	got, err := c.ListPortMappings(ctx, igd.UDP, rng)
	alive("after a ranged listing")
	if err != nil {
		t.Fatalf("ListPortMappings(UDP %v): %v", rng, err)
	}
	inRange := map[igd.Key]bool{}
	for k := range want {
		if k.Protocol == igd.UDP && k.ExternalPort >= rng.First && k.ExternalPort <= rng.Last {
			inRange[k] = true
		}
	}
	check(fmt.Sprintf("ListPortMappings(UDP %d-%d)", rng.First, rng.Last), got, inRange)
}

// tail returns the last n bytes of s.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

// TestLabListAfterOwnAddsDoesNotCrash is the load balancer's background pass
// after 140 one-port Services, on a real miniupnpd 2.3.1: the client lists
// the empty table (and so learns its shape), adds 140 one-port mappings
// itself, and lists the whole table again. The guard must count its own
// adds: a listing of one range holding all 140 kills the daemon.
func TestLabListAfterOwnAddsDoesNotCrash(t *testing.T) {
	lab := igdtest.Start(t, igdtest.Options{})
	ctx := testContext(t)
	c := labClient(t, lab, 0, true)
	alive := func(when string) {
		t.Helper()
		pid := lab.PID()
		if pid == 0 || syscall.Kill(pid, 0) != nil || strings.Contains(lab.Log(), "realloc") {
			t.Fatalf("miniupnpd (pid %d) died %s; log tail:\n%s", pid, when, tail(lab.Log(), 2000))
		}
		if _, err := c.ExternalIP(ctx); err != nil {
			t.Fatalf("miniupnpd does not answer %s: %v\nlog tail:\n%s", when, err, tail(lab.Log(), 2000))
		}
	}
	if got, err := igd.ReadTable(ctx, c); err != nil || len(got) != 0 {
		t.Fatalf("ReadTable of the empty table = %v, %v", got, err)
	}
	node := lab.Nodes[0].Addr
	want := map[igd.Key]bool{}
	for port := uint16(20000); port < 20140; port++ {
		m := igd.Mapping{Protocol: igd.TCP, ExternalPort: port, InternalClient: node, InternalPort: port, Description: fmt.Sprintf("own %d", port)}
		if _, err := c.AddPortMapping(ctx, m); err != nil {
			t.Fatalf("AddPortMapping(%s): %v", m.Key(), err)
		}
		want[m.Key()] = true
	}
	got, err := igd.ReadTable(ctx, c)
	alive("listing the table after 140 own adds")
	if err != nil {
		t.Fatalf("ReadTable after 140 own adds: %v", err)
	}
	seen := map[igd.Key]bool{}
	for _, m := range got {
		if seen[m.Key()] || !want[m.Key()] {
			t.Errorf("ReadTable listed %s twice or unasked", m.Key())
		}
		seen[m.Key()] = true
	}
	if len(seen) != len(want) {
		t.Errorf("ReadTable listed %d mappings, want %d", len(seen), len(want))
	}
}
