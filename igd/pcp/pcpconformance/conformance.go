package pcpconformance

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/internal/pcpwire"
)

// Config is the server a case asks a Backend for.
type Config struct {
	// AllowThirdParty asks for pcp_allow_thirdparty=yes.
	AllowThirdParty bool
	// MinLifetime and MaxLifetime ask for these lifetime bounds. Zero means
	// the backend's default (miniupnpd's 120 s and 86400 s).
	MinLifetime, MaxLifetime time.Duration
}

// Host is one LAN host as a case sees it.
type Host struct {
	// Addr is the host's address: what the server sees as the sender.
	Addr netip.Addr
	// DialContext opens UDP sockets from the host (pcp.Config.DialContext).
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)
	// UPnP reads (and writes) the router's table from the host.
	UPnP igd.Client
}

// Target is one fresh server with an empty table.
type Target struct {
	// Server is the PCP server's address (pcp.Config.Server).
	Server netip.AddrPort
	// ExternalIP is the external address the server grants.
	ExternalIP netip.Addr
	// Hosts are three different LAN hosts.
	Hosts [3]Host
	// ListenAnnounce opens, on Hosts[0], the socket the server's
	// unsolicited ANNOUNCE reaches (pcp.Config.ListenPacket).
	ListenAnnounce func(ctx context.Context, network, addr string) (net.PacketConn, error)
	// Restart restarts the daemon (table kept); Reboot reboots the router
	// (table wiped). Both make the server send an ANNOUNCE.
	Restart, Reboot func(t testing.TB)
	// EpochKeptOnRestart says the epoch keeps counting across Restart
	// (miniupnpd's system_uptime=yes, as in the lab); otherwise it starts
	// again from 0 and the client's epoch check sees the restart.
	EpochKeptOnRestart bool
	// Step advances the server's clock. Nil: the server runs on real time.
	Step func(d time.Duration)
}

// Backend is a server implementation under test.
type Backend struct {
	// Start returns a fresh server configured by cfg; it registers its
	// cleanups with t and fails or skips t when it cannot start.
	Start func(t *testing.T, cfg Config) Target
}

// CallTimeout bounds each client call and raw exchange of the suite. A LAN
// server answers in milliseconds; the bound only stops a hung backend.
const CallTimeout = 10 * time.Second

// Ports the cases map; the lab's permission rules allow 1024-65535.
const (
	portInt  = 30080
	portExt  = 40080
	portNext = 40081
)

// Nonces. nonceC has no symmetric 32-bit word: it shows the byte order of
// the description.
var (
	nonceA = [12]byte{0xa, 0xa, 0xa, 0xa, 0xa, 0xa, 0xa, 0xa, 0xa, 0xa, 0xa, 0xa}
	nonceB = [12]byte{0xb, 0xb, 0xb, 0xb, 0xb, 0xb, 0xb, 0xb, 0xb, 0xb, 0xb, 0xb}
	nonceC = [12]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
)

// Description is the description miniupnpd 2.3.1 on a little-endian
// machine (the lab's) gives a PCP mapping: "PCP MAP " and the nonce as
// three 32-bit words in host byte order, %08x each (pcpserver.c,
// ValidatePCPMsg). Bytes 01 02 03 04 read "04030201".
func Description(nonce [12]byte) string {
	return fmt.Sprintf("PCP MAP %08x%08x%08x",
		binary.LittleEndian.Uint32(nonce[0:]), binary.LittleEndian.Uint32(nonce[4:]), binary.LittleEndian.Uint32(nonce[8:]))
}

type testCase struct {
	name string
	cfg  Config
	run  func(t *testing.T, tg Target)
}

// Run runs every case against b, each as a subtest on its own server.
func Run(t *testing.T, b Backend) {
	t.Helper()
	if b.Start == nil {
		t.Fatal("pcpconformance: Backend.Start is nil")
	}
	for _, tc := range cases() {
		t.Run(tc.name, func(t *testing.T) {
			tc.run(t, b.Start(t, tc.cfg))
		})
	}
}

