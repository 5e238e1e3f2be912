package cluster_test

import (
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/ccmkit/ccmkit/fake/cluster"
)

// A node lists its addresses as kubelet does: the ones given first, its
// Hostname last (the cloud node controller and providers that echo a
// node's addresses keep that order).
func TestNodeAddressOrder(t *testing.T) {
	n := cluster.Node("n1", cluster.InternalIP("192.168.1.10"), cluster.Address(v1.NodeExternalIP, "198.51.100.1"))
	want := []v1.NodeAddress{
		{Type: v1.NodeInternalIP, Address: "192.168.1.10"},
		{Type: v1.NodeExternalIP, Address: "198.51.100.1"},
		{Type: v1.NodeHostName, Address: "n1"},
	}
	if !slices.Equal(n.Status.Addresses, want) {
		t.Errorf("addresses %v, want %v", n.Status.Addresses, want)
	}
	if n := cluster.Node("n2"); !slices.Equal(n.Status.Addresses, []v1.NodeAddress{{Type: v1.NodeHostName, Address: "n2"}}) {
		t.Errorf("addresses of a node without options %v, want its Hostname only", n.Status.Addresses)
	}
}
