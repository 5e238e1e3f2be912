package registry_test

import (
	"errors"
	"fmt"
	"io"
	"strings"

	cloudprovider "k8s.io/cloud-provider"

	"github.com/ccmkit/ccmkit/provider"
	"github.com/ccmkit/ccmkit/registry"
)

// A CCM registers its provider's factory under the provider name, then
// builds it by the name given on its command line.
func Example() {
	r := registry.New()
	r.MustRegister("homelab", func(config io.Reader) (cloudprovider.Interface, error) {
		clusterID := ""
		if config != nil { // nil: no config file
			b, err := io.ReadAll(config)
			if err != nil {
				return nil, err
			}
			clusterID = strings.TrimSpace(string(b))
		}
		cloud, err := provider.New("homelab", provider.Config{ClusterID: clusterID != ""})
		if err != nil {
			return nil, err // not cloud: a nil *provider.Cloud is not a nil Interface
		}
		return cloud, nil
	})

	cloud, err := r.Build("homelab", strings.NewReader("home-1\n"))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(cloud.ProviderName(), "has cluster ID:", cloud.HasClusterID())

	_, err = r.Build("aws", nil)
	fmt.Println(errors.Is(err, registry.ErrUnknown), err)

	// Output:
	// homelab has cluster ID: true
	// true build cloud provider "aws": unknown cloud provider (registered: homelab)
}