func cases() []testCase {
	allow := Config{AllowThirdParty: true}
	return []testCase{
		{name: "MapDeleteRoundTrip", run: testRoundTrip},
		{name: "DescriptionNamesTheNonce", run: testDescription},
		{name: "DeleteNeedsTheNonce", run: testDeleteNeedsNonce},
		{name: "ThirdParty/Allowed", cfg: allow, run: testThirdPartyAllowed},
		{name: "ThirdParty/Refused", run: testThirdPartyRefused},
		{name: "ThirdParty/NamesTheSender", cfg: allow, run: testThirdPartySender(pcpwire.MalformedRequest)},
		{name: "ThirdParty/NamesTheSenderRefused", run: testThirdPartySender(pcpwire.UnsuppOption)},
		{name: "LifetimeClamped", cfg: Config{MinLifetime: 60 * time.Second, MaxLifetime: 600 * time.Second}, run: testLifetimeClamp},
		{name: "PreferFailure", run: testPreferFailure},
		{name: "PreferFailure/RefusedPort", run: testRefusedPort},
		{name: "ReMapTakesOver", cfg: allow, run: testReMapTakesOver},
		{name: "Restart", run: testRestart},
		{name: "Reboot", run: testReboot},
		{name: "Raw/UnknownOpcode", run: testUnknownOpcode},
		{name: "Raw/UnknownVersion", run: testUnknownVersion},
		{name: "Raw/ShortRequest", run: testShortRequest},
		{name: "Raw/AnnounceRequest", run: testAnnounceRequest},
		{name: "Raw/AddressMismatch", run: testAddressMismatch},
		{name: "Raw/SuggestedExternalAddress", run: testSuggestedAddress},
		{name: "Raw/Options", run: testOptions},
		{name: "NoSuggestedPortTakesTheInternalPort", run: testNoSuggestedPort},
		{name: "DeleteFindsTheNewestMapping", run: testDeleteNewest},
		{name: "NATPMPExternalAddress", run: testExternalAddr},
	}
}

// ctx returns a context for one call, cancelled at the end of the test,
// whose logger writes to t (shown only for failed tests).
func ctx(t *testing.T) context.Context {
	t.Helper()
	logger, _ := ktesting.NewTestContext(t)
	c, cancel := context.WithTimeout(klog.NewContext(t.Context(), logger), CallTimeout)
	t.Cleanup(cancel)
	return c
}

// client is a pcp.Client acting from host i.
func client(t *testing.T, tg Target, i int, listen func(ctx context.Context, network, addr string) (net.PacketConn, error)) *pcpwire.Client {
	t.Helper()
	c, err := pcpwire.NewClient(pcpwire.Config{Server: tg.Server, DialContext: tg.Hosts[i].DialContext, ListenPacket: listen, CallTimeout: CallTimeout})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func mustMap(t *testing.T, c *pcpwire.Client, req pcpwire.MapRequest) pcpwire.MapResult {
	t.Helper()
	got, err := c.Map(ctx(t), req)
	if err != nil {
		t.Fatalf("Map(%+v): %v", req, err)
	}
	return got
}

// wantMapping fails t unless the table holds key -> want with description d.
func wantMapping(t *testing.T, tg Target, key igd.Key, want netip.AddrPort, d string) {
	t.Helper()
	m, err := tg.Hosts[0].UPnP.GetPortMapping(ctx(t), key.Protocol, key.ExternalPort)
	if err != nil {
		t.Fatalf("GetPortMapping(%s) = %v, want %s %q", key, err, want, d)
	}
	if got := netip.AddrPortFrom(m.InternalClient, m.InternalPort); got != want || m.Description != d {
		t.Fatalf("table holds %s -> %s %q, want %s %q", key, got, m.Description, want, d)
	}
}

func wantNoMapping(t *testing.T, tg Target, key igd.Key) {
	t.Helper()
	if m, err := tg.Hosts[0].UPnP.GetPortMapping(ctx(t), key.Protocol, key.ExternalPort); !errors.Is(err, igd.ErrNoSuchEntry) {
		t.Fatalf("GetPortMapping(%s) = %+v, %v; want igd.ErrNoSuchEntry", key, m, err)
	}
}

var tcpExt = igd.Key{Protocol: igd.TCP, ExternalPort: portExt}

// testRoundTrip: a MAP for the sender's own port is granted as asked and
// shows in the table; a delete with its nonce removes it; a second delete
// finds nothing: NO_RESOURCES.
func testRoundTrip(t *testing.T, tg Target) {
	c := client(t, tg, 0, nil)
	got := mustMap(t, c, pcpwire.MapRequest{Protocol: igd.TCP, InternalPort: portInt, ExternalPort: portExt, Lifetime: time.Hour, Nonce: nonceA})
	if got.ExternalAddr != tg.ExternalIP || got.ExternalPort != portExt || got.Lifetime != time.Hour {
		t.Errorf("Map = %+v, want %s:%d for 1h", got, tg.ExternalIP, portExt)
	}
	wantMapping(t, tg, tcpExt, netip.AddrPortFrom(tg.Hosts[0].Addr, portInt), Description(nonceA))
	if err := c.Delete(ctx(t), igd.TCP, netip.Addr{}, portInt, nonceA); err != nil {
		t.Fatalf("Delete with the nonce = %v", err)
	}
	wantNoMapping(t, tg, tcpExt)
	if err := c.Delete(ctx(t), igd.TCP, netip.Addr{}, portInt, nonceA); !errors.Is(err, pcpwire.ErrNoResources) {
		t.Errorf("second Delete = %v, want ErrNoResources", err)
	}
	// A renewal (same nonce) keeps the port; UDP is a key of its own.
	mustMap(t, c, pcpwire.MapRequest{Protocol: igd.TCP, InternalPort: portInt, ExternalPort: portExt, Lifetime: time.Hour, Nonce: nonceA})
	if got := mustMap(t, c, pcpwire.MapRequest{Protocol: igd.TCP, InternalPort: portInt, ExternalPort: portExt, Lifetime: 2 * time.Hour, Nonce: nonceA}); got.ExternalPort != portExt || got.Lifetime != 2*time.Hour {
		t.Errorf("renewal = %+v, want port %d for 2h", got, portExt)
	}
	if err := c.Delete(ctx(t), igd.TCP, netip.Addr{}, portInt, nonceA); err != nil {
		t.Fatalf("Delete after the renewal = %v", err)
	}
	got = mustMap(t, c, pcpwire.MapRequest{Protocol: igd.UDP, InternalPort: portInt, ExternalPort: portExt, Lifetime: time.Hour, Nonce: nonceA})
	if got.ExternalPort != portExt {
		t.Errorf("UDP Map got port %d, want %d", got.ExternalPort, portExt)
	}
	if err := c.Delete(ctx(t), igd.UDP, netip.Addr{}, portInt, nonceA); err != nil {
		t.Errorf("UDP Delete = %v", err)
	}
}

// testDescription: the description is the nonce in the router's byte order,
// which a table reader must use to find its mappings.
func testDescription(t *testing.T, tg Target) {
	c := client(t, tg, 0, nil)
	mustMap(t, c, pcpwire.MapRequest{Protocol: igd.TCP, InternalPort: portInt, ExternalPort: portExt, Lifetime: time.Hour, Nonce: nonceC})
	wantMapping(t, tg, tcpExt, netip.AddrPortFrom(tg.Hosts[0].Addr, portInt), Description(nonceC))
	if err := c.Delete(ctx(t), igd.TCP, netip.Addr{}, portInt, nonceC); err != nil {
		t.Fatalf("Delete with the nonce = %v", err)
	}
}

// testDeleteNeedsNonce: a delete with another nonce is NOT_AUTHORIZED and
// the mapping stays; a UPnP mapping (its description is no nonce) cannot be
// deleted by PCP either.
func testDeleteNeedsNonce(t *testing.T, tg Target) {
	c := client(t, tg, 0, nil)
	mustMap(t, c, pcpwire.MapRequest{Protocol: igd.TCP, InternalPort: portInt, ExternalPort: portExt, Lifetime: time.Hour, Nonce: nonceA})
	if err := c.Delete(ctx(t), igd.TCP, netip.Addr{}, portInt, nonceB); !errors.Is(err, pcpwire.ErrNotAuthorized) {
		t.Fatalf("Delete with another nonce = %v, want ErrNotAuthorized", err)
	}
	wantMapping(t, tg, tcpExt, netip.AddrPortFrom(tg.Hosts[0].Addr, portInt), Description(nonceA))

	upnp := igd.Mapping{Protocol: igd.TCP, ExternalPort: portNext, InternalClient: tg.Hosts[0].Addr, InternalPort: portInt + 1, Description: "upnp", Lease: time.Hour}
	if _, err := tg.Hosts[0].UPnP.AddPortMapping(ctx(t), upnp); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx(t), igd.TCP, netip.Addr{}, portInt+1, nonceA); !errors.Is(err, pcpwire.ErrNotAuthorized) {
		t.Errorf("PCP Delete of a UPnP mapping = %v, want ErrNotAuthorized", err)
	}
}

