package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/igdtest"
	"github.com/ccmkit/ccmkit/igd/pcp"
	"github.com/ccmkit/ccmkit/igd/pinhole"
	"github.com/ccmkit/ccmkit/igd/routercheck"
	"github.com/ccmkit/ccmkit/internal/hostinfo"
	"github.com/ccmkit/ccmkit/provider/edge"
)

// nodeGUA is the doctor's host's global IPv6 address in the fake network.
var nodeGUA = netip.MustParseAddr("2001:db8:1::10")

// serveIPv6 serves r's UPnP on the IPv6 loopback, seeing every caller as
// nodeGUA (a client dials it with fake.DialAs(nodeGUA)), and returns its
// description URL; it skips the test where the host has no IPv6 loopback.
func serveIPv6(t *testing.T, r *fake.Router) string {
	t.Helper()
	s, err := fake.NewServer6(r, fake.ServerOptions{ClientAddr: func(*http.Request) netip.Addr { return nodeGUA }})
	if err != nil {
		t.Skip(err)
	}
	t.Cleanup(s.Close)
	return s.RootDescURL
}

// TestDoctorChecksIPv6 runs the doctor against fake routers (IPv4 over
// UPnP on 127.0.0.1; IPv6 pinholes over UPnP on [::1], or PCP on [::1]) and
// checks its IPv6 findings and exit status: each family is checked, the
// first IPv6 check that fails names its fix, a test pinhole is left on the
// router by none, and behind a carrier's NAT working IPv6 makes the IPv4
// external address a warning.
func TestDoctorChecksIPv6(t *testing.T) {
	ula := netip.MustParseAddr("fd00:1::10")
	type want struct {
		exit     int
		statuses map[string]routercheck.Status // the IPv6 checks' and external-ip's
		detail   string                        // in the first non-OK IPv6 finding's Detail or Fix, or the pinhole's
	}
	for _, tc := range []struct {
		name    string
		ipv6    string // the gateway section's lines after url; %URL% is the IPv6 description
		addrs   []netip.Addr
		pcp     bool // a PCP server on [::1]
		thirdOK bool // it allows THIRD_PARTY
		noIPv6  bool // the IPv6 URL names a port nothing listens on
		cgnat   bool
		want    want
	}{
		{name: "off", ipv6: "", addrs: []netip.Addr{nodeGUA},
			want: want{0, statuses(routercheck.OK, routercheck.Skipped, routercheck.Skipped, routercheck.Skipped), "gateway.ipv6.enabled is false"}},
		{name: "upnp", ipv6: "  ipv6:\n    enabled: true\n    url: %URL%\n", addrs: []netip.Addr{ula, nodeGUA},
			want: want{0, statuses(routercheck.OK, routercheck.OK, routercheck.OK, routercheck.OK), "opened and closed TCP [2001:db8:1::10]:"}},
		{name: "no global address", ipv6: "  ipv6:\n    enabled: true\n    url: %URL%\n", addrs: []netip.Addr{ula},
			want: want{exitProblem, statuses(routercheck.OK, routercheck.Fail, routercheck.Skipped, routercheck.Skipped), "give the nodes global IPv6 addresses"}},
		{name: "no IPv6 firewall", ipv6: "  ipv6:\n    enabled: true\n    url: %URL%\n", addrs: []netip.Addr{nodeGUA}, noIPv6: true,
			want: want{exitProblem, statuses(routercheck.OK, routercheck.OK, routercheck.Fail, routercheck.Skipped), "turn UPnP IGD:2 with IPv6 on"}},
		{name: "pcp", ipv6: "  pcpSecretFile: /run/secret\n  ipv6:\n    enabled: true\n", addrs: []netip.Addr{nodeGUA}, pcp: true, thirdOK: true,
			want: want{0, statuses(routercheck.OK, routercheck.OK, routercheck.OK, routercheck.OK), "through PCP: Services are served on IPv6 through any eligible node"}},
		{name: "pcp refusing THIRD_PARTY", ipv6: "  pcpSecretFile: /run/secret\n  ipv6:\n    enabled: true\n", addrs: []netip.Addr{nodeGUA}, pcp: true,
			want: want{exitProblem, statuses(routercheck.OK, routercheck.OK, routercheck.OK, routercheck.Fail), "pcp_allow_thirdparty=yes"}},
		{name: "behind CGNAT, IPv6 works", ipv6: "  ipv6:\n    enabled: true\n    url: %URL%\n", addrs: []netip.Addr{nodeGUA}, cgnat: true,
			want: want{0, statuses(routercheck.Warn, routercheck.OK, routercheck.OK, routercheck.OK), "opened and closed"}},
		{name: "behind CGNAT, IPv6 off", ipv6: "", addrs: []netip.Addr{nodeGUA}, cgnat: true,
			want: want{exitProblem, statuses(routercheck.Fail, routercheck.Skipped, routercheck.Skipped, routercheck.Skipped), "gateway.ipv6.enabled is false"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc := fake.RouterConfig{Clock: clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))}
			if tc.cgnat {
				rc.ExternalIP = netip.MustParseAddr("100.64.0.1")
			}
			r := fake.NewRouter(rc)
			srv := fake.NewServer(r, fake.ServerOptions{})
			t.Cleanup(srv.Close)
			url6 := serveIPv6(t, r)
			if tc.noIPv6 {
				url6 = deadURL(t, "[::1]")
			}
			dn := doctorNet{
				igd:       func(c igd.Config) igd.Config { c.RootDescURL = srv.RootDescURL; return c },
				pinhole:   func(c pinhole.Config) pinhole.Config { c.DialContext = fake.DialAs(nodeGUA); return c },
				ipv6Addrs: func(string) ([]netip.Addr, error) { return tc.addrs, nil },
			}
			if tc.pcp {
				conn, err := net.ListenPacket("udp6", "[::1]:0")
				if err != nil {
					t.Skipf("no IPv6 loopback: %v", err)
				}
				s, err := fake.NewPCPServer(fake.PCPConfig{Router: r, Conn: conn, AllowThirdParty: tc.thirdOK})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { s.Close() })
				if dn.pcp6, err = pcp.NewClient(pcp.Config{Server: s.Addr()}); err != nil {
					t.Fatal(err)
				}
			}
			path := cloudConfig(t, "gateway:\n"+strings.ReplaceAll(tc.ipv6, "%URL%", url6)+"loadBalancer:\n  allowNonPublicExternalIP: false\n")
			var out, errOut bytes.Buffer
			code := doctor(t.Context(), []string{"--cloud-config", path, "--ports", "8443", "--output", "json"}, &out, &errOut, dn)
			var rep routercheck.Report
			if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
				t.Fatalf("--output json: %v\n%s\nstderr: %s", err, out.String(), errOut.String())
			}
			got := want{exit: code, statuses: map[string]routercheck.Status{}}
			for _, f := range rep.Findings {
				switch f.Check {
				case routercheck.CheckExternalIP, checkIPv6Address, checkIPv6Firewall, checkIPv6Pinhole:
					got.statuses[f.Check] = f.Status
					if got.detail == "" && strings.HasPrefix(f.Check, "ipv6-") && (f.Status != routercheck.OK || f.Check == checkIPv6Pinhole) {
						got.detail = f.Detail + " / " + f.Fix
					}
				}
			}
			if !strings.Contains(got.detail, tc.want.detail) {
				t.Errorf("first IPv6 finding not OK, or the pinhole's: %q, want it to contain %q", got.detail, tc.want.detail)
			}
			got.detail = tc.want.detail
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(want{})); diff != "" {
				t.Errorf("(-want +got):\n%s\nfindings: %+v", diff, rep.Findings)
			}
			if ph := r.Pinholes(); len(ph) != 0 {
				t.Errorf("the doctor left pinholes open: %+v", ph)
			}
		})
	}
}

