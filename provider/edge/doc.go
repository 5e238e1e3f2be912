// Package edge is the cloud provider for Kubernetes clusters behind a home or
// edge router: Services of type LoadBalancer are served by port mappings on
// the router (UPnP IGD, package loadbalancer), their IPv6 family, when
// gateway.ipv6 is enabled, by firewall pinholes to a node's global address
// (IPv6Config), and nodes are initialized
// without a cloud API (provider.InstancesV2: ProviderID edge://<node-name>;
// nodes that carry k3s://<node-name> or rke2://<node-name> keep it and are
// treated as edge's).
//
// Factory is a cloudprovider.Factory, registered under ProviderName
// ("edge") with registry.Register or registry.MustRegister, and
// examples/edge-ccm shows a cloud-controller-manager built on it. The factory reads the cloud-config (Config, ParseConfig)
// strictly: an unknown or mistyped key is an error naming it. It builds the
// provider without any network I/O: the router is discovered on first use
// and again whenever it stops answering, so a router that is unreachable when
// the cloud-controller-manager starts does not turn the service controller
// off (upstream asks LoadBalancer() once, at start-up).
//
// The provider reports HasClusterID true: mappings on the router are owned per
// cluster, by the cloud-controller-manager's --cluster-name.
package edge
