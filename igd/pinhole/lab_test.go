package pinhole_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/huin/goupnp"
	"github.com/huin/goupnp/dcps/internetgateway2"
	"github.com/huin/goupnp/soap"

	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/igdtest"
	"github.com/ccmkit/ccmkit/igd/pinhole"
)

// What miniupnpd 2.3.1 does with pinholes, in the IPv6 lab of igdtest.

// testTimeout bounds each lab test's calls; a healthy lab answers in
// milliseconds.
const testTimeout = 60 * time.Second

// unreachableWithin bounds a dial that should fail: the router's firewall
// drops the SYN, so the dial ends only with this bound.
const unreachableWithin = 500 * time.Millisecond

const port = 8443

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// labClient returns a client acting from node i, sending from its GUA. With
// discover it finds the router by SSDP over IPv6 on the node's eth0.
func labClient(t *testing.T, lab *igdtest.Lab, i int, discover bool) *pinhole.UPnPClient {
	t.Helper()
	n := lab.Nodes[i]
	cfg := pinhole.Config{
		LocalAddr:    n.GUA,
		RootDescURL:  lab.IPv6.RootDescURL,
		DialContext:  n.DialContextFrom(n.GUA),
		ListenPacket: n.ListenPacket,
	}
	if discover {
		idx, err := n.InterfaceIndex(lab.IPv6.NodeInterface)
		if err != nil {
			t.Fatal(err)
		}
		cfg.RootDescURL, cfg.Interface = "", strconv.Itoa(idx)
	}
	c, err := pinhole.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// listen serves [node GUA]:port until the test ends (igdtest's Serve):
// the stand-in for kube-proxy.
func listen(t *testing.T, n *igdtest.Node, port uint16) netip.AddrPort {
	t.Helper()
	addr := netip.AddrPortFrom(n.GUA, port)
	n.Serve(t, addr)
	return addr
}

// reaches reports whether the internet host connects to addr.
func reaches(ctx context.Context, lab *igdtest.Lab, addr netip.AddrPort) bool {
	ctx, cancel := context.WithTimeout(ctx, unreachableWithin)
	defer cancel()
	return lab.InternetReaches(ctx, addr) == nil
}

func tcpPinhole(a netip.Addr, port uint16) pinhole.Pinhole {
	return pinhole.Pinhole{InternalClient: a, InternalPort: port, Protocol: igd.TCP, Lease: time.Hour}
}

func TestLabInternetConnectsOnlyWhileThePinholeIsOpen(t *testing.T) {
	lab := igdtest.Start(t, igdtest.Options{IPv6: true})
	ctx := testContext(t)
	c := labClient(t, lab, 0, false)
	addr := listen(t, lab.Nodes[0], port)

	if reaches(ctx, lab, addr) {
		t.Fatalf("reachable before any pinhole: the internet connects to %s, want no connection", addr)
	}
	id, err := c.Add(ctx, tcpPinhole(addr.Addr(), port))
	if err != nil {
		t.Fatalf("%v; miniupnpd log:\n%s", err, lab.Log())
	}
	if !reaches(ctx, lab, addr) {
		t.Fatalf("not reachable through pinhole %d: the internet cannot connect to %s", id, addr)
	}
	n, err := c.Packets(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	// The nftables rule miniupnpd 2.3.1 adds has no counter: it reports 0
	// packets whatever went through (DESIGN.md).
	if n != 0 {
		t.Errorf("packets through the pinhole after a connection = %d, want 0", n)
	}

	if err := c.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	if reaches(ctx, lab, addr) {
		t.Fatalf("reachable after the pinhole was deleted: the internet connects to %s, want no connection", addr)
	}
	_, err = c.Packets(ctx, id)
	if !errors.Is(err, pinhole.ErrNoSuchPinhole) {
		t.Fatalf("Packets of a deleted pinhole: err = %v, want %v", err, pinhole.ErrNoSuchPinhole)
	}
}

// TestLabFindsTheRouterBySSDPOverIPv6: an M-SEARCH to ff02::c, on the
// named interface or on the one the kernel routes it through, finds
// miniupnpd's description on its global LAN address.
func TestLabFindsTheRouterBySSDPOverIPv6(t *testing.T) {
	lab := igdtest.Start(t, igdtest.Options{IPv6: true})
	ctx := testContext(t)
	addr := listen(t, lab.Nodes[0], port)
	named := labClient(t, lab, 0, true)
	id, err := named.Add(ctx, tcpPinhole(addr.Addr(), port))
	if err != nil {
		t.Fatalf("%v; miniupnpd log:\n%s", err, lab.Log())
	}
	if !reaches(ctx, lab, addr) {
		t.Fatalf("the internet cannot connect to %s through pinhole %d", addr, id)
	}

	n := lab.Nodes[0]
	unnamed, err := pinhole.New(pinhole.Config{LocalAddr: n.GUA, DialContext: n.DialContextFrom(n.GUA), ListenPacket: n.ListenPacket})
	if err != nil {
		t.Fatal(err)
	}
	if err := unnamed.Delete(ctx, id); err != nil {
		t.Fatalf("with no interface named: %v", err)
	}
	if reaches(ctx, lab, addr) {
		t.Fatalf("the internet connects to %s after pinhole %d was deleted, want no connection", addr, id)
	}
}

// TestLabRefusesWhatIsNotTheCallersOwnHighPort pins 606 for another host's
// address, the caller's ULA, the caller's GUA written in a non-canonical
// form (the router compares strings), and a port below 1024; secure mode
// or not.
func TestLabRefusesWhatIsNotTheCallersOwnHighPort(t *testing.T) {
	for _, secure := range []bool{false, true} {
		t.Run("secure="+strconv.FormatBool(secure), func(t *testing.T) {
			lab := igdtest.Start(t, igdtest.Options{IPv6: true, Nodes: 2, SecureMode: secure})
			ctx := testContext(t)
			c := labClient(t, lab, 0, false)
			self := lab.Nodes[0]
			for _, tc := range []struct {
				name   string
				client string
				port   uint16
			}{
				{"another host's GUA", lab.Nodes[1].GUA.String(), port},
				{"the caller's ULA", self.ULA.String(), port},
				{"the caller's GUA, not canonical", "2001:db8:1:0::0010", port},
				{"port 443", self.GUA.String(), 443},
				{"port 1023", self.GUA.String(), 1023},
			} {
				_, err := c.AddUnchecked(ctx, tc.client, tc.port, igd.TCP, 3600)
				if !errors.Is(err, igd.ErrNotAuthorized) {
					t.Errorf("%s: AddPinhole %s port %d: err = %v, want %v", tc.name, tc.client, tc.port, err, igd.ErrNotAuthorized)
				}
			}
			_, err := c.AddUnchecked(ctx, self.GUA.String(), 1024, igd.TCP, 3600)
			if err != nil {
				t.Errorf("port 1024 to the caller's own GUA: %v", err)
			}
		})
	}
}

func TestLabReAddReturnsTheSameID(t *testing.T) {
	lab := igdtest.Start(t, igdtest.Options{IPv6: true})
	ctx := testContext(t)
	c := labClient(t, lab, 0, false)
	gua := lab.Nodes[0].GUA
	first, err := c.Add(ctx, tcpPinhole(gua, port))
	if err != nil {
		t.Fatal(err)
	}
	again, err := labClient(t, lab, 0, false).Add(ctx, tcpPinhole(gua, port))
	if err != nil {
		t.Fatal(err)
	}
	if again != first {
		t.Errorf("a second client re-adding the same pinhole got ID %d, want %d", again, first)
	}

	udp, err := c.Add(ctx, pinhole.Pinhole{InternalClient: gua, InternalPort: port, Protocol: igd.UDP, Lease: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if udp == first {
		t.Errorf("the same port over UDP is another pinhole: got ID %d, want an ID other than %d", udp, first)
	}

	// IDs are not reused: after a delete, the same pinhole gets a new one.
	if err := c.Delete(ctx, first); err != nil {
		t.Fatal(err)
	}
	readded, err := c.Add(ctx, tcpPinhole(gua, port))
	if err != nil {
		t.Fatal(err)
	}
	if readded == first {
		t.Errorf("re-added after a delete: got ID %d, want an ID other than %d", readded, first)
	}
}

// waitGone polls until the router no longer holds pinhole id.
func waitGone(ctx context.Context, t *testing.T, c pinhole.Client, id uint16) {
	t.Helper()
	for {
		_, err := c.Packets(ctx, id)
		if errors.Is(err, pinhole.ErrNoSuchPinhole) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("pinhole %d still there: %v", id, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// TestLabUpdateRenews: a pinhole added for 2 s and renewed for an hour
// outlives one left at 2 s.
func TestLabUpdateRenews(t *testing.T) {
	lab := igdtest.Start(t, igdtest.Options{IPv6: true})
	ctx := testContext(t)
	c := labClient(t, lab, 0, false)
	gua := lab.Nodes[0].GUA
	short := pinhole.Pinhole{InternalClient: gua, InternalPort: port, Protocol: igd.TCP, Lease: 2 * time.Second}
	renewed, err := c.Add(ctx, short)
	if err != nil {
		t.Fatal(err)
	}
	short.InternalPort++
	left, err := c.Add(ctx, short)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Update(ctx, renewed, time.Hour); err != nil {
		t.Fatal(err)
	}

	waitGone(ctx, t, c, left)
	// The daemon counts whole seconds, so the two 2 s leases end within a
	// second of each other: past that, only a renewal explains the first.
	time.Sleep(1500 * time.Millisecond)
	_, err = c.Packets(ctx, renewed)
	if err != nil {
		t.Fatalf("the renewed pinhole after the other one expired: %v", err)
	}
	err = c.Update(ctx, left, time.Hour)
	if !errors.Is(err, pinhole.ErrNoSuchPinhole) {
		t.Fatalf("Update of an expired pinhole: err = %v, want %v", err, pinhole.ErrNoSuchPinhole)
	}
	if got := igd.Code(err); got != 402 {
		t.Errorf("the router's answer to UpdatePinhole of an expired pinhole: code %d, want 402 (err %v)", got, err)
	}
	_, err = c.Packets(ctx, left)
	if got := igd.Code(err); got != 402 {
		t.Errorf("the router's answer to GetPinholePackets of an expired pinhole: code %d, want 402 (err %v)", got, err)
	}
}

// TestLabDeleteOfAGoneIDIsNil: the router answers 402 (not the
// specification's 704) for an ID it does not hold; Delete returns nil.
func TestLabDeleteOfAGoneIDIsNil(t *testing.T) {
	lab := igdtest.Start(t, igdtest.Options{IPv6: true})
	ctx := testContext(t)
	c := labClient(t, lab, 0, false)
	id, err := c.Add(ctx, tcpPinhole(lab.Nodes[0].GUA, port))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, id); err != nil {
		t.Fatalf("second Delete: %v", err)
	}
	if err := c.DeleteUnchecked(ctx, id); igd.Code(err) != 402 {
		t.Errorf("the router's answer to DeletePinhole of a gone ID: code %d, want 402 (err %v)", igd.Code(err), err)
	}
	if err := c.Delete(ctx, id+100); err != nil {
		t.Errorf("Delete of an ID never given: %v", err)
	}
}

// TestLabRebootLosesPinholesAndReAddRestores: a reboot (the firewall
// flushed) closes every pinhole; adding it again opens it.
func TestLabRebootLosesPinholesAndReAddRestores(t *testing.T) {
	lab := igdtest.Start(t, igdtest.Options{IPv6: true})
	ctx := testContext(t)
	c := labClient(t, lab, 0, false)
	addr := listen(t, lab.Nodes[0], port)
	id, err := c.Add(ctx, tcpPinhole(addr.Addr(), port))
	if err != nil {
		t.Fatal(err)
	}

	lab.Reboot(t)
	if reaches(ctx, lab, addr) {
		t.Fatalf("reachable after a reboot: the internet connects to %s, want no connection", addr)
	}
	_, err = c.Packets(ctx, id)
	if !errors.Is(err, pinhole.ErrNoSuchPinhole) {
		t.Fatalf("pinhole %d after a reboot: err = %v, want %v", id, err, pinhole.ErrNoSuchPinhole)
	}

	_, err = c.Add(ctx, tcpPinhole(addr.Addr(), port))
	if err != nil {
		t.Fatal(err)
	}
	if !reaches(ctx, lab, addr) {
		t.Fatalf("not reachable after the re-add: the internet cannot connect to %s", addr)
	}
}

// TestLabDaemonRestartKeepsPinholes: a restart of miniupnpd alone leaves its
// firewall rules, and it reads the pinholes back with their IDs.
func TestLabDaemonRestartKeepsPinholes(t *testing.T) {
	lab := igdtest.Start(t, igdtest.Options{IPv6: true})
	ctx := testContext(t)
	c := labClient(t, lab, 0, false)
	addr := listen(t, lab.Nodes[0], port)
	id, err := c.Add(ctx, tcpPinhole(addr.Addr(), port))
	if err != nil {
		t.Fatal(err)
	}

	lab.Restart(t)
	if !reaches(ctx, lab, addr) {
		t.Fatalf("not reachable after a daemon restart: the internet cannot connect to %s", addr)
	}
	_, err = c.Packets(ctx, id)
	if err != nil {
		t.Fatalf("pinhole %d after a daemon restart: %v", id, err)
	}
	again, err := c.Add(ctx, tcpPinhole(addr.Addr(), port))
	if err != nil {
		t.Fatal(err)
	}
	if again != id {
		t.Errorf("re-add after a daemon restart got ID %d, want %d", again, id)
	}
}

// TestLabRefusesLeasesOutsideTheSpecification pins 402 for a lease of 0 and
// over 86400 s; Add validates them away.
func TestLabRefusesLeasesOutsideTheSpecification(t *testing.T) {
	lab := igdtest.Start(t, igdtest.Options{IPv6: true})
	ctx := testContext(t)
	c := labClient(t, lab, 0, false)
	gua := lab.Nodes[0].GUA.String()
	for _, lease := range []uint32{0, 86401} {
		_, err := c.AddUnchecked(ctx, gua, port, igd.TCP, lease)
		if got := igd.Code(err); got != 402 {
			t.Errorf("lease %d: code %d, want 402 (err %v)", lease, got, err)
		}
	}
	_, err := c.AddUnchecked(ctx, gua, port, igd.TCP, 86400)
	if err != nil {
		t.Errorf("lease 86400: %v", err)
	}
}

// TestLabAnotherHostCannotTouchAPinhole: another LAN host reading, renewing
// or deleting a node's pinhole by its ID gets 606, and the pinhole stays.
func TestLabAnotherHostCannotTouchAPinhole(t *testing.T) {
	lab := igdtest.Start(t, igdtest.Options{IPv6: true, Nodes: 2})
	ctx := testContext(t)
	owner, other := labClient(t, lab, 0, false), labClient(t, lab, 1, false)
	id, err := owner.Add(ctx, tcpPinhole(lab.Nodes[0].GUA, port))
	if err != nil {
		t.Fatal(err)
	}

	_, err = other.Packets(ctx, id)
	if !errors.Is(err, igd.ErrNotAuthorized) {
		t.Errorf("Packets from another host: err = %v, want %v", err, igd.ErrNotAuthorized)
	}
	if err := other.Update(ctx, id, time.Hour); !errors.Is(err, igd.ErrNotAuthorized) {
		t.Errorf("Update from another host: err = %v, want %v", err, igd.ErrNotAuthorized)
	}
	if err := other.Delete(ctx, id); !errors.Is(err, igd.ErrNotAuthorized) {
		t.Errorf("Delete from another host: err = %v, want %v", err, igd.ErrNotAuthorized)
	}
	_, err = owner.Packets(ctx, id)
	if err != nil {
		t.Errorf("the owner's pinhole after another host's calls: %v", err)
	}
}

// TestLabAfterARebootAnOldIDNamesAnotherPinhole: the daemon numbers
// pinholes from 1 again after a reboot, so an ID held from before can name
// another pinhole of the same host, and Update by it renews that one. Renew
// by Add, which returns the pinhole's own ID.
func TestLabAfterARebootAnOldIDNamesAnotherPinhole(t *testing.T) {
	lab := igdtest.Start(t, igdtest.Options{IPv6: true})
	ctx := testContext(t)
	c := labClient(t, lab, 0, false)
	gua := lab.Nodes[0].GUA
	old, err := c.Add(ctx, tcpPinhole(gua, port))
	if err != nil {
		t.Fatal(err)
	}

	lab.Reboot(t)
	other, err := c.Add(ctx, tcpPinhole(gua, port+1))
	if err != nil {
		t.Fatal(err)
	}
	if other != old {
		t.Fatalf("the first pinhole after a reboot takes the first ID again: got ID %d, want %d", other, old)
	}
	if err := c.Update(ctx, old, time.Hour); err != nil {
		t.Fatalf("Update by the old ID renews the other pinhole: %v", err)
	}
	readded, err := c.Add(ctx, tcpPinhole(gua, port))
	if err != nil {
		t.Fatal(err)
	}
	if readded == old {
		t.Errorf("the pinhole added again has a new ID: got ID %d, want an ID other than %d", readded, old)
	}
}

// rawFirewall returns goupnp's client for the lab router's
// WANIPv6FirewallControl:1 at controlURL, dialling with dial: for requests
// pinhole.UPnPClient refuses to make.
func rawFirewall(t *testing.T, controlURL string, dial func(ctx context.Context, network, address string) (net.Conn, error)) *internetgateway2.WANIPv6FirewallControl1 {
	t.Helper()
	u, err := url.Parse(controlURL)
	if err != nil {
		t.Fatal(err)
	}
	hc := http.Client{Transport: &http.Transport{DialContext: dial, DisableKeepAlives: true}}
	return &internetgateway2.WANIPv6FirewallControl1{ServiceClient: goupnp.ServiceClient{
		SOAPClient: &soap.SOAPClient{EndpointURL: *u, HTTPClient: hc}}}
}

// TestLabJudgesTheCallerByTheRequestsSource: a pinhole to the node's own
// GUA is refused (606) when the request arrives over IPv4 or from the
// node's ULA, which is why the client sends only from Config.LocalAddr and
// only to an IPv6 control URL.
func TestLabJudgesTheCallerByTheRequestsSource(t *testing.T) {
	lab := igdtest.Start(t, igdtest.Options{IPv6: true})
	ctx := testContext(t)
	n := lab.Nodes[0]
	for _, tc := range []struct {
		name, control string
		dial          func(ctx context.Context, network, address string) (net.Conn, error)
		code          int
	}{
		{"over IPv4", "http://" + lab.RouterLAN.String() + ":5000/ctl/IP6FCtl", n.DialContext, 606},
		{"from the ULA", "http://[" + lab.IPv6.RouterGUA.String() + "]:5000/ctl/IP6FCtl", n.DialContextFrom(n.ULA), 606},
		{"from the GUA", "http://[" + lab.IPv6.RouterGUA.String() + "]:5000/ctl/IP6FCtl", n.DialContextFrom(n.GUA), 0},
	} {
		_, err := rawFirewall(t, tc.control, tc.dial).AddPinholeCtx(ctx, "", 0, n.GUA.String(), port, 6, 3600)
		var f *soap.SOAPFaultError
		code := 0
		if errors.As(err, &f) {
			code = f.Detail.UPnPError.Errorcode
		} else {
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
		}
		if code != tc.code {
			t.Errorf("AddPinhole to the node's GUA %s: code %d, want %d (err %v)", tc.name, code, tc.code, err)
		}
	}
}
