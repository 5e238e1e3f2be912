package pinholeconformance_test

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/ccmkit/ccmkit/igd/igdtest"
	"github.com/ccmkit/ccmkit/igd/pinhole"
	"github.com/ccmkit/ccmkit/igd/pinhole/pinholeconformance"
)

// unreachableWithin bounds a dial that should fail: the lab router's
// firewall drops the SYN, so the dial ends only with this bound.
const unreachableWithin = 500 * time.Millisecond

// labClient returns the real client acting from node i of lab, sending from
// its GUA.
func labClient(t *testing.T, lab *igdtest.Lab, i int) pinhole.Client {
	t.Helper()
	n := lab.Nodes[i]
	c, err := pinhole.New(pinhole.Config{
		LocalAddr:   n.GUA,
		RootDescURL: lab.IPv6.RootDescURL,
		DialContext: n.DialContextFrom(n.GUA),
		// The suite checks behaviour, not speed: under -race on a loaded
		// machine an answer may take longer than the default bound.
		CallTimeout: pinholeconformance.CallTimeout,
	})
	if err != nil {
		t.Fatalf("pinhole.New: %v", err)
	}
	return c
}

// TestConformanceLab runs the pinhole suite against the real client and a
// real miniupnpd 2.3.1 in igdtest's IPv6 lab, with the data path checked
// from the internet host. It needs root; see igdtest for when it skips.
func TestConformanceLab(t *testing.T) {
	igdtest.Require(t)
	pinholeconformance.Run(t, pinholeconformance.Backend{
		Start: func(t *testing.T) pinholeconformance.Router {
			lab := igdtest.Start(t, igdtest.Options{IPv6: true, Nodes: 2})
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("miniupnpd log:\n%s", lab.Log())
				}
			})
			a := lab.Nodes[0]
			for _, port := range []uint16{pinholeconformance.PortA, pinholeconformance.PortB} {
				a.Serve(t, netip.AddrPortFrom(a.GUA, port))
			}
			return pinholeconformance.Router{
				A: labClient(t, lab, 0), B: labClient(t, lab, 1),
				AddrA: a.GUA, AddrB: lab.Nodes[1].GUA,
				Reboot: lab.Reboot,
				Reaches: func(_ testing.TB, port uint16) bool {
					ctx, cancel := context.WithTimeout(context.Background(), unreachableWithin)
					defer cancel()
					return lab.InternetReaches(ctx, netip.AddrPortFrom(a.GUA, port)) == nil
				},
			}
		},
	})
}
