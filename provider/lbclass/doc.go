// Package lbclass serves the Services of one spec.loadBalancerClass with any
// cloudprovider.LoadBalancer, as upstream's service controller
// (k8s.io/cloud-provider/controllers/service) serves the Services with no
// class. A CCM author runs it beside the cloud-controller-manager for a second
// kind of load balancer; an operator runs it alone, as a Deployment, to get
// load balancers without making anything the cluster's
// cloud-controller-manager.
//
// A Controller serves a Service when it is of type LoadBalancer, not being
// deleted, its class is Config.Class (or it has no class and
// Config.Classless is set), and its load balancer serves it (every such
// Service, unless it implements Selective). It keeps upstream's contract:
//
//   - A finalizer is added before the first EnsureLoadBalancer and removed
//     only after EnsureLoadBalancerDeleted succeeded, when the Service is
//     deleted or no longer served (type changed, or, after a change through
//     another type, another class, or its load balancer no longer serves
//     it). A Service never served gets none.
//   - The status is written through the status subresource with a strategic
//     merge patch, and only when it changed.
//   - UpdateLoadBalancer is called when the set of nodes changes, under
//     upstream's node predicates (not being deleted, not labelled
//     node.kubernetes.io/exclude-from-external-load-balancers, not tainted
//     ToBeDeletedByClusterAutoscaler; readiness is left to the load balancer,
//     as upstream v0.37 does).
//   - An api.RetryError requeues the Service after its delay;
//     cloudprovider.ImplementedElsewhere ends the sync without status.
//   - Events carry upstream's reasons (EnsuringLoadBalancer,
//     EnsuredLoadBalancer, SyncLoadBalancerFailed, DeletingLoadBalancer,
//     DeletedLoadBalancer, UpdatedLoadBalancer, UpdateLoadBalancerFailed,
//     UnAvailableLoadBalancer); failures back off exponentially per Service
//     through a rate-limited workqueue (5 s to 300 s by default).
//
// Where it differs from upstream, and why:
//
//   - The finalizer is the controller's own (Config.Finalizer, by default the
//     class name), not service.kubernetes.io/load-balancer-cleanup. Upstream's
//     controller cleans up every Service that carries that finalizer and is
//     being deleted or is no longer of type LoadBalancer, whatever its class
//     (fake/cluster's TestUpstreamCleansClassedServicesWithItsFinalizer; k3s's
//     servicelb and every cloud-controller-manager run that controller): it
//     would remove the finalizer before this controller cleaned up, and
//     mappings would leak. An own finalizer also tells two class controllers
//     apart, so a Service handed from one to another is cleaned by the first
//     and served by the second, each holding its own finalizer.
//   - A Service being handed over is cleaned up without clearing its status
//     when it is of type LoadBalancer again: that status is its new owner's.
//     This is decided on the Service as the API server has it after the
//     load balancer's clean-up, and the status is cleared only if it is still
//     so when written (a JSON patch with test operations).
//   - Node changes are applied by the Service's own worker (through the
//     Service queue), so EnsureLoadBalancer and UpdateLoadBalancer are never
//     called at once for one Service.
//   - Config.ResyncPeriod can ensure every Service served again
//     periodically, quietly, for load balancers whose resources need
//     renewing (upstream ensures only on changes).
//   - An api.RetryError gets no Warning event: it means "not yet", not a
//     failure (upstream reports SyncLoadBalancerFailed for it too).
//
// Like upstream, it remembers the Services it served, so one deleted without
// its finalizer (someone removed it) is still cleaned up while the process
// lives; after a restart only the finalizer tells.
package lbclass
