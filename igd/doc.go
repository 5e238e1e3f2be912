// Package igd manages port mappings on a home or edge router, an Internet
// Gateway Device (IGD) spoken to over UPnP.
//
// Client is the small interface the load balancer and consumers' code depend
// on. Mapping is one entry of the router's table; Validate checks it before it
// is sent. Errors that come from the router are *UPnPError values that match
// the sentinels (ErrConflict, ErrNoSuchEntry, …) with errors.Is.
//
// # The UPnP client
//
// UPnPClient (NewClient) implements Client on github.com/huin/goupnp's
// generated service clients. NewClient does no I/O. The router is found by
// Discover, or lazily by the first call that needs it; the result is cached
// and reused until the router stops answering (a transport error or a call
// timeout, not a UPnP fault), after which the next call discovers again.
// Concurrent callers share one discovery in flight, each waiting only as long
// as its own context allows; the discovery is cancelled when the last of them
// gives up. After a discovery that found no router, calls return its error
// for Config.DiscoveryBackoff (5 s) instead of each searching again; Discover
// always searches. Every SOAP call and description fetch has its own bound
// (Config.CallTimeout) and goes through the configured HTTP client (never
// goupnp's global one). Mapping calls wait their turn: the client
// sends them to the router one at a time, since routers such as miniupnpd
// serve one request at a time.
//
// # Supported routers and service types
//
// The client speaks the three WAN connection services real routers expose:
//
//   - WANIPConnection:2 (IGD:2), for example miniupnpd 2.x, the daemon of
//     OpenWrt and many consumer routers. miniupnpd's IGD:2 description holds
//     only this service. Listing uses GetListOfPortMappings.
//   - WANIPConnection:1 (IGD:1), most consumer routers, and miniupnpd with
//     force_igd_desc_v1=yes.
//   - WANPPPConnection:1, routers that reach the internet over PPPoE (many
//     DSL routers expose only this one).
//
// It is tested against a real miniupnpd 2.3.1 in both its IGD:2 and IGD:1
// forms, and against captured descriptions of all three types.
//
// # How discovery chooses
//
// Discovery sends SSDP searches for the three service types from
// Config.ListenPacket (or, with Config.RootDescURL, fetches that one
// description and sends no search). For every router that answers it fetches
// the root description and asks each supported service for its status
// (GetStatusInfo) and external address (GetExternalIPAddress). An answer's
// LOCATION is followed only when its host is the answering host's own IP
// address written as one (never a name), and a service only when its control
// URL is on that address too; at most four locations are probed
// per answering host, and at most 16 from hosts other than the default
// gateway, whose answers are always probed. A service is rejected when it
// does not answer, has no valid external address, or says its WAN
// connection is anything but Connected.
// Among the others it prefers, in order: a Connected status over an unknown
// one, a public external address over a private or CGNAT one, the host's
// default gateway over any other router, and WANIPConnection:2 over :1 over
// WANPPPConnection:1; ties go to the lowest URL, never to whichever answered
// first. Discovery returns Config.SettleTime (100 ms) after the first usable
// answer rather than waiting out a fixed window, and at once when the
// default gateway offers what nothing can beat (connected, public,
// WANIPConnection:2, none of its locations still being probed): the choice
// would be the same after the window. Gateway.Reason says why the chosen
// one won; when none qualifies the error is a *NoGatewayError (matching
// ErrNoGateway) listing every candidate and why it was rejected.
//
// Every external address the client returns, at discovery and from each
// ExternalIP call, is an IPv4 host address: an answer that is empty,
// unparsable, unspecified, IPv6, loopback, multicast or broadcast gives an
// *ExternalIPError (matching ErrInvalidExternalIP). A router whose external
// address is private or CGNAT (Gateway.PublicExternalIP and IsPublic are
// false) is still used, but its mappings are not reachable from
// the internet: callers should tell the user.
//
// # Answer size caps
//
// Every answer the client reads is capped, through any Config.HTTPClient
// too: a root description at 1 MiB, a GetListOfPortMappings answer at 4 MiB
// (1000 entries), any other SOAP answer at 64 KiB, and an SSDP answer at
// 2 KiB (larger datagrams are ignored). An HTTP answer over its cap fails as
// soon as the cap is passed, or at once when its Content-Length says so,
// with an *answerTooLargeError (matching ErrAnswerTooLarge) naming the URL
// and the cap; it is never truncated, and the router stays cached.
//
// # Router quirks handled
//
// The README's "Router compatibility" table names the versions affected and
// the tests that prove each case.
//
//   - Leases: a router that answers 725 OnlyPermanentLeasesSupported (or 402
//     to a non-zero lease) gets the mapping again with lease 0, and the
//     returned Mapping says Lease 0. IGD:2 routers store lease 0 as MaxLease
//     (seven days): "permanent" mappings still need renewing.
//   - Deletes are idempotent: the spec's 714 for a missing mapping is success
//     (miniupnpd already answers OK).
//   - Listing reads WANIPConnection:2 tables with GetListOfPortMappings, one
//     protocol at a time, and walks the table with GetGenericPortMappingEntry
//     elsewhere or when the router refuses the call (401, 602, 402, 501:
//     ListPortMappings then fails with ErrNotSupported). A full answer (1000 entries, newest first on miniupnpd)
//     is read again in halves until every part fits. Both ways are bounded
//     by Config.MaxListEntries.
//   - miniupnpd up to 2.3.3 with nftables dies when one GetListOfPortMappings
//     range holds more than SafeListWidth (128) mappings of its protocol. On
//     a router whose Server header (Gateway.Server) names miniupnpd before
//     2.3.4, or no version, every range wider than SafeListWidth is listed
//     in parts that each hold at most 64 mappings as far as the
//     client knows (a size check, an entry walk, earlier listings, and its
//     own adds and deletes since, which wait while it lists a wide range).
//     Another host adding over 64 mappings in one range between two reads
//     can still crash it.
//   - A walk never skips rows silently: this client's adds and deletes wait
//     for it, and a table changed by others during it is walked again (up
//     to three times) or the walk fails. Changes that keep the table's size
//     and both ends go unnoticed.
//   - A Mapping read from a router may have InternalPort 0, "not said"
//     (miniupnpd 2.3.6 with nftables).
//   - Re-adds: on miniupnpd 2.3.1, AddPortMapping by the internal client
//     that holds the key, with the same internal port, only renews the
//     lease; the description stays the one first stored. With another
//     internal port it replaces the mapping, description included. To
//     change only the description, delete the mapping and add it again.
//   - goupnp's transport errors do not unwrap to the context's error; the
//     client wraps context.DeadlineExceeded or context.Canceled itself.
//
// # Host facts and network namespaces
//
// Discovery ranks by the host's default gateway and LocalAddr reports the
// host's address toward the router; both come from Config.Host (default
// SystemHost). SystemHost reads /proc/net/route, which shows the routes of
// the process's network namespace even from a thread switched into another
// one, so code that runs the client inside a namespace (through
// Config.DialContext and Config.ListenPacket) should also give it a HostInfo
// that knows that namespace's gateway.
package igd
