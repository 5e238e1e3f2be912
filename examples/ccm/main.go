// Command ccm is a cloud-controller-manager for any cloud provider built
// with ccmkit: the standard k8s.io/cloud-provider command, building the
// provider named by --cloud-provider from ccmkit's registry. Copy this
// file, and register your own provider in init.
//
//	ccm --cloud-provider=mycloud --cloud-config=cloud-config.yaml --cluster-name=prod
package main

import (
	"io"
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

	"github.com/ccmkit/ccmkit/provider"
	"github.com/ccmkit/ccmkit/registry"
)

// providerName is your cloud's name: --cloud-provider's default and the
// scheme of its nodes' ProviderIDs.
const providerName = "mycloud"

func init() {
	// Your cloud: its LoadBalancer, InstancesV2, Routes... built from the
	// cloud-config (nil when --cloud-config is not set).
	provider.MustRegister(providerName, func(config io.Reader) (provider.Config, error) {
		nodes, err := provider.NewInstancesV2(providerName, provider.InstancesV2Config{})
		if err != nil {
			return provider.Config{}, err
		}
		return provider.Config{InstancesV2: nodes, ClusterID: true}, nil
	})
}

func main() {
	opts, err := options.NewCloudControllerManagerOptions()
	if err != nil {
		klog.Fatalf("unable to initialize command options: %v", err)
	}
	opts.KubeCloudShared.CloudProvider.Name = providerName
	command := app.NewCloudControllerManagerCommand(opts, initCloud, app.DefaultInitFuncConstructors,
		names.CCMControllerAliases(), cliflag.NamedFlagSets{}, wait.NeverStop)
	os.Exit(cli.Run(command))
}

// initCloud builds the provider named by --cloud-provider from the file
// named by --cloud-config. The command has no way to return an error here.
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
