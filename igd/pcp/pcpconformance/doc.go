// Package pcpconformance states, once, how a PCP (RFC 6887) server answers
// the MAP requests igd/pcp sends, and checks any server against it.
//
// The behaviour is miniupnpd 2.3.1's (Debian's build, nftables), as
// igd/pcp's design note records it: the nonce guards delete, THIRD_PARTY
// is refused unless allowed, lifetimes are clamped, PREFER_FAILURE yields to
// the CHECK_PORTINUSE skip (the client undoes it), a re-MAP of the same
// internal address and port takes the mapping over, and a restart is told
// by ANNOUNCE (and, where the epoch restarts with the daemon, by the epoch).
// Some cases send raw datagrams, built by the suite itself, to pin answers
// the client never provokes (unknown opcode or version, a short request,
// THIRD_PARTY naming the sender).
//
// Run6 holds a server to the same daemon's IPv6 pinholes (a MAP for an
// IPv6 address over IPv6): any port, THIRD_PARTY, the external address and
// port the internal ones, the nonce guarding the delete, leases that end,
// a reboot that closes them, and 2.3.1's renewal that takes any nonce and
// drops the pinhole's own (igd/pcp's design note).
//
// The project runs both against fake.PCPServer and, in the lab (igdtest),
// against a real miniupnpd:
//
//	func TestConformance(t *testing.T) {
//		pcpconformance.Run(t, pcpconformance.Backend{Start: startMyServer})
//	}
package pcpconformance