// TestDoctorChecksIPv6WithoutAnIPv4Router: with gateway.ipv6 enabled, an
// IPv4 router that is not found (nothing answers SSDP, or gateway.url does
// not answer; behind a carrier's NAT the router's IPv6 side may still be
// there) does not stop the doctor before its IPv6 checks. The router
// finding is a failure unless every IPv6 check passes, when it is a
// warning (IPv4-only Services are not served, the others are, on IPv6), as
// a carrier's external address is; with IPv6 off no router is still
// "cannot check".
func TestDoctorChecksIPv6WithoutAnIPv4Router(t *testing.T) {
	const on = "  ipv6:\n    enabled: true\n    url: %URL%\n"
	for _, tc := range []struct {
		name   string
		ipv6   string // the gateway section's ipv6 lines; %URL% is the IPv6 description
		url4   bool   // gateway.url names a port nothing listens on; else SSDP finds nothing
		noIPv6 bool   // the IPv6 URL names a port nothing listens on
		want   int
		wantFs map[string]routercheck.Status // router and IPv6 findings; nil: no report
	}{
		{name: "nothing answers SSDP, IPv6 works", ipv6: on, want: 0,
			wantFs: map[string]routercheck.Status{routercheck.CheckRouter: routercheck.Warn, checkIPv6Address: routercheck.OK, checkIPv6Firewall: routercheck.OK, checkIPv6Pinhole: routercheck.OK}},
		{name: "nothing answers SSDP, no IPv6 firewall", ipv6: on, noIPv6: true, want: exitProblem,
			wantFs: map[string]routercheck.Status{routercheck.CheckRouter: routercheck.Fail, checkIPv6Address: routercheck.OK, checkIPv6Firewall: routercheck.Fail, checkIPv6Pinhole: routercheck.Skipped}},
		{name: "gateway.url does not answer, IPv6 works", ipv6: on, url4: true, want: 0,
			wantFs: map[string]routercheck.Status{routercheck.CheckRouter: routercheck.Warn, checkIPv6Address: routercheck.OK, checkIPv6Firewall: routercheck.OK, checkIPv6Pinhole: routercheck.OK}},
		{name: "nothing answers SSDP, IPv6 off", want: exitCannotCheck},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := fake.NewRouter(fake.RouterConfig{Clock: clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))})
			url6 := serveIPv6(t, r)
			if tc.noIPv6 {
				url6 = deadURL(t, "[::1]")
			}
			gateway := "gateway:\n"
			if tc.url4 {
				gateway += "  url: " + deadURL(t, "127.0.0.1") + "\n"
			}
			dn := doctorNet{
				igd: func(c igd.Config) igd.Config {
					c.ListenPacket = func(context.Context, string, string) (net.PacketConn, error) {
						return nil, errors.New("no IPv4 network") // SSDP finds nothing
					}
					return c
				},
				pinhole:   func(c pinhole.Config) pinhole.Config { c.DialContext = fake.DialAs(nodeGUA); return c },
				ipv6Addrs: func(string) ([]netip.Addr, error) { return []netip.Addr{nodeGUA}, nil },
			}
			path := cloudConfig(t, gateway+strings.ReplaceAll(tc.ipv6, "%URL%", url6))
			var out, errOut bytes.Buffer
			code := doctor(t.Context(), []string{"--cloud-config", path, "--ports", "8443", "--output", "json"}, &out, &errOut, dn)
			if code != tc.want {
				t.Errorf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tc.want, out.String(), errOut.String())
			}
			if tc.wantFs == nil {
				if out.Len() != 0 {
					t.Errorf("a report with no check run:\n%s", out.String())
				}
				return
			}
			var rep routercheck.Report
			if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
				t.Fatalf("--output json: %v\n%s\nstderr: %s", err, out.String(), errOut.String())
			}
			got := map[string]routercheck.Status{}
			for _, f := range rep.Findings {
				if _, ok := tc.wantFs[f.Check]; ok {
					got[f.Check] = f.Status
				}
			}
			if diff := cmp.Diff(tc.wantFs, got); diff != "" {
				t.Errorf("findings (-want +got):\n%s\nall: %+v", diff, rep.Findings)
			}
			if ph := r.Pinholes(); len(ph) != 0 {
				t.Errorf("the doctor left pinholes open: %+v", ph)
			}
		})
	}
}

