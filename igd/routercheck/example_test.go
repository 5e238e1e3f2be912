package routercheck_test

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/routercheck"
)

// Check a router in secure mode against a configuration that does not
// expect it.
func ExampleRun() {
	router := fake.NewRouter(fake.RouterConfig{SecureMode: true})
	srv := fake.NewServer(router, fake.ServerOptions{})
	defer srv.Close()
	client, err := igd.NewClient(igd.Config{RootDescURL: srv.RootDescURL})
	if err != nil {
		panic(err)
	}
	rep, err := routercheck.Run(context.Background(), client, routercheck.Options{
		SecureMode: false, // the cloud-config's loadBalancer.secureMode
		OtherHost:  netip.MustParseAddr("192.0.2.99"),
	})
	if err != nil {
		panic(err)
	}
	for _, f := range rep.Findings {
		fmt.Println(f.Check, f.Status)
	}
	if p := rep.Problem(); p != nil {
		fmt.Println("fix first:", p.Check)
	}
	// Output:
	// router ok
	// igd-service ok
	// external-ip ok
	// listing ok
	// map-this-host ok
	// finite-lease ok
	// secure-mode fail
	// ports-below-1024 ok
	// ipv6-pinholes ok
	// pcp ok
	// fix first: secure-mode
}
