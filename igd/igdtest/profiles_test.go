package igdtest_test

import (
	"context"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/igdtest"
	"github.com/ccmkit/ccmkit/internal/igderr"
	"github.com/ccmkit/ccmkit/internal/upnp"
)

// refused asserts that `upnpc -a` with args fails with the UPnP error code.
func refused(t *testing.T, lab *igdtest.Lab, code string, args ...string) {
	t.Helper()
	out, err := lab.Upnpc(testContext(t), 0, append([]string{"-a"}, args...)...)
	require.Error(t, err, "upnpc -a %v succeeded:\n%s", args, out)
	require.Contains(t, out, "failed with code "+code, "upnpc -a %v", args)
}

func TestOpenWrtDefault(t *testing.T) {
	t.Parallel()
	o := igdtest.OpenWrtDefault()
	o.Nodes = 2
	lab := igdtest.Start(t, o)
	ctx := testContext(t)

	c, err := igd.NewClient(lab.ClientConfig(0))
	require.NoError(t, err)
	gw, err := c.Discover(ctx)
	require.NoError(t, err, "miniupnpd log:\n%s", lab.Log())
	require.Equal(t, upnp.ServiceWANIPConnection1, gw.ServiceType, "OpenWrt sets igdv1: an IGD:1 description")

	refused(t, lab, "718", "192.0.2.11", "30081", "8081", "TCP") // secure mode: another node
	refused(t, lab, "606", "192.0.2.10", "80", "80", "TCP")      // below 1024
	refused(t, lab, "606", "192.0.2.10", "22", "8022", "TCP")    // internal port below 1024
	out := upnpc(ctx, t, lab, 0, "-a", "192.0.2.10", "30080", "8080", "TCP")
	require.Contains(t, out, "is redirected to internal 192.0.2.10:30080")
}

func TestHighPortsOnly(t *testing.T) {
	t.Parallel()
	o := igdtest.HighPortsOnly()
	o.Nodes = 2
	lab := igdtest.Start(t, o)
	ctx := testContext(t)

	refused(t, lab, "606", "192.0.2.10", "80", "80", "TCP")
	refused(t, lab, "606", "192.0.2.10", "80", "8080", "TCP")
	out := upnpc(ctx, t, lab, 0, "-a", "192.0.2.10", "8080", "8080", "TCP")
	require.Contains(t, out, "is redirected to internal 192.0.2.10:8080")
	// No secure mode: a mapping to another node is allowed.
	out = upnpc(ctx, t, lab, 0, "-a", "192.0.2.11", "8081", "8081", "TCP")
	require.Contains(t, out, "is redirected to internal 192.0.2.11:8081")
}

// TestTableWipe pins what clean_ruleset does on this daemon: nothing. The
// table holds more than the threshold through several checks, idle, and
// every mapping survives: miniupnpd 2.3.1's nftables backend never reads
// the counters the check compares (see Options.CleanRulesetInterval). When
// the lab's daemon is upgraded to 2.3.10 or later this test fails, and the
// test should become one that proves the wipe.
func TestTableWipe(t *testing.T) {
	t.Parallel()
	const threshold, interval = 2, time.Second
	lab := igdtest.Start(t, igdtest.TableWipe(threshold, interval))
	ctx := testContext(t)
	for p := 8081; p <= 8081+threshold; p++ {
		upnpc(ctx, t, lab, 0, "-a", "192.0.2.10", strconv.Itoa(p+22000), strconv.Itoa(p), "TCP")
	}
	// Each listing wakes the daemon, which checks only when it wakes: a
	// snapshot, then a deletion pass, at least twice over.
	for end := time.Now().Add(5 * interval); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		out := upnpc(ctx, t, lab, 0, "-l")
		require.Equal(t, threshold+1, strings.Count(out, "->192.0.2.10:"), "a mapping went:\n%s", out)
	}
	require.NotContains(t, lab.Log(), "unused")
}

