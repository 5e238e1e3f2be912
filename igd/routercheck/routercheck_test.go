package routercheck_test

import (
	"context"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/pcp"
	"github.com/ccmkit/ccmkit/igd/routercheck"
	"github.com/ccmkit/ccmkit/internal/upnp"
)

var lanHost = netip.MustParseAddr("192.0.2.99")

// refuseLowPorts makes the router answer 606 to adds below 1024, as
// miniupnpd's default permission rules do.
var refuseLowPorts = fake.RouterHooks{AddPortMapping: func(ctx context.Context, _ netip.Addr, m igd.Mapping, next fake.AddFunc) (igd.Mapping, error) {
	if m.ExternalPort < 1024 {
		return igd.Mapping{}, &igd.UPnPError{Action: "AddPortMapping", Code: upnp.CodeNotAuthorized, Description: "Action not authorized"}
	}
	return next(ctx, m)
}}

// refuseAll makes the router answer 606 to every add, as one whose
// permission rules leave this host out does.
var refuseAll = fake.RouterHooks{AddPortMapping: func(context.Context, netip.Addr, igd.Mapping, fake.AddFunc) (igd.Mapping, error) {
	return igd.Mapping{}, &igd.UPnPError{Action: "AddPortMapping", Code: upnp.CodeNotAuthorized, Description: "Action not authorized"}
}}

// statuses is each finding's status by check.
func statuses(r routercheck.Report) map[string]routercheck.Status {
	out := map[string]routercheck.Status{}
	for _, f := range r.Findings {
		out[f.Check] = f.Status
	}
	return out
}

func TestRunJudgesTheRouterAgainstTheConfig(t *testing.T) {
	const (
		ok   = routercheck.OK
		warn = routercheck.Warn
		fail = routercheck.Fail
		skip = routercheck.Skipped
	)
	all := func(mapSelf, lease, secure, low routercheck.Status) map[string]routercheck.Status {
		return map[string]routercheck.Status{
			routercheck.CheckRouter: ok, routercheck.CheckService: ok, routercheck.CheckExternalIP: ok,
			routercheck.CheckListing: ok, routercheck.CheckMapSelf: mapSelf, routercheck.CheckLease: lease,
			routercheck.CheckSecureMode: secure, routercheck.CheckLowPorts: low,
			routercheck.CheckIPv6: ok, routercheck.CheckPCP: ok, // no PCP server on loopback
		}
	}
	withPCP := func(m map[string]routercheck.Status, st routercheck.Status) map[string]routercheck.Status {
		m[routercheck.CheckPCP] = st
		return m
	}
	for _, tc := range []struct {
		name    string
		router  fake.RouterConfig
		svc     fake.UPnPService
		hooks   *fake.RouterHooks
		opts    routercheck.Options
		pcp     *fake.PCPConfig // a PCP server on the router, this test's client its caller
		want    map[string]routercheck.Status
		problem string
	}{
		{name: "open router", want: all(ok, ok, ok, ok)},
		{name: "IGD:1", svc: fake.WANIPConnection1, want: all(ok, ok, ok, ok)},
		{name: "refuses ports below 1024", hooks: &refuseLowPorts, want: all(ok, ok, ok, warn)},
		{name: "secure mode, not configured", router: fake.RouterConfig{SecureMode: true},
			want: all(ok, ok, fail, ok), problem: routercheck.CheckSecureMode},
		{name: "secure mode, configured", router: fake.RouterConfig{SecureMode: true},
			opts: routercheck.Options{SecureMode: true}, want: all(ok, ok, ok, ok)},
		{name: "permanent leases only", router: fake.RouterConfig{OnlyPermanentLeases: true}, want: all(ok, warn, ok, ok)},
		{name: "permanent leases configured", router: fake.RouterConfig{OnlyPermanentLeases: true},
			opts: routercheck.Options{PermanentLease: true}, want: all(ok, skip, ok, ok)},
		{name: "refuses this host", hooks: &refuseAll,
			want: all(fail, skip, skip, skip), problem: routercheck.CheckMapSelf},
		{name: "PCP required, no PCP server", opts: routercheck.Options{RequirePCP: true},
			want: withPCP(all(ok, ok, ok, ok), fail), problem: routercheck.CheckPCP},
		{name: "PCP required, THIRD_PARTY refused", pcp: &fake.PCPConfig{}, opts: routercheck.Options{RequirePCP: true},
			want: withPCP(all(ok, ok, ok, ok), warn)},
		{name: "PCP required, THIRD_PARTY refused, secure mode", router: fake.RouterConfig{SecureMode: true}, pcp: &fake.PCPConfig{},
			opts: routercheck.Options{RequirePCP: true, SecureMode: true}, want: all(ok, ok, ok, ok)},
		{name: "PCP required, THIRD_PARTY allowed", pcp: &fake.PCPConfig{AllowThirdParty: true},
			opts: routercheck.Options{RequirePCP: true}, want: all(ok, ok, ok, ok)},
		{name: "THIRD_PARTY refused, PCP not required", pcp: &fake.PCPConfig{}, want: all(ok, ok, ok, ok)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := fake.NewRouter(tc.router)
			if tc.hooks != nil {
				r.Intercept(*tc.hooks)
			}
			srv := fake.NewServer(r, fake.ServerOptions{Service: tc.svc})
			t.Cleanup(srv.Close)
			c, err := igd.NewClient(igd.Config{RootDescURL: srv.RootDescURL})
			if err != nil {
				t.Fatal(err)
			}
			tc.opts.OtherHost = lanHost
			if tc.pcp != nil {
				tc.pcp.Router = r
				s, err := fake.NewPCPServer(*tc.pcp)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { s.Close() })
				if tc.opts.PCP, err = pcp.NewClient(pcp.Config{Server: s.Addr()}); err != nil {
					t.Fatal(err)
				}
			}
			rep, err := routercheck.Run(t.Context(), c, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, statuses(rep)); d != "" {
				t.Errorf("statuses (-want +got):\n%s\nfindings: %+v", d, rep.Findings)
			}
			var problem string
			if p := rep.Problem(); p != nil {
				problem = p.Check
				if p.Fix == "" {
					t.Errorf("problem %s says nothing to do", p.Check)
				}
			}
			if problem != tc.problem {
				t.Errorf("Problem() = %q, want %q", problem, tc.problem)
			}
			// Nothing left behind, nothing else touched.
			if ms := r.Mappings(); len(ms) != 0 {
				t.Errorf("router holds %v after the check, want nothing", ms)
			}
		})
	}
}

