// This file is the IPv6 family of a Service: pinholes in the router's IPv6
// firewall to one node's global address (no NAT), one per port, through
// Config.Pinholes. pipeline.go's family step (serveFamilies) calls it
// beside the IPv4 mappings; the background work renews and repairs them.

package loadbalancer

import (
	"context"
	"net/netip"
	"time"

	"github.com/ccmkit/ccmkit/igd"
)

// MaxPinholeLease bounds a pinhole's lease: UPnP's WANIPv6FirewallControl
// takes 1 s to 86400 s. A longer Config.Lease (or PermanentLease) opens
// pinholes for this long, renewed as mappings are.
const MaxPinholeLease = 24 * time.Hour

// PinholeClient opens the router's IPv6 firewall to a node's global address
// (no NAT): a host on the internet then reaches [Addr]:Port, where
// kube-proxy takes the Service's traffic for its ingress address. Each call
// should be bounded by the client itself, as igd's are.
type PinholeClient interface {
	// OpenPinhole opens p, or renews it when the router already has it:
	// one router call.
	OpenPinhole(ctx context.Context, p Pinhole) error
	// ClosePinhole closes p; nil when the router no longer has it.
	ClosePinhole(ctx context.Context, p Pinhole) error
}

// AnyHostPinholes is a PinholeClient that says whether it opens pinholes for
// any LAN host (PCP with THIRD_PARTY). A client that does not implement it,
// or answers false, opens them only for this host's own address and ports
// from 1024 (UPnP: miniupnpd refuses others with 606): its Services are
// then served on IPv6 only through this process's node.
type AnyHostPinholes interface {
	PinholesForAnyHost() bool
}

// Pinhole is one opening of the router's IPv6 firewall.
type Pinhole struct {
	Protocol igd.Protocol
	Addr     netip.Addr // the node's global unicast IPv6 address, canonical
	// Port is the Service port (spec.ports[].port): kube-proxy takes
	// [Addr]:Port for a LoadBalancer ingress IP, so no nodePort is involved.
	Port  uint16
	Lease time.Duration // at most MaxPinholeLease
}

// pinholeLease is the lease of every pinhole: the mappings', at most
// MaxPinholeLease.
func (c Config) pinholeLease() time.Duration { return min(c.effectiveLease(), MaxPinholeLease) }

// pinholeKey is a pinhole without its lease.
type pinholeKey struct {
	Protocol igd.Protocol
	Addr     netip.Addr
	Port     uint16
}
