package igdtest

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// Fixed lab addresses. They exist only inside the lab's namespaces.
var (
	routerLAN  = netip.MustParseAddr("192.0.2.1")
	externalIP = netip.MustParseAddr("198.51.101.7")
	internetIP = netip.MustParseAddr("198.51.101.99")
	// With Options.CGNAT: a shared address (RFC 6598, 100.64.0.0/10), as a
	// carrier NAT hands out, and the host beyond it on the same subnet.
	cgnatExternalIP = netip.MustParseAddr("100.64.0.7")
	cgnatInternetIP = netip.MustParseAddr("100.64.0.99")
	firstNode       = netip.MustParseAddr("192.0.2.10")
)

// maxNodes bounds Options.Nodes so node addresses stay inside 192.0.2.10–.99.
const maxNodes = 90

// nsPrefix starts the name of every namespace this package creates. CleanStale
// only ever touches names with this prefix.
const nsPrefix = "igdt"

// Bounds of the daemon's life cycle. miniupnpd answers within milliseconds of
// starting; the bounds only keep a broken lab from hanging a test. The start
// bound is wide because a test must not fail on a busy machine (two cores
// compiling beside it), where starting can take seconds; a stop that runs
// out only escalates to SIGKILL.
const (
	readyTimeout = 2 * time.Minute
	stopTimeout  = 5 * time.Second
)

