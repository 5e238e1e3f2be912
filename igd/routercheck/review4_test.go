package routercheck_test

import (
	"context"
	"net/netip"
	"testing"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/routercheck"
)

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

// review4: a router that stores a shorter description than it was given
// (truncation) makes every probe look "taken" and left alone: with
// PermanentLease the probe stays on the router forever, and the check
// reports that this host cannot map (a false Fail).
func TestReview4TruncatedDescriptionLeavesPermanentProbe(t *testing.T) {
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

// review4: a router that stores the add and answers a UPnP error (501) keeps
// the probe: the error path only cleans up when no UPnP answer came.
func TestReview4ErrorAnswerButStoredLeavesProbe(t *testing.T) {
	r, c := newCheck(t, fake.RouterConfig{}, fake.RouterHooks{AddPortMapping: func(ctx context.Context, from netip.Addr, m igd.Mapping, next fake.AddFunc) (igd.Mapping, error) {
		if _, err := next(ctx, m); err != nil {
			return igd.Mapping{}, err
		}
		return igd.Mapping{}, &igd.UPnPError{Action: "AddPortMapping", Code: igd.CodeActionFailed, Description: "Action Failed"}
	}})
	if _, err := routercheck.Run(t.Context(), c, routercheck.Options{OtherHost: lanHost, PermanentLease: true}); err != nil {
		t.Fatal(err)
	}
	if ms := r.Mappings(); len(ms) != 0 {
		t.Errorf("router holds %v after the check, want no probe left", ms)
	}
}
