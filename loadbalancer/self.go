package loadbalancer

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"
)

// selfNode returns this process's node (see Config.NodeName), among nodes and
// the watched ones, and the address IPv4 mappings must target: this host's
// address toward the router (invalid for Config.NodeName, and when the
// router client gives none). The node is the one reporting that address,
// else, through an OwnHostPinholes client, the one reporting one of this
// host's global IPv6 addresses; found once, then kept. While none matches:
// ErrOwnNodeUnknown and an api.RetryError.
func (lb *LoadBalancer) selfNode(ctx context.Context, nodes []*v1.Node) (name string, addr netip.Addr, err error) {
	if lb.cfg.NodeName != "" {
		return lb.cfg.NodeName, netip.Addr{}, nil
	}
	_, w := lb.bg.now() // nil unless running
	lb.mu.Lock()
	self, selfAddr := lb.self, lb.selfAddr
	lb.mu.Unlock()
	if self != "" {
		return self, selfAddr, nil
	}
	addr, err4 := lb.cfg.Client.LocalAddr(ctx)
	if err4 != nil && lb.pinholeHost == nil {
		return "", netip.Addr{}, fmt.Errorf("loadbalancer: find this process's node: Config.NodeName is empty and the router client gives no local address: %w", err4)
	}
	addr = addr.Unmap()
	if err4 != nil {
		addr = netip.Addr{} // found by IPv6, IPv4 mappings target the node's InternalIP
	}
	if w != nil {
		if watched, err := w.nodes.List(labels.Everything()); err == nil {
			nodes = append(slices.Clip(nodes), watched...)
		}
	}
	nodes = distinctNodes(nodes)
	var by netip.Addr // the address it is found by
	if err4 == nil {
		matches, _ := nodesReporting(nodes, nodeAddrs, []netip.Addr{addr})
		switch {
		case len(matches) > 1:
			return "", netip.Addr{}, fmt.Errorf("%w: Config.NodeName (NODE_NAME) is empty and several nodes report this host's address toward the router, %s: %s; set the node name",
				ErrOwnNodeUnknown, addr, strings.Join(matches, ", "))
		case len(matches) == 1:
			self, by = matches[0], addr
		case lb.pinholeHost == nil:
			return "", netip.Addr{}, lb.retry(fmt.Errorf("%w: Config.NodeName (NODE_NAME) is empty and no node reports this host's address toward the router, %s, as its InternalIP or ExternalIP (%s)",
				ErrOwnNodeUnknown, addr, describeNodes(nodes, nodeAddrs)))
		}
	}
	if self == "" {
		if self, by, err = lb.selfByIPv6(ctx, nodes, addr, err4); err != nil {
			return "", netip.Addr{}, err
		}
	}
	lb.mu.Lock()
	found := lb.self == ""
	if found {
		lb.self, lb.selfAddr = self, addr
	}
	self, selfAddr = lb.self, lb.selfAddr
	lb.mu.Unlock()
	if found {
		klog.FromContext(ctx).Info("Found the node this process runs on by its address toward the router", "node", self, "address", by)
	}
	return self, selfAddr, nil
}

// selfByIPv6 returns the one node among nodes reporting one of this host's
// global IPv6 addresses (lb.pinholeHost's), and the address it reports. addr
// is this host's IPv4 address toward the router, which no node reports, or
// err4 why the router client gave none: each error names both.
func (lb *LoadBalancer) selfByIPv6(ctx context.Context, nodes []*v1.Node, addr netip.Addr, err4 error) (string, netip.Addr, error) {
	guas, err := lb.pinholeHost.LocalAddrs(ctx)
	switch {
	case err != nil && err4 != nil:
		return "", netip.Addr{}, fmt.Errorf("loadbalancer: find this process's node: Config.NodeName is empty, the router client gives no local address (%w), and the pinhole client gives none of this host's IPv6 addresses: %w", err4, err)
	case err != nil:
		return "", netip.Addr{}, fmt.Errorf("loadbalancer: find this process's node: Config.NodeName is empty, no node reports this host's address toward the router, %s, and the pinhole client gives none of this host's IPv6 addresses: %w", addr, err)
	}
	matches, by := nodesReporting(nodes, globalIPv6, guas)
	switch {
	case len(matches) == 1:
		return matches[0], by, nil
	case len(matches) > 1:
		return "", netip.Addr{}, fmt.Errorf("%w: Config.NodeName (NODE_NAME) is empty and several nodes report one of this host's global IPv6 addresses, %v: %s; set the node name",
			ErrOwnNodeUnknown, guas, strings.Join(matches, ", "))
	}
	tried := describeNodes(nodes, func(n *v1.Node) []netip.Addr { return append(nodeAddrs(n), globalIPv6(n)...) })
	if err4 != nil {
		return "", netip.Addr{}, lb.retry(fmt.Errorf("%w: Config.NodeName (NODE_NAME) is empty, the router client gives no local address (%w), and no node reports one of this host's global IPv6 addresses, %v, as its InternalIP or ExternalIP (%s)",
			ErrOwnNodeUnknown, err4, guas, tried))
	}
	return "", netip.Addr{}, lb.retry(fmt.Errorf("%w: Config.NodeName (NODE_NAME) is empty and no node reports this host's address toward the router, %s, or one of its global IPv6 addresses, %v, as its InternalIP or ExternalIP (%s)",
		ErrOwnNodeUnknown, addr, guas, tried))
}

// distinctNodes returns nodes without nil ones and with each name once, the
// first one of each.
func distinctNodes(nodes []*v1.Node) []*v1.Node {
	seen := make(map[string]bool, len(nodes))
	var out []*v1.Node
	for _, n := range nodes {
		if n != nil && !seen[n.Name] {
			seen[n.Name] = true
			out = append(out, n)
		}
	}
	return out
}

// nodesReporting returns the names of the nodes, sorted, for which addrsOf
// gives one of want, and (for one such node) the address of want it gives.
func nodesReporting(nodes []*v1.Node, addrsOf func(*v1.Node) []netip.Addr, want []netip.Addr) (names []string, by netip.Addr) {
	for _, n := range nodes {
		for _, a := range addrsOf(n) {
			if slices.Contains(want, a) {
				names, by = append(names, n.Name), a
				break
			}
		}
	}
	slices.Sort(names)
	return names, by
}

// describeNodes is "nodes: " and each node with its addresses (addrsOf),
// sorted, or says the cluster has none.
func describeNodes(nodes []*v1.Node, addrsOf func(*v1.Node) []netip.Addr) string {
	if len(nodes) == 0 {
		return "the cluster has no nodes"
	}
	tried := make([]string, len(nodes))
	for i, n := range nodes {
		tried[i] = fmt.Sprintf("%s %v", n.Name, addrsOf(n))
	}
	slices.Sort(tried)
	return "nodes: " + strings.Join(tried, ", ")
}