// testThirdPartyAllowed: with THIRD_PARTY allowed, a MAP for another host
// maps to that host, and the sender's Delete with the nonce removes it.
func testThirdPartyAllowed(t *testing.T, tg Target) {
	c := client(t, tg, 0, nil)
	other := tg.Hosts[1].Addr
	got := mustMap(t, c, pcpwire.MapRequest{Protocol: igd.TCP, InternalAddr: other, InternalPort: portInt, ExternalPort: portExt, Lifetime: time.Hour, Nonce: nonceA})
	if got.ExternalPort != portExt {
		t.Errorf("Map got port %d, want %d", got.ExternalPort, portExt)
	}
	wantMapping(t, tg, tcpExt, netip.AddrPortFrom(other, portInt), Description(nonceA))
	if err := c.Delete(ctx(t), igd.TCP, other, portInt, nonceA); err != nil {
		t.Fatalf("Delete = %v", err)
	}
	wantNoMapping(t, tg, tcpExt)
}

// testThirdPartyRefused: without the setting, THIRD_PARTY is UNSUPP_OPTION
// and nothing is installed; the sender's own mapping still works.
func testThirdPartyRefused(t *testing.T, tg Target) {
	c := client(t, tg, 0, nil)
	_, err := c.Map(ctx(t), pcpwire.MapRequest{Protocol: igd.TCP, InternalAddr: tg.Hosts[1].Addr, InternalPort: portInt, ExternalPort: portExt, Lifetime: time.Hour, Nonce: nonceA})
	if !errors.Is(err, pcpwire.ErrUnsupportedOption) {
		t.Fatalf("Map for another host = %v, want ErrUnsupportedOption", err)
	}
	wantNoMapping(t, tg, tcpExt)
	mustMap(t, c, pcpwire.MapRequest{Protocol: igd.TCP, InternalAddr: tg.Hosts[0].Addr, InternalPort: portInt, ExternalPort: portExt, Lifetime: time.Hour, Nonce: nonceA})
	wantMapping(t, tg, tcpExt, netip.AddrPortFrom(tg.Hosts[0].Addr, portInt), Description(nonceA))
}

