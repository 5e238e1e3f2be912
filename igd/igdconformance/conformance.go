package igdconformance

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/internal/igderr"
	"github.com/ccmkit/ccmkit/internal/upnp"
)

// Config is the router a case asks a Backend for.
type Config struct {
	// SecureMode asks for a router that lets a host map only to its own
	// address (miniupnpd secure_mode=yes). Only requested when
	// Backend.SupportsSecureMode is set.
	SecureMode bool
	// OnlyPermanentLeases asks for a router that answers 725 to every
	// non-zero lease. Fake only.
	OnlyPermanentLeases bool
	// Capacity asks for a table that holds at most this many mappings (728
	// beyond). Zero means unlimited. Fake only.
	Capacity int
	// ExternalIP asks for a router reporting this external address. The zero
	// value means the backend's default. Fake only.
	ExternalIP netip.Addr
}

// Router is one fresh router as a case sees it: two LAN hosts talking to it.
type Router struct {
	// A and B are clients acting from two different LAN hosts.
	A, B igd.Client
	// AddrA and AddrB are the hosts' addresses: what the router sees as the
	// caller, and what LocalAddr returns.
	AddrA, AddrB netip.Addr
	// ExternalIP is the address the router should report.
	ExternalIP netip.Addr
	// Reboot simulates a router reboot (power cycle: the table is lost). Nil
	// when the backend cannot reboot.
	Reboot func(t testing.TB)
	// Step advances the clock the router's leases run on. Nil when the router
	// runs on real time (then lease read-backs are checked with a few
	// seconds' slack).
	Step func(d time.Duration)
}

// Backend is a router implementation under test.
type Backend struct {
	// Start returns a fresh router with an empty table configured by cfg.
	// The suite calls it once per case, from the case's own t; Start
	// registers whatever cleanup it needs with t.Cleanup and fails (or
	// skips) t if it cannot start.
	Start func(t *testing.T, cfg Config) Router
	// SupportsSecureMode reports whether Start honours Config.SecureMode.
	SupportsSecureMode bool
	// CanReboot reports whether Router.Reboot is set.
	CanReboot bool
	// FakeOnly reports whether Start honours the fake-only Config fields
	// (OnlyPermanentLeases, Capacity, ExternalIP) and sets Router.Step:
	// behaviour miniupnpd cannot show, taken from the specification and
	// from answers real routers are known to give.
	FakeOnly bool
	// ListServiceType is the service type the backend's router lists its
	// table with, for the case names' and failure messages' benefit only
	// (for example "WANIPConnection:2", which has GetListOfPortMappings).
	// Empty means unknown.
	ListServiceType string
}

// CallTimeout bounds each client call the suite makes. miniupnpd answers in
// milliseconds with small tables; the bound only stops a hung backend from
// hanging the test binary.
const CallTimeout = 10 * time.Second

// leaseSlack is how far a lease read back from a real-time router may be
// below the lease asked for: the router reports the time left, and a second
// boundary or two pass between the add and the read.
const leaseSlack = 5 * time.Second

// Ports the cases use. miniupnpd's lab configuration allows 1024-65535.
const (
	portA = 40001
	portB = 40002
	portC = 40003
)

type testCase struct {
	name string
	cfg  Config
	// needs says what the backend must support; empty means everything
	// does.
	secure, reboot, fakeOnly bool
	run                      func(t *testing.T, r Router)
}

// Run runs every case of the suite that b supports, each as a subtest with
// its own router from b.Start. Unsupported cases are skipped with the
// reason.
func Run(t *testing.T, b Backend) {
	t.Helper()
	if b.Start == nil {
		t.Fatal("igdconformance: Backend.Start is nil")
	}
	for _, tc := range cases() {
		t.Run(tc.name, func(t *testing.T) {
			switch {
			case tc.secure && !b.SupportsSecureMode:
				t.Skip("backend does not support secure mode")
			case tc.reboot && !b.CanReboot:
				t.Skip("backend cannot reboot the router")
			case tc.fakeOnly && !b.FakeOnly:
				t.Skip("fake only: miniupnpd cannot show this behaviour")
			}
			r := b.Start(t, tc.cfg)
			if tc.reboot && r.Reboot == nil {
				t.Fatal("igdconformance: Backend.CanReboot is set but Router.Reboot is nil")
			}
			if tc.fakeOnly && r.Step == nil {
				t.Fatal("igdconformance: Backend.FakeOnly is set but Router.Step is nil")
			}
			if b.ListServiceType != "" {
				t.Logf("router lists with %s", b.ListServiceType)
			}
			tc.run(t, r)
		})
	}
}

