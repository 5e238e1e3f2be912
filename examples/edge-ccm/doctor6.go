package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"math/big"
	"net/netip"
	"strings"

	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/pcp"
	"github.com/ccmkit/ccmkit/igd/pinhole"
	"github.com/ccmkit/ccmkit/igd/routercheck"
	"github.com/ccmkit/ccmkit/internal/hostinfo"
	"github.com/ccmkit/ccmkit/provider/edge"
)

// This file is the doctor's IPv6 family (gateway.ipv6): this host's global
// address, the router's IPv6 firewall, and a test pinhole opened and closed.

// The doctor's IPv6 checks' names (Finding.Check), after routercheck's.
const (
	checkIPv6Address  = "ipv6-address"
	checkIPv6Firewall = "ipv6-firewall"
	checkIPv6Pinhole  = "ipv6-pinhole"
)

// pinholeOpener is what the test pinhole goes through: the load balancer's
// pinhole client for the protocol gateway.protocol chooses.
type pinholeOpener interface {
	OpenPinhole(ctx context.Context, p pinhole.Pinhole) error
	ClosePinhole(ctx context.Context, p pinhole.Pinhole) error
}

// ipv6Findings checks the IPv6 family as g configures it, from this host:
// its global address (the first of them, on gateway.ipv6.interface when
// set), whether the router's IPv6 firewall answers (UPnP: found by SSDP over
// IPv6 or at gateway.ipv6.url, and a read of pinhole 0 answered; PCP: the
// server answers an ANNOUNCE request), and a test pinhole to this host's
// address, a port of routercheck.DefaultPorts, for routercheck.DefaultLease,
// opened and closed. With IPv6 off every check is skipped.
func ipv6Findings(ctx context.Context, g edge.GatewayConfig, dn doctorNet) []routercheck.Finding {
	skip := func(why string) []routercheck.Finding {
		var fs []routercheck.Finding
		for _, c := range []string{checkIPv6Address, checkIPv6Firewall, checkIPv6Pinhole} {
			fs = append(fs, routercheck.Finding{Check: c, Status: routercheck.Skipped, Detail: why})
		}
		return fs
	}
	if !g.IPv6.Enabled {
		return skip("not probed: gateway.ipv6.enabled is false, so Services' IPv6 family is not served (IPv6-only Services are refused, dual-stack ones get an IPFamilyNotServed event)")
	}
	addrs := dn.ipv6Addrs
	if addrs == nil {
		addrs = hostinfo.InterfaceAddrs
	}
	host, err := addrs(g.IPv6.Interface)
	all := pinhole.GlobalAddrs(host) // in the host's order
	if err != nil || len(all) == 0 {
		where := "this host"
		if g.IPv6.Interface != "" {
			where = g.IPv6.Interface
		}
		d := "no global IPv6 address on " + where + " (a ULA, link-local or temporary address cannot take a pinhole)"
		if err != nil {
			d = fmt.Sprintf("%s: %v", d, err)
		}
		return append([]routercheck.Finding{{Check: checkIPv6Address, Status: routercheck.Fail, Detail: d,
			Fix: "give the nodes global IPv6 addresses (the router advertises its delegated prefix: SLAAC or DHCPv6) and report them in the Nodes' status (kubelet --node-ip with both families), or set gateway.ipv6.enabled: false"}},
			skip("not probed: no global IPv6 address")[1:]...)
	}
	self := all[0]
	d := self.String()
	if len(all) > 1 {
		d += fmt.Sprintf(" (first of %s; the load balancer uses the one the Node's status reports)", joinAddrs(all))
	}
	fs := []routercheck.Finding{{Check: checkIPv6Address, Status: routercheck.OK, Detail: d}}

	usesPCP := g.Protocol == edge.ProtocolPCP || g.Protocol == edge.ProtocolPCPOnly || (g.Protocol != edge.ProtocolUPnP && g.PCPSecretFile != "")
	var (
		opener pinholeOpener
		find   func(context.Context) error
		via    string
	)
	if usesPCP {
		c := dn.pcp6
		if c == nil {
			if c, err = pcp.NewClient(g.PCPConfig6()); err != nil {
				return append(fs, routercheck.Finding{Check: checkIPv6Firewall, Status: routercheck.Fail, Detail: err.Error(), Fix: "correct gateway.ipv6.url"},
					routercheck.Finding{Check: checkIPv6Pinhole, Status: routercheck.Skipped, Detail: "not probed: no PCP server"})
			}
		}
		// A secret of the run's own: the test pinhole's nonce is nobody
		// else's, and the cluster's secret need not be mounted.
		p, err := pcp.NewPinholes(pcp.PinholesConfig{PCP: c, Secret: []byte(rand.Text() + rand.Text())})
		if err != nil {
			return append(fs, routercheck.Finding{Check: checkIPv6Firewall, Status: routercheck.Fail, Detail: err.Error()})
		}
		opener, via = p, "PCP"
		find = func(ctx context.Context) error {
			_, err := c.EpochLost(ctx) // one ANNOUNCE request
			if errors.Is(err, igd.ErrRefused) {
				return nil // it answered
			}
			return err
		}
	} else {
		cfg := g.PinholeConfig(self)
		if dn.pinhole != nil {
			cfg = dn.pinhole(cfg)
		}
		c, err := pinhole.New(cfg)
		if err != nil {
			return append(fs, routercheck.Finding{Check: checkIPv6Firewall, Status: routercheck.Fail, Detail: err.Error(), Fix: "correct gateway.ipv6.url or gateway.ipv6.interface"},
				routercheck.Finding{Check: checkIPv6Pinhole, Status: routercheck.Skipped, Detail: "not probed: no router client"})
		}
		opener, via = c, "UPnP"
		find = func(ctx context.Context) error {
			_, err := c.Packets(ctx, 0) // pinhole 0: any answer of the router's will do
			var upnpErr *igd.UPnPError
			if err == nil || errors.Is(err, pinhole.ErrNoSuchPinhole) || errors.As(err, &upnpErr) {
				return nil
			}
			return err
		}
	}
	fs = append(fs, firewallFinding(find(ctx), g, usesPCP))
	if fs[len(fs)-1].Status == routercheck.Fail {
		return append(fs, routercheck.Finding{Check: checkIPv6Pinhole, Status: routercheck.Skipped, Detail: "not probed: the router's IPv6 firewall did not answer"})
	}
	return append(fs, testPinhole(ctx, opener, self, via))
}

