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
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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
		require.NoError(t, err)
		cfg.RootDescURL, cfg.Interface = "", strconv.Itoa(idx)
	}
	c, err := pinhole.New(cfg)
	require.NoError(t, err)
	return c
}

// listen accepts (and closes) connections on [node GUA]:port until the test
// ends: the stand-in for kube-proxy.
func listen(t *testing.T, n *igdtest.Node, port uint16) netip.AddrPort {
	t.Helper()
	addr := netip.AddrPortFrom(n.GUA, port)
	ln, err := n.Listen("tcp", addr.String())
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
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

	require.False(t, reaches(ctx, lab, addr), "reachable before any pinhole")
	id, err := c.Add(ctx, tcpPinhole(addr.Addr(), port))
	require.NoError(t, err, "miniupnpd log:\n%s", lab.Log())
	require.True(t, reaches(ctx, lab, addr), "not reachable through pinhole %d", id)
	n, err := c.Packets(ctx, id)
	require.NoError(t, err)
	// The nftables rule miniupnpd 2.3.1 adds has no counter: it reports 0
	// packets whatever went through (DESIGN.md).
	assert.Zero(t, n, "packets through the pinhole after a connection")

	require.NoError(t, c.Delete(ctx, id))
	require.False(t, reaches(ctx, lab, addr), "reachable after the pinhole was deleted")
	_, err = c.Packets(ctx, id)
	require.ErrorIs(t, err, pinhole.ErrNoSuchPinhole)
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
	require.NoError(t, err, "miniupnpd log:\n%s", lab.Log())
	require.True(t, reaches(ctx, lab, addr))

	n := lab.Nodes[0]
	unnamed, err := pinhole.New(pinhole.Config{LocalAddr: n.GUA, DialContext: n.DialContextFrom(n.GUA), ListenPacket: n.ListenPacket})
	require.NoError(t, err)
	require.NoError(t, unnamed.Delete(ctx, id), "with no interface named")
	require.False(t, reaches(ctx, lab, addr))
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
				assert.ErrorIs(t, err, igd.ErrNotAuthorized, "%s: AddPinhole %s port %d", tc.name, tc.client, tc.port)
			}
			_, err := c.AddUnchecked(ctx, self.GUA.String(), 1024, igd.TCP, 3600)
			assert.NoError(t, err, "port 1024 to the caller's own GUA")
		})
	}
}

func TestLabReAddReturnsTheSameID(t *testing.T) {
	lab := igdtest.Start(t, igdtest.Options{IPv6: true})
	ctx := testContext(t)
	c := labClient(t, lab, 0, false)
	gua := lab.Nodes[0].GUA
	first, err := c.Add(ctx, tcpPinhole(gua, port))
	require.NoError(t, err)
	again, err := labClient(t, lab, 0, false).Add(ctx, tcpPinhole(gua, port))
	require.NoError(t, err)
	assert.Equal(t, first, again, "a second client re-adding the same pinhole")

	udp, err := c.Add(ctx, pinhole.Pinhole{InternalClient: gua, InternalPort: port, Protocol: igd.UDP, Lease: time.Hour})
	require.NoError(t, err)
	assert.NotEqual(t, first, udp, "the same port over UDP is another pinhole")

	// IDs are not reused: after a delete, the same pinhole gets a new one.
	require.NoError(t, c.Delete(ctx, first))
	readded, err := c.Add(ctx, tcpPinhole(gua, port))
	require.NoError(t, err)
	assert.NotEqual(t, first, readded, "re-added after a delete")
}