func cases() []testCase {
	return []testCase{
		{name: "ExternalIP", run: testExternalIP},
		{name: "LocalAddr", run: testLocalAddr},
		{name: "AddGetListDelete", run: testAddGetListDelete},
		{name: "ProtocolsAreSeparateKeys", run: testProtocolsSeparate},
		{name: "ReAddOtherInternalPortReplaces", run: testReAddReplaces},
		{name: "ReAddSameInternalPortRenewsLeaseOnly", run: testReAddSameInternalPort},
		{name: "ListNewestFirstPerProtocol", run: testListOrder},
		{name: "ConflictWithAnotherClient", run: testConflict},
		{name: "MapToAnotherHost", run: testMapToAnotherHost},
		{name: "DeleteAnotherHostsMapping", run: testDeleteOthers},
		{name: "DeleteMissingSucceeds", run: testDeleteMissing},
		{name: "GetMissingIs714", run: testGetMissing},
		{name: "LeaseZeroStoredAsMaxLease", run: testLeaseZero},
		{name: "LeaseOverMaxStoredAsMaxLease", run: testLeaseOverMax},
		{name: "FiniteLeaseReadsBackTimeLeft", run: testFiniteLease},
		{name: "Descriptions", run: testDescriptions},
		{name: "InvalidInputRejected", run: testInvalidInput},
		{name: "ListManyFromTwoHosts", run: testListMany},
		{name: "ConcurrentAdds", run: testConcurrentAdds},
		{name: "SecureMode/MapOtherHostIs718", cfg: Config{SecureMode: true}, secure: true, run: testSecureMapOther},
		{name: "SecureMode/OwnMappingsWork", cfg: Config{SecureMode: true}, secure: true, run: testSecureOwn},
		{name: "SecureMode/DeleteOtherHostsIs606", cfg: Config{SecureMode: true}, secure: true, run: testSecureDeleteOther},
		{name: "SecureMode/ConflictIs718", cfg: Config{SecureMode: true}, secure: true, run: testSecureConflict},
		{name: "RebootWipesTable", reboot: true, run: testReboot},
		{name: "LeaseExpiry", run: testLeaseExpiry},
		{name: "FakeOnly/OnlyPermanentLeases725", cfg: Config{OnlyPermanentLeases: true}, fakeOnly: true, run: testOnlyPermanent},
		{name: "FakeOnly/TableFull728", cfg: Config{Capacity: 2}, fakeOnly: true, run: testCapacity},
		{name: "FakeOnly/NonPublicExternalIP", cfg: Config{ExternalIP: netip.MustParseAddr("100.64.7.9")}, fakeOnly: true, run: testNonPublicExternalIP},
	}
}

// ctx returns a context for one client call, cancelled at the end of the
// test, whose logger writes to t (shown only for failed tests).
func ctx(t *testing.T) context.Context {
	t.Helper()
	logger, _ := ktesting.NewTestContext(t)
	c, cancel := context.WithTimeout(klog.NewContext(t.Context(), logger), CallTimeout)
	t.Cleanup(cancel)
	return c
}

func mapping(proto igd.Protocol, ext uint16, client netip.Addr, internal uint16, desc string, lease time.Duration) igd.Mapping {
	return igd.Mapping{Protocol: proto, ExternalPort: ext, InternalClient: client, InternalPort: internal, Description: desc, Lease: lease, Enabled: true}
}

func mustAdd(t *testing.T, c igd.Client, m igd.Mapping) igd.Mapping {
	t.Helper()
	got, err := c.AddPortMapping(ctx(t), m)
	if err != nil {
		t.Fatalf("AddPortMapping(%s): %v", m, err)
	}
	return got
}

func mustGet(t *testing.T, c igd.Client, k igd.Key) igd.Mapping {
	t.Helper()
	got, err := c.GetPortMapping(ctx(t), k.Protocol, k.ExternalPort)
	if err != nil {
		t.Fatalf("GetPortMapping(%s): %v", k, err)
	}
	return got
}

func mustDelete(t *testing.T, c igd.Client, k igd.Key) {
	t.Helper()
	if err := c.DeletePortMapping(ctx(t), k.Protocol, k.ExternalPort); err != nil {
		t.Fatalf("DeletePortMapping(%s): %v", k, err)
	}
}

func mustList(t *testing.T, c igd.Client) []igd.Mapping {
	t.Helper()
	got, err := igd.ReadTable(ctx(t), c)
	if err != nil {
		t.Fatalf("ListPortMappings: %v", err)
	}
	return got
}

// wantGone checks that k is not in the table: Get gives 714 and List does
// not hold it.
func wantGone(t *testing.T, r Router, k igd.Key) {
	t.Helper()
	_, err := r.A.GetPortMapping(ctx(t), k.Protocol, k.ExternalPort)
	wantCode(t, "GetPortMapping("+k.String()+")", err, igd.ErrNoSuchEntry, upnp.CodeNoSuchEntry)
	for _, m := range mustList(t, r.A) {
		if m.Key() == k {
			t.Errorf("ListPortMappings holds %s, want it gone", m)
		}
	}
}

