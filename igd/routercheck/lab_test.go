package routercheck_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/igdtest"
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
	}{
		{"daemon defaults", igdtest.Options{}, routercheck.Options{},
			map[string]routercheck.Status{routercheck.CheckSecureMode: ok, routercheck.CheckLowPorts: warn, routercheck.CheckLease: ok, routercheck.CheckListing: ok},
			igd.ServiceWANIPConnection2},
		{"secure mode, not configured", igdtest.Options{SecureMode: true}, routercheck.Options{},
			map[string]routercheck.Status{routercheck.CheckSecureMode: fail, routercheck.CheckLowPorts: warn, routercheck.CheckLease: ok, routercheck.CheckListing: ok},
			igd.ServiceWANIPConnection2},
		{"secure mode, IGD:1, configured", igdtest.Options{SecureMode: true, ForceIGDv1: true}, routercheck.Options{SecureMode: true},
			map[string]routercheck.Status{routercheck.CheckSecureMode: ok, routercheck.CheckLowPorts: warn, routercheck.CheckLease: ok, routercheck.CheckListing: ok},
			igd.ServiceWANIPConnection1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lab := igdtest.Start(t, tc.lab)
			c, err := igd.NewClient(lab.ClientConfig(0))
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
			if rep.Gateway.ServiceType != tc.service {
				t.Errorf("service %s, want %s", rep.Gateway.ServiceType, tc.service)
			}
			if ms, err := igd.ReadTable(t.Context(), c); err != nil || len(ms) != 0 {
				t.Errorf("router table after the check: %v, %v; want empty", ms, err)
			}
		})
	}
}