// The check never touches a mapping it did not write: another host's
// mappings at every probe key stay as they were, and the check says it found
// no free key.
func TestRunLeavesOthersMappingsAlone(t *testing.T) {
	r := fake.NewRouter(fake.RouterConfig{})
	srv := fake.NewServer(r, fake.ServerOptions{})
	t.Cleanup(srv.Close)
	ports := igd.PortRange{First: 61000, Last: 61003}
	for p := ports.First; p <= ports.Last; p++ {
		r.Put(igd.Mapping{Protocol: igd.TCP, ExternalPort: p, InternalClient: lanHost, InternalPort: p, Description: "console", Enabled: true})
	}
	before := r.Mappings()
	c, err := igd.NewClient(igd.Config{RootDescURL: srv.RootDescURL})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := routercheck.Run(t.Context(), c, routercheck.Options{OtherHost: lanHost, Ports: ports})
	if err != nil {
		t.Fatal(err)
	}
	if p := rep.Problem(); p == nil || p.Check != routercheck.CheckMapSelf {
		t.Errorf("Problem() = %+v, want %s (no free key)", p, routercheck.CheckMapSelf)
	}
	if d := cmp.Diff(before, r.Mappings(), cmpopts.EquateComparable(netip.Addr{})); d != "" {
		t.Errorf("router table (-before +after):\n%s", d)
	}
}

func TestRunRefusesBadOptions(t *testing.T) {
	c, err := igd.NewClient(igd.Config{RootDescURL: "http://192.0.2.1:5000/rootDesc.xml"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		o     routercheck.Options
		field string
	}{
		{routercheck.Options{Ports: igd.PortRange{First: 80, Last: 90}}, "Options.Ports 80-90"},
		{routercheck.Options{Ports: igd.PortRange{First: 2000, Last: 1999}}, "Options.Ports 2000-1999"},
		{routercheck.Options{Lease: time.Millisecond}, "Options.Lease 1ms"},
		{routercheck.Options{ServicePorts: []igd.Key{{Protocol: igd.TCP, ExternalPort: 80}, {Protocol: igd.UDP}}}, "Options.ServicePorts[1] UDP/0"},
		{routercheck.Options{ServicePorts: []igd.Key{{Protocol: "SCTP", ExternalPort: 80}}}, "Options.ServicePorts[0] SCTP/80"},
	} {
		if _, err := routercheck.Run(t.Context(), c, tc.o); err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("Run(%+v) = %v, want an error naming %s", tc.o, err, tc.field)
		}
	}
}

