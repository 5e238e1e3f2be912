package loadbalancer

import (
	"context"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	servicehelper "k8s.io/cloud-provider/service/helpers"
	"k8s.io/utils/ptr"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/fake/cluster"
)

const (
	classX = "ccmkit.io/upnp-igd"
	classY = "example.com/other"
)

func withClass(c string) svcOpt {
	return func(s *v1.Service) { s.Spec.LoadBalancerClass = ptr.To(c) }
}

func withFinalizer(f string) svcOpt {
	return func(s *v1.Service) { s.Finalizers = []string{f} }
}

// withoutOptIn drops the opt-in annotation: a class is its own opt-in.
func withoutOptIn(s *v1.Service) { delete(s.Annotations, AnnotationLoadBalancerType) }

// classedCluster holds a Service of each kind a class controller or the
// service controller may hand a LoadBalancer, each on its own port.
func classedCluster() map[string]*v1.Service {
	return map[string]*v1.Service{
		"classless": newService("default", "classless", withPorts(port("a", v1.ProtocolTCP, 80, 30080)),
			withFinalizer(servicehelper.LoadBalancerCleanupFinalizer)),
		"mine": newService("default", "mine", withPorts(port("a", v1.ProtocolTCP, 81, 30081)),
			withClass(classX), withFinalizer(classX), withoutOptIn),
		"classless-under-class-controller": newService("default", "classless-cc", withPorts(port("a", v1.ProtocolTCP, 82, 30082)),
			withFinalizer(classX)),
		"another-class": newService("default", "theirs", withPorts(port("a", v1.ProtocolTCP, 83, 30083)),
			withClass(classY), withFinalizer(classY), withoutOptIn),
	}
}

// Background passes renew and repair exactly the Services the caller hands
// the LoadBalancer (Config.Class, Classless, Finalizer): after a router
// reboot, those come back and no other is mapped.
func TestBackgroundRepairsTheServicesHandedOver(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cfg    Config
		handed []string
	}{
		{"service controller", Config{}, []string{"classless"}},
		{"class controller", Config{Class: classX}, []string{"mine"}},
		{"class controller with classless", Config{Class: classX, Classless: true}, []string{"mine", "classless-under-class-controller"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Lease, tc.cfg.RenewInterval = time.Hour, 5*time.Minute
			e := newEnv(t, tc.cfg, fake.RouterConfig{})
			nodes := threeNodes()
			svcs := classedCluster()
			var objs []k8sruntime.Object
			for _, n := range nodes {
				objs = append(objs, n)
			}
			for _, s := range svcs {
				objs = append(objs, s)
			}
			for _, name := range tc.handed {
				e.mustEnsure(t, svcs[name], nodes)
			}
			before := e.table()
			if len(before) != len(tc.handed) {
				t.Fatalf("table before the reboot: %q, want one mapping per Service handed over", before)
			}
			r := startBackground(t, e, objs...)
			e.router.Reboot()
			passes := e.lb.passes.Load()
			r.probe(t)
			eventually(t, "the repair pass", func() bool { return e.lb.passes.Load() > passes })
			diffRows(t, "table after repair", e.table(), before)
		})
	}
}

// Arbitration weighs the Services of the class: of two of them that want one
// key neither holds, created at once, the first by name is served, as of two
// classless ones.
func TestClassedServicesAreArbitrated(t *testing.T) {
	e := newEnv(t, Config{Class: classX}, fake.RouterConfig{})
	nodes := threeNodes()
	a := newService("default", "a", withPorts(port("a", v1.ProtocolTCP, 81, 30081)), withClass(classX), withFinalizer(classX), withoutOptIn)
	b := newService("default", "b", withPorts(port("a", v1.ProtocolTCP, 81, 30091)), withClass(classX), withFinalizer(classX), withoutOptIn)
	if err := e.lb.Initialize(context.Background(), cluster.ClientBuilder(k8sfake.NewClientset(a, b))); err != nil {
		t.Fatal(err)
	}
	errs := map[string]error{}
	for _, s := range []*v1.Service{b, a} {
		_, errs[s.Namespace+"/"+s.Name] = e.ensure(t, s, nodes)
	}
	wantServed(t, "default/a", errs)
	if got := e.router.Mappings(); len(got) != 1 || got[0].InternalPort != 30081 {
		t.Errorf("table %q, want a's mapping alone", e.table())
	}
}

func TestConfigClassAndFinalizer(t *testing.T) {
	for _, tc := range []struct {
		name          string
		cfg           Config
		wantFinalizer string
		wantErr       string
	}{
		{"service controller", Config{}, servicehelper.LoadBalancerCleanupFinalizer, ""},
		{"class is the finalizer", Config{Class: classX}, classX, ""},
		{"own finalizer", Config{Class: classX, Finalizer: "example.com/lb"}, "example.com/lb", ""},
		{"classless needs a class", Config{Classless: true}, "", "Config.Classless: needs Class"},
		{"class not a domain path", Config{Class: "upnp"}, "", "Config.Class: \"upnp\""},
		{"bad finalizer", Config{Finalizer: "a/b/c"}, "", "Config.Finalizer: \"a/b/c\""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Client = fake.NewRouter(fake.RouterConfig{}).Client(addrA)
			got, err := tc.cfg.withDefaults()
			switch {
			case tc.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("withDefaults() error = %v, want one containing %q", err, tc.wantErr)
				}
			case err != nil:
				t.Errorf("withDefaults() = %v", err)
			case got.Finalizer != tc.wantFinalizer:
				t.Errorf("Finalizer = %q, want %q", got.Finalizer, tc.wantFinalizer)
			}
		})
	}
}
