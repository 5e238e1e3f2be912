package edge

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/internal/hostinfo"
	"github.com/ccmkit/ccmkit/loadbalancer"
)

// TestOwnNodeAddressWithoutNodeName checks the address the load balancer
// looks its node up by, with no loadBalancer.nodeName and UPnP pinholes:
// the IPv4 address beside this host's global IPv6 address, else the IPv4
// router client's address toward the router, else an error that names
// loadBalancer.nodeName and why neither is known.
func TestOwnNodeAddressWithoutNodeName(t *testing.T) {
	lo := hostinfo.Interface{Name: "lo", Index: 1, Addrs: addrs("127.0.0.1", "::1")}
	eth0 := hostinfo.Interface{Name: "eth0", Index: 2, Addrs: addrs("192.168.1.2", "fe80::10", nodeGUA.String())}
	eth1 := hostinfo.Interface{Name: "eth1", Index: 3, Addrs: addrs("192.168.2.2", "2001:db8:2::10")}
	ula := hostinfo.Interface{Name: "eth0", Index: 2, Addrs: addrs("192.168.1.2", "fd00:1::10")}
	twoV4 := hostinfo.Interface{Name: "eth0", Index: 2, Addrs: addrs("192.168.1.2", "192.168.1.3", nodeGUA.String())}
	for _, tt := range []struct {
		name    string
		ifs     []hostinfo.Interface
		iface   string // gateway.ipv6.interface
		router  bool   // an IPv4 router on 127.0.0.1
		want    netip.Addr
		wantErr []string // in the error
	}{
		{name: "beside the global address", ifs: []hostinfo.Interface{lo, eth0}, want: netip.MustParseAddr("192.168.1.2")},
		{name: "on gateway.ipv6.interface", ifs: []hostinfo.Interface{lo, eth0, eth1}, iface: "eth1", want: netip.MustParseAddr("192.168.2.2")},
		{name: "named by its index", ifs: []hostinfo.Interface{lo, eth0, eth1}, iface: "3", want: netip.MustParseAddr("192.168.2.2")},
		{name: "no global address: toward the router", ifs: []hostinfo.Interface{lo, ula}, router: true, want: netip.MustParseAddr("127.0.0.1")},
		{name: "no global address, no router", ifs: []hostinfo.Interface{lo, ula},
			wantErr: []string{"loadBalancer.nodeName is empty", "this host has no global IPv6 address", "the IPv4 router gives no address", "NODE_NAME"}},
		{name: "global addresses on two interfaces, no router", ifs: []hostinfo.Interface{lo, eth0, eth1},
			wantErr: []string{"loadBalancer.nodeName is empty", "several interfaces of this host (eth0, eth1): set gateway.ipv6.interface"}},
		{name: "two IPv4 addresses beside it, no router", ifs: []hostinfo.Interface{lo, twoV4},
			wantErr: []string{"loadBalancer.nodeName is empty", "eth0, the interface with this host's global IPv6 address, has 2 IPv4 addresses"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			url := deadURL(t, "127.0.0.1")
			if tt.router {
				srv := fake.NewServer(fake.NewRouter(fake.RouterConfig{}), fake.ServerOptions{})
				t.Cleanup(srv.Close)
				url = srv.RootDescURL
			}
			u, err := igd.NewClient(igd.Config{RootDescURL: url})
			if err != nil {
				t.Fatal(err)
			}
			c := selfByAddress{UPnPClient: u, iface: tt.iface, interfaces: func() ([]hostinfo.Interface, error) { return tt.ifs, nil }}
			got, err := c.LocalAddr(context.Background())
			if len(tt.wantErr) > 0 {
				if err == nil {
					t.Fatalf("LocalAddr = %s, want an error", got)
				}
				for _, w := range tt.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("LocalAddr error %q does not say %q", err, w)
					}
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("LocalAddr = %s, %v; want %s", got, err, tt.want)
			}
		})
	}
}

// deadURL is a description URL on host where nothing listens.
func deadURL(t *testing.T, host string) string {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String() + "/rootDesc.xml"
	ln.Close()
	return url
}

// addrs parses each address.
func addrs(s ...string) []netip.Addr {
	out := make([]netip.Addr, len(s))
	for i, a := range s {
		out[i] = netip.MustParseAddr(a)
	}
	return out
}

// TestOwnPinholesSayThisHostsGlobalAddresses: the UPnP pinhole client gives
// the load balancer this host's global IPv6 addresses (not ULA, link-local
// or loopback), on gateway.ipv6.interface when set, to find its node by.
func TestOwnPinholesSayThisHostsGlobalAddresses(t *testing.T) {
	lo := hostinfo.Interface{Name: "lo", Index: 1, Addrs: addrs("127.0.0.1", "::1")}
	eth0 := hostinfo.Interface{Name: "eth0", Index: 2, Addrs: addrs("192.168.1.2", "fe80::10", "fd00:1::10", nodeGUA.String())}
	eth1 := hostinfo.Interface{Name: "eth1", Index: 3, Addrs: addrs("192.168.2.2", "2001:db8:2::10")}
	broken := errors.New("netlink: permission denied")
	for _, tt := range []struct {
		name    string
		iface   string // gateway.ipv6.interface
		ifsErr  error
		want    []netip.Addr
		wantErr error
	}{
		{name: "every interface", want: []netip.Addr{nodeGUA, netip.MustParseAddr("2001:db8:2::10")}},
		{name: "on gateway.ipv6.interface", iface: "eth0", want: []netip.Addr{nodeGUA}},
		{name: "interfaces unreadable", ifsErr: broken, wantErr: broken},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := GatewayConfig{IPv6: IPv6Config{Enabled: true, Interface: tt.iface}}
			c, err := newPinholes(g, nil, nil, func() ([]hostinfo.Interface, error) { return []hostinfo.Interface{lo, eth0, eth1}, tt.ifsErr })
			if err != nil {
				t.Fatal(err)
			}
			got, err := c.(loadbalancer.OwnHostPinholes).LocalAddrs(context.Background())
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("LocalAddrs error = %v, want %v", err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateComparable(netip.Addr{})); diff != "" {
				t.Errorf("LocalAddrs (-want +got):\n%s", diff)
			}
		})
	}
}
