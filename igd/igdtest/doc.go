// Package igdtest runs a real UPnP Internet Gateway Device for tests:
// miniupnpd 2.3.1 with its nftables backend, in network namespaces made for
// one test, so that clients exercise the real protocol and the real NAT data
// path. Import it from _test.go files only.
//
// # Topology
//
// Start creates, with `ip netns add`, namespaces whose names are unique per
// call (prefix "igdt", the test process id, a counter and random hex), so
// parallel tests and parallel test binaries never collide:
//
//	node 0..N-1  eth0 192.0.2.10/24, .11, ...; default route via 192.0.2.1
//	     |  (one veth per node, bridged)
//	router       lan0 (a bridge) 192.0.2.1/24, wan0 198.51.101.7/24, ip_forward=1,
//	     |       miniupnpd on port 5000, nftables table "inet filter"
//	internet     inet0 198.51.101.99/24 (no default route)
//
// Options.IPv6 adds IPv6 to the same namespaces (lab6.go): nodes with a
// global address 2001:db8:1::10+i and a ULA fd00:1::10+i, a router that
// forwards IPv6 with a forward policy of drop, so that the internet host
// (2001:db8:ff::99) reaches a node only through a pinhole miniupnpd opened
// (Lab.IPv6, Lab.InternetReaches, Node.DialContextFrom).
//
// The WAN address must look public to miniupnpd; 198.51.101.7 exists only
// inside the router namespace. Neither the router nor the internet host has
// a default route, so no lab packet can leave the namespaces.
//
// miniupnpd runs in the foreground (-d) with its own config and pid file in
// t.TempDir() and no lease file; Lab.Log returns its output. In the
// foreground it logs at debug level, and with no syslog daemon in the lab
// glibc copies every line to /dev/console, at about 1.4 ms a line here: that
// made each request cost ~3 ms per mapping in the table, whatever the
// request. The daemon therefore runs in a mount namespace of its own where
// /dev/console is /dev/null (Options.ConsoleLog restores the shared lab
// recipe's behaviour, for comparison). Start returns
// once the root description (Lab.RootDescURL) answers from the first node.
// t.Cleanup stops the daemon (only the process the lab started, by its pid)
// and deletes the namespaces, whether the test passed or not. The daemon also
// gets SIGKILL if the test process dies; CleanStale removes namespaces left
// by a test process that was killed before its cleanups ran.
//
// # Acting from inside the lab
//
// Node.Do runs a function on an OS thread switched into a node's namespace
// (setns on a locked thread, discarded afterwards); sockets created there stay
// in the namespace. Node.DialContext, Node.ListenPacket, Node.Listen and
// Node.HTTPClient are built on it and plug into clients with injectable
// dialers; Lab.ClientConfig is an igd.Config acting from a node. Lab.Upnpc runs the upnpc peer client on a node and Lab.ExecNode any
// program; Lab.InternetGet and Lab.InternetDialContext prove the data path
// from the WAN side; Lab.Nft inspects the router's ruleset; Lab.Reboot and
// Lab.Restart simulate a router reboot (table wiped) and a daemon restart
// (table kept, leases read back as 0).
//
// # Configuring the router
//
// Options set what miniupnpd.conf lets one set (secure mode, the IGD:1
// description, permission rules, clean_ruleset, NAT-PMP/PCP, PCP lifetimes,
// ipv6_disable, bitrates) and CGNAT moves the WAN onto a carrier NAT's
// shared address; the zero value is the lab described above. Invalid values
// fail the test with an error naming the field. OpenWrtDefault,
// HighPortsOnly, TableWipe and BehindCGNAT return Options emulating a router
// as shipped, each naming the vendor file its settings come from. What
// miniupnpd cannot be configured to do (accept only permanent leases, and
// on this nftables build, delete idle mappings) is the fake router's.
//
// # Prerequisites and the skip policy
//
// A lab needs root (network namespaces and nftables) and the programs ip
// (iproute2), nft (nftables), miniupnpd (the miniupnpd-nftables package),
// upnpc (miniupnpc), mount and sh. When something is missing, Start and
// Require skip the test with a message naming it ("igdtest: needs ...:
// missing ..."), except when the environment variable CI is "true": there
// the lab tests are mandatory, and the same message fails the test.
package igdtest
