package lbclass

import (
	"context"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/ccmkit/ccmkit/fake"
)

var servicesResource = v1.SchemeGroupVersion.WithResource("services")

// newOwnersIP is the address another class's controller writes.
const newOwnersIP = "198.51.100.1"

// handOver makes Service a, on the API server, of type LoadBalancer under
// otherClass, with that class's finalizer and status, as a hand-over does
// (the type changed back, the new owner served it). It writes through the
// clientset's tracker, as a reactor must (the clientset is locked while its
// reactors run).
func (e *env) handOver(t *testing.T) {
	t.Helper()
	obj, err := e.client.Tracker().Get(servicesResource, "default", "a")
	if err != nil {
		t.Errorf("hand-over: %v", err)
		return
	}
	s := obj.(*v1.Service).DeepCopy()
	s.Spec.Type, s.Spec.LoadBalancerClass = v1.ServiceTypeLoadBalancer, ptr.To(otherClass)
	s.Finalizers = append(s.Finalizers, otherClass)
	s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: newOwnersIP}}
	if err := e.client.Tracker().Update(servicesResource, s, "default"); err != nil {
		t.Errorf("hand-over: %v", err)
	}
}

// A Service switched to ClusterIP is cleaned up; if it is handed to another
// class while the clean-up runs (its router calls take seconds on a slow
// router), the status the new owner wrote meanwhile stays, whether the
// hand-over lands during the router calls or between the controller's read
// of the Service and its status write.
func TestHandOverDuringCleanupKeepsNewOwnersStatus(t *testing.T) {
	for _, tc := range []struct {
		name string
		// arm makes the hand-over happen at its moment.
		arm func(t *testing.T, e *env)
	}{{
		name: "during the router calls",
		arm: func(t *testing.T, e *env) {
			e.lb.Intercept(fake.LoadBalancerHooks{EnsureLoadBalancerDeleted: func(ctx context.Context, cn string, s *v1.Service, next fake.EnsureLoadBalancerDeletedFunc) error {
				e.handOver(t)
				return next(ctx, cn, s)
			}})
		},
	}, {
		name: "before the status write",
		arm: func(t *testing.T, e *env) {
			done := false
			e.client.PrependReactor("patch", "services", func(k8stesting.Action) (bool, runtime.Object, error) {
				if !done {
					done = true
					e.handOver(t)
				}
				return false, nil, nil
			})
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, nil, svc("a", class(testClass)), node("n1"))
			if err := e.syncSettled(t, "a"); err != nil {
				t.Fatal(err)
			}
			s := e.get(t, "a")
			s.Spec.Type, s.Spec.LoadBalancerClass = v1.ServiceTypeClusterIP, nil
			e.update(t, s)
			tc.arm(t, e)

			// The sync may fail (the Service changed under it); the
			// next one finishes the clean-up.
			_ = e.c.sync(context.Background(), "default/a")

			got := e.get(t, "a")
			var ingress []string
			for _, ing := range got.Status.LoadBalancer.Ingress {
				ingress = append(ingress, ing.IP)
			}
			if !slices.Equal(ingress, []string{newOwnersIP}) || !slices.Contains(got.Finalizers, otherClass) {
				t.Errorf("after the clean-up: ingress %v, finalizers %v; want the new owner's [%s] and its finalizer %s", ingress, got.Finalizers, newOwnersIP, otherClass)
			}
			if len(e.lb.Services()) != 0 {
				t.Errorf("load balancers left: %v", e.lb.Services())
			}
		})
	}
}
