// Package pcpwire is ccmkit's Port Control Protocol (RFC 6887) client for
// the MAP opcode at the wire level, over IPv4 (NAT mappings) or IPv6
// (firewall pinholes, no NAT), as the server's address is: the result codes, the
// sentinel errors and ResultError, and the raw Client.Map and Client.Delete.
// Client.Map creates or renews a mapping (for another host with the
// THIRD_PARTY option), Client.Delete removes one, NonceFor derives the nonce
// that owns a mapping, and Client.Restarts reports that the router lost its
// state (the epoch check of RFC 6887 §8.5 on every answer, and the ANNOUNCE
// messages Client.ListenAnnounce receives).
//
// igd/pcp is the public face: its Client is this Client (a defined type
// over it, so that ccmkit's own packages convert a *pcp.Client to a
// *Client to reach Map and Delete) with the methods a CCM author needs,
// and its Backend writes through Map and Delete. The fake PCP server, the
// conformance suite and routercheck use this package directly.
//
// Answers are decoded strictly: a datagram that is not version 2, not a
// MAP response, or whose nonce, protocol or internal port is not the
// request's is not the answer and is ignored. The one exception is an
// older server's refusal of version 2 (ErrUnsupportedVersion), which
// carries no nonce.
//
// # What the router enforces
//
// As miniupnpd 2.3.1 (Debian's build, nftables) does it; the lab tests pin
// each point.
//
//   - A delete needs the nonce the mapping holds now: with another nonce
//     the router answers ErrNotAuthorized and keeps the mapping. The router
//     keeps the nonce as the mapping's description, "PCP MAP " and the
//     nonce's three 32-bit words each printed as 8 hex digits in the
//     router's own byte order (so on a little-endian router the bytes of
//     each word read reversed: fake.PCPDescription), which UPnP clients
//     can read and which no client may take for the nonce's plain hex.
//   - THIRD_PARTY is refused (ErrUnsupportedOption) unless the router has
//     pcp_allow_thirdparty=yes. Map returns that error and does not fall
//     back; a mapping for the client's own address needs no option and
//     still works.
//   - Granted lifetimes are clamped to [min_lifetime, max_lifetime]: use
//     MapResult.Lifetime.
//   - A port its permission rules (miniupnpd.conf allow/deny lines) refuse
//     is answered ErrCannotProvideExternal by the server itself under
//     PreferFailure; without, the router maps the next port they allow.
//     pcp.Backend.AddFor reports that refusal as igd.ErrNotAuthorized, as UPnP
//     does (606), and a port another mapping holds as igd.ErrConflict.
//
// PreferFailure makes MAP conditional on the external port, but the client
// enforces it, not the router: when another mapping holds the port, this
// build grants another port with SUCCESS: the next one that is free or
// already forwards to the same internal address and port, whose mapping it
// then replaces whatever its nonce. Map deletes the mapping it was granted
// again and returns an error matching ErrCannotProvideExternal. The mapping
// at the requested port is never touched; one on a later port to the same
// internal address and port is lost (TestLabPreferFailureTakesTheNextPortsMapping),
// and if the undo's answer is lost, the mapping it made stays for its
// lifetime.
//
// # What it does not enforce
//
//   - A MAP for the same internal address, port and protocol on the same
//     external port replaces the mapping whatever nonce it holds, even with
//     PREFER_FAILURE: the target host itself, or with THIRD_PARTY allowed
//     any LAN host, can take a mapping over and then delete it, and the
//     owner's Delete is refused from then on.
//   - UPnP ignores nonces: DeletePortMapping removes a PCP mapping, and the
//     target host's AddPortMapping overwrites one.
//   - A daemon restart keeps the table and, with system_uptime=yes, the
//     epoch keeps counting: only the ANNOUNCE tells of it.
//
// Over IPv6 (a MAP for an IPv6 address: a firewall pinhole, the external
// address and port the internal ones, any port), the same daemon guards a
// delete with the nonce too, but renews an open pinhole for a MAP with any
// nonce and drops the pinhole's nonce when it does, so that no delete is
// authorized after a renewal (fixed in 2.3.6 and 2.3.8); a delete of a
// pinhole it does not hold is SUCCESS. igd/pcp's design note has the table.
//
// So the nonce proves nothing about who holds a mapping now. A caller must
// still read the table (the description names the nonce) before it trusts
// a mapping is its own, renew by MAP rather than assume the router kept it,
// and re-map everything when Restarts fires.
package pcpwire
