package igdtest_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/igdtest"
	"github.com/ccmkit/ccmkit/internal/igderr"
	"github.com/ccmkit/ccmkit/internal/upnp"
)

// refused asserts that `upnpc -a` with args fails with the UPnP error code.
func refused(t *testing.T, lab *igdtest.Lab, code string, args ...string) {
	t.Helper()
	out, err := lab.Upnpc(testContext(t), 0, append([]string{"-a"}, args...)...)
	if err == nil {
		t.Fatalf("upnpc -a %v succeeded:\n%s", args, out)
	}
	if !strings.Contains(out, "failed with code "+code) {
		t.Fatalf("upnpc -a %v: output lacks %q:\n%s", args, "failed with code "+code, out)
	}
}

func TestOpenWrtDefault(t *testing.T) {
	t.Parallel()
	o := igdtest.OpenWrtDefault()
	o.Nodes = 2
	lab := igdtest.Start(t, o)
	ctx := testContext(t)

	c, err := igd.NewClient(lab.ClientConfig(0))
	if err != nil {
		t.Fatal(err)
	}
	gw, err := c.Discover(ctx)
	if err != nil {
		t.Fatalf("%v; miniupnpd log:\n%s", err, lab.Log())
	}
	if gw.ServiceType != upnp.ServiceWANIPConnection1 {
		t.Fatalf("service type %s, want %s: OpenWrt sets igdv1, an IGD:1 description", gw.ServiceType, upnp.ServiceWANIPConnection1)
	}

	refused(t, lab, "718", "192.0.2.11", "30081", "8081", "TCP") // secure mode: another node
	refused(t, lab, "606", "192.0.2.10", "80", "80", "TCP")      // below 1024
	refused(t, lab, "606", "192.0.2.10", "22", "8022", "TCP")    // internal port below 1024
	out := upnpc(ctx, t, lab, 0, "-a", "192.0.2.10", "30080", "8080", "TCP")
	if !strings.Contains(out, "is redirected to internal 192.0.2.10:30080") {
		t.Fatalf("upnpc -a output lacks %q:\n%s", "is redirected to internal 192.0.2.10:30080", out)
	}
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
	if !strings.Contains(out, "is redirected to internal 192.0.2.10:8080") {
		t.Fatalf("upnpc -a output lacks %q:\n%s", "is redirected to internal 192.0.2.10:8080", out)
	}
	// No secure mode: a mapping to another node is allowed.
	out = upnpc(ctx, t, lab, 0, "-a", "192.0.2.11", "8081", "8081", "TCP")
	if !strings.Contains(out, "is redirected to internal 192.0.2.11:8081") {
		t.Fatalf("upnpc -a output lacks %q:\n%s", "is redirected to internal 192.0.2.11:8081", out)
	}
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
		if n := strings.Count(out, "->192.0.2.10:"); n != threshold+1 {
			t.Fatalf("%d mappings listed, want %d; a mapping went:\n%s", n, threshold+1, out)
		}
	}
	if strings.Contains(lab.Log(), "unused") {
		t.Fatalf("miniupnpd log has %q:\n%s", "unused", lab.Log())
	}
}

// TestBehindCGNAT: miniupnpd behind a carrier NAT answers an empty external
// address, so the igd client finds no usable gateway and says why; it
// refuses every mapping with 501, and NAT-PMP answers network failure.
func TestBehindCGNAT(t *testing.T) {
	t.Parallel()
	lab := igdtest.Start(t, igdtest.BehindCGNAT())
	ctx := testContext(t)
	if want := netip.MustParseAddr("100.64.0.7"); lab.ExternalIP != want {
		t.Fatalf("lab.ExternalIP = %v, want %v", lab.ExternalIP, want)
	}
	if want := netip.MustParseAddr("100.64.0.99"); lab.InternetIP != want {
		t.Fatalf("lab.InternetIP = %v, want %v", lab.InternetIP, want)
	}
	if igd.IsPublic(lab.ExternalIP) {
		t.Fatalf("IsPublic(%v) = true, want false", lab.ExternalIP)
	}

	c, err := igd.NewClient(lab.ClientConfig(0))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Discover(ctx)
	var nge *igderr.NoGatewayError[igd.Candidate]
	if !errors.Is(err, igd.ErrNoGateway) {
		t.Fatalf("Discover = %v, want igd.ErrNoGateway", err)
	}
	if !errors.As(err, &nge) {
		t.Fatalf("Discover = %v, want a %T", err, nge)
	}
	if len(nge.Found) != 1 {
		t.Fatalf("%d candidates found, want 1: %+v", len(nge.Found), nge.Found)
	}
	cand := nge.Found[0]
	if cand.Status != "Connected" {
		t.Fatalf("miniupnpd still says Connected: %+v", cand)
	}
	if cand.ExternalIP.IsValid() {
		t.Fatalf("external IP %s, want none", cand.ExternalIP)
	}
	if igd.IsPublic(cand.ExternalIP) {
		t.Fatalf("IsPublic(%v) = true, want false", cand.ExternalIP)
	}
	if want := `GetExternalIPAddress with "": no external IP address`; !strings.Contains(cand.Rejected, want) {
		t.Fatalf("candidate rejected for %q, want %q", cand.Rejected, want)
	}
	_, err = c.ExternalIP(ctx)
	if !errors.Is(err, igd.ErrNoGateway) {
		t.Fatalf("ExternalIP = %v, want igd.ErrNoGateway", err)
	}

	out, err := lab.Upnpc(ctx, 0, "-a", "192.0.2.10", "30080", "8080", "TCP")
	if err == nil {
		t.Fatalf("AddPortMapping behind CGNAT succeeded:\n%s", out)
	}
	if !strings.Contains(out, "ExternalIPAddress = \n") {
		t.Fatalf("upnpc -a output lacks %q:\n%s", "ExternalIPAddress = \n", out)
	}
	if !strings.Contains(out, "failed with code 501") {
		t.Fatalf("upnpc -a output lacks %q:\n%s", "failed with code 501", out)
	}
	if !strings.Contains(lab.Log(), "Port forwarding is impossible") {
		t.Fatalf("miniupnpd log lacks %q:\n%s", "Port forwarding is impossible", lab.Log())
	}

	// NAT-PMP: result 3, network failure.
	resp, err := natpmpPublicAddress(ctx, lab)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp) < 4 {
		t.Fatalf("NAT-PMP answer % x, want at least 4 bytes", resp)
	}
	if want := []byte{0, 128, 0, 3}; !bytes.Equal(resp[:4], want) {
		t.Fatalf("NAT-PMP answer starts % x, want % x", resp[:4], want)
	}
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
				if err == nil {
					t.Fatalf("NAT-PMP answered: % x", resp)
				}
				return
			}
			if err != nil {
				t.Fatalf("%v; miniupnpd log:\n%s", err, lab.Log())
			}
			// Version 0, opcode 128, result 0, epoch, external address.
			if len(resp) != 12 {
				t.Fatalf("NAT-PMP answer % x is %d bytes, want 12", resp, len(resp))
			}
			if want := []byte{0, 128, 0, 0}; !bytes.Equal(resp[:4], want) {
				t.Fatalf("NAT-PMP answer starts % x, want % x", resp[:4], want)
			}
			if got := netip.AddrFrom4([4]byte(resp[8:12])); got != lab.ExternalIP {
				t.Fatalf("NAT-PMP external address %v, want %v", got, lab.ExternalIP)
			}
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
