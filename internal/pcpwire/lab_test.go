package pcpwire_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/igdtest"
	"github.com/ccmkit/ccmkit/internal/pcplab"
	"github.com/ccmkit/ccmkit/internal/pcpwire"
)

// Lab tests: the client against miniupnpd 2.3.1 in igdtest's namespaces.
// Each names the function of miniupnpd/pcpserver.c (tag miniupnpd_2_3_1)
// that explains what it pins.

// pcpClient is a PCP client acting from node i, talking to the router's LAN
// address.
func pcpClient(t *testing.T, lab *igdtest.Lab, i int) *pcpwire.Client {
	t.Helper()
	c, err := pcpwire.NewClient(pcplab.Config(lab, i))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// serveHTTP answers "hello from ADDR" on node i's address and port, standing
// in for a nodePort.
func serveHTTP(t *testing.T, lab *igdtest.Lab, i int, port uint16) {
	t.Helper()
	n := lab.Nodes[i]
	ln, err := n.Listen("tcp", netip.AddrPortFrom(n.Addr, port).String())
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from %s", n.Addr)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
}

// desc is the description miniupnpd gives a mapping of nonce: three
// 32-bit words printed with %08x on the lab's little-endian machine (the
// conformance suite checks it with a nonce whose words are not
// palindromes).
func desc(nonce [12]byte) string { return fake.PCPDescription(nonce) }

var (
	nonceA = [12]byte{0xa, 0xa, 0xa, 0xa, 0xa, 0xa, 0xa, 0xa, 0xa, 0xa, 0xa, 0xa}
	nonceB = [12]byte{0xb, 0xb, 0xb, 0xb, 0xb, 0xb, 0xb, 0xb, 0xb, 0xb, 0xb, 0xb}
)

// TestLabMapThirdParty: a MAP from node 0 for node 1 (THIRD_PARTY, allowed by
// pcp_allow_thirdparty) is installed as node 1's mapping with the nonce as
// its description (ValidatePCPMsg writes "PCP MAP %08x%08x%08x";
// CreatePCPMap_NAT installs it), and the internet reaches node 1 through it.
func TestLabMapThirdParty(t *testing.T) {
	lab := igdtest.Start(t, igdtest.Options{Nodes: 2, PCPAllowThirdParty: true})
	ctx := pcplab.Context(t)
	serveHTTP(t, lab, 1, 30080)
	c := pcpClient(t, lab, 0)
	got, err := c.Map(ctx, pcpwire.MapRequest{
		Protocol: igd.TCP, InternalAddr: lab.Nodes[1].Addr, InternalPort: 30080,
		ExternalPort: 8080, Lifetime: time.Hour, Nonce: nonceA,
	})
	if err != nil {
		t.Fatalf("Map: %v\nminiupnpd log:\n%s", err, lab.Log())
	}
	if got.ExternalAddr != lab.ExternalIP || got.ExternalPort != 8080 || got.Lifetime != time.Hour {
		t.Errorf("Map = %+v, want %s:8080 for 1h", got, lab.ExternalIP)
	}
	pcplab.WantMapping(t, ctx, pcplab.UPnPClient(t, lab, 0), igd.Key{Protocol: igd.TCP, ExternalPort: 8080},
		netip.AddrPortFrom(lab.Nodes[1].Addr, 30080), desc(nonceA))
	body, err := lab.InternetGet(ctx, fmt.Sprintf("http://%s:8080/", lab.ExternalIP))
	if want := "hello from " + lab.Nodes[1].Addr.String(); err != nil || body != want {
		t.Fatalf("GET from the internet = %q, %v; want %q", body, err, want)
	}
}

// TestLabDeleteNeedsTheNonce: DeletePCPMap finds the mapping by internal
// address, port and protocol and refuses (NOT_AUTHORIZED) when its
// description is not the request's nonce; with the right nonce it deletes.
// A delete that finds nothing is NO_RESOURCES (DeletePCPMap, r < 0). UPnP
// ignores nonces: DeletePortMapping removes a PCP mapping, and the target
// host's AddPortMapping overwrites one.
func TestLabDeleteNeedsTheNonce(t *testing.T) {
	lab := igdtest.Start(t, igdtest.Options{Nodes: 2, PCPAllowThirdParty: true})
	ctx := pcplab.Context(t)
	c := pcpClient(t, lab, 0)
	u := pcplab.UPnPClient(t, lab, 0)
	node1 := lab.Nodes[1].Addr
	key := igd.Key{Protocol: igd.TCP, ExternalPort: 8080}
	if _, err := c.Map(ctx, pcpwire.MapRequest{Protocol: igd.TCP, InternalAddr: node1, InternalPort: 30080, ExternalPort: 8080, Lifetime: time.Hour, Nonce: nonceA}); err != nil {
		t.Fatal(err)
	}

	err := c.Delete(ctx, igd.TCP, node1, 30080, nonceB)
	if !errors.Is(err, pcpwire.ErrNotAuthorized) {
		t.Fatalf("Delete with another nonce = %v, want ErrNotAuthorized", err)
	}
	pcplab.WantMapping(t, ctx, u, key, netip.AddrPortFrom(node1, 30080), desc(nonceA))

	if err := c.Delete(ctx, igd.TCP, node1, 30080, nonceA); err != nil {
		t.Fatalf("Delete with the nonce = %v\nminiupnpd log:\n%s", err, lab.Log())
	}
	if m, err := u.GetPortMapping(ctx, igd.TCP, 8080); !errors.Is(err, igd.ErrNoSuchEntry) {
		t.Fatalf("after Delete, GetPortMapping = %+v, %v; want ErrNoSuchEntry", m, err)
	}
	if err := c.Delete(ctx, igd.TCP, node1, 30080, nonceA); !errors.Is(err, pcpwire.ErrNoResources) {
		t.Errorf("second Delete = %v, want ErrNoResources (miniupnpd's answer for no mapping)", err)
	}

	// UPnP deletes what PCP made, nonce or not.
	if _, err := c.Map(ctx, pcpwire.MapRequest{Protocol: igd.TCP, InternalAddr: node1, InternalPort: 30080, ExternalPort: 8080, Lifetime: time.Hour, Nonce: nonceA}); err != nil {
		t.Fatal(err)
	}
	if err := pcplab.UPnPClient(t, lab, 1).DeletePortMapping(ctx, igd.TCP, 8080); err != nil {
		t.Fatalf("UPnP DeletePortMapping of a PCP mapping = %v", err)
	}
	if _, err := u.GetPortMapping(ctx, igd.TCP, 8080); !errors.Is(err, igd.ErrNoSuchEntry) {
		t.Fatalf("after UPnP delete, GetPortMapping = %v; want ErrNoSuchEntry", err)
	}

	// UPnP AddPortMapping by the target host overwrites what PCP made.
	if _, err := c.Map(ctx, pcpwire.MapRequest{Protocol: igd.TCP, InternalAddr: node1, InternalPort: 30080, ExternalPort: 8080, Lifetime: time.Hour, Nonce: nonceA}); err != nil {
		t.Fatal(err)
	}
	if _, err := pcplab.UPnPClient(t, lab, 1).AddPortMapping(ctx, igd.Mapping{Protocol: igd.TCP, ExternalPort: 8080, InternalClient: node1, InternalPort: 30081, Description: "upnp"}); err != nil {
		t.Fatalf("UPnP AddPortMapping over a PCP mapping by its target = %v", err)
	}
	pcplab.WantMapping(t, ctx, u, key, netip.AddrPortFrom(node1, 30081), "upnp")
}

// TestLabPreferFailure: with PREFER_FAILURE, a MAP for an external port that
// another host's mapping holds fails with ErrCannotProvideExternal and that
// mapping stays. The router does not enforce it itself: Debian's miniupnpd
// 2.3.1 is built with CHECK_PORTINUSE, and CreatePCPMap_NAT's port_in_use
// check skips to the next port before the PREFER_FAILURE test ("port 8081
// protocol tcp already in use", then "added mapping TCP 8082"), so the
// router answers SUCCESS on 8082; Map deletes that mapping and reports
// the failure. Without PREFER_FAILURE the router moves to the next free
// port.
func TestLabPreferFailure(t *testing.T) {
	lab := igdtest.Start(t, igdtest.Options{Nodes: 2})
	ctx := pcplab.Context(t)
	u1 := pcplab.UPnPClient(t, lab, 1)
	theirs := igd.Mapping{Protocol: igd.TCP, ExternalPort: 8081, InternalClient: lab.Nodes[1].Addr, InternalPort: 30081, Description: "node 1's"}
	if _, err := u1.AddPortMapping(ctx, theirs); err != nil {
		t.Fatal(err)
	}
	c := pcpClient(t, lab, 0)
	key := igd.Key{Protocol: igd.TCP, ExternalPort: 8081}

	res, err := c.Map(ctx, pcpwire.MapRequest{Protocol: igd.TCP, InternalPort: 30080, ExternalPort: 8081, Lifetime: time.Hour, PreferFailure: true, Nonce: nonceA})
	if !errors.Is(err, pcpwire.ErrCannotProvideExternal) {
		out, _ := lab.Nft(ctx, "list", "ruleset")
		list, _ := lab.Upnpc(ctx, 0, "-l")
		t.Fatalf("Map with PreferFailure on a held port = %+v, %v, want ErrCannotProvideExternal\n%s\n%s\nminiupnpd log:\n%s", res, err, out, list, lab.Log())
	}
	pcplab.WantMapping(t, ctx, u1, key, netip.AddrPortFrom(lab.Nodes[1].Addr, 30081), "node 1's")
	if m, err := u1.GetPortMapping(ctx, igd.TCP, 8082); !errors.Is(err, igd.ErrNoSuchEntry) {
		t.Fatalf("the mapping the router made on 8082 despite PREFER_FAILURE is still there: %+v, %v", m, err)
	}
	if !strings.Contains(lab.Log(), "port 8081 protocol tcp already in use") {
		t.Errorf("miniupnpd's log does not show the port_in_use skip this test pins")
	}

	got, err := c.Map(ctx, pcpwire.MapRequest{Protocol: igd.TCP, InternalPort: 30080, ExternalPort: 8081, Lifetime: time.Hour, Nonce: nonceA})
	if err != nil {
		t.Fatal(err)
	}
	if got.ExternalPort != 8082 {
		t.Errorf("Map without PreferFailure got port %d, want 8082 (the next free one)", got.ExternalPort)
	}
	pcplab.WantMapping(t, ctx, u1, key, netip.AddrPortFrom(lab.Nodes[1].Addr, 30081), "node 1's")
}

// TestLabThirdPartyRefused: without pcp_allow_thirdparty, THIRD_PARTY is
// UNSUPP_OPTION (ValidatePCPMsg); Map returns it. A mapping for the client's
// own address, named or not, carries no option and works.
func TestLabThirdPartyRefused(t *testing.T) {
	lab := igdtest.Start(t, igdtest.Options{Nodes: 2})
	ctx := pcplab.Context(t)
	c := pcpClient(t, lab, 0)
	_, err := c.Map(ctx, pcpwire.MapRequest{Protocol: igd.TCP, InternalAddr: lab.Nodes[1].Addr, InternalPort: 30080, ExternalPort: 8080, Lifetime: time.Hour, Nonce: nonceA})
	if !errors.Is(err, pcpwire.ErrUnsupportedOption) {
		t.Fatalf("Map for another host = %v, want ErrUnsupportedOption", err)
	}
	u := pcplab.UPnPClient(t, lab, 0)
	if _, err := u.GetPortMapping(ctx, igd.TCP, 8080); !errors.Is(err, igd.ErrNoSuchEntry) {
		t.Fatalf("after the refusal, GetPortMapping = %v; want ErrNoSuchEntry", err)
	}
	for i, addr := range []netip.Addr{{}, lab.Nodes[0].Addr} {
		port := uint16(8080 + i)
		if _, err := c.Map(ctx, pcpwire.MapRequest{Protocol: igd.TCP, InternalAddr: addr, InternalPort: 30080 + uint16(i), ExternalPort: port, Lifetime: time.Hour, Nonce: nonceA}); err != nil {
			t.Fatalf("Map for this host (InternalAddr %v) = %v", addr, err)
		}
		pcplab.WantMapping(t, ctx, u, igd.Key{Protocol: igd.TCP, ExternalPort: port}, netip.AddrPortFrom(lab.Nodes[0].Addr, 30080+uint16(i)), desc(nonceA))
	}
}

// TestLabLifetimeClamp: parseCommonRequestHeader clamps a requested
// lifetime to [min_lifetime, max_lifetime] and the answer carries the
// clamped value.
func TestLabLifetimeClamp(t *testing.T) {
	lab := igdtest.Start(t, igdtest.Options{MinLifetime: 60 * time.Second, MaxLifetime: 600 * time.Second})
	ctx := pcplab.Context(t)
	c := pcpClient(t, lab, 0)
	for i, tt := range []struct{ ask, want time.Duration }{
		{10 * time.Second, 60 * time.Second},
		{300 * time.Second, 300 * time.Second},
		{time.Hour, 600 * time.Second},
	} {
		got, err := c.Map(ctx, pcpwire.MapRequest{Protocol: igd.UDP, InternalPort: 30053 + uint16(i), ExternalPort: 5353 + uint16(i), Lifetime: tt.ask, Nonce: nonceA})
		if err != nil {
			t.Fatal(err)
		}
		if got.Lifetime != tt.want {
			t.Errorf("Map with lifetime %v granted %v, want %v", tt.ask, got.Lifetime, tt.want)
		}
	}
}

// TestLabRestart: a daemon restart (table kept) and a reboot (table wiped)
// are signalled by the unsolicited ANNOUNCE miniupnpd multicasts to
// 224.0.0.1:5350 when it starts (main calls PCPSendUnsolicitedAnnounce),
// which reaches a node's socket bound to that group address without a
// join. The epoch does not reveal either here: the lab runs with
// system_uptime=yes, so the Epoch Time is the machine's uptime
// (set_startup_time in miniupnpd.c; createPCPResponse answers upnp_time() -
// epoch_origin, epoch_origin = startup_time) and keeps counting across a
// daemon restart.
func TestLabRestart(t *testing.T) {
	for _, tt := range []struct {
		name    string
		restart func(*igdtest.Lab, testing.TB)
	}{
		{"restart", (*igdtest.Lab).Restart},
		{"reboot", (*igdtest.Lab).Reboot},
	} {
		t.Run(tt.name, func(t *testing.T) {
			lab := igdtest.Start(t, igdtest.Options{})
			ctx := pcplab.Context(t)
			n := lab.Nodes[0]
			opened := make(chan struct{})
			c, err := pcpwire.NewClient(pcpwire.Config{
				Server:      netip.AddrPortFrom(lab.RouterLAN, pcpwire.Port),
				DialContext: n.DialContext,
				ListenPacket: func(ctx context.Context, network, addr string) (net.PacketConn, error) {
					defer close(opened)
					return n.ListenPacket(ctx, network, addr)
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			req := pcpwire.MapRequest{Protocol: igd.TCP, InternalPort: 30080, ExternalPort: 8080, Lifetime: time.Hour, Nonce: nonceA}
			before, err := c.Map(ctx, req)
			if err != nil {
				t.Fatal(err)
			}

			lctx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- c.ListenAnnounce(lctx) }()
			t.Cleanup(func() {
				stop()
				if err := <-done; err != nil {
					t.Errorf("ListenAnnounce = %v", err)
				}
			})
			<-opened

			tt.restart(lab, t)
			select {
			case <-c.Restarts():
			case err := <-done:
				t.Fatalf("ListenAnnounce returned %v before any ANNOUNCE", err)
			case <-time.After(10 * time.Second):
				t.Fatalf("no restart signalled within 10 s\nminiupnpd log:\n%s", lab.Log())
			}

			after, err := c.Map(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("epoch before %d, after %d", before.Epoch, after.Epoch)
			if after.Epoch < before.Epoch {
				t.Errorf("epoch went from %d to %d; this lab's system_uptime=yes should keep it counting", before.Epoch, after.Epoch)
			}
			select {
			case <-c.Restarts():
				t.Errorf("the epoch check signalled a restart too (epoch %d -> %d)", before.Epoch, after.Epoch)
			default:
			}
		})
	}
}

// TestLabReMapIgnoresTheNonce pins what the router does not enforce: a MAP
// for the same internal address, port and protocol on the same external
// port replaces the mapping whatever nonce created it (CreatePCPMap_NAT:
// same iaddr and iport -> _upnp_delete_redir, then re-add with the new
// description), even with PREFER_FAILURE and from a third host; the
// original owner's Delete is then refused and the new holder's succeeds.
// The target host itself takes a mapping over without any option.
func TestLabReMapIgnoresTheNonce(t *testing.T) {
	lab := igdtest.Start(t, igdtest.Options{Nodes: 3, PCPAllowThirdParty: true})
	ctx := pcplab.Context(t)
	node1 := lab.Nodes[1].Addr
	key := igd.Key{Protocol: igd.TCP, ExternalPort: 8080}
	owner := pcpClient(t, lab, 0)
	if _, err := owner.Map(ctx, pcpwire.MapRequest{Protocol: igd.TCP, InternalAddr: node1, InternalPort: 30080, ExternalPort: 8080, Lifetime: time.Hour, Nonce: nonceA}); err != nil {
		t.Fatal(err)
	}
	other := pcpClient(t, lab, 2)
	got, err := other.Map(ctx, pcpwire.MapRequest{Protocol: igd.TCP, InternalAddr: node1, InternalPort: 30080, ExternalPort: 8080, Lifetime: time.Hour, PreferFailure: true, Nonce: nonceB})
	if err != nil {
		t.Fatalf("re-MAP with another nonce from another host = %v, want success (miniupnpd 2.3.1 ignores the nonce)", err)
	}
	if got.ExternalPort != 8080 {
		t.Errorf("re-MAP got port %d, want 8080", got.ExternalPort)
	}
	pcplab.WantMapping(t, ctx, pcplab.UPnPClient(t, lab, 0), key, netip.AddrPortFrom(node1, 30080), desc(nonceB))
	if err := owner.Delete(ctx, igd.TCP, node1, 30080, nonceA); !errors.Is(err, pcpwire.ErrNotAuthorized) {
		t.Errorf("the first owner's Delete after the takeover = %v, want ErrNotAuthorized", err)
	}
	// The nonce now guards the mapping for the host that took it over, which
	// may delete it.
	if err := other.Delete(ctx, igd.TCP, node1, 30080, nonceB); err != nil {
		t.Errorf("the new holder's Delete = %v, want success", err)
	}
	if _, err := pcplab.UPnPClient(t, lab, 0).GetPortMapping(ctx, igd.TCP, 8080); !errors.Is(err, igd.ErrNoSuchEntry) {
		t.Errorf("after the new holder's Delete, GetPortMapping = %v; want ErrNoSuchEntry", err)
	}

	// The target host itself, with no option at all, takes over the same way.
	if _, err := owner.Map(ctx, pcpwire.MapRequest{Protocol: igd.TCP, InternalAddr: node1, InternalPort: 30080, ExternalPort: 8080, Lifetime: time.Hour, Nonce: nonceA}); err != nil {
		t.Fatal(err)
	}
	if _, err := pcpClient(t, lab, 1).Map(ctx, pcpwire.MapRequest{Protocol: igd.TCP, InternalPort: 30080, ExternalPort: 8080, Lifetime: time.Hour, Nonce: nonceB}); err != nil {
		t.Fatalf("re-MAP by the target host with another nonce = %v, want success", err)
	}
	pcplab.WantMapping(t, ctx, pcplab.UPnPClient(t, lab, 0), key, netip.AddrPortFrom(node1, 30080), desc(nonceB))
}

// TestLabNoServer: with NAT-PMP/PCP off nothing listens on 5351; the ICMP
// port unreachable ends the call at once.
func TestLabNoServer(t *testing.T) {
	lab := igdtest.Start(t, igdtest.Options{DisableNATPMP: true})
	ctx := pcplab.Context(t)
	c := pcpClient(t, lab, 0)
	start := time.Now()
	_, err := c.Map(ctx, pcpwire.MapRequest{Protocol: igd.TCP, InternalPort: 30080, Lifetime: time.Hour, Nonce: nonceA})
	var oe *net.OpError
	if err == nil || !errors.As(err, &oe) {
		t.Fatalf("Map without a PCP server = %v, want a refusal", err)
	}
	if el := time.Since(start); el > time.Second {
		t.Errorf("Map took %v to fail, want an immediate refusal", el)
	}
}

// TestLabPreferFailureTakesTheNextPortsMapping is
// pcp.TestBackendRefusedAddLosesTheNextPortsMappingToTheSameTarget on
// miniupnpd 2.3.1: node 0's
// mapping on 8082 to its own port 30080 (made through UPnP) is replaced by
// a MAP for 8081 from node 0 to port 30080 with PREFER_FAILURE, where node
// 1 holds 8081, and Map's undo then deletes it.
func TestLabPreferFailureTakesTheNextPortsMapping(t *testing.T) {
	lab := igdtest.Start(t, igdtest.Options{Nodes: 2})
	ctx := pcplab.Context(t)
	u1 := pcplab.UPnPClient(t, lab, 1)
	theirs := igd.Mapping{Protocol: igd.TCP, ExternalPort: 8081, InternalClient: lab.Nodes[1].Addr, InternalPort: 30081, Description: "node 1's"}
	if _, err := u1.AddPortMapping(ctx, theirs); err != nil {
		t.Fatal(err)
	}
	u0 := pcplab.UPnPClient(t, lab, 0)
	own := igd.Mapping{Protocol: igd.TCP, ExternalPort: 8082, InternalClient: lab.Nodes[0].Addr, InternalPort: 30080, Description: "node 0's forward"}
	if _, err := u0.AddPortMapping(ctx, own); err != nil {
		t.Fatal(err)
	}
	_, err := pcpClient(t, lab, 0).Map(ctx, pcpwire.MapRequest{Protocol: igd.TCP, InternalPort: 30080, ExternalPort: 8081, Lifetime: time.Hour, PreferFailure: true, Nonce: nonceA})
	if !errors.Is(err, pcpwire.ErrCannotProvideExternal) {
		t.Errorf("Map with PreferFailure on a held port = %v, want ErrCannotProvideExternal", err)
	}
	if got, err := u1.GetPortMapping(ctx, igd.TCP, 8082); !errors.Is(err, igd.ErrNoSuchEntry) {
		t.Errorf("8082 after the refused Map: %+v, %v; want it gone (replaced, then undone), as miniupnpd 2.3.1 does", got, err)
	}
}
