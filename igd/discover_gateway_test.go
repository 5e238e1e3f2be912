package igd

import (
	"errors"
	"fmt"
	"github.com/ccmkit/ccmkit/internal/upnp"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"
)

// A LAN host that is not the default gateway answers SSDP with a service
// that outranks the real router's on every rule (connected, public external
// IP, WANIPConnection:2). Discovery must choose the default gateway, or fail
// saying why, and never send the rogue a single request: it would receive
// every mapping, and its claimed address would become the Services'
// ingress.
func TestSSDPDiscoveryNeverChoosesAHostOtherThanTheGateway(t *testing.T) {
	const gwIP, rogueIP = "127.0.0.3", "127.0.0.2"
	tests := []struct {
		name string
		// gateway sets up the real router; nil means it never answers.
		gateway func(t *testing.T) *ssdpDevice
		timeout time.Duration // DiscoveryTimeout
		wantErr string        // "" means the gateway is chosen
	}{
		{"gateway behind CGNAT", func(t *testing.T) *ssdpDevice {
			d := newSSDPDevice(t, igd1Device, gwIP, 0)
			d.handle("GetExternalIPAddress", reply("NewExternalIPAddress", "100.64.0.5"))
			return d
		}, time.Minute, ""},
		{"gateway reports no status", func(t *testing.T) *ssdpDevice {
			d := newSSDPDevice(t, igd1Device, gwIP, 0)
			d.handle("GetStatusInfo", fault(upnp.CodeInvalidAction))
			return d
		}, time.Minute, ""},
		{"gateway answers after the settle window", func(t *testing.T) *ssdpDevice {
			return newSSDPDevice(t, igd2Device, gwIP, 1500*time.Millisecond)
		}, time.Minute, ""},
		{"gateway silent", nil, 1500 * time.Millisecond, "answered from 127.0.0.2, not the default gateway 127.0.0.3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rogue := newSSDPDevice(t, igd2Device, rogueIP, 0)
			rogue.handle("GetStatusInfo", reply("NewConnectionStatus", "Connected", "NewLastConnectionError", "", "NewUptime", "1"))
			rogue.handle("GetExternalIPAddress", reply("NewExternalIPAddress", "198.51.101.66"))
			n := &ssdpNet{t: t, devices: []*ssdpDevice{rogue}}
			if tt.gateway != nil {
				n.devices = append(n.devices, tt.gateway(t))
			}
			c, err := NewClient(Config{
				ListenPacket:     n.ListenPacket,
				DiscoveryTimeout: tt.timeout,
				SettleTime:       300 * time.Millisecond,
				CallTimeout:      5 * time.Second,
				Host:             fakeHost{gw: netip.MustParseAddr(gwIP)},
			})
			if err != nil {
				t.Fatal(err)
			}
			gw, err := c.Discover(testCtx(t))
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Discover() = %v, want the default gateway %s", err, gwIP)
			case tt.wantErr == "" && gw.Addr != netip.MustParseAddr(gwIP):
				t.Errorf("chose %s (%s), want the default gateway %s", gw.Addr, gw.Reason, gwIP)
			case tt.wantErr == "" && !strings.Contains(gw.Reason, "the default gateway "+gwIP):
				t.Errorf("Reason = %q, want it to say the default gateway %s was the one accepted", gw.Reason, gwIP)
			case tt.wantErr != "" && err == nil:
				t.Fatalf("Discover() chose %s (%s), want an error: the only answer came from a host that is not the default gateway", gw.Addr, gw.Reason)
			case tt.wantErr != "" && (!errors.Is(err, ErrNoGateway) || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("Discover() = %v, want ErrNoGateway saying %q", err, tt.wantErr)
			}
			if f, calls := rogue.DescFetches(), len(rogue.Calls()); f != 0 || calls != 0 {
				t.Errorf("the host that is not the default gateway got %d description fetches and %d SOAP calls, want none", f, calls)
			}
		})
	}
}

// A host with no default route accepts no router by SSDP: discovery lists
// every answer, probes none, and says how to name the router.
func TestSSDPDiscoveryWithoutADefaultRouteNamesWhatAnswered(t *testing.T) {
	for _, host := range []fakeHost{{}, {err: errors.New("no routes here")}} {
		d := newSSDPDevice(t, igd2Device, "127.0.0.2", 0)
		n := &ssdpNet{t: t, devices: []*ssdpDevice{d}}
		c, err := NewClient(Config{ListenPacket: n.ListenPacket, DiscoveryTimeout: 500 * time.Millisecond, Host: host})
		if err != nil {
			t.Fatal(err)
		}
		gw, err := c.Discover(testCtx(t))
		if err == nil {
			t.Fatalf("Discover() with %+v chose %s (%s), want an error", host, gw.Addr, gw.Reason)
		}
		want := []string{"answered from 127.0.0.2", "no default gateway", "Config.RootDescURL or Config.Router"}
		if host.err != nil {
			want = append(want, host.err.Error())
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("Discover() with %+v = %v, want it to say %q", host, err, w)
			}
		}
		if f := d.DescFetches(); f != 0 {
			t.Errorf("fetched %d descriptions, want none", f)
		}
	}
}

