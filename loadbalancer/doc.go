// Package loadbalancer implements cloudprovider.LoadBalancer for clusters
// behind a NAT router: each port of a Service of type LoadBalancer becomes a
// port mapping from the router's external address (external port =
// spec.ports[].port) to the port's nodePort on one eligible node, and the
// Service's status reports the router's external IP (ipMode VIP) and ports.
// IPv6 (Config.Pinholes): a firewall pinhole per port to one node's global
// address; one ingress per family of spec.ipFamilies served, in that order.
//
// # What is owned, and how it is proven
//
// A mapping is a Service's when it points at an address of a node this process
// has seen and its description names the Service ("ck1 <owner> <port>"), or,
// through PCP, carries the nonce derived from the Service and key under the
// cluster's secret; a pinhole, when this process opened it for the Service or
// the Service's status records it. The router checks nothing on a UPnP delete
// or on an add from the same internal client, and any LAN host can write any
// description, so every destructive write rests on a read of that key made by
// the same operation, under the Service's gate: a proof is trusted for one
// operation, never longer, and one with less than 5 s of lease left is left to
// expire. Others' mappings are never deleted or rewritten: their keys fail with
// a *PortError naming the holder.
//
// # The router modes, chosen once in New from what Config.Client declares
//
//   - Reading (UPnP IGD): the client reads (GetPortMapping, and listings where
//     the router offers them) and writes; every proof is a read.
//   - Guarded (igd.GuardedClient, UPnP reads): reads as above; PCP adds and
//     deletes, conditioned on the nonce and on the key being free or ours.
//   - Blind (PCP without UPnP): nothing reads; what this process wrote stands
//     in for the read; what it cannot find ends with its lease.
//
// # Lifecycle
//
// EnsureLoadBalancer and UpdateLoadBalancer run one pipeline per Service:
// select the Service, serve each family (plan its ports, prove what the router
// holds, write), report the status. EnsureLoadBalancerDeleted removes what is
// proven ours and marks the Service deleted. Initialize and Run (provider.Cloud
// calls them) watch nodes, Services and EndpointSlices and run the background
// work: every Config.RenewInterval a pass serves every Service again (renewing
// leases), every Config.ProbeInterval one read looks for a router that lost its
// table, and a router that announces a restart (PCP ANNOUNCE, confirmed against
// the router when it comes often) is repaired at once, pinholes too. Without
// background work leases are not renewed.
//
// # Promises
//
//   - Of the Services of a cluster that want one external port, exactly one is
//     served, the same in every process: the one whose status records the port,
//     else the older by creationTimestamp, then namespace/name, then UID; the
//     others get ErrPortInUse naming it until it gives the port up. A Service
//     that can be served nowhere does not contend.
//   - Only Services that opted in are served (Config.Services, the annotation,
//     Config.Class); Config.Admit and Config.MaxMappings refuse ports per port.
//     A Service that cannot be served gets a *ServiceError naming the field (a
//     family not served, a Warning); a router's refusal is reported per port.
//   - An external IP that is not public is never reported. All methods are safe
//     for concurrent use; no lock is held across a router or API call.
//
// DESIGN.md beside this file has every rule in full, with the reasons.
package loadbalancer
