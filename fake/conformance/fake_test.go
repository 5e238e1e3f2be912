package conformance_test

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/fake/conformance"
)

// ccmkit's own load balancer and InstancesV2 pass the suite in their
// packages' tests (loadbalancer/conformance_test.go,
// provider/conformance_test.go); the fake LoadBalancer passes it here.

func TestFakeLoadBalancer(t *testing.T) {
	conformance.RunLoadBalancer(t, func(testing.TB) conformance.LoadBalancerSetup {
		lb := fake.NewLoadBalancer(fake.DefaultExternalIP)
		return conformance.LoadBalancerSetup{
			LoadBalancer: lb,
			Backend:      fakeBackend{lb},
			// The fake records calls and forwards nothing: no Service is
			// left to another, no call asks for a retry, no port is
			// forwarded. Backend checks what is left after a delete.
			Skip: []string{conformance.PromiseElsewhere, conformance.PromiseRetry, conformance.PromisePortChange, conformance.PromiseNodeChange},
		}
	})
}

type fakeBackend struct{ lb *fake.LoadBalancer }

func (b fakeBackend) Exists(_ context.Context, svc *v1.Service) (bool, error) {
	_, ok := b.lb.Status(types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name})
	return ok, nil
}
