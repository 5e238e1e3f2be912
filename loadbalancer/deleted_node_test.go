package loadbalancer

import (
	"context"
	"errors"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/ccmkit/ccmkit/fake"
)

// A process that did not write a Service's mappings (a fresh one, after a
// restart or a leader hand-over), but read them as the Service's while
// their node was a node, moves them off that node once it is deleted, as
// the process that wrote them does: the Service is not left without its
// ports until their lease ends.
func TestFreshProcessMovesMappingsOffADeletedNode(t *testing.T) {
	r := fake.NewRouter(fake.RouterConfig{})
	ctx := context.Background()
	nodes := []*v1.Node{newNode("node-a", addrA), newNode("node-b", addrB)}
	web := lbService("default", "web", withPorts(port("http", v1.ProtocolTCP, 80, 30080)))
	previous, err := New(Config{Client: r.Client(addrA)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := previous.EnsureLoadBalancer(ctx, testCluster, web, nodes); err != nil {
		t.Fatal(err)
	}
	from := r.Mappings()[0].InternalClient
	gone, stays := nodes[0], nodes[1]
	if from == addrB {
		gone, stays = nodes[1], nodes[0]
	}

	fresh, err := New(Config{Client: r.Client(addrA)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fresh.EnsureLoadBalancer(ctx, testCluster, web, nodes); err != nil {
		t.Fatalf("the fresh process's first Ensure: %v", err)
	}
	fresh.forgetNode(gone.Name) // as the node informer does on delete
	if _, err := fresh.EnsureLoadBalancer(ctx, testCluster, web, []*v1.Node{stays}); err != nil {
		t.Errorf("Ensure after %s was deleted: %v, want web served on %s", gone.Name, err, stays.Name)
	}
	if ms := r.Mappings(); len(ms) != 1 || ms[0].InternalClient == from {
		t.Errorf("table = %v, want web's mapping moved off %s", ms, from)
	}
}

// A Service left with no eligible node keeps its mappings to nodes that are
// still there (one may be ready again soon), but not one to a node that was
// deleted: it forwards nowhere, and once the node's address is forgotten no
// process can prove the mapping the Service's, so it would hold the port
// until its lease ends.
func TestServiceWithNoEligibleNodeGivesUpItsMappingToADeletedNode(t *testing.T) {
	r := fake.NewRouter(fake.RouterConfig{})
	ctx := context.Background()
	node := newNode("node-a", addrA)
	web := lbService("default", "web", withPorts(port("http", v1.ProtocolTCP, 80, 30080)))
	lb, err := New(Config{Client: r.Client(addrA)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lb.EnsureLoadBalancer(ctx, testCluster, web, []*v1.Node{node}); err != nil {
		t.Fatal(err)
	}
	lb.forgetNode(node.Name) // as the node informer does on delete
	if _, err := lb.EnsureLoadBalancer(ctx, testCluster, web, nil); !errors.Is(err, ErrNoEligibleNode) {
		t.Errorf("Ensure with no node = %v, want ErrNoEligibleNode", err)
	}
	if ms := r.Mappings(); len(ms) != 0 {
		t.Errorf("table = %v, want web's mapping to the deleted node %s removed", ms, addrA)
	}
}