// firewallFinding is the ipv6-firewall finding of find's outcome.
func firewallFinding(err error, g edge.GatewayConfig, usesPCP bool) routercheck.Finding {
	f := routercheck.Finding{Check: checkIPv6Firewall, Status: routercheck.OK}
	switch {
	case usesPCP && g.IPv6.URL != "":
		f.Detail = "the PCP server at gateway.ipv6.url's host answers over IPv6"
	case usesPCP:
		f.Detail = "the PCP server of this host's IPv6 default router answers"
	case g.IPv6.URL != "":
		f.Detail = "WANIPv6FirewallControl:1 at gateway.ipv6.url answers"
	default:
		f.Detail = "WANIPv6FirewallControl:1, found by SSDP over IPv6 (ff02::c), answers"
	}
	if err == nil {
		return f
	}
	f.Status, f.Detail = routercheck.Fail, err.Error()
	if usesPCP {
		f.Fix = "turn PCP on in the router (miniupnpd: enable_natpmp=yes, ipv6_disable=no), or name the server with gateway.ipv6.url; or write through UPnP (gateway.protocol: upnp)"
	} else {
		f.Fix = "turn UPnP IGD:2 with IPv6 on in the router (miniupnpd: force_igd_desc_v1=no, ipv6_disable=no), or name its description on its IPv6 address with gateway.ipv6.url where multicast is filtered"
	}
	return f
}

// testPinhole opens a pinhole to self on a random port of
// routercheck.DefaultPorts through o, and closes it.
func testPinhole(ctx context.Context, o pinholeOpener, self netip.Addr, via string) routercheck.Finding {
	span := int64(routercheck.DefaultPorts.Last-routercheck.DefaultPorts.First) + 1
	n, err := rand.Int(rand.Reader, big.NewInt(span))
	if err != nil {
		return routercheck.Finding{Check: checkIPv6Pinhole, Status: routercheck.Fail, Detail: err.Error()}
	}
	p := pinhole.Pinhole{Protocol: igd.TCP, InternalClient: self, InternalPort: routercheck.DefaultPorts.First + uint16(n.Int64()), Lease: routercheck.DefaultLease}
	at := fmt.Sprintf("%s %s", p.Protocol, netip.AddrPortFrom(self, p.InternalPort))
	if err := o.OpenPinhole(ctx, p); err != nil {
		f := routercheck.Finding{Check: checkIPv6Pinhole, Status: routercheck.Fail, Detail: fmt.Sprintf("the router refused a pinhole to %s through %s: %v", at, via, err)}
		switch {
		case errors.Is(err, igd.ErrThirdPartyRefused):
			f.Fix = "allow THIRD_PARTY in the router (miniupnpd: pcp_allow_thirdparty=yes): pinholes to other nodes need it, and so do this node's when its requests leave from another of its addresses"
		case via == "UPnP":
			f.Fix = "allow inbound IPv6 pinholes in the router (miniupnpd with IPv6 and its firewall chain; OpenWrt's firewall must let the miniupnpd chain accept), or write through PCP (gateway.protocol: pcp)"
		default:
			f.Fix = "allow inbound IPv6 pinholes through PCP in the router (miniupnpd: enable_natpmp=yes, ipv6_disable=no)"
		}
		return f
	}
	if err := o.ClosePinhole(ctx, p); err != nil {
		return routercheck.Finding{Check: checkIPv6Pinhole, Status: routercheck.Warn,
			Detail: fmt.Sprintf("opened %s through %s, but the close failed: %v; it stays open until its lease ends (%s)", at, via, err, p.Lease),
			Fix:    "a router that cannot close a pinhole keeps each Service's pinholes open until their lease: keep loadBalancer.lease short"}
	}
	d := fmt.Sprintf("opened and closed %s through %s", at, via)
	if via == "UPnP" {
		d += ": Services are served on IPv6 through the node edge-ccm runs on, ports from 1024 (UPnP opens pinholes to the caller only)"
	} else {
		d += ": Services are served on IPv6 through any eligible node, any port (pinholes to other nodes need pcp_allow_thirdparty=yes, not probed)"
	}
	return routercheck.Finding{Check: checkIPv6Pinhole, Status: routercheck.OK, Detail: d}
}

// joinAddrs is "a, b, c".
func joinAddrs(as []netip.Addr) string {
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = a.String()
	}
	return strings.Join(s, ", ")
}
