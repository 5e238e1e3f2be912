package pcp_test

import (
	"context"
	"errors"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/component-base/metrics/testutil"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/pcp"
	"github.com/ccmkit/ccmkit/internal/pcpwire"
)

var (
	backendSecret = []byte("0123456789abcdef0123456789abcdef")
	nodeA         = netip.MustParseAddr("192.168.1.20")
	lanHost       = netip.MustParseAddr("192.168.1.99")
	controller    = netip.MustParseAddr("192.168.1.10")
)

// backendEnv is a Backend from controller on a fake router speaking UPnP and
// PCP (THIRD_PARTY allowed).
type backendEnv struct {
	router *fake.Router
	server *fake.PCPServer
	clock  *clocktesting.FakeClock
}

func newBackendEnv(t *testing.T, thirdParty bool) *backendEnv {
	t.Helper()
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	r := fake.NewRouter(fake.RouterConfig{Clock: clk})
	s, err := fake.NewPCPServer(fake.PCPConfig{Router: r, AllowThirdParty: thirdParty})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return &backendEnv{router: r, server: s, clock: clk}
}

func (e *backendEnv) backend(t *testing.T, secret []byte) *pcp.Backend {
	t.Helper()
	return e.backendWith(t, pcp.BackendConfig{Secret: secret})
}