// testThirdPartySender: THIRD_PARTY naming the sender itself is
// MALFORMED_REQUEST when THIRD_PARTY is allowed; when it is not, the
// refusal (UNSUPP_OPTION) comes first. The client never sends it: raw.
func testThirdPartySender(want pcpwire.ResultCode) func(t *testing.T, tg Target) {
	return func(t *testing.T, tg Target) {
		h := tg.Hosts[0]
		req := mapRequest(h.Addr, 3600, nonceA, 6, portInt, portExt, thirdParty(h.Addr))
		a := exchange(t, tg, 0, req)
		wantAnswer(t, a, 2, 1, want)
		wantNoMapping(t, tg, tcpExt)
	}
}

// testLifetimeClamp: lifetimes are clamped to [min, max] and the answer
// carries the clamped value.
func testLifetimeClamp(t *testing.T, tg Target) {
	c := client(t, tg, 0, nil)
	for i, tt := range []struct{ ask, want time.Duration }{
		{10 * time.Second, 60 * time.Second},
		{300 * time.Second, 300 * time.Second},
		{time.Hour, 600 * time.Second},
	} {
		got := mustMap(t, c, pcpwire.MapRequest{Protocol: igd.UDP, InternalPort: portInt + uint16(i), ExternalPort: portExt + uint16(i), Lifetime: tt.ask, Nonce: nonceA})
		if got.Lifetime != tt.want {
			t.Errorf("Map with lifetime %v granted %v, want %v", tt.ask, got.Lifetime, tt.want)
		}
		m, err := tg.Hosts[0].UPnP.GetPortMapping(ctx(t), igd.UDP, portExt+uint16(i))
		if err != nil {
			t.Fatal(err)
		}
		if m.Lease > tt.want || m.Lease < tt.want-5*time.Second {
			t.Errorf("table lease of a %v grant = %v", tt.want, m.Lease)
		}
	}
}

// testPreferFailure: with another host's mapping on the port, the server
// itself answers SUCCESS on the next free port despite PREFER_FAILURE (the
// CHECK_PORTINUSE skip comes first); the client deletes that mapping and
// reports ErrCannotProvideExternal. The other mapping stays. Without
// PREFER_FAILURE the next free port is granted.
func testPreferFailure(t *testing.T, tg Target) {
	theirs := igd.Mapping{Protocol: igd.TCP, ExternalPort: portExt, InternalClient: tg.Hosts[1].Addr, InternalPort: portInt + 1, Description: "theirs", Lease: time.Hour}
	if _, err := tg.Hosts[1].UPnP.AddPortMapping(ctx(t), theirs); err != nil {
		t.Fatal(err)
	}
	h := tg.Hosts[0]
	a := exchange(t, tg, 0, mapRequest(h.Addr, 3600, nonceA, 6, portInt, portExt, preferFailure()))
	wantAnswer(t, a, 2, 1, pcpwire.Success)
	if got := binary.BigEndian.Uint16(a[24+18:]); got != portNext {
		t.Errorf("server's own answer to PREFER_FAILURE on a held port: port %d, want %d (the next free one)", got, portNext)
	}
	c := client(t, tg, 0, nil)
	if err := c.Delete(ctx(t), igd.TCP, netip.Addr{}, portInt, nonceA); err != nil {
		t.Fatalf("Delete of the raw mapping = %v", err)
	}

	res, err := c.Map(ctx(t), pcpwire.MapRequest{Protocol: igd.TCP, InternalPort: portInt, ExternalPort: portExt, Lifetime: time.Hour, PreferFailure: true, Nonce: nonceA})
	if !errors.Is(err, pcpwire.ErrCannotProvideExternal) {
		t.Fatalf("Map with PreferFailure on a held port = %+v, %v; want ErrCannotProvideExternal", res, err)
	}
	wantMapping(t, tg, tcpExt, netip.AddrPortFrom(tg.Hosts[1].Addr, portInt+1), "theirs")
	wantNoMapping(t, tg, igd.Key{Protocol: igd.TCP, ExternalPort: portNext})

	got := mustMap(t, c, pcpwire.MapRequest{Protocol: igd.TCP, InternalPort: portInt, ExternalPort: portExt, Lifetime: time.Hour, Nonce: nonceA})
	if got.ExternalPort != portNext {
		t.Errorf("Map without PreferFailure got port %d, want %d", got.ExternalPort, portNext)
	}
}