// errorTexts are miniupnpd 2.3.1's errorDescription for the codes the suite
// expects (those of 725 and 728 from its source, as it never sends them in
// the lab). A router's text is only for people, but the fakes promise
// miniupnpd's.
var errorTexts = map[int]string{
	upnp.CodeNotAuthorized:       "Action not authorized",
	upnp.CodeNoSuchEntry:         "NoSuchEntryInArray",
	upnp.CodeConflict:            "ConflictInMappingEntry",
	upnp.CodeOnlyPermanentLeases: "OnlyPermanentLeasesSupported",
	upnp.CodeNoPortMapsAvailable: "NoPortMapsAvailable",
}

// wantCode checks that err matches sentinel and is a *igd.UPnPError with
// UPnP code and miniupnpd's text for it.
func wantCode(t *testing.T, what string, err, sentinel error, code int) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: got no error, want %v", what, sentinel)
		return
	}
	if !errors.Is(err, sentinel) {
		t.Errorf("%s: error %v does not match %v", what, err, sentinel)
	}
	var ue *igd.UPnPError
	if !errors.As(err, &ue) {
		t.Errorf("%s: error %v is not a *igd.UPnPError", what, err)
		return
	}
	if ue.Code != code {
		t.Errorf("%s: UPnP error code %d, want %d (err: %v)", what, ue.Code, code, err)
	}
	if want, ok := errorTexts[code]; ok && ue.Description != want {
		t.Errorf("%s: UPnP error text %q, want miniupnpd's %q", what, ue.Description, want)
	}
}

// wantLease checks a lease read back: exact when the router runs on a
// controlled clock, within leaseSlack below want on real time.
func wantLease(t *testing.T, r Router, what string, got, want time.Duration) {
	t.Helper()
	if r.Step != nil {
		if got != want {
			t.Errorf("%s: lease %s, want %s", what, got, want)
		}
		return
	}
	if got > want || got < want-leaseSlack {
		t.Errorf("%s: lease %s, want %s (at most %s less)", what, got, want, leaseSlack)
	}
}

// sameMapping compares everything but Lease (checked with wantLease) and
// Enabled (true from every router here).
func sameMapping(t *testing.T, what string, got, want igd.Mapping) {
	t.Helper()
	got.Lease, want.Lease = 0, 0
	if got != want {
		t.Errorf("%s:\n got  %s (enabled %v, remote %v)\n want %s (enabled %v, remote %v)", what, got, got.Enabled, got.RemoteHost, want, want.Enabled, want.RemoteHost)
	}
}

func sortMappings(ms []igd.Mapping) {
	slices.SortFunc(ms, func(a, b igd.Mapping) int {
		return cmp.Or(cmp.Compare(a.Protocol, b.Protocol), cmp.Compare(a.ExternalPort, b.ExternalPort))
	})
}

// wantTable checks that the table holds exactly want (leases not compared).
func wantTable(t *testing.T, c igd.Client, want ...igd.Mapping) {
	t.Helper()
	got := mustList(t, c)
	sortMappings(got)
	want = slices.Clone(want)
	sortMappings(want)
	if len(got) != len(want) {
		t.Errorf("ListPortMappings returned %d mappings, want %d:\n got  %v\n want %v", len(got), len(want), got, want)
		return
	}
	for i := range got {
		sameMapping(t, fmt.Sprintf("ListPortMappings[%d]", i), got[i], want[i])
	}
}

func testExternalIP(t *testing.T, r Router) {
	got, err := r.A.ExternalIP(ctx(t))
	if err != nil {
		t.Fatalf("ExternalIP: %v", err)
	}
	if got != r.ExternalIP {
		t.Errorf("ExternalIP = %s, want %s", got, r.ExternalIP)
	}
}

func testLocalAddr(t *testing.T, r Router) {
	for _, h := range []struct {
		name string
		c    igd.Client
		want netip.Addr
	}{{"A", r.A, r.AddrA}, {"B", r.B, r.AddrB}} {
		got, err := h.c.LocalAddr(ctx(t))
		if err != nil {
			t.Fatalf("%s.LocalAddr: %v", h.name, err)
		}
		if got != h.want {
			t.Errorf("%s.LocalAddr = %s, want %s", h.name, got, h.want)
		}
	}
}

func testAddGetListDelete(t *testing.T, r Router) {
	for _, proto := range []igd.Protocol{igd.TCP, igd.UDP} {
		t.Run(string(proto), func(t *testing.T) {
			m := mapping(proto, portA, r.AddrA, 30080, "ccmkit conformance", time.Hour)
			got := mustAdd(t, r.A, m)
			sameMapping(t, "AddPortMapping result", got, m)

			read := mustGet(t, r.A, m.Key())
			sameMapping(t, "GetPortMapping", read, m)
			wantLease(t, r, "GetPortMapping", read.Lease, time.Hour)

			// The other host sees the same table.
			sameMapping(t, "GetPortMapping from B", mustGet(t, r.B, m.Key()), m)
			wantTable(t, r.B, m)

			mustDelete(t, r.A, m.Key())
			wantGone(t, r, m.Key())
			wantTable(t, r.B)
		})
	}
}

