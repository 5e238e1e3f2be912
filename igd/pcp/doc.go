// Package pcp is a Port Control Protocol (RFC 6887) client for the MAP
// opcode over IPv4, for a load balancer that maps ports of several LAN
// hosts on the home router: Client.Map creates or renews a mapping (for
// another host with the THIRD_PARTY option), Client.Delete removes one,
// NonceFor derives the nonce that owns a mapping, and Client.Restarts
// reports when the router lost its state (epoch check, ANNOUNCE).
//
// Answers are decoded strictly: a datagram that is not version 2, not a
// MAP response, or whose nonce, protocol or internal port is not the
// request's is not the answer and is ignored. The one exception is a
// refusal of version 2 by an older server (ErrUnsupportedVersion).
//
// # What the router enforces (miniupnpd 2.3.1, read in pcpserver.c and
// seen in this package's lab tests)
//
//   - Delete needs the nonce that created the mapping: with another nonce
//     the router answers ErrNotAuthorized and keeps the mapping. The
//     router stores the nonce as the mapping's description,
//     "PCP MAP <24 hex digits>".
//   - PreferFailure makes MAP conditional on the external port: if another
//     internal address or port holds it, the router answers
//     ErrCannotProvideExternal and leaves that mapping alone; without it,
//     the router silently picks another port.
//   - THIRD_PARTY is refused (ErrUnsupportedOption) unless the router has
//     pcp_allow_thirdparty=yes; Map returns that error and does not fall
//     back. A mapping for the client's own address needs no option.
//   - Lifetimes are clamped to the router's [min_lifetime, max_lifetime]:
//     read MapResult.Lifetime.
//
// # What it does not enforce
//
//   - A MAP for the same internal address, port and protocol and the same
//     external port replaces the existing mapping whatever its nonce: any
//     LAN host (with THIRD_PARTY allowed, any host for any target) can take
//     over a mapping's nonce, after which the owner's Delete is refused.
//   - UPnP (AddPortMapping, DeletePortMapping) ignores nonces: a UPnP
//     client can delete or overwrite a PCP mapping.
//
// A caller must therefore still prove ownership itself: read the table
// (igd's UPnP client shows the description) before it trusts that a
// mapping is its own, and renew by MAP rather than assume the router kept
// what it was given.
package pcp
