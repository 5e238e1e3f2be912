package pcpconformance

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/internal/pcpwire"
)

// Target6 is one fresh server reached over IPv6, with no pinholes.
type Target6 struct {
	// Server is the PCP server's IPv6 address (pcp.Config.Server).
	Server netip.AddrPort
	// Hosts are three different LAN hosts; Addr is each one's global IPv6
	// address, which its DialContext sends from. UPnP is not used.
	Hosts [3]Host
	// Open reports whether the router lets the internet reach addr over
	// proto now: a pinhole to it is open.
	Open func(t testing.TB, proto igd.Protocol, addr netip.AddrPort) bool
	// Restart restarts the daemon (its firewall rules kept); Reboot
	// reboots the router (pinholes wiped).
	Restart, Reboot func(t testing.TB)
	// Step advances the server's clock. Nil: the server runs on real time.
	Step func(d time.Duration)
}

// Backend6 is a server implementation under test over IPv6.
type Backend6 struct {
	// Start returns a fresh server configured by cfg; it registers its
	// cleanups with t and fails or skips t when it cannot start.
	Start func(t *testing.T, cfg Config) Target6
}

type testCase6 struct {
	name string
	cfg  Config
	run  func(t *testing.T, tg Target6)
}

// Run6 runs every IPv6 pinhole case against b, each as a subtest on its
// own server.
func Run6(t *testing.T, b Backend6) {
	t.Helper()
	if b.Start == nil {
		t.Fatal("pcpconformance: Backend6.Start is nil")
	}
	for _, tc := range cases6() {
		t.Run(tc.name, func(t *testing.T) {
			tc.run(t, b.Start(t, tc.cfg))
		})
	}
}

// Pinhole ports: one below 1024, which UPnP refuses and PCP opens, and one
// above.
const (
	port6Low  = 443
	port6High = 8443
)

// Ports6 are the TCP ports the IPv6 cases open pinholes to, on any host: a
// backend whose Target6.Open checks the data path listens on them.
var Ports6 = []uint16{port6Low, port6High, port6High + 1, port6High + 2}

func cases6() []testCase6 {
	allow := Config{AllowThirdParty: true}
	return []testCase6{
		{name: "ThirdParty/OpenClose", cfg: allow, run: testPinholeOpenClose(port6High)},
		{name: "ThirdParty/PortBelow1024", cfg: allow, run: testPinholeOpenClose(port6Low)},
		{name: "ThirdParty/Refused", run: testPinholeThirdPartyRefused},
		{name: "OwnAddress", run: testPinholeOwnAddress},
		{name: "DeleteNeedsTheNonce", cfg: allow, run: testPinholeDeleteNeedsNonce},
		{name: "AnotherHostWithTheNonceDeletes", cfg: allow, run: testPinholeAnotherHostDeletes},
		{name: "RenewalDropsTheNonce", cfg: allow, run: testPinholeRenew},
		{name: "RenewalIgnoresTheNonce", cfg: allow, run: testPinholeRenewalIgnoresNonce},
		{name: "LeaseEnds", cfg: Config{AllowThirdParty: true, MinLifetime: time.Second}, run: testPinholeLeaseEnds},
		{name: "RebootLoses", cfg: allow, run: testPinholeRebootLoses},
		{name: "RestartKeeps", cfg: allow, run: testPinholeRestartKeeps},
		{name: "Raw/SuggestedExternalAddress", cfg: allow, run: testPinholeSuggestedAddress},
	}
}

