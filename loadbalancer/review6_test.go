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

// The process holds SOME keys of a Service (80), the router holds another
// mapping of it at a key its status names (82, an old spec's): Get says
// exists from memory, and the Delete that follows reads the status key too.
func TestReview6GetPartialMemoryDeleteReachesStatusKeys(t *testing.T) {
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

// NEW (memory path): this process holds the Service's key, the router lost
// it (a reboot), and GetExternalIPAddress fails (a fault, as some routers
// answer while the WAN is down). Before d13e5c2 Get read, found nothing and
// said (false, nil): the clean-up went on. Now it says (nil, true, err):
// the service controller / lbclass cleanup fails "check if load balancer
// exists" and keeps the finalizer until the router answers its external IP,
// although existence was decided without any router call.
func TestReview6GetFromMemoryBlockedByExternalIPFault(t *testing.T) {
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

// PRE-EXISTING (read path, same in both versions): mappings exist and
// GetExternalIPAddress faults: Get errors, so the clean-up cannot start
// while the router does not answer its address (only ErrExternalIPNotUsable
// is let through with an empty status).
func TestReview6GetReadPathBlockedByExternalIPFault(t *testing.T) {
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

// Deleted with its finalizer removed by hand (no Delete), re-created under
// the same name with a new UID and other ports: memory of the old one makes
// Get report the new one existing with the OLD one's port; the Delete that
// follows removes the old mapping (same owner token): no leak, only a wrong
// status nobody reads.
func TestReview6GetRecreatedSameNameOldMemory(t *testing.T) {
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
