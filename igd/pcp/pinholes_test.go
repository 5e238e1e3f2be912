package pcp_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/ccmkit/ccmkit/fake"
	"github.com/ccmkit/ccmkit/igd"
	"github.com/ccmkit/ccmkit/igd/pcp"
	"github.com/ccmkit/ccmkit/igd/pinhole"
	"github.com/ccmkit/ccmkit/loadbalancer"
)

var (
	nodeGUA     = netip.MustParseAddr("2001:db8:1::11")
	otherSecret = []byte("fedcba9876543210fedcba9876543210")
)

// pinholeServer is a fake PCP server answering over IPv6 loopback; it
// skips the test where the host has no IPv6 loopback.
func pinholeServer(t *testing.T, cfg fake.PCPConfig) *fake.PCPServer {
	t.Helper()
	conn, err := net.ListenPacket("udp6", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	cfg.Conn = conn
	if cfg.Router == nil {
		cfg.Router = fake.NewRouter(fake.RouterConfig{Clock: clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))})
	}
	s, err := fake.NewPCPServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// newPinholes is a Pinholes under secret talking to s, with a client of its
// own (as a controller that restarted has).
func newPinholes(t *testing.T, s *fake.PCPServer, secret []byte) *pcp.Pinholes {
	t.Helper()
	c, err := pcp.NewClient(pcp.Config{Server: s.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	p, err := pcp.NewPinholes(pcp.PinholesConfig{PCP: c, Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func open(s *fake.PCPServer) []pinhole.Pinhole {
	var out []pinhole.Pinhole
	for _, p := range s.Router().Pinholes() {
		out = append(out, p.Pinhole)
	}
	return out
}

var addrEqual = cmp.Comparer(func(a, b netip.Addr) bool { return a == b })

func pctx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// TestPinholesOpenForAnotherHostAndClose: a pinhole to another host's
// address (THIRD_PARTY), on a port below 1024, opens with the lease asked
// and closes; closing it again is nil; another Pinholes with the same
// secret (a restarted or failed-over controller) closes what the first
// opened.
func TestPinholesOpenForAnotherHostAndClose(t *testing.T) {
	s := pinholeServer(t, fake.PCPConfig{AllowThirdParty: true})
	p := newPinholes(t, s, backendSecret)
	ph := pinhole.Pinhole{InternalClient: nodeGUA, InternalPort: 443, Protocol: igd.TCP, Lease: time.Hour}
	if err := p.OpenPinhole(pctx(t), ph); err != nil {
		t.Fatalf("OpenPinhole(%s) = %v", ph, err)
	}
	if diff := cmp.Diff([]pinhole.Pinhole{ph}, open(s), addrEqual); diff != "" {
		t.Errorf("open pinholes (-want +got):\n%s", diff)
	}
	if err := p.ClosePinhole(pctx(t), ph); err != nil {
		t.Fatalf("ClosePinhole = %v", err)
	}
	if got := open(s); len(got) != 0 {
		t.Errorf("open pinholes after ClosePinhole: %v", got)
	}
	if err := p.ClosePinhole(pctx(t), ph); err != nil {
		t.Errorf("ClosePinhole of a closed pinhole = %v, want nil", err)
	}
	if n := len(s.Calls()); n != 4 {
		t.Errorf("open, close and close again made %d requests, want 4 (two to open, one to close)", n)
	}

	if err := p.OpenPinhole(pctx(t), ph); err != nil {
		t.Fatal(err)
	}
	if err := newPinholes(t, s, backendSecret).ClosePinhole(pctx(t), ph); err != nil {
		t.Errorf("ClosePinhole by another Pinholes with the same secret = %v", err)
	}
	if got := open(s); len(got) != 0 {
		t.Errorf("open pinholes after the other ClosePinhole: %v", got)
	}
}

// TestPinholesAnotherSecretCannotClose: a Pinholes under another secret
// (another cluster) is refused (igd.ErrNotAuthorized) and the pinhole
// stays.
func TestPinholesAnotherSecretCannotClose(t *testing.T) {
	s := pinholeServer(t, fake.PCPConfig{AllowThirdParty: true})
	ph := pinhole.Pinhole{InternalClient: nodeGUA, InternalPort: 8443, Protocol: igd.UDP, Lease: time.Hour}
	if err := newPinholes(t, s, backendSecret).OpenPinhole(pctx(t), ph); err != nil {
		t.Fatal(err)
	}
	err := newPinholes(t, s, otherSecret).ClosePinhole(pctx(t), ph)
	if !errors.Is(err, igd.ErrNotAuthorized) {
		t.Errorf("ClosePinhole under another secret = %v, want igd.ErrNotAuthorized", err)
	}
	if diff := cmp.Diff([]pinhole.Pinhole{ph}, open(s), addrEqual); diff != "" {
		t.Errorf("open pinholes (-want +got):\n%s", diff)
	}
}

// TestPinholesRenewedCanBeClosed: on a router that drops a pinhole's
// nonce when a MAP renews it (miniupnpd 2.3.1, as the fake models it;
// DESIGN.md), a pinhole opened and then renewed twice still closes, and
// the internet loses it at once: each OpenPinhole is a delete with the
// pinhole's nonce then a MAP, so the router never renews a pinhole in
// place. Two requests to open or renew, one to close.
func TestPinholesRenewedCanBeClosed(t *testing.T) {
	s := pinholeServer(t, fake.PCPConfig{AllowThirdParty: true})
	p := newPinholes(t, s, backendSecret)
	ph := pinhole.Pinhole{InternalClient: nodeGUA, InternalPort: 8443, Protocol: igd.TCP, Lease: time.Hour}
	for range 3 {
		if err := p.OpenPinhole(pctx(t), ph); err != nil {
			t.Fatal(err)
		}
	}
	if diff := cmp.Diff([]pinhole.Pinhole{ph}, open(s), addrEqual); diff != "" {
		t.Errorf("open pinholes after two renewals (-want +got):\n%s", diff)
	}
	if err := p.ClosePinhole(pctx(t), ph); err != nil {
		t.Errorf("ClosePinhole after two renewals = %v, want nil", err)
	}
	if got := open(s); len(got) != 0 {
		t.Errorf("open pinholes after ClosePinhole: %v", got)
	}
	if n := len(s.Calls()); n != 7 {
		t.Errorf("an open, two renewals and a close made %d requests, want 7 (two each to open or renew, one to close)", n)
	}
}

// TestPinholesThirdPartyRefused: a router that refuses THIRD_PARTY gives
// an error matching igd.ErrThirdPartyRefused, to open and to close.
func TestPinholesThirdPartyRefused(t *testing.T) {
	s := pinholeServer(t, fake.PCPConfig{})
	p := newPinholes(t, s, backendSecret)
	ph := pinhole.Pinhole{InternalClient: nodeGUA, InternalPort: 8443, Protocol: igd.TCP, Lease: time.Hour}
	if err := p.OpenPinhole(pctx(t), ph); !errors.Is(err, igd.ErrThirdPartyRefused) {
		t.Errorf("OpenPinhole = %v, want igd.ErrThirdPartyRefused", err)
	}
	if err := p.ClosePinhole(pctx(t), ph); !errors.Is(err, igd.ErrThirdPartyRefused) {
		t.Errorf("ClosePinhole = %v, want igd.ErrThirdPartyRefused", err)
	}
}

// TestPinholesRefuseATranslatedAnswer: a SUCCESS whose external address
// or port is not the pinhole's own (a router that translates) is an
// error: the internet would not reach the node where the caller says.
func TestPinholesRefuseATranslatedAnswer(t *testing.T) {
	s := pinholeServer(t, fake.PCPConfig{AllowThirdParty: true, OnAnswer: func(_ fake.PCPCall, a []byte) []byte {
		a[24+19]++ // the external port
		return a
	}})
	ph := pinhole.Pinhole{InternalClient: nodeGUA, InternalPort: 8443, Protocol: igd.TCP, Lease: time.Hour}
	if err := newPinholes(t, s, backendSecret).OpenPinhole(pctx(t), ph); err == nil {
		t.Error("OpenPinhole accepted an answer with external port 8444")
	}
}

// TestPinholesValidate: a pinhole no router takes is refused before
// anything is sent, with an error matching pinhole.ErrInvalidPinhole that
// names the field; ClosePinhole ignores the lease.
func TestPinholesValidate(t *testing.T) {
	s := pinholeServer(t, fake.PCPConfig{AllowThirdParty: true})
	p := newPinholes(t, s, backendSecret)
	ok := pinhole.Pinhole{InternalClient: nodeGUA, InternalPort: 8443, Protocol: igd.TCP, Lease: time.Hour}
	for _, tt := range []struct {
		field string
		edit  func(*pinhole.Pinhole)
	}{
		{"InternalClient", func(p *pinhole.Pinhole) { p.InternalClient = netip.MustParseAddr("192.0.2.10") }},
		{"InternalClient", func(p *pinhole.Pinhole) { p.InternalClient = netip.MustParseAddr("fd00:1::10") }},
		{"InternalClient", func(p *pinhole.Pinhole) { p.InternalClient = netip.MustParseAddr("fe80::10") }},
		{"InternalPort", func(p *pinhole.Pinhole) { p.InternalPort = 0 }},
		{"Protocol", func(p *pinhole.Pinhole) { p.Protocol = "SCTP" }},
		{"Lease", func(p *pinhole.Pinhole) { p.Lease = 0 }},
	} {
		ph := ok
		tt.edit(&ph)
		err := p.OpenPinhole(pctx(t), ph)
		if !errors.Is(err, pinhole.ErrInvalidPinhole) || !strings.Contains(err.Error(), "Pinhole."+tt.field) {
			t.Errorf("OpenPinhole(%+v) = %v, want pinhole.ErrInvalidPinhole naming Pinhole.%s", ph, err, tt.field)
		}
		if tt.field == "Lease" {
			continue
		}
		if err := p.ClosePinhole(pctx(t), ph); !errors.Is(err, pinhole.ErrInvalidPinhole) {
			t.Errorf("ClosePinhole(%+v) = %v, want pinhole.ErrInvalidPinhole", ph, err)
		}
	}
	if calls := s.Calls(); len(calls) != 0 {
		t.Errorf("server got %d requests, want none", len(calls))
	}
	ph := ok
	ph.Lease = 0
	if err := p.ClosePinhole(pctx(t), ph); err != nil {
		t.Errorf("ClosePinhole with no lease = %v", err)
	}
}

// TestNewPinholesValidates: a missing client or a short secret is an
// error naming the field.
func TestNewPinholesValidates(t *testing.T) {
	c, err := pcp.NewClient(pcp.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		cfg   pcp.PinholesConfig
		field string
	}{
		{pcp.PinholesConfig{Secret: backendSecret}, "PinholesConfig.PCP"},
		{pcp.PinholesConfig{PCP: c, Secret: backendSecret[:31]}, "PinholesConfig.Secret"},
	} {
		if _, err := pcp.NewPinholes(tt.cfg); err == nil || !strings.Contains(err.Error(), tt.field) {
			t.Errorf("NewPinholes = %v, want an error naming %s", err, tt.field)
		}
	}
}

// Pinholes is the load balancer's PinholeClient, and says it opens
// pinholes for any host: Services are then served on IPv6 through any
// eligible node.
var (
	_ loadbalancer.PinholeClient   = (*pcp.Pinholes)(nil)
	_ loadbalancer.AnyHostPinholes = (*pcp.Pinholes)(nil)
)
