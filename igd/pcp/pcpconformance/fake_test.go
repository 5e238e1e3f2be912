package pcpconformance_test

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/pcp/pcpconformance"
)

// Loopback hosts: Linux routes all of 127.0.0.0/8 to lo, so each is a
// distinct sender to the fake server.
var hosts = [3]netip.Addr{
	netip.MustParseAddr("127.0.0.10"),
	netip.MustParseAddr("127.0.0.11"),
	netip.MustParseAddr("127.0.0.12"),
}

// labPermissions are the lab's permission rules (igdtest's default) for
// the loopback hosts: external ports 1024-65535 to internal ports
// 1024-65535, nothing else.
var labPermissions = []fake.Permission{
	{Allow: true, External: igd.PortRange{First: 1024, Last: 65535}, Client: netip.MustParsePrefix("127.0.0.0/8"), Internal: igd.PortRange{First: 1024, Last: 65535}},
	{Allow: false, External: igd.AllPorts, Client: netip.MustParsePrefix("0.0.0.0/0"), Internal: igd.AllPorts},
}

// dialFrom dials from addr.
func dialFrom(addr netip.Addr) func(ctx context.Context, network, address string) (net.Conn, error) {
	d := &net.Dialer{LocalAddr: net.UDPAddrFromAddrPort(netip.AddrPortFrom(addr, 0))}
	return d.DialContext
}

// fakeBackend runs each case on a fresh fake.PCPServer over a fake.Router on
// a fake clock.
func fakeBackend(systemUptime bool) pcpconformance.Backend {
	return pcpconformance.Backend{
		Start: func(t *testing.T, cfg pcpconformance.Config) pcpconformance.Target {
			clk := clocktesting.NewFakeClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
			r := fake.NewRouter(fake.RouterConfig{Clock: clk, Permissions: labPermissions})
			s, err := fake.NewPCPServer(fake.PCPConfig{
				Router:          r,
				AllowThirdParty: cfg.AllowThirdParty,
				MinLifetime:     cfg.MinLifetime,
				MaxLifetime:     cfg.MaxLifetime,
				SystemUptime:    systemUptime,
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			tg := pcpconformance.Target{
				Server:             s.Addr(),
				ExternalIP:         r.ExternalIP(),
				ListenAnnounce:     s.ListenAnnounce,
				Restart:            func(testing.TB) { s.Restart() },
				Reboot:             func(testing.TB) { s.Reboot() },
				EpochKeptOnRestart: systemUptime,
				Step:               clk.Step,
			}
			for i, a := range hosts {
				tg.Hosts[i] = pcpconformance.Host{Addr: a, DialContext: dialFrom(a), UPnP: r.Client(a)}
			}
			return tg
		},
	}
}

// TestConformanceFake runs the suite against fake.PCPServer, with the
// epoch kept across a restart (system_uptime=yes, as the lab) and reset.
func TestConformanceFake(t *testing.T) {
	t.Run("SystemUptime", func(t *testing.T) { pcpconformance.Run(t, fakeBackend(true)) })
	t.Run("DaemonUptime", func(t *testing.T) { pcpconformance.Run(t, fakeBackend(false)) })
}

// fakeBackend6 runs each IPv6 case on a fresh fake.PCPServer answering on
// [::1], over a fake.Router on a fake clock. Loopback has one IPv6
// address, so hosts 0 and 2 are both ::1 (the lab runs the cases with
// three); host 1 is only ever named, as a THIRD_PARTY target.
func fakeBackend6() pcpconformance.Backend6 {
	return pcpconformance.Backend6{
		Start: func(t *testing.T, cfg pcpconformance.Config) pcpconformance.Target6 {
			conn, err := net.ListenPacket("udp6", "[::1]:0")
			if err != nil {
				t.Skipf("no IPv6 loopback: %v", err)
			}
			clk := clocktesting.NewFakeClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
			r := fake.NewRouter(fake.RouterConfig{Clock: clk})
			s, err := fake.NewPCPServer(fake.PCPConfig{
				Router:          r,
				Conn:            conn,
				AllowThirdParty: cfg.AllowThirdParty,
				MinLifetime:     cfg.MinLifetime,
				MaxLifetime:     cfg.MaxLifetime,
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			self := netip.IPv6Loopback()
			tg := pcpconformance.Target6{
				Server: s.Addr(),
				Open: func(_ testing.TB, proto igd.Protocol, addr netip.AddrPort) bool {
					for _, p := range r.Pinholes() {
						if p.Pinhole.Protocol == proto && netip.AddrPortFrom(p.Pinhole.InternalClient, p.Pinhole.InternalPort) == addr {
							return true
						}
					}
					return false
				},
				Restart: func(testing.TB) { s.Restart() },
				Reboot:  func(testing.TB) { s.Reboot() },
				Step:    clk.Step,
			}
			tg.Hosts[0] = pcpconformance.Host{Addr: self, DialContext: dialFrom(self)}
			tg.Hosts[1] = pcpconformance.Host{Addr: netip.MustParseAddr("2001:db8:1::11")}
			tg.Hosts[2] = tg.Hosts[0]
			return tg
		},
	}
}

// TestConformance6Fake runs the IPv6 pinhole cases against
// fake.PCPServer.
func TestConformance6Fake(t *testing.T) {
	pcpconformance.Run6(t, fakeBackend6())
}
