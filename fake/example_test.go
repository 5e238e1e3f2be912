package fake_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cloud-provider/api"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
)

// exposeWeb stands for a consumer's own code under test: it forwards
// external port 8080 to port 30080 of this host, and never takes over a
// port another host holds.
func exposeWeb(ctx context.Context, c igd.Client) (string, error) {
	self, err := c.LocalAddr(ctx)
	if err != nil {
		return "", err
	}
	_, err = c.AddPortMapping(ctx, igd.Mapping{
		Protocol: igd.TCP, ExternalPort: 8080,
		InternalClient: self, InternalPort: 30080,
		Description: "web", Lease: time.Hour,
	})
	if errors.Is(err, igd.ErrConflict) {
		return "port 8080 is taken by another host", nil
	}
	if err != nil {
		return "", fmt.Errorf("expose web: %w", err)
	}
	ip, err := c.ExternalIP(ctx)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("http://%s:8080/", ip), nil
}

// A consumer's unit test drives its own code against the fake router: the
// happy path, a port held by another host, an injected router failure, and
// a lease running out on a clock the test controls.
func Example() {
	ctx := context.Background()
	clock := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	router := fake.NewRouter(fake.RouterConfig{Clock: clock})
	node := router.Client(netip.MustParseAddr("192.0.2.10"))

	url, err := exposeWeb(ctx, node)
	fmt.Println(url, err)
	fmt.Println(router.Mappings())

	// The lease runs out unless renewed.
	clock.Step(time.Hour)
	fmt.Println("after an hour:", len(router.Mappings()), "mappings")

	// Another host holds the port: the code must leave it alone.
	router.Put(igd.Mapping{Protocol: igd.TCP, ExternalPort: 8080, InternalClient: netip.MustParseAddr("192.0.2.99"), InternalPort: 80, Description: "someone else"})
	msg, err := exposeWeb(ctx, node)
	fmt.Println(msg, err)
	fmt.Println(router.Mappings()[0].Description)

	// The router fails the next AddPortMapping once.
	router.Reboot()
	first := fake.Nth(1)
	router.Intercept(fake.RouterHooks{AddPortMapping: func(ctx context.Context, _ netip.Addr, m igd.Mapping, next fake.AddFunc) (igd.Mapping, error) {
		if first() {
			return igd.Mapping{}, &igd.UPnPError{Action: "AddPortMapping", Code: 501, Description: "ActionFailed"}
		}
		return next(ctx, m)
	}})
	_, err = exposeWeb(ctx, node)
	fmt.Println("UPnP error", igd.Code(err))
	fmt.Println("AddPortMapping calls:", router.CallCount(fake.MethodAddPortMapping))

	// Output:
	// http://198.51.101.7:8080/ <nil>
	// [TCP/8080 -> 192.0.2.10:30080 ("web", lease 1h0m0s)]
	// after an hour: 0 mappings
	// port 8080 is taken by another host <nil>
	// someone else
	// UPnP error 501
	// AddPortMapping calls: 3
}

// A fake Server lets the real client, or any UPnP code, talk SOAP over HTTP
// to the fake router.
func ExampleNewServer() {
	router := fake.NewRouter(fake.RouterConfig{})
	srv := fake.NewServer(router, fake.ServerOptions{Service: fake.WANIPConnection1})
	defer srv.Close()

	client, err := igd.NewClient(igd.Config{RootDescURL: srv.RootDescURL})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	_, err = client.AddPortMapping(ctx, igd.Mapping{
		Protocol: igd.UDP, ExternalPort: 5353,
		InternalClient: netip.MustParseAddr("127.0.0.1"), InternalPort: 53,
		Description: "dns",
	})
	fmt.Println(err)
	// The server sees the caller as 127.0.0.1, the lease 0 was stored as 7
	// days, as miniupnpd does.
	fmt.Println(router.Mappings())
	// Output:
	// <nil>
	// [UDP/5353 -> 127.0.0.1:53 ("dns", lease 168h0m0s)]
}

// Hooks steer the router without forking it, one typed field per
// operation: here every GetPortMapping waits until the test lets it go,
// and the log shows who called what. The same hook fires for calls that
// come through a Server (as GetSpecificPortMappingEntry).
func ExampleRouter_Intercept() {
	router := fake.NewRouter(fake.RouterConfig{})
	release := make(chan struct{})
	router.Intercept(fake.RouterHooks{
		GetPortMapping: func(ctx context.Context, from netip.Addr, k igd.Key, next fake.GetFunc) (igd.Mapping, error) {
			if err := fake.Hold(ctx, release); err != nil {
				return igd.Mapping{}, err
			}
			return next(ctx, k)
		},
	})

	done := make(chan error)
	go func() {
		_, err := router.Client(netip.MustParseAddr("192.0.2.11")).GetPortMapping(context.Background(), igd.TCP, 8080)
		done <- err
	}()
	close(release)
	err := <-done
	fmt.Println(errors.Is(err, igd.ErrNoSuchEntry))
	for _, c := range router.Calls() {
		fmt.Println(c.Method, c.Client, c.Key, igd.Code(c.Err))
	}
	// Output:
	// true
	// GetPortMapping 192.0.2.11 TCP/8080 714
}

// A LoadBalancer fake takes hooks in the same idiom: here the cloud asks
// the service controller to retry the first Ensure of every Service, as a
// cloud does while an address is being allocated.
func ExampleLoadBalancer_Intercept() {
	lb := fake.NewLoadBalancer(netip.Addr{})
	seen := map[string]bool{}
	lb.Intercept(fake.LoadBalancerHooks{
		EnsureLoadBalancer: func(ctx context.Context, cluster string, svc *v1.Service, nodes []*v1.Node, next fake.EnsureLoadBalancerFunc) (*v1.LoadBalancerStatus, error) {
			if !seen[svc.Name] {
				seen[svc.Name] = true
				return nil, api.NewRetryError("address not ready", time.Second)
			}
			return next(ctx, cluster, svc, nodes)
		},
	})
	web := &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"}}
	for range 2 {
		st, err := lb.EnsureLoadBalancer(context.Background(), "kubernetes", web, nil)
		if err != nil {
			fmt.Println("error:", err)
			continue
		}
		fmt.Println("ingress:", st.Ingress[0].IP)
	}
	fmt.Println(lb.CallCount(fake.MethodEnsureLoadBalancer), "calls,", len(lb.Services()), "load balancer")
	// Output:
	// error: address not ready
	// ingress: 198.51.101.7
	// 2 calls, 1 load balancer
}
