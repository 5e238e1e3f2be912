package hostinfo

import (
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
)

func TestSystemLocalAddr(t *testing.T) {
	got, err := System{}.LocalAddr(t.Context(), netip.MustParseAddr("127.0.0.1"))
	if err != nil || got != netip.MustParseAddr("127.0.0.1") {
		t.Fatalf("LocalAddr(127.0.0.1) = %s, %v", got, err)
	}
	if _, err := (System{}).LocalAddr(t.Context(), netip.Addr{}); err == nil {
		t.Error("LocalAddr(no router) succeeded")
	}
}

func TestSystemDefaultGateway(t *testing.T) {
	tests := []struct {
		name, file string
		want       string
	}{
		{"default via 192.0.2.1", "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n" +
			"eth0\t0002000A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n" +
			"eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n", "192.0.2.1"},
		{"no default route", "Iface\tDestination\tGateway \tFlags\n" +
			"eth0\t000200C0\t00000000\t0001\n", ""},
		// OpenVPN's redirect-gateway def1 adds 0.0.0.0/1 and 128.0.0.0/1:
		// destination 0, but not the default route.
		{"a VPN's 0.0.0.0/1 is not the default route", "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n" +
			"tun0\t00000000\t0100080A\t0003\t0\t0\t0\t00000080\t0\t0\t0\n" +
			"tun0\t00000080\t0100080A\t0003\t0\t0\t0\t00000080\t0\t0\t0\n" +
			"eth0\t00000000\t010200C0\t0003\t0\t0\t100\t00000000\t0\t0\t0\n", "192.0.2.1"},
		{"the lowest metric wins", "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n" +
			"wlan0\t00000000\t0101A8C0\t0003\t0\t0\t600\t00000000\t0\t0\t0\n" +
			"eth0\t00000000\t010200C0\t0003\t0\t0\t100\t00000000\t0\t0\t0\n", "192.0.2.1"},
		{"a route that is down is skipped", "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n" +
			"wlan0\t00000000\t0101A8C0\t0002\t0\t0\t0\t00000000\t0\t0\t0\n" +
			"eth0\t00000000\t010200C0\t0003\t0\t0\t100\t00000000\t0\t0\t0\n", "192.0.2.1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := filepath.Join(t.TempDir(), "route")
			if err := os.WriteFile(name, []byte(tt.file), 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := System{RouteFile: name}.DefaultGateway(t.Context())
			if tt.want == "" {
				if err == nil {
					t.Fatalf("DefaultGateway() = %s, want an error", got)
				}
				return
			}
			if err != nil || got != netip.MustParseAddr(tt.want) {
				t.Fatalf("DefaultGateway() = %s, %v; want %s", got, err, tt.want)
			}
		})
	}
	if _, err := (System{RouteFile: filepath.Join(t.TempDir(), "missing")}).DefaultGateway(t.Context()); err == nil {
		t.Error("DefaultGateway(missing file) succeeded")
	}
}

// TestInterfacesListLoopback: the loopback interface is listed with
// 127.0.0.1, unmapped, and InterfaceAddrs selects it by name and by index.
func TestInterfacesListLoopback(t *testing.T) {
	ifs, err := Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	lo := netip.MustParseAddr("127.0.0.1")
	for _, i := range ifs {
		for _, a := range i.Addrs {
			if a != lo {
				continue
			}
			for _, name := range []string{i.Name, strconv.Itoa(i.Index), ""} {
				got, err := InterfaceAddrs(name)
				if err != nil || !slices.Contains(got, lo) {
					t.Errorf("InterfaceAddrs(%q) = %v, %v; want it to hold 127.0.0.1", name, got, err)
				}
			}
			return
		}
	}
	t.Fatalf("no interface holds 127.0.0.1 (unmapped): %+v", ifs)
}