// Options configures one lab. The zero value is one node and miniupnpd's
// defaults (secure mode off, IGD:2 description).
type Options struct {
	// SecureMode sets miniupnpd's secure_mode=yes: a client may map only to
	// its own address.
	SecureMode bool
	// ForceIGDv1 sets force_igd_desc_v1=yes: the root description is an
	// IGD:1 device whose only service is WANIPConnection:1.
	ForceIGDv1 bool
	// Nodes is the number of LAN node namespaces (192.0.2.10, .11, ...).
	// 0 means 1.
	Nodes int
	// ConsoleLog keeps the daemon's syslog on the machine's console, as the
	// shared lab recipe runs it. miniupnpd runs in the foreground (-d),
	// which turns on its debug log: a line per rule read, about two per
	// mapping on every request, even GetExternalIPAddress. With no syslog
	// daemon in the lab each line also goes to /dev/console, a 9600-baud
	// console here, at about 1.4 ms a line: at 10 mappings that is ~30 ms
	// added to every request, an artefact no router with a syslog daemon
	// has. By default the daemon therefore runs in a private mount
	// namespace whose /dev/console discards; its log still reaches Lab.Log
	// through stderr. Set ConsoleLog to measure under the recipe's cost.
	ConsoleLog bool
	// Daemonize runs miniupnpd as routers run it: without -d, so it forks
	// into the background and logs only notices (to a syslog the lab does
	// not have). In the foreground it logs at debug level, a line per rule
	// on every request, which makes each call cost time in proportion to
	// the table (about 30 ms at 400 mappings): measurements of how a
	// client's cost grows with the table need this. Log then stays empty,
	// and since the daemon is no longer this process's child, a test
	// process that dies without its cleanup leaves it running until
	// CleanStale finds its namespace.
	Daemonize bool

	// Permissions are miniupnpd permission lines ("allow|deny EXTPORTS
	// ADDR/MASK INTPORTS"), written verbatim in this order; the first line
	// a request matches decides, and a request no line matches is allowed.
	// nil means the lab's rules: allow 1024-65535 192.0.2.0/24 1024-65535,
	// then deny 0-65535 0.0.0.0/0 0-65535. An empty non-nil slice writes
	// none (everything allowed). A refused AddPortMapping gets 606.
	Permissions []string
	// CleanRulesetInterval sets clean_ruleset_interval, in whole seconds; 0
	// (the default) disables the check. miniupnpd means it to delete idle
	// mappings: at one check, if the table holds more than
	// CleanRulesetThreshold mappings, it notes each one's packet and byte
	// counters; at the next, it deletes those whose counters did not move
	// (upnpredirect.c, get_upnp_rules_state_list and remove_unused_rules;
	// it checks only when it wakes: a request, an SSDP packet or its 30 s
	// notify timer). The nftables backend of 2.3.1 never fills in the
	// counters it is asked for (netfilter_nft/nftnlrdr.c,
	// get_nat_redirect_rule; fixed in 2.3.10), so the comparison reads
	// uninitialised memory: in this lab nothing is ever deleted
	// (TestTableWipe).
	CleanRulesetInterval time.Duration
	// CleanRulesetThreshold sets clean_ruleset_threshold: the check above
	// does nothing while the table holds this many mappings or fewer. 0
	// means the daemon's default, 20.
	CleanRulesetThreshold int
	// DisableNATPMP writes enable_natpmp=no: nothing answers on UDP 5351.
	// By default NAT-PMP and PCP (one switch in 2.3.1) are on.
	DisableNATPMP bool
	// PCPAllowThirdParty sets pcp_allow_thirdparty=yes: a PCP MAP request
	// with the THIRD_PARTY option may map to another LAN host. secure_mode
	// does not govern PCP.
	PCPAllowThirdParty bool
	// IPv6Disable sets ipv6_disable=yes: the daemon opens no IPv6 sockets.
	IPv6Disable bool
	// MinLifetime and MaxLifetime set min_lifetime and max_lifetime, the
	// bounds PCP puts on a requested lifetime, in whole seconds. 0 means
	// the daemon's default (120 s and 86400 s). The daemon caps them at
	// those same values, so a larger one is an error here, and it refuses
	// to start unless MinLifetime < MaxLifetime. UPnP and NAT-PMP leases
	// are not bound by them.
	MinLifetime, MaxLifetime time.Duration
	// BitrateUp and BitrateDown set bitrate_up and bitrate_down, in bits
	// per second: what GetCommonLinkProperties reports as the link's
	// speeds. 0 leaves the daemon to read them from the interface.
	BitrateUp, BitrateDown int64
	// CGNAT puts the router behind a carrier NAT: its WAN address is
	// 100.64.0.7/24 (shared address space, RFC 6598) and the internet host
	// is 100.64.0.99 on that subnet; Lab.ExternalIP and Lab.InternetIP say
	// so. miniupnpd 2.3.1 starts all the same (no option is needed; ext_ip=
	// with a reserved address would make it refuse to start), logs
	// "Reserved / private IP address ... Port forwarding is impossible" and
	// disables port forwarding (miniupnpd.c, main). GetExternalIPAddress
	// then answers an empty NewExternalIPAddress (upnpsoap.c,
	// GetExternalIPAddress), NAT-PMP answers result 3, network failure
	// (natpmp.c, FillPublicAddressResponse), and an AddPortMapping the
	// permission rules allow fails with 501 ActionFailed
	// (upnpredirect.c, upnp_redirect_internal).
	CGNAT bool
	// IPv6 adds the IPv6 lab of lab6.go beside the IPv4 one: each node gets a
	// global address and a ULA, the router forwards IPv6 with a forward
	// policy of drop (only its miniupnpd chain opens the way in), and
	// miniupnpd serves WANIPv6FirewallControl:1 pinholes.
	IPv6 bool
}

// Bounds miniupnpd 2.3.1 puts on PCP lifetimes: larger values are silently
// capped at these, which are also its defaults.
const (
	maxMinLifetime = 120 * time.Second
	maxMaxLifetime = 86400 * time.Second
)