// deadURL is a description URL on host ("127.0.0.1", "[::1]") where
// nothing listens.
func deadURL(t *testing.T, host string) string {
	t.Helper()
	ln, err := net.Listen("tcp", host+":0")
	if err != nil {
		t.Skip(err)
	}
	url := "http://" + ln.Addr().String() + "/rootDesc.xml"
	ln.Close()
	return url
}

// statuses are the external-ip and IPv6 checks' statuses, in that order.
func statuses(ext, addr, fw, ph routercheck.Status) map[string]routercheck.Status {
	return map[string]routercheck.Status{routercheck.CheckExternalIP: ext, checkIPv6Address: addr, checkIPv6Firewall: fw, checkIPv6Pinhole: ph}
}

// TestLabDoctorIPv6 runs the doctor from a node of igdtest's IPv6 lab
// (miniupnpd 2.3.1, a GUA and a ULA on the node, the router's IPv6 forward
// policy at drop) with gateway.ipv6 enabled: through UPnP (at the
// description's URL, and found by SSDP over IPv6) and through PCP (the IPv6
// default router, fe80::1, with THIRD_PARTY allowed and not), the IPv6
// checks pass or name the fix, and no test pinhole stays in the router's
// firewall.
func TestLabDoctorIPv6(t *testing.T) {
	for _, tc := range []struct {
		name       string
		lab        igdtest.Options
		pcp        bool
		discover   bool // UPnP: SSDP over IPv6 instead of the URL
		kernelSrc  bool // PCP: from the address the kernel picks (no bound source)
		wantExit   int
		wantStatus routercheck.Status // the ipv6-pinhole finding's
		wantDetail string
	}{
		{name: "upnp at the url", lab: igdtest.Options{IPv6: true}, wantStatus: routercheck.OK, wantDetail: "opened and closed TCP [2001:db8:1::10]:"},
		{name: "upnp found by SSDP", lab: igdtest.Options{IPv6: true}, discover: true, wantStatus: routercheck.OK, wantDetail: "through UPnP"},
		{name: "pcp", lab: igdtest.Options{IPv6: true, PCPAllowThirdParty: true}, pcp: true, wantStatus: routercheck.OK, wantDetail: "through PCP"},
		{name: "pcp from the kernel's source address", lab: igdtest.Options{IPv6: true, PCPAllowThirdParty: true}, pcp: true, kernelSrc: true, wantStatus: routercheck.OK, wantDetail: "through PCP"},
		// From its link-local address (the kernel's choice toward fe80::1)
		// a pinhole even to the node's own GUA names it in THIRD_PARTY.
		{name: "pcp from the kernel's source address, THIRD_PARTY refused", lab: igdtest.Options{IPv6: true}, pcp: true, kernelSrc: true,
			wantExit: exitProblem, wantStatus: routercheck.Fail, wantDetail: "pcp_allow_thirdparty=yes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lab := igdtest.Start(t, tc.lab)
			n := lab.Nodes[0]
			pcp4, err := pcp.NewClient(pcp.Config{Server: netip.AddrPortFrom(lab.RouterLAN, pcp.Port), DialContext: n.DialContext})
			if err != nil {
				t.Fatal(err)
			}
			dn := doctorNet{
				igd: func(igd.Config) igd.Config { return lab.ClientConfig(0) },
				pcp: pcp4,
				pinhole: func(c pinhole.Config) pinhole.Config {
					c.DialContext, c.ListenPacket = n.DialContextFrom(c.LocalAddr), n.ListenPacket
					return c
				},
				ipv6Addrs: func(iface string) (addrs []netip.Addr, err error) {
					err = n.Do(func() error { addrs, err = hostinfo.InterfaceAddrs(iface); return err })
					return addrs, err
				},
			}
			config := "gateway:\n  ipv6:\n    enabled: true\n    url: " + lab.IPv6.RootDescURL + "\n"
			if tc.discover {
				idx, err := n.InterfaceIndex(lab.IPv6.NodeInterface)
				if err != nil {
					t.Fatal(err)
				}
				config = "gateway:\n  ipv6:\n    enabled: true\n    interface: \"" + strconv.Itoa(idx) + "\"\n"
			}
			if tc.pcp {
				config = "gateway:\n  pcpSecretFile: /run/secret\n  ipv6:\n    enabled: true\n"
				dial := n.DialContextFrom(n.GUA)
				if tc.kernelSrc {
					dial = n.DialContext
				}
				// The zone by index: a name is resolved in the test
				// process's namespace, not the node's.
				idx, err := n.InterfaceIndex(lab.IPv6.NodeInterface)
				if err != nil {
					t.Fatal(err)
				}
				if dn.pcp6, err = pcp.NewClient(pcp.Config{Server: netip.AddrPortFrom(lab.IPv6.RouterLinkLocal.WithZone(strconv.Itoa(idx)), pcp.Port), DialContext: dial}); err != nil {
					t.Fatal(err)
				}
			}
			path := cloudConfig(t, config)
			var out, errOut bytes.Buffer
			code := doctor(t.Context(), []string{"--cloud-config", path, "--ports", "8443", "--output", "json"}, &out, &errOut, dn)
			var rep routercheck.Report
			if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
				t.Fatalf("--output json: %v\n%s\nstderr: %s", err, out.String(), errOut.String())
			}
			var ph routercheck.Finding
			for _, f := range rep.Findings {
				if f.Check == checkIPv6Pinhole {
					ph = f
				}
			}
			if code != tc.wantExit || ph.Status != tc.wantStatus || !strings.Contains(ph.Detail+ph.Fix, tc.wantDetail) {
				t.Errorf("exit %d, %s %s (%s / %s); want exit %d, %s containing %q\nfindings: %+v", code, ph.Check, ph.Status, ph.Detail, ph.Fix, tc.wantExit, tc.wantStatus, tc.wantDetail, rep.Findings)
			}
			if rules, err := lab.Nft(t.Context(), "list", "chain", "inet", "filter", "miniupnpd"); err != nil || strings.Contains(rules, "accept") {
				t.Errorf("the router's miniupnpd chain after the doctor (err %v):\n%s", err, rules)
			}
			out.Reset()
			doctor(t.Context(), []string{"--cloud-config", path, "--ports", "8443"}, &out, &errOut, dn)
			t.Logf("doctor's table:\n%s", out.String())
		})
	}
}

// TestStandaloneReadsGatewayIPv6: the standalone mode builds its provider
// from the same cloud-config keys as the CCM (edge.New, which
// provider/edge's TestIPv6ServesDualStackServices drives against the
// fakes): gateway.ipv6 is read, and a bad value stops it naming the key.
func TestStandaloneReadsGatewayIPv6(t *testing.T) {
	for _, tc := range []struct {
		name, config, wantErr string
	}{
		{"upnp", "gateway:\n  ipv6:\n    enabled: true\n    url: http://[2001:db8:1::1]:5000/rootDesc.xml\n", ""},
		{"url over IPv4", "gateway:\n  ipv6:\n    enabled: true\n    url: http://192.168.1.1:5000/rootDesc.xml\n", "gateway.ipv6.url"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := cloudConfig(t, tc.config)
			_, err := buildEdge(path, edge.Options{Class: DefaultClass, Classless: true})
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("buildEdge = %v, want an error naming %q (none: nil)", err, tc.wantErr)
			}
		})
	}
}

// cloudConfig writes text as a cloud config file for the test and returns
// its path.
func cloudConfig(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "cloud-config.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
