package fake_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/pinhole"
	"github.com/ccmkit/ccmkit/internal/pcpwire"
)

// The conformance suite (igd/pcp/pcpconformance) holds the fake PCP server
// to miniupnpd's behaviour; these tests cover what is the fake's own: its
// table shared with UPnP, its clock, its ANNOUNCE destinations, its log.

var loopback = netip.MustParseAddr("127.0.0.1")

func newPCP(t *testing.T, cfg fake.PCPConfig) (*fake.PCPServer, *clocktesting.FakeClock) {
	t.Helper()
	clk := clocktesting.NewFakeClock(epoch)
	if cfg.Router == nil {
		cfg.Router = fake.NewRouter(fake.RouterConfig{Clock: clk})
	}
	s, err := fake.NewPCPServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, clk
}

func pcpClient(t *testing.T, s *fake.PCPServer) *pcpwire.Client {
	t.Helper()
	c, err := pcpwire.NewClient(pcpwire.Config{Server: s.Addr(), ListenPacket: s.ListenAnnounce})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

var nonce = [12]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}

// TestPCPSharesTheRouterTable: a PCP mapping reads through a fake.Server
// (UPnP over HTTP) with miniupnpd's description, and UPnP deletes it.
func TestPCPSharesTheRouterTable(t *testing.T) {
	s, _ := newPCP(t, fake.PCPConfig{})
	c := pcpClient(t, s)
	got, err := c.Map(tctx(t), pcpwire.MapRequest{Protocol: igd.TCP, InternalPort: 30080, ExternalPort: 8080, Lifetime: time.Hour, Nonce: nonce})
	if err != nil {
		t.Fatal(err)
	}
	if got.ExternalAddr != fake.DefaultExternalIP || got.ExternalPort != 8080 || got.Lifetime != time.Hour {
		t.Errorf("Map = %+v", got)
	}
	u := serverClient(t, s.Router(), fake.WANIPConnection2, loopback)
	m, err := u.GetPortMapping(tctx(t), igd.TCP, 8080)
	if err != nil {
		t.Fatal(err)
	}
	want := "PCP MAP 04030201080706050c0b0a09"
	if m.InternalClient != loopback || m.InternalPort != 30080 || m.Description != want || m.Description != fake.PCPDescription(nonce) {
		t.Errorf("UPnP reads %+v, want %s:30080 %q", m, loopback, want)
	}
	if err := u.DeletePortMapping(tctx(t), igd.TCP, 8080); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(tctx(t), igd.TCP, netip.Addr{}, 30080, nonce); !errors.Is(err, pcpwire.ErrNoResources) {
		t.Errorf("PCP Delete after UPnP's = %v, want ErrNoResources", err)
	}
}

// TestPCPLeaseExpires: a PCP mapping expires on the router's clock.
func TestPCPLeaseExpires(t *testing.T) {
	s, clk := newPCP(t, fake.PCPConfig{})
	c := pcpClient(t, s)
	if _, err := c.Map(tctx(t), pcpwire.MapRequest{Protocol: igd.UDP, InternalPort: 5353, Lifetime: time.Second, Nonce: nonce}); err != nil {
		t.Fatal(err)
	}
	if ms := s.Router().Mappings(); len(ms) != 1 || ms[0].Lease != fake.DefaultPCPMinLifetime || ms[0].ExternalPort != 5353 {
		t.Fatalf("table = %+v, want one mapping on 5353 with the minimum lifetime", ms)
	}
	clk.Step(fake.DefaultPCPMinLifetime)
	if ms := s.Router().Mappings(); len(ms) != 0 {
		t.Fatalf("after the lifetime, table = %+v", ms)
	}
}

// TestPCPEpoch: the epoch counts on the router's clock; Restart resets it
// unless SystemUptime, Reboot always, and so does an external address
// change.
func TestPCPEpoch(t *testing.T) {
	for _, uptime := range []bool{false, true} {
		t.Run(fmt.Sprint("SystemUptime=", uptime), func(t *testing.T) {
			s, clk := newPCP(t, fake.PCPConfig{SystemUptime: uptime})
			clk.Step(90 * time.Second)
			if got := s.Epoch(); got != 90 {
				t.Fatalf("Epoch = %d, want 90", got)
			}
			s.Restart()
			want := uint32(0)
			if uptime {
				want = 90
			}
			if got := s.Epoch(); got != want {
				t.Errorf("after Restart, Epoch = %d, want %d", got, want)
			}
			clk.Step(5 * time.Second)
			s.Reboot()
			if got := s.Epoch(); got != 0 {
				t.Errorf("after Reboot, Epoch = %d, want 0", got)
			}
			clk.Step(5 * time.Second)
			a := netip.MustParseAddr("198.51.100.9")
			s.ExternalAddressChanged(a)
			if got := s.Epoch(); got != 0 || s.Router().ExternalIP() != a {
				t.Errorf("after ExternalAddressChanged, Epoch = %d, external %s", got, s.Router().ExternalIP())
			}
		})
	}
}