// validate returns an error naming the first field whose value the daemon
// cannot be given.
func (o Options) validate() error {
	if o.Nodes < 0 || o.Nodes > maxNodes {
		return fmt.Errorf("igdtest: Options.Nodes = %d, want 0..%d", o.Nodes, maxNodes)
	}
	for i, p := range o.Permissions {
		f := strings.Fields(p)
		if len(f) < 4 || (f[0] != "allow" && f[0] != "deny") || strings.ContainsAny(p, "\r\n") {
			return fmt.Errorf("igdtest: Options.Permissions[%d] = %q, want \"allow|deny EXTPORTS ADDR/MASK INTPORTS\" on one line", i, p)
		}
	}
	if o.CleanRulesetThreshold < 0 {
		return fmt.Errorf("igdtest: Options.CleanRulesetThreshold = %d, want >= 0", o.CleanRulesetThreshold)
	}
	if err := wholeSeconds("CleanRulesetInterval", o.CleanRulesetInterval, 0); err != nil {
		return err
	}
	if err := wholeSeconds("MinLifetime", o.MinLifetime, maxMinLifetime); err != nil {
		return err
	}
	if err := wholeSeconds("MaxLifetime", o.MaxLifetime, maxMaxLifetime); err != nil {
		return err
	}
	lo, hi := cmp.Or(o.MinLifetime, maxMinLifetime), cmp.Or(o.MaxLifetime, maxMaxLifetime)
	if lo >= hi {
		return fmt.Errorf("igdtest: Options.MinLifetime = %v must be less than Options.MaxLifetime = %v (0 means %v and %v)", lo, hi, maxMinLifetime, maxMaxLifetime)
	}
	if o.BitrateUp < 0 || o.BitrateDown < 0 {
		return fmt.Errorf("igdtest: Options.BitrateUp, BitrateDown = %d, %d, want >= 0", o.BitrateUp, o.BitrateDown)
	}
	return nil
}

// wholeSeconds checks a duration option: whole seconds, not negative, and at
// most max when max is not 0.
func wholeSeconds(field string, d, max time.Duration) error {
	switch {
	case d < 0 || d%time.Second != 0:
		return fmt.Errorf("igdtest: Options.%s = %v, want a non-negative whole number of seconds", field, d)
	case max > 0 && d > max:
		return fmt.Errorf("igdtest: Options.%s = %v, want at most %v (miniupnpd caps it there)", field, d, max)
	}
	return nil
}

// Lab is one running router with its LAN nodes and an internet host. Its
// exported fields are read-only.
type Lab struct {
	// RootDescURL is the router's root description,
	// "http://192.0.2.1:5000/rootDesc.xml". Reachable from the nodes only.
	RootDescURL string
	// RouterLAN is the router's LAN address, 192.0.2.1.
	RouterLAN netip.Addr
	// ExternalIP is the router's WAN address, 198.51.101.7 (100.64.0.7
	// with Options.CGNAT).
	ExternalIP netip.Addr
	// InternetIP is the address of the host on the WAN side, 198.51.101.99
	// (100.64.0.99 with Options.CGNAT).
	InternetIP netip.Addr
	// Nodes are the LAN hosts, in address order.
	Nodes []*Node
	// RouterNS is the name of the router's network namespace.
	RouterNS string
	// InternetNS is the name of the internet host's network namespace.
	InternetNS string
	// IPv6 holds the IPv6 addresses with Options.IPv6, and is nil without.
	IPv6 *IPv6

	options Options
	id      string // unique per Start call; part of every name
	dir     string // config, pid file and ruleset
	conf    string
	pidFile string
	tools   tools
	log     logBuffer

	mu sync.Mutex
	d  *daemon // the running miniupnpd, nil while stopped
}

// tools are the absolute paths of the programs a lab runs.
type tools struct {
	ip, nft, miniupnpd, upnpc, mount, sh string
}

var labCounter atomic.Uint64

