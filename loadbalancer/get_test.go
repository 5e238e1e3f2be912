package loadbalancer

import (
	"context"
	"errors"
	"net/netip"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
)

// The process holds some keys of a Service (80), and the router holds
// another mapping of it at a key its status names (82, an old spec's): Get
// says it exists from memory, and the Delete that follows reads the status
// key too, leaving nothing on the router.
func TestGetAndDeleteReachTheStatusKeysOfAPartlyRememberedService(t *testing.T) {
	e := newEnv(t, Config{}, fake.RouterConfig{})
	ctx := context.Background()
	svc := newService("default", "web", withPorts(port("a", v1.ProtocolTCP, 80, 30080)))
	e.mustEnsure(t, svc, threeNodes())
	e.router.Put(igd.Mapping{Protocol: igd.TCP, ExternalPort: 82, InternalClient: addrA, InternalPort: 30082,
		Description: desc("default", "web", "c"), Enabled: true})
	svc.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "203.0.113.1", Ports: []v1.PortStatus{{Port: 82, Protocol: v1.ProtocolTCP}}}}
	if _, exists, err := e.lb.GetLoadBalancer(ctx, testCluster, svc); err != nil || !exists {
		t.Fatalf("Get = %v, %v; want exists", exists, err)
	}
	if err := e.lb.EnsureLoadBalancerDeleted(ctx, testCluster, svc); err != nil {
		t.Fatal(err)
	}
	diffRows(t, "table after delete", e.table(), nil)
	if _, exists, err := e.lb.GetLoadBalancer(ctx, testCluster, svc); err != nil || exists {
		t.Errorf("Get after delete = %v, %v; want gone", exists, err)
	}
}

// This process holds the Service's key, the router lost it (a reboot), and
// GetExternalIPAddress fails (a fault, as some routers answer while the WAN
// is down). Get decides existence from memory, without a read, and an
// external IP it cannot get is no error: the service controller's or
// lbclass's clean-up ("check if load balancer exists") goes on, and the
// delete needs no external IP either.
func TestGetFromMemoryNeedsNoExternalIP(t *testing.T) {
	e := newEnv(t, Config{}, fake.RouterConfig{})
	ctx := context.Background()
	svc := newService("default", "web", withPorts(port("a", v1.ProtocolTCP, 80, 30080)))
	e.mustEnsure(t, svc, threeNodes())
	e.router.Reboot()
	e.router.Intercept(fake.RouterHooks{ExternalIP: func(context.Context, netip.Addr, fake.AddrFunc) (netip.Addr, error) {
		return netip.Addr{}, errors.New("UPnP fault 501 ActionFailed")
	}})
	if _, exists, err := e.lb.GetLoadBalancer(ctx, testCluster, svc); err != nil {
		t.Errorf("Get = exists %v, err %v; want no error (existence needs no external IP; before, the read found nothing: false, nil)", exists, err)
	}
	// The delete itself does not need the external IP.
	if err := e.lb.EnsureLoadBalancerDeleted(ctx, testCluster, svc); err != nil {
		t.Errorf("Delete = %v", err)
	}
}

// A fresh process (nothing in memory) reads the router: the Service's
// mappings are there and GetExternalIPAddress fails. Get says the load
// balancer exists, without an error.
func TestGetByReadingTheRouterNeedsNoExternalIP(t *testing.T) {
	e := newEnv(t, Config{}, fake.RouterConfig{})
	ctx := context.Background()
	svc := newService("default", "web", withPorts(port("a", v1.ProtocolTCP, 80, 30080)))
	e.mustEnsure(t, svc, threeNodes())
	fresh, err := New(Config{Client: e.router.Client(addrA), Clock: e.clock})
	if err != nil {
		t.Fatal(err)
	}
	fresh.seeNodes(threeNodes())
	e.router.Intercept(fake.RouterHooks{ExternalIP: func(context.Context, netip.Addr, fake.AddrFunc) (netip.Addr, error) {
		return netip.Addr{}, errors.New("UPnP fault 501 ActionFailed")
	}})
	if _, exists, err := fresh.GetLoadBalancer(ctx, testCluster, svc); err != nil || !exists {
		t.Errorf("Get = exists %v, err %v; want exists, no error", exists, err)
	}
}

// A Service deleted with its finalizer removed by hand (no Delete) is
// re-created under the same name with a new UID and other ports. Memory of
// the old one makes Get report the new one existing (with the old one's
// port, a status nobody reads); the Delete that follows removes the old
// mapping (same owner token): nothing leaks.
func TestDeleteOfAServiceRecreatedUnderItsNameRemovesTheOldMapping(t *testing.T) {
	e := newEnv(t, Config{}, fake.RouterConfig{})
	ctx := context.Background()
	old := newService("default", "web", withPorts(port("a", v1.ProtocolTCP, 80, 30080)))
	e.mustEnsure(t, old, threeNodes())
	nu := newService("default", "web", withPorts(port("a", v1.ProtocolTCP, 443, 30443)))
	nu.UID = types.UID("uid-new")
	st, exists, err := e.lb.GetLoadBalancer(ctx, testCluster, nu)
	if err != nil || !exists {
		t.Fatalf("Get(new) = %v, %v", exists, err)
	}
	t.Logf("Get(new, never ensured) status ports = %+v", st.Ingress[0].Ports)
	if err := e.lb.EnsureLoadBalancerDeleted(ctx, testCluster, nu); err != nil {
		t.Fatal(err)
	}
	diffRows(t, "table after delete of the new one", e.table(), nil)
}
