package loadbalancer

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/internal/upnp"
)

// portErrors returns each port of st as "TCP/80" -> its error value ("" when none).
func portErrors(st *v1.LoadBalancerStatus) map[string]string {
	out := map[string]string{}
	for _, ing := range st.Ingress {
		for _, p := range ing.Ports {
			k, _ := portKey(p.Protocol, p.Port)
			out[k.String()] = ""
			if p.Error != nil {
				out[k.String()] = *p.Error
			}
		}
	}
	return out
}

// refuse81 answers every add of TCP/81 with UPnP error code.
func refuse81(code int) fake.RouterHooks {
	return fake.RouterHooks{AddPortMapping: func(ctx context.Context, _ netip.Addr, m igd.Mapping, next fake.AddFunc) (igd.Mapping, error) {
		if m.ExternalPort == 81 {
			return igd.Mapping{}, &igd.UPnPError{Action: "AddPortMapping", Code: code, Description: "refused"}
		}
		return next(ctx, m)
	}}
}

// A Service one of whose ports cannot be forwarded gets its other ports and
// its address; the port that cannot says why in its status, and
// GetLoadBalancer reports the same. A Service none of whose ports can be
// forwarded fails as a whole.
func TestOnePortNotForwardedOthersAre(t *testing.T) {
	stranger := igd.Mapping{Protocol: igd.TCP, ExternalPort: 81, InternalClient: addrStranger, InternalPort: 81, Description: "game console", Enabled: true}
	for _, tt := range []struct {
		name  string
		setup func(*env)
		want  string
	}{
		{"held by a LAN host", func(e *env) { e.router.Put(stranger) }, PortErrorInUse},
		{"refused by the router's rules (606)", func(e *env) { e.router.Intercept(refuse81(upnp.CodeNotAuthorized)) }, PortErrorNotAuthorized},
		{"refused as in secure mode (718, port free)", func(e *env) { e.router.Intercept(refuse81(upnp.CodeConflict)) }, PortErrorSecureMode},
		{"table full (728)", func(e *env) { e.router.Intercept(refuse81(upnp.CodeNoPortMapsAvailable)) }, PortErrorRouterRefused},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, Config{}, fake.RouterConfig{})
			tt.setup(e)
			nodes := threeNodes()
			svc := newService("default", "web", withPorts(port("a", v1.ProtocolTCP, 80, 30080), port("b", v1.ProtocolTCP, 81, 30081)))
			st, err := e.ensure(t, svc, nodes)
			if err != nil {
				t.Fatalf("EnsureLoadBalancer: %v, want the forwarded port served", err)
			}
			want := map[string]string{"TCP/80": "", "TCP/81": tt.want}
			if diff := cmp.Diff(want, portErrors(st)); diff != "" {
				t.Errorf("Ensure's port errors (-want +got):\n%s", diff)
			}
			if len(st.Ingress) != 1 || st.Ingress[0].IP != e.router.ExternalIP().String() {
				t.Errorf("Ensure's ingress = %v, want the router's address", st.Ingress)
			}
			got, exists, err := e.lb.GetLoadBalancer(context.Background(), testCluster, svc)
			if err != nil || !exists {
				t.Fatalf("GetLoadBalancer = %v, %v", exists, err)
			}
			if diff := cmp.Diff(want, portErrors(got)); diff != "" {
				t.Errorf("Get's port errors (-want +got):\n%s", diff)
			}
			if _, err := e.router.Client(addrA).GetPortMapping(context.Background(), igd.TCP, 80); err != nil {
				t.Errorf("TCP/80 not forwarded: %v", err)
			}

			one := newService("default", "one", withPorts(port("b", v1.ProtocolTCP, 81, 30082)))
			if _, err := e.ensure(t, one, nodes); err == nil {
				t.Errorf("Ensure of a Service whose only port cannot be forwarded succeeded")
			}
		})
	}
}

