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
			igd.ServiceWANIPConnection2, "THIRD_PARTY refused"},
		{"secure mode, not configured", igdtest.Options{SecureMode: true}, routercheck.Options{},
			map[string]routercheck.Status{routercheck.CheckSecureMode: fail, routercheck.CheckLowPorts: warn, routercheck.CheckLease: ok, routercheck.CheckListing: ok},
			igd.ServiceWANIPConnection2, "THIRD_PARTY refused"},
		{"PCP with THIRD_PARTY", igdtest.Options{PCPAllowThirdParty: true}, routercheck.Options{},
			map[string]routercheck.Status{routercheck.CheckPCP: ok},
			igd.ServiceWANIPConnection2, "THIRD_PARTY allowed"},
		{"no PCP", igdtest.Options{DisableNATPMP: true}, routercheck.Options{},
			map[string]routercheck.Status{routercheck.CheckPCP: ok},
			igd.ServiceWANIPConnection2, "no PCP server answered"},
		{"secure mode, IGD:1, configured", igdtest.Options{SecureMode: true, ForceIGDv1: true}, routercheck.Options{SecureMode: true},
			map[string]routercheck.Status{routercheck.CheckSecureMode: ok, routercheck.CheckLowPorts: warn, routercheck.CheckLease: ok, routercheck.CheckListing: ok},
			igd.ServiceWANIPConnection1, "THIRD_PARTY refused"},
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
			if want := tc.service == igd.ServiceWANIPConnection2; rep.Gateway.IPv6Firewall != want {
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