func testProtocolsSeparate(t *testing.T, r Router) {
	tcp := mapping(igd.TCP, portA, r.AddrA, 30080, "tcp", time.Hour)
	udp := mapping(igd.UDP, portA, r.AddrB, 30081, "udp", time.Hour)
	mustAdd(t, r.A, tcp)
	// Same external port, other protocol, other host: no conflict.
	mustAdd(t, r.B, udp)
	wantTable(t, r.A, tcp, udp)
	mustDelete(t, r.A, tcp.Key())
	wantTable(t, r.A, udp)
	sameMapping(t, "GetPortMapping UDP", mustGet(t, r.A, udp.Key()), udp)
}

func testReAddReplaces(t *testing.T, r Router) {
	// A re-add with another internal port replaces internal port,
	// description and lease.
	first := mapping(igd.TCP, portA, r.AddrA, 30080, "first", time.Hour)
	mustAdd(t, r.A, first)
	second := mapping(igd.TCP, portA, r.AddrA, 30090, "second", 2*time.Hour)
	got := mustAdd(t, r.A, second)
	sameMapping(t, "AddPortMapping result", got, second)
	read := mustGet(t, r.A, second.Key())
	sameMapping(t, "GetPortMapping after re-add", read, second)
	wantLease(t, r, "GetPortMapping after re-add", read.Lease, 2*time.Hour)
	wantTable(t, r.A, second)
}

func testReAddSameInternalPort(t *testing.T, r Router) {
	// The specification has a re-add by the same internal client overwrite
	// the entry. miniupnpd 2.3.1, re-added with the same internal port, only
	// renews the lease: the description stays the first one. (With another
	// internal port it replaces the mapping: testReAddReplaces.)
	first := mapping(igd.TCP, portA, r.AddrA, 30080, "first", time.Hour)
	mustAdd(t, r.A, first)
	again := mapping(igd.TCP, portA, r.AddrA, 30080, "second", 2*time.Hour)
	got := mustAdd(t, r.A, again)
	sameMapping(t, "AddPortMapping result (the mapping as sent)", got, again)
	read := mustGet(t, r.A, first.Key())
	sameMapping(t, "GetPortMapping after a re-add with the same internal port", read, first)
	wantLease(t, r, "GetPortMapping after a re-add with the same internal port", read.Lease, 2*time.Hour)
}

func testListOrder(t *testing.T, r Router) {
	// miniupnpd lists newest first: entry by entry across both protocols,
	// and with GetListOfPortMappings one protocol at a time. So within a
	// protocol, every backend lists newest first; the order between the
	// protocols depends on how the table is read. A renewal (same internal
	// port) keeps a mapping's place; a replacement (another internal port)
	// makes it the newest.
	add := func(c igd.Client, m igd.Mapping) igd.Mapping { mustAdd(t, c, m); return m }
	t1 := add(r.A, mapping(igd.TCP, portA, r.AddrA, 30080, "t1", time.Hour))
	t3 := add(r.A, mapping(igd.TCP, portC, r.AddrA, 30080, "t3", time.Hour))
	u2 := add(r.B, mapping(igd.UDP, portB, r.AddrB, 30080, "u2", time.Hour))
	t2 := add(r.B, mapping(igd.TCP, portB, r.AddrB, 30080, "t2", time.Hour))
	mustAdd(t, r.A, t1) // renewed: stays the oldest
	t3.InternalPort = 30081
	mustAdd(t, r.A, t3) // replaced: now the newest
	got := mustList(t, r.A)
	for _, proto := range []igd.Protocol{igd.TCP, igd.UDP} {
		var keys, want []string
		for _, m := range got {
			if m.Protocol == proto {
				keys = append(keys, fmt.Sprintf("%s %q", m.Key(), m.Description))
			}
		}
		for _, m := range map[igd.Protocol][]igd.Mapping{igd.TCP: {t3, t2, t1}, igd.UDP: {u2}}[proto] {
			want = append(want, fmt.Sprintf("%s %q", m.Key(), m.Description))
		}
		if !slices.Equal(keys, want) {
			t.Errorf("ListPortMappings lists %s as %v, want newest first %v", proto, keys, want)
		}
	}
}

func testConflict(t *testing.T, r Router) {
	mine := mapping(igd.TCP, portA, r.AddrA, 30080, "A", time.Hour)
	mustAdd(t, r.A, mine)
	theirs := mapping(igd.TCP, portA, r.AddrB, 30080, "B", time.Hour)
	_, err := r.B.AddPortMapping(ctx(t), theirs)
	wantCode(t, "B re-adding A's key", err, igd.ErrConflict, upnp.CodeConflict)
	// A's mapping is untouched.
	sameMapping(t, "GetPortMapping after conflict", mustGet(t, r.A, mine.Key()), mine)
	wantTable(t, r.A, mine)
}

