// Package loadbalancer implements cloudprovider.LoadBalancer for clusters
// behind a NAT router: each port of a Service of type LoadBalancer becomes a
// UPnP IGD port mapping from the router's external address (external port =
// spec.ports[].port) to the port's nodePort on one node, and the Service's
// status reports the router's external IP with ipMode VIP and its ports.
//
// # Ownership, and how long a proof is trusted
//
// UPnP has no conditional write. What the router enforces by itself: an add
// toward another internal client than the key's holder fails (718); a
// delete, and an add from the same internal client, check nothing. So:
//
//   - A mapping is a Service's when its description ("ck1 <owner> <port>",
//     at most 63 bytes; GetLoadBalancerName returns the owner) names the
//     Service and it points at an address (InternalIP or ExternalIP) of a
//     node this process has seen.
//   - Every write of an operation rests on a read of the Service's own keys
//     (its spec's, its status's and those this process knows it holds) made
//     by that operation, under the Service's gate; a background pass serves
//     the Service as the API server has it then. A proof is trusted for one
//     Service's operation, never longer: a pass's listing of the whole table
//     (where the router lists) only says where to look.
//   - Mappings of other hosts, clusters and Services are never deleted or
//     written: their keys fail with a *PortError naming the holder.
//   - Of the served Services of a cluster that want one key, exactly one is
//     served it, the same in every process that sees them: the one whose
//     status records the port (written only by the controller), else the
//     older by creationTimestamp, else the first by namespace/name, then
//     UID. A Service that can be served nowhere (Local with no ready
//     endpoint on an eligible node) does not contend, even if its status
//     records the port, and a pass has its status say which ports it does
//     not hold (another's, or none). The
//     others get ErrPortInUse (a *PortError naming the winner in
//     Claimant) and are served when it gives the port up. Before taking a
//     key it does not hold, a Service lists the cluster's Services live and
//     takes it only as their winner; after its adds it lists them again and
//     gives up each key another Service now wins (one that came to want it
//     during the add); a mapping of the Service this process did not write,
//     at a key its status does not record, or whose add got no answer, is
//     confirmed so before it is kept. When that list fails, the keys are
//     given up but those the Service's status records (kept to confirm,
//     the operation retried). Of two processes of one cluster that both took a
//     key, each second list follows the other's want, so both name one
//     winner: they never both keep it. A key the router lost (a reboot, a
//     LAN host's DeletePortMapping) goes back to the Service whose status
//     records it. Limits: without Initialize only this process's Services
//     are arbitrated, by who takes the key first; and when the loser's add
//     replaced the winner's mapping on the router (two processes mapping
//     to one node through UPnP), the loser removes its own, and the
//     winner's process maps it again at its next probe. Clusters behind one
//     router map to different nodes, so the router's 718 arbitrates them;
//     they must use different --cluster-name values.
//   - A key is held from just before its add, with what was sent, until a
//     read shows otherwise (an add the router answers with a fault is read
//     back at once): an add whose reply was lost is found and removed later.
//     What was written stands only where a read shows it. A pass forgets the
//     Services gone from the API server without EnsureLoadBalancerDeleted.
//   - A mapping of ours with less than 5 s of lease left when its delete (or
//     rewrite) would be sent, counted from when the read was sent, is left
//     to expire and the operation retried (api.RetryError): a host may take
//     the key before a late delete lands.
//
// A read costs one listing per run of a protocol's keys at most
// igd.SafeListWidth ports wide where the client lists (igd.Lister), else one
// GetPortMapping per key: a call costs what the Service's ports cost, not
// what the table holds. A listing the router refuses (igd.ErrNotSupported,
// or any UPnP error: some answer 402 or 501) is replaced by the gets.
//
// # Through PCP (an igd.GuardedClient: igd/pcp.Backend)
//
// When Config.Client is an igd.GuardedClient the Service's own adds and
// deletes go through it, and everything above still holds: reads, and so
// every proof of ownership, are the client's (UPnP on pcp.Backend). A
// mapping is the Service's when its description is the router's rendering
// of the nonce derived from the owner token and key under the cluster's
// secret (or a description of ours, from before). What the router
// (miniupnpd 2.3.1) then enforces itself:
//
//   - A delete removes only the first mapping to the node's address and
//     nodePort, and only if it carries the Service's nonce (else
//     NOT_AUTHORIZED, reported as igd.ErrNotAuthorized): a delete sent late,
//     after our mapping expired and a LAN host took the key, removes
//     nothing. Another mapping to the same node and nodePort listed before
//     ours (a LAN host's, or the Service's own at another key: a port
//     moved, nodePorts swapped) makes the router refuse ours; the key is
//     then read again and, still ours and not about to expire, deleted
//     through UPnP on that proof (as without PCP).
//     A mapping whose internal port the router does not report (0:
//     miniupnpd 2.3.6) cannot be named in a PCP delete, and is deleted
//     through UPnP on the read's proof, as one made through UPnP; so is
//     one PCP made, with pcp.BackendConfig.FallBack, when the router does
//     not take the PCP delete.
//   - The router refuses a MAP at a key its mapping holds for another
//     internal port: when a Service's nodePort changes (or is not known:
//     a router that reports 0, after a restart), its mapping is deleted
//     and made again, as when it moves to another node.
//   - Another cluster (another secret) cannot delete our mappings over PCP;
//     a second process of this cluster (same secret) renews and deletes
//     them.
//
// What it does not, and ccmkit still proves: PREFER_FAILURE (pcp.Backend
// undoes the port the router gave instead, and reports the key taken);
// UPnP ignores nonces, so any LAN host's DeletePortMapping removes our
// mapping and a host that reads its description (the nonce) can delete it
// over PCP; a MAP for the same node and nodePort at the key replaces it
// whatever its nonce, and one the router moves to another port (see
// igd/pcp's PreferFailure) replaces a mapping to the same node and
// nodePort there too, before the undo deletes it; an undo whose answer is
// lost leaves a mapping nothing proves ours until its lease ends. A
// refused guarded delete (NOT_AUTHORIZED: another mapping to the same node
// and nodePort is listed first) is retried through the plain delete on a
// fresh read, as without a guard. Reads before writes, and the API
// server's arbitration, stay as they are.
//
// A GuardedClient that cannot read (an igd.Reader whose Reads is false:
// igd/pcp.Backend without UPnP) is written blind: what this process wrote
// stands in for the read, since every write is conditional or guarded by
// the router and so needs no proof (an add takes a key only where it is
// free or forwards to the same node and nodePort; a delete removes only the
// mapping to that node and nodePort carrying the Service's nonce). What
// changes:
//
//   - An add refused because the key holds a mapping deletes the
//     Service's own mappings at that key to the nodePort on every other
//     node address seen (one guarded delete each; a restart or a second
//     process may have mapped it elsewhere) and asks once more; then the
//     port is ErrPortInUse, its holder unnamed, unless the router's
//     permission rules refuse it (igd.ErrNotAuthorized from the backend:
//     ccmkit.io/NotAuthorized, as through UPnP). A key is swept so for one
//     nodePort at most once a lease (what a sweep finds was written before
//     it); a delete refused with UNSUPP_OPTION (THIRD_PARTY off) counts as
//     nothing there.
//   - A process that did not write a Service's mappings deletes them by
//     the same sweep, at the spec's nodePorts: when the Service is
//     withdrawn, and at a port Config.Admit refuses or another Service
//     wins; GetLoadBalancer answers from the Service's recorded status
//     (toward "exists").
//   - A key this process did not write is arbitrated like one the router
//     lost: after a restart or a fail-over, the Service whose status
//     records it keeps it (its add renews its own mapping), and another
//     that wants it waits.
//   - What it cannot find: a mapping of ours at a key, or to a nodePort,
//     no longer in the spec, or that points at a node address this process
//     has not seen, written by another process (or before a restart), is left to
//     its lease; so is one behind another host's mapping to the same node
//     and nodePort (the router's delete looks at the first), and one the
//     router moved to another port (ignoring PREFER_FAILURE) whose undo
//     got no answer. Until it expires, its key refuses the Service.
//   - Nothing reads the router, so nothing sees a restart but
//     Config.Announcer (and the epoch check of every answer, the NAT-PMP
//     answer that gives the external IP included): an announced restart,
//     or one the epoch of an answer shows, makes every mapping due for
//     renewal at once; an unannounced one is found by the next pass
//     (Config.RenewInterval) when Config.Announcer is the backend's
//     pcp.Client. A table the router loses without a restart (its epoch
//     goes on) shows nothing: each mapping comes back when it is next
//     written, at the latest at its renewal, within a lease.
//   - An add that got no answer (the router may or may not hold it) is
//     sent again by the next operation on the Service; a mapping it wrote
//     whose delete the router refuses (NOT_AUTHORIZED) is no longer renewed
//     and ends with its lease.
//
// # Nodes
//
// All of a Service's mappings target one eligible node (Ready, IPv4
// InternalIP, not excluded or being deleted; for externalTrafficPolicy
// Local, with a ready endpoint; on a secure-mode router, or through a
// client that says it maps only to this host (igd.SelfOnlyReporter, as
// igd/pcp.Backend does once the router refused THIRD_PARTY: the operation
// is then served again at once), the node this process runs on): the one
// they point at while it stays eligible, else the highest rendezvous hash
// of Service and node. Without an eligible node the Service keeps its
// mappings that still forward to its current nodePorts, loses the others,
// and gets an api.RetryError.
//
// # Background work
//
// The background work is in one of five phases: not started (no
// Initialize), initialized, syncing (Run waits for its caches), running,
// stopped (Run returned). GetLoadBalancer and EnsureLoadBalancerDeleted
// return an api.RetryError while initialized or syncing, and whenever no node
// has been seen: a Service's mappings are recognised by its nodes'
// addresses, and "none found" would let the service controller drop its
// finalizer over them. A Local Service waits likewise unless running, and
// is invalid only with no Initialize at all. EnsureLoadBalancerDeleted marks
// the Service deleted: passes leave it alone until an Ensure.
//
// Initialize and Run (provider.Cloud calls them) watch nodes, Services and
// EndpointSlices, through the CCM's informers when SetInformers gave them
// (cloudprovider.InformerUser), else through informers of their own. Every Config.ProbeInterval one router call reads a mapping
// this process wrote; when the router lost or changed it, every Service is
// served again at once. A router that announces its restart (Config.Announcer:
// the PCP ANNOUNCE miniupnpd multicasts when it starts) is served again as
// soon as it says so. Anyone on the LAN can send one: an announcement within
// 30 s (or Config.ProbeInterval when shorter) of the last announced repair
// is checked against the router (one mapping this process wrote, read again,
// or through a client that cannot read, asked after; with none, the
// router's epoch, when the Announcer can ask it) and repaired at once when
// the router lost it, else when that time ends. Every Config.RenewInterval, and when nodes or
// endpoints change, a pass serves every Service handed to it that carries
// Config.Finalizer: it renews leases, re-points, refreshes the external
// IP and patches statuses; a failed listing of the whole table (a hint of
// where forgotten mappings are) does not stop it. Without background work
// leases are not renewed.
//
// # Errors
//
// A Service that cannot be served (SCTP, no nodePort, IPv6-only, source
// ranges, a foreign loadBalancerIP, Local without background work) gets a
// *ServiceError naming the field and loses its own mappings. An external
// IP that is not IPv4, unspecified or not public (unless
// Config.AllowNonPublicExternalIP) is never reported, and the IP reported is
// asked of the router by each operation, never taken from a cache: ErrExternalIPNotUsable
// with an api.RetryError and a Warning event. A router's refusal of some
// of a Service's ports is reported per port (see PortErrorInUse); failing
// to reach the router, or refusing every port, is a plain error, so that
// the service controller backs off. All methods are safe
// for concurrent use; no lock is held across a router or API call.
// DESIGN.md beside this file has the rationale and the measurements.
//
// # Opt-in
//
// By default (Config.Services zero) only Services annotated
// AnnotationLoadBalancerType (or LegacyAnnotationLoadBalancerType) with
// AnnotationValue are served. Others get cloudprovider.ImplementedElsewhere,
// unwrapped, and once a Normal event saying how to opt in (sent as soon as
// the background work sees the Service, whether or not EnsureLoadBalancer is
// called for it); the router is not called for them unless their status or
// this process records ports where they may own mappings (they opted out),
// which they then lose. Serves tells a caller which Services are served, so
// that it puts its finalizer on those only (provider/lbclass does).
//
// # Admission
//
// Config.Admit, an operator's policy, and Config.MaxMappings, a cap on all
// Services' mappings, refuse ports per port (PortErrorNotAdmitted, the
// error naming the limit): a refused port is not mapped and loses the
// Service's mapping there, and does not count as the Service wanting it.
package loadbalancer