// waitGone polls until the router no longer holds pinhole id.
func waitGone(ctx context.Context, t *testing.T, c pinhole.Client, id uint16) {
	t.Helper()
	for {
		_, err := c.Packets(ctx, id)
		if errors.Is(err, pinhole.ErrNoSuchPinhole) {
			return
		}
		require.NoError(t, err)
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
	require.NoError(t, err)
	short.InternalPort++
	left, err := c.Add(ctx, short)
	require.NoError(t, err)
	require.NoError(t, c.Update(ctx, renewed, time.Hour))

	waitGone(ctx, t, c, left)
	// The daemon counts whole seconds, so the two 2 s leases end within a
	// second of each other: past that, only a renewal explains the first.
	time.Sleep(1500 * time.Millisecond)
	_, err = c.Packets(ctx, renewed)
	require.NoError(t, err, "the renewed pinhole after the other one expired")
	err = c.Update(ctx, left, time.Hour)
	require.ErrorIs(t, err, pinhole.ErrNoSuchPinhole, "Update of an expired pinhole")
	assert.Equal(t, 402, igd.Code(err), "the router's answer to UpdatePinhole of an expired pinhole")
	_, err = c.Packets(ctx, left)
	assert.Equal(t, 402, igd.Code(err), "the router's answer to GetPinholePackets of an expired pinhole")
}

// TestLabDeleteOfAGoneIDIsNil: the router answers 402 (not the
// specification's 704) for an ID it does not hold; Delete returns nil.
func TestLabDeleteOfAGoneIDIsNil(t *testing.T) {
	lab := igdtest.Start(t, igdtest.Options{IPv6: true})
	ctx := testContext(t)
	c := labClient(t, lab, 0, false)
	id, err := c.Add(ctx, tcpPinhole(lab.Nodes[0].GUA, port))
	require.NoError(t, err)
	require.NoError(t, c.Delete(ctx, id))
	require.NoError(t, c.Delete(ctx, id), "second Delete")
	assert.Equal(t, 402, igd.Code(c.DeleteUnchecked(ctx, id)), "the router's answer to DeletePinhole of a gone ID")
	assert.NoError(t, c.Delete(ctx, id+100), "Delete of an ID never given")
}

// TestLabRebootLosesPinholesAndReAddRestores: a reboot (the firewall
// flushed) closes every pinhole; adding it again opens it.
func TestLabRebootLosesPinholesAndReAddRestores(t *testing.T) {
	lab := igdtest.Start(t, igdtest.Options{IPv6: true})
	ctx := testContext(t)
	c := labClient(t, lab, 0, false)
	addr := listen(t, lab.Nodes[0], port)
	id, err := c.Add(ctx, tcpPinhole(addr.Addr(), port))
	require.NoError(t, err)

	lab.Reboot(t)
	require.False(t, reaches(ctx, lab, addr), "reachable after a reboot")
	_, err = c.Packets(ctx, id)
	require.ErrorIs(t, err, pinhole.ErrNoSuchPinhole, "pinhole %d after a reboot", id)

	_, err = c.Add(ctx, tcpPinhole(addr.Addr(), port))
	require.NoError(t, err)
	require.True(t, reaches(ctx, lab, addr), "not reachable after the re-add")
}

// TestLabDaemonRestartKeepsPinholes: a restart of miniupnpd alone leaves its
// firewall rules, and it reads the pinholes back with their IDs.
func TestLabDaemonRestartKeepsPinholes(t *testing.T) {
	lab := igdtest.Start(t, igdtest.Options{IPv6: true})
	ctx := testContext(t)
	c := labClient(t, lab, 0, false)
	addr := listen(t, lab.Nodes[0], port)
	id, err := c.Add(ctx, tcpPinhole(addr.Addr(), port))
	require.NoError(t, err)

	lab.Restart(t)
	require.True(t, reaches(ctx, lab, addr), "not reachable after a daemon restart")
	_, err = c.Packets(ctx, id)
	require.NoError(t, err, "pinhole %d after a daemon restart", id)
	again, err := c.Add(ctx, tcpPinhole(addr.Addr(), port))
	require.NoError(t, err)
	assert.Equal(t, id, again, "re-add after a daemon restart")
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
		assert.Equal(t, 402, igd.Code(err), "lease %d: %v", lease, err)
	}
	_, err := c.AddUnchecked(ctx, gua, port, igd.TCP, 86400)
	assert.NoError(t, err, "lease 86400")
}

// TestLabAnotherHostCannotTouchAPinhole: another LAN host reading, renewing
// or deleting a node's pinhole by its ID gets 606, and the pinhole stays.
func TestLabAnotherHostCannotTouchAPinhole(t *testing.T) {
	lab := igdtest.Start(t, igdtest.Options{IPv6: true, Nodes: 2})
	ctx := testContext(t)
	owner, other := labClient(t, lab, 0, false), labClient(t, lab, 1, false)
	id, err := owner.Add(ctx, tcpPinhole(lab.Nodes[0].GUA, port))
	require.NoError(t, err)

	_, err = other.Packets(ctx, id)
	assert.ErrorIs(t, err, igd.ErrNotAuthorized, "Packets from another host")
	assert.ErrorIs(t, other.Update(ctx, id, time.Hour), igd.ErrNotAuthorized, "Update from another host")
	assert.ErrorIs(t, other.Delete(ctx, id), igd.ErrNotAuthorized, "Delete from another host")
	_, err = owner.Packets(ctx, id)
	assert.NoError(t, err, "the owner's pinhole after another host's calls")
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
	require.NoError(t, err)

	lab.Reboot(t)
	other, err := c.Add(ctx, tcpPinhole(gua, port+1))
	require.NoError(t, err)
	require.Equal(t, old, other, "the first pinhole after a reboot takes the first ID again")
	require.NoError(t, c.Update(ctx, old, time.Hour), "Update by the old ID renews the other pinhole")
	readded, err := c.Add(ctx, tcpPinhole(gua, port))
	require.NoError(t, err)
	assert.NotEqual(t, old, readded, "the pinhole added again has a new ID")
}

// rawFirewall returns goupnp's client for the lab router's
// WANIPv6FirewallControl:1 at controlURL, dialling with dial: for requests
// pinhole.UPnPClient refuses to make.
func rawFirewall(t *testing.T, controlURL string, dial func(ctx context.Context, network, address string) (net.Conn, error)) *internetgateway2.WANIPv6FirewallControl1 {
	t.Helper()
	u, err := url.Parse(controlURL)
	require.NoError(t, err)
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
			require.NoError(t, err, tc.name)
		}
		assert.Equal(t, tc.code, code, "AddPinhole to the node's GUA %s: %v", tc.name, err)
	}
}