// TestPCPAnnounceTo: Restart sends an ANNOUNCE to the configured
// destinations, from the server's address, with the epoch.
func TestPCPAnnounceTo(t *testing.T) {
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	dst := netip.MustParseAddrPort(pc.LocalAddr().String())
	s, clk := newPCP(t, fake.PCPConfig{AnnounceTo: []netip.AddrPort{dst}, SystemUptime: true})
	clk.Step(7 * time.Second)
	s.Restart()
	buf := make([]byte, 100)
	pc.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, from, err := pc.ReadFrom(buf)
	if err != nil {
		t.Fatal(err)
	}
	if from.String() != s.Addr().String() {
		t.Errorf("ANNOUNCE from %s, want the server's %s", from, s.Addr())
	}
	if n != 24 || buf[0] != 2 || buf[1] != 0x80 || buf[3] != 0 || binary.BigEndian.Uint32(buf[8:]) != 7 {
		t.Errorf("ANNOUNCE = % x, want version 2, opcode 0x80, SUCCESS, epoch 7", buf[:n])
	}
}

// TestPCPCalls: the log records each answered request with its result.
func TestPCPCalls(t *testing.T) {
	s, _ := newPCP(t, fake.PCPConfig{})
	c := pcpClient(t, s)
	if _, err := c.Map(tctx(t), pcpwire.MapRequest{Protocol: igd.TCP, InternalAddr: netip.MustParseAddr("127.0.0.2"), InternalPort: 80, Lifetime: time.Hour, Nonce: nonce}); !errors.Is(err, pcpwire.ErrUnsupportedOption) {
		t.Fatalf("Map = %v, want ErrUnsupportedOption", err)
	}
	calls := s.Calls()
	if len(calls) != 1 {
		t.Fatalf("Calls = %+v, want one", calls)
	}
	got := calls[0]
	if got.Version != 2 || got.Opcode != 1 || got.Nonce != nonce || got.InternalPort != 80 || got.ThirdParty != netip.MustParseAddr("127.0.0.2") || got.Result != pcpwire.UnsuppOption || got.From.Addr() != loopback {
		t.Errorf("Calls()[0] = %+v", got)
	}
}

// TestPCPClose: Close stops the server, twice is fine, and a client then
// gets no answer.
func TestPCPClose(t *testing.T) {
	s, _ := newPCP(t, fake.PCPConfig{})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
	c, err := pcpwire.NewClient(pcpwire.Config{Server: s.Addr(), CallTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Map(tctx(t), pcpwire.MapRequest{Protocol: igd.TCP, InternalPort: 80, Lifetime: time.Hour}); err == nil {
		t.Error("Map after Close succeeded")
	}
}

// TestPCPConfigInvalid: lifetime bounds out of order are an error.
func TestPCPConfigInvalid(t *testing.T) {
	if _, err := fake.NewPCPServer(fake.PCPConfig{MinLifetime: time.Hour, MaxLifetime: time.Minute}); err == nil {
		t.Error("NewPCPServer with MinLifetime > MaxLifetime succeeded")
	}
}

// TestPCPOnAnswerLostAnswer: OnAnswer drops the answer to the first delete,
// after the server deleted the mapping; the client's retransmission then
// finds nothing (NO_RESOURCES), as igd/pcp's design note says of
// miniupnpd.
func TestPCPOnAnswerLostAnswer(t *testing.T) {
	var dropped atomic.Bool
	s, _ := newPCP(t, fake.PCPConfig{OnAnswer: func(call fake.PCPCall, answer []byte) []byte {
		if call.Lifetime == 0 && call.Opcode == 1 && !dropped.Swap(true) {
			return nil
		}
		return answer
	}})
	c := pcpClient(t, s)
	if _, err := c.Map(tctx(t), pcpwire.MapRequest{Protocol: igd.TCP, InternalPort: 30080, Lifetime: time.Hour, Nonce: nonce}); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(tctx(t), igd.TCP, netip.Addr{}, 30080, nonce); !errors.Is(err, pcpwire.ErrNoResources) {
		t.Fatalf("Delete whose first answer was lost = %v, want ErrNoResources", err)
	}
	if ms := s.Router().Mappings(); len(ms) != 0 {
		t.Errorf("table = %+v, want empty", ms)
	}
	if n := len(s.Calls()); n != 3 {
		t.Errorf("server answered %d requests, want 3 (map, delete, its retransmission)", n)
	}
}

// TestPCPPinholesListWithTheirNonce: a pinhole a PCP MAP opened over IPv6
// lists in Router.Pinholes with miniupnpd's description of its nonce, and
// without it once renewed (2.3.1 drops it).
func TestPCPPinholesListWithTheirNonce(t *testing.T) {
	conn, err := net.ListenPacket("udp6", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	s, _ := newPCP(t, fake.PCPConfig{Conn: conn, AllowThirdParty: true})
	c := pcpClient(t, s)
	node := netip.MustParseAddr("2001:db8:1::11")
	req := pcpwire.MapRequest{Protocol: igd.TCP, InternalAddr: node, InternalPort: 443, ExternalPort: 443, Lifetime: time.Hour, Nonce: nonce}
	want := []fake.OpenPinhole{{ID: 1, Pinhole: pinhole.Pinhole{InternalClient: node, InternalPort: 443, Protocol: igd.TCP, Lease: time.Hour}, Description: fake.PCPDescription(nonce)}}
	for _, step := range []string{"opened", "renewed"} {
		if _, err := c.Map(tctx(t), req); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, s.Router().Pinholes(), cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
			t.Errorf("Pinholes when %s (-want +got):\n%s", step, diff)
		}
		want[0].Description = ""
	}
}
