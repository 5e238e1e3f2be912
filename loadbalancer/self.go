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
// the watched ones, and the address mappings must target (invalid for
// Config.NodeName). While none matches: ErrOwnNodeUnknown and an api.RetryError.
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
	addr, err = lb.cfg.Client.LocalAddr(ctx)
	if err != nil {
		return "", netip.Addr{}, fmt.Errorf("loadbalancer: find this process's node: Config.NodeName is empty and the router client gives no local address: %w", err)
	}
	addr = addr.Unmap()
	if w != nil {
		if watched, err := w.nodes.List(labels.Everything()); err == nil {
			nodes = append(slices.Clip(nodes), watched...)
		}
	}
	var matches, tried []string
	seen := make(map[string]bool)
	for _, n := range nodes {
		if n == nil || seen[n.Name] {
			continue
		}
		seen[n.Name] = true
		as := nodeAddrs(n)
		if slices.Contains(as, addr) {
			matches = append(matches, n.Name)
		}
		tried = append(tried, fmt.Sprintf("%s %v", n.Name, as))
	}
	slices.Sort(tried)
	switch len(matches) {
	case 1:
	case 0:
		what := "the cluster has no nodes"
		if len(tried) > 0 {
			what = "nodes: " + strings.Join(tried, ", ")
		}
		return "", netip.Addr{}, lb.retry(fmt.Errorf("%w: Config.NodeName (NODE_NAME) is empty and no node reports this host's address toward the router, %s, as its InternalIP or ExternalIP (%s)",
			ErrOwnNodeUnknown, addr, what))
	default:
		slices.Sort(matches)
		return "", netip.Addr{}, fmt.Errorf("%w: Config.NodeName (NODE_NAME) is empty and several nodes report this host's address toward the router, %s: %s; set the node name",
			ErrOwnNodeUnknown, addr, strings.Join(matches, ", "))
	}
	lb.mu.Lock()
	found := lb.self == ""
	if found {
		lb.self, lb.selfAddr = matches[0], addr
	}
	self, selfAddr = lb.self, lb.selfAddr
	lb.mu.Unlock()
	if found {
		klog.FromContext(ctx).Info("Found the node this process runs on by its address toward the router", "node", self, "address", addr)
	}
	return self, selfAddr, nil
}