// Start creates the namespaces (unique names per call), loads the nftables
// ruleset, starts miniupnpd with its own config and pid file, waits until the
// root description answers from the first node, and registers t.Cleanup to
// stop the daemon and delete the namespaces. Without root or without the
// programs it needs it calls t.Skip with the reason, except when CI=true,
// where it calls t.Fatal. Call it from the test's goroutine.
func Start(t testing.TB, opts Options) *Lab {
	t.Helper()
	tl := checkPrereqs(t)
	if err := opts.validate(); err != nil {
		t.Fatal(err)
	}
	n := cmp.Or(opts.Nodes, 1)

	var rnd [3]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		t.Fatalf("igdtest: random lab id: %v", err)
	}
	id := fmt.Sprintf("%s%d-%d-%s", nsPrefix, os.Getpid(), labCounter.Add(1), hex.EncodeToString(rnd[:]))
	dir := t.TempDir()
	l := &Lab{
		RootDescURL: "http://" + routerLAN.String() + ":5000/rootDesc.xml",
		RouterLAN:   routerLAN,
		ExternalIP:  externalIP,
		InternetIP:  internetIP,
		RouterNS:    id + "-r",
		InternetNS:  id + "-i",
		id:          id,
		dir:         dir,
		conf:        filepath.Join(dir, "miniupnpd-"+id+".conf"),
		pidFile:     filepath.Join(dir, "miniupnpd-"+id+".pid"),
		tools:       tl,
		options:     opts,
	}
	if opts.CGNAT {
		l.ExternalIP, l.InternetIP = cgnatExternalIP, cgnatInternetIP
	}
	addr := firstNode
	for i := range n {
		l.Nodes = append(l.Nodes, &Node{Name: fmt.Sprintf("%s-n%d", id, i), Addr: addr})
		addr = addr.Next()
	}

	// Registered before anything exists, so a failure half-way still removes
	// what was made. Cleanups run even when the test fails or panics.
	var created []string
	t.Cleanup(func() {
		if err := l.stop(); err != nil {
			t.Errorf("igdtest: cleanup: %v\nminiupnpd log:\n%s", err, l.Log())
		}
		for _, ns := range created {
			if err := l.run(context.Background(), l.tools.ip, "netns", "del", ns); err != nil {
				t.Errorf("igdtest: cleanup: %v", err)
			}
		}
	})
	for i, ns := range append([]string{l.RouterNS, l.InternetNS}, nodeNames(l.Nodes)...) {
		if err := l.run(context.Background(), l.tools.ip, "netns", "add", ns); err != nil {
			if i == 0 {
				skipOrFatal(t, "network namespaces", err.Error())
			}
			t.Fatalf("igdtest: %v", err)
		}
		created = append(created, ns)
	}
	if err := l.setUp(); err != nil {
		t.Fatalf("igdtest: set up lab %s: %v", id, err)
	}
	if err := l.startAndWait(); err != nil {
		t.Fatalf("igdtest: start miniupnpd in %s: %v\nminiupnpd log:\n%s", l.RouterNS, err, l.Log())
	}
	return l
}

func nodeNames(nodes []*Node) []string {
	names := make([]string, len(nodes))
	for i, n := range nodes {
		names[i] = n.Name
	}
	return names
}

