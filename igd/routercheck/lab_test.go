package routercheck_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/igdtest"
	"github.com/ccmkit/ccmkit/igd/pcp"
	"github.com/ccmkit/ccmkit/igd/routercheck"
	"github.com/ccmkit/ccmkit/internal/upnp"
)

// The check on a real miniupnpd in the configurations the lab has, with the
// secure-mode probe aimed at the router's own LAN address (the default).
func TestLabRun(t *testing.T) {
	const (
		ok   = routercheck.OK
		warn = routercheck.Warn
		fail = routercheck.Fail
	)
	for _, tc := range []struct {
		name    string
		lab     igdtest.Options
		opts    routercheck.Options
		want    map[string]routercheck.Status
		service string
		pcp     string // what the PCP finding says
	}{
		{"daemon defaults", igdtest.Options{}, routercheck.Options{},
			map[string]routercheck.Status{routercheck.CheckSecureMode: ok, routercheck.CheckLowPorts: warn, routercheck.CheckLease: ok, routercheck.CheckListing: ok},
			upnp.ServiceWANIPConnection2, "THIRD_PARTY refused"},
		{"secure mode, not configured", igdtest.Options{SecureMode: true}, routercheck.Options{},
			map[string]routercheck.Status{routercheck.CheckSecureMode: fail, routercheck.CheckLowPorts: warn, routercheck.CheckLease: ok, routercheck.CheckListing: ok},
			upnp.ServiceWANIPConnection2, "THIRD_PARTY refused"},
		{"PCP with THIRD_PARTY", igdtest.Options{PCPAllowThirdParty: true}, routercheck.Options{},
			map[string]routercheck.Status{routercheck.CheckPCP: ok},
			upnp.ServiceWANIPConnection2, "THIRD_PARTY allowed"},
		{"no PCP", igdtest.Options{DisableNATPMP: true}, routercheck.Options{},
			map[string]routercheck.Status{routercheck.CheckPCP: ok},
			upnp.ServiceWANIPConnection2, "no PCP server answered"},
		{"secure mode, IGD:1, configured", igdtest.Options{SecureMode: true, ForceIGDv1: true}, routercheck.Options{SecureMode: true},
			map[string]routercheck.Status{routercheck.CheckSecureMode: ok, routercheck.CheckLowPorts: warn, routercheck.CheckLease: ok, routercheck.CheckListing: ok},
			upnp.ServiceWANIPConnection1, "THIRD_PARTY refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lab := igdtest.Start(t, tc.lab)
			c, err := igd.NewClient(lab.ClientConfig(0))
			if err != nil {
				t.Fatal(err)
			}
			tc.opts.PCP, err = pcp.NewClient(pcp.Config{Server: netip.AddrPortFrom(lab.RouterLAN, pcp.Port), DialContext: lab.Nodes[0].DialContext})
			if err != nil {
				t.Fatal(err)
			}
			rep, err := routercheck.Run(t.Context(), c, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]routercheck.Status{}
			for _, f := range rep.Findings {
				if _, ok := tc.want[f.Check]; ok {
					got[f.Check] = f.Status
				}
				t.Logf("%s: %s: %s", f.Check, f.Status, f.Detail)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("statuses (-want +got):\n%s", d)
			}
			for _, f := range rep.Findings {
				if f.Check == routercheck.CheckPCP && !strings.Contains(f.Detail, tc.pcp) {
					t.Errorf("%s: %q, want it to say %q", f.Check, f.Detail, tc.pcp)
				}
			}
			if want := tc.service == upnp.ServiceWANIPConnection2; rep.Gateway.IPv6Firewall != want {
				t.Errorf("IPv6Firewall %v, want %v: miniupnpd describes it in IGD:2 only", rep.Gateway.IPv6Firewall, want)
			}
			if rep.Gateway.ServiceType != tc.service {
				t.Errorf("service %s, want %s", rep.Gateway.ServiceType, tc.service)
			}
			if ms, err := igd.ReadTable(t.Context(), c); err != nil || len(ms) != 0 {
				t.Errorf("router table after the check: %v, %v; want empty", ms, err)
			}
		})
	}
}

