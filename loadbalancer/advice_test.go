package loadbalancer

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/internal/upnp"
)

// refuseBelow1024 answers 606 to every add of an external port below 1024,
// as miniupnpd's and OpenWrt's default permission rules do.
var refuseBelow1024 = fake.RouterHooks{AddPortMapping: func(ctx context.Context, _ netip.Addr, m igd.Mapping, next fake.AddFunc) (igd.Mapping, error) {
	if m.ExternalPort < 1024 {
		return igd.Mapping{}, &igd.UPnPError{Action: "AddPortMapping", Code: upnp.CodeNotAuthorized, Description: "Action not authorized"}
	}
	return next(ctx, m)
}}

// A Service none of whose ports the router's rules allow (k3s's Traefik on
// 80 and 443, on OpenWrt's default rules) stays pending: the error the
// Service's SyncLoadBalancerFailed event carries says, for each port, the
// rule that allows it on the router.
func TestRefusedServiceSaysPerPortWhatToAllow(t *testing.T) {
	e := newEnv(t, Config{}, fake.RouterConfig{})
	e.router.Intercept(refuseBelow1024)
	svc := newService("kube-system", "traefik", withPorts(port("web", v1.ProtocolTCP, 80, 30080), port("websecure", v1.ProtocolTCP, 443, 30443)))
	_, err := e.ensure(t, svc, threeNodes())
	if err == nil {
		t.Fatal("Ensure succeeded, want the Service refused: the router allows none of its ports")
	}
	for _, want := range []string{"port TCP/80", "allow 80 0.0.0.0/0 1024-65535", "ext_ports 80", "port TCP/443", "allow 443 0.0.0.0/0 1024-65535", "ext_ports 443"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

// A port the router's rules refuse while the Service's others are forwarded
// gets a PortNotForwarded Warning naming the rule that allows that port.
func TestRefusedPortEventSaysWhatToAllow(t *testing.T) {
	e := newEnv(t, Config{}, fake.RouterConfig{})
	e.router.Intercept(refuseBelow1024)
	nodes := threeNodes()
	svc := lbService("default", "web", withPorts(port("https", v1.ProtocolTCP, 443, 30443), port("alt", v1.ProtocolTCP, 8443, 30444)))
	objs := []k8sruntime.Object{svc}
	for _, n := range nodes {
		objs = append(objs, n)
	}
	bg := startBackground(t, e, objs...)
	e.mustEnsure(t, svc, nodes)
	var msg string
	eventually(t, "the PortNotForwarded event", func() bool {
		evs, err := bg.client.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs.Items {
			if ev.Reason == EventReasonPortNotForwarded {
				msg = ev.Message
				return true
			}
		}
		return false
	})
	for _, want := range []string{"Port TCP/443", "allow 443 0.0.0.0/0 1024-65535", "ext_ports 443"} {
		if !strings.Contains(msg, want) {
			t.Errorf("event %q lacks %q", msg, want)
		}
	}
}