// A port not forwarded is retried in the background every RetryAfter; once
// it is forwarded, the status loses the error. The Service gets one Warning.
func TestPortNotForwardedIsRetried(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{Lease: 4 * time.Hour, RenewInterval: 2 * time.Hour, ProbeInterval: 2 * time.Hour}, fake.RouterConfig{})
	nodes := threeNodes()
	svc := lbService("default", "web", withPorts(port("a", v1.ProtocolTCP, 80, 30080), port("b", v1.ProtocolTCP, 81, 30081)))
	e.router.Put(igd.Mapping{Protocol: igd.TCP, ExternalPort: 81, InternalClient: addrStranger, InternalPort: 81, Description: "game console", Enabled: true})
	objs := []k8sruntime.Object{svc}
	for _, n := range nodes {
		objs = append(objs, n)
	}
	bg := startBackground(t, e, objs...)
	st := e.mustEnsure(t, svc, nodes)
	if got := portErrors(st)["TCP/81"]; got != PortErrorInUse {
		t.Fatalf("TCP/81 error = %q, want %q", got, PortErrorInUse)
	}
	if err := e.router.Client(addrStranger).DeletePortMapping(ctx, igd.TCP, 81); err != nil {
		t.Fatal(err)
	}
	// Only the retry timer can start a pass now (renewals and probes are
	// hours away): step the clock by RetryAfter a few times at most.
	forwarded := func() bool {
		s := bg.service(t, "default", "web")
		return cmp.Equal(portErrors(&s.Status.LoadBalancer), map[string]string{"TCP/80": "", "TCP/81": ""})
	}
	for range 5 {
		if forwarded() {
			break
		}
		before := e.lb.passes.Load()
		e.clock.Step(max(e.lb.cfg.RetryAfter, portRetryInterval))
		for deadline := time.Now().Add(2 * time.Second); e.lb.passes.Load() == before && time.Now().Before(deadline); {
			time.Sleep(2 * time.Millisecond)
		}
	}
	if !forwarded() {
		t.Fatalf("status after retries = %v, want TCP/81 forwarded without error", bg.service(t, "default", "web").Status.LoadBalancer)
	}
	// Events reach the API server asynchronously, through the recorder's
	// broadcaster.
	n := 0
	eventually(t, "the PortNotForwarded event", func() bool {
		evs, err := bg.client.CoreV1().Events("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n = 0
		for _, ev := range evs.Items {
			if ev.Reason == EventReasonPortNotForwarded {
				n++
			}
		}
		return n > 0
	})
	if n != 1 {
		t.Errorf("%d %s events, want 1", n, EventReasonPortNotForwarded)
	}
}

// Each port mapped gets a Normal event naming where it forwards (with
// background work running, whose recorder it is); renewals get none.
func TestMappedPortEvents(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{}, fake.RouterConfig{})
	nodes := threeNodes()
	svc := lbService("default", "web", withPorts(port("a", v1.ProtocolTCP, 80, 30080)))
	objs := []k8sruntime.Object{svc}
	for _, n := range nodes {
		objs = append(objs, n)
	}
	bg := startBackground(t, e, objs...)
	e.mustEnsure(t, svc, nodes)
	e.mustEnsure(t, svc, nodes) // nothing changes: no event
	var got []string
	eventually(t, "the MappedPort event", func() bool {
		evs, err := bg.client.CoreV1().Events("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got = nil
		for _, ev := range evs.Items {
			if ev.Reason == EventReasonMappedPort {
				got = append(got, ev.Message)
			}
		}
		return len(got) > 0
	})
	m, err := e.router.Client(addrA).GetPortMapping(ctx, igd.TCP, 80)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{fmt.Sprintf("Mapped TCP/80 to %s:30080 (%s)", e.lb.nodeName(m.InternalClient), m.InternalClient)}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("MappedPort events (-want +got):\n%s", diff)
	}
}
