package loadbalancer

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	servicecontroller "k8s.io/cloud-provider/controllers/service"
	servicehelper "k8s.io/cloud-provider/service/helpers"
	"k8s.io/component-base/featuregate"
	controllersmetrics "k8s.io/component-base/metrics/prometheus/controllers"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/provider"
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
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	lb, err := New(Config{Client: r.Client(addrA)})
	if err != nil {
		t.Fatal(err)
	}
	cloud, err := provider.New("edge", provider.Config{LoadBalancer: lb, ClusterID: true})
	if err != nil {
		t.Fatal(err)
	}
	var objs []k8sruntime.Object
	for _, n := range nodes {
		objs = append(objs, n)
	}
	client := k8sfake.NewClientset(objs...)
	stop := make(chan struct{})
	cloud.Initialize(builder{client}, stop)
	defer func() {
		close(stop)
		<-cloud.Done()
	}()
	factory := informers.NewSharedInformerFactory(client, 0)
	ctrl, err := servicecontroller.New(cloud, client, factory.Core().V1().Services(), factory.Core().V1().Nodes(), testCluster, featuregate.NewFeatureGate())
	if err != nil {
		t.Fatal(err)
	}
	syncedBefore := nodeSyncs(t)
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	done := make(chan struct{})
	go func() {
		defer close(done)
		ctrl.Run(ctx, 2, controllersmetrics.NewControllerManagerMetrics("e2e-restart"))
	}()
	defer func() {
		cancel()
		<-done
	}()
	// See runServiceController: let the upstream node syncs finish first.
	eventually(t, "the initial node syncs", func() bool { return nodeSyncs(t)-syncedBefore >= float64(len(nodes)) })

	deleted := web.DeepCopy()
	deleted.UID = ""
	deleted.Finalizers = []string{servicehelper.LoadBalancerCleanupFinalizer}
	now := metav1.Now()
	deleted.DeletionTimestamp = &now
	services := client.CoreV1().Services("default")
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
