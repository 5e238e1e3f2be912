package lbclass

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"

	"github.com/ccmkit/ccmkit/fake"
)

// optInAnnotation opts a Service in to optingIn, as ccmkit's load balancer
// asks of classless Services.
const optInAnnotation = "example.com/expose"

// optingIn is a load balancer that serves only the Services annotated
// optInAnnotation, as ccmkit's loadbalancer serves classless Services.
type optingIn struct{ *fake.LoadBalancer }

func (optingIn) Serves(svc *v1.Service) bool { return svc.Annotations[optInAnnotation] == "true" }

var _ Selective = optingIn{}

func annotated() svcOpt {
	return func(s *v1.Service) { s.Annotations = map[string]string{optInAnnotation: "true"} }
}

// A Service handed to the controller that its load balancer does not serve
// gets no finalizer and no call (an uninstalled controller would leave it
// Terminating); one that carries the finalizer from before (served once, or
// given it by an older version) loses it after a clean-up that finds
// nothing, and keeps a status someone else wrote only if it is not this
// controller's to clear.
func TestFinalizerOnlyOnServicesServed(t *testing.T) {
	tests := []struct {
		name       string
		svc        *v1.Service
		lbBefore   bool
		methods    []string
		finalizers []string
		ingress    string
	}{{
		name:       "opted in: served",
		svc:        svc("a", annotated()),
		methods:    []string{"EnsureLoadBalancer"},
		finalizers: []string{testClass},
		ingress:    ingressIP,
	}, {
		name: "not opted in: no finalizer, no call",
		svc:  svc("a"),
	}, {
		name:    "not opted in, finalizer from before, nothing held: finalizer removed",
		svc:     svc("a", finalizers(testClass)),
		methods: []string{"GetLoadBalancer"},
	}, {
		name:    "not opted in, finalizer from before, nothing held, someone else's status: status kept",
		svc:     svc("a", finalizers(testClass), status(newOwnersIP)),
		methods: []string{"GetLoadBalancer"},
		ingress: newOwnersIP,
	}, {
		name:     "opted out after being served: cleaned up, status cleared, finalizer removed",
		svc:      svc("a", finalizers(testClass), status(ingressIP)),
		lbBefore: true,
		methods:  []string{"GetLoadBalancer", "EnsureLoadBalancerDeleted"},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, func(c *Config) {
				c.Classless = true
				c.LoadBalancer = optingIn{c.LoadBalancer.(*fake.LoadBalancer)}
			}, tc.svc, node("n1"))
			lb := e.c.cfg.LoadBalancer.(optingIn).LoadBalancer
			if tc.lbBefore {
				if _, err := lb.EnsureLoadBalancer(context.Background(), "kubernetes", tc.svc, nil); err != nil {
					t.Fatal(err)
				}
			}
			skip := len(lb.Calls())
			if err := e.syncSettled(t, "a"); err != nil {
				t.Fatal(err)
			}
			var methods []string
			for _, c := range lb.Calls()[skip:] {
				methods = append(methods, c.Method)
			}
			got := e.get(t, "a")
			var ingress string
			if len(got.Status.LoadBalancer.Ingress) > 0 {
				ingress = got.Status.LoadBalancer.Ingress[0].IP
			}
			if len(got.Finalizers) == 0 {
				got.Finalizers = nil // the fake clientset keeps the empty list a patch leaves
			}
			type result struct {
				Methods, Finalizers []string
				Ingress             string
			}
			if diff := cmp.Diff(result{tc.methods, tc.finalizers, tc.ingress}, result{methods, got.Finalizers, ingress}); diff != "" {
				t.Errorf("after sync (-want +got):\n%s", diff)
			}
		})
	}
}