// portRefused is an external port the lab's permission rules (allow
// 1024-65535 only) refuse; portFirstAllowed is the first they allow.
const (
	portRefused      = 80
	portFirstAllowed = 1024
)

// testRefusedPort: a MAP with PREFER_FAILURE for a port the server's
// permission rules refuse is answered CANNOT_PROVIDE_EXTERNAL by the server
// itself (its permission check comes before the CHECK_PORTINUSE skip),
// unlike a port another host holds (testPreferFailure), and maps nothing.
// Without PREFER_FAILURE the server maps the first port past it that its
// rules allow: such a MAP is no probe of the port, it takes another one.
func testRefusedPort(t *testing.T, tg Target) {
	h := tg.Hosts[0]
	a := exchange(t, tg, 0, mapRequest(h.Addr, 3600, nonceA, 6, portInt, portRefused, preferFailure()))
	wantAnswer(t, a, 2, 1, pcpwire.CannotProvideExternal)
	wantNoMapping(t, tg, igd.Key{Protocol: igd.TCP, ExternalPort: portRefused})

	c := client(t, tg, 0, nil)
	_, err := c.Map(ctx(t), pcpwire.MapRequest{Protocol: igd.TCP, InternalPort: portInt, ExternalPort: portRefused, Lifetime: time.Hour, PreferFailure: true, Nonce: nonceA})
	var re *pcpwire.ResultError
	if !errors.As(err, &re) || re.Code != pcpwire.CannotProvideExternal {
		t.Fatalf("Map with PreferFailure on a refused port = %v, want the server's CANNOT_PROVIDE_EXTERNAL (a *pcpwire.ResultError)", err)
	}

	got := mustMap(t, c, pcpwire.MapRequest{Protocol: igd.TCP, InternalPort: portInt, ExternalPort: portRefused, Lifetime: time.Hour, Nonce: nonceA})
	if got.ExternalPort != portFirstAllowed {
		t.Errorf("Map without PreferFailure on a refused port got port %d, want %d (the first allowed)", got.ExternalPort, portFirstAllowed)
	}
	wantMapping(t, tg, igd.Key{Protocol: igd.TCP, ExternalPort: portFirstAllowed}, netip.AddrPortFrom(h.Addr, portInt), Description(nonceA))
}

// testReMapTakesOver: a MAP for the same internal address, port and
// protocol on the same external port replaces the mapping whatever its
// nonce, even with PREFER_FAILURE and from a third host; the first owner's
// Delete is refused, the new holder's works. The target host itself takes
// over with no option.
func testReMapTakesOver(t *testing.T, tg Target) {
	target := tg.Hosts[1].Addr
	owner, other := client(t, tg, 0, nil), client(t, tg, 2, nil)
	req := pcpwire.MapRequest{Protocol: igd.TCP, InternalAddr: target, InternalPort: portInt, ExternalPort: portExt, Lifetime: time.Hour, Nonce: nonceA}
	mustMap(t, owner, req)
	req2 := req
	req2.Nonce, req2.PreferFailure = nonceB, true
	if got := mustMap(t, other, req2); got.ExternalPort != portExt {
		t.Errorf("re-MAP got port %d, want %d", got.ExternalPort, portExt)
	}
	wantMapping(t, tg, tcpExt, netip.AddrPortFrom(target, portInt), Description(nonceB))
	if err := owner.Delete(ctx(t), igd.TCP, target, portInt, nonceA); !errors.Is(err, pcpwire.ErrNotAuthorized) {
		t.Errorf("first owner's Delete after the takeover = %v, want ErrNotAuthorized", err)
	}
	if err := other.Delete(ctx(t), igd.TCP, target, portInt, nonceB); err != nil {
		t.Errorf("new holder's Delete = %v", err)
	}
	wantNoMapping(t, tg, tcpExt)

	mustMap(t, owner, req)
	mustMap(t, client(t, tg, 1, nil), pcpwire.MapRequest{Protocol: igd.TCP, InternalPort: portInt, ExternalPort: portExt, Lifetime: time.Hour, Nonce: nonceB})
	wantMapping(t, tg, tcpExt, netip.AddrPortFrom(target, portInt), Description(nonceB))
}

// listen starts c.ListenAnnounce and waits until its socket is open.
func listen(t *testing.T, tg Target) *pcpwire.Client {
	t.Helper()
	opened := make(chan struct{})
	c := client(t, tg, 0, func(ctx context.Context, network, addr string) (net.PacketConn, error) {
		defer close(opened)
		return tg.ListenAnnounce(ctx, network, addr)
	})
	lctx, stop := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- c.ListenAnnounce(lctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("ListenAnnounce = %v", err)
		}
	})
	<-opened
	return c
}

func wantRestart(t *testing.T, c *pcpwire.Client, why string) {
	t.Helper()
	select {
	case <-c.Restarts():
	case <-time.After(CallTimeout):
		t.Fatalf("no restart signalled within %v: %s", CallTimeout, why)
	}
}