// client6 is a wire client acting from host i over IPv6.
func client6(t *testing.T, tg Target6, i int) *pcpwire.Client {
	t.Helper()
	c, err := pcpwire.NewClient(pcpwire.Config{Server: tg.Server, DialContext: tg.Hosts[i].DialContext, CallTimeout: CallTimeout})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// pinholeReq asks for a pinhole to addr:port over TCP, for lifetime, with
// nonce, the external port suggested equal to the internal one.
func pinholeReq(addr netip.Addr, port uint16, lifetime time.Duration, nonce [12]byte) pcpwire.MapRequest {
	return pcpwire.MapRequest{Protocol: igd.TCP, InternalAddr: addr, InternalPort: port, ExternalPort: port, Lifetime: lifetime, Nonce: nonce}
}

func wantOpen(t *testing.T, tg Target6, addr netip.AddrPort, want bool, why string) {
	t.Helper()
	if got := tg.Open(t, igd.TCP, addr); got != want {
		t.Fatalf("pinhole to TCP %s open = %t, want %t: %s", addr, got, want, why)
	}
}

// testPinholeOpenClose: a MAP from one host for another's global address
// (THIRD_PARTY) opens a pinhole there, on any port: SUCCESS with the
// internal address and port as the external ones (no NAT), the lifetime
// asked. A delete with the nonce closes it; a delete of a pinhole that is
// gone is SUCCESS (miniupnpd 2.3.1's DeletePCPMap finds nothing and sets
// no error), unlike IPv4's NO_RESOURCES.
func testPinholeOpenClose(port uint16) func(t *testing.T, tg Target6) {
	return func(t *testing.T, tg Target6) {
		c := client6(t, tg, 0)
		target := netip.AddrPortFrom(tg.Hosts[1].Addr, port)
		got, err := c.Map(ctx(t), pinholeReq(target.Addr(), port, 10*time.Minute, nonceA))
		if err != nil {
			t.Fatalf("Map for %s: %v", target, err)
		}
		if got.ExternalAddr != target.Addr() || got.ExternalPort != port || got.Lifetime != 10*time.Minute {
			t.Errorf("Map = %+v, want external %s for 10m", got, target)
		}
		wantOpen(t, tg, target, true, "after the MAP")
		if err := c.Delete(ctx(t), igd.TCP, target.Addr(), port, nonceA); err != nil {
			t.Fatalf("Delete with the nonce = %v", err)
		}
		wantOpen(t, tg, target, false, "after the delete")
		if err := c.Delete(ctx(t), igd.TCP, target.Addr(), port, nonceA); err != nil {
			t.Errorf("Delete of a pinhole that is gone = %v, want nil (SUCCESS)", err)
		}
	}
}

// testPinholeThirdPartyRefused: without pcp_allow_thirdparty, a MAP for
// another host is UNSUPP_OPTION and opens nothing.
func testPinholeThirdPartyRefused(t *testing.T, tg Target6) {
	target := netip.AddrPortFrom(tg.Hosts[1].Addr, port6High)
	_, err := client6(t, tg, 0).Map(ctx(t), pinholeReq(target.Addr(), port6High, 10*time.Minute, nonceA))
	if !errors.Is(err, pcpwire.ErrUnsupportedOption) {
		t.Fatalf("Map for another host = %v, want ErrUnsupportedOption", err)
	}
	wantOpen(t, tg, target, false, "after the refused MAP")
}

// testPinholeOwnAddress: a host opens a pinhole to its own address with no
// option, THIRD_PARTY refused or not.
func testPinholeOwnAddress(t *testing.T, tg Target6) {
	c := client6(t, tg, 0)
	own := netip.AddrPortFrom(tg.Hosts[0].Addr, port6Low)
	if _, err := c.Map(ctx(t), pinholeReq(own.Addr(), port6Low, 10*time.Minute, nonceA)); err != nil {
		t.Fatalf("Map for the sender's own address: %v", err)
	}
	wantOpen(t, tg, own, true, "after the MAP")
	if err := c.Delete(ctx(t), igd.TCP, own.Addr(), port6Low, nonceA); err != nil {
		t.Fatalf("Delete = %v", err)
	}
	wantOpen(t, tg, own, false, "after the delete")
}

// testPinholeDeleteNeedsNonce: a delete with another nonce is
// NOT_AUTHORIZED and the pinhole stays open.
func testPinholeDeleteNeedsNonce(t *testing.T, tg Target6) {
	c := client6(t, tg, 0)
	target := netip.AddrPortFrom(tg.Hosts[1].Addr, port6High)
	mustMap(t, c, pinholeReq(target.Addr(), port6High, 10*time.Minute, nonceA))
	if err := c.Delete(ctx(t), igd.TCP, target.Addr(), port6High, nonceB); !errors.Is(err, pcpwire.ErrNotAuthorized) {
		t.Fatalf("Delete with another nonce = %v, want ErrNotAuthorized", err)
	}
	wantOpen(t, tg, target, true, "after a delete with another nonce")
	if err := c.Delete(ctx(t), igd.TCP, target.Addr(), port6High, nonceA); err != nil {
		t.Fatalf("Delete with the nonce = %v", err)
	}
	wantOpen(t, tg, target, false, "after the delete with the nonce")
}

// testPinholeAnotherHostDeletes: the nonce is all a delete is judged by: a
// third host that holds it (a controller that failed over to another node)
// closes the pinhole.
func testPinholeAnotherHostDeletes(t *testing.T, tg Target6) {
	target := netip.AddrPortFrom(tg.Hosts[1].Addr, port6High)
	mustMap(t, client6(t, tg, 0), pinholeReq(target.Addr(), port6High, 10*time.Minute, nonceA))
	if err := client6(t, tg, 2).Delete(ctx(t), igd.TCP, target.Addr(), port6High, nonceA); err != nil {
		t.Fatalf("Delete with the nonce from a third host = %v", err)
	}
	wantOpen(t, tg, target, false, "after the delete")
}

// testPinholeRenew: a MAP of an open pinhole renews it to the new lifetime
// and answers the same external address and port. miniupnpd 2.3.1 (the
// nftables backend; fixed in 2.3.6) drops the pinhole's nonce when it
// renews it: from then on every delete is NOT_AUTHORIZED, the owner's
// too, and the pinhole closes only when its lease ends.
func testPinholeRenew(t *testing.T, tg Target6) {
	c := client6(t, tg, 0)
	target := netip.AddrPortFrom(tg.Hosts[1].Addr, port6High)
	mustMap(t, c, pinholeReq(target.Addr(), port6High, 10*time.Minute, nonceA))
	got := mustMap(t, c, pinholeReq(target.Addr(), port6High, 20*time.Minute, nonceA))
	if got.ExternalAddr != target.Addr() || got.ExternalPort != port6High || got.Lifetime != 20*time.Minute {
		t.Errorf("renewal = %+v, want external %s for 20m", got, target)
	}
	wantOpen(t, tg, target, true, "after the renewal")
	if err := c.Delete(ctx(t), igd.TCP, target.Addr(), port6High, nonceA); !errors.Is(err, pcpwire.ErrNotAuthorized) {
		t.Fatalf("Delete with the nonce after a renewal = %v, want ErrNotAuthorized (miniupnpd 2.3.1 lost the nonce)", err)
	}
	wantOpen(t, tg, target, true, "after the refused delete")
}

// testPinholeRenewalIgnoresTheNonce: miniupnpd 2.3.1 renews an open
// pinhole for a MAP with any nonce (CreatePCPMap_FW; it checks from
// 2.3.8), and answers the suggested external port as it came, 0 included.
func testPinholeRenewalIgnoresNonce(t *testing.T, tg Target6) {
	target := netip.AddrPortFrom(tg.Hosts[1].Addr, port6High)
	mustMap(t, client6(t, tg, 0), pinholeReq(target.Addr(), port6High, 10*time.Minute, nonceA))
	req := mapRequest6(tg.Hosts[2].Addr, 1800, nonceB, 6, port6High, 0, thirdParty(target.Addr()))
	a := exchange6(t, tg, 2, req)
	wantAnswer(t, a, 2, 1, pcpwire.Success)
	if got := binary.BigEndian.Uint32(a[4:]); got != 1800 {
		t.Errorf("renewal with another nonce granted %d s, want 1800", got)
	}
	if got := binary.BigEndian.Uint16(a[24+18:]); got != 0 {
		t.Errorf("renewal suggesting port 0 answered port %d, want 0 (the suggestion, as it came)", got)
	}
	wantOpen(t, tg, target, true, "after the renewal")
}

// testPinholeLeaseEnds: a pinhole closes when its lifetime ends.
func testPinholeLeaseEnds(t *testing.T, tg Target6) {
	target := netip.AddrPortFrom(tg.Hosts[1].Addr, port6High)
	got := mustMap(t, client6(t, tg, 0), pinholeReq(target.Addr(), port6High, 2*time.Second, nonceA))
	if got.Lifetime != 2*time.Second {
		t.Fatalf("granted %v, want 2s", got.Lifetime)
	}
	wantOpen(t, tg, target, true, "after the MAP")
	if tg.Step != nil {
		tg.Step(3 * time.Second)
		wantOpen(t, tg, target, false, "after the lifetime")
		return
	}
	deadline := time.Now().Add(CallTimeout)
	for tg.Open(t, igd.TCP, target) {
		if time.Now().After(deadline) {
			t.Fatalf("pinhole of a 2 s lifetime still open after %v", CallTimeout)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// testPinholeRebootLoses: a reboot closes every pinhole; a delete after it
// finds nothing (SUCCESS), and a MAP opens it again.
func testPinholeRebootLoses(t *testing.T, tg Target6) {
	c := client6(t, tg, 0)
	target := netip.AddrPortFrom(tg.Hosts[1].Addr, port6High)
	mustMap(t, c, pinholeReq(target.Addr(), port6High, 10*time.Minute, nonceA))
	tg.Reboot(t)
	wantOpen(t, tg, target, false, "after the reboot")
	if err := c.Delete(ctx(t), igd.TCP, target.Addr(), port6High, nonceA); err != nil {
		t.Errorf("Delete after the reboot = %v, want nil", err)
	}
	mustMap(t, c, pinholeReq(target.Addr(), port6High, 10*time.Minute, nonceA))
	wantOpen(t, tg, target, true, "after the MAP that followed the reboot")
}

// testPinholeRestartKeeps: a daemon restart keeps the pinhole and its
// nonce (the rule and its description stay in the firewall): the nonce
// still closes it.
func testPinholeRestartKeeps(t *testing.T, tg Target6) {
	c := client6(t, tg, 0)
	target := netip.AddrPortFrom(tg.Hosts[1].Addr, port6High)
	mustMap(t, c, pinholeReq(target.Addr(), port6High, 10*time.Minute, nonceA))
	tg.Restart(t)
	wantOpen(t, tg, target, true, "after the restart")
	if err := c.Delete(ctx(t), igd.TCP, target.Addr(), port6High, nonceA); err != nil {
		t.Fatalf("Delete with the nonce after the restart = %v", err)
	}
	wantOpen(t, tg, target, false, "after the delete")
}

// testPinholeSuggestedAddress: the external address of a pinhole is its
// internal one: a suggested :: or another address is answered with it,
// unless PREFER_FAILURE asks for the other one (CANNOT_PROVIDE_EXTERNAL).
func testPinholeSuggestedAddress(t *testing.T, tg Target6) {
	h, target := tg.Hosts[0], tg.Hosts[1].Addr
	other := netip.MustParseAddr("2001:db8:ff::5")
	req := mapRequest6(h.Addr, 600, nonceA, 6, port6High, port6High, thirdParty(target))
	putAddr(req[44:60], other)
	a := exchange6(t, tg, 0, req)
	wantAnswer(t, a, 2, 1, pcpwire.Success)
	if got := netip.AddrFrom16([16]byte(a[44:60])); got != target {
		t.Errorf("external address answered to a suggested %s: %s, want %s", other, got, target)
	}
	req = mapRequest6(h.Addr, 600, nonceA, 6, port6High+1, port6High+1, thirdParty(target), preferFailure())
	putAddr(req[44:60], other)
	wantAnswer(t, exchange6(t, tg, 0, req), 2, 1, pcpwire.CannotProvideExternal)
	wantOpen(t, tg, netip.AddrPortFrom(target, port6High+1), false, "after CANNOT_PROVIDE_EXTERNAL")
	a = exchange6(t, tg, 0, mapRequest6(h.Addr, 600, nonceA, 6, port6High+2, port6High+2, thirdParty(target)))
	wantAnswer(t, a, 2, 1, pcpwire.Success)
	if got := netip.AddrFrom16([16]byte(a[44:60])); got != target {
		t.Errorf("external address answered to a suggested ::, %s, want %s", got, target)
	}
}

// mapRequest6 is mapRequest with :: as the suggested external address.
func mapRequest6(clientAddr netip.Addr, lifetime uint32, nonce [12]byte, proto uint8, intPort, extPort uint16, opts ...[]byte) []byte {
	b := mapRequest(clientAddr, lifetime, nonce, proto, intPort, extPort, opts...)
	clear(b[44:60])
	return b
}

// exchange6 is exchange over IPv6.
func exchange6(t *testing.T, tg Target6, i int, req []byte) []byte {
	t.Helper()
	return exchangeOn(t, tg.Hosts[i].DialContext, "udp6", tg.Server, req)
}