// backendWith completes cfg's UPnP and PCP clients.
func (e *backendEnv) backendWith(t *testing.T, cfg pcp.BackendConfig) *pcp.Backend {
	t.Helper()
	c, err := pcp.NewClient(pcp.Config{Server: e.server.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	cfg.UPnP, cfg.PCP = e.router.Client(controller), c
	b, err := pcp.NewBackend(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestNewBackendRefusesAShortSecret(t *testing.T) {
	e := newBackendEnv(t, true)
	c, _ := pcp.NewClient(pcp.Config{Server: e.server.Addr()})
	_, err := pcp.NewBackend(pcp.BackendConfig{UPnP: e.router.Client(controller), PCP: c, Secret: backendSecret[:31]})
	if err == nil || err.Error() != "pcp: backend: BackendConfig.Secret is 31 bytes, must be at least 32" {
		t.Errorf("NewBackend with a 31-byte secret: %v", err)
	}
}

func TestBackendGuardsItsMappings(t *testing.T) {
	e := newBackendEnv(t, true)
	b := e.backend(t, backendSecret)
	ctx := context.Background()
	want := igd.Mapping{Protocol: igd.TCP, ExternalPort: 8080, InternalClient: nodeA, InternalPort: 30080,
		Description: "ignored by PCP", Lease: time.Hour, Enabled: true}
	got, err := b.AddFor(ctx, "default/web", want)
	if err != nil {
		t.Fatalf("AddFor: %v", err)
	}
	if diff := cmp.Diff(want, got, cmpopts.EquateComparable(netip.Addr{})); diff != "" {
		t.Errorf("AddFor returned (-want +got):\n%s", diff)
	}
	read, err := b.GetPortMapping(ctx, igd.TCP, 8080)
	if err != nil {
		t.Fatalf("GetPortMapping: %v", err)
	}
	if !b.OwnedBy("default/web", read) {
		t.Errorf("OwnedBy(default/web, %+v) = false for the mapping AddFor made", read)
	}
	if b.OwnedBy("default/other", read) || e.backend(t, []byte("another cluster's secret, 32 byt")).OwnedBy("default/web", read) {
		t.Errorf("the mapping reads as owned by another owner, or under another secret")
	}
	// Another cluster's controller (another secret) cannot delete it, and
	// neither can the same cluster for another owner.
	other := e.backend(t, []byte("another cluster's secret, 32 byt"))
	if err := other.DeleteFor(ctx, "default/web", read); !errors.Is(err, igd.ErrNotAuthorized) {
		t.Errorf("DeleteFor under another secret = %v, want igd.ErrNotAuthorized", err)
	}
	if err := b.DeleteFor(ctx, "default/other", read); !errors.Is(err, igd.ErrNotAuthorized) {
		t.Errorf("DeleteFor for another owner = %v, want igd.ErrNotAuthorized", err)
	}
	// A second process of the cluster (same secret) renews and deletes it.
	second := e.backend(t, backendSecret)
	if _, err := second.AddFor(ctx, "default/web", want); err != nil {
		t.Errorf("renewal by a second process: %v", err)
	}
	if err := second.DeleteFor(ctx, "default/web", read); err != nil {
		t.Errorf("DeleteFor by a second process: %v", err)
	}
	if ms := e.router.Mappings(); len(ms) != 0 {
		t.Errorf("table after the delete: %v", ms)
	}
	// Deleting what is gone succeeds (NO_RESOURCES).
	if err := b.DeleteFor(ctx, "default/web", read); err != nil {
		t.Errorf("second DeleteFor: %v", err)
	}
}

// A delete sent late, once our mapping expired and a LAN host took the key,
// leaves the host's mapping: the router matches the internal address, port
// and nonce, not the key.
func TestBackendLateDeleteSparesTheHostThatTookTheKey(t *testing.T) {
	e := newBackendEnv(t, true)
	b := e.backend(t, backendSecret)
	ctx := context.Background()
	if _, err := b.AddFor(ctx, "default/web", igd.Mapping{Protocol: igd.TCP, ExternalPort: 8080, InternalClient: nodeA,
		InternalPort: 30080, Lease: 2 * time.Minute, Enabled: true}); err != nil {
		t.Fatal(err)
	}
	read, err := b.GetPortMapping(ctx, igd.TCP, 8080)
	if err != nil {
		t.Fatal(err)
	}
	e.clock.Step(3 * time.Minute) // expired
	host := igd.Mapping{Protocol: igd.TCP, ExternalPort: 8080, InternalClient: lanHost, InternalPort: 8080,
		Description: "console", Lease: time.Hour, Enabled: true}
	if _, err := e.router.Client(lanHost).AddPortMapping(ctx, host); err != nil {
		t.Fatal(err)
	}
	if err := b.DeleteFor(ctx, "default/web", read); err != nil {
		t.Errorf("late DeleteFor: %v", err)
	}
	got, err := b.GetPortMapping(ctx, igd.TCP, 8080)
	if err != nil {
		t.Fatalf("the host's mapping is gone: %v", err)
	}
	if diff := cmp.Diff(host, got, cmpopts.IgnoreFields(igd.Mapping{}, "Lease"), cmpopts.EquateComparable(netip.Addr{})); diff != "" {
		t.Errorf("the host's mapping (-want +got):\n%s", diff)
	}
}

func TestBackendAddRefusals(t *testing.T) {
	ctx := context.Background()
	m := igd.Mapping{Protocol: igd.TCP, ExternalPort: 8080, InternalClient: nodeA, InternalPort: 30080, Lease: time.Hour, Enabled: true}
	t.Run("held by another host", func(t *testing.T) {
		e := newBackendEnv(t, true)
		host := igd.Mapping{Protocol: igd.TCP, ExternalPort: 8080, InternalClient: lanHost, InternalPort: 8080,
			Description: "console", Lease: time.Hour, Enabled: true}
		if _, err := e.router.Client(lanHost).AddPortMapping(ctx, host); err != nil {
			t.Fatal(err)
		}
		_, err := e.backend(t, backendSecret).AddFor(ctx, "default/web", m)
		if !errors.Is(err, igd.ErrConflict) || !errors.Is(err, pcpwire.ErrCannotProvideExternal) {
			t.Errorf("AddFor on a held key = %v, want igd.ErrConflict and pcpwire.ErrCannotProvideExternal", err)
		}
		if diff := cmp.Diff([]igd.Mapping{host}, e.router.Mappings(), cmpopts.IgnoreFields(igd.Mapping{}, "Lease"), cmpopts.EquateComparable(netip.Addr{})); diff != "" {
			t.Errorf("table (-want +got):\n%s", diff)
		}
	})
	t.Run("third party refused", func(t *testing.T) {
		e := newBackendEnv(t, false)
		_, err := e.backend(t, backendSecret).AddFor(ctx, "default/web", m)
		if !errors.Is(err, pcpwire.ErrUnsupportedOption) {
			t.Errorf("AddFor toward a node with THIRD_PARTY refused = %v, want pcpwire.ErrUnsupportedOption", err)
		}
	})
}

// A mapping made through UPnP (an earlier version of the controller) is
// deleted through UPnP: it carries no nonce.
func TestBackendDeletesAUPnPMappingThroughUPnP(t *testing.T) {
	e := newBackendEnv(t, true)
	b := e.backend(t, backendSecret)
	ctx := context.Background()
	m := igd.Mapping{Protocol: igd.TCP, ExternalPort: 8080, InternalClient: nodeA, InternalPort: 30080,
		Description: "ck1 c/default/web -", Lease: time.Hour, Enabled: true}
	if _, err := b.AddPortMapping(ctx, m); err != nil {
		t.Fatal(err)
	}
	if b.OwnedBy("c/default/web", m) {
		t.Error("OwnedBy is true for a mapping without a nonce")
	}
	if err := b.DeleteFor(ctx, "c/default/web", m); err != nil {
		t.Fatal(err)
	}
	if ms := e.router.Mappings(); len(ms) != 0 {
		t.Errorf("table after the delete: %v", ms)
	}
}

// With FallBack, a router that does not take the PCP request (here: nothing
// listens on its PCP port, or THIRD_PARTY is refused) is written through
// UPnP with the caller's description; without, the error is returned.
func TestBackendFallBack(t *testing.T) {
	ctx := context.Background()
	m := igd.Mapping{Protocol: igd.TCP, ExternalPort: 8080, InternalClient: nodeA, InternalPort: 30080,
		Description: "ck1 c/default/web -", Lease: time.Hour, Enabled: true}
	for _, tc := range []struct {
		name       string
		thirdParty bool
		closed     bool
		fallBack   bool
		wantErr    error
	}{
		{name: "no PCP server, fall back", closed: true, fallBack: true},
		{name: "no PCP server", closed: true, wantErr: syscall.ECONNREFUSED},
		{name: "THIRD_PARTY refused, fall back", fallBack: true},
		{name: "THIRD_PARTY refused", wantErr: pcpwire.ErrUnsupportedOption},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newBackendEnv(t, tc.thirdParty)
			b := e.backendWith(t, pcp.BackendConfig{Secret: backendSecret, FallBack: tc.fallBack})
			if tc.closed {
				e.server.Close()
			}
			_, err := b.AddFor(ctx, "c/default/web", m)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("AddFor = %v, want %v", err, tc.wantErr)
			}
			var want []igd.Mapping
			if tc.fallBack {
				want = []igd.Mapping{m}
			}
			if diff := cmp.Diff(want, e.router.Mappings(), cmpopts.IgnoreFields(igd.Mapping{}, "Lease"), cmpopts.EquateComparable(netip.Addr{}), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("table (-want +got):\n%s", diff)
			}
		})
	}
}

// With FallBack, a mapping PCP made is still deleted when the router no
// longer takes a PCP request (nothing listens on its PCP port, or it now
// refuses THIRD_PARTY): through UPnP, on the caller's read, as AddFor then
// writes. Without it the delete fails until the mapping's lease ends: a
// Service is not deleted, nor moved off a node that went down, for up to a
// lease (a day with permanent leases). Without FallBack the error is
// returned.
func TestBackendDeleteFallBack(t *testing.T) {
	ctx := context.Background()
	m := igd.Mapping{Protocol: igd.TCP, ExternalPort: 8080, InternalClient: nodeA, InternalPort: 30080,
		Lease: time.Hour, Enabled: true}
	for _, tc := range []struct {
		name     string
		fallBack bool
		wantErr  error
	}{
		{name: "no PCP server, fall back", fallBack: true},
		{name: "no PCP server", wantErr: syscall.ECONNREFUSED},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newBackendEnv(t, true)
			b := e.backendWith(t, pcp.BackendConfig{Secret: backendSecret, FallBack: tc.fallBack})
			if _, err := b.AddFor(ctx, "c/default/web", m); err != nil {
				t.Fatal(err)
			}
			read, err := b.GetPortMapping(ctx, igd.TCP, 8080)
			if err != nil || !b.OwnedBy("c/default/web", read) {
				t.Fatalf("read %+v, %v: want the mapping AddFor made", read, err)
			}
			e.server.Close()
			err = b.DeleteFor(ctx, "c/default/web", read)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("DeleteFor = %v, want %v", err, tc.wantErr)
			}
			if gone := len(e.router.Mappings()) == 0; gone != (tc.wantErr == nil) {
				t.Errorf("table after DeleteFor: %v", e.router.Mappings())
			}
		})
	}
}