func wantNoRestart(t *testing.T, c *pcpwire.Client, why string) {
	t.Helper()
	select {
	case <-c.Restarts():
		t.Errorf("restart signalled: %s", why)
	default:
	}
}

// testRestart: a daemon restart keeps the table and sends an ANNOUNCE that
// signals Restarts. Where the epoch keeps counting (system_uptime=yes) the
// epoch check stays quiet; where it starts again, a client that missed the
// ANNOUNCE sees the restart in its next answer.
func testRestart(t *testing.T, tg Target) {
	c := listen(t, tg)
	quiet := client(t, tg, 1, nil) // hears no ANNOUNCE
	req := pcpwire.MapRequest{Protocol: igd.TCP, InternalPort: portInt, ExternalPort: portExt, Lifetime: time.Hour, Nonce: nonceA}
	before := mustMap(t, c, req)
	qreq := req
	qreq.InternalPort, qreq.ExternalPort = portInt+1, portNext
	mustMap(t, quiet, qreq)
	// Let the epoch reach 2 s, so that a reset shows (RFC 6887 §8.5 allows
	// a second of slack).
	if tg.Step != nil {
		tg.Step(3 * time.Second)
		for _, cl := range []struct {
			c   *pcpwire.Client
			req pcpwire.MapRequest
		}{{c, req}, {quiet, qreq}} {
			mustMap(t, cl.c, cl.req)
			wantRestart(t, cl.c, "the server's clock jumped 3 s, which the epoch check also reads as lost state")
			before = mustMap(t, cl.c, cl.req) // a quiet baseline
		}
		before = mustMap(t, c, req)
	} else {
		time.Sleep(2500 * time.Millisecond)
		mustMap(t, quiet, qreq)
	}
	wantNoRestart(t, c, "before the restart")
	wantNoRestart(t, quiet, "before the restart")

	tg.Restart(t)
	wantRestart(t, c, "the ANNOUNCE")
	wantMapping(t, tg, tcpExt, netip.AddrPortFrom(tg.Hosts[0].Addr, portInt), Description(nonceA))
	after := mustMap(t, c, req)
	t.Logf("epoch before %d, after %d", before.Epoch, after.Epoch)
	mustMap(t, quiet, qreq)
	if tg.EpochKeptOnRestart {
		if after.Epoch < before.Epoch {
			t.Errorf("epoch went from %d to %d; it should keep counting", before.Epoch, after.Epoch)
		}
		wantNoRestart(t, c, "the epoch check, though the epoch kept counting")
		wantNoRestart(t, quiet, "the epoch check, though the epoch kept counting")
	} else {
		wantRestart(t, quiet, "the epoch check, the epoch started again")
	}
}

// testReboot: a reboot wipes the table and sends an ANNOUNCE.
func testReboot(t *testing.T, tg Target) {
	c := listen(t, tg)
	mustMap(t, c, pcpwire.MapRequest{Protocol: igd.TCP, InternalPort: portInt, ExternalPort: portExt, Lifetime: time.Hour, Nonce: nonceA})
	tg.Reboot(t)
	wantRestart(t, c, "the ANNOUNCE")
	wantNoMapping(t, tg, tcpExt)
	if err := c.Delete(ctx(t), igd.TCP, netip.Addr{}, portInt, nonceA); !errors.Is(err, pcpwire.ErrNoResources) {
		t.Errorf("Delete after the reboot = %v, want ErrNoResources", err)
	}
}

// testUnknownOpcode: a version 2 request with an opcode the server does not
// know is UNSUPP_OPCODE, lifetime 0, the same length as the request.
func testUnknownOpcode(t *testing.T, tg Target) {
	req := mapRequest(tg.Hosts[0].Addr, 3600, nonceA, 6, portInt, portExt)
	req[1] = 99
	a := exchange(t, tg, 0, req)
	wantAnswer(t, a, 2, 99, pcpwire.UnsuppOpcode)
	if len(a) != len(req) {
		t.Errorf("answer is %d bytes, want %d", len(a), len(req))
	}
}

// testUnknownVersion: a request of version 3 is UNSUPP_VERSION, in an
// answer of version 2 (the highest the server speaks).
func testUnknownVersion(t *testing.T, tg Target) {
	req := mapRequest(tg.Hosts[0].Addr, 3600, nonceA, 6, portInt, portExt)
	req[0] = 3
	wantAnswer(t, exchange(t, tg, 0, req), 2, 1, pcpwire.UnsuppVersion)
	wantNoMapping(t, tg, tcpExt)
}

// testShortRequest: a request shorter than the header is
// MALFORMED_REQUEST in a 24-byte answer that says version 0, opcode 0 (the
// header was never read).
func testShortRequest(t *testing.T, tg Target) {
	a := exchange(t, tg, 0, []byte{2, 1, 0, 0, 0, 0, 0x0e, 0x10})
	wantAnswer(t, a, 0, 0, pcpwire.MalformedRequest)
	if len(a) != 24 {
		t.Errorf("answer is %d bytes, want 24", len(a))
	}
}

