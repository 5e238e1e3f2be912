package pcpwire

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/internal/igderr"
)

// startFake6 is startFake on IPv6 loopback; it skips when the host has no
// IPv6 loopback.
func startFake6(t *testing.T, reply func(n int, req []byte) [][]byte) *fakeServer {
	t.Helper()
	if !hasIPv6Loopback() {
		t.Skip("no IPv6 loopback")
	}
	return startFakeOn(t, "udp6", "[::1]:0", reply)
}

var addrComparer = cmp.Comparer(func(a, b netip.Addr) bool { return a == b })

// TestMapIPv6 pins a MAP over IPv6 for an IPv6 internal address: sent from
// the client's IPv6 address, THIRD_PARTY when the internal address is
// another host's, the suggested external address the all-zeros IPv6
// address; the granted IPv6 external address is returned.
func TestMapIPv6(t *testing.T) {
	node := netip.MustParseAddr("2001:db8:1::11")
	f := startFake6(t, func(_ int, req []byte) [][]byte {
		return [][]byte{mapReply(req, Success, 600, 100, netip.AddrPortFrom(node, 443))}
	})
	c := newTestClient(t, f, Config{})
	for _, tt := range []struct {
		name     string
		internal netip.Addr
		want     mapMessage
	}{
		{"another host", node, mapMessage{ThirdParty: node}},
		{"this host named", netip.IPv6Loopback(), mapMessage{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			n := len(f.requests())
			got, err := c.Map(context.Background(), MapRequest{
				Protocol: igd.TCP, InternalAddr: tt.internal, InternalPort: 443, ExternalPort: 443,
				Lifetime: 10 * time.Minute, Nonce: testNonce,
			})
			if err != nil {
				t.Fatal(err)
			}
			want := MapResult{ExternalAddr: node, ExternalPort: 443, Lifetime: 10 * time.Minute, Epoch: 100}
			if diff := cmp.Diff(want, got, addrComparer); diff != "" {
				t.Errorf("Map (-want +got):\n%s", diff)
			}
			w := tt.want
			w.Lifetime, w.ClientAddr, w.Nonce, w.Protocol = 600, netip.IPv6Loopback(), testNonce, protoTCP
			w.InternalPort, w.ExternalPort, w.ExternalAddr = 443, 443, netip.IPv6Unspecified()
			if diff := cmp.Diff(encodeMap(w), f.requests()[n]); diff != "" {
				t.Errorf("request (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDeleteIPv6 pins a delete over IPv6: lifetime 0, the nonce,
// THIRD_PARTY for another host, the all-zeros IPv6 external address.
func TestDeleteIPv6(t *testing.T) {
	node := netip.MustParseAddr("2001:db8:1::11")
	f := startFake6(t, func(_ int, req []byte) [][]byte {
		return [][]byte{mapReply(req, Success, 0, 100, netip.AddrPortFrom(node, 0))}
	})
	c := newTestClient(t, f, Config{})
	if err := c.Delete(context.Background(), igd.UDP, node, 4433, testNonce); err != nil {
		t.Fatal(err)
	}
	want := encodeMap(mapMessage{ClientAddr: netip.IPv6Loopback(), Nonce: testNonce, Protocol: protoUDP,
		InternalPort: 4433, ExternalAddr: netip.IPv6Unspecified(), ThirdParty: node})
	if diff := cmp.Diff(want, f.requests()[0]); diff != "" {
		t.Errorf("request (-want +got):\n%s", diff)
	}
}

// TestMapIPv6RefusesAnIPv4Answer: a SUCCESS over IPv6 whose external
// address is not an IPv6 address is no usable answer.
func TestMapIPv6RefusesAnIPv4Answer(t *testing.T) {
	f := startFake6(t, func(_ int, req []byte) [][]byte {
		return [][]byte{mapReply(req, Success, 600, 100, extAddr)}
	})
	c := newTestClient(t, f, Config{})
	_, err := c.Map(context.Background(), MapRequest{Protocol: igd.TCP, InternalAddr: netip.MustParseAddr("2001:db8:1::11"),
		InternalPort: 443, ExternalPort: 443, Lifetime: time.Minute, Nonce: testNonce})
	if err == nil {
		t.Fatal("Map accepted an IPv4 external address over IPv6")
	}
}

// TestMapFamilyMustBeTheServers: an internal address of the other family
// than the server's is refused before anything is sent, naming the field.
func TestMapFamilyMustBeTheServers(t *testing.T) {
	f := startFake6(t, func(_ int, req []byte) [][]byte { return nil })
	c := newTestClient(t, f, Config{})
	_, err := c.Map(context.Background(), MapRequest{Protocol: igd.TCP, InternalAddr: netip.MustParseAddr("192.0.2.10"),
		InternalPort: 443, Lifetime: time.Minute})
	var fe *igderr.FieldError
	if !errors.As(err, &fe) || fe.Field != "InternalAddr" {
		t.Errorf("Map of an IPv4 address through an IPv6 server = %v, want a FieldError for InternalAddr", err)
	}
	if n := len(f.requests()); n != 0 {
		t.Errorf("server got %d requests, want none", n)
	}
}

// hasIPv6Loopback reports whether a UDP socket can be opened on ::1.
func hasIPv6Loopback() bool {
	pc, err := net.ListenPacket("udp6", "[::1]:0")
	if err != nil {
		return false
	}
	pc.Close()
	return true
}

// TestListenAnnounceIPv4Only: a client of an IPv6 server cannot hear
// ANNOUNCE (it listens on 224.0.0.1) and says so at once rather than
// listen for what never comes.
func TestListenAnnounceIPv4Only(t *testing.T) {
	c, err := NewClient(Config{Server: netip.MustParseAddrPort("[2001:db8:1::1]:5351"),
		ListenPacket: func(ctx context.Context, network, addr string) (net.PacketConn, error) {
			return net.ListenPacket("udp4", "127.0.0.1:0")
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := c.ListenAnnounce(ctx); err == nil {
		t.Error("ListenAnnounce of an IPv6 client = nil, want an error")
	}
}