// The router stores the probe but its answer is lost: the check removes
// the probe it finds there, and reports that it could not tell.
func TestRunRemovesAProbeWhoseAnswerWasLost(t *testing.T) {
	r := fake.NewRouter(fake.RouterConfig{})
	lost := 0
	r.Intercept(fake.RouterHooks{AddPortMapping: func(ctx context.Context, from netip.Addr, m igd.Mapping, next fake.AddFunc) (igd.Mapping, error) {
		stored, err := next(ctx, m)
		if err != nil || m.ExternalPort >= 1024 {
			return stored, err
		}
		lost++
		<-ctx.Done() // stored, and no answer until the client gives up
		return igd.Mapping{}, ctx.Err()
	}})
	srv := fake.NewServer(r, fake.ServerOptions{})
	t.Cleanup(srv.Close)
	// The call timeout only decides when the client stops waiting for an
	// answer that never comes.
	c, err := igd.NewClient(igd.Config{RootDescURL: srv.RootDescURL, CallTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := routercheck.Run(t.Context(), c, routercheck.Options{OtherHost: lanHost})
	if err != nil {
		t.Fatal(err)
	}
	if lost != 1 {
		t.Fatalf("%d answers lost, want the low-port probe's", lost)
	}
	if got := statuses(rep)[routercheck.CheckLowPorts]; got != routercheck.Warn {
		t.Errorf("%s = %s, want %s (could not tell)", routercheck.CheckLowPorts, got, routercheck.Warn)
	}
	if ms := r.Mappings(); len(ms) != 0 {
		t.Errorf("router holds %v after the check, want the probe removed", ms)
	}
}

// Each port given is probed at its own key and says what the router will
// do with it: allowed, refused by its rules (a failure naming the rule to
// add), or held by another host (left alone, a warning naming the holder).
func TestRunProbesTheServicePorts(t *testing.T) {
	r := fake.NewRouter(fake.RouterConfig{})
	r.Intercept(refuseLowPorts)
	held := igd.Mapping{Protocol: igd.TCP, ExternalPort: 8443, InternalClient: lanHost, InternalPort: 8443, Description: "nas", Enabled: true}
	r.Put(held)
	srv := fake.NewServer(r, fake.ServerOptions{})
	t.Cleanup(srv.Close)
	c, err := igd.NewClient(igd.Config{RootDescURL: srv.RootDescURL})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := routercheck.Run(t.Context(), c, routercheck.Options{OtherHost: lanHost, ServicePorts: []igd.Key{
		{Protocol: igd.TCP, ExternalPort: 8080}, {Protocol: igd.TCP, ExternalPort: 443}, {Protocol: igd.TCP, ExternalPort: 8443},
	}})
	if err != nil {
		t.Fatal(err)
	}
	type port struct {
		Status      routercheck.Status
		Detail, Fix string
	}
	got := map[string]port{}
	for _, f := range rep.Findings {
		if f.Check == routercheck.CheckPort {
			got[f.Port.String()] = port{f.Status, f.Detail, f.Fix}
		}
	}
	for k, want := range map[string]struct {
		status      routercheck.Status
		detail, fix string
	}{
		"TCP/8080": {routercheck.OK, "allows", ""},
		"TCP/443":  {routercheck.Fail, "UPnP error 606", "allow 443 0.0.0.0/0 1024-65535"},
		"TCP/8443": {routercheck.Warn, `held by 192.0.2.99:8443 ("nas")`, "free the port"},
	} {
		g := got[k]
		if g.Status != want.status || !strings.Contains(g.Detail, want.detail) || !strings.Contains(g.Fix, want.fix) {
			t.Errorf("%s: %+v, want status %s, detail with %q, fix with %q", k, g, want.status, want.detail, want.fix)
		}
	}
	if st := statuses(rep)[routercheck.CheckLowPorts]; st != routercheck.Skipped {
		t.Errorf("%s: %s, want skipped (port 443 given)", routercheck.CheckLowPorts, st)
	}
	if d := cmp.Diff([]igd.Mapping{held}, r.Mappings(), cmpopts.EquateComparable(netip.Addr{})); d != "" {
		t.Errorf("router table after the check (-want +got):\n%s", d)
	}
}

// newCheck is a UPnP client of a fake router configured by cfg, whose
// calls h intercepts.
func newCheck(t *testing.T, cfg fake.RouterConfig, h fake.RouterHooks) (*fake.Router, *igd.UPnPClient) {
	t.Helper()
	r := fake.NewRouter(cfg)
	r.Intercept(h)
	srv := fake.NewServer(r, fake.ServerOptions{})
	t.Cleanup(srv.Close)
	c, err := igd.NewClient(igd.Config{RootDescURL: srv.RootDescURL})
	if err != nil {
		t.Fatal(err)
	}
	return r, c
}

// A router that stores a shorter description than it was given
// (truncation) still has the probe removed, even with PermanentLease, and
// the check reports no problem: a truncated description is still the
// probe's, not a mapping "taken" by someone else.
func TestRunRemovesItsProbeWhenTheRouterTruncatesItsDescription(t *testing.T) {
	r, c := newCheck(t, fake.RouterConfig{}, fake.RouterHooks{AddPortMapping: func(ctx context.Context, from netip.Addr, m igd.Mapping, next fake.AddFunc) (igd.Mapping, error) {
		if len(m.Description) > 16 {
			m.Description = m.Description[:16]
		}
		return next(ctx, m)
	}})
	rep, err := routercheck.Run(t.Context(), c, routercheck.Options{OtherHost: lanHost, PermanentLease: true})
	if err != nil {
		t.Fatal(err)
	}
	if ms := r.Mappings(); len(ms) != 0 {
		t.Errorf("router holds %v after the check, want no probe left", ms)
	}
	if p := rep.Problem(); p != nil {
		t.Errorf("Problem() = %+v on a router that maps fine", p)
	}
}

// A router that stores the probe's add and answers a UPnP error (501) has
// the probe removed too: the check cleans up after an error answer, not
// only when no answer came.
func TestRunRemovesItsProbeWhenTheRouterStoresItButAnswersAnError(t *testing.T) {
	r, c := newCheck(t, fake.RouterConfig{}, fake.RouterHooks{AddPortMapping: func(ctx context.Context, from netip.Addr, m igd.Mapping, next fake.AddFunc) (igd.Mapping, error) {
		if _, err := next(ctx, m); err != nil {
			return igd.Mapping{}, err
		}
		return igd.Mapping{}, &igd.UPnPError{Action: "AddPortMapping", Code: upnp.CodeActionFailed, Description: "Action Failed"}
	}})
	if _, err := routercheck.Run(t.Context(), c, routercheck.Options{OtherHost: lanHost, PermanentLease: true}); err != nil {
		t.Fatal(err)
	}
	if ms := r.Mappings(); len(ms) != 0 {
		t.Errorf("router holds %v after the check, want no probe left", ms)
	}
}

// Another program on this host takes the probe's key between the check's
// read and its add (the residual window) with a mapping to the same host
// and internal port, described "ccmkit", a prefix of the probe's tag
// ("ccmkit-check <hex>"); the router refuses the probe's add (718
// ConflictInMappingEntry: the probe was not stored). The check leaves
// that mapping alone: a 718 says nothing of the probe's is there, and a
// description that is only a short prefix of the tag would be no proof
// that the mapping is the probe anyway.
func TestRunSparesAMappingAtARefusedProbesKeyWhoseDescriptionIsAPrefixOfTheTag(t *testing.T) {
	var once sync.Once
	var theirs igd.Mapping
	var r *fake.Router
	r, c := newCheck(t, fake.RouterConfig{}, fake.RouterHooks{AddPortMapping: func(ctx context.Context, from netip.Addr, m igd.Mapping, next fake.AddFunc) (igd.Mapping, error) {
		refuse := false
		once.Do(func() {
			if !strings.HasPrefix(m.Description, "ccmkit-check") {
				return
			}
			theirs = m
			theirs.Description = "ccmkit"
			theirs.Lease = 0
			r.Put(theirs)
			refuse = true
		})
		if refuse {
			return igd.Mapping{}, &igd.UPnPError{Action: "AddPortMapping", Code: upnp.CodeConflict, Description: "ConflictInMappingEntry"}
		}
		return next(ctx, m)
	}})
	if _, err := routercheck.Run(t.Context(), c, routercheck.Options{OtherHost: lanHost}); err != nil {
		t.Logf("Run: %v", err)
	}
	if !theirs.InternalClient.IsValid() {
		t.Fatal("no probe add was seen")
	}
	for _, m := range r.Mappings() {
		if m.Key() == theirs.Key() && m.Description == "ccmkit" {
			return
		}
	}
	t.Errorf("the check deleted %s -> %s:%d (%q), a mapping it did not add (its add was refused with 718); router now holds %v",
		theirs.Key(), theirs.InternalClient, theirs.InternalPort, theirs.Description, r.Mappings())
}
