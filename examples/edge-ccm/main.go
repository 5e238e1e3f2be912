// Command edge-ccm is a cloud-controller-manager for Kubernetes clusters
// behind a home or edge router: Services of type LoadBalancer get port
// mappings on the router (UPnP IGD) and nodes are initialized without a
// cloud API. It is the standard k8s.io/cloud-provider command with the
// "edge" provider of ccmkit; copy this file to build your own.
//
//	edge-ccm --cloud-provider=edge --cloud-config=cloud-config.yaml --cluster-name=home-lab
//
// See cloud-config.yaml for the configuration, manifests/ for deployment and
// Dockerfile for the image.
//
// `edge-ccm load-balancer` is the standalone mode: the edge load balancer
// alone, for the Services of a loadBalancerClass, as a Deployment beside a
// cluster left as it is (standalone.go, manifests/standalone/).
//
// `edge-ccm doctor` checks the router against a cloud-config before
// deploying: what it allows, and what to fix (doctor.go, manifests/doctor/).
package main

import (
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/util/wait"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/app"
	"k8s.io/cloud-provider/app/config"
	"k8s.io/cloud-provider/names"
	"k8s.io/cloud-provider/options"
	"k8s.io/component-base/cli"
	cliflag "k8s.io/component-base/cli/flag"
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric
	"k8s.io/klog/v2"

	"github.com/ccmkit/ccmkit/provider/edge"
	"github.com/ccmkit/ccmkit/registry"
)

func main() {
	os.Exit(run())
}

func run() int {
	if len(os.Args) > 1 && os.Args[1] == standaloneCommand {
		return runStandalone(os.Args[2:])
	}
	if len(os.Args) > 1 && os.Args[1] == doctorCommand {
		return runDoctor(os.Args[2:])
	}
	// Register the edge provider in ccmkit's registry; add your own
	// providers the same way.
	if err := registry.Register(edge.ProviderName, edge.Factory); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}

	opts, err := options.NewCloudControllerManagerOptions()
	if err != nil {
		fmt.Fprintf(os.Stderr, "unable to initialize command options: %v\n", err)
		return 1
	}
	// --cloud-provider defaults to edge; --cloud-config still names the file.
	opts.KubeCloudShared.CloudProvider.Name = edge.ProviderName

	// Upstream's controllers (cloud node, node lifecycle, service, route),
	// selectable with --controllers under their names and aliases.
	command := app.NewCloudControllerManagerCommand(opts, initCloud, app.DefaultInitFuncConstructors,
		names.CCMControllerAliases(), cliflag.NamedFlagSets{}, wait.NeverStop)
	return cli.Run(command)
}

// initCloud builds the provider named by --cloud-provider from the file named
// by --cloud-config (none: all defaults). A provider that cannot be built
// stops the process: the command has no other way to report it.
func initCloud(c *config.CompletedConfig) cloudprovider.Interface {
	shared := c.ComponentConfig.KubeCloudShared
	cloud, err := registry.BuildFromFile(shared.CloudProvider.Name, shared.CloudProvider.CloudConfigFile)
	if err != nil {
		klog.Fatalf("Cloud provider could not be initialized: %v", err)
	}
	if !cloud.HasClusterID() && !shared.AllowUntaggedCloud {
		klog.Fatalf("Cloud provider %q has no cluster ID; set --allow-untagged-cloud to run anyway", shared.CloudProvider.Name)
	}
	return cloud
}