func testMapToAnotherHost(t *testing.T, r Router) {
	// Outside secure mode, ownership is the internal client, not the caller:
	// B may map to A, and A then updates that mapping as its own.
	m := mapping(igd.TCP, portA, r.AddrA, 30080, "made by B", time.Hour)
	mustAdd(t, r.B, m)
	sameMapping(t, "GetPortMapping", mustGet(t, r.A, m.Key()), m)
	upd := mapping(igd.TCP, portA, r.AddrA, 30081, "updated by A", time.Hour)
	mustAdd(t, r.A, upd)
	wantTable(t, r.A, upd)
}

func testDeleteOthers(t *testing.T, r Router) {
	// Outside secure mode, any host may delete any mapping.
	m := mapping(igd.UDP, portA, r.AddrA, 30080, "A", time.Hour)
	mustAdd(t, r.A, m)
	mustDelete(t, r.B, m.Key())
	wantGone(t, r, m.Key())
}

func testDeleteMissing(t *testing.T, r Router) {
	// The UPnP specification says 714 NoSuchEntryInArray; miniupnpd 2.3.1
	// answers success, and igd.Client promises an idempotent delete.
	for _, proto := range []igd.Protocol{igd.TCP, igd.UDP} {
		if err := r.A.DeletePortMapping(ctx(t), proto, portB); err != nil {
			t.Errorf("DeletePortMapping(%s/%d) of a missing mapping: %v, want success", proto, portB, err)
		}
	}
	// Twice in a row, after a real mapping.
	m := mapping(igd.TCP, portA, r.AddrA, 30080, "twice", time.Hour)
	mustAdd(t, r.A, m)
	mustDelete(t, r.A, m.Key())
	mustDelete(t, r.A, m.Key())
	wantGone(t, r, m.Key())
}

func testGetMissing(t *testing.T, r Router) {
	for _, proto := range []igd.Protocol{igd.TCP, igd.UDP} {
		_, err := r.A.GetPortMapping(ctx(t), proto, portB)
		wantCode(t, fmt.Sprintf("GetPortMapping(%s/%d) of a missing mapping", proto, portB), err, igd.ErrNoSuchEntry, upnp.CodeNoSuchEntry)
	}
	// A mapping on the other protocol does not answer for this one.
	mustAdd(t, r.A, mapping(igd.TCP, portB, r.AddrA, 30080, "tcp only", time.Hour))
	_, err := r.A.GetPortMapping(ctx(t), igd.UDP, portB)
	wantCode(t, "GetPortMapping(UDP) with only TCP mapped", err, igd.ErrNoSuchEntry, upnp.CodeNoSuchEntry)
}

func testLeaseZero(t *testing.T, r Router) {
	// IGD:1 says lease 0 is permanent; IGD:2 says the router stores its
	// maximum instead. miniupnpd 2.3.1 (an IGD:2 daemon) reads a lease of 0
	// back as 604800 s, so a "permanent" mapping still expires after 7 days
	// unless renewed.
	m := mapping(igd.TCP, portA, r.AddrA, 30080, "permanent", 0)
	got := mustAdd(t, r.A, m)
	if got.Lease != 0 {
		t.Errorf("AddPortMapping result lease %s, want 0 (as sent)", got.Lease)
	}
	read := mustGet(t, r.A, m.Key())
	sameMapping(t, "GetPortMapping", read, m)
	wantLease(t, r, "GetPortMapping of lease 0", read.Lease, igd.MaxLease)
}

func testLeaseOverMax(t *testing.T, r Router) {
	m := mapping(igd.UDP, portA, r.AddrA, 30080, "long", 30*24*time.Hour)
	mustAdd(t, r.A, m)
	read := mustGet(t, r.A, m.Key())
	wantLease(t, r, "GetPortMapping of a 30-day lease", read.Lease, igd.MaxLease)
}

func testFiniteLease(t *testing.T, r Router) {
	for _, lease := range []time.Duration{time.Minute, time.Hour} {
		m := mapping(igd.TCP, portA, r.AddrA, 30080, "finite", lease)
		mustAdd(t, r.A, m)
		wantLease(t, r, "GetPortMapping of lease "+lease.String(), mustGet(t, r.A, m.Key()).Lease, lease)
		for _, l := range mustList(t, r.A) {
			if l.Key() == m.Key() {
				wantLease(t, r, "ListPortMappings lease "+lease.String(), l.Lease, lease)
			}
		}
	}
}

