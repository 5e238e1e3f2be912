package igd

import (
	"errors"
	"net/netip"
	"strings"
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
			d.handle("GetStatusInfo", fault(CodeInvalidAction))
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
