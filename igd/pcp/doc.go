// Package pcp writes a load balancer's port mappings on a home router
// through the Port Control Protocol (RFC 6887, MAP over IPv4), so that a
// mapping can be deleted only by its owner. Backend is the igd.GuardedClient
// a load balancer uses: AddFor and DeleteFor write an owner's mappings with
// a nonce derived from the owner and the key under a cluster secret (every
// replica derives the same one; no state is stored), OwnedBy proves from a
// read that a mapping is the owner's, and Mapped asks a router that cannot
// be read whether it still holds one. Pinholes opens and closes IPv6
// firewall pinholes (a MAP for an IPv6 address, no NAT) for any LAN host,
// under nonces derived the same way. Client talks to the router's PCP
// server, over IPv4 or IPv6, and tells of its restarts (Restarts,
// ListenAnnounce, EpochLost).
//
// Errors are igd's: a held port matches igd.ErrConflict, a port the
// router's rules refuse igd.ErrNotAuthorized, a refused THIRD_PARTY
// igd.ErrThirdPartyRefused, and every refusal the server answers
// igd.ErrRefused.
//
// # What the router enforces
//
// As miniupnpd 2.3.1 (Debian's build, nftables) does it for IPv4
// mappings; the lab tests pin each point. Pinholes states its own.
//
//   - A delete needs the nonce the mapping holds now: with another the
//     router refuses it and keeps the mapping. The router keeps the nonce
//     as the mapping's description ("PCP MAP " and the nonce in hex), which
//     UPnP clients can read.
//   - A mapping for another host (THIRD_PARTY) is refused unless the router
//     has pcp_allow_thirdparty=yes; a mapping for the client's own address
//     still works.
//   - Granted lifetimes are clamped to the router's [min_lifetime,
//     max_lifetime]: AddFor returns the lease granted.
//   - The exact external port is asked for (PREFER_FAILURE), but this
//     client enforces it, not the router: a router that grants another port
//     gets that mapping deleted again, and one on a later port to the same
//     internal address and port is lost
//     (TestLabPreferFailureTakesTheNextPortsMapping). One granted while the
//     answer is lost, or the process ends before the delete, stays at a
//     port no caller asked for until its lease ends.
//
// # What it does not enforce
//
//   - A MAP for the same internal address, port and protocol on the same
//     external port replaces the mapping whatever nonce it holds: the target
//     host itself, or with THIRD_PARTY allowed any LAN host, can take a
//     mapping over and then delete it.
//   - UPnP ignores nonces: DeletePortMapping removes a PCP mapping, and the
//     target host's AddPortMapping overwrites one.
//   - A daemon restart keeps the table and, with system_uptime=yes, the
//     epoch keeps counting: only the ANNOUNCE tells of it.
//
// So the nonce proves nothing about who holds a mapping now. A caller must
// still read the table before it trusts a mapping is its own (OwnedBy),
// renew rather than assume the router kept it, and re-map everything when
// Restarts fires.
package pcp
