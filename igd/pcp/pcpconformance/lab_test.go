package pcpconformance_test

import (
	"net/netip"
	"testing"

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