// setUp wires the namespaces, loads the ruleset and writes the config.
//
// The router's LAN is a bridge lan0 (192.0.2.1/24) with one veth port per
// node; each node has eth0 on the other end. The WAN is a veth pair wan0
// (198.51.101.7/24) to inet0 (198.51.101.99/24) in the internet namespace.
// Every interface is created directly inside its namespace, so interface
// names never collide between labs. Neither the router nor the internet host
// has a default route: nothing can leave the lab.
func (l *Lab) setUp() error {
	ctx := context.Background()
	ip := func(ns string, args ...string) error {
		return l.run(ctx, l.tools.ip, append([]string{"-n", ns}, args...)...)
	}
	r, inet := l.RouterNS, l.InternetNS
	if l.options.IPv6 {
		// Before any interface exists, so that every one is made with it.
		if err := l.noDAD(); err != nil {
			return err
		}
	}
	steps := [][]string{
		{r, "link", "set", "lo", "up"},
		{r, "link", "add", "lan0", "type", "bridge"},
		{r, "addr", "add", routerLAN.String() + "/24", "dev", "lan0"},
		{r, "link", "set", "lan0", "up"},
		{r, "link", "add", "wan0", "type", "veth", "peer", "name", "inet0", "netns", inet},
		{r, "addr", "add", l.ExternalIP.String() + "/24", "dev", "wan0"},
		{r, "link", "set", "wan0", "up"},
		{inet, "link", "set", "lo", "up"},
		{inet, "addr", "add", l.InternetIP.String() + "/24", "dev", "inet0"},
		{inet, "link", "set", "inet0", "up"},
	}
	for i, n := range l.Nodes {
		port := fmt.Sprintf("lan0p%d", i)
		steps = append(steps,
			[]string{r, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", n.Name},
			[]string{r, "link", "set", port, "master", "lan0"},
			[]string{r, "link", "set", port, "up"},
			[]string{n.Name, "link", "set", "lo", "up"},
			[]string{n.Name, "addr", "add", n.Addr.String() + "/24", "dev", "eth0"},
			[]string{n.Name, "link", "set", "eth0", "up"},
			[]string{n.Name, "route", "add", "default", "via", routerLAN.String()},
		)
	}
	for _, s := range steps {
		if err := ip(s[0], s[1:]...); err != nil {
			return err
		}
	}
	if err := inNetns(r, func() error {
		return os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1\n"), 0o644)
	}); err != nil {
		return fmt.Errorf("enable ip_forward in %s: %w", r, err)
	}

	rs := ruleset
	if l.options.IPv6 {
		if err := l.setUpIPv6(); err != nil {
			return err
		}
		rs = ruleset6
	}
	rules := filepath.Join(l.dir, "ruleset-"+l.id+".nft")
	if err := os.WriteFile(rules, []byte(rs), 0o644); err != nil {
		return err
	}
	if err := l.run(ctx, l.tools.ip, "netns", "exec", r, l.tools.nft, "-f", rules); err != nil {
		return err
	}
	return os.WriteFile(l.conf, []byte(config(l.options)), 0o644)
}

// ruleset is the router's nftables ruleset: miniupnpd 2.3.1 (nftables)
// expects one inet table "filter" holding its chains, each jumped to from a
// base chain.
const ruleset = `table inet filter {
	chain forward { type filter hook forward priority 0; policy accept; jump miniupnpd; }
	chain miniupnpd { }
	chain prerouting { type nat hook prerouting priority -100; policy accept; jump prerouting_miniupnpd; }
	chain postrouting { type nat hook postrouting priority 100; policy accept; jump postrouting_miniupnpd; }
	chain prerouting_miniupnpd { }
	chain postrouting_miniupnpd { }
}
`

// defaultPermissions are the lab's permission lines when
// Options.Permissions is nil.
var defaultPermissions = []string{
	"allow 1024-65535 192.0.2.0/24 1024-65535",
	"deny 0-65535 0.0.0.0/0 0-65535",
}

// config renders miniupnpd.conf from validated options. No lease file is
// configured, like the measured setup: after a restart the table is read
// back from nftables.
func config(o Options) string {
	yesNo := func(b bool) string {
		if b {
			return "yes"
		}
		return "no"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "ext_ifname=wan0\nlistening_ip=lan0\nport=5000\n")
	fmt.Fprintf(&b, "enable_natpmp=%s\nenable_upnp=yes\n", yesNo(!o.DisableNATPMP))
	fmt.Fprintf(&b, "secure_mode=%s\n", yesNo(o.SecureMode))
	if o.ForceIGDv1 {
		fmt.Fprintf(&b, "force_igd_desc_v1=yes\n")
	}
	if o.PCPAllowThirdParty {
		fmt.Fprintf(&b, "pcp_allow_thirdparty=yes\n")
	}
	if o.IPv6Disable {
		fmt.Fprintf(&b, "ipv6_disable=yes\n")
	}
	if o.MinLifetime > 0 {
		fmt.Fprintf(&b, "min_lifetime=%d\n", o.MinLifetime/time.Second)
	}
	if o.MaxLifetime > 0 {
		fmt.Fprintf(&b, "max_lifetime=%d\n", o.MaxLifetime/time.Second)
	}
	if o.CleanRulesetThreshold > 0 {
		fmt.Fprintf(&b, "clean_ruleset_threshold=%d\n", o.CleanRulesetThreshold)
	}
	if o.CleanRulesetInterval > 0 {
		fmt.Fprintf(&b, "clean_ruleset_interval=%d\n", o.CleanRulesetInterval/time.Second)
	}
	if o.BitrateUp > 0 {
		fmt.Fprintf(&b, "bitrate_up=%d\n", o.BitrateUp)
	}
	if o.BitrateDown > 0 {
		fmt.Fprintf(&b, "bitrate_down=%d\n", o.BitrateDown)
	}
	fmt.Fprintf(&b, "system_uptime=yes\nuuid=3d3cec3a-8cf0-11e0-98ee-001a6bd2d07d\n")
	perms := o.Permissions
	if perms == nil {
		perms = defaultPermissions
	}
	for _, p := range perms {
		fmt.Fprintf(&b, "%s\n", p)
	}
	return b.String()
}

// run runs a program and returns an error holding its output when it fails.
func (l *Lab) run(ctx context.Context, name string, args ...string) error {
	_, err := l.output(ctx, name, args...)
	return err
}

// output runs a program and returns its stdout and stderr, and an error
// holding them when it fails.
func (l *Lab) output(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.WaitDelay = time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", filepath.Base(name), strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return string(out), nil
}

// Upnpc runs the upnpc peer client inside node i's namespace with
// -u RootDescURL and args, and returns its stdout and stderr. The error is
// non-nil when upnpc exits non-zero; note that upnpc exits 0 after many
// failed actions, so check the output too.
func (l *Lab) Upnpc(ctx context.Context, node int, args ...string) (string, error) {
	if node < 0 || node >= len(l.Nodes) {
		return "", fmt.Errorf("igdtest: upnpc: no node %d (lab has %d)", node, len(l.Nodes))
	}
	argv := append([]string{"netns", "exec", l.Nodes[node].Name, l.tools.upnpc, "-u", l.RootDescURL}, args...)
	cmd := exec.CommandContext(ctx, l.tools.ip, argv...)
	cmd.WaitDelay = time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("igdtest: upnpc %s on node %d: %w", strings.Join(args, " "), node, err)
	}
	return string(out), nil
}

