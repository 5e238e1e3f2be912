// Package loadbalancer implements cloudprovider.LoadBalancer for clusters
// behind a NAT router: each port of a Service of type LoadBalancer becomes a
// UPnP IGD port mapping from the router's external address (external port =
// spec.ports[].port) to the port's nodePort on one node, and the Service's
// status reports the router's external IP.
//
// It is built for the upstream service controller
// (k8s.io/cloud-provider/controllers/service), which calls it from several
// workers at once, retries with back-off, and never calls again for a
// Service that did not change; what the controller does not notice (a router
// reboot, a new external IP, a node turning NotReady, endpoints moving) the
// LoadBalancer's own background work handles (see Initialize and Run, which
// provider.Cloud calls).
//
// # The router's table is the source of truth
//
// Nothing that matters lives only in memory. Every operation reads the table
// once (one igd.Client.ListPortMappings), computes what the Service wants,
// and converges: it adds missing mappings, re-points or renews the Service's
// own mappings, and deletes the Service's own mappings for ports it no
// longer has. After a restart, GetLoadBalancer finds the mappings an earlier
// process made and EnsureLoadBalancerDeleted removes them.
//
// The service controller deletes with GetLoadBalancer and then, when it
// exists, EnsureLoadBalancerDeleted, back to back: the delete uses the Get's
// read when it is at most ObservationTTL old and nothing was written for the
// Service since, so deleting an N-port Service costs one read and N deletes
// in all, not two reads (on miniupnpd a read costs about one delete). Called
// alone, EnsureLoadBalancerDeleted reads the table itself.
//
// Recognising a mapping needs the cluster's node addresses (see below), so
// until this process knows them, GetLoadBalancer and
// EnsureLoadBalancerDeleted return an api.RetryError instead of reporting
// "no mappings" (on which the service controller would drop its cleanup
// finalizer and leave the ports open): while the background work's node
// cache has not synced, and, without background work, until an
// EnsureLoadBalancer or UpdateLoadBalancer has passed the nodes (the service
// controller ensures every Service when it starts; it formats the errors of
// its delete path with %v, so there it backs off instead of waiting the fixed
// delay). A mapping that points at a node deleted while no process was
// running is not recognised after a restart; with finite leases it expires.
//
// A mapping belongs to a Service when its description names the Service and
// it points at an address of one of the cluster's nodes (any host on the LAN
// can write any description; one pointing elsewhere is treated as someone
// else's). Mappings of other hosts, other clusters and other Services are
// never deleted or overwritten: a Service asking for an external port that
// someone else holds fails for that port with a *PortError naming the
// Service, the port and the holder (matching ErrPortInUse), and its other
// ports still converge.
//
// # Description format, version 1
//
// Every mapping's description is, with single spaces:
//
//		ck1 <owner> <port>[ <hint>]
//
//	  - "ck1" marks format version 1. Later versions of this package write
//	    their own marker and keep recognising "ck1" descriptions, so that an
//	    upgrade does not orphan mappings.
//	  - <owner> is "cluster/namespace/name" when that is at most 43 bytes of
//	    letters, digits, '-', '.' and '_'; otherwise "#" followed by the first
//	    20 characters of the lowercase, unpadded base32 encoding of the SHA-256
//	    of "cluster/namespace/name" (100 bits). GetLoadBalancerName returns it.
//	  - <port> is the Service port's name, or "-" for an unnamed port.
//	  - <hint>, only after a hashed owner, is "namespace/name" cut to fit: for
//	    people reading the table (upnpc -l), never parsed.
//
// A description is at most 63 bytes (igd.MaxDescriptionLen): miniupnpd keeps
// 64 bytes including its terminator and mangles longer ones.
//
// When only the description of a Service's own mapping changes (a Service
// port renamed), the mapping is deleted and added again: miniupnpd keeps the
// old description of a mapping that the same internal client re-adds with
// the same internal port, renewing only its lease. Between the two calls the
// port is not forwarded. A router that alters descriptions (cuts them short)
// is rewritten at most once per process and port name, not on every pass.
//
// The cluster is kube-controller-manager's --cluster-name (the clusterName
// argument of every call). Two clusters behind one router must use different
// cluster names, or each would take the other's mappings of same-named
// Services for its own.
//
// # Node choice
//
// A node is eligible when it is Ready, has an IPv4 InternalIP, is not being
// deleted, not labelled node.kubernetes.io/exclude-from-external-load-balancers
// and not tainted ToBeDeletedByClusterAutoscaler. All of a Service's
// mappings target one node: the node they already point at while it stays
// eligible (a node joining moves nothing), otherwise the eligible node with
// the highest rendezvous hash of (namespace/name, node name), which is
// deterministic and spreads Services over nodes. With
// externalTrafficPolicy Local, only nodes with a ready endpoint of the
// Service (from its EndpointSlices) are eligible, and mappings follow the
// endpoints. With no eligible node the table is left alone and the error
// says why each node does not qualify.
//
// # Secure-mode routers
//
// A router in secure mode (miniupnpd secure_mode=yes) lets a host map ports
// only to itself: set Config.SecureMode, and every mapping targets the node
// this process runs on; while that node is not eligible, Services fail with
// an error saying so. That node is Config.NodeName (from the downward API)
// or, when it is empty, the one node whose InternalIP or ExternalIP is this
// host's address toward the router (igd.Client.LocalAddr), looked up among
// the nodes of the first call that needs it and cached once found, and
// mappings then target that address (the only one the router lets this host
// map to); while none matches, Services fail with ErrOwnNodeUnknown and an
// api.RetryError naming the address and the nodes tried. With
// Config.NodeName, mappings target the node's InternalIP.
//
// After a leader fail-over to another node, the router refuses to let the
// new leader change the old leader's mappings; the new leader reports an
// api.RetryError until they expire and then serves the Services again. With
// finite leases that takes at most one lease, so choose the lease as the
// longest outage of a fail-over you accept (the default hour is a
// compromise with the renewal traffic; a few minutes suits secure mode).
// Permanent leases (seven days on IGD:2 routers) make fail-over wait a week.
//
// # Leases and background work
//
// Mappings get a finite lease by default (Config.Lease, one hour), so that
// the ports close on the router when the cluster is gone. The background
// work renews them at half-life, every Config.RenewInterval; the same pass
// repairs drift (a router reboot wipes the table: every Service's mappings
// are back within one interval), refreshes the cached external IP and
// patches the status of Services when it changes, records a Warning event
// (reason ExternalIPNotPublic) on Services when the external IP is not
// public (double NAT, CGNAT), and re-points mappings when a node turns
// NotReady or a Local Service's endpoints move. A pass costs one external IP
// call and one table read, plus one add per mapping to restore or renew.
// Routers that only take permanent leases get permanent mappings (the igd
// client falls back; this is logged once). A mapping is renewed when the
// lease the router reports as left (miniupnpd reports the time left), or
// what is left of the lease it granted when this process added it, falls
// below half the lease plus half an interval. A pass works from the list of
// Services its informer held when it began: a Service whose mappings
// EnsureLoadBalancerDeleted removed since is left alone (until an Ensure
// serves it again), so that no pass re-adds mappings nothing would remove.
//
// Without background work (no Initialize and Run), nothing renews leases
// between the service controller's calls, which do not come for unchanged
// Services: finite-lease mappings then expire. The background work only
// touches Services that carry the service controller's cleanup finalizer, so
// that it never maps a Service whose deletion the controller would not see
// through.
//
// # Errors and retries
//
// Bad input gets a *ServiceError (matching ErrInvalidService) naming the
// Service and the field, and nothing is mapped for the Service: SCTP ports,
// ports without a nodePort (allocateLoadBalancerNodePorts false), IPv6-only
// Services, loadBalancerSourceRanges (a port mapping cannot enforce them;
// refusing beats silently exposing the Service), and a spec.loadBalancerIP
// other than the router's external IP. A Service that was served and becomes
// invalid has its own mappings removed by EnsureLoadBalancer and
// UpdateLoadBalancer (and by the background work, for a loadBalancerIP the
// external IP no longer matches), with the same error: ports the user asked
// to restrict must not stay open to every address. That costs one table
// read; a Service with no mapping of ours is otherwise left alone, and no
// other mapping is ever touched. Ports the router refuses (606 for ports
// outside its policy) fail with a *PortError carrying the router's answer.
//
// An api.RetryError is returned, joined to the error, when the situation is
// expected to resolve by itself, so that the service controller polls at a
// fixed delay instead of backing off: no eligible node yet, no ready
// endpoint yet, the background work's caches not synced yet or no node
// seen yet, this process's node not found on a secure-mode router (all after
// Config.RetryAfter), and a previous leader's mapping on a secure-mode
// router (after its remaining lease, at most five minutes). Router failures
// are returned as plain errors, so that the service controller backs off
// exponentially instead of polling a router that is down.
//
// Services not selected by Config.Services (AnnotatedServices without the
// annotation) get cloudprovider.ImplementedElsewhere, unwrapped, after their
// mappings, if any, have been removed: upstream calls Ensure, not Delete,
// when a Service opts out.
//
// # Status
//
// The status has one ingress: the router's external IP, with ipMode VIP and
// one PortStatus per port. VIP tells kube-proxy to route in-cluster traffic
// for the external IP and the Service's ports straight to the Service, so
// pods reach it even when the router does not hairpin NAT (many home routers
// do not); with Proxy, such traffic would have to leave through the router.
//
// # Concurrency
//
// All methods are safe for concurrent use. No lock is held across a router
// call. Operations on one Service are serialised; operations on different
// Services run in parallel. An external port is reserved in memory for the
// Service taking it before the router call, so of two Services racing for a
// port exactly one wins, even when both saw it free.
package loadbalancer