func testDescriptions(t *testing.T, r Router) {
	for i, desc := range []string{
		"",
		"ccmkit default/web",
		strings.Repeat("d", igd.MaxDescriptionLen), // the longest kept intact
		"ümlaut ✓ utf-8",
		"a & b <c> \"d\" 'e'",
	} {
		m := mapping(igd.TCP, uint16(portA+i), r.AddrA, 30080, desc, time.Hour)
		mustAdd(t, r.A, m)
		if got := mustGet(t, r.A, m.Key()).Description; got != desc {
			t.Errorf("description %q (%d bytes) read back as %q", desc, len(desc), got)
		}
	}
}

func testInvalidInput(t *testing.T, r Router) {
	good := mapping(igd.TCP, portA, r.AddrA, 30080, "ok", time.Hour)
	for _, tc := range []struct {
		field string
		edit  func(*igd.Mapping)
	}{
		// miniupnpd would install SCTP silently as TCP.
		{"Protocol", func(m *igd.Mapping) { m.Protocol = "SCTP" }},
		{"Protocol", func(m *igd.Mapping) { m.Protocol = "" }},
		// miniupnpd: 716.
		{"ExternalPort", func(m *igd.Mapping) { m.ExternalPort = 0 }},
		{"InternalPort", func(m *igd.Mapping) { m.InternalPort = 0 }},
		// miniupnpd: 501.
		{"InternalClient", func(m *igd.Mapping) { m.InternalClient = netip.Addr{} }},
		{"InternalClient", func(m *igd.Mapping) { m.InternalClient = netip.MustParseAddr("fd00::1") }},
		{"InternalClient", func(m *igd.Mapping) { m.InternalClient = netip.IPv4Unspecified() }},
		// miniupnpd cuts or mangles it.
		{"Description", func(m *igd.Mapping) { m.Description = strings.Repeat("x", igd.MaxDescriptionLen+1) }},
		{"Lease", func(m *igd.Mapping) { m.Lease = -time.Second }},
		{"Lease", func(m *igd.Mapping) { m.Lease = 1500 * time.Millisecond }},
		{"RemoteHost", func(m *igd.Mapping) { m.RemoteHost = netip.MustParseAddr("2001:db8::1") }},
	} {
		m := good
		tc.edit(&m)
		_, err := r.A.AddPortMapping(ctx(t), m)
		var fe *igderr.FieldError
		switch {
		case !errors.Is(err, igd.ErrInvalidMapping):
			t.Errorf("AddPortMapping(%s): error %v, want igd.ErrInvalidMapping", m, err)
		case !errors.As(err, &fe):
			t.Errorf("AddPortMapping(%s): error %v is not a *igderr.FieldError", m, err)
		case fe.Field != tc.field:
			t.Errorf("AddPortMapping(%s): FieldError names %s, want %s", m, fe.Field, tc.field)
		}
	}
	for _, k := range []igd.Key{{Protocol: "SCTP", ExternalPort: portA}, {Protocol: igd.TCP, ExternalPort: 0}} {
		if _, err := r.A.GetPortMapping(ctx(t), k.Protocol, k.ExternalPort); !errors.Is(err, igd.ErrInvalidMapping) {
			t.Errorf("GetPortMapping(%s): error %v, want igd.ErrInvalidMapping", k, err)
		}
		if err := r.A.DeletePortMapping(ctx(t), k.Protocol, k.ExternalPort); !errors.Is(err, igd.ErrInvalidMapping) {
			t.Errorf("DeletePortMapping(%s): error %v, want igd.ErrInvalidMapping", k, err)
		}
	}
	// Nothing reached the router: a router would have stored SCTP as TCP
	// and cut the long description.
	wantTable(t, r.A)
}

func testListMany(t *testing.T, r Router) {
	var want []igd.Mapping
	for i := range 3 {
		want = append(want,
			mustAdd(t, r.A, mapping(igd.TCP, uint16(portA+i), r.AddrA, uint16(30080+i), fmt.Sprintf("A tcp %d", i), time.Hour)),
			mustAdd(t, r.B, mapping(igd.UDP, uint16(portA+i), r.AddrB, uint16(30090+i), fmt.Sprintf("B udp %d", i), time.Hour)),
		)
	}
	wantTable(t, r.A, want...)
	wantTable(t, r.B, want...)
	for _, l := range mustList(t, r.A) {
		wantLease(t, r, "ListPortMappings "+l.Key().String(), l.Lease, time.Hour)
	}
}