// InternetGet makes an HTTP GET from the internet namespace (198.51.101.99)
// and returns the body. It returns an error for a status other than 2xx, with
// the body. The internet host has no default route, so only the router's WAN
// address (and its own) can be reached.
func (l *Lab) InternetGet(ctx context.Context, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", fmt.Errorf("igdtest: internet GET %s: %w", url, err)
	}
	resp, err := httpClientIn(l.InternetNS).Do(req)
	if err != nil {
		return "", fmt.Errorf("igdtest: internet GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return string(body), fmt.Errorf("igdtest: internet GET %s: read body: %w", url, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return string(body), fmt.Errorf("igdtest: internet GET %s: status %s", url, resp.Status)
	}
	return string(body), nil
}

// InternetDialContext dials from the internet namespace (198.51.101.99), for
// example to reach a mapped UDP port at ExternalIP. address must hold an IP
// literal. The internet host has no default route.
func (l *Lab) InternetDialContext(ctx context.Context, network, address string) (net.Conn, error) {
	return dialIn(ctx, l.InternetNS, network, address)
}

// Reboot simulates a router reboot: it stops miniupnpd, flushes its nftables
// chains (miniupnpd, prerouting_miniupnpd, postrouting_miniupnpd), starts it
// again and waits until it answers. Every mapping is gone afterwards.
func (l *Lab) Reboot(t testing.TB) {
	t.Helper()
	if err := l.stop(); err != nil {
		t.Fatalf("igdtest: reboot: %v\nminiupnpd log:\n%s", err, l.Log())
	}
	for _, chain := range []string{"miniupnpd", "prerouting_miniupnpd", "postrouting_miniupnpd"} {
		if err := l.run(context.Background(), l.tools.ip, "netns", "exec", l.RouterNS, l.tools.nft, "flush", "chain", "inet", "filter", chain); err != nil {
			t.Fatalf("igdtest: reboot: %v", err)
		}
	}
	if err := l.startAndWait(); err != nil {
		t.Fatalf("igdtest: reboot: %v\nminiupnpd log:\n%s", err, l.Log())
	}
}

