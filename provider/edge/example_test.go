package edge_test

import (
	"fmt"
	"strings"

	"github.com/ccmkit/ccmkit/provider/edge"
	"github.com/ccmkit/ccmkit/registry"
)

// A cloud-controller-manager registers the edge provider and builds it by
// name from its --cloud-config. Building it makes no network call.
func ExampleFactory() {
	r := registry.New()
	if err := r.Register(edge.ProviderName, edge.Factory); err != nil {
		fmt.Println(err)
		return
	}
	cloud, err := r.Build(edge.ProviderName, strings.NewReader(`
gateway:
  url: http://192.168.1.1:5000/rootDesc.xml
loadBalancer:
  lease: 30m
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	_, lb := cloud.LoadBalancer()
	_, instances := cloud.InstancesV2()
	_, routes := cloud.Routes()
	fmt.Println(cloud.ProviderName(), "HasClusterID:", cloud.HasClusterID())
	fmt.Println("LoadBalancer:", lb, "InstancesV2:", instances, "Routes:", routes)
	// Output:
	// edge HasClusterID: true
	// LoadBalancer: true InstancesV2: true Routes: false
}

// A mistyped key is an error that names it.
func ExampleParseConfig() {
	_, err := edge.ParseConfig(strings.NewReader("gateway:\n  callTimout: 2s\n"))
	fmt.Println(err)
	// Output:
	// invalid edge cloud-config: gateway.callTimout: Forbidden: unknown field (known: callTimeout, discoveryTimeout, ipv6, pcpSecretFile, protocol, url)
}
