package loadbalancer

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
)

// A Service refused a pinhole because another Service holds it records
// that port in its status with the error. Deleting the refused Service, in
// a process that restarted since (it holds nothing in memory), must not
// close the holder's pinhole: the refused Service's status names it, but
// never proved it owned it.
func TestPinholeRefusedToAServiceIsNotClosedWhenThatServiceGoes(t *testing.T) {
	e, f := newDualEnv(t, Config{}, fake.RouterConfig{}, anyHostPinhole)
	nodes := dualNodes()
	holder := lbService("default", "holder", withFamilies(v1.IPv6Protocol))
	holder.Status.LoadBalancer = *e.mustEnsure(t, holder, nodes)

	refused := lbService("default", "refused", withFamilies(v1.IPv6Protocol),
		withPorts(port("http", v1.ProtocolTCP, 8080, 30081), port("alt", v1.ProtocolTCP, 9090, 30090)))
	refused.Status.LoadBalancer = *e.mustEnsure(t, refused, nodes) // 8080 refused (held), 9090 served
	if got := recordedPinholes(refused); len(got) != 2 {
		t.Fatalf("the refused Service's status records %v; this test wants the refused port recorded with its error", got)
	}
	diffStrings(t, "pinholes open before the restart", []string{pin(igd.TCP, guaA, 8080), pin(igd.TCP, guaA, 9090)}, f.Open())

	restarted, err := New(Config{Client: e.router.Client(addrA), Clock: e.clock, Pinholes: anyHostPinholes{f}})
	if err != nil {
		t.Fatal(err)
	}
	restarted.seeNodes(nodes)
	if err := restarted.EnsureLoadBalancerDeleted(context.Background(), testCluster, refused); err != nil {
		t.Fatal(err)
	}
	diffStrings(t, "pinholes open after the refused Service was deleted", []string{pin(igd.TCP, guaA, 8080)}, f.Open())
}