// Restart stops and starts miniupnpd without flushing its chains: its table
// survives, and leases read back as 0.
func (l *Lab) Restart(t testing.TB) {
	t.Helper()
	if err := l.stop(); err != nil {
		t.Fatalf("igdtest: restart: %v\nminiupnpd log:\n%s", err, l.Log())
	}
	if err := l.startAndWait(); err != nil {
		t.Fatalf("igdtest: restart: %v\nminiupnpd log:\n%s", err, l.Log())
	}
}

// Nft runs nft with args inside the router namespace and returns its output,
// for example Nft(ctx, "list", "chain", "inet", "filter", "prerouting_miniupnpd").
func (l *Lab) Nft(ctx context.Context, args ...string) (string, error) {
	out, err := l.output(ctx, l.tools.ip, append([]string{"netns", "exec", l.RouterNS, l.tools.nft}, args...)...)
	if err != nil {
		return out, fmt.Errorf("igdtest: %w", err)
	}
	return out, nil
}

// ExecNode runs the program name with args inside node i's namespace (with
// `ip netns exec`) and returns its stdout and stderr. The error is non-nil
// when it exits non-zero, and then holds the output too.
func (l *Lab) ExecNode(ctx context.Context, node int, name string, args ...string) (string, error) {
	if node < 0 || node >= len(l.Nodes) {
		return "", fmt.Errorf("igdtest: exec %s: no node %d (lab has %d)", name, node, len(l.Nodes))
	}
	out, err := l.output(ctx, l.tools.ip, append([]string{"netns", "exec", l.Nodes[node].Name, name}, args...)...)
	if err != nil {
		return out, fmt.Errorf("igdtest: %w", err)
	}
	return out, nil
}

// Log returns what miniupnpd has written to stderr (and stdout) so far, over
// all its starts, for failure messages.
func (l *Lab) Log() string { return l.log.String() }

// PID returns the process id of the running miniupnpd, or 0 while it is
// stopped.
func (l *Lab) PID() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.d == nil {
		return 0
	}
	return l.d.pid
}

// daemon is one run of miniupnpd.
type daemon struct {
	pid  int
	proc *os.Process
	done chan struct{} // closed once the process has exited and been reaped
	err  error         // Wait's result; read only after done is closed
}

// startAndWait starts miniupnpd and waits until its root description
// answers from the first node.
func (l *Lab) startAndWait() error {
	d, err := l.start()
	if err != nil {
		return err
	}
	if err := l.waitReady(d); err != nil {
		return errors.Join(err, l.stop())
	}
	return nil
}

