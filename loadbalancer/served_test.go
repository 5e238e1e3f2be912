package loadbalancer

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sfake "k8s.io/client-go/kubernetes/fake"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/fake/cluster"
)

// Serves is what EnsureLoadBalancer exposes: the Services handed to the
// load balancer (its class; classless ones with Classless) that opted in.
func TestServes(t *testing.T) {
	clusterIP := func(s *v1.Service) { s.Spec.Type = v1.ServiceTypeClusterIP }
	tests := []struct {
		name string
		cfg  Config
		svc  *v1.Service
		want bool
	}{
		{"of the class, unannotated", Config{Class: classX}, newService("default", "a", withClass(classX), unannotated), true},
		{"of another class, annotated", Config{Class: classX, Classless: true}, newService("default", "a", withClass(classY)), false},
		{"classless without Classless, annotated", Config{Class: classX}, newService("default", "a"), false},
		{"classless with Classless, annotated", Config{Class: classX, Classless: true}, newService("default", "a"), true},
		{"classless with Classless, unannotated", Config{Class: classX, Classless: true}, newService("default", "a", unannotated), false},
		{"classless with Classless, unannotated, services: all", Config{Class: classX, Classless: true, Services: AllServices}, newService("default", "a", unannotated), true},
		{"no class configured (the CCM), annotated", Config{}, newService("default", "a"), true},
		{"no class configured (the CCM), unannotated", Config{}, newService("default", "a", unannotated), false},
		{"of the class, not of type LoadBalancer", Config{Class: classX}, newService("default", "a", withClass(classX), clusterIP), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.ClusterName = testCluster
			e := newEnv(t, tc.cfg, fake.RouterConfig{})
			if got := e.lb.Serves(tc.svc); got != tc.want {
				t.Errorf("Serves = %v, want %v", got, tc.want)
			}
		})
	}
}

// A Service not served is told how to opt in as soon as it appears, by the
// background work: a caller that does not call EnsureLoadBalancer for it
// (provider/lbclass, which asks Serves) does not delay the hint to the next
// pass.
func TestOptInHintWhenServiceAppears(t *testing.T) {
	e := newEnv(t, Config{ClusterName: testCluster, Class: classX, Classless: true}, fake.RouterConfig{})
	nodes := threeNodes()
	client := k8sfake.NewClientset(nodes[0], nodes[1], nodes[2])
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := e.lb.Initialize(ctx, cluster.ClientBuilder(client)); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.lb.Run(ctx)
	}()
	defer func() { cancel(); <-done }()
	eventually(t, "the background work running", func() bool { ph, _ := e.lb.bg.now(); return ph == phaseRunning })
	// The start pass is over once the router was asked for its address;
	// the Service comes after it, so no pass of the next minutes sees it.
	eventually(t, "the start pass", func() bool { return len(e.router.Calls()) > 0 })

	plain := newService("default", "plain", unannotated)
	if _, err := client.CoreV1().Services("default").Create(ctx, plain, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "an OptInRequired event on the new Service", func() bool {
		evs, err := client.CoreV1().Events("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false
		}
		for _, ev := range evs.Items {
			if ev.Reason == EventReasonOptInRequired && ev.InvolvedObject.Name == "plain" {
				return true
			}
		}
		return false
	})
}