// PCP requests are counted in igd's request metrics under request "MAP",
// a refusal under its result code's name.
func TestRequestMetrics(t *testing.T) {
	igd.RegisterMetrics()
	errorsByCode := func() map[string]float64 {
		t.Helper()
		got, err := testutil.GetCounterValuesFromGatherer(legacyregistry.DefaultGatherer,
			"cloudprovider_ccmkit_api_request_errors", map[string]string{"request": "MAP"}, "code")
		if err != nil {
			return nil // no error counted yet
		}
		return got
	}
	requests := func() uint64 {
		t.Helper()
		h, err := testutil.GetHistogramVecFromGatherer(legacyregistry.DefaultGatherer,
			"cloudprovider_ccmkit_api_request_duration_seconds", map[string]string{"request": "MAP"})
		if err != nil {
			return 0 // no sample yet
		}
		var n uint64
		for _, s := range h {
			n += s.GetSampleCount()
		}
		return n
	}
	e := newBackendEnv(t, true)
	b := e.backend(t, backendSecret)
	ctx := context.Background()
	m := igd.Mapping{Protocol: igd.TCP, ExternalPort: 8080, InternalClient: nodeA, InternalPort: 30080, Lease: time.Hour, Enabled: true}
	n0, refused0 := requests(), errorsByCode()["NOT_AUTHORIZED"]
	if _, err := b.AddFor(ctx, "default/web", m); err != nil {
		t.Fatal(err)
	}
	if err := b.DeleteFor(ctx, "default/other", igd.Mapping{Protocol: igd.TCP, ExternalPort: 8080, InternalClient: nodeA, InternalPort: 30080, Description: "PCP MAP 0"}); !errors.Is(err, igd.ErrNotAuthorized) {
		t.Fatalf("DeleteFor for another owner: %v", err)
	}
	if n := requests() - n0; n != 2 {
		t.Errorf("%d MAP requests counted, want 2", n)
	}
	if n := errorsByCode()["NOT_AUTHORIZED"] - refused0; n != 1 {
		t.Errorf("%v NOT_AUTHORIZED errors counted, want 1", n)
	}
}

