package loadbalancer

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	servicehelper "k8s.io/cloud-provider/service/helpers"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
)

// The restart story with the real upstream service controller: a Service
// was deleted while no CCM ran (deletion timestamp, cleanup finalizer, its
// mappings still on the router, made by the previous process). A fresh
// process, holding nothing in memory, finds them through GetLoadBalancer,
// removes exactly them, and the finalizer goes.
func TestServiceControllerRestartDeletesPreviousMappings(t *testing.T) {
	r := fake.NewRouter(fake.RouterConfig{})
	nodes := threeNodes()
	web := newService("default", "web", withPorts(port("http", v1.ProtocolTCP, 80, 30080), port("dns", v1.ProtocolUDP, 53, 30053)))
	// The previous process.
	old, err := New(Config{Client: r.Client(addrA)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := old.EnsureLoadBalancer(context.Background(), testCluster, web, nodes); err != nil {
		t.Fatal(err)
	}
	foreign := []igd.Mapping{
		{Protocol: igd.TCP, ExternalPort: 81, InternalClient: addrStranger, InternalPort: 81, Description: desc("default", "web", "x")},
		{Protocol: igd.TCP, ExternalPort: 82, InternalClient: addrB, InternalPort: 82, Description: "someone's app"},
	}
	for _, m := range foreign {
		r.Put(m)
	}

	// The new process.
	h := startServiceController(t, r.Client(addrA), nodes)
	ctx := t.Context()

	deleted := web.DeepCopy()
	deleted.UID = ""
	deleted.Finalizers = []string{servicehelper.LoadBalancerCleanupFinalizer}
	now := metav1.Now()
	deleted.DeletionTimestamp = &now
	services := h.Client.CoreV1().Services("default")
	if _, err := services.Create(ctx, deleted, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the Service's mappings and finalizer gone", func() bool {
		s, err := services.Get(ctx, "web", metav1.GetOptions{})
		return err == nil && !servicehelper.HasLBFinalizer(s) && len(r.Mappings()) == len(foreign)
	})
	for i, m := range r.Mappings() {
		if m != (igd.Mapping{Protocol: m.Protocol, ExternalPort: foreign[i].ExternalPort, InternalClient: foreign[i].InternalClient, InternalPort: foreign[i].InternalPort, Description: foreign[i].Description, Lease: m.Lease, Enabled: m.Enabled}) {
			t.Errorf("table[%d] = %v, want %v untouched", i, m, foreign[i])
		}
	}
}