// TestBehindCGNAT: miniupnpd behind a carrier NAT answers an empty external
// address, so the igd client finds no usable gateway and says why; it
// refuses every mapping with 501, and NAT-PMP answers network failure.
func TestBehindCGNAT(t *testing.T) {
	t.Parallel()
	lab := igdtest.Start(t, igdtest.BehindCGNAT())
	ctx := testContext(t)
	require.Equal(t, netip.MustParseAddr("100.64.0.7"), lab.ExternalIP)
	require.Equal(t, netip.MustParseAddr("100.64.0.99"), lab.InternetIP)
	require.False(t, igd.IsPublic(lab.ExternalIP))

	c, err := igd.NewClient(lab.ClientConfig(0))
	require.NoError(t, err)
	_, err = c.Discover(ctx)
	var nge *igderr.NoGatewayError[igd.Candidate]
	require.ErrorIs(t, err, igd.ErrNoGateway)
	require.ErrorAs(t, err, &nge)
	require.Len(t, nge.Found, 1)
	cand := nge.Found[0]
	require.True(t, cand.Status == "Connected", "miniupnpd still says Connected: %+v", cand)
	require.False(t, cand.ExternalIP.IsValid(), "external IP %s", cand.ExternalIP)
	require.False(t, igd.IsPublic(cand.ExternalIP))
	require.Contains(t, cand.Rejected, `GetExternalIPAddress with "": no external IP address`)
	_, err = c.ExternalIP(ctx)
	require.ErrorIs(t, err, igd.ErrNoGateway)

	out, err := lab.Upnpc(ctx, 0, "-a", "192.0.2.10", "30080", "8080", "TCP")
	require.Error(t, err, "AddPortMapping behind CGNAT succeeded:\n%s", out)
	require.Contains(t, out, "ExternalIPAddress = \n")
	require.Contains(t, out, "failed with code 501")
	require.Contains(t, lab.Log(), "Port forwarding is impossible")

	// NAT-PMP: result 3, network failure.
	resp, err := natpmpPublicAddress(ctx, lab)
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(resp), 4)
	require.Equal(t, []byte{0, 128, 0, 3}, resp[:4])
}

// TestNATPMPSwitch: NAT-PMP answers on UDP 5351 unless DisableNATPMP, and
// the daemon starts with the PCP and IPv6 options set.
func TestNATPMPSwitch(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    igdtest.Options
	}{
		{"on", igdtest.Options{PCPAllowThirdParty: true, IPv6Disable: true, MinLifetime: 30 * time.Second, MaxLifetime: time.Hour}},
		{"off", igdtest.Options{DisableNATPMP: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			lab := igdtest.Start(t, tc.o)
			ctx := testContext(t)
			resp, err := natpmpPublicAddress(ctx, lab)
			if tc.o.DisableNATPMP {
				require.Error(t, err, "NAT-PMP answered: % x", resp)
				return
			}
			require.NoError(t, err, "miniupnpd log:\n%s", lab.Log())
			// Version 0, opcode 128, result 0, epoch, external address.
			require.Len(t, resp, 12)
			require.Equal(t, []byte{0, 128, 0, 0}, resp[:4])
			require.Equal(t, lab.ExternalIP, netip.AddrFrom4([4]byte(resp[8:12])))
		})
	}
}

// natpmpPublicAddress sends a NAT-PMP public address request (version 0,
// opcode 0) from node 0 and returns the answer, or an error when none comes
// within a second.
func natpmpPublicAddress(ctx context.Context, lab *igdtest.Lab) ([]byte, error) {
	pc, err := lab.Nodes[0].ListenPacket(ctx, "udp4", lab.Nodes[0].Addr.String()+":0")
	if err != nil {
		return nil, err
	}
	defer pc.Close()
	if _, err := pc.WriteTo([]byte{0, 0}, net.UDPAddrFromAddrPort(netip.AddrPortFrom(lab.RouterLAN, 5351))); err != nil {
		return nil, err
	}
	if err := pc.SetReadDeadline(time.Now().Add(time.Second)); err != nil {
		return nil, err
	}
	buf := make([]byte, 64)
	n, _, err := pc.ReadFrom(buf)
	return buf[:n], err
}