// The ports the operator will use, on a real miniupnpd whose rules allow
// 80 to 443 besides 1024-65535, as the check's own fix tells them to:
// written as miniupnpd.conf lines, and as OpenWrt's init script writes the
// perm_rules of that fix (one rule per port, int_ports 1024-65535). Each
// port says what the router does; the ports below 1024 it allows are no
// longer reported refused, and the one it refuses is a failure naming it.
func TestLabServicePorts(t *testing.T) {
	miniupnpdFix := igdtest.HighPortsOnly()
	miniupnpdFix.Permissions = append([]string{"allow 80-443 192.0.2.0/24 1024-65535"}, miniupnpdFix.Permissions...)
	openWrtFix := igdtest.OpenWrtDefault()
	openWrtFix.Permissions = append([]string{
		"allow 80 0.0.0.0/0 1024-65535 #ACL", // as conf_rule_add writes allowPortFix's rule
		"allow 443 0.0.0.0/0 1024-65535 #ACL",
	}, openWrtFix.Permissions...)
	ports := []igd.Key{{Protocol: igd.TCP, ExternalPort: 80}, {Protocol: igd.TCP, ExternalPort: 443},
		{Protocol: igd.UDP, ExternalPort: 443}, {Protocol: igd.TCP, ExternalPort: 8443}, {Protocol: igd.TCP, ExternalPort: 22}}
	want := map[string]routercheck.Status{"TCP/80": routercheck.OK, "TCP/443": routercheck.OK, "UDP/443": routercheck.OK,
		"TCP/8443": routercheck.OK, "TCP/22": routercheck.Fail}
	for _, tc := range []struct {
		name string
		lab  igdtest.Options
		opts routercheck.Options
	}{
		{"miniupnpd.conf allow 80-443", miniupnpdFix, routercheck.Options{}},
		{"OpenWrt perm_rules for 80 and 443", openWrtFix, routercheck.Options{SecureMode: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lab := igdtest.Start(t, tc.lab)
			c, err := igd.NewClient(lab.ClientConfig(0))
			if err != nil {
				t.Fatal(err)
			}
			tc.opts.PCP, err = pcp.NewClient(pcp.Config{Server: netip.AddrPortFrom(lab.RouterLAN, pcp.Port), DialContext: lab.Nodes[0].DialContext})
			if err != nil {
				t.Fatal(err)
			}
			tc.opts.ServicePorts = ports
			rep, err := routercheck.Run(t.Context(), c, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]routercheck.Status{}
			for _, f := range rep.Findings {
				t.Logf("%s %v: %s: %s", f.Check, f.Port, f.Status, f.Detail)
				switch {
				case f.Check == routercheck.CheckPort && f.Port != nil:
					got[f.Port.String()] = f.Status
				case f.Check == routercheck.CheckLowPorts && f.Status != routercheck.Skipped:
					t.Errorf("%s: %s (%s), want it skipped: the ports below 1024 given are probed instead", f.Check, f.Status, f.Detail)
				}
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("per-port statuses (-want +got):\n%s", d)
			}
			if p := rep.Problem(); p == nil || p.Port == nil || p.Port.ExternalPort != 22 || !strings.Contains(p.Fix, "allow 22 ") || !strings.Contains(p.Fix, "ext_ports=22") {
				t.Errorf("Problem() = %+v, want port TCP/22 with the miniupnpd.conf and OpenWrt rules that allow it", p)
			}
			if ms, err := igd.ReadTable(t.Context(), c); err != nil || len(ms) != 0 {
				t.Errorf("router table after the check: %v, %v; want empty", ms, err)
			}
		})
	}
}
