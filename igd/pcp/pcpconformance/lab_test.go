package pcpconformance_test

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/igdtest"
	"github.com/ccmkit/ccmkit/igd/pcp/pcpconformance"
	"github.com/ccmkit/ccmkit/internal/pcpwire"
)

// labBackend runs each case on a fresh lab: a real miniupnpd 2.3.1 in
// network namespaces with three LAN nodes (system_uptime=yes).
func labBackend() pcpconformance.Backend {
	return pcpconformance.Backend{
		Start: func(t *testing.T, cfg pcpconformance.Config) pcpconformance.Target {
			lab := igdtest.Start(t, igdtest.Options{
				Nodes:              3,
				PCPAllowThirdParty: cfg.AllowThirdParty,
				MinLifetime:        cfg.MinLifetime,
				MaxLifetime:        cfg.MaxLifetime,
			})
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("miniupnpd log:\n%s", lab.Log())
				}
			})
			tg := pcpconformance.Target{
				Server:             netip.AddrPortFrom(lab.RouterLAN, pcpwire.Port),
				ExternalIP:         lab.ExternalIP,
				ListenAnnounce:     lab.Nodes[0].ListenPacket,
				Restart:            lab.Restart,
				Reboot:             lab.Reboot,
				EpochKeptOnRestart: true,
			}
			for i := range tg.Hosts {
				cc := lab.ClientConfig(i)
				cc.CallTimeout = pcpconformance.CallTimeout
				u, err := igd.NewClient(cc)
				if err != nil {
					t.Fatal(err)
				}
				tg.Hosts[i] = pcpconformance.Host{Addr: lab.Nodes[i].Addr, DialContext: lab.Nodes[i].DialContext, UPnP: u}
			}
			return tg
		},
	}
}

// TestConformanceLab runs the suite against a real miniupnpd. It needs root
// and the lab's programs; see igdtest for when it skips.
func TestConformanceLab(t *testing.T) {
	igdtest.Require(t)
	pcpconformance.Run(t, labBackend())
}

// labBackend6 runs each IPv6 case on a fresh IPv6 lab: three nodes with
// global addresses, each sending from its own to the router's link-local
// address (the nodes' IPv6 default router, where miniupnpd's [::]:5351
// answers), a forward policy of drop. A pinhole is open when miniupnpd's
// chain holds its accept rule.
func labBackend6() pcpconformance.Backend6 {
	return pcpconformance.Backend6{
		Start: func(t *testing.T, cfg pcpconformance.Config) pcpconformance.Target6 {
			lab := igdtest.Start(t, igdtest.Options{
				Nodes:              3,
				IPv6:               true,
				PCPAllowThirdParty: cfg.AllowThirdParty,
				MinLifetime:        cfg.MinLifetime,
				MaxLifetime:        cfg.MaxLifetime,
			})
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("miniupnpd log:\n%s", lab.Log())
				}
			})
			tg := pcpconformance.Target6{
				Server: netip.AddrPortFrom(lab.IPv6.RouterLinkLocal.WithZone(lab.IPv6.NodeInterface), pcpwire.Port),
				Open: func(t testing.TB, proto igd.Protocol, addr netip.AddrPort) bool {
					if proto != igd.TCP {
						t.Fatalf("the lab checks TCP pinholes only, not %s", proto)
					}
					ctx, cancel := context.WithTimeout(context.Background(), unreachableWithin)
					defer cancel()
					return lab.InternetReaches(ctx, addr) == nil
				},
				Restart: lab.Restart,
				Reboot:  lab.Reboot,
			}
			for i := range tg.Hosts {
				n := lab.Nodes[i]
				tg.Hosts[i] = pcpconformance.Host{Addr: n.GUA, DialContext: n.DialContextFrom(n.GUA)}
				for _, port := range pcpconformance.Ports6 {
					n.Serve(t, netip.AddrPortFrom(n.GUA, port))
				}
			}
			return tg
		},
	}
}

// TestConformance6Lab runs the IPv6 pinhole cases against a real
// miniupnpd. It needs root and the lab's programs; see igdtest for when it
// skips.
func TestConformance6Lab(t *testing.T) {
	igdtest.Require(t)
	pcpconformance.Run6(t, labBackend6())
}

// unreachableWithin bounds a dial that should fail: the lab router's
// firewall drops the SYN, so the dial ends only with this bound.
const unreachableWithin = 500 * time.Millisecond