// Mapped tells whether the router holds a mapping to an internal address
// and port without changing it, through PCP alone: true while the mapping
// is there (kept as it was), false once the router lost it (a reboot).
func TestBackendMappedAsksWithoutChangingTheMapping(t *testing.T) {
	e := newBackendEnv(t, true)
	b := withoutUPnP(t, e, backendSecret)
	ctx := context.Background()
	m := igd.Mapping{Protocol: igd.TCP, ExternalPort: 8080, InternalClient: nodeA, InternalPort: 30080, Lease: time.Hour, Enabled: true}
	if _, err := b.AddFor(ctx, "default/web", m); err != nil {
		t.Fatal(err)
	}
	before := e.router.Mappings()
	for i := range 2 {
		if got, err := b.Mapped(ctx, igd.TCP, nodeA, 30080); err != nil || !got {
			t.Errorf("Mapped %d while the mapping is there = %t, %v; want true", i, got, err)
		}
	}
	if diff := cmp.Diff(before, e.router.Mappings(), cmpopts.EquateComparable(netip.Addr{})); diff != "" {
		t.Errorf("table changed by Mapped (-before +after):\n%s", diff)
	}
	if got, err := b.Mapped(ctx, igd.UDP, nodeA, 30080); err != nil || got {
		t.Errorf("Mapped of another protocol = %t, %v; want false", got, err)
	}
	e.server.Reboot()
	if got, err := b.Mapped(ctx, igd.TCP, nodeA, 30080); err != nil || got {
		t.Errorf("Mapped after the router rebooted = %t, %v; want false", got, err)
	}
}

// withoutUPnP is a Backend on e's PCP server that never reads.
func withoutUPnP(t *testing.T, e *backendEnv, secret []byte) *pcp.Backend {
	t.Helper()
	c, err := pcp.NewClient(pcp.Config{Server: e.server.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	b, err := pcp.NewBackend(pcp.BackendConfig{PCP: c, Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// EpochLost asks the server's epoch and compares it with the last answer to
// the client's own requests: nothing to compare at first, the same epoch
// while the server runs, and a restart once the epoch went back (a reboot).
func TestClientEpochLostAsksTheServer(t *testing.T) {
	e := newBackendEnv(t, true)
	ctx := context.Background()
	c, err := pcp.NewClient(pcp.Config{Server: e.server.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	e.clock.Step(100 * time.Second) // the router has been up 100 s
	for _, step := range []struct {
		what string
		do   func()
		want bool
	}{
		{"first, nothing heard before", func() {}, false},
		{"again, the server running", func() {}, false},
		{"after a MAP", func() {
			if _, err := (*pcpwire.Client)(c).Map(ctx, pcpwire.MapRequest{Protocol: igd.TCP, InternalAddr: nodeA, InternalPort: 30080, ExternalPort: 8080, Lifetime: time.Hour}); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"after a reboot", e.server.Reboot, true},
		{"again after the reboot", func() {}, false},
	} {
		step.do()
		if got, err := c.EpochLost(ctx); err != nil || got != step.want {
			t.Errorf("EpochLost %s = %t, %v; want %t", step.what, got, err, step.want)
		}
	}
}
