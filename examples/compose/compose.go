// Package compose holds the root README's "Quick start: compose your own CCM"
// as compiled code: the lines between the README markers below are the
// README's snippet, character for character (compose_test.go checks it), so
// the snippet always builds against the current API.
//
// Importing the package registers the "homelab" provider in
// registry.Default(), as a CCM's main package would.
package compose

// README:begin
import (
	"io"
	"os"

	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/loadbalancer"
	"github.com/ccmkit/ccmkit/provider"
)

func init() {
	provider.MustRegister("homelab", func(config io.Reader) (provider.Config, error) {
		router, err := igd.NewClient(igd.Config{}) // no I/O here: discovery is lazy and retried
		if err != nil {
			return provider.Config{}, err
		}
		lb, err := loadbalancer.New(loadbalancer.Config{Client: router, NodeName: os.Getenv("NODE_NAME")})
		if err != nil {
			return provider.Config{}, err
		}
		nodes, err := provider.NewInstancesV2("homelab", provider.InstancesV2Config{Zone: "attic"})
		if err != nil {
			return provider.Config{}, err
		}
		// My cloud = this LoadBalancer + these InstancesV2 + nothing else.
		return provider.Config{LoadBalancer: lb, InstancesV2: nodes, ClusterID: true}, nil
	})
}

// README:end