// The operator names a router that is not the default gateway: by address
// (Config.Router, SSDP still finds its description) or by URL
// (Config.RootDescURL). It is used, and the reason says who named it; by
// address, the default gateway's own answers are then ignored.
func TestDiscoveryUsesTheRouterTheOperatorNames(t *testing.T) {
	const gwIP, otherIP = "127.0.0.3", "127.0.0.2"
	gwDev := newSSDPDevice(t, igd2Device, gwIP, 0)
	other := newSSDPDevice(t, igd1Device, otherIP, 0)
	other.handle("GetExternalIPAddress", reply("NewExternalIPAddress", "100.64.0.5"))
	n := &ssdpNet{t: t, devices: []*ssdpDevice{gwDev, other}}
	host := fakeHost{gw: netip.MustParseAddr(gwIP)}
	tests := []struct {
		name   string
		cfg    Config
		reason string
	}{
		{"by address", Config{Router: netip.MustParseAddr(otherIP), ListenPacket: n.ListenPacket}, "Config.Router " + otherIP + "; "},
		{"by URL", Config{RootDescURL: other.URL}, "named by Config.RootDescURL; "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			cfg.Host, cfg.DiscoveryTimeout, cfg.CallTimeout = host, time.Minute, 5*time.Second
			before := gwDev.DescFetches()
			c, err := NewClient(cfg)
			if err != nil {
				t.Fatal(err)
			}
			gw, err := c.Discover(testCtx(t))
			if err != nil {
				t.Fatal(err)
			}
			if gw.Location != other.URL || !strings.HasPrefix(gw.Reason, tt.reason) || !strings.Contains(gw.Reason, "not the default gateway") {
				t.Errorf("chose %s (%s), want %s with a reason starting %q and saying it is not the default gateway", gw.Location, gw.Reason, other.URL, tt.reason)
			}
			if f := gwDev.DescFetches() - before; f != 0 {
				t.Errorf("fetched the default gateway's description %d times, want none: the operator named another router", f)
			}
		})
	}
}

func TestConfigRouterMustBeAnIPv4HostAddress(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"IPv6", Config{Router: netip.MustParseAddr("fe80::1")}, "must be an IPv4 address"},
		{"unspecified", Config{Router: netip.MustParseAddr("0.0.0.0")}, "must be a host address"},
		{"multicast", Config{Router: netip.MustParseAddr("239.255.255.250")}, "must be a host address"},
		{"with RootDescURL", Config{Router: netip.MustParseAddr("192.0.2.1"), RootDescURL: "http://192.0.2.1:5000/rootDesc.xml"}, "set one of them"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewClient(tt.cfg)
			if err == nil || !strings.Contains(err.Error(), "Config.Router") || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("NewClient(%+v) = %v, want an error on Config.Router saying %q", tt.cfg, err, tt.want)
			}
		})
	}
}

// SSDP answers are UDP: any LAN host can send them with the default
// gateway's source address. Answers spoofed so, with as many LOCATIONs as
// the gateway's locations probed at once (maxLocationsPerHost), all on the
// gateway's address at a closed port, arrive before the gateway's own
// answer: that answer is still probed and the gateway chosen (the spoofed
// locations delay it by one failed fetch each; maxGatewayLocations bounds
// how many are tried). A rogue IGD elsewhere on the LAN (127.0.0.2,
// "connected, public") answers too and is never chosen. Sockets bound to
// 127.0.0.3 stand in for the spoofed source address.
func TestSSDPDiscoveryAnswersSpoofedFromTheGatewayDoNotShutOutItsOwn(t *testing.T) {
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

// Answers spoofed from the default gateway's address whose LOCATIONs are
// on the gateway but hang (a TCP port that accepts and never answers an
// HTTP request: dnsmasq's DNS-over-TCP on port 53 reads "GE" as a
// 18245-byte length and waits) hold every probe slot (maxLocationsPerHost)
// for CallTimeout. The gateway's own answer, arriving while they hang, is
// queued rather than dropped, probed once a slot frees, and chosen; a
// rogue IGD elsewhere on the LAN answers at once and is never chosen.
func TestSSDPDiscoveryQueuesTheGatewaysAnswerBehindHangingSpoofedLocations(t *testing.T) {
	const gwIP = "127.0.0.3"
	ln, err := net.Listen("tcp", gwIP+":0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var held []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c) // accept, never answer
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range held {
			c.Close()
		}
		mu.Unlock()
	})
	n := &ssdpNet{t: t}
	gw := newSSDPDevice(t, igd2Device, gwIP, 50*time.Millisecond) // the real router answers a little after the spoofs
	rogue := newSSDPDevice(t, igd2Device, "127.0.0.2", 0)
	spoof := newSSDPDevice(t, igd2Device, gwIP, 0) // "from" the gateway's address
	var locs []string
	for i := range maxLocationsPerHost {
		locs = append(locs, fmt.Sprintf("http://%s/rootDesc%d.xml", ln.Addr(), i))
	}
	spoof.SetAnswers(locs, 0)
	wantGatewayChosen(t, n, gwIP, gw, rogue, spoof, 300*time.Millisecond)
}
