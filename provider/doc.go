// Package provider composes a cloudprovider.Interface from optional parts.
//
// A cloud-controller-manager author says "my cloud = this LoadBalancer +
// these InstancesV2 + nothing else" in a few lines:
//
//	cloud, err := provider.New("homelab", provider.Config{
//		LoadBalancer: lb,
//		InstancesV2:  nodes,
//	})
//
// To register the cloud, [MustRegister] (or [Register], for a Registry of
// your own) takes the name once and a function building the Config from
// the cloud-config; the factory it registers returns a
// cloudprovider.Interface, nil on error (a nil *Cloud in a non-nil
// Interface is the trap it avoids):
//
//	provider.MustRegister("homelab", func(config io.Reader) (provider.Config, error) {
//		return provider.Config{LoadBalancer: lb, InstancesV2: nodes, ClusterID: true}, nil
//	})
//
// The resulting *Cloud reports exactly the parts it was given: each
// accessor (LoadBalancer, Instances, InstancesV2, Zones, Clusters, Routes)
// returns (part, true) for a part that was given and (nil, false) for one
// that was not, so the cloud-controller-manager starts only the
// controllers that have something to drive. A typed nil (for example a nil
// *MyLoadBalancer) counts as not given.
//
// Parts join the provider's life cycle through two small interfaces. When
// the cloud-controller-manager calls Cloud.Initialize, a part that
// implements [Initializer] receives the client builder, and a part that
// implements [Runner] has its background work (lease renewal, say) started
// in a goroutine bound to the stop channel. A part that fills several roles
// (the same value as LoadBalancer and InstancesV2) is initialized and run
// once. When the stop channel closes, every goroutine Initialize started
// returns, and [Cloud.Done] is closed after the last one has. Parts that
// implement cloudprovider.InformerUser receive SetInformers.
//
// Provider names follow the rule of registry.ValidateName, since the name
// becomes the scheme of every node's ProviderID.
package provider