// start starts miniupnpd in the foreground in the router namespace.
//
// The process is started and waited for from one goroutine locked to its OS
// thread. That thread stays alive while the daemon runs, so the parent-death
// signal (which the kernel ties to the thread that forked) fires only when
// the test process itself dies: a crashed test leaves no daemon running.
func (l *Lab) start() (*daemon, error) {
	l.mu.Lock()
	running := l.d != nil
	l.mu.Unlock()
	if running {
		return nil, errors.New("miniupnpd already running")
	}
	// A pid file left by a killed instance would make the new one refuse to
	// start if its pid were reused.
	if err := os.Remove(l.pidFile); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	d := &daemon{done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer close(d.done)
		argv := []string{l.tools.ip, "netns", "exec", l.RouterNS,
			l.tools.miniupnpd, "-f", l.conf, "-d", "-P", l.pidFile}
		if l.options.Daemonize {
			argv = slices.DeleteFunc(argv, func(a string) bool { return a == "-d" })
		}
		attr := &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if !l.options.ConsoleLog {
			// A mount namespace of its own (Go makes it private before the
			// exec, so nothing propagates back), where /dev/console is
			// /dev/null; `ip netns exec` then copies it.
			attr.Unshareflags = syscall.CLONE_NEWNS
			argv = append([]string{l.tools.sh, "-c", `"$0" --bind /dev/null /dev/console && exec "$@"`, l.tools.mount}, argv...)
		}
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Stdout = &l.log
		cmd.Stderr = &l.log
		cmd.SysProcAttr = attr
		cmd.WaitDelay = stopTimeout
		if err := cmd.Start(); err != nil {
			started <- err
			runtime.UnlockOSThread()
			return
		}
		if l.options.Daemonize {
			// The command forks the daemon and exits; the daemon's pid is
			// in its pid file.
			if err := cmd.Wait(); err != nil {
				started <- fmt.Errorf("miniupnpd did not daemonize: %w", err)
				runtime.UnlockOSThread()
				return
			}
			runtime.UnlockOSThread()
			pid, err := waitPIDFile(l.pidFile)
			if err != nil {
				started <- err
				return
			}
			d.pid = pid
			d.proc, _ = os.FindProcess(pid) // never fails on Unix
			started <- nil
			for daemonRunning(pid) {
				time.Sleep(20 * time.Millisecond)
			}
			return
		}
		d.pid = cmd.Process.Pid
		d.proc = cmd.Process
		started <- nil
		d.err = cmd.Wait()
		// The child is reaped: the thread may be reused.
		runtime.UnlockOSThread()
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("start miniupnpd: %w", err)
	}
	l.mu.Lock()
	l.d = d
	l.mu.Unlock()
	return d, nil
}

// waitReady polls the root description from the first node until it answers,
// the daemon exits or readyTimeout passes.
func (l *Lab) waitReady(d *daemon) error {
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	client := l.Nodes[0].HTTPClient()
	var last error
	for {
		last = getRootDesc(ctx, client, l.RootDescURL)
		if last == nil {
			return nil
		}
		select {
		case <-d.done:
			return fmt.Errorf("miniupnpd exited before answering: %v", d.err)
		case <-ctx.Done():
			return fmt.Errorf("miniupnpd did not answer within %v: %w", readyTimeout, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func getRootDesc(ctx context.Context, c *http.Client, url string) error {
	// One attempt is short: a daemon that is not listening yet answers with
	// a refusal at once, and a retry follows.
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte("<root")) {
		return fmt.Errorf("GET %s: status %s", url, resp.Status)
	}
	return nil
}

// waitPIDFile waits up to readyTimeout for a daemonised miniupnpd to write
// its pid file, and returns the pid.
func waitPIDFile(path string) (int, error) {
	deadline := time.Now().Add(readyTimeout)
	for {
		b, err := os.ReadFile(path)
		if err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
				return pid, nil
			}
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("miniupnpd wrote no pid to %s within %v", path, readyTimeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// daemonRunning reports whether pid is a live process: not gone, and not a
// zombie waiting for its new parent to reap it.
func daemonRunning(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name in parentheses.
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] != 'Z' && b[i+2] != 'X'
}

// stop stops the running miniupnpd, if any: SIGTERM, repeated every 100 ms
// (miniupnpd can miss one that arrives just before it blocks in select), then
// SIGKILL after stopTimeout. It signals only the process this lab started.
func (l *Lab) stop() error {
	l.mu.Lock()
	d := l.d
	l.d = nil
	l.mu.Unlock()
	if d == nil {
		return nil
	}
	deadline := time.NewTimer(stopTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		// Signalling a reaped process is refused by os.Process, so the pid
		// cannot have been reused by then.
		if err := d.proc.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
			return fmt.Errorf("stop miniupnpd (pid %d): %w", d.pid, err)
		}
		select {
		case <-d.done:
			return nil
		case <-tick.C:
			continue
		case <-deadline.C:
		}
		break
	}
	if err := d.proc.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill miniupnpd (pid %d): %w", d.pid, err)
	}
	<-d.done
	return nil
}

// logBuffer collects the daemon's output; written by os/exec's copying
// goroutines, read by tests.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
