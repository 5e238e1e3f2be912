package loadbalancer

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"maps"
	"net/netip"
	"slices"
	"strconv"

	v1 "k8s.io/api/core/v1"
)

// toBeDeletedTaint is the cluster autoscaler's taint for a node about to be
// removed (the service controller leaves such nodes out too).
const toBeDeletedTaint = "ToBeDeletedByClusterAutoscaler"

// target is a node that may receive a Service's traffic.
type target struct {
	name string
	addr netip.Addr // IPv4 InternalIP
}

// nodeTarget returns n as a target, or why it cannot be one.
func nodeTarget(n *v1.Node) (t target, reason string) {
	if why := unfit(n); why != "" {
		return target{}, why
	}
	for _, a := range n.Status.Addresses {
		if a.Type != v1.NodeInternalIP {
			continue
		}
		if ip, err := netip.ParseAddr(a.Address); err == nil && ip.Unmap().Is4() {
			return target{name: n.Name, addr: ip.Unmap()}, ""
		}
	}
	return target{}, "has no IPv4 InternalIP"
}

// unfit returns why n cannot receive a Service's traffic, whatever the
// family ("" when it can).
func unfit(n *v1.Node) string {
	switch {
	case n.DeletionTimestamp != nil:
		return "is being deleted"
	case excluded(n):
		return "is labelled " + v1.LabelNodeExcludeBalancers
	case slices.ContainsFunc(n.Spec.Taints, func(t v1.Taint) bool { return t.Key == toBeDeletedTaint }):
		return "is tainted " + toBeDeletedTaint
	case !ready(n):
		return "is not Ready"
	}
	return ""
}

// globalIPv6 returns the global unicast IPv6 addresses n reports: its
// InternalIP ones, then its ExternalIP ones, each in ascending order. Unique
// local (fc00::/7), link-local, multicast and loopback addresses are left out.
func globalIPv6(n *v1.Node) []netip.Addr {
	var out []netip.Addr
	for _, typ := range []v1.NodeAddressType{v1.NodeInternalIP, v1.NodeExternalIP} {
		var of []netip.Addr
		for _, a := range n.Status.Addresses {
			if ip, err := netip.ParseAddr(a.Address); a.Type == typ && err == nil && isGlobalIPv6(ip) && !slices.Contains(out, ip) {
				of = append(of, ip.WithZone(""))
			}
		}
		slices.SortFunc(of, netip.Addr.Compare)
		out = append(out, slices.Compact(of)...)
	}
	return out
}

// isGlobalIPv6 reports whether a is a global unicast IPv6 address.
func isGlobalIPv6(a netip.Addr) bool {
	return a.Is6() && !a.Is4In6() && a.IsGlobalUnicast() && !a.IsPrivate()
}

// nodeAddrs returns every IPv4 InternalIP and ExternalIP n reports.
func nodeAddrs(n *v1.Node) []netip.Addr {
	var out []netip.Addr
	for _, a := range n.Status.Addresses {
		if a.Type != v1.NodeInternalIP && a.Type != v1.NodeExternalIP {
			continue
		}
		if ip, err := netip.ParseAddr(a.Address); err == nil && ip.Unmap().Is4() {
			out = append(out, ip.Unmap())
		}
	}
	return out
}

func excluded(n *v1.Node) bool {
	v, ok := n.Labels[v1.LabelNodeExcludeBalancers]
	b, err := strconv.ParseBool(v)
	return ok && (err != nil || b) // as upstream: an unparsable value excludes
}

func ready(n *v1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == v1.NodeReady {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}

// eligibleTargets returns the nodes of nodes that can receive traffic, sorted
// by name, and the reason of each one that cannot.
func eligibleTargets(nodes []*v1.Node) (targets []target, reasons map[string]string) {
	reasons = make(map[string]string)
	for _, n := range nodes {
		if n == nil {
			continue
		}
		t, why := nodeTarget(n)
		if why != "" {
			reasons[n.Name] = why
			continue
		}
		targets = append(targets, t)
	}
	slices.SortFunc(targets, func(a, b target) int { return cmp.Compare(a.name, b.name) })
	return targets, reasons
}

// chooseTarget picks among candidates the node the Service's mappings point
// at (current), else the highest rendezvous hash of (service, node name).
func chooseTarget(service string, candidates []target, current []netip.Addr) (target, bool) {
	pool := slices.DeleteFunc(slices.Clone(candidates), func(c target) bool { return !slices.Contains(current, c.addr) })
	if len(pool) == 0 {
		pool = candidates
	}
	if len(pool) == 0 {
		return target{}, false
	}
	return slices.MaxFunc(pool, func(a, b target) int { return cmp.Compare(score(service, a.name), score(service, b.name)) }), true
}

// score is the rendezvous hash of a Service and a node name.
func score(service, node string) uint64 {
	sum := sha256.Sum256([]byte(service + "\x00" + node))
	return binary.BigEndian.Uint64(sum[:8])
}

// seeNodes records the addresses of nodes.
func (lb *LoadBalancer) seeNodes(nodes []*v1.Node) {
	latest := make(map[string]*v1.Node, len(nodes)) // by name; the last copy wins
	for _, n := range nodes {
		if n != nil {
			latest[n.Name] = n
		}
	}
	lb.mu.Lock()
	defer lb.mu.Unlock()
	// Addresses the nodes no longer report go, in one pass over the map.
	maps.DeleteFunc(lb.nodeAddrs, func(_ netip.Addr, name string) bool { return latest[name] != nil })
	for _, n := range nodes { // in order: an address two nodes report is the later one's
		if n != nil && latest[n.Name] == n {
			for _, a := range nodeAddrs(n) {
				lb.nodeAddrs[a] = n.Name
			}
		}
	}
}

// forgetNode drops the addresses of a deleted node: another LAN host may get them.
func (lb *LoadBalancer) forgetNode(name string) {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	lb.forgetNodeLocked(name)
}

func (lb *LoadBalancer) forgetNodeLocked(name string) {
	maps.DeleteFunc(lb.nodeAddrs, func(_ netip.Addr, n string) bool { return n == name })
}

// isNodeAddr reports whether a is the address of a node seen.
func (lb *LoadBalancer) isNodeAddr(a netip.Addr) bool {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	_, ok := lb.nodeAddrs[a.Unmap()]
	return ok
}
