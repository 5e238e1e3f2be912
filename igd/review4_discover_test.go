package igd

import (
	"fmt"
	"net/netip"
	"testing"
	"time"
)

// review4: SSDP answers are UDP; on a LAN any host can send them with the
// default gateway's source address. Four such answers with LOCATIONs on the
// gateway's address (closed ports) use up the gateway's
// maxLocationsPerHost before the real gateway answers, so its answer is
// dropped and discovery picks a rogue IGD elsewhere on the LAN (here
// 127.0.0.2, also "connected, public"). Sockets bound to 127.0.0.3 stand
// in for the spoofed source address.
func TestReview4SpoofedGatewayAnswersCrowdOutTheGateway(t *testing.T) {
	const gwIP = "127.0.0.3"
	n := &ssdpNet{t: t}
	gw := newSSDPDevice(t, igd2Device, gwIP, 200*time.Millisecond) // the real router, a little slower
	rogue := newSSDPDevice(t, igd2Device, "127.0.0.2", 0)
	spoof := newSSDPDevice(t, igd2Device, gwIP, 0) // "from" the gateway's address
	var locs []string
	for i := range maxLocationsPerHost {
		locs = append(locs, fmt.Sprintf("http://%s:1/rootDesc%d.xml", gwIP, i))
	}
	spoof.SetAnswers(locs, 0)
	wantGatewayChosen(t, n, gwIP, gw, rogue, spoof, time.Second)
}

// wantGatewayChosen makes gw and rogue connected routers with a public
// address, lets spoof answer beside them, and fails t unless discovery,
// with settle as its settle window, chooses the default gateway gwIP.
func wantGatewayChosen(t *testing.T, n *ssdpNet, gwIP string, gw, rogue, spoof *ssdpDevice, settle time.Duration) {
	t.Helper()
	for _, d := range []*ssdpDevice{gw, rogue} {
		d.handle("GetStatusInfo", reply("NewConnectionStatus", "Connected", "NewLastConnectionError", "", "NewUptime", "1"))
		d.handle("GetExternalIPAddress", reply("NewExternalIPAddress", "198.51.101.7"))
	}
	n.devices = []*ssdpDevice{gw, rogue, spoof}
	c, err := NewClient(Config{
		ListenPacket:     n.ListenPacket,
		DiscoveryTimeout: 5 * time.Second,
		SettleTime:       settle,
		Host:             fakeHost{gw: netip.MustParseAddr(gwIP)},
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Discover(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if got.Addr != netip.MustParseAddr(gwIP) {
		t.Errorf("chose %s (%s), want the default gateway %s", got.Addr, got.Reason, gwIP)
	}
}
