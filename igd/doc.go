// Package igd manages port mappings on a home or edge router, an Internet
// Gateway Device (IGD) spoken to over UPnP.
//
// Client is the small interface the load balancer and consumers' code depend
// on; Lister is its optional capability to read a range of the table in one
// call, and ReadTable reads a whole table. A GuardedClient (igd/pcp.Backend)
// adds and deletes an owner's mappings through the router's guard; Reader,
// SelfOnlyReporter and MappedChecker are the other capabilities a client may
// declare, and ErrRefused, ErrPortUnavailable and ErrThirdPartyRefused the
// refusals a guarded client's errors match. Mapping is one entry of the
// router's table; Validate checks it before it is sent. Errors that come
// from the router are *UPnPError values that match the sentinels
// (ErrConflict, ErrNoSuchEntry, …) with errors.Is.
//
// # The UPnP client
//
// UPnPClient (NewClient) implements Client and Lister on
// github.com/huin/goupnp's generated service clients. NewClient does no I/O.
// The router is found by Discover, or lazily by the first call that needs
// it; the result is cached and reused until the router stops answering (a
// transport error or a call timeout, not a UPnP fault), after which the next
// call discovers again. Concurrent callers share one discovery in flight,
// each waiting only as long as its own context allows; the discovery is
// cancelled when the last of them gives up. After a discovery that found no
// router, calls return its error for Config.DiscoveryBackoff instead of each
// searching again; Discover always searches. Every SOAP call and description
// fetch has its own bound (Config.CallTimeout) and goes through the
// configured HTTP client (never goupnp's global one). Mapping calls go to
// the router one at a time.
//
// It speaks the three WAN connection services real routers expose:
// WANIPConnection:2 (IGD:2; the only one that lists with
// GetListOfPortMappings), WANIPConnection:1 (IGD:1) and WANPPPConnection:1
// (PPPoE routers).
//
// # How discovery chooses
//
// Discovery uses one router: the one the operator names, else this host's
// IPv4 default gateway. With Config.RootDescURL it fetches that description
// and sends no search. Otherwise it sends SSDP searches for the three
// service types from Config.ListenPacket and probes only the answers sent
// from Config.Router or, unset, from the default gateway (Config.Host): any
// other LAN host that answers, whatever it claims, is listed among the
// candidates, rejected, and sent no request. A host with no default route
// and no router named finds none, and the error lists what answered.
// Probing fetches the root description and asks each supported service for
// its status (GetStatusInfo) and external address (GetExternalIPAddress).
// An answer's LOCATION is followed only when its host is the answering
// host's own IP address written as one (never a name), and a service only
// when its control URL is on that address too; the router's answers are
// probed four at a time, up to 64 (any LAN host can send answers from its
// address; they delay its real answer, they do not shut it out). No HTTP
// redirect is followed. A service is rejected when it does not answer, has
// no valid external address, or says its WAN connection is anything but
// Connected. Among the router's others it prefers, in order: a Connected
// status over an unknown one, a public external address over a private or
// CGNAT one, and WANIPConnection:2 over :1 over WANPPPConnection:1; ties go
// to the lowest URL, never to whichever answered first. Discovery returns
// Config.SettleTime after the first usable answer, and at once when the
// router offers what nothing can beat. Gateway.Reason says which router was
// used and why, and why its service won; when none qualifies the error
// matches ErrNoGateway and lists every candidate and why it was rejected.
//
// Every external address the client returns, at discovery and from each
// ExternalIP call, is an IPv4 host address: an answer that is empty,
// unparsable, unspecified, IPv6, loopback, multicast or broadcast gives an
// error matching ErrInvalidExternalIP that quotes it. A router whose external
// address is private or CGNAT (Gateway.PublicExternalIP and IsPublic are
// false) is still used, but its mappings are not reachable from the
// internet: callers should tell the user.
//
// Every answer the client reads is capped, through any Config.HTTPClient
// too. An answer over its cap fails with an error matching ErrAnswerTooLarge
// naming the URL and the cap; it is never truncated, and the router stays
// cached.
//
// # Router quirks handled
//
//   - A router that takes only permanent leases gets the mapping again with
//     lease 0, and the returned Mapping says Lease 0. IGD:2 routers store
//     lease 0 as MaxLease: "permanent" mappings still need renewing.
//   - Deletes are idempotent.
//   - ListPortMappings returns every mapping of the range whatever order and
//     page size the router answers with; a router that refuses the call
//     gives ErrNotSupported, and ReadTable then walks the table entry by
//     entry. Both are bounded by Config.MaxListEntries.
//   - On a router whose daemon dies on long listings (Gateway.GuardedListing)
//     a range wider than 128 ports is listed only in parts the client
//     knows to be safe.
//   - A walk never skips rows silently: this client's adds and deletes wait
//     for it, and a table changed by others during it is walked again or the
//     walk fails.
//   - A Mapping read from a router may have InternalPort 0, "not said".
//   - Transport errors of a call whose context ended match
//     context.DeadlineExceeded or context.Canceled.
//
// Which routers need each of these, the numbers behind the bounds and the
// caps, and the residual risks are in DESIGN.md.
//
// # Host facts and network namespaces
//
// Discovery accepts the host's default gateway and LocalAddr reports the
// host's address toward the router; both come from Config.Host. The
// default reads /proc/net/route (the up IPv4 route to 0.0.0.0/0 through a
// gateway with the lowest metric), which shows the routes of the process's
// network namespace even from a thread switched into another one, so code that runs the client inside a namespace
// (through Config.DialContext and Config.ListenPacket) should also give it
// a HostInfo that knows that namespace's gateway.
package igd