func testConcurrentAdds(t *testing.T, r Router) {
	const n = 4
	var want []igd.Mapping
	for i := range n {
		want = append(want,
			mapping(igd.TCP, uint16(portA+2*i), r.AddrA, 30080, "concurrent A", time.Hour),
			mapping(igd.TCP, uint16(portA+2*i+1), r.AddrB, 30080, "concurrent B", time.Hour))
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(want))
	for _, m := range want {
		c := r.A
		if m.InternalClient == r.AddrB {
			c = r.B
		}
		wg.Go(func() {
			if _, err := c.AddPortMapping(ctx(t), m); err != nil {
				errs <- fmt.Errorf("AddPortMapping(%s): %w", m, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	wantTable(t, r.A, want...)
}

func testSecureMapOther(t *testing.T, r Router) {
	// miniupnpd answers 718, not 606, even though the port is free: the
	// caller cannot tell it from a real conflict.
	m := mapping(igd.TCP, portA, r.AddrB, 30080, "A for B", time.Hour)
	_, err := r.A.AddPortMapping(ctx(t), m)
	wantCode(t, "secure mode: A mapping to B", err, igd.ErrConflict, upnp.CodeConflict)
	wantTable(t, r.A)
}

func testSecureOwn(t *testing.T, r Router) {
	a := mapping(igd.TCP, portA, r.AddrA, 30080, "A", time.Hour)
	b := mapping(igd.UDP, portA, r.AddrB, 30080, "B", time.Hour)
	mustAdd(t, r.A, a)
	mustAdd(t, r.B, b)
	upd := mapping(igd.TCP, portA, r.AddrA, 30081, "A again", 2*time.Hour)
	mustAdd(t, r.A, upd)
	wantTable(t, r.B, upd, b)
	mustDelete(t, r.A, a.Key())
	mustDelete(t, r.B, b.Key())
	wantTable(t, r.A)
}

func testSecureDeleteOther(t *testing.T, r Router) {
	a := mapping(igd.TCP, portA, r.AddrA, 30080, "A", time.Hour)
	mustAdd(t, r.A, a)
	err := r.B.DeletePortMapping(ctx(t), a.Protocol, a.ExternalPort)
	wantCode(t, "secure mode: B deleting A's mapping", err, igd.ErrNotAuthorized, upnp.CodeNotAuthorized)
	// Still there, and still readable by B.
	sameMapping(t, "GetPortMapping from B", mustGet(t, r.B, a.Key()), a)
	// Deleting a missing mapping is still fine.
	if err := r.B.DeletePortMapping(ctx(t), igd.TCP, portC); err != nil {
		t.Errorf("secure mode: DeletePortMapping of a missing mapping: %v", err)
	}
}

func testSecureConflict(t *testing.T, r Router) {
	a := mapping(igd.TCP, portA, r.AddrA, 30080, "A", time.Hour)
	mustAdd(t, r.A, a)
	_, err := r.B.AddPortMapping(ctx(t), mapping(igd.TCP, portA, r.AddrB, 30080, "B", time.Hour))
	wantCode(t, "secure mode: B taking A's key", err, igd.ErrConflict, upnp.CodeConflict)
	wantTable(t, r.A, a)
}

func testReboot(t *testing.T, r Router) {
	a := mapping(igd.TCP, portA, r.AddrA, 30080, "A", time.Hour)
	b := mapping(igd.UDP, portB, r.AddrB, 30081, "B", 0)
	mustAdd(t, r.A, a)
	mustAdd(t, r.B, b)
	wantTable(t, r.A, a, b)
	r.Reboot(t)
	wantTable(t, r.A)
	wantGone(t, r, a.Key())
	wantGone(t, r, b.Key())
	// The router works after the reboot.
	mustAdd(t, r.A, a)
	wantTable(t, r.B, a)
}

// Leases run out, and re-adding a mapping restarts its lease. On a
// controlled clock (Router.Step) the suite checks the exact second. On a real
// router, which removes expired mappings on its own timer, it checks that a
// mapping is still there half-way through its lease with the time left
// shrinking, gone within leaseSlack after the lease ends, and that a renewed
// mapping outlives the lease it was first given. miniupnpd honours leases of
// a few seconds, so this takes about ten seconds of real time there.
func testLeaseExpiry(t *testing.T, r Router) {
	const lease = 6 * time.Second
	short := mapping(igd.TCP, portA, r.AddrA, 30080, "short", lease)
	renewed := mapping(igd.TCP, portB, r.AddrA, 30080, "renewed", lease)
	long := mapping(igd.TCP, portC, r.AddrA, 30080, "long", time.Hour)
	perm := mapping(igd.UDP, portA, r.AddrA, 30080, "permanent", 0)
	clock := newSuiteClock(r)
	for _, m := range []igd.Mapping{short, renewed, long, perm} {
		mustAdd(t, r.A, m)
	}

	// Half-way: still there, with half the lease left. A real router counts
	// in whole seconds from when it stored the add, a little after the
	// suite's clock started: it may say a second more.
	clock.advanceTo(lease / 2)
	got := mustGet(t, r.A, short.Key()).Lease
	most := lease / 2
	if r.Step == nil {
		most += time.Second
	}
	if r.Step != nil && got != lease/2 || got <= 0 || got > most {
		t.Errorf("GetPortMapping half-way through a %s lease: %s left, want %s (at most %s)", lease, got, lease/2, most)
	}
	// Renewing (re-adding) restarts the lease: renewed now ends at 1.5 x lease.
	mustAdd(t, r.A, renewed)

	clock.advanceTo(lease)
	clock.waitGone(t, r, short.Key(), lease+leaseSlack)
	sameMapping(t, "renewed mapping after its first lease ended", mustGet(t, r.A, renewed.Key()), renewed)
	wantTable(t, r.A, renewed, long, perm)

	clock.advanceTo(lease + lease/2)
	clock.waitGone(t, r, renewed.Key(), lease+lease/2+leaseSlack)
	wantTable(t, r.A, long, perm)

	if r.Step == nil {
		return // a week of real time is too long to wait
	}
	// A "permanent" mapping expires after MaxLease, like on miniupnpd.
	r.Step(igd.MaxLease)
	wantTable(t, r.A)
}

// suiteClock is the time a case has let pass since it started: stepped on a
// controlled clock, slept on real time.
type suiteClock struct {
	step    func(time.Duration) // nil on real time
	start   time.Time           // real time only
	elapsed time.Duration       // controlled clock only
}

func newSuiteClock(r Router) *suiteClock { return &suiteClock{step: r.Step, start: time.Now()} }

// advanceTo lets time pass until d after the clock was made.
func (c *suiteClock) advanceTo(d time.Duration) {
	if c.step != nil {
		if d > c.elapsed {
			c.step(d - c.elapsed)
			c.elapsed = d
		}
		return
	}
	time.Sleep(time.Until(c.start.Add(d)))
}

// waitGone checks that k has left the table: at once on a controlled clock,
// by deadline (counted from the clock's start) on real time.
func (c *suiteClock) waitGone(t *testing.T, r Router, k igd.Key, deadline time.Duration) {
	t.Helper()
	if c.step == nil {
		for {
			_, err := r.A.GetPortMapping(ctx(t), k.Protocol, k.ExternalPort)
			if errors.Is(err, igd.ErrNoSuchEntry) || time.Since(c.start) > deadline {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	wantGone(t, r, k)
}

// Fake only: routers that only take permanent leases answer 725 (IGD:1);
// the client falls back to lease 0, and such routers keep 0 as 0.
func testOnlyPermanent(t *testing.T, r Router) {
	m := mapping(igd.TCP, portA, r.AddrA, 30080, "finite asked", time.Hour)
	got := mustAdd(t, r.A, m)
	if got.Lease != 0 {
		t.Errorf("AddPortMapping on a permanent-only router: lease %s, want 0", got.Lease)
	}
	read := mustGet(t, r.A, m.Key())
	sameMapping(t, "GetPortMapping", read, m)
	if read.Lease != 0 {
		t.Errorf("GetPortMapping on a permanent-only router: lease %s, want 0", read.Lease)
	}
	r.Step(30 * 24 * time.Hour)
	sameMapping(t, "GetPortMapping after 30 days", mustGet(t, r.A, m.Key()), m)
}

// Fake only: a full table answers 728 to a new key; updating an existing key
// still works.
func testCapacity(t *testing.T, r Router) {
	a := mapping(igd.TCP, portA, r.AddrA, 30080, "1", time.Hour)
	b := mapping(igd.UDP, portA, r.AddrA, 30080, "2", time.Hour)
	mustAdd(t, r.A, a)
	mustAdd(t, r.A, b)
	c := mapping(igd.TCP, portB, r.AddrA, 30080, "3", time.Hour)
	_, err := r.A.AddPortMapping(ctx(t), c)
	wantCode(t, "AddPortMapping to a full table", err, igd.ErrNoPortMapsAvailable, upnp.CodeNoPortMapsAvailable)
	a.InternalPort = 30081 // replaced, not only renewed: see testReAddSameInternalPort
	a.Description = "1 replaced"
	mustAdd(t, r.A, a)
	wantTable(t, r.A, a, b)
	mustDelete(t, r.A, b.Key())
	mustAdd(t, r.A, c)
	wantTable(t, r.A, a, c)
}

// Fake only: a router behind carrier-grade NAT reports its non-public WAN
// address; the client returns it as is and the router still maps ports.
func testNonPublicExternalIP(t *testing.T, r Router) {
	got, err := r.A.ExternalIP(ctx(t))
	if err != nil {
		t.Fatalf("ExternalIP: %v", err)
	}
	if got != r.ExternalIP {
		t.Errorf("ExternalIP = %s, want %s", got, r.ExternalIP)
	}
	if igd.IsPublic(got) {
		t.Errorf("igd.IsPublic(%s) = true, want false", got)
	}
	m := mapping(igd.TCP, portA, r.AddrA, 30080, "behind cgnat", time.Hour)
	mustAdd(t, r.A, m)
	wantTable(t, r.A, m)
}