// testAnnounceRequest: an ANNOUNCE request is answered SUCCESS with the
// epoch.
func testAnnounceRequest(t *testing.T, tg Target) {
	req := make([]byte, 24)
	req[0] = 2
	putAddr(req[8:24], tg.Hosts[0].Addr)
	wantAnswer(t, exchange(t, tg, 0, req), 2, 0, pcpwire.Success)
}

// testAddressMismatch: a client address that is not the sender's is
// ADDRESS_MISMATCH (a NAT between client and server); the client reports
// ErrAddressMismatch.
func testAddressMismatch(t *testing.T, tg Target) {
	req := mapRequest(tg.Hosts[1].Addr, 3600, nonceA, 6, portInt, portExt)
	wantAnswer(t, exchange(t, tg, 0, req), 2, 1, pcpwire.AddressMismatch)
	wantNoMapping(t, tg, tcpExt)
}

// wantAnswer checks an answer's version, opcode (R bit set) and result.
func wantAnswer(t *testing.T, a []byte, version, opcode uint8, result pcpwire.ResultCode) {
	t.Helper()
	if len(a) < 24 {
		t.Fatalf("answer of %d bytes: % x", len(a), a)
	}
	if a[0] != version || a[1] != 0x80|opcode || pcpwire.ResultCode(a[3]) != result {
		t.Fatalf("answer version %d, opcode %#x, result %s; want %d, %#x, %s", a[0], a[1], pcpwire.ResultCode(a[3]), version, 0x80|opcode, result)
	}
	var wantLifetime uint32
	if result == pcpwire.NoResources || result == pcpwire.NetworkFailure {
		wantLifetime = 30
	}
	if result != pcpwire.Success {
		if got := binary.BigEndian.Uint32(a[4:]); got != wantLifetime {
			t.Errorf("error answer lifetime %d, want %d", got, wantLifetime)
		}
	}
}

// Raw messages, built here rather than with igd/pcp's codec so that the
// suite does not share the client's mistakes.

func putAddr(b []byte, a netip.Addr) {
	s := a.Unmap().As16() // IPv4-mapped for IPv4
	copy(b, s[:])
}

// mapRequest is a version 2 MAP request from client with options appended.
func mapRequest(clientAddr netip.Addr, lifetime uint32, nonce [12]byte, proto uint8, intPort, extPort uint16, opts ...[]byte) []byte {
	b := make([]byte, 60)
	b[0], b[1] = 2, 1
	binary.BigEndian.PutUint32(b[4:], lifetime)
	putAddr(b[8:24], clientAddr)
	copy(b[24:36], nonce[:])
	b[36] = proto
	binary.BigEndian.PutUint16(b[40:], intPort)
	binary.BigEndian.PutUint16(b[42:], extPort)
	putAddr(b[44:60], netip.IPv4Unspecified())
	for _, o := range opts {
		b = append(b, o...)
	}
	return b
}

func thirdParty(a netip.Addr) []byte {
	o := make([]byte, 20)
	o[0] = 1
	binary.BigEndian.PutUint16(o[2:], 16)
	putAddr(o[4:], a)
	return o
}

func preferFailure() []byte { return []byte{2, 0, 0, 0} }

// exchange sends req from host i and returns the first answer, resending
// every second until CallTimeout.
func exchange(t *testing.T, tg Target, i int, req []byte) []byte {
	t.Helper()
	return exchangeOn(t, tg.Hosts[i].DialContext, "udp4", tg.Server, req)
}

// exchangeOn is exchange through dial on network to server.
func exchangeOn(t *testing.T, dial func(ctx context.Context, network, addr string) (net.Conn, error), network string, server netip.AddrPort, req []byte) []byte {
	t.Helper()
	c := ctx(t)
	conn, err := dial(c, network, server.String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	buf := make([]byte, 2048)
	for c.Err() == nil {
		if _, err := conn.Write(req); err != nil {
			t.Fatalf("send: %v", err)
		}
		conn.SetReadDeadline(time.Now().Add(time.Second))
		n, err := conn.Read(buf)
		if err == nil {
			return buf[:n]
		}
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("receive: %v", err)
		}
	}
	t.Fatalf("no answer to % x within %v", req, CallTimeout)
	return nil
}

