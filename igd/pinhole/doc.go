// Package pinhole opens IPv6 firewall pinholes on a home router through UPnP
// IGD:2's WANIPv6FirewallControl:1 service: the way in for a host with a
// global IPv6 address, where IPv4 port mapping has no public address to map
// (a carrier-grade NAT). A pinhole lets any remote host reach one internal
// address, port and protocol; there is no NAT, so the address the internet
// connects to is the internal host's own.
//
// UPnPClient.Add opens one and returns the router's UniqueID, Update renews
// it by that ID, Delete closes it (idempotent), and Packets proves that the
// router still holds it (ErrNoSuchPinhole when it does not). The service
// lists nothing: a client that lost an ID gets it back by adding the same
// pinhole again, which returns the same ID.
//
// # What the router enforces
//
// As miniupnpd 2.3.1 (Debian's build, nftables) does it; the lab tests pin
// each point and DESIGN.md tells what it gets wrong.
//
//   - A pinhole only to the caller's own address, as the router sees the
//     request's source: another host's address, a ULA or the same address
//     written differently are refused with igd.ErrNotAuthorized (606),
//     secure mode or not, and so is any request that arrives over IPv4 or
//     from another of the host's addresses. The client therefore sends from
//     Config.LocalAddr and refuses to send from any other address.
//   - Internal ports below 1024 are refused (606).
//   - Leases run from 1 s to 86400 s (402 outside); the router removes a
//     pinhole whose lease ended.
//   - Another host reading, renewing or deleting a pinhole by its ID gets
//     igd.ErrNotAuthorized, and the pinhole stays.
//   - A reboot loses every pinhole and numbers new ones from 1 again: an ID
//     held from before can name another pinhole of the same host, which
//     Update then renews. Renew with Add (one call too, and it returns the
//     pinhole's own ID); use Update only with an ID Add returned since
//     the router last restarted. A daemon restart keeps the pinholes and
//     their IDs in its firewall.
//
// # Finding the router
//
// goupnp's SSDP searches over IPv4, and a pinhole request must arrive over
// IPv6 from the host's global address. The client searches over IPv6
// (M-SEARCH to ff02::c for WANIPv6FirewallControl:1) and uses the control
// URL of the description the router answers with, which miniupnpd gives on
// its global LAN address; Config.RootDescURL names the description instead
// and sends no search. A control URL that is not an IPv6 literal is refused.
package pinhole
