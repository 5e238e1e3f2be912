// Package fake provides in-memory fakes for testing code built on ccmkit: a
// UPnP router (Router, with an igd.Client per LAN host and an optional real
// SOAP-over-HTTP Server in front of it) and a recording
// cloudprovider.LoadBalancer (LoadBalancer).
//
// The router fake follows miniupnpd 2.3.1, the daemon most home and edge
// routers run, as measured in the project's lab, and is held to the same
// behaviour suite (package igd/igdconformance) as the real client talking
// to a real miniupnpd. Where miniupnpd differs from the UPnP specification
// the fake follows miniupnpd:
//
//   - The table is keyed by (protocol, external port). Adding a key held by
//     another internal client fails with 718 (igd.ErrConflict). The same
//     internal client adding it again with the same internal port only
//     renews the lease: the description stays the one first set (the
//     specification would overwrite it) and the mapping keeps its place in
//     the listing. With another internal port the mapping is replaced
//     (internal port, description, lease) and lists as the newest.
//   - A lease of 0 ("permanent") or over 604800 s is stored as 604800 s
//     (igd.MaxLease), as IGD:2 requires and miniupnpd does: a permanent
//     mapping that is never renewed expires after seven days.
//     GetPortMapping reports the time left on the lease.
//   - Deleting a missing mapping succeeds (the specification says 714);
//     getting one fails with 714 (igd.ErrNoSuchEntry).
//   - In secure mode (RouterConfig.SecureMode) a host may only map to its own
//     address: anything else is 718 even on a free port (606 for
//     AddAnyPortMapping), and deleting another host's mapping is 606
//     (igd.ErrNotAuthorized).
//   - Listing returns the newest mapping first: entry by entry
//     (GetGenericPortMappingEntry, ending with 713) across both protocols,
//     and with GetListOfPortMappings one protocol at a time.
//   - Errors are *igd.UPnPError values with miniupnpd's codes and texts, so
//     errors.Is(err, igd.ErrConflict) and igd.Code(err) work; the Server sends
//     them as miniupnpd's SOAP fault bodies.
//
// What miniupnpd cannot show, the fake takes from the specification and from
// answers real routers are known to give: a full table (RouterConfig.Capacity,
// 728), routers that only take permanent leases
// (RouterConfig.OnlyPermanentLeases, 725; such a router keeps a lease of 0 as
// 0) and a non-public external address (RouterConfig.ExternalIP,
// Router.SetExternalIP).
//
// Leases expire on RouterConfig.Clock, so a test steps a
// k8s.io/utils/clock/testing.FakeClock instead of sleeping. Tests steer the
// router without forking it: Router.Intercept adds typed hooks, one field
// per operation (RouterHooks), that inject errors, delays and one-off answers,
// and fire alike for calls through a Client and through a Server (with Nth,
// Sleep and Hold for one-off, slow and held calls); Router.Reboot wipes the table; Router.Calls is a log of every call;
// Router.Put seeds mappings, for example another host's.
//
// PCPServer is a PCP (RFC 6887) MAP server on a real UDP socket, over a
// Router's table, with miniupnpd 2.3.1's semantics as igd/pcp's design note
// records them and package igd/pcp/pcpconformance holds it to (the same
// suite runs against the real daemon): the nonce guards delete
// (NOT_AUTHORIZED; NO_RESOURCES when nothing is there), THIRD_PARTY is
// refused unless PCPConfig.AllowThirdParty, lifetimes are clamped, a port
// another mapping holds is skipped even with PREFER_FAILURE, a re-MAP of the
// same internal address and port takes the mapping over, and every answer
// carries the epoch, which Restart, Reboot and ExternalAddressChanged reset
// (Restart keeps it with PCPConfig.SystemUptime, as the lab runs) and after
// which the server sends an ANNOUNCE to PCPServer.ListenAnnounce sockets
// and PCPConfig.AnnounceTo. Its mappings read through UPnP with
// PCPDescription(nonce). It decodes requests with its own code, not
// igd/pcp's. Over IPv6 (PCPConfig.Conn an IPv6 socket) a MAP for an IPv6
// address opens a pinhole in the Router's pinhole table, as miniupnpd
// 2.3.1's firewall path does, which package pcpconformance's Run6 holds it
// and the real daemon to: any port, THIRD_PARTY as for IPv4, the external
// address and port the internal ones, the nonce guarding the delete (a
// delete that finds nothing is SUCCESS); a MAP of an open pinhole renews
// it whatever its nonce and drops its description, so no delete is
// authorized after a renewal; Reboot closes them all; Router.Pinholes lists
// them with their description. The ANNOUNCE is sent over IPv4 only.
//
// A Server with an IGD:2 description also answers WANIPv6FirewallControl:1
// (IPv6 pinholes, at /ctl/IP6FCtl) with miniupnpd 2.3.1's rules, which
// package igd/pinhole/pinholeconformance holds it and the real daemon to:
// AddPinhole only to the caller's own address (ServerOptions.ClientAddr),
// compared as text with its canonical form, and only to ports of 1024 and
// above (606 otherwise); leases of 1 to 86400 s (402 otherwise), expiring
// on RouterConfig.Clock; the same UniqueID on re-add; UpdatePinhole,
// DeletePinhole and GetPinholePackets answer 402 for an unknown ID (the
// specification says 704) and 606 for another host's pinhole. Reboot
// wipes the pinholes and numbers new ones from 1 again; Router.Pinholes
// lists the open ones. Calls go through the SOAPAction hooks and are logged
// as MethodSOAPAction. NewServer6 serves it on the IPv6 loopback, where a
// pinhole client needs it, and DialAs lets that client act as a host's
// global address.
//
// All fakes are safe for concurrent use, guard their state with one mutex,
// and return copies from their accessors.
//
// # What the fakes do not model
//
// The router fake does not model:
//   - SSDP discovery (M-SEARCH and NOTIFY): a Server is found by its
//     RootDescURL only.
//   - The data path: no packet is forwarded; a mapping is only a table entry.
//   - miniupnpd's allow/deny rules in AddAnyPortMapping: only
//     AddPortMapping (606) and PCP MAP check RouterConfig.Permissions
//     (none given: every port and internal client is allowed).
//   - miniupnpd's refusal to map while its own external address is
//     non-public: the fake maps all the same, like routers that do not check.
//   - RemoteHost as part of the key: it is stored and returned, but a mapping
//     is identified by protocol and external port only.
//   - Disabled mappings (NewEnabled=0): every mapping is stored enabled.
//   - Description mangling: miniupnpd cuts or garbles descriptions over 63
//     bytes; the Client rejects them (igd.Mapping.Validate) and the Server
//     stores whatever it is sent.
//   - A daemon restart that keeps the table but forgets the leases
//     (miniupnpd then reports lease 0); Router.Put with Lease 0 seeds such a
//     mapping by hand.
//   - The time a rebooting router is unreachable: Reboot is instantaneous;
//     hooks (Router.Intercept) simulate the outage.
//   - Transport failures (refused connections, timeouts, truncated
//     answers) except through hooks.
//   - NAT-PMP (version 0) and PCP version 1: the PCPServer does not
//     answer them. PCP's PEER opcode: the fake answers UNSUPP_OPCODE,
//     where Debian's build (PCP_PEER) installs a peer mapping. Protocols
//     other than TCP and UDP (UNSUPP_PROTOCOL; miniupnpd would try them),
//     an IPv4 address over IPv6 or the reverse (NAT46, NAT64), ANNOUNCE
//     over IPv6 (ff02::1), the FILTER option (read and ignored),
//     miniupnpd's permission rules and its check of sockets open on the
//     router itself (only mappings make a port in use), the lease a
//     restarted daemon forgets, and the delay before a restarted daemon
//     answers.
//   - Of WANIPv6FirewallControl:1, anything but the four actions above
//     (GetFirewallStatus, GetOutboundPinholeTimeout, CheckPinholeWorking:
//     401), remote hosts and ports (ignored), protocols other than TCP and
//     UDP (402), a packet count (always 0, as miniupnpd 2.3.1's nftables
//     build reports), and pinholes through an in-memory Client (only a
//     Server answers them); the other services of
//     the description (Layer3Forwarding, WANCommonInterfaceConfig,
//     DeviceProtection); connection actions beyond the status queries
//     (RequestConnection, ForceTermination, SetConnectionType); service
//     descriptions (SCPD) and event subscriptions (404).
//   - The cost of a call growing with the table's size, and miniupnpd's
//     one-request-at-a-time HTTP server: the fake answers at once and
//     concurrently (use hooks to add delay).
//   - Authentication (DeviceProtection) and malformed HTTP.
//
// LoadBalancer does not model any cloud: it keeps one status per Service
// (namespace/name) with a single ingress IP, ignores ports, nodes and the
// cluster name except to record them, and never returns
// cloudprovider.ImplementedElsewhere or api.RetryError unless a hook
// (LoadBalancer.Intercept, in the same idiom as the Router's) answers so.
package fake