// testSuggestedAddress: a suggested external address that is not the
// router's is replaced by the router's, unless PREFER_FAILURE asks for it
// (CANNOT_PROVIDE_EXTERNAL).
func testSuggestedAddress(t *testing.T, tg Target) {
	h := tg.Hosts[0]
	req := mapRequest(h.Addr, 3600, nonceA, 6, portInt, portExt)
	putAddr(req[44:60], netip.MustParseAddr("203.0.113.5"))
	a := exchange(t, tg, 0, req)
	wantAnswer(t, a, 2, 1, pcpwire.Success)
	if got := netip.AddrFrom16([16]byte(a[44:60])).Unmap(); got != tg.ExternalIP {
		t.Errorf("granted external address %s, want %s", got, tg.ExternalIP)
	}
	req = mapRequest(h.Addr, 3600, nonceA, 6, portInt+1, portNext, preferFailure())
	putAddr(req[44:60], netip.MustParseAddr("203.0.113.5"))
	wantAnswer(t, exchange(t, tg, 0, req), 2, 1, pcpwire.CannotProvideExternal)
	wantNoMapping(t, tg, igd.Key{Protocol: igd.TCP, ExternalPort: portNext})
}

// testOptions: an unknown mandatory option (code < 128) is UNSUPP_OPTION,
// an unknown optional one is ignored, PREFER_FAILURE without a suggested
// port or address is MALFORMED_OPTION, and PREFER_FAILURE twice is
// MALFORMED_OPTION.
func testOptions(t *testing.T, tg Target) {
	h := tg.Hosts[0]
	wantAnswer(t, exchange(t, tg, 0, mapRequest(h.Addr, 3600, nonceA, 6, portInt, portExt, []byte{99, 0, 0, 0})), 2, 1, pcpwire.UnsuppOption)
	wantNoMapping(t, tg, tcpExt)
	wantAnswer(t, exchange(t, tg, 0, mapRequest(h.Addr, 3600, nonceA, 6, portInt, 0, preferFailure())), 2, 1, pcpwire.MalformedOption)
	wantAnswer(t, exchange(t, tg, 0, mapRequest(h.Addr, 3600, nonceA, 6, portInt, portExt, preferFailure(), preferFailure())), 2, 1, pcpwire.MalformedOption)
	wantNoMapping(t, tg, tcpExt)
	wantAnswer(t, exchange(t, tg, 0, mapRequest(h.Addr, 3600, nonceA, 6, portInt, portExt, []byte{200, 0, 0, 0})), 2, 1, pcpwire.Success)
	wantMapping(t, tg, tcpExt, netip.AddrPortFrom(h.Addr, portInt), Description(nonceA))
}

// testNoSuggestedPort: with no suggested external port the server tries
// the internal port first.
func testNoSuggestedPort(t *testing.T, tg Target) {
	c := client(t, tg, 0, nil)
	if got := mustMap(t, c, pcpwire.MapRequest{Protocol: igd.TCP, InternalPort: portExt, Lifetime: time.Hour, Nonce: nonceA}); got.ExternalPort != portExt {
		t.Errorf("Map with no suggested port got %d, want %d (the internal port)", got.ExternalPort, portExt)
	}
}

// testDeleteNewest: one internal port mapped on two external ports (a MAP
// suggesting another port adds a mapping, it does not move the first): a
// delete looks at the newest one only, and deletes it when its nonce is the
// request's.
func testDeleteNewest(t *testing.T, tg Target) {
	c := client(t, tg, 0, nil)
	mustMap(t, c, pcpwire.MapRequest{Protocol: igd.TCP, InternalPort: portInt, ExternalPort: portExt, Lifetime: time.Hour, Nonce: nonceA})
	mustMap(t, c, pcpwire.MapRequest{Protocol: igd.TCP, InternalPort: portInt, ExternalPort: portNext, Lifetime: time.Hour, Nonce: nonceB})
	self := netip.AddrPortFrom(tg.Hosts[0].Addr, portInt)
	wantMapping(t, tg, tcpExt, self, Description(nonceA))
	wantMapping(t, tg, igd.Key{Protocol: igd.TCP, ExternalPort: portNext}, self, Description(nonceB))
	if err := c.Delete(ctx(t), igd.TCP, netip.Addr{}, portInt, nonceA); !errors.Is(err, pcpwire.ErrNotAuthorized) {
		t.Errorf("Delete with the older mapping's nonce = %v, want ErrNotAuthorized (the newest is looked at)", err)
	}
	if err := c.Delete(ctx(t), igd.TCP, netip.Addr{}, portInt, nonceB); err != nil {
		t.Errorf("Delete with the newest mapping's nonce = %v", err)
	}
	wantNoMapping(t, tg, igd.Key{Protocol: igd.TCP, ExternalPort: portNext})
	if err := c.Delete(ctx(t), igd.TCP, netip.Addr{}, portInt, nonceA); err != nil {
		t.Errorf("Delete of the one left = %v", err)
	}
	wantNoMapping(t, tg, tcpExt)
}

// testExternalAddr: NAT-PMP's public address request, on the PCP port,
// answers the external address.
func testExternalAddr(t *testing.T, tg Target) {
	got, err := client(t, tg, 0, nil).ExternalAddr(ctx(t))
	if err != nil || got != tg.ExternalIP {
		t.Errorf("ExternalAddr = %v, %v; want %s", got, err, tg.ExternalIP)
	}
}
